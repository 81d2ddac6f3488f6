"""Every image trainstack pins, with where the pin comes from and whether it was checked.

Images drift (a tag moves, a family gets a new member), so they are pinned here, in one
reviewed place, rather than defaulted silently inside the components that use them.

| pin                      | used by                                  | verified |
|--------------------------|------------------------------------------|----------|
| `VERTEX_TRAINING_IMAGES` | VertexTrainingJob (containerSpec image by trainer module: the framework's own CUDA image from Docker Hub, pulled through the stack's Artifact Registry mirror, the package installed at start) | torch tag and digest: public code; TF: tag only (digest unverified); Python/CUDA: public Dockerfiles and READMEs |
| `DOCKER_HUB_MIRROR`      | ImageMirror (the Artifact Registry remote repository that fronts Docker Hub) | yes (stored page) |
| `PYTORCH_GPU_IMAGES`     | checks of images you name (Google's prebuilt PyTorch training images) | yes (stored page) |
| `TF_GPU_IMAGES`          | checks of images you name (Google's prebuilt TensorFlow training images) | yes (stored page) |
| `VERTEX_IMAGE_END_OF_AVAILABILITY` | `trainstack plan`, VertexTrainingJob (a default past its date fails, a named one warns) | yes (stored page) |
| `REDUCTION_SERVER_IMAGES`| VertexTrainingJob (worker pool 2)        | fact sheet 4 |
| `KUBERNETES_IMAGES`      | KubernetesTrainingJob (GKE pods): the Vertex images, torch by the same digest (`kubernetes_image`) | as `VERTEX_TRAINING_IMAGES` |
| `DLVM_IMAGE`             | A100Cluster, backend gce (boot disk)     | no       |
| `FABRIC_PRE_INSTALL_IMAGE`, `FABRIC_LOG_MARTIANS_IMAGE` | A100Cluster, backend gke (fabric installer init containers, as CTK names them) | no (tag only: `FABRIC_HELPER_IMAGES_SOURCE`) |
| `catalog.tpu_gke.JAX_TPU_IMAGE` | TpuGkeSlices (your code's pods without an image of yours) | tag only (digest unverified: `JAX_TPU_IMAGE_SOURCE`) |

Vertex images. Google's prebuilt GPU training images all reached their end of availability
in 2026 (pytorch-gpu.2-4 on 2026-07-24, tf-gpu.2-17 on 2026-07-11: `PREBUILT_IMAGES_DOC`),
and no Google source found lists a newer GPU training image (searched 2026-11-26: the
prebuilt-containers page, the supported-frameworks list, the Deep Learning Containers
support-policy page, which only points to a "Choose a container image" list that is not in
the stored corpora, and Google's sample repositories). So the bundled trainers run on Vertex
the way your own code in your own image does: a custom container (`containerSpec`) whose
command is the pod setup script (`trainstack.components._pod_setup`), which installs the trainer
package into the image's `python3` at start. The images are the frameworks' own official
CUDA images on Docker Hub (`DOCKER_HUB_SOURCE`); Docker Hub publishes no end of
availability for them. Vertex does not pull them from Docker Hub itself: Docker Hub allows an
anonymous client 10 pulls per hour per IPv4 address and Vertex's containerSpec has no
registry credential, so the stack creates an Artifact Registry remote repository with Docker
Hub upstream (`DOCKER_HUB_MIRROR`, `trainstack.components.image_mirror`) and the job pulls the image
through it, by digest where the digest is known (`VertexTrainingImage.digest`), so a moved
tag cannot change what runs. The local fidelity test (tests/fidelity/test_vertex.py) runs
this path with Python 3.11 (the shared venv's; the torch image ships Python 3.12, the TF
image 3.11), torch 2.13 (the torch image's) and TensorFlow 2.20 instead of the TF image's
2.17 (what this machine has).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from typing import Final

from trainstack.components.catalog.sources import FACT_SHEET
from trainstack.trainers.common.contract import TF_MODULE, TORCH_MODULE, Framework

# --------------------------------------------------------------------------------------
# Vertex AI prebuilt training images (all past their end of availability)
# --------------------------------------------------------------------------------------

PREBUILT_IMAGES_DOC: Final = (
    "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers (stored copy "
    "id 70313542528; facts-13 section 2: URIs, Python 3.10, 'PyTorch 2.4.x (latest patch) "
    "... cloudml-hypertune', 'tensorflow 2.17.x ... cloudml-hypertune', and 'Using image "
    "names without the latest tag isn't supported')"
)
PREBUILT_IMAGES_VERIFIED: Final = True
"""The URIs and dates below are the stored page's. Every GPU row there is past its end of
availability by 2026-07-24, so none of these is a default any more."""
PREBUILT_IMAGES_SOURCE: Final = (
    f"{PREBUILT_IMAGES_DOC}: PyTorch table rows 2.4/2.3/2.2/2.1 GPU (Python 3.10 only), "
    "TensorFlow table rows 2.17/2.16/2.15 GPU"
)
PYTORCH_GPU_IMAGES: Final[dict[str, str]] = {
    "2.4": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
    "2.3": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-3.py310:latest",
    "2.2": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py310:latest",
    "2.1": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1.py310:latest",
}
"""Google's prebuilt PyTorch GPU training images, by version: the page lists each only
with Python 3.10 (`.py310`), so a `.py311` URI names no image Google serves."""
TF_GPU_IMAGES: Final[dict[str, str]] = {
    "2.17": "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
    "2.16": "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-16.py310:latest",
    "2.15": "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-15.py310:latest",
}
"""Google's prebuilt TensorFlow GPU training images, by version (`PREBUILT_IMAGES_DOC`)."""

VERTEX_IMAGE_END_OF_AVAILABILITY: Final[dict[str, date]] = {
    PYTORCH_GPU_IMAGES["2.4"]: date(2026, 7, 24),
    PYTORCH_GPU_IMAGES["2.3"]: date(2026, 4, 24),
    PYTORCH_GPU_IMAGES["2.2"]: date(2026, 1, 30),
    PYTORCH_GPU_IMAGES["2.1"]: date(2025, 10, 4),
    TF_GPU_IMAGES["2.17"]: date(2026, 7, 11),
    TF_GPU_IMAGES["2.16"]: date(2026, 6, 28),
    TF_GPU_IMAGES["2.15"]: date(2025, 11, 14),
}
"""The "End of availability" column of `PREBUILT_IMAGES_DOC` for the us- URIs of the GPU
training images trainstack knows (the europe- and asia- URIs of an image share its row);
after the date Vertex no longer serves the image."""
VERTEX_IMAGE_END_OF_AVAILABILITY_SOURCE: Final = (
    f"{PREBUILT_IMAGES_DOC}: PyTorch table rows 2.4/2.3/2.2/2.1 GPU, TensorFlow table rows "
    "2.17/2.16/2.15 GPU, column 'End of availability'"
)

# --------------------------------------------------------------------------------------
# The images the bundled trainers run on Vertex
# --------------------------------------------------------------------------------------

DOCKER_HUB_SOURCE: Final = (
    "https://docs.cloud.google.com/vertex-ai/docs/training/containers-overview: 'you must "
    "build your Docker image and push it to Artifact Registry or Docker Hub, making sure "
    "that Vertex AI can access your registry' (public Docker Hub images need no access "
    "grant); the URI form without a registry host (`pytorch/pytorch:TAG`) is Docker's "
    "default-registry name, not shown on Google's page (U)"
)
CUDA_DRIVER_SOURCE: Final = (
    "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html "
    "Table 1: CUDA 12.x needs driver >= 525, CUDA 13.x >= 580. Which driver Vertex installs "
    "on A100 training VMs is not documented (U): CUDA 12.x is the build that the oldest "
    "driver still supported for A100s runs"
)
TORCH_IMAGE_DIGEST: Final = (
    "sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
)
TORCH_IMAGE_DIGEST_SOURCE: Final = (
    "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime@sha256:6acf597e...f64b4 pinned in several "
    "unrelated public repositories of 2026 (find_string ids 59678380490: a Dockerfile FROM "
    "line; 67157191866: a Dockerfile ARG GPU_BASE_IMAGE; 69211616234: a test's BASE_IMAGE; "
    "70909386499: a job script's CONTAINER; read 2026-11-26). Not read from Docker Hub "
    "itself (no registry access here)"
)
TORCH_IMAGE_PYTHON_SOURCE: Final = (
    "Python 3.12: a public README 'The image uses Python 3.12 and pins "
    "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime by digest' (find_string id 67330557494) "
    "and a Dockerfile on the sibling tag 2.13.0-cuda13.0 'Python 3.12, PyTorch 2.13.0+cu130' "
    "(id 57413016591, as the Vertex audit quotes it; not re-read), read 2026-11-26; the "
    "older pytorch/pytorch Dockerfile's 'ARG PYTHON_VERSION=3.11' (stored version) predates "
    "the tag. Not checked with "
    "`python3 -V` in the image itself"
)
TORCH_IMAGE_SOURCE: Final = (
    "Docker Hub pytorch/pytorch, tag 2.13.0-cuda12.6-cudnn9-runtime (the tag naming of "
    "pytorch/pytorch .github/workflows/docker-release.yml: "
    "'${PYTORCH_VERSION}-cuda${CUDA_VERSION_SHORT}-cudnn${CUDNN_VERSION}-runtime'); digest: "
    f"{TORCH_IMAGE_DIGEST_SOURCE}; {TORCH_IMAGE_PYTHON_SOURCE}; conda Python under "
    "/opt/conda, on PATH, with torch, torchvision, torchaudio, numpy, pyyaml and torchelastic "
    "(pytorch/pytorch Dockerfile stages conda/conda-installs/official, stored version); "
    f"{CUDA_DRIVER_SOURCE}"
)
TF_IMAGE_SOURCE: Final = (
    "Docker Hub tensorflow/tensorflow, tag 2.17.0-gpu: the newest official TensorFlow GPU "
    "image reported to see its GPUs as shipped; the 2.18+ -gpu images ship cuDNN 8.9 where "
    "their TensorFlow loads cuDNN 9 and fall back to the CPU "
    "(https://github.com/tensorflow/build/issues/221, open; "
    "https://github.com/tensorflow/tensorflow/issues/62412, "
    "https://github.com/tensorflow/tensorflow/issues/94593). Built by tensorflow/build "
    "tensorflow_runtime_dockerfiles/gpu.Dockerfile: nvidia/cuda 12.3 base on Ubuntu 22.04, "
    "'ARG PYTHON_VERSION=python3.11', TensorFlow from pip (stored version; not checked "
    "against the 2.17.0 tag itself). Digest: none found in two independent public sources "
    f"(searched 2026-11-26), so the tag is pulled, unverified; {CUDA_DRIVER_SOURCE}"
)
DOCKER_HUB_MIRROR_SOURCE: Final = (
    "https://docs.cloud.google.com/artifact-registry/docs/repositories/remote-repo: remote "
    "repositories store artifacts from upstream sources such as Docker Hub; 'The first time "
    "that you request a version of a package, Artifact Registry downloads and caches the "
    "package in the remote repository. The next time you request the same package version, "
    "Artifact Registry serves the cached copy.' pulumi_gcp 10.2.0 "
    "artifactregistry.Repository: mode REMOTE_REPOSITORY, "
    "remote_repository_config.docker_repository.public_repository 'Possible values are: "
    "DOCKER_HUB' (its repository.py example 'Artifact Registry Repository Remote')"
)
DOCKER_HUB_LIMIT_SOURCE: Final = (
    "Docker Hub usage page (docker/docs content/manuals/docker-hub/usage/_index.md, "
    "docker/docs#22134): 'Unauthenticated users | 10 per IPv4 address or IPv6 /64 subnet' "
    "pulls per hour; Vertex's ContainerSpec has no registry credential (aiplatform.v1 "
    "discovery: GoogleCloudAiplatformV1ContainerSpec)"
)
IMAGE_PULL_ACCOUNT_SOURCE: Final = (
    "https://docs.cloud.google.com/vertex-ai/docs/general/custom-service-account (stored "
    "zh-CN copy): a custom service account cannot be configured to pull images from "
    "Artifact Registry; Vertex AI pulls them with its default service agent"
)
REGISTRY_STORAGE_PRICE_SOURCE: Final = (
    "https://cloud.google.com/artifact-registry/pricing: storage up to 0.5 GB free, then "
    "$0.10 per GB per month, the same for remote repositories; egress within one location "
    "free"
)
TODAY_ENV: Final = "TRAINSTACK_TODAY"
"""An ISO date that stands in for today in the end-of-availability checks (tests; a plan
reviewed for a future deployment date)."""


@dataclass(frozen=True)
class VertexTrainingImage:
    """An image a bundled trainer runs on Vertex, and what the trainers need on top of it."""

    uri: str
    framework: Framework
    framework_version: str
    """Major.minor.patch of the framework the image ships."""
    python_version: str
    cuda_version: str
    packages: tuple[str, ...]
    """The Python distributions the image ships that the trainers use."""
    requirements: tuple[str, ...]
    """Install requirements the trainer package adds for this image: what the trainers
    import that the image lacks, never the framework itself."""
    source: str
    verified: bool
    """False while a fact above is not from the image's own build."""
    end_of_availability: date | None
    """When the image stops being served; None where the registry publishes no date."""
    end_of_availability_source: str
    digest: str | None = None
    """`sha256:<hex>` of the tag's manifest where two independent sources agree on it; None
    when the tag is pulled as it is (unverified: the tag can move)."""
    reduction_server: bool = False
    """Whether the image has what Reduction Server needs in a custom container
    (`REDUCTION_SERVER_CONTAINER_NEEDS`)."""


VERTEX_TRAINING_IMAGES: Final[dict[str, VertexTrainingImage]] = {
    TORCH_MODULE: VertexTrainingImage(
        uri="pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime",
        framework="torch",
        framework_version="2.13.0",
        python_version="3.12",
        cuda_version="12.6",
        packages=("torch", "numpy", "pyyaml"),
        # AIP_TENSORBOARD_LOG_DIR is set whenever the job has a baseOutputDirectory, and the
        # trainer then writes through torch.utils.tensorboard, which imports tensorboard
        # (>= 1.15, torch's own check); the PyTorch image does not ship it.
        requirements=("tensorboard>=1.15",),
        source=TORCH_IMAGE_SOURCE,
        verified=False,
        end_of_availability=None,
        end_of_availability_source="Docker Hub publishes no end of availability for tags",
        digest=TORCH_IMAGE_DIGEST,
    ),
    TF_MODULE: VertexTrainingImage(
        uri="tensorflow/tensorflow:2.17.0-gpu",
        framework="tensorflow",
        framework_version="2.17.0",
        python_version="3.11",
        cuda_version="12.3",
        packages=("tensorflow",),
        # tf-keras (Keras 2 for tf.keras from TF 2.16 on) is installed by the setup script at
        # the image's TensorFlow minor (TRAINSTACK_TF_KERAS), so any TF image works.
        requirements=(),
        source=TF_IMAGE_SOURCE,
        verified=False,
        end_of_availability=None,
        end_of_availability_source="Docker Hub publishes no end of availability for tags",
    ),
}
"""The image a bundled trainer module runs on in a Vertex job (containerSpec, the pod setup
script installing the trainer package into its python3)."""
DEFAULT_EXECUTOR_IMAGE: Final = VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri
"""The image the torch trainer runs on Vertex unless `vertex.image_uri` names one."""

TORCH_CUDA13_IMAGE_DIGEST: Final = (
    "sha256:db80a41f8428644cebcb3d75b0b62df334ab6c0e75785951eb25f48bfbd42407"
)
TORCH_CUDA13_IMAGE_SOURCE: Final = (
    "Docker Hub pytorch/pytorch, tag 2.13.0-cuda13.0-cudnn9-runtime: torch 2.13's wheels are "
    "built for CUDA 12.6 and 13.0 (stable) and 13.2 (experimental), none for 12.8 "
    "(pytorch/pytorch#187075, RELEASE.md row '2.13 ... CUDA 12.6 (CUDNN 9.10.2.21) (NCCL "
    "2.29.3), CUDA 13.0 (CUDNN 9.20.0.48) (NCCL 2.29.7)'); the CUDA 12.6 builds carry kernels "
    "up to Hopper(9.0), the 13.0 builds Blackwell(10.0, 12.0+PTX) too (pytorch/pytorch#172663, "
    "the support matrix 2.12 through 2.14 keep, pytorch/pytorch#197555). Digest: pinned in "
    "several unrelated public repositories of 2026 (find_string ids 68379905963: a Dockerfile "
    "FROM line; 70956681393: another; 70381902219 and 70486871143: CWL dockerPull; "
    "71287016665: a script's BASE; 69617299142: a test's assertion; read 2026-11-27). Python "
    "3.12: a Dockerfile on the tag, 'Runtime-only image: Python 3.12, PyTorch 2.13.0+cu130, "
    "CUDA 13.0, cuDNN 9' (id 57413016591). Not read from Docker Hub itself (no registry "
    f"access here); {CUDA_DRIVER_SOURCE}"
)
TORCH_CUDA13_IMAGE: Final = VertexTrainingImage(
    uri="pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
    framework="torch",
    framework_version="2.13.0",
    python_version="3.12",
    cuda_version="13.0",
    packages=("torch", "numpy", "pyyaml"),
    requirements=VERTEX_TRAINING_IMAGES[TORCH_MODULE].requirements,
    source=TORCH_CUDA13_IMAGE_SOURCE,
    verified=False,
    end_of_availability=None,
    end_of_availability_source="Docker Hub publishes no end of availability for tags",
    digest=TORCH_CUDA13_IMAGE_DIGEST,
)
"""The torch trainer's image on a GPU the CUDA 12.6 image has no kernels for (B200: CUDA
12.8 or later, `catalog.gpu_families`). Not the default everywhere: CUDA 13 needs an NVIDIA
driver >= 580 (CUDA_DRIVER_SOURCE), which the A100 and H100 drivers Vertex and GKE install
are not known to be."""
TORCH_IMAGES: Final[tuple[VertexTrainingImage, ...]] = (
    VERTEX_TRAINING_IMAGES[TORCH_MODULE],
    TORCH_CUDA13_IMAGE,
)
"""The torch trainer's images, the default first: a GPU gets the first whose CUDA reaches
its family's floor."""


def _cuda(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def vertex_training_image(module: str, cuda_floor: str | None = None) -> VertexTrainingImage:
    """The image for a bundled trainer module; the torch one for any other module. With
    `cuda_floor` (the GPU family's, `catalog.gpu_families.cuda_floor_of`), the first torch
    image whose CUDA reaches it (`TORCH_IMAGES`); the TensorFlow image has no such choice
    (`cuda_floor_problem` says so)."""
    image = VERTEX_TRAINING_IMAGES.get(module, VERTEX_TRAINING_IMAGES[TORCH_MODULE])
    if cuda_floor is None or image.framework != "torch":
        return image
    for candidate in TORCH_IMAGES:
        if _cuda(candidate.cuda_version) >= _cuda(cuda_floor):
            return candidate
    return image


def torch_image_note(gpu: str, floor: str, where: str) -> str | None:
    """The plan's note when the torch trainer on `gpu` (CUDA `floor`) runs on another image
    than the default (`where`: how the default is driven, e.g. GKE's driver setting); None
    when the default serves."""
    image = vertex_training_image(TORCH_MODULE, floor)
    default = VERTEX_TRAINING_IMAGES[TORCH_MODULE]
    if image is default:
        return None
    return (
        f"the bundled torch trainer runs on {pinned_image_uri(image)} ({image.uri}, CUDA "
        f"{image.cuda_version}): the {gpu} needs CUDA {floor} or later and the default "
        f"{default.uri} (CUDA {default.cuda_version}) has no kernels for it; torch 2.13 has no "
        f"CUDA 12.8 build (pytorch/pytorch#187075). CUDA 13 needs an NVIDIA driver >= 580 on "
        f"the machines ({where}; not checked offline)"
    )


def cuda_floor_problem(image: VertexTrainingImage, gpu: str, floor: str, key: str) -> str | None:
    """The line for a bundled image whose CUDA is older than `floor`, the oldest CUDA with
    native code for `gpu`; None when it reaches it."""
    if _cuda(image.cuda_version) >= _cuda(floor):
        return None
    torch = vertex_training_image(TORCH_MODULE, floor)
    return (
        f"{key}: the bundled {image.framework} image {image.uri} ships CUDA "
        f"{image.cuda_version}, older than CUDA {floor}, the first with native code for the "
        f"{gpu}; valid: framework torch (its image for the {gpu} is {torch.uri}), "
        f"or your own code in an image with CUDA {floor} or later"
    )


DOCKER_HUB_MIRROR: Final = "DOCKER_HUB"
"""`public_repository` of the remote repository the default images are pulled through
(`DOCKER_HUB_MIRROR_SOURCE`)."""


def mirror_registry(region: str, project: str, repository_id: str) -> str:
    """The Docker host and path of an Artifact Registry repository:
    `REGION-docker.pkg.dev/PROJECT/REPOSITORY` (remote-repo doc, "pull" examples)."""
    return f"{region}-docker.pkg.dev/{project}/{repository_id}"


def mirrored_image_uri(image: VertexTrainingImage, registry: str) -> str:
    """`image` as pulled through the Docker Hub remote repository at `registry`
    (`mirror_registry`): `<registry>/<namespace>/<name>@<digest>` where the digest is known,
    else `<registry>/<namespace>/<name>:<tag>`."""
    name, tag = image.uri.rsplit(":", 1)
    return f"{registry}/{name}@{image.digest}" if image.digest else f"{registry}/{name}:{tag}"


def _availability_key(image: str) -> str:
    # The same image from another multi-region has the us- URI's row.
    for multi in ("europe", "asia"):
        image = image.replace(f"{multi}-docker.pkg.dev/vertex-ai/", "us-docker.pkg.dev/vertex-ai/")
    return image


def image_end_of_availability(image: str) -> date | None:
    """The date an image stops being served; None for an image with no known date (a
    user's own, or a Docker Hub image)."""
    for known in VERTEX_TRAINING_IMAGES.values():
        if known.uri == image:
            return known.end_of_availability
    return VERTEX_IMAGE_END_OF_AVAILABILITY.get(_availability_key(image))


def current_images(today: date) -> list[str]:
    """The images trainstack knows that are still served on `today`: the bundled
    trainers' (while they have no date or a later one), then Google's prebuilt ones."""
    defaults = [
        image.uri
        for image in VERTEX_TRAINING_IMAGES.values()
        if image.end_of_availability is None or image.end_of_availability >= today
    ]
    prebuilt = sorted(u for u, eoa in VERTEX_IMAGE_END_OF_AVAILABILITY.items() if eoa >= today)
    return [*defaults, *prebuilt]


def availability_date() -> date:
    """The date images are checked for: `TRAINSTACK_TODAY` when set, else today."""
    given = os.environ.get(TODAY_ENV)
    if not given:
        return date.today()
    try:
        return date.fromisoformat(given)
    except ValueError:
        raise ValueError(
            f"{TODAY_ENV}: {given!r} is not a date; valid: an ISO date such as 2026-11-23"
        ) from None


def image_availability_problem(
    image: str, today: date, key: str, default: bool = False
) -> str | None:
    """What is wrong with `image` on `today` when it is past its end of availability,
    naming the images still served then; None otherwise (also for an image with no date).
    `key` is the setting that picks the image; `default` when the stack left it unset (the
    caller makes that an error, and a named image a warning)."""
    end = image_end_of_availability(image)
    if end is None or end >= today:
        return None
    valid = ", ".join(current_images(today))
    which = "the default image" if default else "image"
    return (
        f"{key}: {which} {image!r} is past its end of availability ({end.isoformat()}, "
        f"Google's prebuilt-containers page), so Vertex no longer serves it; valid: {valid}"
    )


REDUCTION_SERVER_IMAGES_SOURCE: Final = f"{FACT_SHEET} section 4"
REDUCTION_SERVER_CONTAINER_NEEDS: Final = (
    "NCCL >= 2.7 and Google's google-reduction-server package (apt repository "
    "'deb https://packages.cloud.google.com/apt google-fast-socket main')"
)
REDUCTION_SERVER_CONTAINER_SOURCE: Final = (
    "https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduction-server "
    "(prerequisites: the chief and worker containers must be a prebuilt TensorFlow >= 2.3 or "
    "PyTorch >= 1.4 training container, or a custom container with NCCL 2.7 or later and "
    "the google-reduction-server package; fact sheet section 4). Neither official Docker "
    "Hub image installs the package (pytorch/pytorch Dockerfile, stage official: apt "
    "ca-certificates, libjpeg-dev, libpng-dev; tensorflow/build gpu.Dockerfile: CUDA "
    "packages), and Google's prebuilt images are past their end of availability"
)


def reduction_server_image_problem(image: str, key: str, default: bool, prefix: str = "") -> str:
    """What Reduction Server needs of the image the workers run: an error line for a
    default image (trainstack's images lack it), a note for an image you name (trainstack
    cannot look inside it). `key` picks the image; `prefix` is the job's key prefix."""
    if default:
        return (
            f"{prefix}reduction_server.enabled: true needs, in a custom container, "
            f"{REDUCTION_SERVER_CONTAINER_NEEDS}, which the default image {image!r} does not "
            f"have (Google: {REDUCTION_SERVER_CONTAINER_SOURCE.split(' (')[0]}); valid: false, "
            "plugin_image_uri (the default image rebuilt with them: ReductionServerImage), "
            f"or {key} naming an image built with them"
        )
    return (
        f"{prefix}reduction_server: Google requires the workers' custom container to have "
        f"{REDUCTION_SERVER_CONTAINER_NEEDS} "
        f"({REDUCTION_SERVER_CONTAINER_SOURCE.split(' (')[0]}); trainstack cannot check "
        f"{key} {image!r}: without them NCCL all-reduces among the workers and the reducers "
        "are billed unused"
    )


REDUCTION_SERVER_IMAGES: Final[dict[str, str]] = {
    "us": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
    "europe": "europe-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
    "asia": "asia-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
}
"""Reduction Server images per Artifact Registry multi-region (gcp-facts section 4)."""
# Region prefix -> nearest multi-region. The Americas pull from us; the Middle East and
# Africa are closer to europe's multi-region than to asia's.
_MULTI_REGION_BY_PREFIX: Final[dict[str, str]] = {
    "us": "us",
    "northamerica": "us",
    "southamerica": "us",
    "europe": "europe",
    "me": "europe",
    "africa": "europe",
    "asia": "asia",
    "australia": "asia",
}


def reduction_server_image(region: str) -> str:
    """The Reduction Server image from the multi-region nearest `region`."""
    prefix = region.split("-", 1)[0]
    multi = _MULTI_REGION_BY_PREFIX.get(prefix)
    if multi is None:
        prefixes = ", ".join(f"{p}-*" for p in sorted(_MULTI_REGION_BY_PREFIX))
        raise ValueError(
            f"region: {region!r} has no known nearest Artifact Registry multi-region; "
            f"valid: {prefixes}"
        )
    return REDUCTION_SERVER_IMAGES[multi]


# --------------------------------------------------------------------------------------
# Public CUDA images for GKE pods
# --------------------------------------------------------------------------------------

KUBERNETES_IMAGES_VERIFIED: Final = False
KUBERNETES_IMAGES_SOURCE: Final = (
    "torch: the image the torch trainer runs on Vertex, by the same digest "
    f"({TORCH_IMAGE_SOURCE}); TensorFlow: Docker Hub tag seen in public Dockerfiles (2026), "
    "pulled by tag (no digest found in two independent public sources, as for Vertex: "
    "TF_IMAGE_SOURCE). TO VERIFY: https://hub.docker.com/r/tensorflow/tensorflow/tags"
)
KUBERNETES_IMAGES: Final[dict[str, str]] = {
    TORCH_MODULE: VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri,
    TF_MODULE: VERTEX_TRAINING_IMAGES[TF_MODULE].uri,
}
"""Public CUDA images by trainer module, by tag (what the torch-version checks read); the
pods pull `kubernetes_image`, by digest where the catalog has one. The trainer package is
pip-installed at start. GKE nodes pull Docker Hub images through Google's mirror.gcr.io
cache."""


def pinned_image_uri(image: VertexTrainingImage) -> str:
    """`image` by digest where the catalog has one (`<namespace>/<name>@sha256:...`: a
    moved tag cannot change what runs), else by its tag."""
    return f"{image.uri.rsplit(':', 1)[0]}@{image.digest}" if image.digest else image.uri


def kubernetes_image(module: str, cuda_floor: str | None = None) -> str | None:
    """The image a GKE pod of a bundled trainer module pulls (`pinned_image_uri`), on a GPU
    whose family needs `cuda_floor` the torch image that has it (`vertex_training_image`);
    None for a module with no default image."""
    for image in VERTEX_TRAINING_IMAGES.values():
        if image.uri == KUBERNETES_IMAGES.get(module):
            return pinned_image_uri(vertex_training_image(module, cuda_floor))
    return KUBERNETES_IMAGES.get(module)


# --------------------------------------------------------------------------------------
# Deep Learning VM image for plain Compute Engine GPU machines
# --------------------------------------------------------------------------------------

DLVM_IMAGE: Final = (
    "projects/deeplearning-platform-release/global/images/family/"
    "pytorch-2-9-cu129-ubuntu-2204-nvidia-580"
)
DLVM_IMAGE_VERIFIED: Final = False
DLVM_IMAGE_SOURCE: Final = (
    "Deep Learning VM family seen in public provisioning code (2026; reported to boot on "
    "a2-ultragpu-1g with the NVIDIA driver), not in the fact sheet. TO VERIFY: "
    "gcloud compute images describe-from-family pytorch-2-9-cu129-ubuntu-2204-nvidia-580 "
    "--project deeplearning-platform-release"
)
"""PyTorch + CUDA + NVIDIA driver image for the gce backend (the torch trainer only)."""
DLVM_PYTHON_BIN: Final = "/opt/conda/bin"
DLVM_PYTHON_BIN_VERIFIED: Final = False
"""Where Deep Learning VM images keep torchrun/pip (their conda environment); from public
Dockerfiles and scripts built on these images, not from Google's documentation. The launcher
appends it to PATH, so a torchrun already on PATH still wins."""

# --------------------------------------------------------------------------------------
# GKE GPU fabric installers: helper containers (`a100_cluster.gke_fabric`)
# --------------------------------------------------------------------------------------

FABRIC_PRE_INSTALL_IMAGE: Final = "ubuntu"
"""A3 Mega's `pre-installation` init container (nsenter into the host), as CTK renders it:
GoogleCloudPlatform/cluster-toolkit @1047080 examples/gke-a3-megagpu/
nccl-tcpxo-installer.yaml.tftpl `image: ubuntu` (from CEA gpudirect-tcpxo/
nccl-tcpxo-installer.yaml). Pulled by tag, unverified (`FABRIC_HELPER_IMAGES_SOURCE`)."""
FABRIC_LOG_MARTIANS_IMAGE: Final = "alpine:latest"
"""A3 Ultra's and A4's `disable-log-martian` init container (sysctl), as CTK renders it:
examples/gke-a3-ultragpu/nccl-installer.yaml.tftpl `image: alpine:latest`. Pulled by tag,
unverified (`FABRIC_HELPER_IMAGES_SOURCE`)."""
FABRIC_HELPER_IMAGES_VERIFIED: Final = False
FABRIC_HELPER_IMAGES_SOURCE: Final = (
    "CTK examples/gke-a3-megagpu/nccl-tcpxo-installer.yaml.tftpl and examples/gke-a3-ultragpu/"
    "nccl-installer.yaml.tftpl name these Docker Hub images by tag only. Digest: none found "
    "in two independent public sources (searched 2026-11-29: the CTK, CEA and XPK snapshots "
    "pin neither; the code corpus has only untagged or placeholder ubuntu and alpine "
    "digests, each in one repository), "
    "so the tags are pulled as they are, unverified: the tag can move (`VertexTrainingImage."
    "digest`'s rule). Each runs only `nsenter ... sh -c` or busybox `sysctl -w`."
)

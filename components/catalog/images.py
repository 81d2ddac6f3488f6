"""Every image trainstack pins, with where the pin comes from and whether it was checked.

Images drift (a tag moves, a family gets a new member), so they are pinned here, in one
reviewed place, rather than defaulted silently inside the components that use them.

| pin                      | used by                                  | verified |
|--------------------------|------------------------------------------|----------|
| `VERTEX_TRAINING_IMAGES` | VertexTrainingJob (pythonPackageSpec image by trainer module), TrainerPackage (what the image lacks) | no: past end of availability, no current image found |
| `PYTORCH_GPU_IMAGES`     | VertexTrainingJob (pythonPackageSpec)    | 2.4 yes, older no |
| `TF_GPU_IMAGES`          | VertexTrainingJob (pythonPackageSpec)    | yes      |
| `VERTEX_IMAGE_END_OF_AVAILABILITY` | `trainstack plan` (refuses an image past its date) | yes (stored page) |
| `REDUCTION_SERVER_IMAGES`| VertexTrainingJob (worker pool 2)        | fact sheet 4 |
| `KUBERNETES_IMAGES`      | KubernetesTrainingJob (GKE pods)         | no       |
| `DLVM_IMAGE`             | A100Cluster, backend gce (boot disk)     | no       |

Vertex images: facts-13 section 2 (`PREBUILT_IMAGES_DOC`). On 2026-11-23 every PyTorch and
TensorFlow GPU training image on Google's stored page is past its end of availability, and no
Google source (the stored page, googleapis/python-aiplatform, vertex-ai-samples) names a newer
one (`pytorch-gpu.2-5`/`2-6` appear only in third-party code): the pins stay, marked
unverified, and `trainstack plan` refuses them after their date (`image_availability_problem`). The local fidelity test
(tests/fidelity/test_vertex.py) does not run these images' framework versions: PyPI's Linux
torch 2.4 wheels are the CUDA build (the CPU build is not on PyPI) and the test venv has
torch 2.13 (CPU) and TensorFlow 2.20 with tf-keras 2.20, so it runs the launch path on those
and checks the tf-keras pin as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Final

from components.catalog.sources import FACT_SHEET
from trainers.common.contract import TF_MODULE, TORCH_MODULE, Framework

# --------------------------------------------------------------------------------------
# Vertex AI prebuilt training images
# --------------------------------------------------------------------------------------

PREBUILT_IMAGES_DOC: Final = (
    "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers (stored copy "
    "id 70313542528; facts-13 section 2: URIs, Python 3.10, 'PyTorch 2.4.x (latest patch) "
    "... cloudml-hypertune', 'tensorflow 2.17.x ... cloudml-hypertune', and 'Using image "
    "names without the latest tag isn't supported')"
)
PREBUILT_IMAGES_VERIFIED: Final = False
"""False for the table as a whole: the 2.4 and 2.17 URIs are verified (`PREBUILT_IMAGES_DOC`),
the older PyTorch ones are not. The stored page dates the end of availability of the 2.4 and
2.17 images to July 2026, and no newer image was found on it or in any other Google source
(searched 2026-11-23: the stored page, googleapis/python-aiplatform, vertex-ai-samples):
re-check the live page and re-pin."""
PREBUILT_IMAGES_SOURCE: Final = (
    f"{PREBUILT_IMAGES_DOC}; pytorch-gpu.2-2 and 2-1: reference/gcp-facts.md section 3.5 "
    "(URIs seen in use), TO VERIFY"
)
PYTORCH_GPU_IMAGES: Final[dict[str, str]] = {
    "2.4": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
    "2.2": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py311:latest",
    "2.1": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1.py310:latest",
}
"""Prebuilt PyTorch GPU training images (`pythonPackageSpec.executorImageUri`), by version.
Reduction Server needs a prebuilt PyTorch image >= 1.4 (all of these)."""
TF_GPU_IMAGES: Final[dict[str, str]] = {
    "2.17": "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
}
"""Prebuilt TensorFlow GPU training images, by version: 2.17 is the newest on the stored page
(facts-13 section 2, V), CUDA 12.x."""

VERTEX_IMAGE_END_OF_AVAILABILITY: Final[dict[str, date]] = {
    PYTORCH_GPU_IMAGES["2.4"]: date(2026, 7, 24),
    "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-3.py310:latest": date(2026, 4, 24),
    "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py310:latest": date(2026, 1, 30),
    PYTORCH_GPU_IMAGES["2.1"]: date(2025, 10, 4),
    TF_GPU_IMAGES["2.17"]: date(2026, 7, 11),
    "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-16.py310:latest": date(2026, 6, 28),
    "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-15.py310:latest": date(2025, 11, 14),
}
"""The "End of availability" column of `PREBUILT_IMAGES_DOC` for the us- URIs of the GPU
training images trainstack knows (the europe- and asia- URIs of an image share its row);
after the date Vertex no longer serves the image."""
VERTEX_IMAGE_END_OF_AVAILABILITY_SOURCE: Final = (
    f"{PREBUILT_IMAGES_DOC}: PyTorch table rows 2.4/2.3/2.2/2.1 GPU, TensorFlow table rows "
    "2.17/2.16/2.15 GPU, column 'End of availability'"
)


def _availability_key(image: str) -> str:
    # The same image from another multi-region has the us- URI's row.
    for multi in ("europe", "asia"):
        image = image.replace(f"{multi}-docker.pkg.dev/vertex-ai/", "us-docker.pkg.dev/vertex-ai/")
    return image


def image_end_of_availability(image: str) -> date | None:
    """The date Google stops serving a prebuilt training image; None for an image trainstack
    has no date for (a user's own, or one not on `PREBUILT_IMAGES_DOC`)."""
    return VERTEX_IMAGE_END_OF_AVAILABILITY.get(_availability_key(image))


def image_availability_problem(
    image: str, today: date, key: str, default: bool = False
) -> str | None:
    """The warning when `image` is past its end of availability on `today`, naming the
    images that are still available then; None otherwise (also for an image with no date).
    `key` is the setting that picks the image; `default` when the stack left it unset."""
    end = image_end_of_availability(image)
    if end is None or end >= today:
        return None
    current = sorted(uri for uri, eoa in VERTEX_IMAGE_END_OF_AVAILABILITY.items() if eoa >= today)
    valid = ", ".join(current) or (
        f"none known to trainstack on {today.isoformat()}: pick a current image from "
        "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers"
    )
    which = "the default image" if default else "image"
    return (
        f"{key}: {which} {image!r} is past its end of availability ({end.isoformat()}, "
        f"Google's prebuilt-containers page), so Vertex may no longer serve it; valid: {valid}"
    )


TF_KERAS_PIN_SOURCE: Final = (
    "TensorFlow >= 2.16 makes Keras 3 the default; 'To continue using Keras 2.0 ... install "
    "tf-keras' (https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1, V). Google's "
    "own TF release tests pin tf-keras to the TF minor "
    "(GoogleCloudPlatform/ml-auto-solutions dags/solutions_team/configs/tensorflow/common.py, "
    "facts-13 section 3, V). PyPI: tf-keras 2.17.0 exists and requires "
    "'tensorflow <2.18,>=2.17' (its wheel METADATA, read 2026). Whether the tf-gpu.2-17 image "
    "already ships tf-keras: not documented (the page's list is elided), U; the pin is "
    "satisfied by the image's copy if it has one."
)


@dataclass(frozen=True)
class VertexTrainingImage:
    """A prebuilt training image and what the bundled trainers need on top of it."""

    uri: str
    framework: Framework
    framework_version: str
    """Major.minor of the framework the image ships."""
    python_version: str
    packages: tuple[str, ...]
    """The PyPI packages the prebuilt-containers page lists for the image (beside "Other Deep
    Learning Containers dependencies", which it does not enumerate)."""
    requirements: tuple[str, ...]
    """Install requirements the trainer package adds for this image: what the trainers
    import that the image lacks, pinned so pip never replaces the image's framework."""
    source: str
    verified: bool
    """False while the pin is not a current image from a Google source."""
    end_of_availability: date | None = None
    """When Google stops serving the image (`VERTEX_IMAGE_END_OF_AVAILABILITY`)."""


VERTEX_TRAINING_IMAGES: Final[dict[str, VertexTrainingImage]] = {
    TORCH_MODULE: VertexTrainingImage(
        uri=PYTORCH_GPU_IMAGES["2.4"],
        framework="torch",
        framework_version="2.4",
        python_version="3.10",
        packages=(
            "torch",
            "pandas",
            "absl-py",
            "cloud-tpu-client",
            "python-json-logger",
            "scikit-learn",
            "cloudml-hypertune",
        ),
        # AIP_TENSORBOARD_LOG_DIR is set whenever the job has a baseOutputDirectory, and the
        # trainer then writes through torch.utils.tensorboard, which imports tensorboard
        # (>= 1.15, torch's own check). The page does not list tensorboard for the image
        # (U whether its unlisted Deep Learning Containers dependencies include it): a
        # no-op where it is present, installed where it is not.
        requirements=("tensorboard>=1.15",),
        source=PREBUILT_IMAGES_DOC,
        # Past its end of availability (2026-07-24) and no current image found: unverified.
        verified=False,
        end_of_availability=VERTEX_IMAGE_END_OF_AVAILABILITY[PYTORCH_GPU_IMAGES["2.4"]],
    ),
    TF_MODULE: VertexTrainingImage(
        uri=TF_GPU_IMAGES["2.17"],
        framework="tensorflow",
        framework_version="2.17",
        python_version="3.10",
        packages=(
            "tensorflow",
            "sympy",
            "pandas",
            "xgboost",
            "python-json-logger",
            "WebOb",
            "Paste",
            "webapp2",
            "mock",
            "google-cloud-resource-manager",
            "cloudml-hypertune",
        ),
        # The TF trainer runs tf.keras as tf-keras (Keras 3 fails inside
        # MultiWorkerMirroredStrategy); tf-keras 2.17.x requires TF 2.17.x, the image's.
        requirements=("tf-keras~=2.17.0",),
        source=f"{PREBUILT_IMAGES_DOC}; {TF_KERAS_PIN_SOURCE}",
        # Past its end of availability (2026-07-11) and no current image found: unverified.
        verified=False,
        end_of_availability=VERTEX_IMAGE_END_OF_AVAILABILITY[TF_GPU_IMAGES["2.17"]],
    ),
}
"""The prebuilt image a bundled trainer module runs on in a Vertex pythonPackageSpec job."""
DEFAULT_EXECUTOR_IMAGE: Final = VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri


def vertex_training_image(module: str) -> VertexTrainingImage:
    """The prebuilt image for a bundled trainer module; the torch one for any other module."""
    return VERTEX_TRAINING_IMAGES.get(module, VERTEX_TRAINING_IMAGES[TORCH_MODULE])


REDUCTION_SERVER_IMAGES_SOURCE: Final = f"{FACT_SHEET} section 4"
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
    "Docker Hub tags seen in public Dockerfiles (2026); pinned by tag, not digest. TO VERIFY: "
    "https://hub.docker.com/r/pytorch/pytorch/tags, https://hub.docker.com/r/tensorflow/tensorflow/tags"
)
KUBERNETES_IMAGES: Final[dict[str, str]] = {
    TORCH_MODULE: "pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime",
    TF_MODULE: "tensorflow/tensorflow:2.17.0-gpu",
}
"""Public CUDA images by trainer module; the trainer package is pip-installed at start.
GKE nodes pull Docker Hub images through Google's mirror.gcr.io cache."""

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

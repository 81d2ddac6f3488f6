"""Every image trainstack pins, with where the pin comes from and whether it was checked.

Images drift (a tag moves, a family gets a new member), so they are pinned here, in one
reviewed place, rather than defaulted silently inside the components that use them.

| pin                      | used by                                  | verified |
|--------------------------|------------------------------------------|----------|
| `PYTORCH_GPU_IMAGES`     | VertexTrainingJob (pythonPackageSpec)    | no       |
| `REDUCTION_SERVER_IMAGES`| VertexTrainingJob (worker pool 2)        | fact sheet 4 |
| `KUBERNETES_IMAGES`      | KubernetesTrainingJob (GKE pods)         | no       |
| `DLVM_IMAGE`             | A100Cluster, backend gce (boot disk)     | no       |
"""

from __future__ import annotations

from typing import Final

from components.catalog.sources import FACT_SHEET
from trainers.common.contract import TF_MODULE, TORCH_MODULE

# --------------------------------------------------------------------------------------
# Vertex AI prebuilt training images
# --------------------------------------------------------------------------------------

PREBUILT_IMAGES_VERIFIED: Final = False
PREBUILT_IMAGES_SOURCE: Final = (
    "reference/gcp-facts.md section 3.5 (URIs seen in use); TO VERIFY against "
    "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers before relying on it"
)
PYTORCH_GPU_IMAGES: Final[dict[str, str]] = {
    "2.4": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
    "2.2": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py311:latest",
    "2.1": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1.py310:latest",
}
"""Prebuilt PyTorch GPU training images (`pythonPackageSpec.executorImageUri`), by version.
Reduction Server needs a prebuilt PyTorch image >= 1.4 (all of these)."""
DEFAULT_EXECUTOR_IMAGE: Final = PYTORCH_GPU_IMAGES["2.4"]

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

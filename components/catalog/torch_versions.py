"""Which torch an image carries, and what the bundled torch trainer needs from it.

The torch trainer's `fsdp` strategy imports `fully_shard` from `torch.distributed.fsdp`,
which is public from torch 2.6 (before, FSDP2 lived in the private
`torch.distributed._composable.fsdp`). An image with an older torch fails on every node at
its first step, so the stack config refuses `fsdp` on such an image before anything is
created:

    fsdp_problem(PYTORCH_GPU_IMAGES["2.4"], "fsdp", "trainer.", image_key="vertex.image_uri")
    # "trainer.strategy: 'fsdp' needs torch >= 2.6 (torch.distributed.fsdp.fully_shard), but
    #  image 'us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest' has torch
    #  2.4; valid: ddp, or vertex.image_uri with torch >= 2.6"

The torch version is read from the image's name (every image trainstack pins says it there);
an image whose name does not say (a user's own) is not checked.
"""

from __future__ import annotations

import re
from typing import Final

from trainstack.components.catalog.problems import quote

__all__ = [
    "FSDP_MIN_TORCH",
    "FSDP_MIN_TORCH_SOURCE",
    "IMAGE_TORCH_VERSION_SOURCE",
    "fsdp_problem",
    "image_torch_version",
]

FSDP_MIN_TORCH: Final = (2, 6)
"""First torch with a public `torch.distributed.fsdp.fully_shard` (and `MixedPrecisionPolicy`),
what `trainstack.trainers.torch_ddp.train` imports for strategy fsdp."""
FSDP_MIN_TORCH_SOURCE: Final = (
    "https://github.com/pytorch/pytorch/pull/141868 ('[FSDP2] Move to public "
    "torch.distributed.fsdp' ... 'This is targeting 2.6 release'); "
    "https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html (page created "
    "Dec 04, 2024, after 2.5 shipped)"
)
FSDP_MIN_TORCH_VERIFIED: Final = True

IMAGE_TORCH_VERSION_SOURCE: Final = (
    "the image names: Vertex prebuilt pytorch-gpu.2-4 is 'PyTorch 2.4.x (latest patch)' "
    "(https://cloud.google.com/vertex-ai/docs/training/pre-built-containers, facts memo 13 "
    "section 2: verified); pytorch/pytorch:X.Y.Z tags carry torch X.Y.Z (Docker Hub naming: "
    "unverified); Deep Learning VM families pytorch-X-Y-* carry torch X.Y (family naming: "
    "unverified)"
)
_IMAGE_TORCH_VERSION: Final = (
    re.compile(r"/vertex-ai/training/pytorch-(?:gpu|xla|cpu)\.(\d+)-(\d+)\."),
    re.compile(r"^(?:docker\.io/)?pytorch/pytorch:(\d+)\.(\d+)"),
    re.compile(r"/deeplearning-platform-release/global/images/family/pytorch-(\d+)-(\d+)-"),
)


def image_torch_version(image: str) -> tuple[int, int] | None:
    """`(major, minor)` of the torch an image carries, read from its name; None for an
    image whose name does not say (a user's own)."""
    for pattern in _IMAGE_TORCH_VERSION:
        found = pattern.search(image)
        if found:
            return int(found[1]), int(found[2])
    return None


def _version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def fsdp_problem(
    image: str, strategy: str, prefix: str = "", image_key: str | None = None
) -> str | None:
    """The problem when `strategy` is fsdp and `image` carries a torch without public
    `fully_shard`; None otherwise (also when the image's torch is unknown). `image_key`
    names the setting that picks another image, when there is one."""
    have = image_torch_version(image)
    if strategy != "fsdp" or have is None or have >= FSDP_MIN_TORCH:
        return None
    need = _version(FSDP_MIN_TORCH)
    other = f", or {image_key} with torch >= {need}" if image_key else ""
    return (
        f"{prefix}strategy: 'fsdp' needs torch >= {need} (torch.distributed.fsdp.fully_shard), "
        f"but image {quote(image)} has torch {_version(have)}; valid: ddp{other}"
    )

"""FSDP is refused at plan time on an image whose torch lacks public `fully_shard`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components.catalog.images import (
    DEFAULT_EXECUTOR_IMAGE,
    DLVM_IMAGE,
    KUBERNETES_IMAGES,
    PYTORCH_GPU_IMAGES,
)
from trainstack.components.catalog.torch_versions import (
    FSDP_MIN_TORCH,
    fsdp_problem,
    image_torch_version,
)
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.plan import load_stack
from trainstack.trainers.common.contract import TORCH_MODULE

PROJECT = {"gcp:project": "p", "gcp:region": "us-central1"}
FSDP = {"trainstack:trainer": {"framework": "torch", "strategy": "fsdp", "global_batch_size": 256}}
VERTEX_24 = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
VERTEX_FSDP_ERROR = (
    "trainer.strategy: 'fsdp' needs torch >= 2.6 (torch.distributed.fsdp.fully_shard), but "
    f"image '{VERTEX_24}' has torch 2.4; valid: ddp, or vertex.image_uri with torch >= 2.6"
)


def _vertex(**extra: Any) -> dict[str, Any]:
    return {
        **PROJECT,
        **FSDP,
        "trainstack:vertex": {"machine_type": "a2-highgpu-8g", "replica_count": 2, **extra},
    }


def _gpu_cluster(backend: str) -> dict[str, Any]:
    return {
        **PROJECT,
        **FSDP,
        "trainstack:gpu_cluster": {
            "backend": backend,
            "machine_type": "a2-highgpu-8g",
            "node_count": 2,
            "zone": "us-central1-a",
        },
    }


@pytest.mark.parametrize(
    ("image", "version"),
    [
        (VERTEX_24, (2, 4)),
        ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1.py310:latest", (2, 1)),
        ("europe-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest", (2, 4)),
        ("pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime", (2, 9)),
        ("docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", (2, 5)),
        (
            "projects/deeplearning-platform-release/global/images/family/"
            "pytorch-2-9-cu129-ubuntu-2204-nvidia-580",
            (2, 9),
        ),
        ("us-docker.pkg.dev/acme/train/torch:latest", None),
    ],
)
def test_image_torch_version_from_the_name(image: str, version: tuple[int, int] | None) -> None:
    assert image_torch_version(image) == version


def test_every_pinned_torch_image_says_its_version() -> None:
    pinned = [
        *PYTORCH_GPU_IMAGES.values(),
        DEFAULT_EXECUTOR_IMAGE,
        KUBERNETES_IMAGES[TORCH_MODULE],
        DLVM_IMAGE,
    ]
    assert [image for image in pinned if image_torch_version(image) is None] == []


def test_fsdp_problem_directly() -> None:
    assert FSDP_MIN_TORCH == (2, 6)
    assert fsdp_problem(VERTEX_24, "ddp") is None
    assert fsdp_problem("pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime", "fsdp") is None
    assert fsdp_problem("us-docker.pkg.dev/acme/train/torch:latest", "fsdp") is None
    assert fsdp_problem("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "fsdp") == (
        "strategy: 'fsdp' needs torch >= 2.6 (torch.distributed.fsdp.fully_shard), but image "
        "'pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime' has torch 2.5; valid: ddp"
    )


def test_vertex_default_image_has_fully_shard_and_a_named_torch_24_refuses_fsdp() -> None:
    # The default is pytorch/pytorch's torch 2.13 image (Google's prebuilt 2.4 is gone).
    assert DEFAULT_EXECUTOR_IMAGE == "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"
    assert load_stack_config(_vertex()).trainer.strategy == "fsdp"
    with pytest.raises(ConfigError) as info:
        load_stack_config(_vertex(image_uri=VERTEX_24))
    assert info.value.errors == [VERTEX_FSDP_ERROR]


def test_plan_exits_2_with_the_exact_message(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.fsdp.yaml"
    path.write_text(yaml.safe_dump({"config": _vertex(image_uri=VERTEX_24)}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: stack 'fsdp': {VERTEX_FSDP_ERROR}"]


@pytest.mark.parametrize(
    "raw",
    [
        _gpu_cluster("gce"),  # Deep Learning VM pytorch-2-9
        _gpu_cluster("gke"),  # pytorch/pytorch:2.9.0
        _vertex(image_uri="us-docker.pkg.dev/acme/train/torch:latest"),  # the user's own
    ],
    ids=["gce", "gke", "vertex own image"],
)
def test_fsdp_stays_valid_where_the_image_has_fully_shard(raw: dict[str, Any]) -> None:
    assert load_stack_config(raw).trainer.strategy == "fsdp"


def test_the_bundled_fsdp_stack_stays_valid() -> None:
    _, config = load_stack("prod-a100-gce", None)
    cfg = load_stack_config(config)
    assert (cfg.trainer.strategy, cfg.gpu_cluster and cfg.gpu_cluster.backend) == ("fsdp", "gce")

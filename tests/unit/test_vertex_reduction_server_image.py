"""Reduction Server needs NCCL >= 2.7 and Google's google-reduction-server package in the
workers' custom container (cloud.google.com/vertex-ai/docs/training/distributed-training
#reduction-server). trainstack's default images lack the package, so Reduction Server on
them stops the plan (exit 2) and the component; on an image you name the plan says what
Google requires, since trainstack cannot look inside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components.catalog.images import VERTEX_TRAINING_IMAGES
from trainstack.components.vertex_training_job import VertexTrainingJob
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.contract import TORCH_MODULE

NEEDS = (
    "NCCL >= 2.7 and Google's google-reduction-server package (apt repository "
    "'deb https://packages.cloud.google.com/apt google-fast-socket main')"
)
DOC = "https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduction-server"
TORCH_IMAGE = VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri
NAMED = "us-central1-docker.pkg.dev/my-ml-project/training/pytorch-reduction-server:2.13"


def _default_image_message(prefix: str, key: str) -> str:
    return (
        f"{prefix}reduction_server.enabled: true needs, in a custom container, {NEEDS}, which "
        f"the default image '{TORCH_IMAGE}' does not have (Google: {DOC}); valid: false, or "
        f"{key} naming an image built with them"
    )


def test_the_bundled_stack_names_its_image_and_the_plan_says_what_google_requires() -> None:
    name, config = load_stack("prod-vertex-rs", None)
    plan = build_plan(name, config)
    assert [n for n in plan["notes"] if n.startswith("vertex.reduction_server")] == [
        f"vertex.reduction_server: Google requires the workers' custom container to have "
        f"{NEEDS} ({DOC}); trainstack cannot check vertex.image_uri '{NAMED}': without them "
        "NCCL all-reduces among the workers and the reducers are billed unused"
    ]
    [job] = [r for r in plan["resources"] if r["type"].endswith(":CustomJob")]
    pools = job["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [p["containerSpec"]["imageUri"] for p in pools[:2]] == [NAMED, NAMED]


def test_reduction_server_on_the_default_image_stops_the_plan() -> None:
    name, config = load_stack("prod-vertex-rs", None)
    config["trainstack:vertex"] = {
        k: v for k, v in config["trainstack:vertex"].items() if k != "image_uri"
    }
    with pytest.raises(ConfigError) as info:
        build_plan(name, config)
    assert info.value.errors == [_default_image_message("vertex.", "vertex.image_uri")]


def test_trainstack_plan_exits_2_for_it(tmp_path: Path) -> None:
    _, config = load_stack("prod-vertex-rs", None)
    del config["trainstack:vertex"]["image_uri"]
    path = tmp_path / "Pulumi.rs.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == (
        "error: invalid stack config for 'rs':"
        + _default_image_message("vertex.", "vertex.image_uri")
    )


@pulumi.runtime.test
def test_the_component_refuses_it_on_its_default_image() -> None:
    args: dict[str, Any] = {
        "project": "p",
        "region": "us-central1",
        "display_name": "d",
        "machine_type": "a2-highgpu-8g",
        "replica_count": 2,
        "reduction_server": {"replica_count": 1},
        "package_uri": "gs://b/trainers/t.tar.gz",
    }
    with pytest.raises(ValueError) as info:
        VertexTrainingJob("job", args)  # type: ignore[arg-type]
    assert str(info.value) == "VertexTrainingJob." + _default_image_message(
        "", "container_image_uri"
    )

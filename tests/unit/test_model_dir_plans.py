"""On GKE, Compute Engine and TPU the bundled trainer is told to write its final model to
`<checkpoint bucket>/model/<run>`, outside the `checkpoints/` prefix the bucket's age rule
deletes (Vertex gets AIP_MODEL_DIR, `<checkpoint bucket>/model/`, from Vertex itself)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from trainstack.infra.plan import build_plan, load_stack

MODEL_FLAG = re.compile(r"--model_dir=([^\s\"'\\)]+)")
RUN_FLAG = re.compile(r"--run_name=([A-Za-z0-9._-]+)")


def _plan(stack: str, trainer: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    _, config = load_stack(stack, None)
    if trainer:
        config = {**config, "trainstack:trainer": {**config["trainstack:trainer"], **trainer}}
    plan = build_plan(stack, config)
    return json.dumps(plan), plan


@pytest.mark.parametrize(
    ("stack", "run"),
    [
        ("dev-a100-gke", "dev-a100-gke"),
        ("prod-a100-gce", "prod-a100-gce"),
        ("dev-tpu-v5e", "dev-tpu-v5e"),
        ("prod-tpu-v4-32", "prod-tpu-v4-32"),
    ],
)
def test_each_cloud_target_passes_the_model_folder(stack: str, run: str) -> None:
    text, plan = _plan(stack)
    bucket = plan["outputs"]["checkpoint_url"]
    assert bucket == f"gs://my-ml-project-{stack}-checkpoints"
    assert set(RUN_FLAG.findall(text)) == {run}
    assert set(MODEL_FLAG.findall(text)) == {f"{bucket}/model/{run}"}


@pytest.mark.parametrize("stack", ["prod-vertex-rs", "dev-vertex-hpt"])
def test_vertex_keeps_its_own_model_folder(stack: str) -> None:
    text, _ = _plan(stack)
    assert MODEL_FLAG.findall(text) == []


def test_a_model_dir_the_stack_sets_is_kept() -> None:
    text, _ = _plan("prod-a100-gce", {"model_dir": "gs://elsewhere/models/v1"})
    assert set(MODEL_FLAG.findall(text)) == {"gs://elsewhere/models/v1"}

"""Batch arithmetic is checked at plan time: the global batch must split into whole
micro-batches over the target's world size, as the trainers require on the machines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components.catalog.batch import (
    WorldSize,
    batch_problem,
    gpu_world_size,
    local_world_size,
    tpu_world_size,
)
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config

PROJECT = {"gcp:project": "p", "gcp:region": "us-central1"}
GCE = {
    **PROJECT,
    "trainstack:gpu_cluster": {
        "backend": "gce",
        "machine_type": "a2-highgpu-8g",
        "node_count": 4,
        "zone": "us-central1-c",
    },
}
VERTEX = {
    **PROJECT,
    "trainstack:vertex": {"machine_type": "a2-highgpu-4g", "replica_count": 3},
}
V5E = {
    "gcp:project": "p",
    "gcp:region": "us-west4",
    "trainstack:tpu": {
        "accelerator_type": "v5litepod-16",
        "zone": "us-west4-a",
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    },
}
LOCAL = {"trainstack:local": {"workers": 3}}
TF = {"framework": "tensorflow"}


def _trainer(raw: dict[str, Any], **trainer: Any) -> dict[str, Any]:
    return {**raw, "trainstack:trainer": trainer}


def _errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    return info.value.errors


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("gce torch", _trainer(GCE, global_batch_size=250),
     "trainer.global_batch_size: 250 is not divisible by the world size 32 (4 machines x 8 GPUs); valid: 224 or 256"),
    ("gce accum", _trainer(GCE, global_batch_size=1000, grad_accum_steps=2),
     "trainer.global_batch_size: 1000 is not divisible by the world size 32 (4 machines x 8 GPUs) x trainer.grad_accum_steps 2 = 64; valid: 960 or 1024"),
    ("gce smaller than world", _trainer(GCE, global_batch_size=16),
     "trainer.global_batch_size: 16 is not divisible by the world size 32 (4 machines x 8 GPUs); valid: 32"),
    ("gke multi_worker_mirrored", _trainer({**GCE, "trainstack:gpu_cluster": {**GCE["trainstack:gpu_cluster"], "backend": "gke"}}, **TF, global_batch_size=100),
     "trainer.global_batch_size: 100 is not divisible by the world size 32 (4 machines x 8 GPUs); valid: 96 or 128"),
    ("vertex torch", _trainer(VERTEX, global_batch_size=100),
     "trainer.global_batch_size: 100 is not divisible by the world size 12 (3 machines x 4 GPUs); valid: 96 or 108"),
    ("vertex cpu", _trainer({**PROJECT, "trainstack:vertex": {"machine_type": "n1-standard-8", "replica_count": 3}}, global_batch_size=64),
     "trainer.global_batch_size: 64 is not divisible by the world size 3 (3 machines x 1 process (no GPUs)); valid: 63 or 66"),
    ("vertex mirrored", _trainer(VERTEX, **TF, strategy="mirrored", global_batch_size=6),
     "trainer.global_batch_size: 6 is not divisible by the world size 4 (mirrored: 4 GPUs of one machine); valid: 4 or 8"),
    ("vertex parameter_server", _trainer(VERTEX, **TF, strategy="parameter_server", global_batch_size=6),
     "trainer.global_batch_size: 6 is not divisible by the world size 4 (parameter_server: each worker step takes the whole batch over 4 GPUs); valid: 4 or 8"),
    ("tpu v5e", _trainer(V5E, **TF, strategy="tpu", global_batch_size=1000),
     "trainer.global_batch_size: 1000 is not divisible by the world size 16 (TPUStrategy on worker 0 drives the 16 chips of v5litepod-16); valid: 992 or 1008"),
    ("local torch", _trainer(LOCAL, global_batch_size=64),
     "trainer.global_batch_size: 64 is not divisible by the world size 3 (3 local processes); valid: 63 or 66"),
    ("local mirrored", _trainer(LOCAL, **TF, strategy="mirrored", global_batch_size=64, grad_accum_steps=2),
     "trainer.global_batch_size: 64 is not divisible by the world size 3 (1 process x 3 CPU replicas) x trainer.grad_accum_steps 2 = 6; valid: 60 or 66"),
    ("local multi_worker_mirrored", _trainer(LOCAL, **TF, global_batch_size=64),
     "trainer.global_batch_size: 64 is not divisible by the world size 3 (3 local processes); valid: 63 or 66"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_stack_config_rejects_a_batch_that_does_not_split(
    raw: dict[str, Any], expected: str
) -> None:
    assert _errors(raw) == [expected]


@pytest.mark.parametrize(
    "raw",
    [
        _trainer(GCE, global_batch_size=1024, grad_accum_steps=2),
        _trainer(VERTEX, global_batch_size=96),
        _trainer(V5E, **TF, strategy="tpu", global_batch_size=1024),
        _trainer(LOCAL, global_batch_size=66),
        # parameter_server: one CPU replica per local worker, every worker takes the batch.
        _trainer(LOCAL, **TF, strategy="parameter_server", global_batch_size=64),
    ],
    ids=["gce", "vertex", "tpu", "local", "local parameter_server"],
)
def test_a_batch_that_splits_passes(raw: dict[str, Any]) -> None:
    load_stack_config(raw)


def test_an_invalid_target_is_reported_alone_not_with_a_guessed_world_size() -> None:
    raw = _trainer(
        {**GCE, "trainstack:gpu_cluster": {**GCE["trainstack:gpu_cluster"], "node_count": 0}},
        global_batch_size=250,
    )
    assert _errors(raw) == ["gpu_cluster.node_count: 0 is too small; valid: >= 1"]


def test_plan_exits_2_with_the_exact_message(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.batch.yaml"
    path.write_text(yaml.safe_dump({"config": _trainer(GCE, global_batch_size=250)}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: stack 'batch': trainer.global_batch_size: 250 is not divisible by the world "
        "size 32 (4 machines x 8 GPUs); valid: 224 or 256"
    ]


def test_the_rule_directly() -> None:
    world = gpu_world_size("torch", "ddp", machines=4, gpus_per_machine=8)
    assert world == WorldSize(32, "4 machines x 8 GPUs")
    assert batch_problem(256, 1, world) is None
    assert batch_problem(512, 2, world) is None
    assert batch_problem(250, 1, world) == (
        "trainer.global_batch_size: 250 is not divisible by the world size 32 "
        "(4 machines x 8 GPUs); valid: 224 or 256"
    )
    assert batch_problem(96, 2, world, prefix="") == (
        "global_batch_size: 96 is not divisible by the world size 32 (4 machines x 8 GPUs) "
        "x grad_accum_steps 2 = 64; valid: 64 or 128"
    )
    assert gpu_world_size("torch", "ddp", machines=1, gpus_per_machine=1) == WorldSize(
        1, "1 machine x 1 GPU"
    )
    assert tpu_world_size("v4-32", 16) == WorldSize(
        16, "TPUStrategy on worker 0 drives the 16 chips of v4-32"
    )
    assert local_world_size("torch", "ddp", 1) == WorldSize(1, "1 local process")
    assert local_world_size("tensorflow", "parameter_server", 4) == WorldSize(
        1, "parameter_server: each worker step takes the whole batch"
    )

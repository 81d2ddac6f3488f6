"""The plan benchmark's synthetic stacks stay valid as validation grows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trainstack.infra.config import load_stack_config

SPEC = importlib.util.spec_from_file_location(
    "plan_scaling", Path(__file__).resolve().parents[2] / "benchmarks" / "plan_scaling.py"
)
assert SPEC is not None and SPEC.loader is not None
plan_scaling = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(plan_scaling)


@pytest.mark.parametrize("size", plan_scaling.TPU_SIZES)
def test_tpu_points_validate(size: str) -> None:
    cfg = load_stack_config(plan_scaling._tpu(size))
    assert cfg.tpu is not None and cfg.tpu.slice.accelerator_type == size


@pytest.mark.parametrize("nodes", plan_scaling.GPU_NODES)
def test_gpu_points_validate(nodes: int) -> None:
    cfg = load_stack_config(plan_scaling._gpu(nodes))
    assert cfg.gpu_cluster is not None and cfg.gpu_cluster.node_count == nodes


def test_largest_points_are_64_tpu_hosts_and_32_gpu_nodes() -> None:
    largest_tpu = load_stack_config(plan_scaling._tpu(plan_scaling.TPU_SIZES[-1]))
    assert largest_tpu.tpu is not None and largest_tpu.tpu.slice.hosts == 64
    assert plan_scaling.GPU_NODES[-1] == 32

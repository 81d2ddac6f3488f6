"""`tpu.runtime_version` defaults to the newest runtime the catalog knows for the slice's
generation and the trainer's framework, and the plan names it."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components.catalog.tpu import TPU_GENERATIONS, default_tpu_runtime
from trainstack.components.catalog.tpu_runtimes import (
    KNOWN_TF_RUNTIMES,
    newest_tf_runtime,
    pod_runtime,
)
from trainstack.infra.config import load_stack_config
from trainstack.infra.plan import build_plan

TF = {"framework": "tensorflow", "strategy": "tpu"}


@pytest.mark.parametrize(
    ("generation", "multi_host", "expected"),
    [
        ("v4", False, "tpu-vm-tf-2.16.0-pjrt"),
        ("v4", True, "tpu-vm-tf-2.16.0-pod-pjrt"),
        ("v5e", False, "tpu-vm-tf-2.16.0-pjrt"),
        ("v5e", True, "tpu-vm-tf-2.16.0-pod-pjrt"),
        ("v5p", False, "tpu-vm-tf-2.16.0-pjrt"),
        ("v5p", True, "tpu-vm-tf-2.16.0-pod-pjrt"),
        ("v6e", False, "tpu-vm-tf-2.16.0-pjrt"),
        ("v6e", True, "tpu-vm-tf-2.16.0-pod-pjrt"),
    ],
)
def test_tensorflow_gets_the_newest_known_tf_runtime(
    generation: Any, multi_host: bool, expected: str
) -> None:
    assert default_tpu_runtime(generation, "tensorflow", multi_host) == expected


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("v4", "tpu-ubuntu2204-base"),
        ("v5e", "v2-alpha-tpuv5-lite"),
        ("v5p", "v2-alpha-tpuv5"),
        ("v6e", "v2-alpha-tpuv6e"),
    ],
)
def test_other_frameworks_get_the_generations_base_runtime(generation: Any, expected: str) -> None:
    assert default_tpu_runtime(generation, "torch", True) == expected


def test_the_newest_is_picked_by_version_not_by_position() -> None:
    assert KNOWN_TF_RUNTIMES["v4"] == ("tpu-vm-tf-2.14.1", "tpu-vm-tf-2.16.0-pjrt")
    assert newest_tf_runtime("v4", False) == "tpu-vm-tf-2.16.0-pjrt"
    assert pod_runtime("tpu-vm-tf-2.14.1") == "tpu-vm-tf-2.14.1-pod"
    assert set(KNOWN_TF_RUNTIMES) == set(TPU_GENERATIONS)


@pytest.mark.parametrize(
    ("tpu", "region", "expected"),
    [
        ({"accelerator_type": "v4-8", "zone": "us-central2-b"}, "us-central2", "tpu-vm-tf-2.16.0-pjrt"),
        ({"accelerator_type": "v4-32", "zone": "us-central2-b"}, "us-central2", "tpu-vm-tf-2.16.0-pod-pjrt"),
        ({"accelerator_type": "v5litepod-4", "zone": "us-west4-a"}, "us-west4", "tpu-vm-tf-2.16.0-pjrt"),
        ({"accelerator_type": "v5litepod-16", "zone": "us-west4-a"}, "us-west4", "tpu-vm-tf-2.16.0-pod-pjrt"),
        ({"accelerator_type": "v5p-8", "zone": "us-east5-a"}, "us-east5", "tpu-vm-tf-2.16.0-pjrt"),
        ({"generation": "v6e", "topology": "4x4", "zone": "us-east5-b"}, "us-east5", "tpu-vm-tf-2.16.0-pod-pjrt"),
    ],
)  # fmt: skip
def test_the_stack_config_fills_the_default_and_the_plan_names_it(
    tpu: dict[str, Any], region: str, expected: str
) -> None:
    config = {
        "gcp:project": "p",
        "gcp:region": region,
        "trainstack:tpu": tpu,
        "trainstack:trainer": {**TF, "global_batch_size": 256},
    }
    cfg = load_stack_config(config)
    assert cfg.tpu is not None and cfg.tpu.runtime_version == expected
    plan = build_plan("mine", config)
    assert plan["defaults"] == {"tpu.runtime_version": expected}
    assert f"tpu.runtime_version defaults to {expected}" in plan["notes"]
    (vm,) = [r for r in plan["resources"] if r["type"] == "gcp:tpu/v2Vm:V2Vm"]
    assert vm["inputs"]["runtimeVersion"] == expected


def test_a_given_runtime_is_kept_and_not_listed_as_a_default() -> None:
    config = {
        "gcp:project": "p",
        "gcp:region": "us-central2",
        "trainstack:tpu": {
            "accelerator_type": "v4-32",
            "zone": "us-central2-b",
            "runtime_version": "tpu-vm-tf-2.14.1-pod",
        },
        "trainstack:trainer": TF,
    }
    plan = build_plan("mine", config)
    assert "defaults" not in plan
    assert not [n for n in plan["notes"] if "defaults to" in n]

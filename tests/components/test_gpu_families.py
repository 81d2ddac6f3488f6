"""The A3 / A4 families and Dynamic Workload Scheduler flex-start on `gpu_cluster`: the
exact line each refused setting gets (stack and component), and what a flex-start GKE pool
and Compute Engine template register."""

from __future__ import annotations

from typing import Any

import pytest

from tests.components.test_a100_cluster import BASE, CLUSTER, POLICY, _cluster_outputs
from tests.components.test_a100_cluster import _policy_outputs as policy_outputs
from trainstack.components.a100_cluster import A100Cluster, GpuCluster
from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.estimate import quota_needs
from trainstack.infra.mocks import ProgramRun, run_program

NODE_POOL = "gcp:container/nodePool:NodePool"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
PROJECT = {"gcp:project": "p", "gcp:region": "us-central1"}


def _stack(section: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    gpu = {"machine_type": "a3-megagpu-8g", "node_count": 2, "zone": "us-central1-a"}
    raw: dict[str, Any] = {**PROJECT, "trainstack:gpu_cluster": {**gpu, **section}}
    if limits is not None:
        raw["trainstack:limits"] = limits
    return raw


def _errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    return info.value.errors


FLEX_SPOT = (
    "gpu_cluster.flex_start: cannot be used with spot (flex-start is its own capacity, "
    "Dynamic Workload Scheduler); valid: flex_start: false, or remove spot"
)
FLEX_RESERVATION = (
    "gpu_cluster.flex_start: cannot be used with reservation (flex-start is its own capacity, "
    "Dynamic Workload Scheduler); valid: flex_start: false, or remove reservation"
)
GCE_NO_DURATION = (
    "limits.max_run_hours: required with gpu_cluster.flex_start on backend gce (Compute "
    "Engine flex-start VMs need a run duration); valid: up to 168 hours (7 days)"
)
TOO_LONG = (
    "limits.max_run_hours: 200 hours is longer than flex-start allows; valid: up to 168 hours "
    "(7 days), or flex_start: false"
)
ULTRA_ZONE = (
    "gpu_cluster.zone: 'us-central1-a' does not offer H200 141GB (a3-ultragpu-8g); valid: "
    "asia-south1-b, asia-south2-c, europe-west1-b, europe-west4-a, us-central1-b, us-east4-b, "
    "us-east5-a, us-south1-b, us-west1-c"
)

# trainers/common/deadline.py: the run stops `deadline_margin_s` before the nodes' run
# duration (limits.max_run_hours on flex-start) ends; at or past it, it never trains.
MARGIN_1800 = (
    "trainer.deadline_margin_s: 1800 s is not shorter than the flex-start run duration "
    "limits.max_run_hours sets (1800 s), so the run would stop before it trains; valid: "
    "trainer.deadline_margin_s below 1800 s, or a longer limits.max_run_hours"
)
MARGIN_3600 = (
    "trainer.deadline_margin_s: 3600 s is not shorter than the flex-start run duration "
    "limits.max_run_hours sets (1800 s), so the run would stop before it trains; valid: "
    "trainer.deadline_margin_s below 1800 s, or a longer limits.max_run_hours"
)

CASES = [
    ("spot", _stack({"flex_start": True, "spot": True}), [FLEX_SPOT]),
    ("reservation", _stack({"flex_start": True, "reservation": "r"}), [FLEX_RESERVATION]),
    (
        "gce no duration",
        # A4: gce refuses A3 High and A3 Mega (their TCPX/TCPXO fabric is not rendered there).
        _stack(
            {
                "flex_start": True,
                "backend": "gce",
                "machine_type": "a4-highgpu-8g",
                "zone": "us-central1-b",
            }
        ),
        [GCE_NO_DURATION],
    ),
    (
        "too long",
        _stack({"flex_start": True}, {"max_run_hours": 200}),
        [TOO_LONG],
    ),
    ("zone", _stack({"machine_type": "a3-ultragpu-8g"}), [ULTRA_ZONE]),
    (
        "margin at the run duration (gke)",
        {
            **_stack({"flex_start": True}, {"max_run_hours": 0.5}),
            "trainstack:trainer": {"deadline_margin_s": 1800},
        },
        [MARGIN_1800],
    ),
    (
        "margin above the run duration (gce)",
        {
            **_stack(
                {
                    "flex_start": True,
                    "backend": "gce",
                    "machine_type": "a4-highgpu-8g",
                    "zone": "us-central1-b",
                },
                {"max_run_hours": 0.5},
            ),
            "trainstack:trainer": {"deadline_margin_s": 3600},
        },
        [MARGIN_3600],
    ),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_stack(raw: dict[str, Any], expected: list[str]) -> None:
    assert _errors(raw) == expected


def test_a_margin_below_the_run_duration_loads() -> None:
    raw = _stack({"flex_start": True}, {"max_run_hours": 0.5})
    cfg = load_stack_config({**raw, "trainstack:trainer": {"deadline_margin_s": 1799}})
    assert cfg.trainer.deadline_margin_s == 1799


def test_gke_flex_start_needs_no_duration() -> None:
    # GKE's max_run_duration is optional ("Optional node_config.max_run_duration",
    # frontier.md 5.1): the stack loads.
    cfg = load_stack_config(_stack({"flex_start": True}))
    assert cfg.compute.flex_start is True


def test_component_says_the_same() -> None:
    args = {**BASE, "machine_type": "a4-highgpu-8g", "zone": "us-central1-b", "spot": False}
    args |= {"backend": "gce", "flex_start": True}
    assert a100_cluster_problems(args, prefix="") == [
        "max_run_seconds: required with gpu_cluster.flex_start on backend gce (Compute Engine "
        "flex-start VMs need a run duration); valid: up to 168 hours (7 days)"
    ]


def test_flex_start_draws_preemptible_quota() -> None:
    cfg = load_stack_config(_stack({"flex_start": True}, {"max_run_hours": 24}))
    ids = [need["quota_id"] for need in quota_needs(cfg)]
    assert ids == [
        "PREEMPTIBLE-NVIDIA-H100-MEGA-GPUS-per-project-region",
        "GPUS-ALL-REGIONS-per-project",
        "CPUS-per-project-region",
    ]


def _run(**overrides: Any) -> ProgramRun:
    args = {**BASE, "machine_type": "a3-megagpu-8g", "zone": "us-central1-a", "spot": False}
    args |= overrides

    def program() -> dict[str, Any]:
        GpuCluster("gpu", args)  # type: ignore[arg-type]
        return {}

    return run_program(program, outputs={CLUSTER: _cluster_outputs, POLICY: policy_outputs})


def test_alias() -> None:
    assert GpuCluster is A100Cluster


def test_gke_flex_start_pool() -> None:
    # One node: a plain flex-start pool (queued provisioning is for work across nodes,
    # tests/components/test_gke_queued.py).
    run = _run(flex_start=True, max_run_seconds=86400, node_count=1)
    pool = run.named("gpu-gpu-pool").inputs
    assert pool.get("nodeCount") is None
    assert pool["initialNodeCount"] == 0
    assert pool["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 1, "locationPolicy": "ANY"}
    assert pool["management"] == {"autoRepair": False, "autoUpgrade": True}
    assert pool.get("queuedProvisioning") is None
    config = pool["nodeConfig"]
    assert config["flexStart"] is True
    assert config["maxRunDuration"] == "86400s"
    assert config["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert config["guestAccelerators"][0]["type"] == "nvidia-h100-mega-80gb"
    assert config["guestAccelerators"][0]["count"] == 8


def test_gce_flex_start_template() -> None:
    run = _run(
        backend="gce",
        machine_type="a4-highgpu-8g",
        zone="us-central1-b",
        flex_start=True,
        max_run_seconds=86400,
    )
    [template] = run.of_type(TEMPLATE)
    assert template.inputs["scheduling"] == {
        "automaticRestart": False,
        "instanceTerminationAction": "DELETE",
        "maxRunDuration": {"seconds": 86400},
        "onHostMaintenance": "TERMINATE",
        "provisioningModel": "FLEX_START",
    }
    assert template.inputs["machineType"] == "a4-highgpu-8g"

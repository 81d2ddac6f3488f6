"""Every A100 cluster rule (`trainstack.components.a100_cluster.validate.a100_cluster_problems`) with
its exact message: through the component, the validator called with a prefix, a stack's
gpu_cluster section (`load_stack_config`) and `trainstack plan --config-file`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components import catalog
from trainstack.components.a100_cluster import (
    SHAPE_KEYS,
    A100Cluster,
    a100_cluster_problems,
    validate_args,
)
from trainstack.components.catalog.machines import GPU_MACHINES
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.mocks import run_program

PROJECT = "acme-ml"
ZONE = "us-central1-a"
PACKAGE_URI = "gs://acme-ml-exp-42-staging/trainers/trainstack_trainers-0123456789abcdef.tar.gz"

BASE: dict[str, Any] = {
    "project": PROJECT,
    "zone": ZONE,
    "deployment_name": "exp-42",
    "machine_type": "a2-highgpu-8g",
    "node_count": 4,
    "spot": True,
    "network_self_link": "projects/acme-ml/global/networks/exp-42-net",
    "subnetwork_self_link": "projects/acme-ml/regions/us-central1/subnetworks/exp-42-subnet",
    "node_tag": "exp-42-train-node",
    "service_account_email": "exp-42-train@acme-ml.iam.gserviceaccount.com",
    "labels": {"team": "ml"},
    "training": {"package_uri": PACKAGE_URI, "trainer_args": ["--steps=100"]},
}


def _args(**overrides: Any) -> dict[str, Any]:
    args = {**BASE, **overrides}
    return {k: v for k, v in args.items() if v is not None}


A2 = ", ".join(GPU_MACHINES)
ZONES_40 = ", ".join(catalog.A100_ZONES["A100 40GB"])
ZONES_80 = ", ".join(catalog.A100_ZONES["A100 80GB"])

# Rules a stack's gpu_cluster section can break: the same message from the component, the
# validator and the stack config.
CONFIG_CASES = [
    ({"machine_type": "a2-highgpu-3g"}, f"machine_type: 'a2-highgpu-3g' is not a known GPU machine type; valid: {A2}"),
    ({"machine_type": "a2-ultragpu-16g"}, f"machine_type: 'a2-ultragpu-16g' is not a known GPU machine type; did you mean `a2-ultragpu-1g`? valid: {A2}"),
    ({"machine_type": "n1-standard-8"}, f"machine_type: 'n1-standard-8' is not a known GPU machine type; valid: {A2}"),
    ({"machine_type": "a2-ultragpu-8g", "zone": "us-central1-b"}, f"zone: 'us-central1-b' does not offer A100 80GB (a2-ultragpu-8g); valid: {ZONES_80}"),
    ({"zone": "us-east4-c"}, f"zone: 'us-east4-c' does not offer A100 40GB (a2-highgpu-8g); valid: {ZONES_40}"),
    ({"spot": True, "reservation": "r1"}, "reservation: 'r1' cannot be used with spot: true; valid: spot: false, or no reservation"),
    ({"node_count": 0}, "node_count: 0 is too small; valid: >= 1"),
    ({"node_count": "two"}, "node_count: 'two' is not an integer; valid: a whole number"),
    # One zone: a GKE node pool zone or a zonal MIG holds 1,000 nodes (catalog.MAX_NODES).
    ({"node_count": 1001}, "node_count: 1001 is too large; valid: <= 1000"),
    ({"node_count": 1001, "compact_placement": False, "backend": "gce"}, "node_count: 1001 is too large; valid: <= 1000"),
    ({"node_count": 10**30, "compact_placement": False}, "node_count: 1000000000000000000000000000000 is too large; valid: <= 1000"),
    ({"backend": "eks"}, "backend: 'eks' is not allowed; valid: gke, gce"),
    ({"machine_type": None}, "machine_type: required"),
    ({"machine_type": "a2-highgpu-3g", "spot": True, "reservation": "r"}, f"machine_type: 'a2-highgpu-3g' is not a known GPU machine type; valid: {A2}\nreservation: 'r' cannot be used with spot: true; valid: spot: false, or no reservation"),
    ({"zone": None}, "zone: required"),
    ({"zone": 5}, "zone: 5 is not a string; valid: a string"),
    ({"node_count": 2.5}, "node_count: 2.5 is not an integer; valid: a whole number"),
    ({"spot": "maybe"}, "spot: 'maybe' is not a boolean; valid: true, false"),
    ({"spot": False, "reservation": 7}, "reservation: 7 is not a string; valid: a string"),
    ({"compact_placement": 3}, "compact_placement: 3 is not a boolean; valid: true, false"),
    ({"tier_1_networking": "fast"}, "tier_1_networking: 'fast' is not a boolean; valid: true, false"),
    ({"backend": "gce", "machine_type": "a2-ultragpu-1g", "zone": "us-central1-f", "spot": True, "reservation": "r"}, "zone: 'us-central1-f' does not offer A100 80GB (a2-ultragpu-1g); valid: " + ZONES_80 + "\nreservation: 'r' cannot be used with spot: true; valid: spot: false, or no reservation"),
]  # fmt: skip

# Rules of the component's other arguments.
COMPONENT_CASES = [
    ({"environment": "qa"}, "environment: 'qa' is not allowed; valid: dev, staging, prod"),
    ({"kubernetes_version": "1.28"}, "kubernetes_version: '1.28' is too old for the training Job; valid: >= 1.29"),
    ({"kubernetes_version": "v1.30"}, "kubernetes_version: 'v1.30' is not a version; valid: 1.N"),
    ({"release_channel": "EXTENDED"}, "release_channel: 'EXTENDED' is not allowed; valid: RAPID, REGULAR, STABLE"),
    ({"gpu_driver_version": "INSTALLATION_DISABLED"}, "gpu_driver_version: 'INSTALLATION_DISABLED' is not allowed; valid: DEFAULT, LATEST"),
    ({"system_machine_type": "a2-highgpu-1g"}, "system_machine_type: 'a2-highgpu-1g' is not a known CPU machine type; valid: n1-highcpu-16, n2-highcpu-16, n1-standard-4, n1-standard-8, e2-standard-4"),
    ({"master_authorized_cidrs": ["10.0.0.0/33"]}, "master_authorized_cidrs: '10.0.0.0/33' is not a CIDR block; valid: an address/prefix with the host bits zero, e.g. 203.0.113.0/24 or 198.51.100.7/32"),
    ({"backend": "gce", "release_channel": "RAPID"}, "release_channel: only used with backend gke"),
    ({"boot_disk_size_gb": 10}, "boot_disk_size_gb: 10 is too small; valid: an integer >= 50"),
    ({"deployment_name": ""}, "deployment_name: '' is not a non-empty string; valid: the stack's name, e.g. pulumi.get_stack()"),
    ({"zone": pulumi.Output.from_input(ZONE)}, "zone: must be a plain value, not a pulumi Output (it shapes the resources and is checked before any is registered)"),
    ({"training": {"trainer_args": []}}, "training.package_uri: required; valid: TrainerPackage.uri"),
    ({"training": {"package_uri": PACKAGE_URI, "trainer_module": "a b"}}, "training.trainer_module: 'a b' is not a Python module name"),
    ({"training": {"package_uri": PACKAGE_URI, "wait_for_completion": True}}, "training.timeout_s: required when wait_for_completion is true; valid: seconds > 0"),
    ({"backend": "gce", "training": {"package_uri": PACKAGE_URI, "trainer_module": "trainstack.trainers.tf_multiworker"}}, "training.image: required on gce for trainer_module 'trainstack.trainers.tf_multiworker'; the default Deep Learning VM image has PyTorch only; valid: an image with the trainer's framework"),
    ({"backend": "gce", "training": {"package_uri": PACKAGE_URI, "wait_for_completion": True, "timeout_s": 5}}, "training.wait_for_completion: only used with backend gke; valid: remove it\ntraining.timeout_s: only used with backend gke; valid: remove it"),
    ({"training": {"package_uri": PACKAGE_URI, "node_args": ["--launcher=torchrun", "--", "python", "t.py"], "trainer_args": ["--steps=1"]}}, "training.node_args: runs your own code, which takes no trainer_module or trainer_args; valid: remove them"),
    ({"training": {"package_uri": PACKAGE_URI, "node_args": ["--launcher=torchrun"]}}, "training.node_args: ['--launcher=torchrun'] has no '-- ARGV' (your entrypoint)"),
    ({"environment": "qa", "release_channel": "X", "node_count": 2}, "environment: 'qa' is not allowed; valid: dev, staging, prod\nrelease_channel: 'X' is not allowed; valid: RAPID, REGULAR, STABLE"),
]  # fmt: skip


def test_your_code_on_gce_needs_no_torch_module_image() -> None:
    node_args = ["--launcher=node", "--", "python", "t.py"]
    training = {"package_uri": PACKAGE_URI, "node_args": node_args}
    validate_args(_args(backend="gce", training=training))


@pytest.mark.parametrize(("overrides", "message"), CONFIG_CASES + COMPONENT_CASES)
def test_invalid_arguments(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        validate_args(_args(**overrides))
    assert str(err.value) == message


def _section(**overrides: Any) -> dict[str, Any]:
    """The stack's `gpu_cluster` section for these arguments: their shape keys only."""
    return {k: v for k, v in _args(**overrides).items() if k in SHAPE_KEYS}


def _stack_config(section: dict[str, Any]) -> dict[str, Any]:
    return {
        "gcp:project": PROJECT,
        "gcp:region": str(section.get("zone", ZONE)).rsplit("-", 1)[0],
        "trainstack:gpu_cluster": section,
    }


def _prefixed(prefix: str, message: str) -> list[str]:
    return [f"{prefix}{line}" for line in message.split("\n")]


@pytest.mark.parametrize(("overrides", "message"), CONFIG_CASES)
def test_messages_are_the_stack_configs(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_stack_config(_stack_config(_section(**overrides)))
    assert err.value.errors == _prefixed("gpu_cluster.", message)


@pytest.mark.parametrize(("overrides", "message"), CONFIG_CASES)
def test_trainstack_plan_reports_the_stack_configs_messages(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    path = tmp_path / "Pulumi.gpu.yaml"
    path.write_text(yaml.safe_dump({"config": _stack_config(_section(**overrides))}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2
    lines = _prefixed("gpu_cluster.", message)
    assert result.stderr == "".join(f"error: stack 'gpu': {line}\n" for line in lines)


@pytest.mark.parametrize(("overrides", "message"), CONFIG_CASES + COMPONENT_CASES)
def test_validator_reports_under_the_callers_prefix(
    overrides: dict[str, Any], message: str
) -> None:
    assert a100_cluster_problems(_args(**overrides), prefix="clusters.gpu.") == _prefixed(
        "clusters.gpu.", message
    )


@pytest.mark.parametrize(("overrides", "message"), CONFIG_CASES)
def test_validator_on_a_stack_section(overrides: dict[str, Any], message: str) -> None:
    problems = a100_cluster_problems(_section(**overrides), prefix="gpu_cluster.", shape_only=True)
    assert problems == _prefixed("gpu_cluster.", message)


def test_validator_exact_messages() -> None:
    section = {
        "machine_type": "a2-highgpu-8g",
        "zone": "us-east4-c",
        "spot": True,
        "reservation": "r1",
    }
    assert a100_cluster_problems(section, prefix="gpu_cluster.", shape_only=True) == [
        "gpu_cluster.zone: 'us-east4-c' does not offer A100 40GB (a2-highgpu-8g); valid: "
        "asia-northeast1-a, asia-northeast1-c, asia-northeast3-a, asia-northeast3-b, "
        "asia-southeast1-a, asia-southeast1-b, asia-southeast1-c, europe-west4-a, "
        "europe-west4-b, me-west1-a, me-west1-c, us-central1-a, us-central1-b, us-central1-c, "
        "us-central1-f, us-east1-b, us-west1-b, us-west3-b, us-west4-b",
        "gpu_cluster.reservation: 'r1' cannot be used with spot: true; valid: spot: false, or "
        "no reservation",
    ]
    args = {**_args(), "backend": "gce", "node_count": 0, "release_channel": "RAPID"}
    assert a100_cluster_problems(args, prefix="cluster.") == [
        "cluster.node_count: 0 is too small; valid: >= 1"
    ]
    args = {**_args(), "backend": "gce", "environment": "qa", "release_channel": "RAPID"}
    assert a100_cluster_problems(args, prefix="cluster.") == [
        "cluster.environment: 'qa' is not allowed; valid: dev, staging, prod",
        "cluster.release_channel: only used with backend gke",
    ]


def test_shape_only_checks_the_shape_alone() -> None:
    section = {"machine_type": "a2-highgpu-8g", "zone": ZONE}
    assert a100_cluster_problems(section, prefix="gpu_cluster.", shape_only=True) == []
    # The component needs its deployment_name; a stack's section never has one.
    assert a100_cluster_problems(section, prefix="") == [
        "deployment_name: None is not a non-empty string; valid: the stack's name, e.g. pulumi.get_stack()"
    ]
    component_only = {**section, "release_channel": "X", "environment": "qa"}
    assert a100_cluster_problems(component_only, prefix="gpu_cluster.", shape_only=True) == []


def test_a_zone_outside_the_region_is_reported_once() -> None:
    config = {**_stack_config(_section(zone="us-east4-c")), "gcp:region": "us-central1"}
    with pytest.raises(ConfigError) as err:
        load_stack_config(config)
    assert err.value.errors == [
        "gpu_cluster.zone: 'us-east4-c' is not in gcp:region 'us-central1'; valid: a zone named "
        "us-central1-<zone>"
    ]


@pytest.mark.parametrize(
    ("machine_type", "zone", "node_count", "overrides"),
    [
        ("a2-highgpu-1g", "us-central1-f", 1, {}),
        ("a2-highgpu-8g", "europe-west4-b", 16, {"spot": False, "reservation": "res-1"}),
        ("a2-megagpu-16g", "asia-southeast1-a", 2, {"tier_1_networking": True}),
        ("a2-ultragpu-1g", "us-east5-b", 1, {"backend": "gce"}),
        ("a2-ultragpu-8g", "us-central1-c", 1000, {}),
        ("a2-ultragpu-8g", "europe-west4-a", 1000, {"compact_placement": False, "backend": "gce"}),
    ],
)
def test_valid_combinations(
    machine_type: str, zone: str, node_count: int, overrides: dict[str, Any]
) -> None:
    gpu = validate_args(
        _args(machine_type=machine_type, zone=zone, node_count=node_count, **overrides)
    )
    machine = catalog.A2_MACHINES[machine_type]
    assert (gpu.machine_type, gpu.zone, gpu.node_count) == (machine_type, zone, node_count)
    assert gpu.total_gpus == machine.gpus * node_count


def test_invalid_arguments_register_nothing() -> None:
    def program() -> None:
        with contextlib.suppress(ValueError):
            A100Cluster("gpu", _args(zone="us-east4-c"))  # type: ignore[arg-type]

    assert run_program(program).resources == []

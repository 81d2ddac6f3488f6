"""A100Cluster under Pulumi mocks: validation (`a100_cluster_problems`, the same rules and
messages for the component, a stack's gpu_cluster section and `trainstack plan`), then
exactly what each backend registers: GKE cluster, system and GPU node pools, the Kubernetes
provider and training Job; or Compute Engine instances in a placement policy with the
startup script."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pulumi
import pytest
import yaml
from typer.testing import CliRunner

from components import a100_cluster
from components.a100_cluster import (
    DLVM_IMAGE,
    KUBERNETES_VERSION,
    SHAPE_KEYS,
    TOKEN,
    A100Cluster,
    a100_cluster_problems,
    validate_args,
)
from components.gpu_startup import gce_startup_script, render_launcher
from components.kubernetes_training_job import TOKEN as JOB_TOKEN
from infra import catalog
from infra.cli import app
from infra.config import ConfigError, load_stack_config
from infra.mocks import SECRET, ProgramRun, run_program

PROJECT = "acme-ml"
ZONE = "us-central1-a"
GSA = "exp-42-train@acme-ml.iam.gserviceaccount.com"
NET = "https://www.googleapis.com/compute/v1/projects/acme-ml/global/networks/exp-42-net"
SUBNET = (
    "https://www.googleapis.com/compute/v1/projects/acme-ml/regions/us-central1/"
    "subnetworks/exp-42-subnet"
)
TAG = "exp-42-train-node"
PACKAGE_URI = "gs://acme-ml-exp-42-staging/trainers/trainstack_trainers-0123456789abcdef.tar.gz"
CHECKPOINTS = "gs://acme-ml-exp-42-checkpoints"
FLAGS = ["--steps=100", f"--checkpoint_dir={CHECKPOINTS}/checkpoints"]
ENDPOINT = "34.123.45.67"
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"
LABELS = {"component": "a100-cluster", "managed-by": "trainstack", "team": "ml"}
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
POLICY_LINK = (
    "https://www.googleapis.com/compute/v1/projects/acme-ml/regions/us-central1/"
    "resourcePolicies/exp-42-a100-placement"
)

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
K8S_PROVIDER = "pulumi:providers:kubernetes"
INSTANCE = "gcp:compute/instance:Instance"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"

BASE: dict[str, Any] = {
    "project": PROJECT,
    "zone": ZONE,
    "deployment_name": "exp-42",
    "machine_type": "a2-highgpu-8g",
    "node_count": 4,
    "spot": True,
    "network_self_link": NET,
    "subnetwork_self_link": SUBNET,
    "node_tag": TAG,
    "service_account_email": GSA,
    "labels": {"team": "ml"},
    "training": {
        "package_uri": PACKAGE_URI,
        "trainer_args": ["--steps=100"],
        "checkpoint_url": CHECKPOINTS,
    },
}


def _cluster_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    return {"endpoint": ENDPOINT, "masterAuth": {"clusterCaCertificate": CA}}


def _policy_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{inputs['project']}/"
        f"regions/{inputs['region']}/resourcePolicies/{inputs['name']}"
    }


def _args(**overrides: Any) -> dict[str, Any]:
    args = {**BASE, **overrides}
    return {k: v for k, v in args.items() if v is not None}


def _run(**overrides: Any) -> ProgramRun:
    args = _args(**overrides)

    def program() -> dict[str, Any]:
        cluster = A100Cluster("gpu", args)  # type: ignore[arg-type]
        return {
            "cluster_name": cluster.cluster_name,
            "endpoint": cluster.endpoint,
            "node_pool_name": cluster.node_pool_name,
            "kubeconfig": cluster.kubeconfig,
            "kubeconfig_secret": cluster.kubeconfig.is_secret() if cluster.kubeconfig else None,
            "job_name": cluster.job_name,
            "instance_names": cluster.instance_names,
            "console_url": cluster.console_url,
            "gpus": cluster.total_gpus,
        }

    return run_program(
        program,
        outputs={CLUSTER: _cluster_outputs, POLICY: _policy_outputs},
    )


def _shape(run: ProgramRun) -> list[tuple[str, str, str]]:
    return sorted((r.type, r.name, str(r.parent)) for r in run.resources)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------

A2 = ", ".join(catalog.A2_MACHINES)
ZONES_40 = ", ".join(catalog.A100_ZONES["A100 40GB"])
ZONES_80 = ", ".join(catalog.A100_ZONES["A100 80GB"])

# Cases whose message comes from infra.config (the stack's gpu_cluster checks).
CONFIG_CASES = [
    ({"machine_type": "a2-highgpu-3g"}, f"machine_type: 'a2-highgpu-3g' is not a known A2 machine type; valid: {A2}"),
    ({"machine_type": "a2-ultragpu-16g"}, f"machine_type: 'a2-ultragpu-16g' is not a known A2 machine type; valid: {A2}"),
    ({"machine_type": "n1-standard-8"}, f"machine_type: 'n1-standard-8' is not a known A2 machine type; valid: {A2}"),
    ({"machine_type": "a2-ultragpu-8g", "zone": "us-central1-b"}, f"zone: 'us-central1-b' does not offer A100 80GB (a2-ultragpu-8g); valid: {ZONES_80}"),
    ({"zone": "us-east4-c"}, f"zone: 'us-east4-c' does not offer A100 40GB (a2-highgpu-8g); valid: {ZONES_40}"),
    ({"spot": True, "reservation": "r1"}, "reservation: 'r1' cannot be used with spot: true; valid: spot: false, or no reservation"),
    ({"node_count": 0}, "node_count: 0 is too small; expected >= 1"),
    ({"node_count": "two"}, "node_count: 'two' is not an integer"),
    ({"node_count": 1501}, "node_count: 1501 exceeds the compact placement limit of 1500 nodes; valid: 1 to 1500, or compact_placement: false"),
    ({"backend": "eks"}, "backend: 'eks' is not allowed; valid: gke, gce"),
    ({"machine_type": None}, "machine_type: required"),
    ({"machine_type": "a2-highgpu-3g", "spot": True, "reservation": "r"}, f"machine_type: 'a2-highgpu-3g' is not a known A2 machine type; valid: {A2}\nreservation: 'r' cannot be used with spot: true; valid: spot: false, or no reservation"),
    ({"zone": None}, "zone: required"),
    ({"zone": 5}, "zone: 5 is not a string"),
    ({"node_count": 2.5}, "node_count: 2.5 is not an integer"),
    ({"spot": "maybe"}, "spot: 'maybe' is not a boolean; valid: true, false"),
    ({"spot": False, "reservation": 7}, "reservation: 7 is not a string"),
    ({"compact_placement": 3}, "compact_placement: 3 is not a boolean; valid: true, false"),
    ({"tier_1_networking": "fast"}, "tier_1_networking: 'fast' is not a boolean; valid: true, false"),
    ({"backend": "gce", "machine_type": "a2-ultragpu-1g", "zone": "us-central1-f", "node_count": 1600}, "zone: 'us-central1-f' does not offer A100 80GB (a2-ultragpu-1g); valid: " + ZONES_80 + "\nnode_count: 1600 exceeds the compact placement limit of 1500 nodes; valid: 1 to 1500, or compact_placement: false"),
]  # fmt: skip

COMPONENT_CASES = [
    ({"environment": "qa"}, "environment: 'qa' is not allowed; valid: dev, staging, prod"),
    ({"kubernetes_version": "1.28"}, "kubernetes_version: '1.28' is too old for the training Job; expected >= 1.29"),
    ({"kubernetes_version": "v1.30"}, "kubernetes_version: 'v1.30' is not a version; expected 1.N"),
    ({"release_channel": "EXTENDED"}, "release_channel: 'EXTENDED' is not allowed; valid: RAPID, REGULAR, STABLE"),
    ({"gpu_driver_version": "INSTALLATION_DISABLED"}, "gpu_driver_version: 'INSTALLATION_DISABLED' is not allowed; valid: DEFAULT, LATEST"),
    ({"system_machine_type": "a2-highgpu-1g"}, "system_machine_type: 'a2-highgpu-1g' is not a known CPU machine type; valid: n1-highcpu-16, n2-highcpu-16, n1-standard-4, n1-standard-8, e2-standard-4"),
    ({"master_authorized_cidrs": ["10.0.0.0/33"]}, "master_authorized_cidrs: '10.0.0.0/33' is not a CIDR block"),
    ({"backend": "gce", "release_channel": "RAPID"}, "release_channel: only used with backend gke"),
    ({"boot_disk_size_gb": 10}, "boot_disk_size_gb: 10 is too small; expected an integer >= 50"),
    ({"deployment_name": ""}, "deployment_name: '' is not a non-empty string"),
    ({"zone": pulumi.Output.from_input(ZONE)}, "zone: must be a plain value, not a pulumi Output (it shapes the resources and is checked before any is registered)"),
    ({"training": {"trainer_args": []}}, "training.package_uri: required (TrainerPackage.uri)"),
    ({"training": {"package_uri": PACKAGE_URI, "trainer_module": "a b"}}, "training.trainer_module: 'a b' is not a Python module name"),
    ({"training": {"package_uri": PACKAGE_URI, "wait_for_completion": True}}, "training.timeout_s: required when wait_for_completion is true"),
    ({"backend": "gce", "training": {"package_uri": PACKAGE_URI, "trainer_module": "trainers.tf_multiworker"}}, "training.image: required on gce for trainer_module 'trainers.tf_multiworker'; the default Deep Learning VM image has PyTorch only"),
    ({"backend": "gce", "training": {"package_uri": PACKAGE_URI, "wait_for_completion": True, "timeout_s": 5}}, "training.wait_for_completion: only used with backend gke\ntraining.timeout_s: only used with backend gke"),
    ({"environment": "qa", "release_channel": "X", "node_count": 2}, "environment: 'qa' is not allowed; valid: dev, staging, prod\nrelease_channel: 'X' is not allowed; valid: RAPID, REGULAR, STABLE"),
]  # fmt: skip


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
    assert result.stderr == "error: invalid stack config for 'gpu':\n" + "\n".join(lines) + "\n"


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
        "cluster.node_count: 0 is too small; expected >= 1"
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
        "deployment_name: None is not a non-empty string"
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
        ("a2-ultragpu-8g", "us-central1-c", 1500, {}),
        ("a2-ultragpu-8g", "europe-west4-a", 1501, {"compact_placement": False}),
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


# --------------------------------------------------------------------------------------
# gke
# --------------------------------------------------------------------------------------

EXPECTED_CLUSTER: dict[str, Any] = {
    "project": PROJECT,
    "location": ZONE,
    "name": "exp-42-a100",
    "network": NET,
    "subnetwork": SUBNET,
    "networkingMode": "VPC_NATIVE",
    "ipAllocationPolicy": {"clusterIpv4CidrBlock": "/14", "servicesIpv4CidrBlock": "/20"},
    "privateClusterConfig": {"enablePrivateNodes": True, "enablePrivateEndpoint": False},
    "workloadIdentityConfig": {"workloadPool": "acme-ml.svc.id.goog"},
    "releaseChannel": {"channel": "REGULAR"},
    "minMasterVersion": KUBERNETES_VERSION,
    "deletionProtection": False,
    "removeDefaultNodePool": True,
    "initialNodeCount": 1,
    "nodeConfig": {
        "serviceAccount": GSA,
        "oauthScopes": [SCOPE],
        "workloadMetadataConfig": {"mode": "GKE_METADATA"},
    },
    "resourceLabels": LABELS,
}

NODE_COMMON: dict[str, Any] = {
    "imageType": "COS_CONTAINERD",
    "serviceAccount": GSA,
    "oauthScopes": [SCOPE],
    "workloadMetadataConfig": {"mode": "GKE_METADATA"},
    "shieldedInstanceConfig": {"enableSecureBoot": True, "enableIntegrityMonitoring": True},
    "resourceLabels": LABELS,
    "tags": [TAG],
}

EXPECTED_SYSTEM_POOL: dict[str, Any] = {
    "project": PROJECT,
    "location": ZONE,
    "cluster": "exp-42-a100",
    "name": "system",
    "nodeCount": 1,
    "management": {"autoRepair": True, "autoUpgrade": True},
    "nodeConfig": {**NODE_COMMON, "machineType": "e2-standard-4"},
}

EXPECTED_GPU_POOL: dict[str, Any] = {
    "project": PROJECT,
    "location": ZONE,
    "cluster": "exp-42-a100",
    "name": "a100",
    "nodeCount": 4,
    "management": {"autoRepair": True, "autoUpgrade": True},
    "upgradeSettings": {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1},
    "placementPolicy": {"type": "COMPACT"},
    "nodeConfig": {
        **NODE_COMMON,
        "machineType": "a2-highgpu-8g",
        "guestAccelerators": [
            {
                "type": "nvidia-tesla-a100",
                "count": 8,
                "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
            }
        ],
        "gvnic": {"enabled": True},
        "spot": True,
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}],
        "diskType": "pd-ssd",
        "diskSizeGb": 200,
    },
}


def test_gke_children() -> None:
    run = _run()
    assert _shape(run) == sorted(
        [
            (TOKEN, "gpu", "None"),
            (CLUSTER, "gpu-cluster", "gpu"),
            (NODE_POOL, "gpu-system-pool", "gpu"),
            (NODE_POOL, "gpu-gpu-pool", "gpu"),
            (K8S_PROVIDER, "gpu-k8s", "gpu"),
            (JOB_TOKEN, "gpu-training", "gpu"),
            ("kubernetes:core/v1:ServiceAccount", "gpu-training-ksa", "gpu-training"),
            ("gcp:serviceaccount/iAMMember:IAMMember", "gpu-training-wi", "gpu-training"),
            ("kubernetes:core/v1:Service", "gpu-training-service", "gpu-training"),
            ("kubernetes:batch/v1:Job", "gpu-training-job", "gpu-training"),
        ]
    )


def test_gke_cluster_and_node_pools() -> None:
    run = _run()
    assert run.named("gpu-cluster").inputs == EXPECTED_CLUSTER
    assert run.named("gpu-system-pool").inputs == EXPECTED_SYSTEM_POOL
    assert run.named("gpu-gpu-pool").inputs == EXPECTED_GPU_POOL
    assert run.named("gpu-k8s").inputs == {"kubeconfig": SECRET, "deleteUnreachable": "true"}


def test_gke_outputs_and_kubeconfig() -> None:
    outputs = _run().outputs
    kubeconfig = yaml.safe_load(outputs.pop("kubeconfig"))
    assert outputs == {
        "cluster_name": "exp-42-a100",
        "endpoint": ENDPOINT,
        "node_pool_name": "a100",
        "kubeconfig_secret": True,
        "job_name": "exp-42-train",
        "instance_names": None,
        "console_url": "https://console.cloud.google.com/kubernetes/clusters/details/"
        "us-central1-a/exp-42-a100/details?project=acme-ml",
        "gpus": 32,
    }
    context = "gke_acme-ml_us-central1-a_exp-42-a100"
    assert kubeconfig == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": f"https://{ENDPOINT}", "certificate-authority-data": CA},
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
        "users": [
            {
                "name": context,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "gke-gcloud-auth-plugin",
                        "installHint": "Install gke-gcloud-auth-plugin: gcloud components "
                        "install gke-gcloud-auth-plugin",
                        "provideClusterInfo": True,
                    }
                },
            }
        ],
    }


def test_gke_training_job() -> None:
    run = _run()
    job = run.named("gpu-training-job")
    pod = job.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        "cloud.google.com/gke-nodepool": "a100",
    }
    assert pod["serviceAccountName"] == "exp-42-train"
    container = pod["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert container["command"][2] == render_launcher(
        platform="gke",
        package_uri=PACKAGE_URI,
        module="trainers.torch_ddp",
        trainer_args=FLAGS,
        num_nodes=4,
        procs_per_node=8,
        coordinator="exp-42-train-0.exp-42-train",
    )
    assert job.inputs["metadata"]["labels"] == {
        "component": "kubernetes-training-job",
        "managed-by": "trainstack",
        "team": "ml",
    }
    assert run.named("gpu-training-wi").inputs["member"] == (
        "serviceAccount:acme-ml.svc.id.goog[default/exp-42-train]"
    )
    # Destroy removes the Job (and its pods) before the nodes they run on.
    pools = {run.named("gpu-system-pool").urn, run.named("gpu-gpu-pool").urn}
    for child in ("gpu-training-ksa", "gpu-training-service", "gpu-training-job"):
        assert pools <= set(run.named(child).dependencies), child


def test_gke_job_manifests_validate_for_the_cluster_version() -> None:
    run = _run()
    for name in ("gpu-training-ksa", "gpu-training-service", "gpu-training-job"):
        manifest = _integers(run.named(name).inputs)
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("overrides", "path", "expected"),
    [
        ({"spot": False, "reservation": "a100-res"}, ("gpu-gpu-pool", "nodeConfig", "reservationAffinity"), {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name", "values": ["a100-res"]}),
        ({"spot": False}, ("gpu-gpu-pool", "nodeConfig", "spot"), False),
        ({"tier_1_networking": True}, ("gpu-gpu-pool", "networkConfig"), {"networkPerformanceConfig": {"totalEgressBandwidthTier": "TIER_1"}}),
        ({"compact_placement": False}, ("gpu-gpu-pool", "placementPolicy"), None),
        ({"gpu_driver_version": "DEFAULT"}, ("gpu-gpu-pool", "nodeConfig", "guestAccelerators"), [{"type": "nvidia-tesla-a100", "count": 8, "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"}}]),
        ({"machine_type": "a2-ultragpu-4g"}, ("gpu-gpu-pool", "nodeConfig", "guestAccelerators"), [{"type": "nvidia-a100-80gb", "count": 4, "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}]),
        ({"environment": "prod"}, ("gpu-cluster", "deletionProtection"), True),
        ({"environment": "staging"}, ("gpu-cluster", "deletionProtection"), False),
        ({"kubernetes_version": "1.33", "release_channel": "STABLE"}, ("gpu-cluster", "releaseChannel"), {"channel": "STABLE"}),
        ({"master_authorized_cidrs": ["203.0.113.0/24"]}, ("gpu-cluster", "masterAuthorizedNetworksConfig"), {"cidrBlocks": [{"cidrBlock": "203.0.113.0/24", "displayName": "authorized-0"}]}),
        ({"system_machine_type": "n1-standard-4"}, ("gpu-system-pool", "nodeConfig", "machineType"), "n1-standard-4"),
        ({"boot_disk_size_gb": 500}, ("gpu-gpu-pool", "nodeConfig", "diskSizeGb"), 500),
    ],
)  # fmt: skip
def test_gke_options(overrides: dict[str, Any], path: tuple[str, ...], expected: Any) -> None:
    run = _run(**overrides)
    value: Any = run.named(path[0]).inputs
    for key in path[1:]:
        value = value.get(key)
    assert value == expected


def test_gke_without_training_provisions_only() -> None:
    run = _run(training=None)
    assert {r.type for r in run.resources} == {TOKEN, CLUSTER, NODE_POOL, K8S_PROVIDER}
    assert run.outputs["job_name"] is None


def test_gke_wait_for_completion_reaches_the_job() -> None:
    training = {**BASE["training"], "wait_for_completion": True, "timeout_s": 7200}
    job = _run(training=training).named("gpu-training-job")
    assert job.inputs["metadata"]["annotations"] == {
        "pulumi.com/deletionPropagationPolicy": "foreground"
    }


# --------------------------------------------------------------------------------------
# gce
# --------------------------------------------------------------------------------------


def _instance(rank: int, **changes: Any) -> dict[str, Any]:
    instance: dict[str, Any] = {
        "project": PROJECT,
        "zone": ZONE,
        "name": f"exp-42-a100-{rank}",
        "machineType": "a2-highgpu-8g",
        "bootDisk": {
            "autoDelete": True,
            "initializeParams": {
                "image": DLVM_IMAGE,
                "size": 200,
                "type": "pd-ssd",
                "labels": LABELS,
            },
        },
        "networkInterfaces": [{"network": NET, "subnetwork": SUBNET, "nicType": "GVNIC"}],
        "scheduling": {
            "provisioningModel": "SPOT",
            "preemptible": True,
            "automaticRestart": False,
            "onHostMaintenance": "TERMINATE",
            "instanceTerminationAction": "STOP",
        },
        "resourcePolicies": POLICY_LINK,
        "serviceAccount": {"email": GSA, "scopes": [SCOPE]},
        "metadata": {"trainstack-node-rank": str(rank), "enable-oslogin": "TRUE"},
        "metadataStartupScript": _startup_script(),
        "tags": [TAG],
        "labels": LABELS,
        "allowStoppingForUpdate": True,
    }
    instance.update(changes)
    return {k: v for k, v in instance.items() if v is not None}


def _startup_script(**overrides: Any) -> str:
    values: dict[str, Any] = {
        "package_uri": PACKAGE_URI,
        "module": "trainers.torch_ddp",
        "trainer_args": FLAGS,
        "num_nodes": 4,
        "procs_per_node": 8,
        "coordinator": "exp-42-a100-0",
        **overrides,
    }
    values["worker_hosts"] = [f"exp-42-a100-{i}" for i in range(values["num_nodes"])]
    return gce_startup_script(**values)


def test_gce_children_and_outputs() -> None:
    run = _run(backend="gce")
    assert _shape(run) == sorted(
        [
            (TOKEN, "gpu", "None"),
            (POLICY, "gpu-placement", "gpu"),
            *((INSTANCE, f"gpu-{i}", "gpu") for i in range(4)),
        ]
    )
    assert run.outputs == {
        "cluster_name": "exp-42-a100",
        "endpoint": None,
        "node_pool_name": None,
        "kubeconfig": None,
        "kubeconfig_secret": None,
        "job_name": None,
        "instance_names": [f"exp-42-a100-{i}" for i in range(4)],
        "console_url": "https://console.cloud.google.com/compute/instances?project=acme-ml",
        "gpus": 32,
    }


def test_gce_placement_policy_and_instances() -> None:
    run = _run(backend="gce")
    assert run.named("gpu-placement").inputs == {
        "project": PROJECT,
        "region": "us-central1",
        "name": "exp-42-a100-placement",
        "description": "trainstack: A100 nodes of one training cluster, collocated",
        "groupPlacementPolicy": {"collocation": "COLLOCATED", "vmCount": 4},
    }
    for rank in range(4):
        instance = run.named(f"gpu-{rank}")
        assert instance.inputs == _instance(rank)
        assert instance.delete_before_replace
        assert "accessConfigs" not in instance.inputs["networkInterfaces"][0]  # no public IP


@pytest.mark.parametrize(
    ("overrides", "changes"),
    [
        ({"spot": False}, {"scheduling": {"provisioningModel": "STANDARD", "preemptible": False, "automaticRestart": True, "onHostMaintenance": "TERMINATE"}}),
        ({"spot": False, "reservation": "a100-res"}, {"scheduling": {"provisioningModel": "STANDARD", "preemptible": False, "automaticRestart": True, "onHostMaintenance": "TERMINATE"}, "reservationAffinity": {"type": "SPECIFIC_RESERVATION", "specificReservation": {"key": "compute.googleapis.com/reservation-name", "values": ["a100-res"]}}}),
        ({"tier_1_networking": True}, {"networkPerformanceConfig": {"totalEgressBandwidthTier": "TIER_1"}}),
        ({"compact_placement": False}, {"resourcePolicies": None}),
        ({"training": None}, {"metadataStartupScript": None}),
        ({"training": {**BASE["training"], "trainer_module": "trainers.tf_multiworker", "image": "projects/acme/global/images/tf-gpu"}}, {"metadataStartupScript": _startup_script(module="trainers.tf_multiworker", procs_per_node=1), "bootDisk": {"autoDelete": True, "initializeParams": {"image": "projects/acme/global/images/tf-gpu", "size": 200, "type": "pd-ssd", "labels": LABELS}}}),
    ],
)  # fmt: skip
def test_gce_options(overrides: dict[str, Any], changes: dict[str, Any]) -> None:
    run = _run(backend="gce", **overrides)
    assert run.named("gpu-3").inputs == _instance(3, **changes)
    assert (POLICY in {r.type for r in run.resources}) == (overrides.get("compact_placement", True))


def test_gce_single_node_has_no_placement_policy() -> None:
    run = _run(backend="gce", node_count=1)
    assert {r.type for r in run.resources} == {TOKEN, INSTANCE}
    assert run.named("gpu-0").inputs == _instance(
        0, resourcePolicies=None, metadataStartupScript=_startup_script(num_nodes=1)
    )


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _integers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def test_job_name_leaves_room_for_the_pod_index() -> None:
    long = "d" * 70
    name = a100_cluster.job_name_for(long, 1000)
    assert len(f"{name}-999") == 63
    assert a100_cluster.job_name_for("exp-42", 4) == "exp-42-train"


def test_region_of() -> None:
    assert a100_cluster.region_of("europe-west4-b") == "europe-west4"

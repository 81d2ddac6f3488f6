"""A100Cluster under Pulumi mocks: exactly what each backend registers: GKE cluster, system
and GPU node pools, the Kubernetes provider and training Job; or Compute Engine instances in
a placement policy with the startup script. Its validation: test_a100_cluster_validate.py."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from trainstack.components import a100_cluster
from trainstack.components._pod_setup import pod_command
from trainstack.components.a100_cluster import (
    DLVM_IMAGE,
    KUBERNETES_VERSION,
    TOKEN,
    A100Cluster,
)
from trainstack.components.gpu_startup import gce_startup_script
from trainstack.components.kubernetes_training_job import TOKEN as JOB_TOKEN
from trainstack.components.kubernetes_training_job import node_argv
from trainstack.infra.mocks import SECRET, ProgramRun, run_program

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
FLAGS = ["--steps=100", f"--checkpoint_dir={CHECKPOINTS}/checkpoints/run"]
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
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
GROUP = "gcp:compute/instanceGroupManager:InstanceGroupManager"
NODE_CONFIG = "gcp:compute/perInstanceConfig:PerInstanceConfig"
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
    "maintenancePolicy": {  # no node upgrade takes a GPU node down during a run
        "dailyMaintenanceWindow": {"startTime": "03:00"},
        "maintenanceExclusions": [
            {
                "exclusionName": "trainstack-no-node-upgrades",
                "startTime": "2026-01-01T00:00:00Z",
                "exclusionOptions": {
                    "scope": "NO_MINOR_OR_NODE_UPGRADES",
                    "endTimeBehavior": "UNTIL_END_OF_SUPPORT",
                },
            }
        ],
    },
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
    assert container["command"] == pod_command()
    assert container["args"] == node_argv("trainstack.trainers.torch_ddp", FLAGS)
    assert {"name": "TRAINSTACK_PACKAGE_URI", "value": PACKAGE_URI} in container["env"]
    assert {"name": "TRAINSTACK_NUM_NODES", "value": "4"} in container["env"]
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


def _template(**changes: Any) -> dict[str, Any]:
    template: dict[str, Any] = {
        "project": PROJECT,
        "namePrefix": "exp-42-a100-",
        "description": "trainstack: A100 training node",
        "machineType": "a2-highgpu-8g",
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "sourceImage": DLVM_IMAGE,
                "diskSizeGb": 200,
                "diskType": "pd-ssd",
                "labels": LABELS,
            }
        ],
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
        "metadata": {"enable-oslogin": "TRUE"},
        "metadataStartupScript": _startup_script(),
        "tags": [TAG],
        "labels": LABELS,
    }
    template.update(changes)
    return {k: v for k, v in template.items() if v is not None}


def _group(node_count: int = 4) -> dict[str, Any]:
    return {
        "project": PROJECT,
        "zone": ZONE,
        "name": "exp-42-a100",
        "description": "trainstack: A100 training nodes, recreated when one stops",
        "baseInstanceName": "exp-42-a100",
        # The template's self link is known only after deploy.
        "versions": [{"name": "trainer", "instanceTemplate": "(known after deploy)"}],
        # No targetSize: each node config adds its VM (tests/fidelity/test_gce_group_count.py).
        "instanceLifecyclePolicy": {
            "defaultActionOnFailure": "REPAIR",
            "forceUpdateOnRepair": "YES",
        },
        "updatePolicy": {
            "type": "PROACTIVE",
            "minimalAction": "REPLACE",
            "replacementMethod": "RECREATE",
            "maxSurgeFixed": 0,
            "maxUnavailableFixed": node_count,
        },
        "waitForInstances": False,
    }


def _node_config(rank: int) -> dict[str, Any]:
    return {
        "project": PROJECT,
        "zone": ZONE,
        "instanceGroupManager": "exp-42-a100",
        "name": f"exp-42-a100-{rank}",
        "preservedState": {"metadata": {"trainstack-node-rank": str(rank)}},
        "minimalAction": "REPLACE",
        "mostDisruptiveAllowedAction": "REPLACE",
        "removeInstanceOnDestroy": True,
    }


def _startup_script(**overrides: Any) -> str:
    values: dict[str, Any] = {
        "package_uri": PACKAGE_URI,
        "module": "trainstack.trainers.torch_ddp",
        "trainer_args": FLAGS,
        "num_nodes": 4,
        "procs_per_node": 8,
        "accelerators_per_node": 8,
        "coordinator": "exp-42-a100-0",
        # The run's records go beside the checkpoints (`run_record_uri`).
        "checkpoint_url": CHECKPOINTS,
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
            (TEMPLATE, "gpu-template", "gpu"),
            (GROUP, "gpu-group", "gpu"),
            *((NODE_CONFIG, f"gpu-{i}", "gpu") for i in range(4)),
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


def test_gce_placement_policy_template_group_and_node_configs() -> None:
    run = _run(backend="gce")
    assert run.named("gpu-placement").inputs == {
        "project": PROJECT,
        "region": "us-central1",
        "name": "exp-42-a100-placement",
        "description": "trainstack: A100 nodes of one training cluster, collocated",
        "groupPlacementPolicy": {"collocation": "COLLOCATED"},
    }
    assert _integers(run.named("gpu-template").inputs) == _template()
    assert _integers(run.named("gpu-group").inputs) == _group()
    for rank in range(4):
        assert run.named(f"gpu-{rank}").inputs == _node_config(rank)
    # A replacement keeps the names: the engine deletes the old group and VMs first.
    # Sorted: the configs register once the group's name resolves, in no fixed order.
    assert sorted(r.name for r in run.resources if r.delete_before_replace) == [
        *(f"gpu-{rank}" for rank in range(4)),
        "gpu-group",
    ]
    assert "accessConfigs" not in run.named("gpu-template").inputs["networkInterfaces"][0]


def test_gce_placement_policy_is_the_same_for_every_node_count() -> None:
    # No vmCount (`catalog.recovery.COMPACT_PLACEMENT_WITHOUT_VM_COUNT_SOURCE`): the group
    # creates and repairs its VMs one at a time, so a policy that waits for exactly N VMs
    # created together would not fit it, and a new node_count changes nothing here.
    placements = [
        _run(backend="gce", node_count=count).named("gpu-placement").inputs for count in (2, 4, 8)
    ]
    assert placements == [placements[0]] * 3
    assert placements[0]["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}


@pytest.mark.parametrize(
    ("overrides", "changes"),
    [
        ({"spot": False}, {"scheduling": {"provisioningModel": "STANDARD", "preemptible": False, "automaticRestart": True, "onHostMaintenance": "TERMINATE"}}),
        ({"spot": False, "reservation": "a100-res"}, {"scheduling": {"provisioningModel": "STANDARD", "preemptible": False, "automaticRestart": True, "onHostMaintenance": "TERMINATE"}, "reservationAffinity": {"type": "SPECIFIC_RESERVATION", "specificReservation": {"key": "compute.googleapis.com/reservation-name", "values": ["a100-res"]}}}),
        ({"tier_1_networking": True}, {"networkPerformanceConfig": {"totalEgressBandwidthTier": "TIER_1"}}),
        ({"compact_placement": False}, {"resourcePolicies": None}),
        ({"training": None}, {"metadataStartupScript": None}),
        # The run limit is the launcher's: no maxRunDuration, which the group would undo.
        ({"max_run_seconds": 7200}, {"metadataStartupScript": _startup_script(max_run_seconds=7200, checkpoint_url=CHECKPOINTS)}),
        ({"training": {**BASE["training"], "trainer_module": "trainstack.trainers.tf_multiworker", "image": "projects/acme/global/images/tf-gpu"}}, {"metadataStartupScript": _startup_script(module="trainstack.trainers.tf_multiworker", procs_per_node=1), "disks": [{"boot": True, "autoDelete": True, "sourceImage": "projects/acme/global/images/tf-gpu", "diskSizeGb": 200, "diskType": "pd-ssd", "labels": LABELS}]}),
    ],
)  # fmt: skip
def test_gce_options(overrides: dict[str, Any], changes: dict[str, Any]) -> None:
    run = _run(backend="gce", **overrides)
    assert _integers(run.named("gpu-template").inputs) == _template(**changes)
    assert (POLICY in {r.type for r in run.resources}) == (overrides.get("compact_placement", True))


USER_NODE_ARGS = [
    "--launcher=torchrun",
    f"--env=TRAINSTACK_CHECKPOINT_DIR={CHECKPOINTS}/checkpoints",
    "--",
    "python",
    "train.py",
]
USER_TRAINING: dict[str, Any] = {
    "package_uri": PACKAGE_URI,
    "checkpoint_url": CHECKPOINTS,
    "node_args": USER_NODE_ARGS,
}


def test_gke_pods_run_your_code() -> None:
    run = _run(training={**USER_TRAINING, "image": "us-docker.pkg.dev/acme/r/mine:1"})
    [container] = run.named("gpu-training-job").inputs["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "--launcher=torchrun",
        f"--env=TRAINSTACK_CHECKPOINT_DIR={CHECKPOINTS}/checkpoints",
        "--",
        "python",
        "train.py",
    ]
    assert container["image"] == "us-docker.pkg.dev/acme/r/mine:1"
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}


def test_gce_nodes_run_your_code() -> None:
    run = _run(backend="gce", training=USER_TRAINING)
    script = gce_startup_script(
        package_uri=PACKAGE_URI,
        module=None,
        trainer_args=[],
        num_nodes=4,
        procs_per_node=8,
        coordinator="exp-42-a100-0",
        worker_hosts=[f"exp-42-a100-{i}" for i in range(4)],
        checkpoint_url=CHECKPOINTS,
        node_args=USER_NODE_ARGS,
    )
    assert _integers(run.named("gpu-template").inputs) == _template(metadataStartupScript=script)
    assert (
        "\nNODE_ARGV=(-m trainstack.trainers.node --launcher=torchrun "
        f"--env=TRAINSTACK_CHECKPOINT_DIR={CHECKPOINTS}/checkpoints -- python train.py)\n"
    ) in script


def test_gce_node_launcher_for_your_code_runs_once_per_node() -> None:
    node_args = ["--launcher=node", "--", "python", "train.py"]
    run = _run(backend="gce", training={**USER_TRAINING, "node_args": node_args})
    script = run.named("gpu-template").inputs["metadataStartupScript"]
    assert script == _startup_script(
        module=None,
        trainer_args=[],
        procs_per_node=1,
        checkpoint_url=CHECKPOINTS,
        node_args=node_args,
    )


def test_gce_single_node_has_no_placement_policy() -> None:
    run = _run(backend="gce", node_count=1)
    assert {r.type for r in run.resources} == {TOKEN, TEMPLATE, GROUP, NODE_CONFIG}
    assert _integers(run.named("gpu-template").inputs) == _template(
        resourcePolicies=None, metadataStartupScript=_startup_script(num_nodes=1)
    )
    assert _integers(run.named("gpu-group").inputs) == _group(node_count=1)
    assert run.named("gpu-0").inputs == _node_config(0)


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

"""A100 machines for multi-node training: a GKE cluster or plain Compute Engine VMs.

    from components.a100_cluster import A100Cluster

    cluster = A100Cluster(
        "exp-42-gpu",
        {
            "project": "my-project",
            "zone": "us-central1-a",
            "deployment_name": "exp-42",
            "backend": "gke",  # or "gce"
            "machine_type": "a2-highgpu-8g",  # 8 x A100 40GB per node, from the catalog
            "node_count": 2,
            "spot": True,
            "network_self_link": net.network_self_link,
            "subnetwork_self_link": net.subnetwork_self_link,
            "node_tag": net.node_tag,
            "service_account_email": identity.service_account_email,
            "training": {
                "package_uri": package.uri,
                "trainer_args": ["--steps=1000"],
                "checkpoint_url": buckets.checkpoint_url,
            },
        },
    )
    # cluster.cluster_name, cluster.endpoint, cluster.kubeconfig (secret), cluster.job_name

The machine type fixes the GPUs: model and count come from `infra.catalog`, never set
separately. Arguments are validated before anything is registered, with the checks (and
messages) of the stack's `trainstack:gpu_cluster` section in `infra.config`, without the
`gpu_cluster.` prefix.

gke: a zonal, VPC-native cluster with private nodes (no external IPs; egress through the
network's Cloud NAT), Workload Identity and a release channel, deletion protection only in
prod, its default node pool removed. A small system node pool runs kube-dns and the other
cluster add-ons, which do not tolerate the GPU taint; the GPU node pool has the driver
installed by GKE (`gpu_driver_version` set explicitly), compact placement, gVNIC, optional
Tier-1 egress, spot or a specific reservation, the `nvidia.com/gpu` NoSchedule taint, and
the training service account. A `pulumi_kubernetes` provider is built from the cluster's
endpoint and CA with the `gke-gcloud-auth-plugin` exec credential (install it where Pulumi
runs; no kubectl needed). With `training`, a `KubernetesTrainingJob` runs the trainer
across the GPU nodes.

gce: `node_count` instances of the A2 machine type in one compact placement policy
(`COLLOCATED`, when there are at least 2), TERMINATE on host maintenance, a Deep Learning VM
image, gVNIC, no external IP, the network's node tag, spot or a specific reservation. With
`training`, every instance gets the same startup script (`components.gpu_startup`), which
installs the trainer package and runs torchrun with its node rank from the instance's
`trainstack-node-rank` metadata (its index) and the rendezvous on instance 0. A new trainer
package or new flags replace the instances, which starts the run again (resuming from the
checkpoint bucket).

Naming: the cluster is `<deployment>-a100` (at most 40 characters), its pools `system` and
`a100`, the Job `<deployment>-train`; instances are `<deployment>-a100-<i>` and the
placement policy `<deployment>-a100-placement` (see `components._naming`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_gcp import compute, container
from pydantic import ValidationError

from components._naming import gcp_name, labels_input
from components.gpu_startup import (
    DLVM_PYTHON_BIN,
    NODE_RANK_ATTRIBUTE,
    check_trainer,
    gce_startup_script,
    uses_torchrun,
    with_checkpoint_dir,
)
from components.kubernetes_training_job import (
    DEFAULT_MODULE,
    KubernetesTrainingJob,
    KubernetesTrainingJobArgs,
)
from infra import catalog

# infra.config's own checks and error formatting (private there): a stack's gpu_cluster
# section and this component's arguments must never disagree.
from infra.config import GpuClusterConfig, check_gpu_cluster, convert_error

TOKEN: Final = "trainstack:gpu:A100Cluster"
COMPONENT_LABEL: Final = "a100-cluster"
CONFIG_SECTION: Final = "gpu_cluster"
"""The stack config section whose checks (`infra.config`) validate this component's args."""

KUBERNETES_VERSION: Final = "1.35"
KUBERNETES_VERSION_VERIFIED: Final = False
"""Default `min_master_version`, also the version the Job manifests are checked against.
Assumed offered by GKE's REGULAR channel in late 2026 (GKE versions are not in the fact
sheet); TO VERIFY with `gcloud container get-server-config`."""
MIN_KUBERNETES_VERSION: Final = (1, 29)
"""Oldest version whose Job API has everything the training Job uses, enabled by default:
backoffLimitPerIndex and podReplacementPolicy (beta in 1.29, GA 1.33/1.34),
podFailurePolicy (GA 1.31)."""
RELEASE_CHANNELS: Final = ("RAPID", "REGULAR", "STABLE")
DEFAULT_RELEASE_CHANNEL: Final = "REGULAR"
GPU_DRIVER_VERSIONS: Final = ("DEFAULT", "LATEST")
"""`gpu_driver_installation_config.gpu_driver_version` values that make GKE install the
driver (fact sheet 2.5); the API's unset value installs none."""
DEFAULT_GPU_DRIVER_VERSION: Final = "LATEST"
"""The newest COS driver: the default images are built for CUDA 12.8."""
NODE_IMAGE_TYPE: Final = "COS_CONTAINERD"
SYSTEM_POOL_NAME: Final = "system"
GPU_POOL_NAME: Final = "a100"
DEFAULT_SYSTEM_MACHINE_TYPE: Final = catalog.GKE_SYSTEM_NODE_MACHINE
"""One on-demand node for kube-dns and the other add-ons (they cannot run on GPU nodes)."""
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
"""The taint GKE itself puts on GPU pools next to CPU pools (fact sheet 2.6)."""
GKE_ACCELERATOR_LABEL: Final = "cloud.google.com/gke-accelerator"
GKE_NODEPOOL_LABEL: Final = "cloud.google.com/gke-nodepool"
POD_RANGE: Final = "/14"
SERVICE_RANGE: Final = "/20"
"""Netmasks of the pod and Service ranges GKE allocates (secondary ranges of the subnet)."""
CLUSTER_NAME_MAX: Final = 40
CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
RESERVATION_KEY: Final = "compute.googleapis.com/reservation-name"

DLVM_IMAGE: Final = (
    "projects/deeplearning-platform-release/global/images/family/"
    "pytorch-2-9-cu129-ubuntu-2204-nvidia-580"
)
DLVM_IMAGE_VERIFIED: Final = False
DLVM_IMAGE_SOURCE: Final = (
    "Deep Learning VM family seen in public provisioning code (2026; reported to boot on "
    "a2-ultragpu-1g with the NVIDIA driver), not in the fact sheet. TO VERIFY: "
    "gcloud compute images describe-from-family pytorch-2-9-cu129-ubuntu-2204-nvidia-580 "
    "--project deeplearning-platform-release"
)
"""PyTorch + CUDA + NVIDIA driver image for the gce backend (the torch trainer only)."""
BOOT_DISK_TYPE: Final = "pd-ssd"
DEFAULT_BOOT_DISK_GB: Final = 200

_CONFIG_KEYS: Final = (
    "backend",
    "machine_type",
    "node_count",
    "zone",
    "spot",
    "reservation",
    "compact_placement",
    "tier_1_networking",
)
_ENVIRONMENTS: Final = ("dev", "staging", "prod")
_VERSION = re.compile(r"(\d+)\.(\d+)")


class A100TrainingArgs(TypedDict):
    """What runs on the nodes: the bundled trainer from the `TrainerPackage`."""

    package_uri: pulumi.Input[str]
    """gs:// URI of the trainer sdist (`TrainerPackage.uri`)."""
    trainer_module: NotRequired[str]
    """Default `trainers.torch_ddp` (torchrun, one process per GPU)."""
    trainer_args: NotRequired[list[str]]
    """The trainer's `--key=value` flags (`infra.compose.trainer_args`)."""
    checkpoint_url: NotRequired[pulumi.Input[str]]
    """gs:// URL of the checkpoint bucket; `--checkpoint_dir=<url>/checkpoints` unless the
    flags choose one."""
    image: NotRequired[str]
    """gke: container image (default: `KubernetesTrainingJob`'s pinned image for the
    module); gce: boot image (default `DLVM_IMAGE`, required for modules other than torch)."""
    wait_for_completion: NotRequired[bool]
    """gke: make `pulumi up` wait for the Job (with `timeout_s`)."""
    timeout_s: NotRequired[int]
    """gke: seconds `pulumi up` waits with `wait_for_completion`."""


class A100ClusterArgs(TypedDict):
    """Arguments for `A100Cluster`. Shape arguments are plain values, validated up front."""

    project: pulumi.Input[str]
    """Project of the cluster or instances."""
    zone: str
    """Zone of every node, e.g. `us-central1-a`; it must offer the machine's GPU (catalog)."""
    deployment_name: str
    """Prefix of the physical names (plain: it names the Job and node 0's host)."""
    machine_type: str
    """An A2 machine type: a2-highgpu-1g/2g/4g/8g, a2-megagpu-16g, a2-ultragpu-1g/2g/4g/8g."""
    backend: NotRequired[Literal["gke", "gce"]]
    """`gke` (default): a GKE cluster and a Kubernetes Job; `gce`: Compute Engine VMs."""
    node_count: NotRequired[int]
    """Machines (default 1)."""
    spot: NotRequired[bool]
    """Spot capacity (preemptible quota; default False)."""
    reservation: NotRequired[str]
    """Name of a specific reservation to consume; not with spot."""
    compact_placement: NotRequired[bool]
    """Place the nodes close together (default True)."""
    tier_1_networking: NotRequired[bool]
    """Tier-1 egress bandwidth (needs gVNIC, which every node gets; default False)."""
    network_self_link: pulumi.Input[str]
    """VPC network (`TrainingNetwork.network_self_link`)."""
    subnetwork_self_link: pulumi.Input[str]
    """Subnet in the zone's region (`TrainingNetwork.subnetwork_self_link`)."""
    node_tag: pulumi.Input[str]
    """Network tag the network's firewall rules target (`TrainingNetwork.node_tag`)."""
    service_account_email: pulumi.Input[str]
    """Account the nodes and the training pods run as (`TrainingIdentity`)."""
    environment: NotRequired[Literal["dev", "staging", "prod"]]
    """`prod` turns on the GKE cluster's deletion protection (default dev)."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """User labels, merged with trainstack's, on every child that takes labels."""
    training: NotRequired[A100TrainingArgs]
    """Run the trainer on the nodes (without it the machines are only provisioned)."""
    kubernetes_version: NotRequired[str]
    """gke: minimum control-plane version `1.N` (default `KUBERNETES_VERSION`)."""
    release_channel: NotRequired[Literal["RAPID", "REGULAR", "STABLE"]]
    """gke: release channel (default REGULAR)."""
    gpu_driver_version: NotRequired[Literal["DEFAULT", "LATEST"]]
    """gke: driver GKE installs on the GPU nodes (default LATEST)."""
    system_machine_type: NotRequired[str]
    """gke: machine of the one-node system pool (default e2-standard-4)."""
    master_authorized_cidrs: NotRequired[list[str]]
    """gke: CIDRs allowed to reach the control plane's public endpoint (default: any, with
    IAM authentication)."""
    boot_disk_size_gb: NotRequired[int]
    """Boot disk of each GPU node (default 200)."""


# --------------------------------------------------------------------------------------
# Validation (pure; ValueError with one line per problem)
# --------------------------------------------------------------------------------------


def _unprefixed(message: str) -> str:
    return message.removeprefix(f"{CONFIG_SECTION}.")


def parse_version(version: object) -> tuple[int, int] | None:
    """`(major, minor)` of a `1.N` version string, None when it is not one."""
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    return (int(match[1]), int(match[2])) if match else None


def _check_gke(args: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    version = args.get("kubernetes_version", KUBERNETES_VERSION)
    parsed = parse_version(version)
    floor = ".".join(map(str, MIN_KUBERNETES_VERSION))
    if parsed is None:
        errors.append(f"kubernetes_version: {version!r} is not a version; expected 1.N")
    elif parsed < MIN_KUBERNETES_VERSION:
        errors.append(
            f"kubernetes_version: {version!r} is too old for the training Job; expected >= {floor}"
        )
    channel = args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
    if channel not in RELEASE_CHANNELS:
        errors.append(
            f"release_channel: {channel!r} is not allowed; valid: {', '.join(RELEASE_CHANNELS)}"
        )
    driver = args.get("gpu_driver_version", DEFAULT_GPU_DRIVER_VERSION)
    if driver not in GPU_DRIVER_VERSIONS:
        errors.append(
            f"gpu_driver_version: {driver!r} is not allowed; valid: "
            f"{', '.join(GPU_DRIVER_VERSIONS)}"
        )
    system = args.get("system_machine_type", DEFAULT_SYSTEM_MACHINE_TYPE)
    if system not in catalog.CPU_MACHINES:
        errors.append(
            f"system_machine_type: {system!r} is not a known CPU machine type; valid: "
            f"{', '.join(catalog.CPU_MACHINES)}"
        )
    for cidr in args.get("master_authorized_cidrs") or []:
        try:
            ipaddress.ip_network(cidr, strict=True)
        except (TypeError, ValueError):
            errors.append(f"master_authorized_cidrs: {cidr!r} is not a CIDR block")
    return errors


def _check_training(training: Any, backend: str) -> list[str]:
    if not isinstance(training, Mapping):
        return [f"training: {training!r} is not a mapping with package_uri"]
    errors: list[str] = []
    if training.get("package_uri") is None:
        errors.append("training.package_uri: required (TrainerPackage.uri)")
    module = training.get("trainer_module", DEFAULT_MODULE)
    try:
        check_trainer(module, training.get("trainer_args", []))
    except ValueError as exc:
        errors.append(f"training.{exc}")
        return errors
    if backend == "gce":
        if "image" not in training and not uses_torchrun(module):
            errors.append(
                f"training.image: required on gce for trainer_module {module!r}; the default "
                "Deep Learning VM image has PyTorch only"
            )
        for key in ("wait_for_completion", "timeout_s"):
            if key in training:
                errors.append(f"training.{key}: only used with backend gke")
    elif training.get("wait_for_completion") and "timeout_s" not in training:
        errors.append("training.timeout_s: required when wait_for_completion is true")
    return errors


def validate_args(args: Mapping[str, Any]) -> GpuClusterConfig:
    """Check the plain arguments; return them as the config model the checks ran on.

    The cluster shape is checked exactly as a stack's `trainstack:gpu_cluster` section
    (`infra.config`): machine type known, zone offers its GPU, spot versus reservation,
    compact placement limit, node count >= 1. Raises ValueError listing every problem.
    """
    outputs = [
        f"{key}: must be a plain value, not a pulumi Output (it shapes the resources and is "
        "checked before any is registered)"
        for key in (*_CONFIG_KEYS, "deployment_name")
        if isinstance(args.get(key), pulumi.Output)
    ]
    if outputs:
        raise ValueError("\n".join(outputs))
    section = {key: args[key] for key in _CONFIG_KEYS if key in args}
    try:
        gpu = GpuClusterConfig.model_validate(section)
    except ValidationError as exc:
        raise ValueError(
            "\n".join(_unprefixed(convert_error(CONFIG_SECTION, e)) for e in exc.errors())
        ) from None
    errors = [_unprefixed(e) for e in check_gpu_cluster(gpu, None)]
    deployment = args.get("deployment_name")
    if not isinstance(deployment, str) or not deployment:
        errors.append(f"deployment_name: {deployment!r} is not a non-empty string")
    environment = args.get("environment", "dev")
    if environment not in _ENVIRONMENTS:
        errors.append(
            f"environment: {environment!r} is not allowed; valid: {', '.join(_ENVIRONMENTS)}"
        )
    disk = args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB)
    if isinstance(disk, bool) or not isinstance(disk, int) or disk < 50:
        errors.append(f"boot_disk_size_gb: {disk!r} is too small; expected an integer >= 50")
    if gpu.backend == "gke":
        errors += _check_gke(args)
    else:
        gke_only = ("kubernetes_version", "release_channel", "gpu_driver_version")
        errors += [
            f"{key}: only used with backend gke"
            for key in (*gke_only, "system_machine_type", "master_authorized_cidrs")
            if key in args
        ]
    if "training" in args:
        errors += _check_training(args["training"], gpu.backend)
    if errors:
        raise ValueError("\n".join(errors))
    return gpu


# --------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------


def region_of(zone: str) -> str:
    """`us-central1` for `us-central1-a`."""
    return zone.rsplit("-", 1)[0]


def job_name_for(deployment: str, node_count: int) -> str:
    """The Job's name: `<deployment>-train`, cut so pod `<job>-<last index>` fits 63."""
    return gcp_name(deployment, "train", max_len=63 - 1 - len(str(node_count - 1)))


def instance_names(deployment: str, node_count: int) -> list[str]:
    """Physical names of the gce instances; index i is node rank i."""
    return [gcp_name(deployment, f"a100-{i}") for i in range(node_count)]


def kubeconfig(*, project: str, zone: str, cluster: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig for the cluster that authenticates with `gke-gcloud-auth-plugin`, as
    `gcloud container clusters get-credentials` writes it (context `gke_<p>_<zone>_<name>`)."""
    context = f"gke_{project}_{zone}_{cluster}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": f"https://{endpoint}",
                    "certificate-authority-data": ca_certificate,
                },
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
                        "installHint": (
                            "Install gke-gcloud-auth-plugin: gcloud components install "
                            "gke-gcloud-auth-plugin"
                        ),
                        "provideClusterInfo": True,
                    }
                },
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def gke_console_url(project: str, zone: str, cluster: str) -> str:
    """Cloud console page of a GKE cluster."""
    return (
        f"https://console.cloud.google.com/kubernetes/clusters/details/{zone}/{cluster}/details"
        f"?project={project}"
    )


def gce_console_url(project: str) -> str:
    """Cloud console list of the project's VM instances."""
    return f"https://console.cloud.google.com/compute/instances?project={project}"


# --------------------------------------------------------------------------------------
# Component
# --------------------------------------------------------------------------------------


class A100Cluster(pulumi.ComponentResource):
    """A100 nodes on GKE (with a Kubernetes training Job) or Compute Engine."""

    backend: str
    """`gke` or `gce`."""
    node_count: int
    gpus_per_node: int
    """GPUs of the machine type (catalog)."""
    total_gpus: int
    cluster_name: pulumi.Output[str]
    """gke: the GKE cluster; gce: the instance name prefix."""
    endpoint: pulumi.Output[str] | None
    """gke: control-plane IP; gce: None."""
    node_pool_name: pulumi.Output[str] | None
    """gke: the GPU node pool; gce: None."""
    kubeconfig: pulumi.Output[str] | None
    """gke: kubeconfig (secret) using gke-gcloud-auth-plugin; gce: None."""
    job_name: pulumi.Output[str] | None
    """gke with training: the Kubernetes Job; otherwise None."""
    instance_names: pulumi.Output[list[str]] | None
    """gce: the instances, by node rank; gke: None."""
    console_url: pulumi.Output[str]
    """Cloud console page of the cluster (gke) or of the project's VM instances (gce)."""
    cluster: container.Cluster | None
    system_pool: container.NodePool | None
    gpu_pool: container.NodePool | None
    k8s_provider: k8s.Provider | None
    training_job: KubernetesTrainingJob | None
    placement_policy: compute.ResourcePolicy | None
    """gce with compact placement and at least 2 nodes."""
    instances: list[compute.Instance]

    def __init__(
        self, name: str, args: A100ClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        gpu = validate_args(args)
        labels = labels_input(args.get("labels"), COMPONENT_LABEL)
        super().__init__(TOKEN, name, None, opts)

        machine = gpu.machine
        self.backend = gpu.backend
        self.node_count = gpu.node_count
        self.gpus_per_node = machine.gpus
        self.total_gpus = gpu.total_gpus
        self.endpoint = self.node_pool_name = self.kubeconfig = self.job_name = None
        self.instance_names = None
        self.cluster = self.system_pool = self.gpu_pool = None
        self.k8s_provider = None
        self.training_job = None
        self.placement_policy = None
        self.instances = []
        if gpu.backend == "gke":
            self._create_gke(name, args, gpu, labels)
        else:
            self._create_gce(name, args, gpu, labels)

        self.register_outputs(
            {
                "backend": self.backend,
                "node_count": self.node_count,
                "gpus_per_node": self.gpus_per_node,
                "total_gpus": self.total_gpus,
                "cluster_name": self.cluster_name,
                "endpoint": self.endpoint,
                "node_pool_name": self.node_pool_name,
                "kubeconfig": self.kubeconfig,
                "job_name": self.job_name,
                "instance_names": self.instance_names,
                "console_url": self.console_url,
            }
        )

    # ----------------------------------------------------------------------------- gke

    def _create_gke(
        self,
        name: str,
        args: A100ClusterArgs,
        gpu: GpuClusterConfig,
        labels: pulumi.Input[Mapping[str, str]],
    ) -> None:
        machine = gpu.machine
        assert machine.gpu_model is not None  # A2 machines all carry GPUs
        project = pulumi.Output.from_input(args["project"])
        zone = gpu.zone
        deployment = args["deployment_name"]
        account = args["service_account_email"]
        tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
        child = pulumi.ResourceOptions(parent=self)
        authorized = args.get("master_authorized_cidrs")

        self.cluster = container.Cluster(
            f"{name}-cluster",
            project=project,
            location=zone,
            name=gcp_name(deployment, "a100", max_len=CLUSTER_NAME_MAX),
            network=args["network_self_link"],
            subnetwork=args["subnetwork_self_link"],
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=container.ClusterIpAllocationPolicyArgs(
                cluster_ipv4_cidr_block=POD_RANGE, services_ipv4_cidr_block=SERVICE_RANGE
            ),
            private_cluster_config=container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True, enable_private_endpoint=False
            ),
            master_authorized_networks_config=(
                container.ClusterMasterAuthorizedNetworksConfigArgs(
                    cidr_blocks=[
                        container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                            cidr_block=cidr, display_name=f"authorized-{i}"
                        )
                        for i, cidr in enumerate(authorized)
                    ]
                )
                if authorized
                else None
            ),
            workload_identity_config=container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=project.apply(lambda p: f"{p}.svc.id.goog")
            ),
            release_channel=container.ClusterReleaseChannelArgs(
                channel=args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
            ),
            min_master_version=args.get("kubernetes_version", KUBERNETES_VERSION),
            deletion_protection=args.get("environment", "dev") == "prod",
            remove_default_node_pool=True,
            initial_node_count=1,
            # The default pool lives only until it is removed, but it must not fall back to
            # the default compute service account (often disabled or over-privileged).
            node_config=container.ClusterNodeConfigArgs(
                service_account=account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=container.ClusterNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
            ),
            resource_labels=labels,
            # The removed default pool's node_config would otherwise diff (and replace the
            # cluster) on every refresh.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["node_config"]),
        )
        cluster_name = self.cluster.name
        shielded = container.NodePoolNodeConfigShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_integrity_monitoring=True
        )
        metadata_mode = container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA")
        self.system_pool = container.NodePool(
            f"{name}-system-pool",
            project=project,
            location=zone,
            cluster=cluster_name,
            name=SYSTEM_POOL_NAME,
            node_count=1,
            management=container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=container.NodePoolNodeConfigArgs(
                machine_type=args.get("system_machine_type", DEFAULT_SYSTEM_MACHINE_TYPE),
                image_type=NODE_IMAGE_TYPE,
                service_account=account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=metadata_mode,
                shielded_instance_config=shielded,
                resource_labels=labels,
                tags=tags,
            ),
            opts=child,
        )
        reservation = (
            container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION",
                key=RESERVATION_KEY,
                values=[gpu.reservation],
            )
            if gpu.reservation
            else None
        )
        accelerator = catalog.GPU_ACCELERATOR_NAMES[machine.gpu_model].compute
        self.gpu_pool = container.NodePool(
            f"{name}-gpu-pool",
            project=project,
            location=zone,
            cluster=cluster_name,
            name=GPU_POOL_NAME,
            node_count=gpu.node_count,
            management=container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            # Upgrade one node at a time without a surge node: no GPUs beyond the quota.
            upgrade_settings=container.NodePoolUpgradeSettingsArgs(
                strategy="SURGE", max_surge=0, max_unavailable=1
            ),
            placement_policy=(
                container.NodePoolPlacementPolicyArgs(type="COMPACT")
                if gpu.compact_placement
                else None
            ),
            network_config=(
                container.NodePoolNetworkConfigArgs(
                    network_performance_config=(
                        container.NodePoolNetworkConfigNetworkPerformanceConfigArgs(
                            total_egress_bandwidth_tier="TIER_1"
                        )
                    )
                )
                if gpu.tier_1_networking
                else None
            ),
            node_config=container.NodePoolNodeConfigArgs(
                machine_type=gpu.machine_type,
                guest_accelerators=[
                    container.NodePoolNodeConfigGuestAcceleratorArgs(
                        type=accelerator,
                        count=machine.gpus,
                        gpu_driver_installation_config=(
                            container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                                gpu_driver_version=args.get(
                                    "gpu_driver_version", DEFAULT_GPU_DRIVER_VERSION
                                )
                            )
                        ),
                    )
                ],
                image_type=NODE_IMAGE_TYPE,
                gvnic=container.NodePoolNodeConfigGvnicArgs(enabled=True),
                spot=gpu.spot,
                reservation_affinity=reservation,
                taints=[container.NodePoolNodeConfigTaintArgs(**GPU_TAINT)],
                service_account=account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=metadata_mode,
                shielded_instance_config=shielded,
                disk_type=BOOT_DISK_TYPE,
                disk_size_gb=args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB),
                resource_labels=labels,
                tags=tags,
            ),
            opts=child,
        )

        auth = self.cluster.master_auth
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                project, cluster_name, self.cluster.endpoint, auth.cluster_ca_certificate
            ).apply(
                lambda v: kubeconfig(
                    project=v[0], zone=zone, cluster=v[1], endpoint=v[2], ca_certificate=v[3]
                )
            )
        )
        self.k8s_provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # A cluster deleted outside Pulumi must not leave destroy stuck on its objects.
            delete_unreachable=True,
            opts=child,
        )
        self.cluster_name = cluster_name
        self.endpoint = self.cluster.endpoint
        self.node_pool_name = self.gpu_pool.name
        self.console_url = pulumi.Output.all(project, cluster_name).apply(
            lambda v: gke_console_url(v[0], zone, v[1])
        )

        training = args.get("training")
        if training is None:
            return
        job_args: KubernetesTrainingJobArgs = {
            "job_name": job_name_for(deployment, gpu.node_count),
            "node_count": gpu.node_count,
            "gpus_per_node": machine.gpus,
            "package_uri": training["package_uri"],
            "trainer_module": training.get("trainer_module", DEFAULT_MODULE),
            "trainer_args": list(training.get("trainer_args", [])),
            "project": args["project"],
            "gcp_service_account_email": account,
            "node_selector": {
                GKE_ACCELERATOR_LABEL: accelerator,
                GKE_NODEPOOL_LABEL: GPU_POOL_NAME,
            },
        }
        for key in ("checkpoint_url", "image", "wait_for_completion", "timeout_s"):
            if key in training:
                job_args[key] = training[key]
        if "labels" in args:
            job_args["labels"] = args["labels"]
        self.training_job = KubernetesTrainingJob(
            f"{name}-training",
            job_args,
            opts=pulumi.ResourceOptions(
                parent=self,
                providers={"kubernetes": self.k8s_provider},
                # Destroy deletes the Job (and waits for its pods) before the nodes go.
                depends_on=[self.system_pool, self.gpu_pool],
            ),
        )
        self.job_name = self.training_job.job_name

    # ----------------------------------------------------------------------------- gce

    def _create_gce(
        self,
        name: str,
        args: A100ClusterArgs,
        gpu: GpuClusterConfig,
        labels: pulumi.Input[Mapping[str, str]],
    ) -> None:
        machine = gpu.machine
        project = pulumi.Output.from_input(args["project"])
        zone = gpu.zone
        deployment = args["deployment_name"]
        names = instance_names(deployment, gpu.node_count)
        if gpu.compact_placement and gpu.node_count >= 2:
            # A placement group holds 2 or more VMs; one VM has nothing to be close to.
            self.placement_policy = compute.ResourcePolicy(
                f"{name}-placement",
                project=project,
                region=region_of(zone),
                name=gcp_name(deployment, "a100-placement"),
                description="trainstack: A100 nodes of one training cluster, collocated",
                group_placement_policy=compute.ResourcePolicyGroupPlacementPolicyArgs(
                    collocation="COLLOCATED", vm_count=gpu.node_count
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

        training = args.get("training")
        script: pulumi.Output[str] | None = None
        image = DLVM_IMAGE
        if training is not None:
            image = training.get("image", DLVM_IMAGE)
            module = training.get("trainer_module", DEFAULT_MODULE)
            flags = list(training.get("trainer_args", []))
            script = pulumi.Output.all(
                training["package_uri"], training.get("checkpoint_url")
            ).apply(
                lambda v: gce_startup_script(
                    package_uri=v[0],
                    module=module,
                    trainer_args=with_checkpoint_dir(flags, v[1]),
                    num_nodes=gpu.node_count,
                    procs_per_node=machine.gpus if uses_torchrun(module) else 1,
                    coordinator=names[0],
                    extra_path=DLVM_PYTHON_BIN,
                    worker_hosts=names,
                )
            )
        if gpu.spot:
            scheduling = compute.InstanceSchedulingArgs(
                provisioning_model="SPOT",
                preemptible=True,
                automatic_restart=False,
                on_host_maintenance="TERMINATE",
                instance_termination_action="STOP",
            )
        else:
            scheduling = compute.InstanceSchedulingArgs(
                provisioning_model="STANDARD",
                preemptible=False,
                automatic_restart=True,
                # GPU VMs cannot live-migrate (fact sheet 2.4).
                on_host_maintenance="TERMINATE",
            )
        reservation = (
            compute.InstanceReservationAffinityArgs(
                type="SPECIFIC_RESERVATION",
                specific_reservation=compute.InstanceReservationAffinitySpecificReservationArgs(
                    key=RESERVATION_KEY, values=[gpu.reservation]
                ),
            )
            if gpu.reservation
            else None
        )
        tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
        for i, physical in enumerate(names):
            self.instances.append(
                compute.Instance(
                    f"{name}-{i}",
                    project=project,
                    zone=zone,
                    name=physical,
                    machine_type=gpu.machine_type,
                    boot_disk=compute.InstanceBootDiskArgs(
                        auto_delete=True,
                        initialize_params=compute.InstanceBootDiskInitializeParamsArgs(
                            image=image,
                            size=args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB),
                            type=BOOT_DISK_TYPE,
                            labels=labels,
                        ),
                    ),
                    # No access_configs: no external IP (egress through the network's NAT).
                    network_interfaces=[
                        compute.InstanceNetworkInterfaceArgs(
                            network=args["network_self_link"],
                            subnetwork=args["subnetwork_self_link"],
                            nic_type="GVNIC",
                        )
                    ],
                    network_performance_config=(
                        compute.InstanceNetworkPerformanceConfigArgs(
                            total_egress_bandwidth_tier="TIER_1"
                        )
                        if gpu.tier_1_networking
                        else None
                    ),
                    scheduling=scheduling,
                    reservation_affinity=reservation,
                    # One self link, not a list, in pulumi_gcp 10 (at most one policy).
                    resource_policies=(
                        self.placement_policy.self_link if self.placement_policy else None
                    ),
                    service_account=compute.InstanceServiceAccountArgs(
                        email=args["service_account_email"], scopes=[CLOUD_PLATFORM_SCOPE]
                    ),
                    metadata={NODE_RANK_ATTRIBUTE: str(i), "enable-oslogin": "TRUE"},
                    # Changing the startup script replaces the instance, which is what runs
                    # a new trainer package or new flags.
                    metadata_startup_script=script,
                    tags=tags,
                    labels=labels,
                    allow_stopping_for_update=True,
                    opts=pulumi.ResourceOptions(
                        parent=self,
                        # Fixed names, and a placement group sized for exactly node_count.
                        delete_before_replace=True,
                    ),
                )
            )
        self.cluster_name = pulumi.Output.from_input(gcp_name(deployment, "a100"))
        self.instance_names = pulumi.Output.all(*(inst.name for inst in self.instances))
        self.console_url = project.apply(gce_console_url)

"""Defaults, allowed values and names shared by the A100Cluster validator and both backends,
and the component's arguments (`A100ClusterArgs`, exported by `trainstack.components.a100_cluster`),
which both backends read."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi
from pulumi_gcp import compute

from trainstack.components import catalog
from trainstack.components.catalog.gpu_fabric_gce import (
    ACCELERATOR_IMAGE,
    NETWORK_PROFILE_URL,
    gce_fabric,
)
from trainstack.components.catalog.gpu_families import cuda_floor_of
from trainstack.components.catalog.images import DLVM_IMAGE, KUBERNETES_IMAGES, kubernetes_image
from trainstack.components.naming import gcp_name
from trainstack.components.user_code import UserCode
from trainstack.trainers.common.contract import TORCH_MODULE

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
DEFAULT_SYSTEM_MACHINE_TYPE: Final = catalog.GKE_SYSTEM_NODE_MACHINE
"""One on-demand node for kube-dns and the other add-ons (they cannot run on GPU nodes)."""
ENVIRONMENTS: Final = ("dev", "staging", "prod")
DEFAULT_ENVIRONMENT: Final = "dev"

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
RESERVATION_KEY: Final = "compute.googleapis.com/reservation-name"
BOOT_DISK_TYPE: Final = "pd-ssd"
"""The boot disk of A2, A3 High and A3 Mega nodes; `boot_disk_type` is each machine's, the
Hyperdisk of A3 Ultra and A4 included (`catalog.gpu_families.BOOT_DISK_SOURCE`)."""
DEFAULT_BOOT_DISK_GB: Final = 200
MIN_BOOT_DISK_GB: Final = 50


def region_of(zone: str) -> str:
    """`us-central1` for `us-central1-a`."""
    return zone.rsplit("-", 1)[0]


def job_name_for(deployment: str, node_count: int) -> str:
    """The Job's name: `<deployment>-train`, cut so pod `<job>-<last index>` fits 63."""
    return gcp_name(deployment, "train", max_len=63 - 1 - len(str(node_count - 1)))


def instance_names(deployment: str, node_count: int) -> list[str]:
    """Physical names of the gce instances; index i is node rank i."""
    return [gcp_name(deployment, f"a100-{i}") for i in range(node_count)]


def instance_name_pattern(names: list[str]) -> str:
    """A regular expression for log filters that matches these instance names: their shared
    prefix when each name is that prefix plus its rank, else the names themselves (a name
    shortened with a hash suffix by `gcp_name` does not end in its rank)."""
    prefix = os.path.commonprefix(names) if len(names) > 1 else names[0].rstrip("0123456789")
    if all(name[len(prefix) :].isdigit() for name in names):
        return f"^{prefix}"
    return "^(" + "|".join(names) + ")$"


GKE_SPOT_POD_GRACE_S: Final = 15
"""Seconds the pods of a preempted GKE Spot node get after SIGTERM, whatever their
terminationGracePeriodSeconds says: the VM stops 30 s after the notice, and on a best-effort
basis the kubelet's graceful node shutdown gives non-system Pods 15 s of it, then system
Pods the other 15 s (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms,
https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms)."""
SPOT_GRACE_MARGIN_S: Final = 3
"""Of those 15 s, what the launcher and torchrun need after the trainer's save to exit."""


STACK_GRACE_KEY: Final = "trainer.preemption_grace_s"
"""What sets the bundled trainer's save time after SIGTERM in a stack."""
COMPONENT_GRACE_KEY: Final = "A100Cluster.training.trainer_args --preemption_grace_s"
"""What sets it in a program: the trainer's flag among the component's `trainer_args`
(`trainstack.infra.run_args.trainer_args` writes `trainer.preemption_grace_s` there)."""


def gke_spot_grace_note(
    preemption_grace_s: float, *, spot_key: str, grace_key: str, own_code: bool = False
) -> str:
    """The plan's note on a spot GKE cluster: whether the trainer's save after SIGTERM
    (`preemption_grace_s`, set by `grace_key`) fits the time GKE gives a preempted node's
    pods. `spot_key` names what asked for spot: a stack's `gpu_cluster.spot`, a program's
    `A100Cluster.spot`; `grace_key` the stack's `STACK_GRACE_KEY` or the component's
    `COMPONENT_GRACE_KEY`.

    `own_code`: the cluster runs your code (`trainer.entrypoint`, `training.code` or
    `node_args`), which no grace setting reaches: the node launcher passes SIGTERM on to it
    (`trainstack.trainers.node`, module docstring) and the pod's terminationGracePeriodSeconds
    does not lengthen GKE's 15 s; the note says what the code must do in them."""
    budget = GKE_SPOT_POD_GRACE_S - SPOT_GRACE_MARGIN_S
    head = (
        f"{spot_key}: GKE gives the pods of a "
        f"preempted Spot node {GKE_SPOT_POD_GRACE_S} s to stop (the rest of the 30 s notice is "
        "for system pods), whatever their terminationGracePeriodSeconds says "
        "(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); "
    )
    if own_code:
        return head + (
            "your code gets SIGTERM from the node launcher then: it must save its checkpoint "
            f"and exit within about {budget} s, or the run resumes from the checkpoint before"
        )
    grace = f"{preemption_grace_s:g}"
    if preemption_grace_s <= budget:
        return head + (
            f"{grace_key} ({grace} s) fits: the trainer saves within {grace} s "
            f"and exits before then, if its checkpoint writes in time (see write_s of its "
            "checkpoint_written records)"
        )
    return head + (
        f"{grace_key} ({grace} s) does NOT fit: a save after a preemption "
        f"that takes longer than {budget} s is cut off and the run resumes from the "
        f"checkpoint before; set {grace_key} to at most {budget}"
    )


def gpu_code_runs_on(backend: str, machine_type: str, zone: str, image: str | None) -> str:
    """Where your code runs on a GPU cluster (the plan's `runs_on`): gke: in `image`, else
    the bundled torch image for the machine's CUDA floor (`gke._family_image`); gce: on the
    VMs' boot image, Google's accelerator-optimized one where the machine gets its GPUDirect
    fabric (`gce.create_gce`'s `default_image`), else the Deep Learning VM."""
    if backend == "gke":
        floor = cuda_floor_of(machine_type)
        return image or kubernetes_image(TORCH_MODULE, floor) or KUBERNETES_IMAGES[TORCH_MODULE]
    if gce_fabric(machine_type, "", zone) is not None:
        return f"Google's accelerator-optimized Ubuntu image {ACCELERATOR_IMAGE}"
    return f"Deep Learning VM image {DLVM_IMAGE}"


class A100TrainingArgs(TypedDict):
    """What runs on the nodes: the bundled trainer from the `TrainerPackage`."""

    package_uri: pulumi.Input[str]
    """gs:// URI of the trainer sdist (`TrainerPackage.uri`)."""
    trainer_module: NotRequired[str]
    """Default `trainstack.trainers.torch_ddp` (torchrun, one process per GPU)."""
    trainer_args: NotRequired[list[str]]
    """The trainer's `--key=value` flags (`trainstack.infra.run_args.trainer_args`)."""
    node_args: NotRequired[pulumi.Input[list[str]]]
    """Your own code instead of the trainer: `python -m trainstack.trainers.node` arguments
    (a stack's `trainstack.infra.compose.user_code_node_args`;
    a program gives `code` instead, the run contract's folders included), run on
    every node (gke: in every pod); excludes trainer_module and trainer_args."""
    secret_env_names: NotRequired[Sequence[str]]
    """The `--env=NAME=VALUE` names of `node_args` whose values are secrets (a stack's
    `secure:` trainer.env values): they reach the nodes but not the run's key, which names
    objects in the checkpoint bucket anyone who may list it sees; the key sees the name only,
    so a rotated secret keeps the run (`trainstack.components._node_args.keyed_node_args`)."""
    checkpoint_url: NotRequired[pulumi.Input[str]]
    """gs:// URL of the checkpoint bucket; `--checkpoint_dir=<url>/checkpoints` unless the
    flags choose one (the bundled trainer), and where gce records a run limit's start."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`), run on every node (gke: every pod,
    in `code.image` when given; gce: on the VM, no image) in place of trainer_module /
    trainer_args / node_args, checked as `trainstack:trainer` is; needs `checkpoint_url` and
    `data_url` (the run contract's folders, `trainstack.components.user_code.run_contract`)
    and a `package_uri` of a `TrainerPackage` built with the same `code`."""
    package: NotRequired[Any]
    """With `code`: the `TrainerPackage` of `package_uri`, checked to be built from the same
    code (`trainstack.components.user_code.package_code_problem`)."""
    data_url: NotRequired[pulumi.Input[str]]
    """With `code`: the data bucket's URL (`TrainingBuckets.data_url`), TRAINSTACK_DATA_DIR."""
    run_name: NotRequired[str]
    """With `code`: the run's name (TRAINSTACK_RUN_NAME, its checkpoint folder); default the
    cluster's `deployment_name`."""
    image: NotRequired[str]
    """gke: container image (default: `KubernetesTrainingJob`'s pinned image for the
    module, the torch one for your code); gce: boot image (default `DLVM_IMAGE`, required
    for modules other than torch)."""
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
    """A GPU machine type: a2-highgpu-1g/2g/4g/8g, a2-megagpu-16g, a2-ultragpu-1g/2g/4g/8g,
    a3-highgpu-8g, a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g."""
    backend: NotRequired[Literal["gke", "gce"]]
    """`gke` (default): a GKE cluster and a Kubernetes Job; `gce`: Compute Engine VMs."""
    node_count: NotRequired[int]
    """Machines (default 1)."""
    spot: NotRequired[bool]
    """Spot capacity (preemptible quota; default False)."""
    reservation: NotRequired[str]
    """Name of a specific reservation to consume; not with spot."""
    flex_start: NotRequired[bool]
    """Dynamic Workload Scheduler flex-start capacity (default False; not with spot or
    reservation). gke: a flex-start node pool that scales from 0 to `node_count`, each node
    running at most `max_run_seconds`; gce: `FLEX_START` VMs deleted after
    `max_run_seconds` (required, at most 7 days)."""
    compact_placement: NotRequired[bool]
    """Place the nodes close together (default True)."""
    tier_1_networking: NotRequired[bool]
    """Tier-1 egress bandwidth (needs gVNIC, which every node gets; default False)."""
    network_self_link: pulumi.Input[str]
    """VPC network (`TrainingNetwork.network_self_link`)."""
    subnetwork_self_link: pulumi.Input[str]
    """Subnet in the zone's region (`TrainingNetwork.subnetwork_self_link`)."""
    subnet_cidr: NotRequired[str]
    """Primary range of that subnet (`TrainingNetwork`'s `subnet_cidr`), when known: with a
    GPUDirect fabric (gke A3 Mega, A3 Ultra) it must not overlap the fabric's subnets in
    192.168.0.0/16, since a node's network interfaces must be on subnets whose ranges do not
    overlap (https://cloud.google.com/vpc/docs/create-use-multiple-interfaces)."""
    node_tag: pulumi.Input[str]
    """Network tag the network's firewall rules target (`TrainingNetwork.node_tag`)."""
    service_account_email: pulumi.Input[str]
    """Account the nodes and the training pods run as (`TrainingIdentity`)."""
    environment: NotRequired[Literal["dev", "staging", "prod"]]
    """`prod` turns on the GKE cluster's deletion protection (default dev). Given, it sets
    the `environment` label on every child and the training Job, and `stack` (the Pulumi
    stack's name) where `labels` has none: the two labels the policy pack's
    `accelerators-labelled` requires on GPU machines (a different `environment` in `labels`
    is refused)."""
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
    max_run_seconds: NotRequired[int]
    """Run limit (the stack's limits.max_run_hours). gke: the training Job's
    `activeDeadlineSeconds` (Kubernetes ends the Job and its pods after this long); with
    flex_start, each node's `max_run_duration` instead (the Job is created before its nodes
    and would count the wait for them). gce: the
    node launcher records the run's first start in the checkpoint bucket and, this long
    after it, stops the trainer with SIGTERM (it checkpoints), logs `max_run_hours reached`
    and exits 0, which the unit does not restart; a VM started later exits at once. The
    VMs keep running (and billing) until `pulumi destroy`: a VM maxRunDuration would only
    make the managed instance group recreate them. Needs `training.checkpoint_url`."""


def network_profile(project: pulumi.Input[str], profile: str | None) -> pulumi.Output[str] | None:
    """The `network_profile` of a fabric VPC (the RoCE VPC's `<zone>-vpc-roce`, as CTK's
    gke-a3-ultragpu.yaml and a4high-vm.yaml name it), None for a VPC without one."""
    if not profile:
        return None
    return pulumi.Output.format(NETWORK_PROFILE_URL, project=project, profile=profile)


def fabric_subnetworks(
    name: str,
    deployment: str,
    project: pulumi.Input[str],
    region: str,
    network: compute.Network,
    subnets: Sequence[tuple[str, str]],
    opts: pulumi.ResourceOptions,
) -> list[compute.Subnetwork]:
    """One subnetwork per (name, range) of a fabric VPC, named `<name>-<subnet>` in Pulumi."""
    return [
        compute.Subnetwork(
            f"{name}-{sub_name.removeprefix(deployment + '-')}",
            project=project,
            region=region,
            name=sub_name,
            network=network.id,
            ip_cidr_range=cidr,
            opts=opts,
        )
        for sub_name, cidr in subnets
    ]

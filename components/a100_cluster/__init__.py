"""A100 machines for multi-node training: a GKE cluster or plain Compute Engine VMs.

    from trainstack.components.a100_cluster import A100Cluster

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

Your own code instead of the trainer (examples/own-program), with `environment` for the labels
the policy pack requires on GPU machines (`environment`, and `stack` from the Pulumi stack):

    code = UserCode(source="train", entrypoint=["python", "train.py"])
    package = TrainerPackage("exp-42-code", {"staging_bucket": buckets.staging_bucket, "code": code})
    A100Cluster("exp-42-gpu", {..., "environment": "dev", "training": {
        "package_uri": package.uri, "package": package, "code": code,
        "checkpoint_url": buckets.checkpoint_url, "data_url": buckets.data_url}})

The machine type fixes the GPUs: model and count come from `trainstack.components.catalog`, never set
separately. Arguments are validated before anything is registered by
`a100_cluster_problems` (`validate.py`), the one home of every A100 cluster rule:
`trainstack.infra.config` checks a stack's `trainstack:gpu_cluster` section with it too (prefix
`gpu_cluster.`), so both report a problem in the same words.

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

gce: a zonal managed instance group of `node_count` A2 instances, made from one instance
template (TERMINATE on host maintenance, a Deep Learning VM image, gVNIC, no external IP,
the network's node tag, spot or a specific reservation, the compact placement policy
`COLLOCATED` when there are at least 2). Its lifecycle policy REPAIRs a node that stops
running (spot preemption with termination action STOP, host error) by recreating it, and
one per-instance config per node creates that node (the group has no target size of its
own: each config adds its VM) and keeps its name and its `trainstack-node-rank` metadata.
With `training`, every instance gets the same startup script (`trainstack.components.gpu_startup`),
which installs the trainer package and runs the node launcher: torchrun with an elastic
rendezvous on instance 0, so a recreated or restarted node rejoins and every worker
resumes from the newest checkpoint. With `training.node_args` your own code runs instead
of the trainer, on both backends, through the same node launcher. A new trainer package or new flags make a new template,
which the group rolls out by recreating the nodes. A4 and A3 Ultra get their GPUDirect RDMA
fabric as Cluster Toolkit's VM blueprints render it (`gce_fabric`,
`trainstack.components.catalog.gpu_fabric_gce`: a second gVNIC VPC, the RoCE VPC with 8
subnets, 2 gVNIC + 8 MRDMA NICs, Google's accelerator-optimized image, nccl-gib installed and
its NCCL settings sourced by the launcher); the gce backend refuses A3 High and A3 Mega, whose
TCPX/TCPXO fabric it does not render. With `flex_start` the group is created empty and one
resize request asks for `node_count` flex-start VMs for `max_run_seconds` (Google creates
flex-start VMs in a MIG only that way); the request names them, so there are no per-instance
configs and each VM claims its rank at start under the run's records.

Naming: the cluster is `<deployment>-a100` (at most 40 characters), its pools `system` and
`a100`, the Job `<deployment>-train`; the instance group is `<deployment>-a100`, its
instances `<deployment>-a100-<i>` and the placement policy `<deployment>-a100-placement` (see `trainstack.components.naming`).

Modules: this one holds the component and its arguments; `validate.py` the rules, `gke.py`
and `gce.py` the two backends' resources, `_common.py` the defaults and names they share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import compute, container

from trainstack.components._args import check_args, component_check
from trainstack.components._options import inherited_depends_on
from trainstack.components.a100_cluster._common import (
    BOOT_DISK_TYPE,
    CLOUD_PLATFORM_SCOPE,
    COMPONENT_GRACE_KEY,
    DEFAULT_BOOT_DISK_GB,
    DEFAULT_GPU_DRIVER_VERSION,
    DEFAULT_RELEASE_CHANNEL,
    DEFAULT_SYSTEM_MACHINE_TYPE,
    GPU_DRIVER_VERSIONS,
    KUBERNETES_VERSION,
    KUBERNETES_VERSION_VERIFIED,
    MIN_KUBERNETES_VERSION,
    RELEASE_CHANNELS,
    RESERVATION_KEY,
    STACK_GRACE_KEY,
    A100ClusterArgs,
    A100TrainingArgs,
    gke_spot_grace_note,
    gpu_code_runs_on,
    instance_name_pattern,
    instance_names,
    job_name_for,
    region_of,
)
from trainstack.components.a100_cluster.gce import create_gce, gce_console_url, gce_run_record
from trainstack.components.a100_cluster.gke import (
    CLUSTER_NAME_MAX,
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GPU_POOL_NAME,
    GPU_TAINT,
    NODE_IMAGE_TYPE,
    POD_RANGE,
    SERVICE_RANGE,
    SYSTEM_POOL_NAME,
    create_gke,
    gke_console_url,
    gke_run_record,
    kubeconfig,
)
from trainstack.components.a100_cluster.gke_fabric import (
    fabric_for,
    fabric_note,
    no_fabric_note,
)
from trainstack.components.a100_cluster.validate import (
    GPU_CODE,
    SHAPE_KEYS,
    A100Shape,
    a100_cluster_problems,
    parse_version,
    validate_args,
    with_code,
)
from trainstack.components.catalog.gpu_fabric_gce import gce_fabric as gce_fabric_for
from trainstack.components.catalog.images import DLVM_IMAGE, DLVM_IMAGE_SOURCE, DLVM_IMAGE_VERIFIED
from trainstack.components.code_summary import (
    GPU_NODE_ENV,
    component_code_summary,
    launcher_world_size,
)
from trainstack.components.facts import (
    a100_after_stop,
    a100_nodes_hourly_usd,
    a100_quota,
    a100_summary,
    checkpoint_dir_of,
    deployed_facts,
    gke_cluster_after_stop,
    make_facts,
    run_limit_own_text,
)
from trainstack.components.gpu_startup import with_checkpoint_dir
from trainstack.components.kubernetes_training_job import DEFAULT_NAMESPACE, KubernetesTrainingJob
from trainstack.components.naming import (
    environment_labels,
    gcp_name,
    labels_input,
    stack_labels,
)
from trainstack.components.training_dashboard.targets import (
    DashboardScope,
    gce_filters,
    gke_filter_text,
    gke_filters,
)
from trainstack.components.user_code import UserCode
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.run_records import RUN_RECORD_ENV

__all__ = [
    "BOOT_DISK_TYPE",
    "CLOUD_PLATFORM_SCOPE",
    "CLUSTER_NAME_MAX",
    "COMPONENT_GRACE_KEY",
    "COMPONENT_LABEL",
    "CONFIG_SECTION",
    "DEFAULT_BOOT_DISK_GB",
    "DEFAULT_GPU_DRIVER_VERSION",
    "DEFAULT_RELEASE_CHANNEL",
    "DEFAULT_SYSTEM_MACHINE_TYPE",
    "DLVM_IMAGE",
    "DLVM_IMAGE_SOURCE",
    "DLVM_IMAGE_VERIFIED",
    "GKE_ACCELERATOR_LABEL",
    "GKE_NODEPOOL_LABEL",
    "GPU_DRIVER_VERSIONS",
    "GPU_POOL_NAME",
    "GPU_TAINT",
    "KUBERNETES_VERSION",
    "KUBERNETES_VERSION_VERIFIED",
    "MIN_KUBERNETES_VERSION",
    "NODE_IMAGE_TYPE",
    "POD_RANGE",
    "RELEASE_CHANNELS",
    "RESERVATION_KEY",
    "SERVICE_RANGE",
    "SHAPE_KEYS",
    "STACK_GRACE_KEY",
    "SYSTEM_POOL_NAME",
    "TOKEN",
    "A100Cluster",
    "A100ClusterArgs",
    "A100Shape",
    "A100TrainingArgs",
    "GpuCluster",
    "SupervisedCompute",
    "a100_cluster_problems",
    "gce_console_url",
    "gke_console_url",
    "gke_spot_grace_note",
    "gpu_code_runs_on",
    "instance_name_pattern",
    "instance_names",
    "job_name_for",
    "kubeconfig",
    "parse_version",
    "region_of",
    "supervised_compute",
    "validate_args",
]

TOKEN: Final = "trainstack:gpu:A100Cluster"
COMPONENT_LABEL: Final = "a100-cluster"
CONFIG_SECTION: Final = "gpu_cluster"
"""The stack config section that holds this component's `SHAPE_KEYS` (`trainstack.infra.config`)."""


@dataclass(frozen=True)
class SupervisedCompute:
    """What the run supervisor of an `A100Cluster` stops (`supervised_compute`)."""

    kind: Literal["mig", "node_pool"]
    resource_name: pulumi.Output[str]
    """gce: the instance group; gke: the GPU node pool (`trainstack.components.run_supervisor`
    `NAME_FORMS`)."""
    run_record: pulumi.Output[str] | None
    """The run's record prefix (`A100Cluster.run_record`), None without one."""
    node_count: int
    """The GPU nodes: one heartbeat each (`<run_record>.alive/<node rank>`)."""
    instances: list[str] | None = None
    """gce: the group's VMs by node rank (`instance_names`), which the supervisor deletes by
    name; a flex-start group's none (its resize request names them: the supervisor deletes
    the VMs the group lists); gke: None."""
    hourly_usd: float = 0.0
    """The GPU nodes' $/hour at list price (rounded to cents): what the supervisor's spend
    count adds per hour of billing (`supervisor_run`'s `hourly_usd`; the cluster's facts'
    `stoppable_hourly_usd`)."""
    autoscaled: bool = False
    """gke: the GPU pool is autoscaled (flex-start), so the supervisor deletes its VMs through
    its instance groups (`RunSupervisorArgs.autoscaled`); gce: False."""


def supervised_compute(args: A100ClusterArgs) -> SupervisedCompute:
    """What an `A100Cluster` built from `args` bills for and its run supervisor stops, known
    before the cluster is registered (its supervisor comes first)."""
    gpu = validate_args(args)
    where = pulumi.Output.concat("projects/", args["project"])
    group = gcp_name(args["deployment_name"], "a100")
    hourly = round(a100_nodes_hourly_usd(gpu.machine_type, gpu.node_count, gpu.spot), 2)
    if gpu.backend == "gce":
        name = pulumi.Output.concat(where, f"/zones/{gpu.zone}/instanceGroupManagers/{group}")
        # A flex-start group's VMs are named by its resize request, not planned.
        names = [] if gpu.flex_start else instance_names(args["deployment_name"], gpu.node_count)
        record = gce_run_record(args, gpu)
        return SupervisedCompute("mig", name, record, gpu.node_count, names, hourly)
    cluster = gcp_name(args["deployment_name"], "a100", max_len=CLUSTER_NAME_MAX)
    pool = f"/locations/{gpu.zone}/clusters/{cluster}/nodePools/{GPU_POOL_NAME}"
    return SupervisedCompute(
        "node_pool",
        pulumi.Output.concat(where, pool),
        gke_run_record(args, gpu),
        gpu.node_count,
        hourly_usd=hourly,
        autoscaled=bool(gpu.flex_start),
    )


class A100Cluster(pulumi.ComponentResource):
    """A100 nodes on GKE (with a Kubernetes training Job) or Compute Engine."""

    backend: str
    """`gke` or `gce`."""
    node_count: int
    """Nodes (machines) of the machine type."""
    gpus_per_node: int
    """GPUs of the machine type (catalog)."""
    total_gpus: int
    """GPUs over every node: `node_count` x `gpus_per_node`."""
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
    """gke: the GKE cluster resource; gce: None."""
    system_pool: container.NodePool | None
    """gke: the one on-demand CPU node for the cluster's system pods (DNS, controllers);
    gce: None."""
    gpu_pool: container.NodePool | None
    """gke: the A100 node pool; gce: None."""
    k8s_provider: k8s.Provider | None
    """gke: the Kubernetes provider for the cluster (its kubeconfig); gce: None."""
    training_job: KubernetesTrainingJob | None
    """gke with training: the `KubernetesTrainingJob`; otherwise None."""
    placement_policy: compute.ResourcePolicy | None
    """gce with compact placement and at least 2 nodes."""
    instance_template: compute.InstanceTemplate | None
    """gce: what every node is made from."""
    instance_group: compute.InstanceGroupManager | None
    """gce: the zonal managed instance group that recreates a stopped or lost node."""
    node_configs: list[compute.PerInstanceConfig]
    """gce: per-instance configs by node rank (name and rank metadata); none with flex-start."""
    resize_request: compute.ResizeRequest | None
    """gce with flex-start: the resize request that creates the nodes for the run."""
    fabric_networks: list[compute.Network]
    """gce on A4 or A3 Ultra: the GPUDirect RDMA fabric's VPCs (gVNIC, RoCE)."""
    facts: dict[str, Any]
    """What `trainstack plan|plan-diff|quota|status|logs --program` read from this cluster
    (`trainstack.components.facts`; also a registered output): GPUs, machines (GKE's system
    node counted), $/hour at list price (spot price when spot; GKE's cluster fee and system
    node included), the Compute Engine quota it draws, its plan notes (gke spot: whether the
    trainer's `--preemption_grace_s` fits GKE's notice), where its state is read (`status`:
    gke: cluster, namespace and Job; gce: the instances), its trainer's Cloud Logging scope
    (`logs`) and, given `training.code`, the plan's "Your code" entry (`code`, `cluster_code`). Export it to read a deployed program's status:
    `pulumi.export("gpu", cluster.facts)`. Plain values but `status` and `logs`, Outputs
    known once deployed (`trainstack.components.facts.deployed_facts`)."""
    run_record: pulumi.Output[str] | None
    """With training and a checkpoint bucket: the run's record prefix,
    `gs://<bucket>/trainstack-run-<key>` (`trainstack.trainers.common.run_records`)."""

    def __init__(
        self, name: str, args: A100ClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("A100Cluster", A100ClusterArgs, args)
        training_arg = args.get("training")
        code = training_arg.get("code") if training_arg is not None else None
        # Your code (`training.code`) becomes the node launcher's arguments, checked first.
        args = component_check("A100Cluster", with_code, args)  # type: ignore[assignment]
        if "environment" in args:
            # The label the policy pack requires on GPU machines (`accelerators-labelled`),
            # on the nodes and the training Job alike.
            env_labels = component_check(
                "A100Cluster",
                environment_labels,
                stack_labels(args.get("labels")),
                args["environment"],
            )
            args = {**args, "labels": env_labels}
        gpu = component_check("A100Cluster", validate_args, args)
        code_entry = cluster_code(code, gpu)
        labels = component_check("A100Cluster", labels_input, args.get("labels"), COMPONENT_LABEL)
        super().__init__(TOKEN, name, None, opts)
        # The nodes read the staging and checkpoint buckets from their first boot.
        deps = inherited_depends_on(opts)

        self.backend = gpu.backend
        self.node_count = gpu.node_count
        self.gpus_per_node = gpu.machine.gpus
        self.total_gpus = gpu.total_gpus
        # One name per line: the reference's docstrings come from griffe, which gives every
        # name of a chained assignment the first one's docstring.
        self.endpoint = None
        self.node_pool_name = None
        self.kubeconfig = None
        self.job_name = None
        self.instance_names = None
        self.cluster = None
        self.system_pool = None
        self.gpu_pool = None
        self.k8s_provider = None
        self.training_job = None
        self.placement_policy = None
        self.instance_template = None
        self.instance_group = None
        self.node_configs = []
        self.resize_request = None
        self.fabric_networks = []
        self.run_record = None
        if gpu.backend == "gke":
            gke = create_gke(name, args, gpu, labels, parent=self, depends_on=deps)
            self.cluster = gke.cluster
            self.system_pool = gke.system_pool
            self.gpu_pool = gke.gpu_pool
            self.kubeconfig = gke.kubeconfig
            self.k8s_provider = gke.k8s_provider
            self.cluster_name = gke.cluster_name
            self.endpoint = gke.endpoint
            self.node_pool_name = gke.node_pool_name
            self.console_url = gke.console_url
            self.training_job = gke.training_job
            if gke.training_job is not None:
                self.job_name = gke.training_job.job_name
                self.run_record = gke.training_job.manifests.apply(_pod_run_record)
            log_filter: pulumi.Input[str]
            resource_filter: pulumi.Input[str]
            log_filter, resource_filter = gke_filters(self.cluster_name)
        else:
            gce = create_gce(name, args, gpu, labels, parent=self, depends_on=deps)
            self.placement_policy = gce.placement_policy
            self.instance_template = gce.template
            self.instance_group = gce.group
            self.node_configs = gce.node_configs
            self.resize_request = gce.resize_request
            self.fabric_networks = gce.fabric.networks if gce.fabric is not None else []
            self.cluster_name = gce.cluster_name
            self.instance_names = gce.instance_names
            self.console_url = gce.console_url
            self.run_record = gce.run_record
            log_filter, resource_filter = gce_filters(args["deployment_name"], gce.name_pattern)
        self.dashboard_scope: DashboardScope = {
            "target": "gpu_cluster",
            "gpu_backend": gpu.backend,
            "worker_count": gpu.node_count,
            "log_filter": log_filter,
            "resource_filter": resource_filter,
        }

        names: pulumi.Input[list[str] | None] = self.instance_names
        training: Mapping[str, Any] = args.get("training") or {}
        checkpoint_dir = pulumi.Output.all(
            training.get("checkpoint_url"), training.get("node_args")
        ).apply(lambda v: a100_checkpoint_dir(training, v))
        stack = pulumi.get_stack()
        self.facts = deployed_facts(
            lambda v: a100_cluster_facts(args, gpu, stack, v, name, code_entry),
            [args["project"], self.cluster_name, self.job_name, names, log_filter, checkpoint_dir],
            ["", "", "", None, "", None],
        )
        self.register_outputs(
            {
                "facts": self.facts,
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
                "run_record": self.run_record,
            }
        )


DEFAULT_GRACE_S: Final = float(TrainConfig.model_fields["preemption_grace_s"].default)


GpuCluster = A100Cluster
"""The component's name for any GPU family (A2, A3 High, A3 Mega, A3 Ultra, A4);
`A100Cluster` stays, the same class."""


def _grace_s(args: A100ClusterArgs) -> float:
    """The trainer's SIGTERM grace: its `--preemption_grace_s` flag, else the trainers'
    default."""
    training = args.get("training")
    flags = training.get("trainer_args", []) if training is not None else []
    for flag in flags:
        if flag.startswith("--preemption_grace_s="):
            return float(flag.partition("=")[2])
    return DEFAULT_GRACE_S


def a100_checkpoint_dir(training: Mapping[str, Any], values: Sequence[Any]) -> str | None:
    """Where the trainer writes its checkpoints (`values`: the resolved checkpoint URL and
    node args): your code's run-contract folder, else the bundled trainer's `--checkpoint_dir`
    (`trainstack.components.gpu_startup.with_checkpoint_dir`)."""
    checkpoint_url, node_args = values
    if node_args is not None:
        return checkpoint_dir_of(node_args)
    flags = with_checkpoint_dir(training.get("trainer_args", []), checkpoint_url)
    chosen = [f.partition("=")[2] for f in flags if f.startswith("--checkpoint_dir=")]
    return chosen[-1] if chosen else None


def a100_cluster_facts(
    args: A100ClusterArgs,
    gpu: A100Shape,
    stack: str,
    values: Sequence[Any],
    name: str | None = None,
    code: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A cluster's facts (`trainstack.components.facts`), from its validated arguments
    (`values`: project, cluster, Job and instance names, log filter, checkpoint folder);
    `name`: the component's Pulumi name; `code`: the plan's entry for the `training.code` it
    runs (`cluster_code`)."""
    project, cluster, job, instances, log_filter, checkpoint_dir = values
    training: Mapping[str, Any] = args.get("training") or {}
    status: dict[str, Any] = {
        "project": project,
        "zone": gpu.zone,
        "cluster": cluster,
        "checkpoint_dir": checkpoint_dir,
        # Your code's checkpoint folders are its own: status takes its marker's word.
        "own_code": "node_args" in training,
    }
    logs: dict[str, Any] = {"platform": gpu.backend, "workers": gpu.node_count}
    notes = []
    after_stop = a100_after_stop(
        gpu.machine_type, gpu.node_count, args.get("reservation"), gpu.zone
    )
    if gpu.backend == "gke":
        if gpu.spot:
            notes.append(
                gke_spot_grace_note(
                    _grace_s(args),
                    spot_key="A100Cluster.spot",
                    grace_key=COMPONENT_GRACE_KEY,
                    own_code=status["own_code"],
                )
            )
        fabric = fabric_for(gpu.machine_type, args["deployment_name"], gpu.zone)
        if fabric is not None:
            notes.append(fabric_note(fabric, gpu.machine_type))
        elif (no_fabric := no_fabric_note(gpu.machine_type)) is not None:
            notes.append(no_fabric)
        status |= {"namespace": DEFAULT_NAMESPACE, "job": job}
        # Indexed Job pods are `<job>-<completion index>-<suffix>`.
        logs |= {"scope": gke_filter_text(cluster)[0], "pod_prefix": f"{job}-"}
        # The supervisor empties the GPU pool only: the cluster and its system node bill on.
        after_stop.insert(0, gke_cluster_after_stop(stack))
    else:
        gce_fabric = gce_fabric_for(gpu.machine_type, args["deployment_name"], gpu.zone)
        if gce_fabric is not None:
            notes.append(gce_fabric.note())
        status["instances"] = instances
        logs |= {"scope": log_filter, "instances": instances}
    seconds = args.get("max_run_seconds")
    return make_facts(
        "A100Cluster",
        gpu.backend,
        name=name,
        **a100_summary(gpu.backend, gpu.machine_type, gpu.node_count, gpu.spot),
        quota=a100_quota(
            gpu.backend,
            gpu.machine_type,
            gpu.node_count,
            gpu.spot or gpu.flex_start,
            region_of(gpu.zone),
        ),
        notes=notes,
        run_limit=run_limit_own_text(gpu.backend, seconds, gpu.flex_start) if seconds else None,
        stoppable_hourly_usd=round(
            a100_nodes_hourly_usd(gpu.machine_type, gpu.node_count, gpu.spot), 2
        ),
        after_stop=after_stop,
        status=status,
        logs=logs,
        code=code,
    )


def cluster_code(code: UserCode | None, gpu: A100Shape) -> dict[str, Any] | None:
    """The plan's "Your code" entry for the cluster's `training.code` (None without): on
    every node, one process per GPU under torchrun, one per node with `launcher: node`
    (`trainstack.components.code_summary`); the same a stack's `gpu_cluster` plans."""
    if code is None:
        return None
    default = GPU_CODE[gpu.backend].default_launcher
    return component_code_summary(
        code,
        "A100Cluster",
        key="training.code",
        default_launcher=default,
        runs_on=gpu_code_runs_on(gpu.backend, gpu.machine_type, gpu.zone, code.image),
        world_size=launcher_world_size(
            code.launcher_for(default), gpu.node_count, gpu.machine.gpus
        ),
        node_env=GPU_NODE_ENV,
    )


def _pod_run_record(manifests: dict[str, Any]) -> str:
    """The run record prefix the Job's pods get (`run_records`), or "" without one."""
    [container] = manifests["job"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    return str(env.get(RUN_RECORD_ENV, ""))

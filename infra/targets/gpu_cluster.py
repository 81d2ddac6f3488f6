"""What targets `gke` and `gce` share: stack section `trainstack:gpu_cluster` (the
`A100Cluster` component's machines, `backend` picking the target) and the parts of their
checks, cost, quota and composition that do not depend on the backend, and the run
supervisor that removes the GPU nodes at the run's end. Each backend's own parts are in
`trainstack.infra.targets.gke` / `.gce`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final, cast

from pydantic import BeforeValidator, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from trainstack.components.a100_cluster import (
    A100Cluster,
    A100ClusterArgs,
    A100TrainingArgs,
    SupervisedCompute,
    supervised_compute,
)
from trainstack.components.a100_cluster.validate import (
    A100Shape,
    a100_cluster_problems,
    cidr_problem,
    flex_start_problems,
)
from trainstack.components.catalog.batch import WorldSize, gpu_world_size
from trainstack.components.catalog.gpu_fabric_gce import GCE_FLEX_START_WAIT
from trainstack.components.catalog.gpu_families import (
    FLEX_START_DISCOUNT_NOTE,
    FLEX_START_MAX_HOURS,
    FLEX_START_QUOTA_NOTE,
)
from trainstack.components.catalog.names import zone_in_region_problems
from trainstack.components.catalog.prices import MACHINE_PRICES
from trainstack.components.catalog.supervisor_region import supervisor_region
from trainstack.components.code_summary import GPU_NODE_ENV
from trainstack.components.facts import (
    a100_after_stop,
    a100_nodes_hourly_usd,
    a100_quota,
    a100_summary,
    reach_note,
)
from trainstack.infra.outputs import (
    OUTPUT_CLUSTER_ENDPOINT,
    OUTPUT_CLUSTER_NAME,
    OUTPUT_CONSOLE_URL,
    OUTPUT_GPUS,
    OUTPUT_INSTANCE_NAMES,
    OUTPUT_JOB_NAME,
    OUTPUT_KUBECONFIG,
    OUTPUT_NODE_POOL,
)
from trainstack.infra.run_args import cloud_trainer_args
from trainstack.infra.supervision import (
    after_supervisor,
    register_supervisor,
    run_settings,
)
from trainstack.infra.targets.base import CloudTarget, ComposeContext, StillBilling
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import TRAINER_MODULES
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S

if TYPE_CHECKING:
    from trainstack.components.run_supervisor import RunSupervisor
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode


def _cidr(value: Any) -> str:
    """One authorized-network block, by the component's own rule (`cidr_problem`)."""
    problem = cidr_problem(value)
    if problem:
        raise PydanticCustomError("trainstack", problem.replace("{", "{{").replace("}", "}}"))
    return str(value)


class GpuClusterConfig(A100Shape):
    """`trainstack:gpu_cluster`: A100 machines on GKE or plain Compute Engine; the section is
    the A100Cluster component's own shape (so the stack config and the component parse the
    machines alike) plus `master_authorized_cidrs`."""

    master_authorized_cidrs: list[Annotated[str, BeforeValidator(_cidr)]] | None = None
    """gke: the only networks that may reach the cluster's public control-plane endpoint
    (GKE authorized networks,
    https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks); unset, any
    address may try, and only IAM authentication stands in the way."""

    @field_validator("master_authorized_cidrs")
    @classmethod
    def _gke_only(cls, cidrs: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if cidrs == []:
            raise PydanticCustomError(
                "trainstack",
                "[] names no network (the cluster would stay open to any address); valid: at "
                "least one CIDR block, or remove the key",
            )
        backend = info.data.get("backend")
        if cidrs is not None and backend != "gke":
            raise PydanticCustomError(
                "trainstack",
                "applies to backend 'gke' only (the GKE control plane); backend {backend} has "
                "none; valid: remove the key",
                {"backend": repr(backend)},
            )
        return cidrs


QUEUED_PROVISIONING_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest: 'With "
    "flex-start with queued provisioning, GKE allocates all requested resources at the same "
    "time'; 'The nodes are scheduled atomically in one zone'; at Provisioned=true 'You have 10 "
    "minutes to start the Pods to consume provisioned resources. After this time, the cluster "
    "autoscaler considers the nodes as not needed and removes them'"
)


def flex_start_note(backend: str, hours: float | None, nodes: int = 1) -> str:
    """What a flex-start cluster may wait for and what it costs, in the plan's words."""
    if backend == "gce":
        wait = GCE_FLEX_START_WAIT
    elif nodes > 1:
        # components/a100_cluster/gke_queued.py renders the pool and the request.
        wait = (
            f"the node pool has queued provisioning: the training Job's ProvisioningRequest "
            f"asks for all {nodes} nodes at once, and GKE adds them together, in one zone, "
            "when Dynamic Workload Scheduler finds the capacity for all of them, with no "
            "bound on the wait; no node bills before then, and the Job's pods, waiting "
            "already, start on them at once (nodes no pod uses within 10 minutes are removed; "
            "without training the pool gets no request and stays empty) "
            f"({QUEUED_PROVISIONING_SOURCE.split(': ')[0]})"
        )
    else:
        wait = (
            "the node pool has no nodes until the training pods ask for them; GKE adds "
            "them when Dynamic Workload Scheduler finds the capacity, with no bound on the wait"
        )
    run = (
        f"each machine is deleted {hours:g} h after it starts (limits.max_run_hours)"
        if hours is not None
        else f"each node runs at most {FLEX_START_MAX_HOURS} h (7 days)"
    )
    return (
        f"gpu_cluster.flex_start: {wait}; {run}; {flex_start_end_note(backend, nodes > 1)}; "
        f"{FLEX_START_DISCOUNT_NOTE}; {FLEX_START_QUOTA_NOTE}"
    )


def flex_start_resume(stack: str) -> str:
    """What asks a gce flex-start stack's VMs again once they are gone: replacing its resize
    request. A request is spent once it has made its VMs (SUCCEEDED, a final state: "the
    ResizeRequest is not going to retry", terraform-provider-google
    resource_compute_resize_request.go `state`/`error` descriptions), its every field is
    ForceNew and its Read keeps it while Google lists it (the same file: ForceNew on each
    field, resourceComputeResizeRequestRead), so `pulumi up` changes nothing and asks for
    no VM; `--replace` deletes it ("Deleting request does not delete instances that were
    provisioned previously", compute.v1 discovery instanceGroupManagerResizeRequests.delete)
    and creates it again. Its Pulumi name: `A100Cluster(f"{stack}-gpu")` (GpuCluster's
    program) and `a100_cluster.gce._flex_start_group`'s `f"{name}-resize"`."""
    return (
        f"`pulumi up --replace <URN of {stack}-gpu-resize>` (`pulumi stack --show-urns`; the "
        "group's resize request is spent, `pulumi up` alone asks for no VM)"
    )


def flex_start_end_note(backend: str, queued: bool = False) -> str:
    """What happens at the end of a flex-start machine's run duration (save, then stop),
    in the plan's words (`catalog.capacity_end` has the sources); `queued`: a gke pool with
    queued provisioning, whose request is spent once its nodes are gone."""
    gone = (
        "Compute Engine deletes the VM then, with no notice Google documents"
        if backend == "gce"
        else "GKE removes the node then (how, and whether its pods get a notice, Google "
        "does not say)"
    )
    stop = (
        "the supervisor deletes the group's VMs"
        if backend == "gce"
        else "the Job replaces the pod, which holds on a node that is going, and the "
        "supervisor sets the pool's autoscaling to 0 and deletes its VMs through its instance "
        "groups"
    )
    again = (
        " once the group's resize request is replaced: its VMs are spent and `pulumi up` "
        "alone does not renew it (`pulumi up --replace` with its URN, from `pulumi stack "
        "--show-urns`), with a higher limits.max_run_hours (it is each VM's run duration and "
        "the run's limit, used up by then)"
        if backend == "gce"
        else ""
    )
    if backend == "gce":
        # The resize request's name is fixed (`a100_cluster.gce`) and every field forces a new
        # one (terraform-provider-google resource_compute_resize_request.go: all ForceNew, no
        # Update of them; Read keeps a SUCCEEDED request in state): once its VMs are deleted,
        # an unchanged config plans nothing.
        again += (
            "; after the supervisor deletes the VMs for a failure or a hang, `pulumi up` with "
            "the same config changes nothing (the resize request has succeeded and stays): ask "
            "again with `pulumi up --replace` and the resize request's URN, from `pulumi stack "
            "--show-urns`"
        )
    if backend == "gke" and queued:
        # The request's spec is immutable: only a new request asks for nodes again. A changed
        # Job gets one under a new name (`a100_cluster.gke_queued.request_name`); an unchanged
        # one keeps the spent request, which only a replace renews (same name, so the
        # waiting pods consume it).
        again = (
            " once the ProvisioningRequest is new: a changed run (trainer package, arguments, "
            "image) gets a new one, but with nothing changed `pulumi up` keeps the spent one "
            "(its nodes are gone and its spec cannot change); renew it with `pulumi up "
            "--replace` and its URN, from `pulumi stack --show-urns`"
        )
    return (
        f"{gone}: the trainer saves a checkpoint trainer.deadline_margin_s (default "
        f"{DEFAULT_MARGIN_S:g} s) before, from the machine's boot time plus its run duration "
        f"(TRAINSTACK_DEADLINE), the run ends capacity_ended (exit 6) and {stop}; `pulumi "
        f"up` asks for new capacity and the run resumes from that checkpoint{again}"
    )


def gpu_section(cfg: StackView) -> GpuClusterConfig:
    return cast(GpuClusterConfig, cfg.compute)


class GpuCluster(CloudTarget):
    """An A100 cluster of `gpu_cluster.backend` == `name`."""

    section = "gpu_cluster"
    model = GpuClusterConfig
    own_network = True
    runs_image = True
    supervised = True

    def claims(self, section: GpuClusterConfig) -> bool:
        return section.backend == self.name

    def section_problems(
        self, section: GpuClusterConfig, region: str | None, trainer: StackTrainer | None
    ) -> list[str]:
        errors = zone_in_region_problems(section.zone, region, "gpu_cluster.zone")
        args = section.model_dump()
        problems = a100_cluster_problems(args, prefix="gpu_cluster.", shape_only=True)
        # A zone outside the region is already reported; do not report the zone twice.
        return errors + [p for p in problems if not (errors and p.startswith("gpu_cluster.zone: "))]

    def limits_problems(self, section: GpuClusterConfig, limits: Any) -> list[str]:
        seconds = limits.max_run_seconds if limits is not None else None
        return flex_start_problems(section, seconds, "limits.max_run_hours")

    def flex_start_run_seconds(self, section: GpuClusterConfig, limits: Any) -> int | None:
        # The nodes' run duration: `limits.max_run_hours` (gce: the resize request's and the
        # VMs' run duration; gke: the pool's max_run_duration), else GKE's 7 days, which no
        # margin reaches (`MAX_MARGIN_S` is one day).
        if not section.flex_start or limits is None:
            return None
        seconds: int | None = limits.max_run_seconds
        return seconds

    def world_size(self, section: GpuClusterConfig, trainer: TrainConfig) -> WorldSize:
        return gpu_world_size(
            trainer.framework,
            trainer.strategy,
            machines=section.node_count,
            gpus_per_machine=section.machine.gpus,
        )

    def _nodes_hourly_usd(self, cfg: StackView) -> float:
        gpu = gpu_section(cfg)
        return a100_nodes_hourly_usd(gpu.machine_type, gpu.node_count, gpu.spot)

    def summary(self, cfg: StackView) -> dict[str, Any]:
        # The same arithmetic as A100Cluster's facts.
        gpu = gpu_section(cfg)
        return a100_summary(gpu.backend, gpu.machine_type, gpu.node_count, gpu.spot)

    def stoppable_hourly_usd(self, cfg: StackView) -> float:
        # The GPU nodes only: the supervisor leaves GKE's cluster and system node running.
        return round(self._nodes_hourly_usd(cfg), 2)

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        gpu = gpu_section(cfg)
        after = a100_after_stop(gpu.machine_type, gpu.node_count, gpu.reservation, gpu.zone)
        return [StillBilling(**item) for item in after]

    def quota(self, cfg: StackView) -> list[dict[str, Any]]:
        gpu = gpu_section(cfg)
        assert cfg.region is not None
        preemptible = gpu.spot or gpu.flex_start  # flex-start draws on preemptible quota
        return a100_quota(gpu.backend, gpu.machine_type, gpu.node_count, preemptible, cfg.region)

    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        gpu = gpu_section(cfg)
        launcher = code.launcher_for(self.default_launcher)
        return gpu.node_count * (gpu.machine.gpus if launcher == "torchrun" else 1)

    def node_launcher_env(self, cfg: StackView) -> list[str]:
        return list(GPU_NODE_ENV)

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        kind = "mig" if self.name == "gce" else "node_pool"
        gpu = gpu_section(cfg)
        autoscaled = kind == "node_pool" and bool(gpu.flex_start)
        notes = [reach_note(kind, False, cfg.project, autoscaled)]
        price = MACHINE_PRICES[gpu.machine_type]
        if price.note:
            notes.append(f"gpu_cluster.machine_type: {gpu.machine_type}'s price is {price.note}")
        if gpu.flex_start:
            notes.append(flex_start_note(self.name, cfg.limits.max_run_hours, gpu.node_count))
        return notes

    def services(self, cfg: StackView) -> list[str]:
        return ["container.googleapis.com"]

    def compose(self, ctx: ComposeContext) -> tuple[dict[str, Any], DashboardScope]:
        cfg, deployment, network = ctx.cfg, ctx.deployment, ctx.network
        gpu = gpu_section(cfg)
        assert network is not None and cfg.project is not None
        training: A100TrainingArgs = {
            "package_uri": ctx.package.uri,
            # Bundled: --checkpoint_dir=<url>/checkpoints/<run_name of the flags>; gce: where a
            # run limit's start goes.
            "checkpoint_url": ctx.buckets.checkpoint_url,
        }
        code = cfg.trainer.user_code
        if ctx.node_args is not None:
            # Your code, on every node (gke: every pod, in your image if given; the config
            # refuses an image on gce, whose VMs run no container).
            training["node_args"] = ctx.node_args
            if ctx.secret_env_names:
                training["secret_env_names"] = list(ctx.secret_env_names)
            if code is not None and code.image:
                training["image"] = code.image
        else:
            training["trainer_module"] = TRAINER_MODULES[cfg.trainer.framework]
            training["trainer_args"] = cloud_trainer_args(cfg, deployment)
        args: A100ClusterArgs = {
            "project": cfg.project,
            "zone": gpu.zone,
            "deployment_name": deployment,
            "backend": gpu.backend,
            "machine_type": gpu.machine_type,
            "node_count": gpu.node_count,
            "spot": gpu.spot,
            "compact_placement": gpu.compact_placement,
            "tier_1_networking": gpu.tier_1_networking,
            "network_self_link": network.network_self_link,
            "subnetwork_self_link": network.subnetwork_self_link,
            "node_tag": network.node_tag,
            "service_account_email": ctx.identity.service_account_email,
            "environment": cfg.environment,
            "labels": ctx.labels,
            "training": training,
        }
        if gpu.reservation is not None:
            args["reservation"] = gpu.reservation
        if gpu.flex_start:
            # Only when set: the args (and the pinned plans) of other stacks stay as they were.
            args["flex_start"] = True
        if gpu.master_authorized_cidrs is not None:
            args["master_authorized_cidrs"] = list(gpu.master_authorized_cidrs)
        if cfg.limits.max_run_seconds is not None:
            args["max_run_seconds"] = cfg.limits.max_run_seconds
        # The supervisor first: the GPU nodes depend on it, so they never run unsupervised.
        supervisor, outputs = self._supervisor(ctx, supervised_compute(args))
        opts = after_supervisor(ctx.after_grants, supervisor)
        cluster = A100Cluster(f"{deployment}-gpu", args, opts=opts)
        outputs |= {
            OUTPUT_CLUSTER_NAME: cluster.cluster_name,
            OUTPUT_CONSOLE_URL: cluster.console_url,
            OUTPUT_GPUS: cluster.total_gpus,
        }
        if cluster.endpoint is not None:  # gke
            outputs[OUTPUT_CLUSTER_ENDPOINT] = cluster.endpoint
            outputs[OUTPUT_NODE_POOL] = cluster.node_pool_name
            outputs[OUTPUT_KUBECONFIG] = cluster.kubeconfig  # a secret
        if cluster.job_name is not None:
            outputs[OUTPUT_JOB_NAME] = cluster.job_name
        if cluster.instance_names is not None:  # gce
            outputs[OUTPUT_INSTANCE_NAMES] = cluster.instance_names
        return outputs, cluster.dashboard_scope

    def _supervisor(
        self, ctx: ComposeContext, target: SupervisedCompute
    ) -> tuple[RunSupervisor, dict[str, Any]]:
        """The cluster's supervisor: it deletes the instance group's VMs (gce) or sets the
        GPU node pool (gke) to 0 at the run's end; it and its stack outputs."""
        cfg = ctx.cfg
        assert cfg.region is not None
        values: dict[str, Any] = {
            "project": cfg.project,
            "region": supervisor_region(cfg.region),
            "deployment_name": ctx.deployment,
            "kind": target.kind,
            "resource_name": target.resource_name,
            "run": run_settings(
                cfg, self.stoppable_hourly_usd(cfg), target.run_record, target.node_count
            ),
            "staging_bucket": ctx.buckets.staging_bucket,
            "checkpoint_bucket": ctx.buckets.checkpoint_bucket,
            "labels": dict(ctx.labels),
        }
        if target.instances is not None:
            values["instances"] = target.instances
        if target.kind == "node_pool":
            values["autoscaled"] = target.autoscaled
        return register_supervisor(ctx.deployment, values, ctx.after_grants)

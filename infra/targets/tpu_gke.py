"""Target `tpu_gke`: TPU slices as GKE node pools running your code as a JobSet
(`TpuGkeSlices`), with its run supervisor (`RunSupervisor`, kind `node_pools`: it sets the
slices' pools to 0 at the run's end, `limits.max_run_hours` and `limits.max_total_usd`). Stack section `trainstack:tpu` with `backend: gke` (the section it
shares with target `tpu`, `backend: tpu_vm`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from trainstack.components._tpu_jobset import DEFAULT_MAX_RESTARTS, MULTISLICE_NOTE
from trainstack.components.catalog.batch import WorldSize, tpu_world_size
from trainstack.components.catalog.machines import GKE_SYSTEM_NODE_MACHINE, MACHINES
from trainstack.components.catalog.names import zone_in_region_problems
from trainstack.components.catalog.supervisor_region import supervisor_region
from trainstack.components.catalog.tpu_gke import (
    FLEX_START_SOURCE,
    JOBSET_SOURCE,
    JOBSET_VERSION,
    gke_vms,
    tpu_gke_code_problems,
)
from trainstack.components.facts import gke_cluster_after_stop, reach_note
from trainstack.components.tpu_gke_slices import (
    SupervisedSlices,
    TpuGkeSlices,
    TpuGkeSlicesArgs,
    supervised_slices,
    tpu_gke_slices_problems,
)
from trainstack.components.training_dashboard.targets import gke_filter_text
from trainstack.infra import catalog
from trainstack.infra.compute_status import K8S_NAMESPACE, kube_get, pod_hosts
from trainstack.infra.logs import check_worker, log_query
from trainstack.infra.outputs import (
    OUTPUT_CHECKPOINT_DIR,
    OUTPUT_CLUSTER_ENDPOINT,
    OUTPUT_CLUSTER_NAME,
    OUTPUT_CONSOLE_URL,
    OUTPUT_JOB_NAME,
    OUTPUT_KUBECONFIG,
    OUTPUT_TPU_CHIPS,
    OUTPUT_TPU_HOSTS,
)
from trainstack.infra.run_args import checkpoint_dir
from trainstack.infra.stack_outputs import require
from trainstack.infra.supervision import after_supervisor, register_supervisor, run_settings
from trainstack.infra.targets.base import CloudTarget, ComposeContext, RunResource, StillBilling
from trainstack.infra.targets.gke import Gke
from trainstack.infra.targets.tpu import TPU_WORKER_ENV, TpuConfig, slice_or_none
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S

if TYPE_CHECKING:
    from trainstack.components.run_supervisor import RunSupervisor
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode

JOBSET_TYPE: Final = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
MEGASCALE_ENV: Final = (
    "MEGASCALE_NUM_SLICES",
    "MEGASCALE_SLICE_ID",
    "MEGASCALE_COORDINATOR_ADDRESS",
)
TPU_GKE_QUOTA_NOTE: Final = (
    "tpu: the TPU chips' quota is not checked: no Google page read names the quota GKE TPU "
    "node pools draw on (Cluster Toolkit's validator counts Compute Engine <VER>_TPUS / "
    "PREEMPTIBLE_<VER>_TPUS metrics, pkg/validators/quota.go; the Cloud TPU API's ids do not "
    "apply); the preflight checks the system node's CPUs only"
)
BACKEND_NOTE: Final = (
    "tpu: backend gke, Google's supported path for TPUs after the Cloud TPU API's freeze "
    "(bug fixes and security updates only; TPU7x and later only on Compute Engine or GKE): one "
    "GKE node pool per slice and a JobSet (JobSet controller {version}, {source}) over them"
)


def _tpu(cfg: StackView) -> TpuConfig:
    return cast(TpuConfig, cfg.compute)


def jobset_lines(inputs: Mapping[str, Any]) -> list[str]:
    """The text plan's lines for a planned JobSet."""
    spec = inputs.get("spec") or {}
    lines = []
    for job in spec.get("replicatedJobs", []) if isinstance(spec, Mapping) else []:
        template = job.get("template", {}).get("spec", {})
        pod = template.get("template", {}).get("spec", {})
        selector = pod.get("nodeSelector", {})
        lines.append(
            f"{job.get('replicas')} x slice {selector.get('cloud.google.com/gke-tpu-accelerator')}"
            f" {selector.get('cloud.google.com/gke-tpu-topology')}, "
            f"{template.get('parallelism')} pods each, image "
            f"{(pod.get('containers') or [{}])[0].get('image')}"
        )
    return lines


class TpuGke(CloudTarget):
    name = "tpu_gke"
    section = "tpu"
    model = TpuConfig
    own_network = True
    runs_image = True
    # One process per TPU VM drives its chips (JAX, PyTorch/XLA), as on a TPU VM.
    launchers = ("node",)
    supervised = True
    default_launcher = "node"
    run_resources = (RunResource(JOBSET_TYPE, describe=jobset_lines),)

    def claims(self, section: TpuConfig) -> bool:
        return section.backend == "gke"

    # ------------------------------------------------------------------ config

    def section_problems(
        self, section: TpuConfig, region: str | None, trainer: StackTrainer | None
    ) -> list[str]:
        errors = zone_in_region_problems(section.zone, region, "tpu.zone")
        problems = tpu_gke_slices_problems(section.model_dump(exclude_none=True), "tpu.")
        return errors + [p for p in problems if not (errors and p.startswith("tpu.zone: "))]

    def code_problems(self, section: TpuConfig, trainer: StackTrainer) -> list[str]:
        code = trainer.user_code
        return [] if code is None else tpu_gke_code_problems(True, code.image)

    def trainer_problems(self, section: TpuConfig, trainer: TrainConfig) -> list[str]:
        return tpu_gke_code_problems(False, None)

    def world_size(self, section: TpuConfig, trainer: TrainConfig) -> WorldSize:
        s = section.slice
        return tpu_world_size(s.accelerator_type, s.chips * section.slices)

    # ------------------------------------------------------------------ estimate and plan

    def _system_usd(self) -> float:
        system = catalog.MACHINE_PRICES[GKE_SYSTEM_NODE_MACHINE].hourly(False)
        return catalog.GKE_CLUSTER_FEE_USD + system

    def _slices_usd(self, cfg: StackView) -> float:
        tpu = _tpu(cfg)
        s = tpu.slice
        # Spot at the catalog's spot estimate; flex-start and reserved at the on-demand list
        # price, the most they cost (flex-start: "discounts (up to 53%)", FLEX_START_SOURCE).
        price = catalog.TPU_CHIP_PRICES[s.generation].hourly(tpu.provisioning == "spot")
        return s.chips * tpu.slices * price

    def summary(self, cfg: StackView) -> dict[str, Any]:
        tpu = _tpu(cfg)
        return {
            "tpu_chips": tpu.slice.chips * tpu.slices,
            "gpus": 0,
            "machines": gke_vms(tpu.slice) * tpu.slices + 1,
            "hourly_usd": self._slices_usd(cfg) + self._system_usd(),
        }

    def stoppable_hourly_usd(self, cfg: StackView) -> float:
        # The slices' pools only: the supervisor leaves the cluster and its system node.
        return round(self._slices_usd(cfg), 2)

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        # billing.GKE_CLUSTER_BILLS_UNTIL_DELETED, as on target gke.
        return [StillBilling(**gke_cluster_after_stop(stack))]

    def quota(self, cfg: StackView) -> list[dict[str, Any]]:
        assert cfg.region is not None
        system = MACHINES[GKE_SYSTEM_NODE_MACHINE]
        return [catalog.quota_need(catalog.CPUS_QUOTA, {"region": cfg.region}, system.vcpus)]

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        if _tpu(cfg).provisioning == "flex-start":
            return True, f"flex-start node pools' max_run_duration {seconds}s (at most 7 days)"
        return True, (
            f"the run supervisor asks the trainer to save and stop {seconds}s after its first "
            "sight of the slices billing, then sets their node pools to 0 nodes (the JobSet "
            "restarts its child Jobs, so no Job deadline bounds the run)"
        )

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        return code.image or "(trainer.image: required)"

    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        tpu = _tpu(cfg)
        return gke_vms(tpu.slice) * tpu.slices

    def node_launcher_env(self, cfg: StackView) -> list[str]:
        # GKE's TPU webhook sets the TPU_WORKER_* pair; JobSet's labels the MEGASCALE_* ones.
        return [*TPU_WORKER_ENV, *(MEGASCALE_ENV if _tpu(cfg).slices > 1 else ())]

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        tpu = _tpu(cfg)
        notes = [
            BACKEND_NOTE.format(version=JOBSET_VERSION, source=JOBSET_SOURCE.split(" (")[0]),
            (
                f"tpu: recovery: a preempted or repaired host fails its slice's Job and the "
                f"JobSet restarts every slice from the newest checkpoint, at most "
                f"{DEFAULT_MAX_RESTARTS} times; exits 1, 2 and 5 (code, config, missing "
                "accelerators) fail it for good"
            ),
            TPU_GKE_QUOTA_NOTE,
            reach_note("node_pools", False, cfg.project),
        ]
        if tpu.slices > 1:
            notes.append(MULTISLICE_NOTE)
        if tpu.provisioning == "flex-start":
            notes.append(
                "tpu: flex-start priced at the on-demand list price, the most it costs "
                f"(Google: DWS discounts up to 53%; {FLEX_START_SOURCE.split(' (')[0]})"
            )
            notes.append(
                "tpu: at the end of a flex-start node's run duration GKE removes it (how, and "
                "whether its pods get a notice, Google does not say): the node launcher gives "
                "the run TRAINSTACK_DEADLINE (the node's boot time plus its run duration) and "
                "sends your code or the TensorFlow trainer SIGTERM trainer.deadline_margin_s "
                f"(default {DEFAULT_MARGIN_S:g} s) before it (save and exit 143); the run "
                "ends capacity_ended (exit 6) and the supervisor stops the pools; `pulumi up` "
                "asks for new capacity and the run resumes from the checkpoint"
            )
        return notes

    # ------------------------------------------------------------------ compose

    def services(self, cfg: StackView) -> list[str]:
        return ["container.googleapis.com"]

    # The training account is also the TPU nodes' account, as on the GPU GKE backend.
    before_identity = Gke.before_identity

    def compose(self, ctx: ComposeContext) -> tuple[dict[str, Any], DashboardScope]:
        cfg, deployment, network = ctx.cfg, ctx.deployment, ctx.network
        tpu = _tpu(cfg)
        code = cfg.trainer.user_code
        assert network is not None and cfg.project is not None
        assert ctx.node_args is not None and code is not None and code.image
        section = tpu.model_dump(exclude_none=True, exclude={"backend"})
        args = cast(
            TpuGkeSlicesArgs,
            {
                **section,
                "project": cfg.project,
                "deployment_name": deployment,
                "image": code.image,
                "node_args": ctx.node_args,
                "package_uri": ctx.package.uri,
                "checkpoint_url": ctx.buckets.checkpoint_url,
                "network_self_link": network.network_self_link,
                "subnetwork_self_link": network.subnetwork_self_link,
                "node_tag": network.node_tag,
                "service_account_email": ctx.identity.service_account_email,
                "environment": cfg.environment,
                "labels": ctx.labels,
            },
        )
        if ctx.secret_env_names:
            args["secret_env_names"] = list(ctx.secret_env_names)
        if cfg.limits.max_run_seconds is not None:
            args["max_run_seconds"] = cfg.limits.max_run_seconds
        # The supervisor first: the pools depend on it, so they never run unsupervised.
        supervisor, outputs = self._supervisor(ctx, supervised_slices(args))
        opts = after_supervisor(ctx.after_grants, supervisor)
        slices = TpuGkeSlices(f"{deployment}-tpu", args, opts=opts)
        outputs |= {
            OUTPUT_CLUSTER_NAME: slices.cluster_name,
            OUTPUT_CLUSTER_ENDPOINT: slices.endpoint,
            OUTPUT_KUBECONFIG: slices.kubeconfig,
            OUTPUT_CONSOLE_URL: slices.console_url,
            OUTPUT_JOB_NAME: slices.jobset_name,
            OUTPUT_TPU_CHIPS: slices.chips,
            OUTPUT_TPU_HOSTS: slices.hosts,
            # Your code's folder for the run, `<checkpoint bucket>/checkpoints/<run name>`.
            OUTPUT_CHECKPOINT_DIR: ctx.buckets.checkpoint_url.apply(
                lambda url: checkpoint_dir(cfg, deployment, url)
            ),
        }
        return outputs, slices.dashboard_scope

    def _supervisor(
        self, ctx: ComposeContext, target: SupervisedSlices
    ) -> tuple[RunSupervisor, dict[str, Any]]:
        """The slices' supervisor (built as target gke's): it sets every slice's pool to 0 at
        the run's end; it and its stack outputs."""
        cfg = ctx.cfg
        assert cfg.region is not None
        values: dict[str, Any] = {
            "project": cfg.project,
            "region": supervisor_region(cfg.region),
            "deployment_name": ctx.deployment,
            "kind": "node_pools",
            "resource_name": target.cluster,
            "node_pools": target.pools,
            "run": run_settings(
                cfg, self.stoppable_hourly_usd(cfg), target.run_record, target.hosts
            ),
            "staging_bucket": ctx.buckets.staging_bucket,
            "checkpoint_bucket": ctx.buckets.checkpoint_bucket,
            "labels": dict(ctx.labels),
        }
        return register_supervisor(ctx.deployment, values, ctx.after_grants)

    # ------------------------------------------------------------------ status and logs

    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        name = str(require(outputs, stack, "job_name"))
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{K8S_NAMESPACE}/jobsets/{name}"
        kubeconfig = lambda: str(require(outputs, stack, "kubeconfig"))
        status = kube_get(kubeconfig, endpoints, path).get("status", {})
        pods = kube_get(
            kubeconfig,
            endpoints,
            f"/api/v1/namespaces/{K8S_NAMESPACE}/pods"
            f"?labelSelector=jobset.sigs.k8s.io%2Fjobset-name%3D{name}",
        )
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
        if conditions.get("Completed") == "True":
            state = "SUCCEEDED"
        elif conditions.get("Failed") == "True":
            state = "FAILED"
        else:
            state = "RUNNING" if pods.get("items") else "PENDING"
        return {"state": state, "hosts": pod_hosts(pods), "started": None, "ended": None}

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        tpu = _tpu(cfg)
        found = slice_or_none(tpu)
        check_worker(worker, (gke_vms(found) if found else 1) * tpu.slices, stack)
        cluster = str(require(outputs, stack, "cluster_name"))
        name = str(require(outputs, stack, "job_name"))
        # JobSet pods are `<jobset>-slice-<job index>-<pod index>-<suffix>`; `worker` counts
        # pods across slices, slice by slice.
        pods = f"{name}-slice-"
        if worker is not None and found is not None:
            pods += f"{worker // gke_vms(found)}-{worker % gke_vms(found)}-"
        scope = f'{gke_filter_text(cluster)[0]} AND resource.labels.pod_name=~"^{pods}"'
        return log_query("gke", scope)


TARGET = TpuGke()

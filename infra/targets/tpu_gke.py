"""Target `tpu_gke`: TPU slices as GKE node pools running your code as a JobSet
(`TpuGkeSlices`), with its run supervisor (`RunSupervisor`, kind `node_pools`: it sets the
slices' pools to 0 at the run's end, `limits.max_run_hours` and `limits.max_total_usd`). Stack section `trainstack:tpu` with `backend: gke` (the section it
shares with target `tpu`, `backend: tpu_vm`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from trainstack.components.catalog.batch import WorldSize, tpu_world_size
from trainstack.components.catalog.names import zone_in_region_problems
from trainstack.components.catalog.supervisor_region import supervisor_region
from trainstack.components.catalog.tpu_gke import (
    EXCLUSIVE_TOPOLOGY,
    gke_vms,
    tpu_flex_start_run_problems,
    tpu_gke_code_problems,
    tpu_gke_image,
)
from trainstack.components.code_summary import MEGASCALE_ENV, TPU_WORKER_ENV
from trainstack.components.facts import reach_note
from trainstack.components.tpu_gke_facts import (
    slices_hourly_usd,
    tpu_gke_after_stop,
    tpu_gke_notes,
    tpu_gke_quota,
    tpu_gke_run_limit,
    tpu_gke_summary,
)
from trainstack.components.tpu_gke_slices import (
    SupervisedSlices,
    TpuGkeSlices,
    TpuGkeSlicesArgs,
    supervised_slices,
    tpu_gke_slices_problems,
)
from trainstack.components.training_dashboard.targets import gke_filter_text
from trainstack.infra.compute_status import jobset_log_filter, jobset_state
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
from trainstack.infra.plan_inputs import number
from trainstack.infra.run_args import checkpoint_dir
from trainstack.infra.stack_outputs import require
from trainstack.infra.supervision import after_supervisor, register_supervisor, run_settings
from trainstack.infra.targets.base import CloudTarget, ComposeContext, RunResource, StillBilling
from trainstack.infra.targets.gke import Gke, exit_codes, node_image_note, pod_limits_line
from trainstack.infra.targets.tpu import TpuConfig, slice_or_none
from trainstack.trainers.common.config import TrainConfig

if TYPE_CHECKING:
    from trainstack.components.run_supervisor import RunSupervisor
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode

JOBSET_TYPE: Final = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def _tpu(cfg: StackView) -> TpuConfig:
    return cast(TpuConfig, cfg.compute)


def _failure_line(spec: Mapping[str, Any], job: Mapping[str, Any]) -> str:
    """What a failed pod does to the run: the JobSet's failure policy (JobSet's
    `FailJobSet` / `RestartJobSet` rules and `maxRestarts`) over the Job's exit codes."""
    policy = spec.get("failurePolicy") or {}
    actions = {r.get("action") for r in policy.get("rules") or [] if isinstance(r, Mapping)}
    codes = exit_codes(job, "FailJob")
    parts = []
    if codes and "FailJobSet" in actions:
        parts.append(f"fail on exits {', '.join(codes)}")
    if "RestartJobSet" in actions or not actions:
        parts.append(
            f"restart the whole JobSet on other failures, up to "
            f"{number(policy.get('maxRestarts', 0))} times"
        )
    return "failure policy: " + "; ".join(parts)


def jobset_lines(inputs: Mapping[str, Any]) -> list[str]:
    """The text plan's lines for a planned JobSet: per replicated Job its slices, pods and
    image, then what each pod asks for, how slices map to node pools, and its failure
    policy."""
    spec = inputs.get("spec")
    if not isinstance(spec, Mapping):
        return [f"JobSet spec {spec}"]
    lines = []
    for replicated in spec.get("replicatedJobs", []):
        job = replicated.get("template", {}).get("spec", {})
        pod = job.get("template", {}).get("spec", {})
        selector = pod.get("nodeSelector", {})
        container = (pod.get("containers") or [{}])[0]
        spot = ", spot" if selector.get("cloud.google.com/gke-spot") == "true" else ""
        lines.append(
            f"{number(replicated.get('replicas'))} x slice "
            f"{selector.get('cloud.google.com/gke-tpu-accelerator')} "
            f"{selector.get('cloud.google.com/gke-tpu-topology')}{spot}: one Job each of "
            f"{number(job.get('parallelism'))} pods (parallelism "
            f"{number(job.get('parallelism'))}, completions {number(job.get('completions'))}), "
            f"image {container.get('image')}"
        )
        lines.append(pod_limits_line(pod))
        lines.append(_failure_line(spec, job))
    metadata = inputs.get("metadata")
    annotations = (metadata.get("annotations") if isinstance(metadata, Mapping) else {}) or {}
    if EXCLUSIVE_TOPOLOGY in annotations:
        lines.append(
            f"{EXCLUSIVE_TOPOLOGY}: {annotations[EXCLUSIVE_TOPOLOGY]} (one slice's Job per "
            "node pool)"
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
        return [] if code is None else tpu_gke_code_problems(True)

    def trainer_problems(self, section: TpuConfig, trainer: TrainConfig) -> list[str]:
        return tpu_gke_code_problems(False)

    def limits_problems(self, section: TpuConfig, limits: Any) -> list[str]:
        seconds = limits.max_run_seconds if limits is not None else None
        return tpu_flex_start_run_problems(
            section.provisioning, seconds, "limits.max_run_hours", "tpu."
        )

    def flex_start_run_seconds(self, section: TpuConfig, limits: Any) -> int | None:
        # The flex-start pools' max_run_duration (`tpu_gke_slices._pod_env`: the stack's
        # run limit, at most 7 days).
        if section.provisioning != "flex-start" or limits is None:
            return None
        seconds: int | None = limits.max_run_seconds
        return seconds

    def world_size(self, section: TpuConfig, trainer: TrainConfig) -> WorldSize:
        s = section.slice
        return tpu_world_size(s.accelerator_type, s.chips * section.slices)

    # ------------------------------------------------------------------ estimate and plan

    # Cost, quota and notes are `trainstack.components.tpu_gke_facts`', which the
    # component's facts use too: a program of the same slices plans the same.

    def summary(self, cfg: StackView) -> dict[str, Any]:
        tpu = _tpu(cfg)
        return tpu_gke_summary(tpu.slice, tpu.slices, tpu.provisioning)

    def stoppable_hourly_usd(self, cfg: StackView) -> float:
        # The slices' pools only: the supervisor leaves the cluster and its system node.
        tpu = _tpu(cfg)
        return round(slices_hourly_usd(tpu.slice, tpu.slices, tpu.provisioning), 2)

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        return [StillBilling(**item) for item in tpu_gke_after_stop(stack)]

    def quota(self, cfg: StackView) -> list[dict[str, Any]]:
        assert cfg.region is not None
        return tpu_gke_quota(cfg.region)

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        return True, tpu_gke_run_limit(_tpu(cfg).provisioning, seconds)

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        return tpu_gke_image(code.image)

    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        tpu = _tpu(cfg)
        return gke_vms(tpu.slice) * tpu.slices

    def node_launcher_env(self, cfg: StackView) -> list[str]:
        # GKE's TPU webhook sets the TPU_WORKER_* pair; JobSet's labels the MEGASCALE_* ones.
        return [*TPU_WORKER_ENV, *(MEGASCALE_ENV if _tpu(cfg).slices > 1 else ())]

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        # The slices' own notes before their supervisor's, as a program's plan lists
        # TpuGkeSlices' facts before RunSupervisor's.
        tpu = _tpu(cfg)
        code = cfg.trainer.user_code
        image = tpu_gke_image(code.image if code is not None else None)
        notes = tpu_gke_notes(tpu.slices, tpu.provisioning, image=image)
        flex = tpu.provisioning == "flex-start"
        reach = reach_note("node_pools", False, cfg.project, flex)
        return [*notes, *node_image_note(cfg, deployment), reach]

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
        assert ctx.node_args is not None and code is not None
        section = tpu.model_dump(exclude_none=True, exclude={"backend"})
        args = cast(
            TpuGkeSlicesArgs,
            {
                **section,
                "project": cfg.project,
                "deployment_name": deployment,
                "image": tpu_gke_image(code.image),
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
            # A flex-start pool is autoscaled: the supervisor deletes its VMs.
            "autoscaled": _tpu(cfg).provisioning == "flex-start",
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
        return jobset_state(lambda: str(require(outputs, stack, "kubeconfig")), name, endpoints)

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        tpu = _tpu(cfg)
        found = slice_or_none(tpu)
        cluster = str(require(outputs, stack, "cluster_name"))
        name = str(require(outputs, stack, "job_name"))
        vms = gke_vms(found) if found else 1
        return jobset_log_filter(gke_filter_text(cluster)[0], name, vms, tpu.slices, worker, stack)


TARGET = TpuGke()

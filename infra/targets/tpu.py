"""Target `tpu`: a Cloud TPU slice (`TpuPodSlice`), with its run supervisor (`RunSupervisor`:
it deletes the slice at the run's end and recreates a preempted spot or queued one). Stack
section `trainstack:tpu`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from trainstack.components import catalog as facts
from trainstack.components.catalog.batch import WorldSize, tpu_world_size
from trainstack.components.catalog.names import zone_in_region_problems
from trainstack.components.catalog.supervisor_region import supervisor_region
from trainstack.components.catalog.tpu import (
    CLOUD_TPU_API_NOTE,
    TPU_RUN_LIMIT_ENFORCED,
    TpuGenerationName,
    TpuSlice,
    default_tpu_runtime,
    tpu_slice,
)
from trainstack.components.catalog.tpu_gke import (
    AnyTpuProvisioning,
    TpuBackend,
    tpu_provisioning_problems,
    tpu_slices_problems,
)
from trainstack.components.code_frameworks import tpu_framework_problems
from trainstack.components.code_summary import TPU_WORKER_ENV, tpu_vm_runs_on
from trainstack.components.facts import (
    reach_note,
    run_limit_text,
    tpu_after_stop,
    tpu_quota,
    tpu_summary,
)
from trainstack.components.naming import gcp_name
from trainstack.components.run_supervisor import SupervisedSlice, slice_target, supervised
from trainstack.components.tpu_pod_slice import (
    TpuPodSlice,
    TpuPodSliceArgs,
    tpu_pod_slice_problems,
    tpu_trainer_problems,
)
from trainstack.components.training_dashboard.targets import tpu_filter_text
from trainstack.infra.compute_status import tpu_log_filter, tpu_state
from trainstack.infra.logs import check_worker
from trainstack.infra.outputs import (
    OUTPUT_CHECKPOINT_DIR,
    OUTPUT_CONSOLE_URL,
    OUTPUT_SLICE_NAME,
    OUTPUT_TPU_CHIPS,
    OUTPUT_TPU_HOSTS,
    OUTPUT_WORKER_IPS,
)
from trainstack.infra.plan_inputs import number
from trainstack.infra.run_args import checkpoint_dir, cloud_trainer_args
from trainstack.infra.stack_outputs import require
from trainstack.infra.supervision import (
    after_supervisor,
    register_supervisor,
    run_settings,
)
from trainstack.infra.targets.base import (
    CloudTarget,
    ComposeContext,
    RunResource,
    Section,
    StillBilling,
)
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import TRAINER_MODULES
from trainstack.trainers.common.user_code import CodeRules, WholeNumber

if TYPE_CHECKING:
    from trainstack.components.run_supervisor import RunSupervisor
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode


class TpuConfig(Section):
    """`trainstack:tpu`: TPU slices, through the Cloud TPU API (`backend: tpu_vm`,
    `TpuPodSlice` arguments) or as GKE node pools (`backend: gke`, `TpuGkeSlices`). Give
    `accelerator_type` or generation+topology."""

    accelerator_type: str | None = None
    """e.g. `v4-32`, `v5litepod-16`, `v5p-8`, `v6e-4`."""
    generation: TpuGenerationName | None = None
    topology: str | None = None
    """Chip topology with `generation`, e.g. `2x2x4`."""
    zone: str
    runtime_version: str | None = None
    """Default: the newest runtime the catalog knows for the generation and the trainer's
    framework (`trainstack.components.catalog.tpu.default_tpu_runtime`); the plan names it."""
    provisioning: AnyTpuProvisioning = "on-demand"
    """tpu_vm: on-demand, spot, queued, reserved; gke: on-demand, spot, reserved, flex-start
    (the generations and zones Google lists)."""
    reservation: str | None = None
    """Reservation name; tpu_vm: only with provisioning `queued`; gke: only with `reserved`
    (without it, any matching reservation is consumed)."""
    backend: TpuBackend = "tpu_vm"
    """`tpu_vm` (default): the Cloud TPU API, which Google keeps for bug fixes and security
    updates only; `gke`: one GKE TPU node pool per slice and a JobSet over them."""
    slices: WholeNumber = 1
    """Slices of `accelerator_type`; above 1 (multislice over the data-center network) on
    backend gke with multi-host slices only."""

    @property
    def slice(self) -> TpuSlice:
        """The catalog slice this config names (valid after `load_stack_config`)."""
        found: TpuSlice | None = None
        if self.accelerator_type:
            found = tpu_slice(self.accelerator_type)
        elif self.generation and self.topology:
            found = facts.TPU_GENERATIONS[self.generation].slice_for_topology(self.topology)
        if found is None:
            raise ValueError("tpu: no valid slice; validate with load_stack_config first")
        return found

    @property
    def spot(self) -> bool:
        """Spot capacity (preemptible quota and price)."""
        return self.provisioning == "spot"

    def with_default_runtime(self, framework: str) -> TpuConfig:
        """This section with `runtime_version` filled in when not given and the slice is
        known (`trainstack.components.catalog.tpu.default_tpu_runtime`); else unchanged."""
        if self.runtime_version is not None:
            return self
        try:
            found = self.slice
        except ValueError:
            return self  # the slice problem is reported; there is no runtime to pick
        runtime = default_tpu_runtime(found.generation, framework, found.multi_host)
        return self.model_copy(update={"runtime_version": runtime})


TPU_VM_ONLY_KEYS: Final[set[str]] = {"backend", "slices"}
"""Section keys that pick the backend: not `TpuPodSlice` arguments."""


def slice_or_none(section: TpuConfig) -> TpuSlice | None:
    """The section's catalog slice, or None when it names none."""
    try:
        return section.slice
    except ValueError:
        return None


def _tpu(cfg: StackView) -> TpuConfig:
    return cast(TpuConfig, cfg.compute)


QUEUED_TPU: Final = "pulumi-python:dynamic/tpu:QueuedResource"


def tpu_lines(body: Any) -> list[str]:
    if not isinstance(body, Mapping):
        return [f"queued resource body {body}"]
    specs = body.get("tpu", {}).get("nodeSpec", [])
    tier = "spot" if "spot" in body else "guaranteed" if "guaranteed" in body else "on-demand"
    lines = []
    for spec in specs:
        node = spec.get("node", {})
        config = node.get("acceleratorConfig") or {}
        accelerator = node.get("acceleratorType") or (
            f"{config.get('type')} topology {config.get('topology')}"
        )
        count = (spec.get("multisliceParams") or {}).get("nodeCount", 1)
        lines.append(
            f"{number(count)} x TPU {accelerator}, runtime {node.get('runtimeVersion')}, "
            f"{tier}, in {spec.get('parent')}"
        )
    if "reservationName" in body:
        lines.append(f"reservation {body['reservationName']}")
    return lines


class Tpu(CloudTarget):
    name = "tpu"
    section = "tpu"
    model = TpuConfig
    own_network = True
    # A TPU host runs one process that drives all its chips (JAX, TensorFlow, PyTorch/XLA's
    # PJRT runtime); torchrun's one-process-per-device model does not apply.
    launchers = ("node",)
    default_launcher = "node"
    run_resources = (
        RunResource(
            QUEUED_TPU,
            ("trainstack.components._tpu_queued_provider", "QueuedResourceProvider", {}),
            lambda inputs: tpu_lines(inputs.get("body")),
        ),
        RunResource("gcp:tpu/v2Vm:V2Vm"),
    )
    supervised = True

    def claims(self, section: TpuConfig) -> bool:
        return section.backend == "tpu_vm"

    def code_rules(self) -> CodeRules:
        # The section's other backend (gke) runs a container: name the backend, not the
        # section, in the line that refuses trainer.image.
        rules = super().code_rules()
        return replace(rules, no_image=("tpu.backend 'tpu_vm'", "tpu.backend: gke"))

    # ------------------------------------------------------------------ config

    def prepare(self, section: TpuConfig, trainer: Any) -> TpuConfig:
        # Your own code gets the generation's base runtime: it brings its own framework.
        own = getattr(trainer, "user_code", None) is not None
        return section.with_default_runtime("own" if own else trainer.framework)

    def section_problems(
        self, section: TpuConfig, region: str | None, trainer: StackTrainer | None
    ) -> list[str]:
        errors = zone_in_region_problems(section.zone, region, "tpu.zone")
        found = slice_or_none(section)
        backend = tpu_slices_problems(section.slices, found, section.backend, "tpu.")
        backend += tpu_provisioning_problems(
            section.provisioning, section.backend, found, section.zone, "tpu."
        )
        if backend:
            return errors + backend
        args = section.model_dump(exclude_none=True, exclude=TPU_VM_ONLY_KEYS)
        if section.runtime_version is None:
            # Unset after `with_default_runtime` only when the slice is unknown; with no slice
            # no runtime is checked, so a stand-in lets the slice's own problem be reported.
            filled = section.with_default_runtime("tensorflow").runtime_version
            args["runtime_version"] = filled or default_tpu_runtime("v4", "tensorflow", False)
        # Your code brings its own framework (JAX on a base runtime): no TensorFlow needed.
        own_code = trainer is not None and trainer.user_code is not None
        problems = tpu_pod_slice_problems(args, "tpu.", user_code=own_code)
        # A zone outside the region is already reported; do not report the zone twice.
        return errors + [p for p in problems if not (errors and p.startswith("tpu.zone: "))]

    def code_source_problems(
        self, section: TpuConfig, trainer: StackTrainer, base: Path
    ) -> list[str]:
        if not section.runtime_version:
            return []
        return tpu_framework_problems(trainer.user_code, section.runtime_version, base)

    def trainer_problems(self, section: TpuConfig, trainer: TrainConfig) -> list[str]:
        return tpu_trainer_problems(trainer.framework, trainer.strategy, "trainer.")

    def world_size(self, section: TpuConfig, trainer: TrainConfig) -> WorldSize:
        return tpu_world_size(section.slice.accelerator_type, section.slice.chips)

    # ------------------------------------------------------------------ estimate and plan

    def summary(self, cfg: StackView) -> dict[str, Any]:
        # The same arithmetic as TpuPodSlice's facts.
        tpu = _tpu(cfg)
        return tpu_summary(tpu.slice, tpu.provisioning)

    def quota(self, cfg: StackView) -> list[dict[str, Any]]:
        tpu = _tpu(cfg)
        return tpu_quota(tpu.slice, tpu.provisioning, tpu.zone)

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        return TPU_RUN_LIMIT_ENFORCED, run_limit_text("tpu", seconds)

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        tpu = _tpu(cfg)
        after = tpu_after_stop(tpu.slice, tpu.provisioning, tpu.reservation, tpu.zone)
        return [StillBilling(**item) for item in after]

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        return tpu_vm_runs_on(_tpu(cfg).runtime_version)

    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        return _tpu(cfg).slice.hosts

    def node_launcher_env(self, cfg: StackView) -> list[str]:
        # The node launcher adds nothing on a TPU VM: JAX and PyTorch/XLA find the slice
        # from these (`trainstack.trainers.user_code`).
        return list(TPU_WORKER_ENV)

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        tpu = _tpu(cfg)
        kind = "queued" if tpu.provisioning == "queued" else "node"
        # Every tpu stack: the API under this target will not serve the next generations.
        return [CLOUD_TPU_API_NOTE, reach_note(kind, supervised(tpu.provisioning), cfg.project)]

    def plan_defaults(self, cfg: StackView, given: Any) -> dict[str, Any]:
        if isinstance(given, Mapping) and given.get("runtime_version") is None:
            return {"tpu.runtime_version": _tpu(cfg).runtime_version}
        return {}

    # ------------------------------------------------------------------ compose

    def services(self, cfg: StackView) -> list[str]:
        return ["tpu.googleapis.com"]

    def compose(self, ctx: ComposeContext) -> tuple[dict[str, Any], DashboardScope]:
        cfg, deployment, network = ctx.cfg, ctx.deployment, ctx.network
        tpu_cfg = _tpu(cfg)
        assert network is not None and cfg.project is not None and cfg.region is not None
        # The section's keys are the component's (slice, zone, runtime, provisioning,
        # reservation): passed on as they are.
        args = cast(
            TpuPodSliceArgs,
            {
                **tpu_cfg.model_dump(exclude_none=True, exclude=TPU_VM_ONLY_KEYS),
                "project": cfg.project,
                "deployment_name": deployment,
                "network_self_link": network.network_self_link,
                "subnetwork_self_link": network.subnetwork_self_link,
                "network_tags": [network.node_tag],
                "service_account_email": ctx.identity.service_account_email,
                "package_uri": ctx.package.uri,
                # The run's own folder, `<checkpoint bucket>/checkpoints/<run name>`: bundled
                # trainer flags that name a folder (`trainer.checkpoint_dir`) win on the host.
                "checkpoint_dir": ctx.buckets.checkpoint_url.apply(
                    lambda url: checkpoint_dir(cfg, deployment, url)
                ),
                "labels": ctx.labels,
            },
        )
        if cfg.limits.max_run_seconds is not None:
            args["max_run_seconds"] = cfg.limits.max_run_seconds  # the startup script enforces it
        if ctx.node_args is not None:
            # Your code, on every host (its checkpoint folder is in node_args' run contract).
            args["node_args"] = ctx.node_args
            if ctx.secret_env_names:
                args["secret_env_names"] = list(ctx.secret_env_names)
        else:
            args["trainer_module"] = TRAINER_MODULES[cfg.trainer.framework]
            args["trainer_args"] = cloud_trainer_args(cfg, deployment)
        # The supervisor first: the slice depends on it, so it never runs unsupervised.
        target = slice_target(args)
        supervisor, outputs = self._supervisor(ctx, target)
        tpu = TpuPodSlice(
            f"{deployment}-tpu", args, opts=after_supervisor(ctx.after_grants, supervisor)
        )
        if supervised(tpu_cfg.provisioning):
            supervisor.arm([r for r in (tpu.queued_resource, tpu.vm) if r is not None])
        outputs |= {
            OUTPUT_SLICE_NAME: tpu.slice_name,
            OUTPUT_WORKER_IPS: tpu.worker_ips,
            OUTPUT_TPU_CHIPS: tpu.chips,
            OUTPUT_TPU_HOSTS: tpu.hosts,
            OUTPUT_CONSOLE_URL: tpu.console_url,
            OUTPUT_CHECKPOINT_DIR: tpu.checkpoint_dir,
        }
        return outputs, tpu.dashboard_scope

    def _supervisor(
        self, ctx: ComposeContext, target: SupervisedSlice
    ) -> tuple[RunSupervisor, dict[str, Any]]:
        """The slice's supervisor: it recreates a Spot or queued slice, deletes any at the
        run's end; it and its stack outputs."""
        cfg = ctx.cfg
        recover = supervised(_tpu(cfg).provisioning)
        assert cfg.region is not None
        values: dict[str, Any] = {
            "project": cfg.project,
            "region": supervisor_region(cfg.region),
            "deployment_name": ctx.deployment,
            "kind": target.kind,
            "resource_name": target.resource_name,
            "recover": recover,
            # One heartbeat per host (its worker index is its node rank).
            "run": run_settings(
                cfg, self.stoppable_hourly_usd(cfg), target.run_record, _tpu(cfg).slice.hosts
            ),
            "staging_bucket": ctx.buckets.staging_bucket,
            "checkpoint_bucket": ctx.buckets.checkpoint_bucket,
            "labels": dict(ctx.labels),
        }
        if recover:
            values |= {
                "body": target.body,
                "node_service_account": ctx.identity.service_account.name,
            }
        return register_supervisor(ctx.deployment, values, ctx.after_grants)

    # ------------------------------------------------------------------ status and logs

    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        tpu = _tpu(cfg)
        assert cfg.project is not None
        queued = gcp_name(stack, "tpu-qr") if tpu.provisioning == "queued" else None
        node = str(require(outputs, stack, "slice_name"))
        return tpu_state(cfg.project, tpu.zone, node, queued, endpoints)

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        hosts = int(require(outputs, stack, "tpu_hosts"))
        check_worker(worker, hosts, stack)
        scope = tpu_filter_text(str(require(outputs, stack, "slice_name")))[0]
        return tpu_log_filter(scope, hosts, worker, stack)


TARGET = Tpu()

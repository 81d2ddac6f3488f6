"""Target `gce`: A100 Compute Engine VMs booting the Deep Learning VM image, the trainer
started by their startup script (`A100Cluster` with backend `gce`). Stack section
`trainstack:gpu_cluster`, `backend: gce`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainstack.components.a100_cluster import gpu_code_runs_on, instance_name_pattern
from trainstack.components.a100_cluster.gce import flex_name_pattern
from trainstack.components.catalog.gpu_fabric_gce import gce_fabric
from trainstack.components.catalog.images import DLVM_IMAGE
from trainstack.components.facts import run_limit_text
from trainstack.components.training_dashboard.targets import gce_filters
from trainstack.infra.compute_status import gce_group_names, gce_log_filter, gce_state
from trainstack.infra.logs import LogsError, check_worker
from trainstack.infra.outputs import OUTPUT_CLUSTER_NAME
from trainstack.infra.stack_outputs import require
from trainstack.infra.targets.gpu_cluster import (
    GpuCluster,
    GpuClusterConfig,
    flex_start_resume,
    gpu_section,
)
from trainstack.trainers.common.config import TrainConfig

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode


class Gce(GpuCluster):
    name = "gce"

    def code_problems(self, section: GpuClusterConfig, trainer: StackTrainer) -> list[str]:
        if trainer.image is None:
            return []
        return [
            (
                "trainer.image: not supported on gpu_cluster backend 'gce' (its VMs boot the Deep "
                "Learning VM image and run no container); valid: trainer.source, or "
                "gpu_cluster.backend gke"
            )
        ]

    def trainer_problems(self, section: GpuClusterConfig, trainer: TrainConfig) -> list[str]:
        if trainer.framework == "tensorflow":
            return [
                (
                    "trainer.framework: 'tensorflow' is not supported on gpu_cluster backend 'gce' "
                    "(its Deep Learning VM image carries PyTorch only); valid: torch, or "
                    "gpu_cluster.backend gke"
                )
            ]
        return super().trainer_problems(section, trainer)

    def torch_image(self, section: GpuClusterConfig) -> tuple[str, str | None]:
        return DLVM_IMAGE, None

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        return True, run_limit_text("gce", seconds)

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        gpu = gpu_section(cfg)
        return gpu_code_runs_on(self.name, gpu.machine_type, gpu.zone, code.image)

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        # The cluster's own notes before its supervisor's, as a program's plan lists
        # A100Cluster's facts before RunSupervisor's.
        gpu = gpu_section(cfg)
        fabric = gce_fabric(gpu.machine_type, deployment, gpu.zone)
        notes = [fabric.note()] if fabric is not None else []
        return notes + super().plan_notes(cfg, deployment)

    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        assert cfg.project is not None
        gpu = gpu_section(cfg)
        if gpu.flex_start:
            # The resize request names the VMs: the group says which it holds.
            group = str(require(outputs, stack, OUTPUT_CLUSTER_NAME))
            names = gce_group_names(cfg.project, gpu.zone, group, endpoints)
            state = gce_state(cfg.project, gpu.zone, names, endpoints)
            return state | {"capacity_resume": flex_start_resume(stack)}
        names = [str(n) for n in require(outputs, stack, "instance_names")]
        return gce_state(cfg.project, gpu.zone, names, endpoints)

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        if gpu_section(cfg).flex_start:
            if worker is not None:
                raise LogsError(
                    f"--worker: not available for stack {stack!r}: its flex-start VMs are named "
                    "by the group's resize request and claim their ranks at start; valid: no "
                    "--worker (every VM's lines carry its name)"
                )
            group = str(require(outputs, stack, OUTPUT_CLUSTER_NAME))
            return gce_log_filter(gce_filters(stack, flex_name_pattern(group))[0], [], None, stack)
        names = [str(n) for n in require(outputs, stack, "instance_names")]
        check_worker(worker, len(names), stack)
        # The pattern the component gives its dashboard: exactly these instances' names.
        scope = gce_filters(stack, instance_name_pattern(names))[0]
        return gce_log_filter(scope, names, worker, stack)


TARGET = Gce()

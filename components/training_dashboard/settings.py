"""The validated plain settings one `TrainingDashboard` builds its metrics, dashboard and alert
from (`trainstack.components.training_dashboard` validates the args into them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from trainstack.components.training_dashboard.metrics import LOG_METRICS, LogMetric
from trainstack.components.training_dashboard.targets import PLATFORMS

ALIGNMENT: Final = "60s"
"""Chart and absence-condition alignment: Monitoring's minimum alignment period."""


@dataclass(frozen=True)
class DashboardSettings:
    """What `TrainingDashboardArgs` resolve to once validated (plain values only)."""

    deployment: str
    target: str
    platform: str
    """Key of `PLATFORMS`: tpu | gke | gce | vertex, or one registered."""
    worker_count: int
    stall_minutes: int
    log_resource_type: str
    payload: str
    slices: int | None = None
    """TPU slices the workers are spread over, where given."""

    @property
    def gpu(self) -> bool:
        return PLATFORMS[self.platform].gpu

    @property
    def worker(self) -> str:
        """What one worker is (`Platform.worker`): `worker`, or a TPU slice's `host`."""
        return PLATFORMS[self.platform].worker

    @property
    def backend(self) -> str:
        """The platform's name among its target's (`Platform.backend`, else its key)."""
        return PLATFORMS[self.platform].backend or self.platform

    @property
    def place(self) -> str:
        """The target, and the backend where it is not the target's own platform
        (`gpu_cluster, gke`, `tpu, gke`)."""
        return self.target if self.platform == self.target else f"{self.target}, {self.backend}"

    @property
    def workers_text(self) -> str:
        """The workers counted: `8 workers`, or `2 slices x 4 hosts`."""
        if self.slices:
            return f"{self.slices} slices x {self.worker_count // self.slices} {self.worker}s"
        return f"{self.worker_count} {self.worker}s"

    @property
    def log_metrics(self) -> tuple[LogMetric, ...]:
        return tuple(m for m in LOG_METRICS if self.gpu or not m.gpu_only)

    @property
    def stall_window(self) -> str:
        return f"{self.stall_minutes * 60}s"

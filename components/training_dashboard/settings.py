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

    @property
    def gpu(self) -> bool:
        return PLATFORMS[self.platform].gpu

    @property
    def log_metrics(self) -> tuple[LogMetric, ...]:
        return tuple(m for m in LOG_METRICS if self.gpu or not m.gpu_only)

    @property
    def stall_window(self) -> str:
        return f"{self.stall_minutes * 60}s"

"""The stalled-training alert policy: its conditions on the `train`-lines heartbeat metric and
its documentation, as `gcp.monitoring.AlertPolicy` inputs."""

from __future__ import annotations

from typing import Any, Final

from trainstack.components.training_dashboard.metrics import (
    HEARTBEAT,
    METRIC_PREFIX,
    WORKER_LABEL,
    metric_type,
    monitoring_filter,
)
from trainstack.components.training_dashboard.settings import ALIGNMENT, DashboardSettings
from trainstack.trainers.common.contract import EVENT_PREEMPTED, EVENT_TRAIN, FIELD_EVENT

ALERT_AUTO_CLOSE: Final = "86400s"
"""Open incidents close after a day without data, so a finished run's incidents go away
instead of lingering for Monitoring's default of seven days."""
ALERT_SEVERITY: Final = "ERROR"


def alert_name(settings: DashboardSettings) -> str:
    """The policy's display name, also its notifications' subject."""
    return f"{METRIC_PREFIX} {settings.deployment}: training stalled"


def alert_conditions(settings: DashboardSettings) -> list[dict[str, Any]]:
    heartbeat = metric_type(HEARTBEAT.metric_id(settings.deployment))
    # Absence conditions must name the resource type (monitoring.v3 MetricAbsence.filter); a
    # logs-based metric carries its log entries' resource type.
    flt = monitoring_filter(heartbeat, settings.log_resource_type)
    per_worker = {
        "alignment_period": ALIGNMENT,
        "per_series_aligner": "ALIGN_SUM",
        "cross_series_reducer": "REDUCE_SUM",
        "group_by_fields": [f"metric.label.{WORKER_LABEL}"],
    }
    window = settings.stall_window
    return [
        {
            "display_name": (
                f"A worker wrote no {EVENT_TRAIN} log lines for {settings.stall_minutes} min"
            ),
            "condition_absent": {
                "filter": flt,
                "duration": window,
                "aggregations": [per_worker],
                "trigger": {"count": 1},
            },
        },
        {
            "display_name": (
                f"Fewer than {settings.worker_count} workers wrote {EVENT_TRAIN} log lines in "
                f"{settings.stall_minutes} min"
            ),
            # One window as long as the stall limit: a worker logging every few minutes still
            # counts, and a worker that never started is caught (absence only sees series
            # that existed). With no data at all the absence condition covers it.
            "condition_threshold": {
                "filter": flt,
                "aggregations": [
                    {**per_worker, "alignment_period": window},
                    {
                        "alignment_period": window,
                        "per_series_aligner": "ALIGN_MEAN",
                        "cross_series_reducer": "REDUCE_COUNT",
                    },
                ],
                "comparison": "COMPARISON_LT",
                "threshold_value": settings.worker_count,
                "duration": "0s",
                "evaluation_missing_data": "EVALUATION_MISSING_DATA_INACTIVE",
                "trigger": {"count": 1},
            },
        },
    ]


def alert_documentation(settings: DashboardSettings) -> str:
    return (
        f"Training of **{settings.deployment}** ({settings.place}) stalled: a {settings.worker} "
        f'wrote no `"{FIELD_EVENT}": "{EVENT_TRAIN}"` log line for {settings.stall_minutes} '
        f"minutes, or fewer than {settings.worker_count} {settings.worker}s did.\n\n"
        "Check in this order: the job or machines still exist (preemption, spot reclaim, "
        "maintenance); the last trainer lines in Logs Explorer (an exception, a "
        f'`"{FIELD_EVENT}": "{EVENT_PREEMPTED}"` line, or a collective that hangs); the '
        "checkpoint stall chart (a slow bucket write blocks every rank); the data-loader wait "
        "chart.\n\n"
        "A finished run stops its lines too: then close the incident or disable the policy."
    )

"""The `monitoring.v1` Dashboard body: a header, a workers-reporting scorecard, and one chart per
logs-based metric and built-in metric, two per row. Built as a plain dict, checked against the
bundled discovery schema (`trainstack.components._discovery`) and serialized with sorted keys."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from trainstack.components._discovery import validate_body
from trainstack.components.training_dashboard.metrics import (
    HEARTBEAT,
    METRIC_PREFIX,
    WORKER_LABEL,
    metric_type,
    monitoring_filter,
)
from trainstack.components.training_dashboard.settings import ALIGNMENT, DashboardSettings
from trainstack.components.training_dashboard.targets import TARGET_METRICS
from trainstack.trainers.common.contract import EVENT_TRAIN, FIELD_NODE

DASHBOARD_API: Final = "monitoring.v1"


def _chart(title: str, y_label: str, data_sets: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "title": title,
        "xyChart": {
            "chartOptions": {"mode": "COLOR"},
            "dataSets": data_sets,
            "yAxis": {"label": y_label, "scale": "LINEAR"},
        },
    }


def _data_set(
    flt: str, aligner: str, reducer: str, group_by: str, period: str = ALIGNMENT
) -> dict[str, Any]:
    return {
        "plotType": "LINE",
        "targetAxis": "Y1",
        "minAlignmentPeriod": period,
        "timeSeriesQuery": {
            "timeSeriesFilter": {
                "filter": flt,
                "aggregation": {
                    "alignmentPeriod": period,
                    "perSeriesAligner": aligner,
                    "crossSeriesReducer": reducer,
                    "groupByFields": [group_by],
                },
            }
        },
    }


def _text(settings: DashboardSettings, log_scope: str) -> str:
    facts = TARGET_METRICS[settings.platform]
    unverified = sorted(
        {
            m.metric_type
            for m in (facts.accelerator, facts.received_bytes, facts.sent_bytes)
            if not m.verified
        }
    )
    lines = [
        f"**{settings.deployment}** on `{settings.target}`"
        # A target with several platforms (gpu_cluster: gke | gce; tpu: on GKE) names the
        # one in use.
        + (f" ({settings.backend})" if settings.platform != settings.target else "")
        + f": {settings.workers_text}; one series per {settings.worker} (trainer "
        f"`{FIELD_NODE}` rank).",
        "",
        (
            f"Trainer lines ({settings.payload} payload): "
            f'`resource.type="{settings.log_resource_type}" AND ({log_scope})`.'
        ),
        f"Stall alert after {settings.stall_minutes} min without `{EVENT_TRAIN}` lines.",
    ]
    if unverified:
        listed = ", ".join(f"`{m}`" for m in unverified)
        lines += ["", f"Built-in metrics not yet verified on a live project: {listed}."]
    return "\n".join(lines)


def _scorecard(settings: DashboardSettings) -> dict[str, Any]:
    heartbeat = metric_type(HEARTBEAT.metric_id(settings.deployment))
    window = settings.stall_window
    return {
        "title": f"Workers writing {EVENT_TRAIN} lines (last {settings.stall_minutes} min)",
        "scorecard": {
            "timeSeriesQuery": {
                "timeSeriesFilter": {
                    "filter": monitoring_filter(heartbeat, None),
                    "aggregation": {
                        "alignmentPeriod": window,
                        "perSeriesAligner": "ALIGN_SUM",
                        "crossSeriesReducer": "REDUCE_SUM",
                        "groupByFields": [f"metric.label.{WORKER_LABEL}"],
                    },
                    "secondaryAggregation": {
                        "alignmentPeriod": window,
                        "perSeriesAligner": "ALIGN_MEAN",
                        "crossSeriesReducer": "REDUCE_COUNT",
                    },
                }
            },
            "sparkChartView": {"sparkChartType": "SPARK_LINE"},
            "thresholds": [
                {
                    "label": f"fewer than {settings.worker_count} workers",
                    "value": float(settings.worker_count),
                    "direction": "BELOW",
                    "color": "RED",
                }
            ],
        },
    }


def _charts(settings: DashboardSettings, resource_scope: str) -> list[dict[str, Any]]:
    node = f"metric.label.{WORKER_LABEL}"
    charts = [
        _chart(
            m.chart_title,
            m.unit,
            [
                _data_set(
                    monitoring_filter(metric_type(m.metric_id(settings.deployment)), None),
                    m.aligner,
                    m.reducer,
                    node,
                )
            ],
        )
        for m in settings.log_metrics
    ]
    facts = TARGET_METRICS[settings.platform]
    acc = facts.accelerator
    charts.append(
        _chart(
            f"Accelerator utilization per worker ({acc.metric_type})",
            facts.accelerator_unit,
            [
                _data_set(
                    monitoring_filter(acc.metric_type, acc.resource_type, resource_scope),
                    "ALIGN_MEAN",
                    "REDUCE_MEAN",
                    acc.worker_field,
                )
            ],
        )
    )
    charts.append(
        _chart(
            "Network bytes/s per worker (received, sent)",
            "By/s",
            [
                _data_set(
                    monitoring_filter(m.metric_type, m.resource_type, resource_scope),
                    "ALIGN_RATE",
                    "REDUCE_SUM",
                    m.worker_field,
                )
                for m in (facts.received_bytes, facts.sent_bytes)
            ],
        )
    )
    return charts


def dashboard_body(
    settings: DashboardSettings, log_scope: str, resource_scope: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The Dashboard body for the caller's log and resource scope clauses and labels."""
    tiles: list[dict[str, Any]] = [
        {
            "xPos": 0,
            "yPos": 0,
            "width": 8,
            "height": 3,
            "widget": {
                "title": "About",
                "text": {"content": _text(settings, log_scope), "format": "MARKDOWN"},
            },
        },
        {"xPos": 8, "yPos": 0, "width": 4, "height": 3, "widget": _scorecard(settings)},
    ]
    for i, chart in enumerate(_charts(settings, resource_scope)):
        position = {"xPos": 6 * (i % 2), "yPos": 3 + 4 * (i // 2), "width": 6, "height": 4}
        tiles.append({**position, "widget": chart})
    return {
        "displayName": f"{METRIC_PREFIX} {settings.deployment}: training",
        "labels": dict(labels),
        "mosaicLayout": {"columns": 12, "tiles": tiles},
    }


def dashboard_json(
    settings: DashboardSettings, log_scope: str, resource_scope: str, labels: Mapping[str, str]
) -> str:
    """`dashboard_body` as sorted-key compact JSON; ValueError if the schema rejects it."""
    body = dashboard_body(settings, log_scope, resource_scope, labels)
    errors = validate_body(DASHBOARD_API, "Dashboard", body)
    if errors:
        raise ValueError(
            f"{DASHBOARD_API} Dashboard body is invalid ({len(errors)} errors):\n"
            + "\n".join(f"  - {error}" for error in errors)
        )
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def dashboard_url(dashboard_id: str, project: str) -> str:
    """Console link of a dashboard from the provider's id (`projects/<number>/dashboards/<id>`:
    the console wants the last part)."""
    return (
        "https://console.cloud.google.com/monitoring/dashboards/custom/"
        f"{dashboard_id.rsplit('/', 1)[-1]}?project={project}"
    )

"""The logs-based metrics read from the trainers' JSON lines: which `event`/field each one
records, its buckets and chart, and the log filter, value and label extractors that pull it out
of a `jsonPayload` or a `textPayload`. Event and field names come from
`trainstack.trainers.common.contract`, which the trainers write with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from trainstack.trainers.common.contract import (
    EVENT_CHECKPOINT,
    EVENT_TRAIN,
    FIELD_DATA_WAIT,
    FIELD_EVENT,
    FIELD_GPU_UTIL,
    FIELD_MFU,
    FIELD_NODE,
    FIELD_RANK,
    FIELD_SAMPLES_PER_S,
    FIELD_STALL,
    FIELD_STEP_TIME,
    FIELD_TOKENS_PER_S,
)

METRIC_PREFIX: Final = "trainstack"
USER_METRIC_DOMAIN: Final = "logging.googleapis.com/user"
WORKER_LABEL: Final = FIELD_NODE
"""Trainer `node` rank: one value per worker machine (`rank` is one per process)."""

LABEL_DESCRIPTORS: Final[list[dict[str, str]]] = [
    {
        "key": FIELD_NODE,
        "value_type": "STRING",
        "description": "Trainer node rank (one per worker)",
    },
    {
        "key": FIELD_RANK,
        "value_type": "STRING",
        "description": "Trainer global rank (one per process)",
    },
]
"""Labels of every logs-based metric, filled by `label_extractors`."""


@dataclass(frozen=True)
class LogMetric:
    """A logs-based metric: one field of one event's lines (or a count of the lines)."""

    role: str
    event: str
    field: str | None
    """`jsonPayload` field whose value is recorded; None counts the lines."""
    display_name: str
    unit: str
    chart_title: str
    buckets: Mapping[str, Mapping[str, float | int]] | None = None
    aligner: str = "ALIGN_PERCENTILE_50"
    reducer: str = "REDUCE_MEAN"
    gpu_only: bool = False

    def metric_id(self, deployment: str) -> str:
        return f"{METRIC_PREFIX}/{deployment}/{self.event}/{self.field or 'lines'}"


def _exponential(scale: float, growth: float, count: int) -> dict[str, dict[str, float | int]]:
    return {
        "exponential_buckets": {
            "scale": scale,
            "growth_factor": growth,
            "num_finite_buckets": count,
        }
    }


def _linear(offset: float, width: float, count: int) -> dict[str, dict[str, float | int]]:
    return {"linear_buckets": {"offset": offset, "width": width, "num_finite_buckets": count}}


# Bucket ranges cover what the trainer can report: 1 ms .. ~10 min steps, 1 .. ~10^7 samples/s.
LOG_METRICS: Final[tuple[LogMetric, ...]] = (
    LogMetric(
        role="step-time",
        event=EVENT_TRAIN,
        field=FIELD_STEP_TIME,
        display_name="Training step time",
        unit="s",
        chart_title="Step time per worker (p50, s)",
        buckets=_exponential(0.001, 1.4, 40),
    ),
    LogMetric(
        role="samples-per-s",
        event=EVENT_TRAIN,
        field=FIELD_SAMPLES_PER_S,
        display_name="Training samples per second",
        unit="1/s",
        chart_title="Samples/s per worker (p50)",
        buckets=_exponential(1.0, 1.5, 40),
    ),
    LogMetric(
        role="tokens-per-s",
        event=EVENT_TRAIN,
        field=FIELD_TOKENS_PER_S,
        display_name="Training tokens per second",
        unit="1/s",
        chart_title="Tokens/s per worker (p50, language models)",
        buckets=_exponential(10.0, 1.5, 40),
    ),
    LogMetric(
        role="mfu",
        event=EVENT_TRAIN,
        field=FIELD_MFU,
        display_name="Model FLOPs utilization",
        unit="1",
        chart_title="MFU per worker (p50, GPUs with a known peak)",
        buckets=_linear(0.0, 0.02, 50),
    ),
    LogMetric(
        role="data-wait",
        event=EVENT_TRAIN,
        field=FIELD_DATA_WAIT,
        display_name="Data loader wait per step",
        unit="s",
        chart_title="Data-loader wait per step per worker (p50, s)",
        buckets=_exponential(0.0001, 1.5, 40),
    ),
    LogMetric(
        role="gpu-util",
        event=EVENT_TRAIN,
        field=FIELD_GPU_UTIL,
        display_name="GPU utilization reported by the trainer",
        unit="%",
        chart_title="GPU utilization from the trainer (NVML, p50 %)",
        buckets=_linear(0.0, 2.0, 50),
        gpu_only=True,
    ),
    LogMetric(
        role="checkpoint-stall",
        event=EVENT_CHECKPOINT,
        field=FIELD_STALL,
        display_name="Checkpoint training stall",
        unit="s",
        chart_title="Checkpoint stall per worker (max, s)",
        buckets=_exponential(0.01, 1.5, 40),
        aligner="ALIGN_PERCENTILE_99",
        reducer="REDUCE_MAX",
    ),
    LogMetric(
        role="train-lines",
        event=EVENT_TRAIN,
        field=None,
        display_name=f"Trainer {EVENT_TRAIN} log lines",
        unit="1",
        chart_title=f"{EVENT_TRAIN.capitalize()} log lines per worker (per minute)",
        aligner="ALIGN_SUM",
        reducer="REDUCE_SUM",
    ),
)
"""Every logs-based metric, in dashboard order (`gpu_only` ones on GPU targets only)."""

HEARTBEAT: Final = LOG_METRICS[-1]
"""The count of `train` lines: the stall alert and the workers-reporting scorecard read it."""


def metric_type(metric_id: str) -> str:
    """The Cloud Monitoring metric type of a logs-based metric id."""
    return f"{USER_METRIC_DOMAIN}/{metric_id}"


def monitoring_filter(metric: str, resource_type: str | None, scope: str | None = None) -> str:
    """A Monitoring time-series filter for one metric type, optionally one resource type and
    the caller's scope clause."""
    text = f'metric.type="{metric}"'
    if resource_type is not None:
        text += f' AND resource.type="{resource_type}"'
    if scope is not None:
        text += f" AND ({scope})"
    return text


def _text_key(key: str) -> str:
    """RE2 for `"key": ` in a trainer line (`json.dumps` with its default separators, see
    trainstack.trainers.common.metrics.MetricsLogger.log). `[^a-z_]` stands for the quotes, so the
    pattern needs no escaping inside a filter string and `"rank"` does not match
    `"local_rank"`."""
    return f"[^a-z_]{key}[^a-z_]: "


def log_filter(log_resource_type: str, payload: str, metric: LogMetric, scope: str) -> str:
    """The LogMetric filter: the caller's scope, the metric's event and, for a field, lines
    that carry it."""
    parts = [f'resource.type="{log_resource_type}"', f"({scope})"]
    # Lines without the field (no tokens on image models, no MFU on CPU) are skipped instead
    # of counted as failed extractions.
    if payload == "json":
        parts.append(f'jsonPayload.{FIELD_EVENT}="{metric.event}"')
        if metric.field is not None:
            parts.append(f"jsonPayload.{metric.field}:*")
    else:
        # The character class after the event name keeps "checkpoint" from also matching
        # "checkpoint_begin".
        parts.append(f'textPayload=~"{_text_key(FIELD_EVENT)}[^a-z_]{metric.event}[^a-z_]"')
        if metric.field is not None:
            parts.append(f'textPayload=~"{_text_key(metric.field)}"')
    return " AND ".join(parts)


def value_extractor(payload: str, field: str) -> str:
    if payload == "json":
        return f"EXTRACT(jsonPayload.{field})"
    return f'REGEXP_EXTRACT(textPayload, "{_text_key(field)}([-+.0-9eE]+)")'


def label_extractors(payload: str) -> dict[str, str]:
    # The labels hold JSON numbers. REGEXP_EXTRACT is documented to turn the field into a
    # string before matching (logging.v2 `LogMetric.valueExtractor`), so "0" and "0.0" both
    # give "0"; EXTRACT's number-to-string conversion is not documented.
    keys = (FIELD_NODE, FIELD_RANK)
    if payload == "json":
        return {key: f'REGEXP_EXTRACT(jsonPayload.{key}, "^([0-9]+)")' for key in keys}
    return {key: f'REGEXP_EXTRACT(textPayload, "{_text_key(key)}([0-9]+)")' for key in keys}


def metric_descriptor(metric: LogMetric, deployment: str) -> dict[str, Any]:
    """The LogMetric `metric_descriptor`: a DELTA distribution of the field, or a DELTA count
    of the lines, labelled per node and rank."""
    return {
        "metric_kind": "DELTA",
        "value_type": "INT64" if metric.field is None else "DISTRIBUTION",
        "unit": metric.unit,
        "display_name": f"{metric.display_name} ({deployment})",
        "labels": [dict(label) for label in LABEL_DESCRIPTORS],
    }

"""Training telemetry in Cloud Monitoring: logs-based metrics from the bundled trainers' JSON
lines, one dashboard with a series per worker, and an alert when training stalls.

    from components.training_dashboard import TrainingDashboard

    job_id = job.job_name.apply(lambda n: n.rsplit("/", 1)[-1])  # a VertexTrainingJob
    monitoring = TrainingDashboard(
        "exp-42-monitoring",
        {
            "project": "my-project",
            "deployment_name": "exp-42",
            "target": "vertex",
            "worker_count": 4,  # machines; one series per worker (trainer `node` rank)
            "log_filter": job_id.apply(lambda i: f'resource.labels.job_id="{i}"'),
            "resource_filter": job_id.apply(lambda i: f'resource.label.job_id="{i}"'),
            "stall_minutes": 15,
            "notification_channels": ["projects/my-project/notificationChannels/123"],
            "labels": {"team": "ml"},
        },
    )
    pulumi.export("dashboard_url", monitoring.dashboard_url)

What it reads. Every trainer rank prints one JSON object per line (`trainers.common.metrics`):
`{"event": "train", "step", "loss", "lr", "step_time_s", "samples_per_s", "data_wait_s",
"tokens_per_s"?, "mfu"?, "gpu_util_pct"?, ..., "rank", "node", "worker", "run", "severity",
"time"}` every `log_every` steps and `{"event": "checkpoint", "step", "stall_s", ...}` after
each save. Where a logging agent parses the line (GKE, Vertex) the fields land in the entry's
`jsonPayload` (`payload: json`); where the line is forwarded as text, e.g. prefixed by the TPU
startup script, it stays in `textPayload` and the fields are read with regular expressions
(`payload: text`). The component never guesses which entries are the deployment's: the caller
passes `log_filter` (e.g. the Vertex job id or the TPU node name) and the entries' monitored
resource type (`log_resource_type`, defaulted per target), and the component adds the event
and field conditions.

What it creates (children named `<name>-<role>`):

| role               | resource                       | what                                      |
|--------------------|--------------------------------|-------------------------------------------|
| `step-time`        | `gcp.logging.Metric` (each)    | DISTRIBUTION of that `train` field,       |
| `samples-per-s`    |                                | labelled `node` and `rank`                |
| `tokens-per-s`     |                                |                                           |
| `mfu`, `data-wait` |                                |                                           |
| `gpu-util`         |                                | (GPU targets only)                        |
| `checkpoint-stall` | `gcp.logging.Metric`           | DISTRIBUTION of `checkpoint` `stall_s`    |
| `train-lines`      | `gcp.logging.Metric`           | counter of `train` lines (the heartbeat)  |
| `dashboard`        | `gcp.monitoring.Dashboard`     | per-worker charts of all of the above,    |
|                    |                                | accelerator utilization and network bytes |
|                    |                                | from the platform's built-in metrics      |
| `stall-alert`      | `gcp.monitoring.AlertPolicy`   | a worker's `train` lines stop for         |
|                    |                                | `stall_minutes`, or fewer than            |
|                    |                                | `worker_count` workers write any in it    |

Supported targets: `tpu`, `gpu_cluster` (`gpu_backend` `gke` or `gce`) and `vertex`. The
`local` target writes no Cloud Logging entries, so it is rejected with an explanation.
Built-in metric names and default log resource types carry `verified`/`source` notes
(`TARGET_METRICS`, `LOG_RESOURCE_TYPES_SOURCE`); the dashboard's header lists the unverified
ones.

The dashboard body is built from a plain dict, serialized with sorted keys and checked against
the bundled `monitoring.v1` discovery schema (`components._discovery`) before anything is
registered.

Naming: metric ids are `trainstack/<deployment_name>/<event>/<field>` (the Monitoring type is
`logging.googleapis.com/user/<id>`), so a redeploy keeps its history; the dashboard is
`trainstack <deployment_name>: training`, the policy `trainstack <deployment_name>: training
stalled`.

Limits worth knowing:
- The stall alert also fires when a run finishes (its lines stop too); incidents close by
  themselves after `ALERT_AUTO_CLOSE`, or set `alert_enabled` false between runs.
- `stall_minutes` must exceed the time between two `train` lines (`log_every` x step time),
  or a healthy slow run looks stalled.
- Google can take up to 10 minutes to make a new logs-based metric visible to the alerting
  API; a first `pulumi up` may fail creating the policy with "Cannot find metric(s) that match
  type" (hashicorp/terraform-provider-google#11102). Running `pulumi up` again completes it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

import pulumi
from pulumi_gcp import logging, monitoring

from components._discovery import validate_body
from components._naming import labels_input

TOKEN: Final = "trainstack:monitoring:TrainingDashboard"
COMPONENT_LABEL: Final = "training-dashboard"
DASHBOARD_API: Final = "monitoring.v1"

TARGETS: Final[tuple[str, ...]] = ("tpu", "gpu_cluster", "vertex")
GPU_BACKENDS: Final[tuple[str, ...]] = ("gke", "gce")
DEFAULT_STALL_MINUTES: Final = 15
MIN_STALL_MINUTES: Final = 2
"""Metric-absence conditions need at least 120 s (monitoring.v3 `MetricAbsence.duration`)."""
MAX_STALL_MINUTES: Final = 720
"""Twelve hours: past that a stall alert no longer saves accelerator time worth paging for,
and the threshold condition's window stays far below the 25 h alerting alignment limit."""
ALIGNMENT: Final = "60s"
"""Chart and absence-condition alignment: Monitoring's minimum alignment period."""
ALERT_AUTO_CLOSE: Final = "86400s"
"""Open incidents close after a day without data, so a finished run's incidents go away
instead of lingering for Monitoring's default of seven days."""
ALERT_SEVERITY: Final = "ERROR"
METRIC_PREFIX: Final = "trainstack"
USER_METRIC_DOMAIN: Final = "logging.googleapis.com/user"
WORKER_LABEL: Final = "node"
"""Trainer `node` rank: one value per worker machine (`rank` is one per process)."""

PAYLOADS: Final[tuple[str, ...]] = ("json", "text")
"""How the trainer's lines reach Cloud Logging: parsed into `jsonPayload` by the platform's
logging agent, or verbatim (possibly prefixed) in `textPayload`."""
DEFAULT_PAYLOADS: Final[dict[str, str]] = {
    # components/startup/tpu_worker.sh prefixes every trainer line with the slice and worker
    # and leaves it to the guest agent, which forwards startup-script output as text.
    "tpu": "text",
    "gke": "json",
    "gce": "json",
    "vertex": "json",
}


def _text_key(key: str) -> str:
    """RE2 for `"key": ` in a trainer line (`json.dumps` with its default separators, see
    trainers.common.metrics.MetricsLogger.log). `[^a-z_]` stands for the quotes, so the
    pattern needs no escaping inside a filter string and `"rank"` does not match
    `"local_rank"`."""
    return f"[^a-z_]{key}[^a-z_]: "


_LABEL_DESCRIPTORS: Final[list[dict[str, str]]] = [
    {"key": "node", "value_type": "STRING", "description": "Trainer node rank (one per worker)"},
    {"key": "rank", "value_type": "STRING", "description": "Trainer global rank (one per process)"},
]

_DEPLOYMENT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_RESOURCE_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*(/[A-Za-z0-9_]+)?$")
_CHANNEL = re.compile(r"^projects/[^/\s]+/notificationChannels/[^/\s]+$")
_MAX_FILTER_CHARS = 10_000  # LogMetric filters take 20,000; the rest is the component's part.


class TrainingDashboardArgs(TypedDict):
    """Arguments for `TrainingDashboard`."""

    project: pulumi.Input[str]
    """Project that owns the metrics, dashboard and alert policy (and receives the logs)."""
    deployment_name: str
    """Names the metrics (`trainstack/<deployment_name>/...`), the dashboard and the policy:
    1-64 of A-Z, a-z, 0-9, `_`, `.`, `-` (every Pulumi stack name fits). Plain value: it is
    part of every metric id and validated before anything is registered."""
    target: Literal["tpu", "gpu_cluster", "vertex"]
    """The stack's compute target; selects the built-in accelerator and network metrics and
    the default `log_resource_type`. Plain value."""
    worker_count: int
    """Workers that run the trainer and write `train` lines, counted by trainer `node` rank:
    GPU nodes, Vertex replicas including the chief, 1 for a TPU slice whose trainer runs on
    worker 0 only. The dashboard and the alert flag fewer reporting workers. Plain value, at
    least 1."""
    log_filter: pulumi.Input[str]
    """Cloud Logging filter that selects this deployment's trainer entries, e.g.
    `resource.labels.job_id="123"` (Vertex) or `resource.labels.node_id="exp-42-tpu"` (TPU).
    Do not set `resource.type` here (see `log_resource_type`); the component adds the event
    and field conditions."""
    resource_filter: pulumi.Input[str]
    """Cloud Monitoring filter clause that selects this deployment's machines in the built-in
    metrics, e.g. `resource.label.job_id="123"` (Vertex, `cloudml_job`),
    `resource.label.node_id="exp-42-tpu"` (TPU, `tpu_worker`),
    `resource.label.cluster_name="exp-42"` (GKE, `k8s_node`) or
    `metadata.user_labels.stack="exp-42"` (GCE, `gce_instance`). The component sets
    `metric.type` and `resource.type`."""
    gpu_backend: NotRequired[Literal["gke", "gce"]]
    """Required with target `gpu_cluster` (and only then): where the GPUs run. Plain value."""
    log_resource_type: NotRequired[str]
    """Monitored resource type of the trainer's log entries, and so of the logs-based metrics
    (alert filters must name it). Default per target: `LOG_RESOURCE_TYPES`. Plain value."""
    payload: NotRequired[Literal["json", "text"]]
    """Where the trainer's fields are: `json` (`jsonPayload`, the platform agent parsed the
    line) or `text` (`textPayload` holds the JSON text, e.g. behind a prefix). Default per
    target: `DEFAULT_PAYLOADS`. Plain value."""
    stall_minutes: NotRequired[int]
    """Minutes without `train` lines before the alert fires (default 15, 2-720). Must exceed the
    time between two `train` lines. Plain value."""
    notification_channels: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Notification channel names (`projects/<p>/notificationChannels/<id>`) the stall alert
    notifies; none by default (incidents still open in the console)."""
    alert_enabled: NotRequired[pulumi.Input[bool]]
    """Whether the stall alert evaluates (default true); turn it off between runs."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """Extra labels for the dashboard and the alert policy (logs-based metrics take none)."""


# ------------------------------------------------------------------------------------------
# Facts: which built-in metrics show accelerator utilization and network bytes per target
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltinMetric:
    """A Cloud Monitoring built-in metric the dashboard charts per worker."""

    metric_type: str
    resource_type: str
    worker_field: str
    """Group-by field that separates workers (a resource label)."""
    verified: bool
    source: str


@dataclass(frozen=True)
class TargetMetrics:
    """The built-in metrics for one compute target."""

    accelerator: BuiltinMetric
    accelerator_unit: str
    received_bytes: BuiltinMetric
    sent_bytes: BuiltinMetric


_TPU_SOURCE = (
    "Cloud TPU monitoring guide lists network/received_bytes_count and network/sent_bytes_count "
    "(cloud.google.com/tpu/docs/troubleshooting/tpu-node-monitoring); the metric prefix, "
    "accelerator/duty_cycle and the tpu_worker labels node_id/worker_id are only seen in public "
    "code. TO VERIFY in Metrics Explorer on a real slice (newer runtimes may report on "
    "tpu.googleapis.com/GceTpuWorker instead)"
)
_GKE_GPU_SOURCE = (
    "GoogleCloudPlatform/monitoring-dashboard-samples dashboards/nvidia-gpu/"
    "gce-gke-gpu-utilization.json (k8s_node, kubernetes.io/node/accelerator/duty_cycle, "
    "resource.node_name); managed DCGM (prometheus.googleapis.com/DCGM_FI_DEV_GPU_UTIL/gauge) "
    "is the finer-grained alternative"
)
_GKE_NET_SOURCE = "public code and GKE system-metric lists; TO VERIFY against the GKE metrics list"
_GCE_GPU_SOURCE = (
    "GoogleCloudPlatform/monitoring-dashboard-samples dashboards/nvidia-gpu/"
    "gce-gke-gpu-utilization.json (gce_instance, agent.googleapis.com/gpu/utilization, "
    "resource.instance_id); needs the Ops Agent on the VMs"
)
_GCE_NET_SOURCE = "public code; TO VERIFY against the Compute Engine metrics list"
_VERTEX_SOURCE = (
    "Vertex docs (monitoring-metrics: custom training metrics are the ml.googleapis.com "
    "training/* types); names and the cloudml_job resource from public code and vendor metric "
    "tables; the task_name label is TO VERIFY"
)

TARGET_METRICS: Final[dict[str, TargetMetrics]] = {
    "tpu": TargetMetrics(
        accelerator=BuiltinMetric(
            "tpu.googleapis.com/accelerator/duty_cycle",
            "tpu_worker",
            "resource.label.worker_id",
            verified=False,
            source=_TPU_SOURCE,
        ),
        accelerator_unit="duty cycle (%)",
        received_bytes=BuiltinMetric(
            "tpu.googleapis.com/network/received_bytes_count",
            "tpu_worker",
            "resource.label.worker_id",
            verified=False,
            source=_TPU_SOURCE,
        ),
        sent_bytes=BuiltinMetric(
            "tpu.googleapis.com/network/sent_bytes_count",
            "tpu_worker",
            "resource.label.worker_id",
            verified=False,
            source=_TPU_SOURCE,
        ),
    ),
    "gke": TargetMetrics(
        accelerator=BuiltinMetric(
            "kubernetes.io/node/accelerator/duty_cycle",
            "k8s_node",
            "resource.label.node_name",
            verified=True,
            source=_GKE_GPU_SOURCE,
        ),
        accelerator_unit="GPU duty cycle (%)",
        received_bytes=BuiltinMetric(
            "kubernetes.io/node/network/received_bytes_count",
            "k8s_node",
            "resource.label.node_name",
            verified=False,
            source=_GKE_NET_SOURCE,
        ),
        sent_bytes=BuiltinMetric(
            "kubernetes.io/node/network/sent_bytes_count",
            "k8s_node",
            "resource.label.node_name",
            verified=False,
            source=_GKE_NET_SOURCE,
        ),
    ),
    "gce": TargetMetrics(
        accelerator=BuiltinMetric(
            "agent.googleapis.com/gpu/utilization",
            "gce_instance",
            "resource.label.instance_id",
            verified=True,
            source=_GCE_GPU_SOURCE,
        ),
        accelerator_unit="GPU utilization (%)",
        received_bytes=BuiltinMetric(
            "compute.googleapis.com/instance/network/received_bytes_count",
            "gce_instance",
            "resource.label.instance_id",
            verified=False,
            source=_GCE_NET_SOURCE,
        ),
        sent_bytes=BuiltinMetric(
            "compute.googleapis.com/instance/network/sent_bytes_count",
            "gce_instance",
            "resource.label.instance_id",
            verified=False,
            source=_GCE_NET_SOURCE,
        ),
    ),
    "vertex": TargetMetrics(
        accelerator=BuiltinMetric(
            "ml.googleapis.com/training/accelerator/utilization",
            "cloudml_job",
            "resource.label.task_name",
            verified=False,
            source=_VERTEX_SOURCE,
        ),
        accelerator_unit="accelerator utilization",
        received_bytes=BuiltinMetric(
            "ml.googleapis.com/training/network/received_bytes_count",
            "cloudml_job",
            "resource.label.task_name",
            verified=False,
            source=_VERTEX_SOURCE,
        ),
        sent_bytes=BuiltinMetric(
            "ml.googleapis.com/training/network/sent_bytes_count",
            "cloudml_job",
            "resource.label.task_name",
            verified=False,
            source=_VERTEX_SOURCE,
        ),
    ),
}
"""Built-in metrics by platform key (`tpu`, `gke`, `gce`, `vertex`); see `verified`/`source`."""

LOG_RESOURCE_TYPES: Final[dict[str, str]] = {
    "tpu": "tpu_worker",
    "gke": "k8s_container",
    "gce": "gce_instance",
    "vertex": "ml_job",
}
"""Default monitored resource type of the trainer's log entries, by platform key."""
LOG_RESOURCE_TYPES_VERIFIED: Final = False
LOG_RESOURCE_TYPES_SOURCE: Final = (
    "k8s_container: GKE structured container logs; ml_job: public code reading Vertex CustomJob "
    "logs (resource.labels.job_id); tpu_worker / gce_instance: what a log agent on TPU VMs / "
    "Compute Engine VMs reports. TO VERIFY per target that the trainer's stdout arrives as "
    "jsonPayload with this resource type (the TPU and GCE compute components must ship it)"
)


# ------------------------------------------------------------------------------------------
# Logs-based metrics
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LogMetric:
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
LOG_METRICS: Final[tuple[_LogMetric, ...]] = (
    _LogMetric(
        role="step-time",
        event="train",
        field="step_time_s",
        display_name="Training step time",
        unit="s",
        chart_title="Step time per worker (p50, s)",
        buckets=_exponential(0.001, 1.4, 40),
    ),
    _LogMetric(
        role="samples-per-s",
        event="train",
        field="samples_per_s",
        display_name="Training samples per second",
        unit="1/s",
        chart_title="Samples/s per worker (p50)",
        buckets=_exponential(1.0, 1.5, 40),
    ),
    _LogMetric(
        role="tokens-per-s",
        event="train",
        field="tokens_per_s",
        display_name="Training tokens per second",
        unit="1/s",
        chart_title="Tokens/s per worker (p50, language models)",
        buckets=_exponential(10.0, 1.5, 40),
    ),
    _LogMetric(
        role="mfu",
        event="train",
        field="mfu",
        display_name="Model FLOPs utilization",
        unit="1",
        chart_title="MFU per worker (p50, GPUs with a known peak)",
        buckets=_linear(0.0, 0.02, 50),
    ),
    _LogMetric(
        role="data-wait",
        event="train",
        field="data_wait_s",
        display_name="Data loader wait per step",
        unit="s",
        chart_title="Data-loader wait per step per worker (p50, s)",
        buckets=_exponential(0.0001, 1.5, 40),
    ),
    _LogMetric(
        role="gpu-util",
        event="train",
        field="gpu_util_pct",
        display_name="GPU utilization reported by the trainer",
        unit="%",
        chart_title="GPU utilization from the trainer (NVML, p50 %)",
        buckets=_linear(0.0, 2.0, 50),
        gpu_only=True,
    ),
    _LogMetric(
        role="checkpoint-stall",
        event="checkpoint",
        field="stall_s",
        display_name="Checkpoint training stall",
        unit="s",
        chart_title="Checkpoint stall per worker (max, s)",
        buckets=_exponential(0.01, 1.5, 40),
        aligner="ALIGN_PERCENTILE_99",
        reducer="REDUCE_MAX",
    ),
    _LogMetric(
        role="train-lines",
        event="train",
        field=None,
        display_name="Trainer train log lines",
        unit="1",
        chart_title="Train log lines per worker (per minute)",
        aligner="ALIGN_SUM",
        reducer="REDUCE_SUM",
    ),
)
"""Every logs-based metric, in dashboard order (`gpu_only` ones on GPU targets only)."""

_HEARTBEAT: Final = LOG_METRICS[-1]


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    deployment: str
    target: str
    platform: str
    """Key of `TARGET_METRICS` / `LOG_RESOURCE_TYPES`: tpu | gke | gce | vertex."""
    worker_count: int
    stall_minutes: int
    log_resource_type: str
    payload: str

    @property
    def gpu(self) -> bool:
        return self.platform != "tpu"

    @property
    def log_metrics(self) -> tuple[_LogMetric, ...]:
        return tuple(m for m in LOG_METRICS if self.gpu or not m.gpu_only)

    @property
    def stall_window(self) -> str:
        return f"{self.stall_minutes * 60}s"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate(args: TrainingDashboardArgs) -> _Plan:
    deployment = args["deployment_name"]
    if not isinstance(deployment, str) or not _DEPLOYMENT.match(deployment):
        raise ValueError(
            f"deployment_name must be 1-64 of A-Z, a-z, 0-9, '_', '.', '-' (it is part of every "
            f"metric id), got {deployment!r}"
        )
    target, platform = _platform(args)
    workers = args["worker_count"]
    if not _is_int(workers) or workers < 1:
        raise ValueError(f"worker_count must be an integer >= 1, got {workers!r}")
    stall = args.get("stall_minutes", DEFAULT_STALL_MINUTES)
    if not _is_int(stall) or not MIN_STALL_MINUTES <= stall <= MAX_STALL_MINUTES:
        raise ValueError(
            f"stall_minutes must be an integer between {MIN_STALL_MINUTES} and "
            f"{MAX_STALL_MINUTES}, got {stall!r}"
        )
    resource_type = args.get("log_resource_type", LOG_RESOURCE_TYPES[platform])
    if not isinstance(resource_type, str) or not _RESOURCE_TYPE.match(resource_type):
        raise ValueError(
            f"log_resource_type must be a monitored resource type such as 'k8s_container', "
            f"got {resource_type!r}"
        )
    payload = args.get("payload", DEFAULT_PAYLOADS[platform])
    if payload not in PAYLOADS:
        raise ValueError(f"payload must be one of {', '.join(PAYLOADS)}, got {payload!r}")
    _check_filter("log_filter", args["log_filter"], ("resource.type", "jsonPayload.event"))
    _check_filter("resource_filter", args["resource_filter"], ("resource.type", "metric.type"))
    _check_alert_args(args)
    return _Plan(deployment, target, platform, workers, stall, resource_type, payload)


def _platform(args: TrainingDashboardArgs) -> tuple[str, str]:
    """(target, platform key of `TARGET_METRICS`)."""
    target = args["target"]
    if target == "local":
        raise ValueError(
            "target 'local' needs no TrainingDashboard: local runs print their JSON lines to the "
            f"terminal and write nothing to Cloud Logging; supported targets: {', '.join(TARGETS)}"
        )
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    backend = args.get("gpu_backend")
    if target != "gpu_cluster":
        if backend is not None:
            raise ValueError(
                f"gpu_backend applies only to target 'gpu_cluster', got {backend!r} with target "
                f"{target!r}"
            )
        return target, target
    if backend is None:
        raise ValueError(
            f"gpu_backend is required with target 'gpu_cluster' (one of {', '.join(GPU_BACKENDS)})"
        )
    if backend not in GPU_BACKENDS:
        raise ValueError(f"gpu_backend must be one of {', '.join(GPU_BACKENDS)}, got {backend!r}")
    return target, backend


def _check_alert_args(args: TrainingDashboardArgs) -> None:
    channels = args.get("notification_channels")
    if isinstance(channels, str) or not (
        channels is None or isinstance(channels, Sequence | pulumi.Output)
    ):
        raise TypeError(f"notification_channels must be a list of channel names, got {channels!r}")
    for channel in channels if isinstance(channels, Sequence) else ():
        if isinstance(channel, str) and not _CHANNEL.match(channel):
            raise ValueError(
                f"notification_channels: {channel!r} is not a channel name of the form "
                "'projects/<project>/notificationChannels/<id>'"
            )
    enabled = args.get("alert_enabled", True)
    if not isinstance(enabled, bool | pulumi.Output):
        raise TypeError(f"alert_enabled must be a bool, got {enabled!r}")


def _check_filter(key: str, value: object, owned: tuple[str, ...]) -> None:
    """A plain filter must be a non-empty string that leaves the component's terms alone."""
    if isinstance(value, pulumi.Output):
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} must be a non-empty filter string, got {value!r}")
    if len(value) > _MAX_FILTER_CHARS:
        raise ValueError(f"{key} is {len(value)} characters; at most {_MAX_FILTER_CHARS} allowed")
    for term in owned:
        if term in value:
            hint = (
                "; use log_resource_type" if term == "resource.type" and key == "log_filter" else ""
            )
            raise ValueError(
                f"{key} must not set {term} (TrainingDashboard sets it), got {value!r}{hint}"
            )


# ------------------------------------------------------------------------------------------
# Pure builders: log filters, alert conditions, dashboard body
# ------------------------------------------------------------------------------------------


def metric_type(metric_id: str) -> str:
    """The Cloud Monitoring metric type of a logs-based metric id."""
    return f"{USER_METRIC_DOMAIN}/{metric_id}"


def _log_filter(plan: _Plan, metric: _LogMetric, scope: str) -> str:
    parts = [f'resource.type="{plan.log_resource_type}"', f"({scope})"]
    # Lines without the field (no tokens on image models, no MFU on CPU) are skipped instead
    # of counted as failed extractions.
    if plan.payload == "json":
        parts.append(f'jsonPayload.event="{metric.event}"')
        if metric.field is not None:
            parts.append(f"jsonPayload.{metric.field}:*")
    else:
        # The character class after the event name keeps "checkpoint" from also matching
        # "checkpoint_begin".
        parts.append(f'textPayload=~"{_text_key("event")}[^a-z_]{metric.event}[^a-z_]"')
        if metric.field is not None:
            parts.append(f'textPayload=~"{_text_key(metric.field)}"')
    return " AND ".join(parts)


def _value_extractor(payload: str, field: str) -> str:
    if payload == "json":
        return f"EXTRACT(jsonPayload.{field})"
    return f'REGEXP_EXTRACT(textPayload, "{_text_key(field)}([-+.0-9eE]+)")'


def _label_extractors(payload: str) -> dict[str, str]:
    # The labels hold JSON numbers. REGEXP_EXTRACT is documented to turn the field into a
    # string before matching (logging.v2 `LogMetric.valueExtractor`), so "0" and "0.0" both
    # give "0"; EXTRACT's number-to-string conversion is not documented.
    if payload == "json":
        return {key: f'REGEXP_EXTRACT(jsonPayload.{key}, "^([0-9]+)")' for key in ("node", "rank")}
    return {
        key: f'REGEXP_EXTRACT(textPayload, "{_text_key(key)}([0-9]+)")' for key in ("node", "rank")
    }


def _monitoring_filter(metric: str, resource_type: str | None, scope: str | None = None) -> str:
    text = f'metric.type="{metric}"'
    if resource_type is not None:
        text += f' AND resource.type="{resource_type}"'
    if scope is not None:
        text += f" AND ({scope})"
    return text


def _alert_conditions(plan: _Plan) -> list[dict[str, Any]]:
    heartbeat = metric_type(_HEARTBEAT.metric_id(plan.deployment))
    # Absence conditions must name the resource type (monitoring.v3 MetricAbsence.filter); a
    # logs-based metric carries its log entries' resource type.
    flt = _monitoring_filter(heartbeat, plan.log_resource_type)
    per_worker = {
        "alignment_period": ALIGNMENT,
        "per_series_aligner": "ALIGN_SUM",
        "cross_series_reducer": "REDUCE_SUM",
        "group_by_fields": [f"metric.label.{WORKER_LABEL}"],
    }
    window = plan.stall_window
    return [
        {
            "display_name": f"A worker wrote no train log lines for {plan.stall_minutes} min",
            "condition_absent": {
                "filter": flt,
                "duration": window,
                "aggregations": [per_worker],
                "trigger": {"count": 1},
            },
        },
        {
            "display_name": (
                f"Fewer than {plan.worker_count} workers wrote train log lines in "
                f"{plan.stall_minutes} min"
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
                "threshold_value": plan.worker_count,
                "duration": "0s",
                "evaluation_missing_data": "EVALUATION_MISSING_DATA_INACTIVE",
                "trigger": {"count": 1},
            },
        },
    ]


def _alert_documentation(plan: _Plan) -> str:
    return (
        f"Training of **{plan.deployment}** ({plan.target}) stalled: a worker wrote no "
        f'`"event": "train"` log line for {plan.stall_minutes} minutes, or fewer than '
        f"{plan.worker_count} workers did.\n\n"
        "Check in this order: the job or machines still exist (preemption, spot reclaim, "
        "maintenance); the last trainer lines in Logs Explorer (an exception, a "
        '`"event": "preempted"` line, or a collective that hangs); the checkpoint stall chart '
        "(a slow bucket write blocks every rank); the data-loader wait chart.\n\n"
        "A finished run stops its lines too: then close the incident or disable the policy."
    )


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


def _text(plan: _Plan, log_scope: str) -> str:
    facts = TARGET_METRICS[plan.platform]
    unverified = sorted(
        {
            m.metric_type
            for m in (facts.accelerator, facts.received_bytes, facts.sent_bytes)
            if not m.verified
        }
    )
    lines = [
        f"**{plan.deployment}** on `{plan.target}`"
        + (f" ({plan.platform})" if plan.target == "gpu_cluster" else "")
        + f": {plan.worker_count} workers; one series per worker (trainer `node` rank).",
        "",
        (
            f"Trainer lines ({plan.payload} payload): "
            f'`resource.type="{plan.log_resource_type}" AND ({log_scope})`.'
        ),
        f"Stall alert after {plan.stall_minutes} min without `train` lines.",
    ]
    if unverified:
        listed = ", ".join(f"`{m}`" for m in unverified)
        lines += ["", f"Built-in metrics not yet verified on a live project: {listed}."]
    return "\n".join(lines)


def _dashboard_body(
    plan: _Plan, log_scope: str, resource_scope: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The `monitoring.v1` Dashboard body: a header, a workers-reporting scorecard, and one
    chart per logs-based metric and built-in metric, two per row."""
    node = f"metric.label.{WORKER_LABEL}"
    heartbeat = metric_type(_HEARTBEAT.metric_id(plan.deployment))
    window = plan.stall_window
    scorecard = {
        "title": f"Workers writing train lines (last {plan.stall_minutes} min)",
        "scorecard": {
            "timeSeriesQuery": {
                "timeSeriesFilter": {
                    "filter": _monitoring_filter(heartbeat, None),
                    "aggregation": {
                        "alignmentPeriod": window,
                        "perSeriesAligner": "ALIGN_SUM",
                        "crossSeriesReducer": "REDUCE_SUM",
                        "groupByFields": [node],
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
                    "label": f"fewer than {plan.worker_count} workers",
                    "value": float(plan.worker_count),
                    "direction": "BELOW",
                    "color": "RED",
                }
            ],
        },
    }
    charts = [
        _chart(
            m.chart_title,
            m.unit,
            [
                _data_set(
                    _monitoring_filter(metric_type(m.metric_id(plan.deployment)), None),
                    m.aligner,
                    m.reducer,
                    node,
                )
            ],
        )
        for m in plan.log_metrics
    ]
    facts = TARGET_METRICS[plan.platform]
    acc = facts.accelerator
    charts.append(
        _chart(
            f"Accelerator utilization per worker ({acc.metric_type})",
            facts.accelerator_unit,
            [
                _data_set(
                    _monitoring_filter(acc.metric_type, acc.resource_type, resource_scope),
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
                    _monitoring_filter(m.metric_type, m.resource_type, resource_scope),
                    "ALIGN_RATE",
                    "REDUCE_SUM",
                    m.worker_field,
                )
                for m in (facts.received_bytes, facts.sent_bytes)
            ],
        )
    )
    tiles: list[dict[str, Any]] = [
        {
            "xPos": 0,
            "yPos": 0,
            "width": 8,
            "height": 3,
            "widget": {
                "title": "About",
                "text": {"content": _text(plan, log_scope), "format": "MARKDOWN"},
            },
        },
        {"xPos": 8, "yPos": 0, "width": 4, "height": 3, "widget": scorecard},
    ]
    for i, chart in enumerate(charts):
        position = {"xPos": 6 * (i % 2), "yPos": 3 + 4 * (i // 2), "width": 6, "height": 4}
        tiles.append({**position, "widget": chart})
    return {
        "displayName": f"{METRIC_PREFIX} {plan.deployment}: training",
        "labels": dict(labels),
        "mosaicLayout": {"columns": 12, "tiles": tiles},
    }


def _dashboard_json(
    plan: _Plan, log_scope: str, resource_scope: str, labels: Mapping[str, str]
) -> str:
    body = _dashboard_body(plan, log_scope, resource_scope, labels)
    errors = validate_body(DASHBOARD_API, "Dashboard", body)
    if errors:
        raise ValueError(
            f"{DASHBOARD_API} Dashboard body is invalid ({len(errors)} errors):\n"
            + "\n".join(f"  - {error}" for error in errors)
        )
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _dashboard_url(dashboard_id: str, project: str) -> str:
    # The provider's id is `projects/<number>/dashboards/<id>`; the console wants the last part.
    return (
        "https://console.cloud.google.com/monitoring/dashboards/custom/"
        f"{dashboard_id.rsplit('/', 1)[-1]}?project={project}"
    )


# ------------------------------------------------------------------------------------------
# Component
# ------------------------------------------------------------------------------------------


class TrainingDashboard(pulumi.ComponentResource):
    """Logs-based training metrics, a per-worker dashboard and a stalled-training alert."""

    metric_types: dict[str, str]
    """Monitoring metric type of each logs-based metric, by role (e.g. `step-time`)."""
    metrics: dict[str, logging.Metric]
    """The logs-based metric resources, by role."""
    dashboard: monitoring.Dashboard
    """The Cloud Monitoring dashboard."""
    dashboard_json: pulumi.Output[str]
    """The dashboard body as registered (sorted-key JSON)."""
    dashboard_url: pulumi.Output[str]
    """Console link to the dashboard."""
    stall_alert: monitoring.AlertPolicy
    """The stalled-training alert policy."""
    alert_policy_name: pulumi.Output[str]
    """Resource name of the alert policy (`projects/<p>/alertPolicies/<id>`)."""

    def __init__(
        self, name: str, args: TrainingDashboardArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        plan = _validate(args)
        labels = labels_input(args.get("labels"), COMPONENT_LABEL)
        log_scope, resource_scope = args["log_filter"], args["resource_filter"]
        plain = all(isinstance(v, str | Mapping) for v in (log_scope, resource_scope, labels))
        if plain:
            dashboard_json: pulumi.Input[str] = _dashboard_json(
                plan,
                cast(str, log_scope),
                cast(str, resource_scope),
                cast(Mapping[str, str], labels),
            )
        else:
            # The body's structure does not depend on the values, so checking it with stand-ins
            # now fails a bad body before anything is registered.
            _dashboard_json(plan, "scope", "scope", {})
            dashboard_json = pulumi.Output.all(log_scope, resource_scope, labels).apply(
                lambda v: _dashboard_json(plan, v[0], v[1], v[2])
            )
        super().__init__(TOKEN, name, None, opts)

        self.metrics = self._create_metrics(name, plan, args)
        self.metric_types = {
            m.role: metric_type(m.metric_id(plan.deployment)) for m in plan.log_metrics
        }
        # The charts and conditions name the metrics by type string; depends_on orders the
        # creation so the metric descriptors exist first.
        after_metrics = pulumi.ResourceOptions(parent=self, depends_on=list(self.metrics.values()))
        self.dashboard = monitoring.Dashboard(
            f"{name}-dashboard",
            project=args["project"],
            dashboard_json=dashboard_json,
            opts=after_metrics,
        )
        self.stall_alert = monitoring.AlertPolicy(
            f"{name}-stall-alert",
            project=args["project"],
            display_name=f"{METRIC_PREFIX} {plan.deployment}: training stalled",
            combiner="OR",
            conditions=cast(Any, _alert_conditions(plan)),
            documentation={
                "content": _alert_documentation(plan),
                "mime_type": "text/markdown",
                "subject": f"{METRIC_PREFIX} {plan.deployment}: training stalled",
            },
            alert_strategy={"auto_close": ALERT_AUTO_CLOSE},
            notification_channels=args.get("notification_channels", []),
            severity=ALERT_SEVERITY,
            enabled=args.get("alert_enabled", True),
            user_labels=labels,
            opts=after_metrics,
        )

        self.dashboard_json = self.dashboard.dashboard_json
        self.dashboard_url = pulumi.Output.all(self.dashboard.id, args["project"]).apply(
            lambda v: _dashboard_url(v[0], v[1])
        )
        self.alert_policy_name = self.stall_alert.name
        self.register_outputs(
            {
                "metric_types": self.metric_types,
                "dashboard_json": self.dashboard_json,
                "dashboard_url": self.dashboard_url,
                "alert_policy_name": self.alert_policy_name,
            }
        )

    def _create_metrics(
        self, name: str, plan: _Plan, args: TrainingDashboardArgs
    ) -> dict[str, logging.Metric]:
        metrics: dict[str, logging.Metric] = {}
        for m in plan.log_metrics:
            descriptor: dict[str, Any] = {
                "metric_kind": "DELTA",
                "value_type": "INT64" if m.field is None else "DISTRIBUTION",
                "unit": m.unit,
                "display_name": f"{m.display_name} ({plan.deployment})",
                "labels": [dict(label) for label in _LABEL_DESCRIPTORS],
            }
            value: dict[str, Any] = {}
            if m.field is not None:
                value = {
                    "value_extractor": _value_extractor(plan.payload, m.field),
                    "bucket_options": m.buckets,
                }
            scope = args["log_filter"]
            flt: pulumi.Input[str] = (
                _log_filter(plan, m, scope)
                if isinstance(scope, str)
                else pulumi.Output.from_input(cast(Any, scope)).apply(
                    functools.partial(_log_filter, plan, m)
                )
            )
            what = f"`{m.field}`" if m.field else "lines"
            metrics[m.role] = logging.Metric(
                f"{name}-{m.role}",
                project=args["project"],
                name=m.metric_id(plan.deployment),
                description=(
                    f'trainstack {plan.deployment}: {what} of the trainers\' "{m.event}" log '
                    f"lines, per node and rank"
                ),
                filter=flt,
                metric_descriptor=cast(Any, descriptor),
                label_extractors=_label_extractors(plan.payload),
                opts=pulumi.ResourceOptions(parent=self),
                **value,
            )
        return metrics

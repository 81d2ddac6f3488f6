"""Training telemetry in Cloud Monitoring: logs-based metrics from the bundled trainers' JSON
lines, one dashboard with a series per worker, and an alert when training stalls.

    from trainstack.components.training_dashboard import TrainingDashboard, vertex_filters, vertex_job_id

    log_filter, resource_filter = vertex_filters(vertex_job_id(job.job_name))  # a VertexTrainingJob
    monitoring = TrainingDashboard(
        "exp-42-monitoring",
        {
            "project": "my-project",
            "deployment_name": "exp-42",
            "target": "vertex",
            "worker_count": 4,  # machines; one series per worker (trainer `node` rank)
            "log_filter": log_filter,
            "resource_filter": resource_filter,
            "stall_minutes": 15,
            "notification_channels": ["projects/my-project/notificationChannels/123"],
            "labels": {"team": "ml"},
        },
    )
    pulumi.export("dashboard_url", monitoring.dashboard_url)

What it reads. Every trainer rank prints one JSON object per line (`trainstack.trainers.common.metrics`):
`{"event": "train", "step", "loss", "lr", "step_time_s", "samples_per_s", "data_wait_s",
"tokens_per_s"?, "mfu"?, "gpu_util_pct"?, ..., "rank", "node", "worker", "run", "severity",
"time"}` every `log_every` steps and `{"event": "checkpoint", "step", "stall_s", ...}` after
each save. Where a logging agent parses the line (GKE, Vertex) the fields land in the entry's
`jsonPayload` (`payload: json`; on GCE and TPU VMs the node launcher writes them so itself,
`trainstack.trainers.common.cloud_logging`); where a line is forwarded as text, e.g. with a prefix, it
stays in `textPayload` and the fields are read with regular expressions (`payload: text`). The component never guesses which entries are the deployment's: the caller
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

Supported targets: `tpu` (`backend` `tpu_vm`, the default, or `gke` for TPU slices on GKE,
counted as `slices` x hosts), `gpu_cluster` (`gpu_backend` `gke` or `gce`) and `vertex`. The
`local` target writes no Cloud Logging entries, so it is rejected with an explanation.
Built-in metric names and default log resource types carry `verified`/`source` notes
(`TARGET_METRICS`, `LOG_RESOURCE_TYPES_SOURCE`); the dashboard's header lists the unverified
ones.

Modules: `targets` (per-target facts: payloads, log resource types, built-in metrics, and the
filter builders `vertex_filters`, `tpu_filters`, `gke_filters`, `gce_filters` that return a
target's `(log_filter, resource_filter)` from the ids its compute component owns), `metrics`
(the logs-based metrics), `layout` (the dashboard body), `alert` (the stall alert policy) and
`settings` (the validated plain settings they all read). Event and field names come from
`trainstack.trainers.common.contract`, which the trainers write with.

The dashboard body is built from a plain dict, serialized with sorted keys and checked against
the bundled `monitoring.v1` discovery schema (`trainstack.components._discovery`) before anything is
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
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

import pulumi
from pulumi_gcp import logging, monitoring

from trainstack.components._args import check_args, component_check
from trainstack.components.naming import labels_input
from trainstack.components.training_dashboard.alert import (
    ALERT_AUTO_CLOSE,
    ALERT_SEVERITY,
    alert_conditions,
    alert_documentation,
    alert_name,
)
from trainstack.components.training_dashboard.layout import (
    DASHBOARD_API,
    dashboard_json,
    dashboard_url,
)
from trainstack.components.training_dashboard.metrics import (
    LABEL_DESCRIPTORS,
    LOG_METRICS,
    METRIC_PREFIX,
    USER_METRIC_DOMAIN,
    WORKER_LABEL,
    LogMetric,
    label_extractors,
    log_filter,
    metric_descriptor,
    metric_type,
    value_extractor,
)
from trainstack.components.training_dashboard.settings import ALIGNMENT, DashboardSettings
from trainstack.components.training_dashboard.targets import (
    DEFAULT_PAYLOADS,
    LOG_RESOURCE_TYPES,
    LOG_RESOURCE_TYPES_SOURCE,
    LOG_RESOURCE_TYPES_VERIFIED,
    NO_DASHBOARD,
    PAYLOADS,
    PLATFORMS,
    TARGET_METRICS,
    BuiltinMetric,
    Platform,
    TargetMetrics,
    backends,
    gce_filters,
    gke_filters,
    platform_key,
    register_platform,
    targets,
    tpu_filters,
    unregister_platform,
    vertex_filters,
    vertex_job_id,
)
from trainstack.trainers.common.contract import FIELD_EVENT

__all__ = [
    "ALERT_AUTO_CLOSE",
    "ALERT_SEVERITY",
    "ALIGNMENT",
    "COMPONENT_LABEL",
    "DASHBOARD_API",
    "DEFAULT_PAYLOADS",
    "DEFAULT_STALL_MINUTES",
    "LABEL_DESCRIPTORS",
    "LOG_METRICS",
    "LOG_RESOURCE_TYPES",
    "LOG_RESOURCE_TYPES_SOURCE",
    "LOG_RESOURCE_TYPES_VERIFIED",
    "MAX_STALL_MINUTES",
    "METRIC_PREFIX",
    "MIN_STALL_MINUTES",
    "PAYLOADS",
    "PLATFORMS",
    "TARGET_METRICS",
    "TOKEN",
    "USER_METRIC_DOMAIN",
    "WORKER_LABEL",
    "BuiltinMetric",
    "DashboardSettings",
    "LogMetric",
    "Platform",
    "TargetMetrics",
    "TrainingDashboard",
    "TrainingDashboardArgs",
    "backends",
    "gce_filters",
    "gke_filters",
    "metric_type",
    "register_platform",
    "targets",
    "tpu_filters",
    "unregister_platform",
    "vertex_filters",
    "vertex_job_id",
]

TOKEN: Final = "trainstack:monitoring:TrainingDashboard"
COMPONENT_LABEL: Final = "training-dashboard"

DEFAULT_STALL_MINUTES: Final = 15
MIN_STALL_MINUTES: Final = 2
"""Metric-absence conditions need at least 120 s (monitoring.v3 `MetricAbsence.duration`)."""
MAX_STALL_MINUTES: Final = 720
"""Twelve hours: past that a stall alert no longer saves accelerator time worth paging for,
and the threshold condition's window stays far below the 25 h alerting alignment limit."""

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
    target: str
    """The stack's compute target, one of `targets()` (a `PLATFORMS` entry's); selects the built-in accelerator and network metrics and
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
    and field conditions. `vertex_filters`, `tpu_filters`, `gke_filters` and `gce_filters`
    build it and `resource_filter` from the ids the compute components own."""
    resource_filter: pulumi.Input[str]
    """Cloud Monitoring filter clause that selects this deployment's machines in the built-in
    metrics, e.g. `resource.label.job_id="123"` (Vertex, `cloudml_job`),
    `resource.label.node_id="exp-42-tpu"` (TPU, `tpu_worker`),
    `resource.label.cluster_name="exp-42"` (GKE, `k8s_node`) or
    `metadata.user_labels.stack="exp-42"` (GCE, `gce_instance`). The component sets
    `metric.type` and `resource.type`."""
    gpu_backend: NotRequired[str]
    """Required with target `gpu_cluster` (and only then): where the GPUs run. Plain value."""
    backend: NotRequired[str]
    """`gpu_backend` by its general name, for any target with several platforms
    (`backends(target)`): target `tpu` takes `gke` for TPU slices on GKE (`TpuGkeSlices`),
    default `tpu_vm`. Plain value."""
    slices: NotRequired[int]
    """TPU slices the `worker_count` hosts are spread over, evenly (multislice): the header
    counts slices x hosts. Plain value."""
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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate(args: TrainingDashboardArgs) -> DashboardSettings:
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
    _check_filter("log_filter", args["log_filter"], ("resource.type", f"jsonPayload.{FIELD_EVENT}"))
    _check_filter("resource_filter", args["resource_filter"], ("resource.type", "metric.type"))
    _check_alert_args(args)
    slices = args.get("slices")
    if slices is not None and (not _is_int(slices) or slices < 1 or workers % slices):
        raise ValueError(
            f"slices must be an integer >= 1 that divides worker_count ({workers}), got {slices!r}"
        )
    return DashboardSettings(
        deployment, target, platform, workers, stall, resource_type, payload, slices
    )


def _platform(args: TrainingDashboardArgs) -> tuple[str, str]:
    """(target, platform key of `PLATFORMS`)."""
    target = args["target"]
    valid = ", ".join(targets())
    reason = NO_DASHBOARD.get(target)
    if reason is not None:
        raise ValueError(
            f"target {target!r} needs no TrainingDashboard: {reason}; supported targets: {valid}"
        )
    if target not in targets():
        raise ValueError(f"target must be one of {valid}, got {target!r}")
    if "backend" in args and "gpu_backend" in args:
        raise ValueError("give backend or gpu_backend (its older name), not both")
    name = "backend" if "backend" in args else "gpu_backend"
    backend = args.get("backend", args.get("gpu_backend"))
    keys = backends(target)
    if keys is None:
        if backend is not None:
            several = " or ".join(repr(t) for t in targets() if backends(t) is not None)
            raise ValueError(
                f"{name} applies only to target {several}, got {backend!r} with target {target!r}"
            )
        return target, target
    key = platform_key(target, backend)
    if key is None and backend is None:
        raise ValueError(f"{name} is required with target {target!r} (one of {', '.join(keys)})")
    if key is None:
        raise ValueError(f"{name} must be one of {', '.join(keys)}, got {backend!r}")
    return target, key


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
        check_args("TrainingDashboard", TrainingDashboardArgs, args)
        settings = component_check("TrainingDashboard", _validate, args)
        labels = component_check(
            "TrainingDashboard", labels_input, args.get("labels"), COMPONENT_LABEL
        )
        log_scope, resource_scope = args["log_filter"], args["resource_filter"]
        plain = all(isinstance(v, str | Mapping) for v in (log_scope, resource_scope, labels))
        if plain:
            body: pulumi.Input[str] = dashboard_json(
                settings,
                cast(str, log_scope),
                cast(str, resource_scope),
                cast(Mapping[str, str], labels),
            )
        else:
            # The body's structure does not depend on the values, so checking it with stand-ins
            # now fails a bad body before anything is registered.
            dashboard_json(settings, "scope", "scope", {})
            body = pulumi.Output.all(log_scope, resource_scope, labels).apply(
                lambda v: dashboard_json(settings, v[0], v[1], v[2])
            )
        super().__init__(TOKEN, name, None, opts)

        self.metrics = self._create_metrics(name, settings, args)
        self.metric_types = {
            m.role: metric_type(m.metric_id(settings.deployment)) for m in settings.log_metrics
        }
        # The charts and conditions name the metrics by type string; depends_on orders the
        # creation so the metric descriptors exist first.
        after_metrics = pulumi.ResourceOptions(parent=self, depends_on=list(self.metrics.values()))
        self.dashboard = monitoring.Dashboard(
            f"{name}-dashboard",
            project=args["project"],
            dashboard_json=body,
            opts=after_metrics,
        )
        self.stall_alert = monitoring.AlertPolicy(
            f"{name}-stall-alert",
            project=args["project"],
            display_name=alert_name(settings),
            combiner="OR",
            conditions=cast(Any, alert_conditions(settings)),
            documentation={
                "content": alert_documentation(settings),
                "mime_type": "text/markdown",
                "subject": alert_name(settings),
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
            lambda v: dashboard_url(v[0], v[1])
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
        self, name: str, settings: DashboardSettings, args: TrainingDashboardArgs
    ) -> dict[str, logging.Metric]:
        metrics: dict[str, logging.Metric] = {}
        for m in settings.log_metrics:
            value: dict[str, Any] = {}
            if m.field is not None:
                value = {
                    "value_extractor": value_extractor(settings.payload, m.field),
                    "bucket_options": m.buckets,
                }
            scope = args["log_filter"]
            flt: pulumi.Input[str] = (
                log_filter(settings.log_resource_type, settings.payload, m, scope)
                if isinstance(scope, str)
                else pulumi.Output.from_input(cast(Any, scope)).apply(
                    functools.partial(log_filter, settings.log_resource_type, settings.payload, m)
                )
            )
            what = f"`{m.field}`" if m.field else "lines"
            metrics[m.role] = logging.Metric(
                f"{name}-{m.role}",
                project=args["project"],
                name=m.metric_id(settings.deployment),
                description=(
                    f'trainstack {settings.deployment}: {what} of the trainers\' "{m.event}" log '
                    f"lines, per node and rank"
                ),
                filter=flt,
                metric_descriptor=cast(Any, metric_descriptor(m, settings.deployment)),
                label_extractors=label_extractors(settings.payload),
                opts=pulumi.ResourceOptions(parent=self),
                **value,
            )
        return metrics

"""Per-target monitoring facts: how each compute target's trainer lines reach Cloud Logging
(payload, monitored resource type), which built-in metrics show its accelerator utilization
and network bytes (with where each name comes from and whether it was seen on a live
project), and the filters that select one deployment's entries and machines.

Platform keys: `tpu`, `tpu_gke`, `gke`, `gce`, `vertex` (target `gpu_cluster` is `gke` or
`gce` by `gpu_backend`, target `tpu` is `tpu_gke` with `backend: gke`), one `PLATFORMS` entry
each; `register_platform` adds one.

The filter builders take the ids the compute components own and return
`(log_filter, resource_filter)` for `TrainingDashboardArgs`:

    from trainstack.components.training_dashboard.targets import tpu_filters

    log_filter, resource_filter = tpu_filters(tpu.slice_name)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NotRequired, TypedDict

import pulumi

NO_DASHBOARD: Final[dict[str, str]] = {
    "local": (
        "local runs print their JSON lines to the terminal and write nothing to Cloud Logging"
    ),
}
"""Targets with nothing to chart, and why."""

PAYLOADS: Final[tuple[str, ...]] = ("json", "text")
"""How the trainer's lines reach Cloud Logging: parsed into `jsonPayload` by the platform's
logging agent, or verbatim (possibly prefixed) in `textPayload`."""


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
_GKE_TPU_SOURCE = (
    "the GKE node accelerator metric the GPU pools chart (_GKE_GPU_SOURCE); that GKE TPU nodes "
    "report their chips' duty cycle on it is TO VERIFY on a real slice"
)
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

_GKE_RECEIVED: Final = BuiltinMetric(
    "kubernetes.io/node/network/received_bytes_count",
    "k8s_node",
    "resource.label.node_name",
    verified=False,
    source=_GKE_NET_SOURCE,
)
"""A GKE node's received bytes, GPU and TPU nodes alike."""
_GKE_SENT: Final = BuiltinMetric(
    "kubernetes.io/node/network/sent_bytes_count",
    "k8s_node",
    "resource.label.node_name",
    verified=False,
    source=_GKE_NET_SOURCE,
)
"""A GKE node's sent bytes, GPU and TPU nodes alike."""

_METRICS: Final[dict[str, TargetMetrics]] = {
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
        received_bytes=_GKE_RECEIVED,
        sent_bytes=_GKE_SENT,
    ),
    "tpu_gke": TargetMetrics(
        accelerator=BuiltinMetric(
            "kubernetes.io/node/accelerator/duty_cycle",
            "k8s_node",
            "resource.label.node_name",
            verified=False,
            source=_GKE_TPU_SOURCE,
        ),
        accelerator_unit="TPU duty cycle (%)",
        received_bytes=_GKE_RECEIVED,
        sent_bytes=_GKE_SENT,
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

LOG_RESOURCE_TYPES_VERIFIED: Final = False
LOG_RESOURCE_TYPES_SOURCE: Final = (
    "k8s_container: GKE structured container logs; ml_job: public code reading Vertex CustomJob "
    "logs (resource.labels.job_id); tpu_worker / gce_instance: the resource the node launcher "
    "writes the trainer's lines as (trainstack.trainers.common.cloud_logging, whose "
    "RESOURCE_LABELS_SOURCE cites the labels; gce_instance's are from Google's reference, "
    "tpu_worker's TO VERIFY). TO VERIFY for GKE and Vertex that the trainer's stdout arrives "
    "as jsonPayload with this resource type"
)


@dataclass(frozen=True)
class Platform:
    """One monitoring platform: everything the dashboard knows about where a target's
    trainer runs. A new platform is one `register_platform` call (its target's module makes
    it)."""

    target: str
    """The `TrainingDashboardArgs.target` that selects it; a target with several platforms
    (gpu_cluster: gke, gce) picks one by `gpu_backend`, which is then the platform key."""
    metrics: TargetMetrics
    """Its built-in accelerator and network metrics."""
    log_resource_type: str
    """Default monitored resource type of the trainer's log entries."""
    payload: str = "json"
    """How the trainer's lines arrive (one of `PAYLOADS`)."""
    gpu: bool = True
    """Its accelerators are GPUs: the GPU-only log metrics apply."""
    backend: str | None = None
    """Its name among its target's platforms, where the name is not its key (tpu: `tpu_vm`,
    and `gke` for TPU slices on GKE); None: the key (gpu_cluster: gke, gce)."""
    worker: str = "worker"
    """What one worker is, as the dashboard's header counts them (a TPU slice's `host`)."""


PLATFORMS: Final[dict[str, Platform]] = {
    # TPU and GCE VMs: the node launcher writes each trainer line to the Cloud Logging API
    # itself (trainstack.trainers.common.cloud_logging, TRAINSTACK_CLOUD_LOGGING set by the startup
    # scripts), a JSON line as jsonPayload.
    "tpu": Platform("tpu", _METRICS["tpu"], "tpu_worker", gpu=False, backend="tpu_vm"),
    # TPU slices on GKE (`TpuGkeSlices`): target tpu, its pods' lines as any GKE pod's.
    "tpu_gke": Platform(
        "tpu", _METRICS["tpu_gke"], "k8s_container", gpu=False, backend="gke", worker="host"
    ),
    "gke": Platform("gpu_cluster", _METRICS["gke"], "k8s_container"),
    "gce": Platform("gpu_cluster", _METRICS["gce"], "gce_instance"),
    "vertex": Platform("vertex", _METRICS["vertex"], "ml_job"),
}
"""Every platform by key, in the order messages list their targets."""
TARGET_METRICS: Final[dict[str, TargetMetrics]] = {k: p.metrics for k, p in PLATFORMS.items()}
"""`Platform.metrics` by platform key (kept in step by `register_platform`)."""
LOG_RESOURCE_TYPES: Final[dict[str, str]] = {k: p.log_resource_type for k, p in PLATFORMS.items()}
"""`Platform.log_resource_type` by platform key (kept in step by `register_platform`)."""
DEFAULT_PAYLOADS: Final[dict[str, str]] = {k: p.payload for k, p in PLATFORMS.items()}
"""`Platform.payload` by platform key (kept in step by `register_platform`)."""


def register_platform(key: str, platform: Platform) -> None:
    """Add (or replace) platform `key`: a target of your own gets its dashboard and log
    facts here without a change to this module."""
    PLATFORMS[key] = platform
    TARGET_METRICS[key] = platform.metrics
    LOG_RESOURCE_TYPES[key] = platform.log_resource_type
    DEFAULT_PAYLOADS[key] = platform.payload


def unregister_platform(key: str) -> None:
    """Remove platform `key` (tests that register their own)."""
    PLATFORMS.pop(key, None)
    TARGET_METRICS.pop(key, None)
    LOG_RESOURCE_TYPES.pop(key, None)
    DEFAULT_PAYLOADS.pop(key, None)


def targets() -> tuple[str, ...]:
    """The dashboard targets, in platform order (`tpu, gpu_cluster, vertex`)."""
    return tuple(dict.fromkeys(p.target for p in PLATFORMS.values()))


def backends(target: str) -> tuple[str, ...] | None:
    """The backend names `backend` (`gpu_backend`) picks from for `target` (a platform's
    `backend`, else its key); None for a target that is its own one platform."""
    found = [(k, p) for k, p in PLATFORMS.items() if p.target == target]
    if [k for k, _ in found] == [target]:
        return None
    return tuple(p.backend or k for k, p in found)


def platform_key(target: str, backend: str | None) -> str | None:
    """The `PLATFORMS` key of `target`'s platform named `backend` (None: the platform keyed
    by the target itself, where there is one); None when there is no such platform."""
    for key, platform in PLATFORMS.items():
        if platform.target != target:
            continue
        if (backend is None and key == target) or (
            backend is not None and (platform.backend or key) == backend
        ):
            return key
    return None


# ------------------------------------------------------------------------------------------
# Filters that scope the dashboard to one deployment, from the ids its compute component owns.
# Log entries spell resource labels `resource.labels.<key>`, Monitoring time series
# `resource.label.<key>`.
# ------------------------------------------------------------------------------------------


def vertex_filter_text(job_id: str) -> tuple[str, str]:
    """`vertex_filters` for a known id, as plain text (for the CLI, outside a program)."""
    return f'resource.labels.job_id="{job_id}"', f'resource.label.job_id="{job_id}"'


def tpu_filter_text(node_id: str) -> tuple[str, str]:
    """`tpu_filters` for a known node name, as plain text."""
    return f'resource.labels.node_id="{node_id}"', f'resource.label.node_id="{node_id}"'


def gke_filter_text(cluster_name: str) -> tuple[str, str]:
    """`gke_filters` for a known cluster name, as plain text."""
    return (
        f'resource.labels.cluster_name="{cluster_name}"',
        f'resource.label.cluster_name="{cluster_name}"',
    )


def _outputs(
    text: Callable[[str], tuple[str, str]], value: pulumi.Input[str]
) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    both = pulumi.Output.from_input(value).apply(text)
    return both.apply(lambda pair: pair[0]), both.apply(lambda pair: pair[1])


def vertex_job_id(job_name: pulumi.Input[str]) -> pulumi.Output[str]:
    """The id of a Vertex CustomJob (`projects/<p>/locations/<r>/customJobs/<id>`): its logs
    and metrics key on the id, not the resource name."""
    return pulumi.Output.from_input(job_name).apply(lambda name: name.rsplit("/", 1)[-1])


def vertex_filters(job_id: pulumi.Input[str]) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    """(log_filter, resource_filter) of a Vertex CustomJob by its id (`vertex_job_id`):
    `ml_job` log entries and `cloudml_job` time series carry the label `job_id`."""
    return _outputs(vertex_filter_text, job_id)


def tpu_filters(node_id: pulumi.Input[str]) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    """(log_filter, resource_filter) of a TPU slice by its node name (`TpuPodSlice.slice_name`):
    `tpu_worker` log entries and time series carry the label `node_id`."""
    return _outputs(tpu_filter_text, node_id)


def gke_filters(
    cluster_name: pulumi.Input[str],
) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    """(log_filter, resource_filter) of a GKE cluster by its name (`A100Cluster.cluster_name`):
    `k8s_container` log entries and `k8s_node` time series carry the label `cluster_name`."""
    return _outputs(gke_filter_text, cluster_name)


def gce_filters(deployment: str, name_pattern: str | None = None) -> tuple[str, str]:
    """(log_filter, resource_filter) of the Compute Engine VMs of an `A100Cluster` with backend
    `gce`: entries whose instance name matches `name_pattern` (default `^<deployment>-a100-`;
    the component passes the pattern of the names it really gave its instances), and machines
    carrying the label `stack=<deployment>`. Plain strings: no id is known only after creation."""
    pattern = name_pattern or f"^{deployment}-a100-"
    return (
        f'labels."compute.googleapis.com/resource_name"=~"{pattern}"',
        f'metadata.user_labels.stack="{deployment}"',
    )


class DashboardScope(TypedDict):
    """What a compute component tells the `TrainingDashboard` about itself: the keys of
    `TrainingDashboardArgs` that only the component knows (`VertexTrainingJob`, `TpuPodSlice`
    and `A100Cluster` expose it as `dashboard_scope`)."""

    target: str
    """One of `targets()`."""
    gpu_backend: NotRequired[str]
    """A target with several platforms (gpu_cluster): one of `backends(target)`."""
    backend: NotRequired[str]
    """The same for a target that is not GPUs (tpu: `gke` for slices on GKE)."""
    slices: NotRequired[int]
    """TPU slices the workers are spread over (the header counts slices x hosts)."""
    worker_count: int
    """Machines whose trainer lines the per-worker charts show."""
    log_filter: pulumi.Input[str]
    resource_filter: pulumi.Input[str]

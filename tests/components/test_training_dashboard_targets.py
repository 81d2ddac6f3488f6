"""trainstack.components.training_dashboard.targets: the per-target facts as the dashboard shows them, and
the filters that scope it to one deployment from the ids its compute component owns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from tests.components.training_dashboard_helpers import (
    ARGS,
    dashboard_body,
    dashboard_widget,
    run_dashboard,
)
from trainstack.components._discovery import validate_body
from trainstack.components.training_dashboard import (
    LOG_RESOURCE_TYPES,
    TARGET_METRICS,
    TrainingDashboard,
    gce_filters,
    gke_filters,
    tpu_filters,
    vertex_filters,
    vertex_job_id,
)
from trainstack.infra.mocks import run_program


@pytest.mark.parametrize(
    ("overrides", "accelerator", "resource", "worker_field", "received", "sent"),
    [
        (
            {"target": "tpu", "resource_filter": 'resource.label.node_id="exp-42-tpu"'},
            "tpu.googleapis.com/accelerator/duty_cycle",
            "tpu_worker",
            "resource.label.worker_id",
            "tpu.googleapis.com/network/received_bytes_count",
            "tpu.googleapis.com/network/sent_bytes_count",
        ),
        (
            {
                "target": "gpu_cluster",
                "gpu_backend": "gke",
                "resource_filter": 'resource.label.cluster_name="exp-42"',
            },
            "kubernetes.io/node/accelerator/duty_cycle",
            "k8s_node",
            "resource.label.node_name",
            "kubernetes.io/node/network/received_bytes_count",
            "kubernetes.io/node/network/sent_bytes_count",
        ),
        (
            {
                "target": "gpu_cluster",
                "gpu_backend": "gce",
                "resource_filter": 'metadata.user_labels.stack="exp-42"',
            },
            "agent.googleapis.com/gpu/utilization",
            "gce_instance",
            "resource.label.instance_id",
            "compute.googleapis.com/instance/network/received_bytes_count",
            "compute.googleapis.com/instance/network/sent_bytes_count",
        ),
        (
            {},
            "ml.googleapis.com/training/accelerator/utilization",
            "cloudml_job",
            "resource.label.task_name",
            "ml.googleapis.com/training/network/received_bytes_count",
            "ml.googleapis.com/training/network/sent_bytes_count",
        ),
    ],
)
def test_dashboard_builtin_metrics_per_target(
    overrides: dict[str, Any],
    accelerator: str,
    resource: str,
    worker_field: str,
    received: str,
    sent: str,
) -> None:
    run = run_dashboard(**overrides)
    scope = {**ARGS, **overrides}["resource_filter"]
    acc = dashboard_widget(run, f"Accelerator utilization per worker ({accelerator})")["xyChart"]
    (data_set,) = acc["dataSets"]
    assert data_set["timeSeriesQuery"]["timeSeriesFilter"] == {
        "filter": f'metric.type="{accelerator}" AND resource.type="{resource}" AND ({scope})',
        "aggregation": {
            "alignmentPeriod": "60s",
            "perSeriesAligner": "ALIGN_MEAN",
            "crossSeriesReducer": "REDUCE_MEAN",
            "groupByFields": [worker_field],
        },
    }
    net = dashboard_widget(run, "Network bytes/s per worker (received, sent)")["xyChart"]
    assert net["yAxis"] == {"label": "By/s", "scale": "LINEAR"}
    assert [d["timeSeriesQuery"]["timeSeriesFilter"] for d in net["dataSets"]] == [
        {
            "filter": f'metric.type="{metric}" AND resource.type="{resource}" AND ({scope})',
            "aggregation": {
                "alignmentPeriod": "60s",
                "perSeriesAligner": "ALIGN_RATE",
                "crossSeriesReducer": "REDUCE_SUM",
                "groupByFields": [worker_field],
            },
        }
        for metric in (received, sent)
    ]
    assert validate_body("monitoring.v1", "Dashboard", dashboard_body(run)) == []


@pytest.mark.parametrize(
    ("overrides", "resource_type"),
    [
        ({"target": "tpu"}, "tpu_worker"),
        ({"target": "gpu_cluster", "gpu_backend": "gke"}, "k8s_container"),
        ({"target": "gpu_cluster", "gpu_backend": "gce"}, "gce_instance"),
        ({}, "ml_job"),
        ({"log_resource_type": "generic_task"}, "generic_task"),
    ],
)
def test_log_resource_type_per_target(overrides: dict[str, Any], resource_type: str) -> None:
    run = run_dashboard(**overrides)
    assert (
        run.named("exp-train-lines")
        .inputs["filter"]
        .startswith(f'resource.type="{resource_type}" AND ')
    )
    condition = run.named("exp-stall-alert").inputs["conditions"][0]["conditionAbsent"]
    assert condition["filter"].endswith(f' AND resource.type="{resource_type}"')


def test_fact_tables_cover_every_platform() -> None:
    assert (
        sorted(TARGET_METRICS)
        == sorted(LOG_RESOURCE_TYPES)
        == ["gce", "gke", "tpu", "tpu_gke", "vertex"]
    )
    for facts in TARGET_METRICS.values():
        for metric in (facts.accelerator, facts.received_bytes, facts.sent_bytes):
            assert metric.source, metric.metric_type


def test_unverified_metrics_are_named_on_the_dashboard() -> None:
    about = dashboard_widget(run_dashboard(target="gpu_cluster", gpu_backend="gke"), "About")[
        "text"
    ]
    assert about["format"] == "MARKDOWN"
    assert about["content"] == (
        "**exp-42** on `gpu_cluster` (gke): 4 workers; one series per worker (trainer `node` "
        "rank).\n\n"
        "Trainer lines (json payload): "
        '`resource.type="k8s_container" AND (resource.labels.job_id="123")`.\n'
        "Stall alert after 20 min without `train` lines.\n\n"
        "Built-in metrics not yet verified on a live project: "
        "`kubernetes.io/node/network/received_bytes_count`, "
        "`kubernetes.io/node/network/sent_bytes_count`."
    )


def _resolved(build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What `build` returns (Outputs included), resolved by a program run that calls it."""
    return run_program(build).outputs


def _output(value: str, as_output: bool) -> Any:
    return pulumi.Output.from_input(value) if as_output else value


JOB_NAME = "projects/p/locations/us-central1/customJobs/8812"


@pytest.mark.parametrize("as_output", [False, True])
def test_vertex_job_id(as_output: bool) -> None:
    outputs = _resolved(lambda: {"job_id": vertex_job_id(_output(JOB_NAME, as_output))})
    assert outputs == {"job_id": "8812"}


@pytest.mark.parametrize(
    ("build", "owned_id", "log_filter", "resource_filter"),
    [
        (
            vertex_filters,
            "8812",
            'resource.labels.job_id="8812"',
            'resource.label.job_id="8812"',
        ),
        (
            tpu_filters,
            "exp-42-tpu",
            'resource.labels.node_id="exp-42-tpu"',
            'resource.label.node_id="exp-42-tpu"',
        ),
        (
            gke_filters,
            "exp-42-a100",
            'resource.labels.cluster_name="exp-42-a100"',
            'resource.label.cluster_name="exp-42-a100"',
        ),
    ],
)
@pytest.mark.parametrize("as_output", [False, True])
def test_filters_of_an_owned_id(
    build: Any, owned_id: str, log_filter: str, resource_filter: str, as_output: bool
) -> None:
    def filters() -> dict[str, Any]:
        log, resource = build(_output(owned_id, as_output))
        assert isinstance(log, pulumi.Output) and isinstance(resource, pulumi.Output)
        return {"log": log, "resource": resource}

    assert _resolved(filters) == {"log": log_filter, "resource": resource_filter}


def test_vertex_filters_of_a_job_name() -> None:
    def filters() -> dict[str, Any]:
        log, resource = vertex_filters(vertex_job_id(pulumi.Output.from_input(JOB_NAME)))
        return {"log": log, "resource": resource}

    assert _resolved(filters) == {
        "log": 'resource.labels.job_id="8812"',
        "resource": 'resource.label.job_id="8812"',
    }


def test_gce_filters_are_plain_strings() -> None:
    assert gce_filters("exp-42") == (
        'labels."compute.googleapis.com/resource_name"=~"^exp-42-a100-"',
        'metadata.user_labels.stack="exp-42"',
    )


@pytest.mark.parametrize(
    ("overrides", "build", "owned_id", "heartbeat_filter", "accelerator_filter"),
    [
        (
            {"target": "vertex"},
            vertex_filters,
            "8812",
            'resource.type="ml_job" AND (resource.labels.job_id="8812") AND '
            'jsonPayload.event="train"',
            'metric.type="ml.googleapis.com/training/accelerator/utilization" AND '
            'resource.type="cloudml_job" AND (resource.label.job_id="8812")',
        ),
        (
            {"target": "tpu"},
            tpu_filters,
            "exp-42-tpu",
            'resource.type="tpu_worker" AND (resource.labels.node_id="exp-42-tpu") AND '
            'jsonPayload.event="train"',
            'metric.type="tpu.googleapis.com/accelerator/duty_cycle" AND '
            'resource.type="tpu_worker" AND (resource.label.node_id="exp-42-tpu")',
        ),
        (
            {"target": "gpu_cluster", "gpu_backend": "gke"},
            gke_filters,
            "exp-42-a100",
            'resource.type="k8s_container" AND (resource.labels.cluster_name="exp-42-a100") AND '
            'jsonPayload.event="train"',
            'metric.type="kubernetes.io/node/accelerator/duty_cycle" AND '
            'resource.type="k8s_node" AND (resource.label.cluster_name="exp-42-a100")',
        ),
        (
            {"target": "gpu_cluster", "gpu_backend": "gce"},
            gce_filters,
            "exp-42",
            'resource.type="gce_instance" AND '
            '(labels."compute.googleapis.com/resource_name"=~"^exp-42-a100-") AND '
            'jsonPayload.event="train"',
            'metric.type="agent.googleapis.com/gpu/utilization" AND '
            'resource.type="gce_instance" AND (metadata.user_labels.stack="exp-42")',
        ),
    ],
)
def test_dashboard_scoped_by_the_target_filters(
    overrides: dict[str, Any],
    build: Any,
    owned_id: str,
    heartbeat_filter: str,
    accelerator_filter: str,
) -> None:
    def program() -> None:
        log, resource = build(owned_id)
        args = {**ARGS, **overrides, "log_filter": log, "resource_filter": resource}
        TrainingDashboard("exp", args)  # type: ignore[arg-type]

    run = run_program(program)
    assert run.named("exp-train-lines").inputs["filter"] == heartbeat_filter
    accelerator = TARGET_METRICS[overrides.get("gpu_backend", overrides["target"])].accelerator
    chart = dashboard_widget(run, f"Accelerator utilization per worker ({accelerator.metric_type})")
    (data_set,) = chart["xyChart"]["dataSets"]
    assert data_set["timeSeriesQuery"]["timeSeriesFilter"]["filter"] == accelerator_filter

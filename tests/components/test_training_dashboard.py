"""TrainingDashboard under Pulumi mocks: exact metrics, dashboard body and stall alert."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pulumi
import pytest

from tests.components.training_dashboard_helpers import (
    ARGS,
    CHANNEL,
    DASHBOARD,
    GPU_ROLES,
    LABELS,
    METRIC,
    POLICY,
    USER,
    dashboard_tiles,
    dashboard_widget,
    run_dashboard,
)
from trainstack.components._discovery import normalize_numbers, validate_body
from trainstack.components.training_dashboard import (
    TOKEN,
    TrainingDashboard,
)
from trainstack.infra.mocks import ProgramRun, run_program
from trainstack.trainers.common.metrics import MetricsLogger


def test_children_types_names_parents() -> None:
    run = run_dashboard()
    # Registration order follows Output resolution, so compare as sets.
    assert {(r.type, r.name, r.parent) for r in run.resources} == {
        (TOKEN, "exp", None),
        *((METRIC, f"exp-{role}", "exp") for role in GPU_ROLES),
        (DASHBOARD, "exp-dashboard", "exp"),
        (POLICY, "exp-stall-alert", "exp"),
    }
    assert len(run.resources) == 11


def test_tpu_has_no_gpu_metric() -> None:
    run = run_dashboard(target="tpu")
    roles = sorted(r.name.removeprefix("exp-") for r in run.of_type(METRIC))
    assert roles == [role for role in GPU_ROLES if role != "gpu-util"]


def test_distribution_metric_exact_inputs() -> None:
    inputs = run_dashboard().named("exp-step-time").inputs
    assert inputs == {
        "project": "p",
        "name": "trainstack/exp-42/train/step_time_s",
        "description": (
            'trainstack exp-42: `step_time_s` of the trainers\' "train" log lines, per node and rank'
        ),
        "filter": (
            'resource.type="ml_job" AND (resource.labels.job_id="123") AND '
            'jsonPayload.event="train" AND jsonPayload.step_time_s:*'
        ),
        "valueExtractor": "EXTRACT(jsonPayload.step_time_s)",
        "labelExtractors": {
            "node": 'REGEXP_EXTRACT(jsonPayload.node, "^([0-9]+)")',
            "rank": 'REGEXP_EXTRACT(jsonPayload.rank, "^([0-9]+)")',
        },
        "metricDescriptor": {
            "metricKind": "DELTA",
            "valueType": "DISTRIBUTION",
            "unit": "s",
            "displayName": "Training step time (exp-42)",
            "labels": [
                {
                    "key": "node",
                    "valueType": "STRING",
                    "description": "Trainer node rank (one per worker)",
                },
                {
                    "key": "rank",
                    "valueType": "STRING",
                    "description": "Trainer global rank (one per process)",
                },
            ],
        },
        "bucketOptions": {
            "exponentialBuckets": {"scale": 0.001, "growthFactor": 1.4, "numFiniteBuckets": 40}
        },
    }


def test_heartbeat_counter_exact_inputs() -> None:
    inputs = run_dashboard().named("exp-train-lines").inputs
    assert inputs["name"] == "trainstack/exp-42/train/lines"
    assert inputs["filter"] == (
        'resource.type="ml_job" AND (resource.labels.job_id="123") AND jsonPayload.event="train"'
    )
    assert inputs["metricDescriptor"]["metricKind"] == "DELTA"
    assert inputs["metricDescriptor"]["valueType"] == "INT64"
    assert inputs["metricDescriptor"]["unit"] == "1"
    assert "valueExtractor" not in inputs and "bucketOptions" not in inputs
    assert sorted(inputs["labelExtractors"]) == ["node", "rank"]


@pytest.mark.parametrize(
    ("role", "event", "field", "unit", "buckets"),
    [
        ("samples-per-s", "train", "samples_per_s", "1/s", {"exponentialBuckets": {"scale": 1.0, "growthFactor": 1.5, "numFiniteBuckets": 40}}),
        ("tokens-per-s", "train", "tokens_per_s", "1/s", {"exponentialBuckets": {"scale": 10.0, "growthFactor": 1.5, "numFiniteBuckets": 40}}),
        ("mfu", "train", "mfu", "1", {"linearBuckets": {"offset": 0.0, "width": 0.02, "numFiniteBuckets": 50}}),
        ("data-wait", "train", "data_wait_s", "s", {"exponentialBuckets": {"scale": 0.0001, "growthFactor": 1.5, "numFiniteBuckets": 40}}),
        ("gpu-util", "train", "gpu_util_pct", "%", {"linearBuckets": {"offset": 0.0, "width": 2.0, "numFiniteBuckets": 50}}),
        ("checkpoint-stall", "checkpoint", "stall_s", "s", {"exponentialBuckets": {"scale": 0.01, "growthFactor": 1.5, "numFiniteBuckets": 40}}),
    ],
)  # fmt: skip
def test_value_metrics(
    role: str, event: str, field: str, unit: str, buckets: dict[str, Any]
) -> None:
    inputs = run_dashboard().named(f"exp-{role}").inputs
    assert inputs["name"] == f"trainstack/exp-42/{event}/{field}"
    assert inputs["filter"] == (
        f'resource.type="ml_job" AND (resource.labels.job_id="123") AND '
        f'jsonPayload.event="{event}" AND jsonPayload.{field}:*'
    )
    assert inputs["valueExtractor"] == f"EXTRACT(jsonPayload.{field})"
    assert inputs["metricDescriptor"]["unit"] == unit
    assert inputs["bucketOptions"] == buckets


def _trainer_lines() -> list[str]:
    """Lines exactly as the bundled trainers print them (every optional train field set)."""
    out = io.StringIO()
    logger = MetricsLogger(rank=3, node=1, worker=1, run_name="r", total_steps=20, stream=out)
    logger.log("start", 0, world_size=8)
    logger.log(
        "train",
        10,
        loss=0.5,
        lr=1e-05,
        step_time_s=0.25,
        samples_per_s=1024.0,
        data_wait_s=1.5e-05,
        tokens_per_s=262144.0,
        mfu=0.41,
        gpu_util_pct=97.0,
    )
    logger.log("checkpoint_begin", 10)
    logger.log("checkpoint", 10, stall_s=0.75, path="/c/step-10", write_s=None, reason=None)
    return out.getvalue().splitlines()


def _match(pattern: str, text: str, fn: Any = re.search) -> re.Match[str]:
    found = fn(pattern, text)
    assert found is not None, (pattern, text)
    return found


# What each metric records from `_trainer_lines()` (None: a counter of matching lines).
EXPECTED_VALUES: dict[str, tuple[str, float | None]] = {
    "step-time": ("train", 0.25),
    "samples-per-s": ("train", 1024.0),
    "tokens-per-s": ("train", 262144.0),
    "mfu": ("train", 0.41),
    "data-wait": ("train", 1.5e-05),
    "gpu-util": ("train", 97.0),
    "checkpoint-stall": ("checkpoint", 0.75),
    "train-lines": ("train", None),
}


WORKER_LABELS = {"node": "1", "rank": "3"}


def test_json_payload_metrics_read_real_trainer_lines() -> None:
    records = [json.loads(line) for line in _trainer_lines()]
    for metric in run_dashboard().of_type(METRIC):
        event, value = EXPECTED_VALUES[metric.name.removeprefix("exp-")]
        flt = metric.inputs["filter"]
        wanted = re.findall(r'jsonPayload\.event="([a-z_]+)"', flt)
        present = re.findall(r"jsonPayload\.([a-z_]+):\*", flt)
        matching = [r for r in records if [r["event"]] == wanted and all(f in r for f in present)]
        assert [r["event"] for r in matching] == [event], metric.name
        if value is None:
            assert "valueExtractor" not in metric.inputs
        else:
            extractor = metric.inputs["valueExtractor"]
            field = _match(r"EXTRACT\(jsonPayload\.([a-z_]+)\)", extractor, re.fullmatch)
            assert matching[0][field.group(1)] == value, metric.name
        for key, expr in metric.inputs["labelExtractors"].items():
            found = _match(r'REGEXP_EXTRACT\(jsonPayload\.(\w+), "(.*)"\)', expr, re.fullmatch)
            source, regex = found.groups()
            assert _match(regex, str(matching[0][source])).group(1) == WORKER_LABELS[key]


def test_text_payload_metrics_read_real_prefixed_trainer_lines() -> None:
    # As an agent forwarding a startup script's prefixed output would: in textPayload.
    lines = [f"[trainstack slice=exp-42-tpu worker=0] {line}" for line in _trainer_lines()]
    run = run_dashboard(target="tpu", payload="text")
    for metric in run.of_type(METRIC):
        role = metric.name.removeprefix("exp-")
        event, value = EXPECTED_VALUES[role]
        flt = metric.inputs["filter"]
        assert "jsonPayload" not in flt
        patterns = re.findall(r'textPayload=~"([^"]*)"', flt)
        matching = [line for line in lines if all(re.search(p, line) for p in patterns)]
        assert [json.loads(line.split("] ", 1)[1])["event"] for line in matching] == [event], role
        if value is None:
            assert "valueExtractor" not in metric.inputs
        else:
            extractor = metric.inputs["valueExtractor"]
            regex = _match(r'REGEXP_EXTRACT\(textPayload, "(.*)"\)', extractor, re.fullmatch)
            assert float(_match(regex.group(1), matching[0]).group(1)) == value, role
        for key, expr in metric.inputs["labelExtractors"].items():
            regex = _match(r'REGEXP_EXTRACT\(textPayload, "(.*)"\)', expr, re.fullmatch)
            assert _match(regex.group(1), matching[0]).group(1) == WORKER_LABELS[key]


def test_tpu_defaults_to_json_payload_and_text_stays_available() -> None:
    # The node launcher on the TPU VM writes the trainer's JSON lines as jsonPayload.
    inputs = run_dashboard(target="tpu").named("exp-step-time").inputs
    assert inputs["filter"] == (
        'resource.type="tpu_worker" AND (resource.labels.job_id="123") AND '
        'jsonPayload.event="train" AND jsonPayload.step_time_s:*'
    )
    assert inputs["valueExtractor"] == "EXTRACT(jsonPayload.step_time_s)"
    assert inputs["labelExtractors"] == {
        "node": 'REGEXP_EXTRACT(jsonPayload.node, "^([0-9]+)")',
        "rank": 'REGEXP_EXTRACT(jsonPayload.rank, "^([0-9]+)")',
    }
    text_mode = run_dashboard(target="tpu", payload="text").named("exp-step-time").inputs
    assert text_mode["filter"] == (
        'resource.type="tpu_worker" AND (resource.labels.job_id="123") AND '
        'textPayload=~"[^a-z_]event[^a-z_]: [^a-z_]train[^a-z_]" AND '
        'textPayload=~"[^a-z_]step_time_s[^a-z_]: "'
    )
    assert text_mode["valueExtractor"] == (
        'REGEXP_EXTRACT(textPayload, "[^a-z_]step_time_s[^a-z_]: ([-+.0-9eE]+)")'
    )
    assert text_mode["labelExtractors"] == {
        "node": 'REGEXP_EXTRACT(textPayload, "[^a-z_]node[^a-z_]: ([0-9]+)")',
        "rank": 'REGEXP_EXTRACT(textPayload, "[^a-z_]rank[^a-z_]: ([0-9]+)")',
    }


def test_metrics_are_valid_logging_v2_bodies() -> None:
    for metric in run_dashboard().of_type(METRIC):
        body = {k: v for k, v in metric.inputs.items() if k != "project"}
        body = normalize_numbers("logging.v2", "LogMetric", body)
        assert validate_body("logging.v2", "LogMetric", body) == [], metric.name


def test_stall_alert_exact_inputs() -> None:
    inputs = run_dashboard().named("exp-stall-alert").inputs
    flt = f'metric.type="{USER}/train/lines" AND resource.type="ml_job"'
    per_worker = {
        "perSeriesAligner": "ALIGN_SUM",
        "crossSeriesReducer": "REDUCE_SUM",
        "groupByFields": ["metric.label.node"],
    }
    assert inputs["conditions"] == [
        {
            "displayName": "A worker wrote no train log lines for 20 min",
            "conditionAbsent": {
                "filter": flt,
                "duration": "1200s",
                "aggregations": [{**per_worker, "alignmentPeriod": "60s"}],
                "trigger": {"count": 1},
            },
        },
        {
            "displayName": "Fewer than 4 workers wrote train log lines in 20 min",
            "conditionThreshold": {
                "filter": flt,
                "aggregations": [
                    {**per_worker, "alignmentPeriod": "1200s"},
                    {
                        "alignmentPeriod": "1200s",
                        "perSeriesAligner": "ALIGN_MEAN",
                        "crossSeriesReducer": "REDUCE_COUNT",
                    },
                ],
                "comparison": "COMPARISON_LT",
                "thresholdValue": 4,
                "duration": "0s",
                "evaluationMissingData": "EVALUATION_MISSING_DATA_INACTIVE",
                "trigger": {"count": 1},
            },
        },
    ]
    rest = {k: v for k, v in inputs.items() if k not in ("conditions", "documentation")}
    assert rest == {
        "project": "p",
        "displayName": "trainstack exp-42: training stalled",
        "combiner": "OR",
        "alertStrategy": {"autoClose": "86400s"},
        "notificationChannels": [CHANNEL],
        "severity": "ERROR",
        "enabled": True,
        "userLabels": LABELS,
    }
    doc = inputs["documentation"]
    assert doc["mimeType"] == "text/markdown"
    assert doc["subject"] == "trainstack exp-42: training stalled"
    assert doc["content"].startswith(
        'Training of **exp-42** (vertex) stalled: a worker wrote no `"event": "train"` log '
        "line for 20 minutes, or fewer than 4 workers did."
    )


def test_stall_alert_is_a_valid_monitoring_v3_body() -> None:
    inputs = run_dashboard().named("exp-stall-alert").inputs
    body = normalize_numbers(
        "monitoring.v3", "AlertPolicy", {k: v for k, v in inputs.items() if k != "project"}
    )
    assert validate_body("monitoring.v3", "AlertPolicy", body) == []


def test_stall_alert_options() -> None:
    inputs = (
        run_dashboard(notification_channels=None, alert_enabled=False, stall_minutes=None)
        .named("exp-stall-alert")
        .inputs
    )
    assert inputs["notificationChannels"] == []
    assert inputs["enabled"] is False
    assert inputs["conditions"][0]["conditionAbsent"]["duration"] == "900s"  # default 15 min


def test_dashboard_json_is_valid_sorted_and_labelled() -> None:
    run = run_dashboard()
    text = run.named("exp-dashboard").inputs["dashboardJson"]
    body = json.loads(text)
    assert text == json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert validate_body("monitoring.v1", "Dashboard", body) == []
    assert body["displayName"] == "trainstack exp-42: training"
    assert body["labels"] == LABELS
    assert body["mosaicLayout"]["columns"] == 12
    assert run.named("exp-dashboard").inputs["project"] == "p"


def test_dashboard_layout() -> None:
    tiles = dashboard_tiles(run_dashboard())
    assert [
        (t["widget"]["title"], t["xPos"], t["yPos"], t["width"], t["height"]) for t in tiles
    ] == [
        ("About", 0, 0, 8, 3),
        ("Workers writing train lines (last 20 min)", 8, 0, 4, 3),
        ("Step time per worker (p50, s)", 0, 3, 6, 4),
        ("Samples/s per worker (p50)", 6, 3, 6, 4),
        ("Tokens/s per worker (p50, language models)", 0, 7, 6, 4),
        ("MFU per worker (p50, GPUs with a known peak)", 6, 7, 6, 4),
        ("Data-loader wait per step per worker (p50, s)", 0, 11, 6, 4),
        ("GPU utilization from the trainer (NVML, p50 %)", 6, 11, 6, 4),
        ("Checkpoint stall per worker (max, s)", 0, 15, 6, 4),
        ("Train log lines per worker (per minute)", 6, 15, 6, 4),
        (
            "Accelerator utilization per worker (ml.googleapis.com/training/accelerator/utilization)",
            0,
            19,
            6,
            4,
        ),
        ("Network bytes/s per worker (received, sent)", 6, 19, 6, 4),
    ]


def test_dashboard_logs_metric_charts_are_per_worker() -> None:
    run = run_dashboard()
    step = dashboard_widget(run, "Step time per worker (p50, s)")["xyChart"]
    assert step["dataSets"] == [
        {
            "plotType": "LINE",
            "targetAxis": "Y1",
            "minAlignmentPeriod": "60s",
            "timeSeriesQuery": {
                "timeSeriesFilter": {
                    "filter": f'metric.type="{USER}/train/step_time_s"',
                    "aggregation": {
                        "alignmentPeriod": "60s",
                        "perSeriesAligner": "ALIGN_PERCENTILE_50",
                        "crossSeriesReducer": "REDUCE_MEAN",
                        "groupByFields": ["metric.label.node"],
                    },
                }
            },
        }
    ]
    assert step["yAxis"] == {"label": "s", "scale": "LINEAR"}
    stall = dashboard_widget(run, "Checkpoint stall per worker (max, s)")["xyChart"]["dataSets"][0]
    query = stall["timeSeriesQuery"]["timeSeriesFilter"]
    assert query["filter"] == f'metric.type="{USER}/checkpoint/stall_s"'
    assert query["aggregation"]["perSeriesAligner"] == "ALIGN_PERCENTILE_99"
    assert query["aggregation"]["crossSeriesReducer"] == "REDUCE_MAX"


def test_dashboard_workers_scorecard() -> None:
    card = dashboard_widget(run_dashboard(), "Workers writing train lines (last 20 min)")[
        "scorecard"
    ]
    assert card == {
        "timeSeriesQuery": {
            "timeSeriesFilter": {
                "filter": f'metric.type="{USER}/train/lines"',
                "aggregation": {
                    "alignmentPeriod": "1200s",
                    "perSeriesAligner": "ALIGN_SUM",
                    "crossSeriesReducer": "REDUCE_SUM",
                    "groupByFields": ["metric.label.node"],
                },
                "secondaryAggregation": {
                    "alignmentPeriod": "1200s",
                    "perSeriesAligner": "ALIGN_MEAN",
                    "crossSeriesReducer": "REDUCE_COUNT",
                },
            }
        },
        "sparkChartView": {"sparkChartType": "SPARK_LINE"},
        "thresholds": [
            {"label": "fewer than 4 workers", "value": 4.0, "direction": "BELOW", "color": "RED"}
        ],
    }


def test_outputs() -> None:
    outputs = run_dashboard().outputs
    assert outputs["dashboard_url"] == (
        "https://console.cloud.google.com/monitoring/dashboards/custom/exp-dashboard-id?project=p"
    )
    assert outputs["metric_types"] == {
        "step-time": f"{USER}/train/step_time_s",
        "samples-per-s": f"{USER}/train/samples_per_s",
        "tokens-per-s": f"{USER}/train/tokens_per_s",
        "mfu": f"{USER}/train/mfu",
        "data-wait": f"{USER}/train/data_wait_s",
        "gpu-util": f"{USER}/train/gpu_util_pct",
        "checkpoint-stall": f"{USER}/checkpoint/stall_s",
        "train-lines": f"{USER}/train/lines",
    }
    assert json.loads(outputs["dashboard_json"])["displayName"] == "trainstack exp-42: training"


def test_dashboard_and_alert_wait_for_the_metrics() -> None:
    run = run_dashboard()
    metric_urns = {r.urn for r in run.of_type(METRIC)}
    for name in ("exp-dashboard", "exp-stall-alert"):
        assert metric_urns <= set(run.named(name).dependencies), name


def _inputs(run: ProgramRun) -> list[tuple[str, str, str]]:
    return sorted((r.type, r.name, json.dumps(r.inputs, sort_keys=True)) for r in run.resources)


def test_same_program_registers_identical_inputs() -> None:
    assert _inputs(run_dashboard()) == _inputs(run_dashboard())


def test_filters_and_labels_may_be_outputs() -> None:
    def program() -> None:
        args = {
            **ARGS,
            "log_filter": pulumi.Output.from_input("123").apply(
                lambda i: f'resource.labels.job_id="{i}"'
            ),
            "resource_filter": pulumi.Output.from_input('resource.label.job_id="123"'),
            "labels": pulumi.Output.from_input({"team": "ml"}),
        }
        TrainingDashboard("exp", args)  # type: ignore[arg-type]

    assert _inputs(run_program(program)) == _inputs(run_dashboard())


BAD_ARGS = [
    (
        {"deployment_name": "exp/42"},
        "deployment_name must be 1-64 of A-Z, a-z, 0-9, '_', '.', '-' (it is part of every "
        "metric id), got 'exp/42'",
    ),
    (
        {"target": "local"},
        "target 'local' needs no TrainingDashboard: local runs print their JSON lines to the "
        "terminal and write nothing to Cloud Logging; supported targets: tpu, gpu_cluster, vertex",
    ),
    ({"target": "gke"}, "target must be one of tpu, gpu_cluster, vertex, got 'gke'"),
    (
        {"target": "gpu_cluster"},
        "gpu_backend is required with target 'gpu_cluster' (one of gke, gce)",
    ),
    (
        {"target": "gpu_cluster", "gpu_backend": "slurm"},
        "gpu_backend must be one of gke, gce, got 'slurm'",
    ),
    (
        {"gpu_backend": "gke"},
        "gpu_backend applies only to target 'tpu' or 'gpu_cluster', got 'gke' with target 'vertex'",
    ),
    ({"worker_count": 0}, "worker_count must be an integer >= 1, got 0"),
    (
        {"worker_count": True},
        "TrainingDashboard.worker_count: true is not an integer; valid: an integer",
    ),
    ({"payload": "proto"}, "payload must be one of json, text, got 'proto'"),
    ({"stall_minutes": 1}, "stall_minutes must be an integer between 2 and 720, got 1"),
    ({"stall_minutes": 721}, "stall_minutes must be an integer between 2 and 720, got 721"),
    (
        {"log_resource_type": "ML JOB"},
        "log_resource_type must be a monitored resource type such as 'k8s_container', got 'ML JOB'",
    ),
    ({"log_filter": "  "}, "log_filter must be a non-empty filter string, got '  '"),
    (
        {"log_filter": 'resource.type="ml_job"'},
        "log_filter must not set resource.type (TrainingDashboard sets it), got "
        "'resource.type=\"ml_job\"'; use log_resource_type",
    ),
    (
        {"log_filter": 'jsonPayload.event="train"'},
        "log_filter must not set jsonPayload.event (TrainingDashboard sets it), got "
        "'jsonPayload.event=\"train\"'",
    ),
    (
        {"resource_filter": 'metric.type="x"'},
        "resource_filter must not set metric.type (TrainingDashboard sets it), got "
        "'metric.type=\"x\"'",
    ),
    (
        {"resource_filter": "x" * 10_001},
        "resource_filter is 10001 characters; at most 10000 allowed",
    ),
    (
        {"notification_channels": ["123"]},
        "notification_channels: '123' is not a channel name of the form "
        "'projects/<project>/notificationChannels/<id>'",
    ),
    (
        {"labels": {"component": "x"}},
        "labels: 'component' is reserved by trainstack; valid: a key other than component, "
        "managed-by",
    ),
]


def _rejected(overrides: dict[str, Any], error: type[Exception]) -> list[str]:
    """Messages of `error` raised building the component; asserts nothing was registered."""
    messages: list[str] = []

    def program() -> None:
        try:
            TrainingDashboard("exp", {**ARGS, **overrides})  # type: ignore[typeddict-item]
        except error as e:
            messages.append(str(e))

    assert run_program(program).resources == []
    return messages


@pytest.mark.parametrize(("overrides", "message"), BAD_ARGS)
def test_bad_args_raise_before_anything_is_registered(
    overrides: dict[str, Any], message: str
) -> None:
    prefixed = (
        message if message.startswith("TrainingDashboard.") else f"TrainingDashboard.{message}"
    )
    assert _rejected(overrides, ValueError) == [prefixed]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"notification_channels": CHANNEL},
            f"TrainingDashboard.notification_channels: {CHANNEL!r} is not a list; valid: a list",
        ),
        (
            {"alert_enabled": "yes"},
            "TrainingDashboard.alert_enabled: 'yes' is not a boolean; valid: true, false",
        ),
    ],
)
def test_wrong_types_name_the_expected_type(overrides: dict[str, Any], message: str) -> None:
    # trainstack.components._args checks the annotation first, so these are ValueErrors (ArgsError).
    assert _rejected(overrides, ValueError) == [message]

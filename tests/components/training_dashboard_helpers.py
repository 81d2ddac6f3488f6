"""Shared by the TrainingDashboard tests: the arguments they vary and the program that builds
the component under Pulumi mocks."""

from __future__ import annotations

import json
from typing import Any

from trainstack.components.training_dashboard import TrainingDashboard
from trainstack.infra.mocks import ProgramRun, run_program

METRIC = "gcp:logging/metric:Metric"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
LABELS = {"component": "training-dashboard", "managed-by": "trainstack", "team": "ml"}
USER = "logging.googleapis.com/user/trainstack/exp-42"
CHANNEL = "projects/p/notificationChannels/123"

ARGS: dict[str, Any] = {
    "project": "p",
    "deployment_name": "exp-42",
    "target": "vertex",
    "worker_count": 4,
    "log_filter": 'resource.labels.job_id="123"',
    "resource_filter": 'resource.label.job_id="123"',
    "stall_minutes": 20,
    "notification_channels": [CHANNEL],
    "labels": {"team": "ml"},
}
GPU_ROLES = [
    "checkpoint-stall",
    "data-wait",
    "gpu-util",
    "mfu",
    "samples-per-s",
    "step-time",
    "tokens-per-s",
    "train-lines",
]


def run_dashboard(**overrides: Any) -> ProgramRun:
    args = {**ARGS, **overrides}
    args = {k: v for k, v in args.items() if v is not None}

    def program() -> dict[str, Any]:
        board = TrainingDashboard("exp", args)  # type: ignore[arg-type]
        return {
            "dashboard_url": board.dashboard_url,
            "metric_types": board.metric_types,
            "dashboard_json": board.dashboard_json,
        }

    return run_program(program)


def dashboard_body(run: ProgramRun) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(run.named("exp-dashboard").inputs["dashboardJson"])
    return body


def dashboard_tiles(run: ProgramRun) -> list[dict[str, Any]]:
    tiles: list[dict[str, Any]] = dashboard_body(run)["mosaicLayout"]["tiles"]
    return tiles


def dashboard_widget(run: ProgramRun, title: str) -> dict[str, Any]:
    found = [t["widget"] for t in dashboard_tiles(run) if t["widget"]["title"] == title]
    assert len(found) == 1, title
    return found[0]

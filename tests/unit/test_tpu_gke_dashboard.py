"""Issue 31 trial M6: the dashboard and stall alert of TPU slices on GKE name the stack's own
target and backend (`tpu`, `gke`) and count slices x hosts; they said `gpu_cluster` and
charted a GPU metric."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.components.test_training_dashboard import _rejected
from tests.components.training_dashboard_helpers import dashboard_widget, run_dashboard
from trainstack.infra.plan import build_plan, load_stack

STACK = "dev-tpu-v6e-gke"


def _resources(plan: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"] == type_]


def test_the_tpu_gke_stack_dashboard_and_alert_say_tpu_on_gke() -> None:
    _, config = load_stack(STACK, None)
    plan = build_plan(STACK, config)
    (dashboard,) = _resources(plan, "gcp:monitoring/dashboard:Dashboard")
    body = json.loads(dashboard["inputs"]["dashboardJson"])
    tiles = body["mosaicLayout"]["tiles"]
    about = [t["widget"] for t in tiles if t["widget"]["title"] == "About"]
    assert about[0]["text"]["content"].splitlines()[0] == (
        f"**{STACK}** on `tpu` (gke): 2 slices x 4 hosts; one series per host (trainer `node` "
        "rank)."
    )
    (alert,) = _resources(plan, "gcp:monitoring/alertPolicy:AlertPolicy")
    assert alert["inputs"]["documentation"]["content"].split("\n\n")[0] == (
        f'Training of **{STACK}** (tpu, gke) stalled: a host wrote no `"event": "train"` '
        "log line for 15 minutes, or fewer than 8 hosts did."
    )
    # TPU hosts write no GPU utilization: no GPU-only log metric.
    metrics = sorted(r["name"] for r in _resources(plan, "gcp:logging/metric:Metric"))
    assert metrics == [
        f"{STACK}-monitoring-{role}"
        for role in (
            "checkpoint-stall", "data-wait", "mfu", "samples-per-s", "step-time",
            "tokens-per-s", "train-lines",
        )
    ]  # fmt: skip


def test_target_tpu_with_backend_gke_charts_gke_nodes_by_host() -> None:
    run = run_dashboard(target="tpu", backend="gke", worker_count=8, slices=2)
    about = dashboard_widget(run, "About")["text"]["content"]
    assert about.splitlines()[0] == (
        "**exp-42** on `tpu` (gke): 2 slices x 4 hosts; one series per host (trainer `node` rank)."
    )
    filters = run.named("exp-train-lines").inputs["filter"]
    assert filters.startswith('resource.type="k8s_container" AND ')


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"target": "tpu", "backend": "slurm"},
            "backend must be one of tpu_vm, gke, got 'slurm'",
        ),
        (
            {"target": "tpu", "backend": "gke", "gpu_backend": "gke"},
            "give backend or gpu_backend (its older name), not both",
        ),
        (
            {"target": "tpu", "backend": "gke", "worker_count": 8, "slices": 3},
            "slices must be an integer >= 1 that divides worker_count (8), got 3",
        ),
    ],
)
def test_bad_backend_or_slices_raise(overrides: dict[str, Any], message: str) -> None:
    assert _rejected(overrides, ValueError) == [f"TrainingDashboard.{message}"]

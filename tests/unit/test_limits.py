"""`trainstack:limits`: the cost cap fails plan and preview alike, and the run cap reaches
each target's own stop (or the plan says it does not)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import trainstack.infra.targets.gpu_cluster
import trainstack.infra.targets.tpu
from tests import REPO_ROOT
from trainstack.components.run_supervisor import STOP_GRACE_S
from trainstack.infra.cli import app
from trainstack.infra.compose import main_program
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.estimate import limit_problems, limits_plan
from trainstack.infra.mocks import run_program
from trainstack.infra.plan import build_plan, read_stack_file, stack_file
from trainstack.infra.targets.vertex_config import vertex_timeout_s

VERTEX_OVER = (
    "limits.max_hourly_usd: the stack's estimated $143.65/hour is above the limit of "
    "$60/hour; valid: a stack estimated at or below $60/hour, or limits.max_hourly_usd >= 143.65"
)
TPU_ENFORCED = (
    "enforced by the TPU startup script: it stops the trainer 1800s after the run's first "
    "start (TpuPodSlice max_run_seconds); the Cloud TPU API has no run "
    "limit, so the supervisor then deletes the slice"
)


def _stack(name: str, **limits: Any) -> dict[str, Any]:
    config = read_stack_file(stack_file(name))[1]
    return {**config, "trainstack:limits": limits}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"max_hourly_usd": -1}, "limits.max_hourly_usd: -1 is too small; valid: > 0.0"),
        ({"max_run_hours": 0}, "limits.max_run_hours: 0 is too small; valid: > 0.0"),
        ({"max_hourly_usd": "x"}, "limits.max_hourly_usd: 'x' is not a number; valid: a number"),
        (
            {"cap": 1},
            "limits.cap: unknown key; valid: max_hourly_usd, max_run_hours, max_total_usd",
        ),
        (
            {"max_total_usd": 0},
            "limits.max_total_usd: 0 is not allowed; valid: a number of US dollars above 0",
        ),
        (
            {"max_total_usd": "x"},
            "limits.max_total_usd: 'x' is not allowed; valid: a number of US dollars above 0",
        ),
        (
            {"max_total_usd": 100},
            "limits.max_total_usd: not enforced on a local target (no supervisor stops its "
            "compute); valid: a tpu or gpu_cluster target, or no limits.max_total_usd",
        ),
    ],
)
def test_bad_limits_name_their_key(limits: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config(_stack("local", **limits))
    assert info.value.errors == [expected]


def test_the_spend_cap_is_refused_where_no_supervisor_enforces_it() -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config(_stack("prod-vertex-rs", max_total_usd=500))
    assert info.value.errors == [
        "limits.max_total_usd: not enforced on a vertex target (no supervisor stops its "
        "compute); valid: a tpu or gpu_cluster target, or no limits.max_total_usd"
    ]


GCE_CAP = (
    "the supervisor counts the compute's spend at $117.55/hour (the catalog's list-price "
    "estimate) from its first check on, across restarts and recoveries; at $500.00 it asks "
    "the trainer to save and stop, then stops the compute. It can go past the cap by up to 7 "
    "minutes of compute (a check every 2 minutes, 5 minutes to save), about $13.71, plus the "
    "deletion"
)


def test_the_plan_shows_the_spend_cap_and_how_it_is_enforced() -> None:
    plan = build_plan("prod-a100-gce", _stack("prod-a100-gce", max_total_usd=500))
    assert plan["limits"] == {
        "max_hourly_usd": None,
        "max_run_hours": None,
        "max_total_usd": 500,
        "spend_cap": GCE_CAP,
    }
    assert f"limits.max_total_usd: {GCE_CAP}" in plan["notes"]


def test_the_plan_says_when_the_run_limit_stops_the_run_before_the_cap() -> None:
    plan = build_plan("prod-a100-gce", _stack("prod-a100-gce", max_total_usd=500, max_run_hours=2))
    assert plan["limits"]["spend_cap"] == (
        f"{GCE_CAP}; with limits.max_run_hours 2 the run stops at about $235.10, before the cap"
    )
    assert plan["limits"]["run_limit"] == (
        "the VMs' startup script stops the trainer 7200s after the run's first start "
        "(A100Cluster max_run_seconds); then the supervisor deletes the instance group's VMs"
    )


def test_the_plans_stop_grace_is_the_supervisors() -> None:
    # The bundle's main.py cannot import the component; its constant is read from source.
    tree = ast.parse((REPO_ROOT / "components/supervisor/main.py").read_text())
    [grace] = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["STOP_GRACE_S"]
        and isinstance(node.value, ast.Constant)
    ]
    assert grace == STOP_GRACE_S == 300


def test_a_stack_over_its_hourly_limit_fails_plan_with_both_numbers(tmp_path: Path) -> None:
    config = _stack("prod-vertex-rs", max_hourly_usd=60)
    with pytest.raises(ConfigError) as info:
        build_plan("prod-vertex-rs", config)
    assert info.value.errors == [VERTEX_OVER]
    path = tmp_path / "Pulumi.capped.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2
    assert result.output == f"error: stack 'capped': {VERTEX_OVER}\n"


def test_the_pulumi_program_fails_preview_with_the_same_message() -> None:
    with pytest.raises(ConfigError) as info:
        run_program(main_program, config=_stack("prod-vertex-rs", max_hourly_usd=60))
    assert info.value.errors == [VERTEX_OVER]


def test_a_stack_within_its_limit_plans_and_says_so() -> None:
    plan = build_plan("prod-vertex-rs", _stack("prod-vertex-rs", max_hourly_usd=143.65))
    assert plan["limits"] == {"max_hourly_usd": 143.65, "max_run_hours": None}
    assert plan["notes"][-1] == (
        "limits.max_hourly_usd: the estimated $143.65/hour is within $143.65/hour"
    )
    assert limit_problems(load_stack_config(_stack("local", max_hourly_usd=0.01))) == []


def _vertex_timeout(plan: dict[str, Any]) -> Any:
    (job,) = [r for r in plan["resources"] if r["type"] == "pulumi-python:dynamic/vertex:CustomJob"]
    return job["inputs"]["body"]["jobSpec"]["scheduling"].get("timeout")


@pytest.mark.parametrize(
    ("timeout_s", "hours", "seconds"), [(None, 72, 259200), (7200, 72, 7200), (86400, 1.5, 5400)]
)
def test_vertex_gets_the_smaller_of_its_timeout_and_the_run_limit(
    timeout_s: int | None, hours: float, seconds: int
) -> None:
    config = _stack("prod-vertex-rs", max_run_hours=hours)
    if timeout_s is not None:
        config["trainstack:vertex"] = {**config["trainstack:vertex"], "timeout_s": timeout_s}
    plan = build_plan("prod-vertex-rs", config)
    assert _vertex_timeout(plan) == f"{seconds}s"
    assert plan["limits"] == {
        "max_hourly_usd": None,
        "max_run_hours": hours,
        "max_run_seconds": hours * 3600,
        "run_limit_enforced": True,
        "run_limit": (
            f"Vertex job scheduling.timeout {seconds}s (the smaller of vertex.timeout_s and "
            "limits.max_run_hours)"
        ),
    }
    assert plan["notes"][-1] == f"limits.max_run_hours: {plan['limits']['run_limit']}"


def test_vertex_timeout_alone_is_kept() -> None:
    vx = load_stack_config(_stack("prod-vertex-rs")).vertex
    assert vx is not None
    assert vertex_timeout_s(vx, None) is None
    assert vertex_timeout_s(vx.model_copy(update={"timeout_s": 600}), None) == 600
    assert vertex_timeout_s(vx.model_copy(update={"timeout_s": 600}), 60) == 60


@pytest.mark.parametrize(
    ("stack", "run_limit"),
    [
        (
            "dev-a100-gke",
            "GKE Job activeDeadlineSeconds 259200; then the supervisor sets the GPU node pool "
            "to 0 nodes",
        ),
        (
            "prod-a100-gce",
            "the VMs' startup script stops the trainer 259200s after the run's first start "
            "(A100Cluster max_run_seconds); then the supervisor deletes the instance group's VMs",
        ),
    ],
)
def test_gpu_clusters_get_max_run_seconds(
    stack: str, run_limit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def recorder(name: str, args: dict[str, Any], opts: Any = None) -> None:
        seen.append(args)
        raise Stop

    monkeypatch.setattr(trainstack.infra.targets.gpu_cluster, "A100Cluster", recorder)
    config = _stack(stack, max_run_hours=72)
    with pytest.raises(Stop):
        run_program(main_program, config=config, stack=stack)
    assert seen[0]["max_run_seconds"] == 259200
    assert limits_plan(load_stack_config(config)) == {
        "max_hourly_usd": None,
        "max_run_hours": 72,
        "max_run_seconds": 259200,
        "run_limit_enforced": True,
        "run_limit": run_limit,
    }


def test_without_limits_no_max_run_seconds_is_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def recorder(name: str, args: dict[str, Any], opts: Any = None) -> None:
        seen.append(args)
        raise Stop

    monkeypatch.setattr(trainstack.infra.targets.gpu_cluster, "A100Cluster", recorder)
    with pytest.raises(Stop):
        run_program(main_program, config=_stack("dev-a100-gke"), stack="dev-a100-gke")
    assert "max_run_seconds" not in seen[0]


def _tpu_slice_args(monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def recorder(name: str, args: dict[str, Any], opts: Any = None) -> None:
        seen.append(args)
        raise Stop

    monkeypatch.setattr(trainstack.infra.targets.tpu, "TpuPodSlice", recorder)
    with pytest.raises(Stop):
        run_program(main_program, config=config, stack="dev-tpu-v5e")
    return seen[0]


def test_tpu_slices_get_max_run_seconds_and_the_plan_says_the_script_enforces_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _stack("dev-tpu-v5e", max_run_hours=0.5)
    plan = build_plan("dev-tpu-v5e", config)
    [script] = [
        r["inputs"]["metadata"]["startup-script"]
        for r in plan["resources"]
        if r["type"] == "gcp:tpu/v2Vm:V2Vm"
    ]
    assert "\nreadonly TS_MAX_RUN_SECONDS=1800\n" in script
    assert _tpu_slice_args(monkeypatch, config)["max_run_seconds"] == 1800
    assert plan["limits"] == {
        "max_hourly_usd": None,
        "max_run_hours": 0.5,
        "max_run_seconds": 1800,
        "run_limit_enforced": True,
        "run_limit": TPU_ENFORCED,
    }
    assert plan["notes"][-1] == f"limits.max_run_hours: {TPU_ENFORCED}"


def test_tpu_slices_without_limits_get_no_max_run_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert "max_run_seconds" not in _tpu_slice_args(monkeypatch, _stack("dev-tpu-v5e"))


def test_local_plans_say_the_run_limit_is_not_enforced() -> None:
    run_limit = "not enforced: the local runner ignores it; stop it with Ctrl-C or SIGTERM"
    plan = build_plan("local", _stack("local", max_run_hours=0.5))
    assert plan["limits"] == {
        "max_hourly_usd": None,
        "max_run_hours": 0.5,
        "max_run_seconds": 1800,
        "run_limit_enforced": False,
        "run_limit": run_limit,
    }
    assert plan["notes"][-1] == f"limits.max_run_hours: {run_limit}"


def test_stacks_without_limits_plan_no_limits_entry() -> None:
    assert "limits" not in build_plan("local", _stack("local") | {"trainstack:limits": {}})


def _unbounded(target: str) -> str:
    return (
        f"{target}: no limits.max_run_hours or limits.max_total_usd, so only the run's end "
        "stops this run: the run supervisor stops the compute when rank 0 finishes, when a "
        f"failure is final (an exit {target} never retries, a setup stage's last attempt) or "
        "when no node has reported for 45 minutes; a trainer that hangs while its node still "
        "reports, or nodes that keep restarting (each start reports again), bill until "
        "`pulumi destroy`; set limits.max_run_hours (a bound on the run's time) or "
        "limits.max_total_usd (a cap on its spend)"
    )


def _unbounded_notes(plan: dict[str, Any]) -> list[str]:
    return [n for n in plan["notes"] if "no limits.max_run_hours or" in n]


@pytest.mark.parametrize(
    ("stack", "target"),
    [("dev-tpu-v5e", "tpu"), ("dev-a100-gke", "gke"), ("prod-a100-gce", "gce")],
)
def test_a_supervised_run_without_limits_is_noted_as_bounded_only_by_its_end(
    stack: str, target: str
) -> None:
    # A heartbeat proves the launcher alive, not training progressing, and every restart
    # writes one: without either limit nothing stops a hung or restart-looping run.
    assert _unbounded_notes(build_plan(stack, _stack(stack))) == [_unbounded(target)]
    for limits in ({"max_run_hours": 24}, {"max_total_usd": 500}):
        assert _unbounded_notes(build_plan(stack, _stack(stack, **limits))) == []


@pytest.mark.parametrize("stack", ["prod-vertex-rs", "local"])
def test_targets_without_a_supervisor_get_no_unbounded_run_note(stack: str) -> None:
    assert _unbounded_notes(build_plan(stack, _stack(stack))) == []

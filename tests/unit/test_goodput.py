"""The goodput benchmark's arithmetic on recorded log lines: how a run name's log splits into
CLI runs, lost steps, recovery time from the signal, the median, goodput and the parameter
check (benchmarks/goodput.py; no run)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# goodput.py imports its sibling benchmarks as a script run from benchmarks/ does.
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
SPEC = importlib.util.spec_from_file_location("goodput", BENCHMARKS / "goodput.py")
assert SPEC is not None and SPEC.loader is not None
goodput = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(goodput)

# Times are binary fractions so that every difference below is exact in floating point.
TERM_LOG = """\
{"event": "start", "step": 0, "rank": 0, "time": 100.0}
{"event": "start", "step": 0, "rank": 1, "time": 100.0}
{"event": "train", "step": 1, "rank": 0, "time": 100.25}
{"event": "train", "step": 2, "rank": 0, "time": 100.5}
{"event": "train", "step": 3, "rank": 0, "time": 100.75}
{"event": "preempted", "step": 3, "rank": 0, "time": 101.0}
{"event": "checkpoint", "step": 3, "rank": 1, "reason": "preemption", "time": 101.25}
{"event": "checkpoint", "step": 3, "rank": 0, "reason": "preemption", "time": 101.5}
{"event": "exit", "exit_code": 143}
{"event": "resume", "step": 3, "rank": 1, "time": 109.0}
{"event": "resume", "step": 3, "rank": 0, "time": 109.5}
{"event": "start", "step": 3, "rank": 0, "time": 109.75}
{"event": "train", "step": 4, "rank": 0, "time": 110.0}
{"event": "train", "step": 5, "rank": 0, "time": 110.25}
{"event": "preempted", "step": 5, "rank": 0, "time": 110.5}
{"event": "checkpoint", "step": 5, "rank": 0, "reason": "preemption", "time": 111.0}
{"event": "exit", "exit_code": 143}
{"event": "resume", "step": 5, "rank": 0, "time": 125.0}
{"event": "start", "step": 5, "rank": 0, "time": 125.25}
{"event": "train", "step": 6, "rank": 0, "time": 125.5}
{"event": "done", "step": 6, "rank": 0, "params_sha256": "abc", "time": 126.0}
{"event": "exit", "exit_code": 0}
"""

# SIGKILL: the killed CLI logs no `exit` and no save; periodic saves every 2 steps.
KILL_LOG = """\
{"event": "start", "step": 0, "rank": 0, "time": 200.0}
{"event": "train", "step": 1, "rank": 0, "time": 200.5}
{"event": "train", "step": 2, "rank": 0, "time": 201.0}
{"event": "checkpoint", "step": 2, "rank": 0, "reason": null, "time": 201.25}
{"event": "train", "step": 3, "rank": 0, "time": 201.5}
{"event": "resume", "step": 2, "rank": 0, "time": 210.0}
{"event": "start", "step": 2, "rank": 0, "time": 210.5}
{"event": "train", "step": 3, "rank": 0, "time": 211.0}
{"event": "train", "step": 4, "rank": 0, "time": 211.5}
{"event": "train", "step": 5, "rank": 0, "time": 212.0}
{"event": "start", "step": 0, "rank": 0, "time": 220.0}
{"event": "train", "step": 1, "rank": 0, "time": 222.0}
{"event": "done", "step": 1, "rank": 0, "params_sha256": "def", "time": 223.0}
"""


def _records(text: str, tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "run.jsonl"
    path.write_text(text)
    records: list[dict[str, Any]] = goodput._records(path)
    return records


def test_term_log_splits_into_three_runs_of_rank0_records(tmp_path: Path) -> None:
    runs = goodput.segments(_records(TERM_LOG, tmp_path))
    assert [[(r["event"], r["step"]) for r in run] for run in runs] == [
        [("start", 0), ("train", 1), ("train", 2), ("train", 3), ("preempted", 3),
         ("checkpoint", 3)],
        [("resume", 3), ("start", 3), ("train", 4), ("train", 5), ("preempted", 5),
         ("checkpoint", 5)],
        [("resume", 5), ("start", 5), ("train", 6), ("done", 6)],
    ]  # fmt: skip


def test_term_figures_measure_from_the_signal_less_the_provisioning_delay(
    tmp_path: Path,
) -> None:
    each = goodput.preemption_figures(_records(TERM_LOG, tmp_path), [100.875, 110.375], 4.0)
    assert each == [
        {
            "preempted_at_step": 3,
            "resumed_from_step": 3,
            "lost_steps": 0,
            "recovery_s": 110.0 - 100.875 - 4.0,
            "save_s": 101.5 - 100.875,
            "restart_and_load_s": 109.5 - 101.5 - 4.0,
            "first_step_s": 0.5,
        },
        {
            "preempted_at_step": 5,
            "resumed_from_step": 5,
            "lost_steps": 0,
            "recovery_s": 125.5 - 110.375 - 4.0,
            "save_s": 111.0 - 110.375,
            "restart_and_load_s": 125.0 - 111.0 - 4.0,
            "first_step_s": 0.5,
        },
    ]
    assert [e["recovery_s"] for e in each] == [5.125, 11.125]


def test_kill_figures_count_the_steps_since_the_last_save(tmp_path: Path) -> None:
    # Killed at step 3 (resumed from 2) and at step 5 with no save since step 0 kept.
    each = goodput.preemption_figures(_records(KILL_LOG, tmp_path), [201.75, 212.25], 0.0)
    assert [(e["preempted_at_step"], e["resumed_from_step"], e["lost_steps"]) for e in each] == [
        (3, 2, 1),
        (5, 0, 5),
    ]
    assert [e["recovery_s"] for e in each] == [9.25, 9.75]
    assert [e["save_s"] for e in each] == [None, None]
    assert [e["restart_and_load_s"] for e in each] == [8.25, None]
    assert [e["first_step_s"] for e in each] == [1.0, None]


def test_summary_median_mean_goodput_and_params(tmp_path: Path) -> None:
    records = _records(TERM_LOG, tmp_path)
    ideal = {"wall_s": 30.0, "records": [json.loads(TERM_LOG.splitlines()[-2])]}
    summary = goodput.summarize(ideal, {"wall_s": 40.0, "records": records}, [100.875, 110.375], 4)
    assert {k: v for k, v in summary.items() if k != "each"} == {
        "preemptions": 2,
        "ideal_s": 30.0,
        "wall_s": 40.0,
        "goodput": 0.75,
        "recovery_overhead_s": 8.125,  # the median of 5.125 and 11.125
        "provisioning_delay_s": 4,
        "lost_steps_per_preemption": 0,
        "params_match": True,
        "params_sha256": {"ideal": "abc", "preempted": "abc"},
    }
    other = {"wall_s": 30.0, "records": [json.loads(KILL_LOG.splitlines()[-1])]}
    mismatch = goodput.summarize(other, {"wall_s": 40.0, "records": records}, [100.875, 110.375], 4)
    assert mismatch["params_match"] is False


def test_kill_summary_mean_of_lost_steps(tmp_path: Path) -> None:
    summary = goodput.summarize(
        {"wall_s": 10.0, "records": [json.loads(KILL_LOG.splitlines()[-1])]},
        {"wall_s": 16.0, "records": _records(KILL_LOG, tmp_path)},
        [201.75, 212.25],
        0.0,
    )
    assert (summary["lost_steps_per_preemption"], summary["goodput"]) == (3, 0.625)
    assert summary["recovery_overhead_s"] == 9.5
    assert summary["params_match"] is True


def test_runs_in_the_log_must_match_the_signals(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^1 preemptions need 2 CLI runs in the log, found 3$"):
        goodput.preemption_figures(_records(TERM_LOG, tmp_path), [100.875], 0.0)


def test_preemption_steps_are_seeded_sorted_and_before_the_end() -> None:
    assert goodput.preemption_steps(0, 200, 3) == [11, 99, 108]
    assert goodput.preemption_steps(0, 60, 2) == [25, 49]
    assert goodput.preemption_steps(1, 12, 1) == [1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preemptions", "0"], "--preemptions must be >= 1, got 0"),
        (["--steps", "12", "--preemptions", "2"], "--steps must be > --preemptions + 10, got 12"),
        (["--checkpoint-every", "10,x"], "--checkpoint-every must be comma-separated integers"),
        (["--signals", "TERM,HUP"], "--signals must be a comma-separated subset of TERM,KILL"),
    ],
)
def test_bad_arguments_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        goodput.parse(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_goals_per_signal_over_every_interval() -> None:
    def interval(signal: str, every: int, recovery: float, lost: float) -> dict[str, Any]:
        return {
            "signal": signal,
            "checkpoint_every": every,
            "recovery_overhead_s": recovery,
            "lost_steps_per_preemption": lost,
        }

    assert goodput.goals(
        [
            interval("SIGTERM", 10, 30.0, 0),
            interval("SIGKILL", 10, 12.5, 6),
            interval("SIGTERM", 50, 9.0, 0),
            interval("SIGKILL", 50, 30.5, 25),
        ]
    ) == {
        "SIGTERM": {"recovery_overhead_le_30s": True, "lost_steps_le_half_interval": True},
        "SIGKILL": {"recovery_overhead_le_30s": False, "lost_steps_le_half_interval": False},
    }

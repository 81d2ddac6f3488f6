"""What `trainstack local-run` prints for a person and for a script: progress lines while a
piped run trains, a summary whose values are never cut, `--json`, a finished run reported
instead of silently reused, `--fresh`; and the formatting itself (`trainstack.trainers.local_report`)."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from tests.trainers.local_cli import PROGRESS_LINE, finish, local_run, log_records, stack_file
from trainstack.trainers.local import previous_done
from trainstack.trainers.local_report import (
    LocalRunResult,
    PlainProgress,
    headline,
    print_summary,
    summary_rows,
)

SHA = "16d946bcc74cf1cb0337a9eac1ef2b5ce8407c8777cd9fa3c5312ced52880bcb"


def _timed_lines(proc: subprocess.Popen[str]) -> tuple[list[tuple[float, str]], list[str]]:
    """stderr lines with their arrival times, and stdout lines, read while the run goes."""
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None
    timed: list[tuple[float, str]] = []
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(stdout.read().splitlines()))
    reader.start()
    for line in stderr:
        timed.append((time.monotonic(), line.rstrip("\n")))
    reader.join()
    proc.wait()
    return timed, out


@pytest.mark.trainer
def test_piped_run_prints_progress_a_full_summary_and_a_rerun_is_reported(tmp_path: Path) -> None:
    config = stack_file(tmp_path, "local")
    root = tmp_path / "root"
    proc = local_run(
        config,
        "--steps",
        "40",
        "--progress-every",
        "1",
        env={"TRAINSTACK_TEST_STEP_DELAY_S": "0.1"},
    )
    timed, out = _timed_lines(proc)
    ended = time.monotonic()
    assert proc.returncode == 0, timed
    lines = [line for _, line in timed]
    assert [line for line in lines if not PROGRESS_LINE.match(line)] == []
    assert lines[0] == f"starting 2 workers; log {root / 'logs' / 'local.jsonl'}"
    # Progress arrives while the run trains, not all at the end.
    steps = [(t, line) for t, line in timed if line.startswith("step ") and "loss" in line]
    assert steps[0][1].startswith("step 20/40, loss ")
    assert steps[0][0] < ended - 1.0
    (done,) = [r for r in log_records(config) if r.get("event") == "done"]
    # COLUMNS=60: every value is whole anyway.
    assert out == [
        "trainstack local-run local: done at step 40",
        "exit code: 0",
        "workers: 2",
        "steps: 40",
        "resumed from: -",
        f"final loss: {done['loss']:.4g}",
        f"test accuracy: {done['test_accuracy']:.4g}",
        out[7],
        f"samples/s: {done['samples_per_s']:.4g}",
        f"checkpoint dir: {root / 'checkpoints' / 'local'}",
        f"log file: {root / 'logs' / 'local.jsonl'}",
        f"params_sha256: {done['params_sha256']}",
    ]
    assert out[7].startswith("wall time (s): ")

    # The same command again: nothing runs, one line says why.
    complete = (
        f"already complete at step 40 (checkpoint {root / 'checkpoints' / 'local'}"
        "/step-00000040); --fresh starts over"
    )
    assert finish(local_run(config, "--steps", "40")) == (0, complete + "\n", "")
    # --json: the finished run's done record on stdout, the line on stderr.
    rc, stdout, stderr = finish(local_run(config, "--steps", "40", "--json"))
    assert (rc, stderr) == (0, complete + "\n")
    assert json.loads(stdout) == {**done, "already_complete": True}
    assert stdout.count("\n") == 1

    # --fresh starts over from step 0 and gets the same parameters.
    rc, stdout, stderr = finish(local_run(config, "--steps", "40", "--fresh", "--json"))
    assert rc == 0, stderr
    again = json.loads(stdout)
    assert (again["step"], again["resumed_from"]) == (40, 0)
    assert again["params_sha256"] == done["params_sha256"]
    assert "trainstack local-run local: done at step 40" in stderr.splitlines()


# -- formatting -------------------------------------------------------------------------------


def _result(**fields: object) -> LocalRunResult:
    result = LocalRunResult(0, None, "/runs/checkpoints/local", Path("/runs/logs/local.jsonl"), 1.5)
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def test_headlines() -> None:
    done = {"event": "done", "step": 300}
    assert headline(_result(done=done)) == "done at step 300"
    assert headline(_result(done=done, resumed_from=100)) == (
        "done at step 300; resumed from step 100"
    )
    stop = {"exit_code": 143, "interrupted": "SIGTERM"}
    assert headline(_result(**stop, stopped_at=42, saved_step=42, step=42)) == (
        "interrupted at step 42; checkpoint step-00000042 saved; run the same command to resume"
    )
    ctrl_c = {"exit_code": 130, "interrupted": "SIGINT"}
    assert headline(_result(**ctrl_c, step=42, saved_step=20)) == (
        "interrupted at step 42 before a checkpoint was saved; the newest is step-00000020; "
        "run the same command to resume from it"
    )
    # SIGTERM with no stop record, at the step of the newest checkpoint: it was saved.
    assert headline(_result(**stop, step=125, saved_step=125)) == (
        "interrupted at step 125; checkpoint step-00000125 saved; run the same command to resume"
    )
    assert headline(_result(**ctrl_c, step=3)) == (
        "interrupted at step 3 before any checkpoint was saved; run the same command to start again"
    )
    assert headline(
        _result(already_complete=True, saved_step=300, checkpoint_path="/c/step-00000300")
    ) == ("already complete at step 300 (checkpoint /c/step-00000300); --fresh starts over")
    assert headline(_result(exit_code=2, step=0)) == "failed with exit code 2 at step 0"
    # Your own code's torchrun teardown: a `preempted` line, but exit 1, is a failure.
    assert headline(_result(exit_code=1, stopped_at=3, step=3)) == (
        "failed with exit code 1 at step 3"
    )
    # Your own code that printed no `done` line and exited 0 finished.
    assert headline(_result(exit_code=0, step=0)) == "finished"
    assert headline(_result(exit_code=0, step=12)) == "finished at step 12"


def test_summary_rows() -> None:
    done = {"step": 300, "loss": 0.046881, "test_accuracy": 0.98888, "samples_per_s": 165.23}
    rows = summary_rows(_result(done={**done, "params_sha256": SHA}, resumed_from=100), 2)
    assert rows == [
        ("exit code", "0"),
        ("workers", "2"),
        ("steps", "300"),
        ("resumed from", "step 100"),
        ("final loss", "0.04688"),
        ("test accuracy", "0.9889"),
        ("wall time (s)", "1.5"),
        ("samples/s", "165.2"),
        ("checkpoint dir", "/runs/checkpoints/local"),
        ("log file", "/runs/logs/local.jsonl"),
        ("params_sha256", SHA),
    ]


def test_summary_is_never_cut_at_the_terminal_width() -> None:
    long_dir = "/" + "/".join(["a-rather-long-directory-name"] * 4)
    result = _result(done={"step": 3, "params_sha256": SHA}, checkpoint_dir=long_dir)
    plain = io.StringIO()
    print_summary(result, 2, "local", Console(file=plain, width=40))
    assert f"params_sha256: {SHA}" in plain.getvalue().splitlines()
    assert f"checkpoint dir: {long_dir}" in plain.getvalue().splitlines()
    tty = io.StringIO()
    print_summary(result, 2, "local", Console(file=tty, width=60, force_terminal=True))
    # The table folds long values over several lines instead of ending them with "…".
    cells = [line.split("│")[2].strip() for line in tty.getvalue().splitlines() if "│" in line]
    text = "".join(cells)
    assert "…" not in tty.getvalue()
    assert SHA in text
    assert long_dir in text


def test_plain_progress_prints_at_most_every_interval_and_nothing_after_a_signal() -> None:
    buffer = io.StringIO()
    view = PlainProgress(Console(file=buffer, width=40), 100, every_s=3600)
    view.step(10, 1.23456, 99.6)
    assert buffer.getvalue() == ""
    view.every_s = 0
    view.step(20, 1.0, None)
    assert buffer.getvalue().splitlines() == ["step 20/100, loss 1.0000, 0s elapsed"]
    view.stopping()
    view.step(30, 0.5, 10.0)
    view.note("resumed from step 3")
    assert buffer.getvalue().splitlines() == ["step 20/100, loss 1.0000, 0s elapsed"]


def test_previous_done_is_read_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "local.jsonl"
    records = [
        {"event": "done", "step": 40, "rank": 0, "params_sha256": "old"},
        {"event": "train", "step": 60, "rank": 0},
        {"event": "done", "step": 60, "rank": 0, "params_sha256": SHA, "checkpoint_dir": "/c"},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    assert previous_done(log, 60, "/c") == {**records[2], "already_complete": True}
    assert previous_done(tmp_path / "none.jsonl", 60, "/c") == {
        "event": "done",
        "step": 60,
        "checkpoint_dir": "/c",
        "already_complete": True,
    }

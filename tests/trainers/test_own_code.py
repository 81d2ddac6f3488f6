"""Your own code through `trainstack local-run`, as a person runs it: examples/own-trainer (a
plain PyTorch DDP script) with 2 processes, killed outright mid-way and run again, ends with
the same weights as a run that was never interrupted; SIGTERM makes it save and exit 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.trainers.conftest import REPO
from tests.trainers.local_cli import (
    alive,
    cli_env,
    finish,
    kill_all,
    local_run,
    tree,
    wait_gone,
)

pytestmark = pytest.mark.trainer

EXAMPLE = REPO / "examples" / "own-trainer"


def _stack(tmp_path: Path, name: str, step_sleep: float = 0.0) -> Path:
    """The example's local stack with its root under `tmp_path` and the source absolute."""
    text = (EXAMPLE / "Pulumi.local.yaml").read_text()
    text = text.replace("    workers: 2\n", f"    workers: 2\n    root: {tmp_path / name}\n")
    text = text.replace("source: examples/own-trainer", f"source: {EXAMPLE}")
    if step_sleep:
        text = text.replace("--global-batch=32]", f"--global-batch=32, --step-sleep={step_sleep}]")
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(text)
    return path


def _checkpoints(tmp_path: Path, name: str) -> list[str]:
    folder = tmp_path / name / "checkpoints" / name
    return sorted(p.name for p in folder.glob("step-*")) if folder.exists() else []


def _done(out: str) -> dict[str, object]:
    record: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return record


def _wait_for_checkpoint(tmp_path: Path, name: str, proc: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _checkpoints(tmp_path, name):
        assert time.monotonic() < deadline, "no checkpoint in time"
        assert proc.poll() is None, "local-run ended before its first checkpoint"
        time.sleep(0.2)


def test_killed_outright_and_run_again_it_ends_with_the_same_weights(tmp_path: Path) -> None:
    whole = local_run(_stack(tmp_path, "whole"), "--json")
    code, out, err = finish(whole)
    assert code == 0, err
    expected = _done(out)
    assert (expected["event"], expected["step"], expected["rank"]) == ("done", 60, 0)

    config = _stack(tmp_path, "killed", step_sleep=0.2)
    first = local_run(config, "--json")
    pids: list[int] = []
    try:
        _wait_for_checkpoint(tmp_path, "killed", first, timeout=180)
        pids = tree(first.pid)
        # Node launcher, torchrun, and per rank our wrapper and the script.
        assert len(pids) >= 6, pids
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        assert wait_gone(pids, timeout=30) == []
    finally:
        kill_all([first.pid, *pids])
    saved = _checkpoints(tmp_path, "killed")
    assert saved and "step-60" not in saved

    again = local_run(config, "--json")
    code, out, err = finish(again)
    assert code == 0, err
    assert _done(out) == expected
    log = (tmp_path / "killed" / "logs" / "killed.jsonl").read_text().splitlines()
    starts = [json.loads(line) for line in log if '"world"' in line]
    assert [s["step"] for s in starts] == [0, int(saved[-1][5:])]
    # As the script printed it, with the worker and time the local-run adds.
    assert starts[-1] == {
        "time": starts[-1]["time"],
        "worker": 0,
        "event": "start",
        "rank": 0,
        "step": int(saved[-1][5:]),
        "world": 2,
    }
    # Shown as a bundled run is: progress from the script's own lines, then the summary.
    lines = err.splitlines()
    # The killed run left its checkpoint-folder lock behind; the new run takes it over.
    took, started = lines[0].split(", started ")
    assert took == (
        f"took over the lock of {tmp_path / 'killed' / 'checkpoints' / 'killed'} "
        f"from pid {first.pid}"
    )
    assert started.endswith(", which no longer runs")
    assert lines[1] == f"starting 2 workers; log {tmp_path / 'killed' / 'logs' / 'killed.jsonl'}"
    assert lines[2] == f"resumed from step {saved[-1][5:]}"
    assert (
        f"trainstack local-run killed: done at step 60; resumed from step {saved[-1][5:]}" in lines
    )
    assert f"params_sha256: {expected['params_sha256']}" in lines


@pytest.mark.slow  # about 45 s here; the bundled trainer SIGTERM case runs by default
def test_sigterm_saves_and_exits_143_then_the_run_resumes(tmp_path: Path) -> None:
    config = _stack(tmp_path, "stopped", step_sleep=0.2)
    run = local_run(config)
    try:
        _wait_for_checkpoint(tmp_path, "stopped", run, timeout=180)
        run.send_signal(signal.SIGTERM)
        code, _, err = finish(run, timeout=120)
    finally:
        kill_all([run.pid])
    assert code == 143, err
    assert not alive(run.pid)
    log = (tmp_path / "stopped" / "logs" / "stopped.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in log]
    # The script's own line names the step it saved; the wrapper adds no second, step-less one.
    (saved,) = [r for r in records if r["event"] == "preempted" and r["rank"] == 0]
    assert f"step-{saved['step']}" in _checkpoints(tmp_path, "stopped")
    assert err.splitlines()[-1] == (
        f"interrupted at step {saved['step']}; checkpoint step-{saved['step']} saved; "
        "run the same command to resume"
    )
    resumed = local_run(config, "--json")
    code, out, err = finish(resumed)
    assert code == 0, err
    assert _done(out)["step"] == 60


def test_jax_example_initializes_with_no_arguments_and_sees_a_world_of_2(tmp_path: Path) -> None:
    pytest.importorskip(
        "jax",
        reason="jax is not installed in this environment (it belongs in the test extras: "
        "jax[cpu]); examples/own-jax needs it",
    )
    text = (REPO / "examples" / "own-jax" / "Pulumi.local.yaml").read_text()
    text = text.replace("    workers: 2\n", f"    workers: 2\n    root: {tmp_path / 'root'}\n")
    text = text.replace("source: examples/own-jax", f"source: {REPO / 'examples' / 'own-jax'}")
    config = tmp_path / "Pulumi.jax.yaml"
    config.write_text(text)
    code, out, err = finish(local_run(config, "--json"), timeout=180)
    assert code == 0, err
    assert _done(out) == {
        "event": "done",
        "rank": 0,
        "world": 2,
        "ranks": [0, 1],
        "devices": 2,
        "run": "jax",
    }


CRASHING = """\
import json, os, signal, sys, time
rank = int(os.environ["RANK"])
if rank == 1:
    time.sleep(1)
    {}["missing"]  # a KeyError: a bug, not a preemption
def stop(signum, frame):
    # torchrun stops the surviving rank with SIGTERM once rank 1 failed: it saves and says so.
    print(json.dumps({"event": "preempted", "rank": 0, "step": 3}), flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print(json.dumps({"event": "train", "rank": 0, "step": 3, "loss": 0.5}), flush=True)
time.sleep(60)
"""


def _code_stack(tmp_path: Path, script: str) -> Path:
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text(script)
    config = tmp_path / "Pulumi.mine.yaml"
    config.write_text(
        "config:\n"
        f"  trainstack:local: {{workers: 2, root: {tmp_path / 'root'}}}\n"
        f"  trainstack:trainer: {{source: {source}, entrypoint: [python, train.py]}}\n"
    )
    return config


def test_a_crash_in_one_rank_is_a_failure_with_its_traceback_not_a_preemption(
    tmp_path: Path,
) -> None:
    config = _code_stack(tmp_path, CRASHING)
    code, _, err = finish(local_run(config), timeout=120)
    # Before: rank 0's `preempted` line (torchrun's teardown) made it "exit 143".
    assert code == 1, err
    lines = err.splitlines()
    assert "trainstack local-run mine: failed with exit code 1 at step 3" in lines
    # The failing rank's own last lines come first, not only torchrun's summary.
    assert "rank 1 exited 1; its last output lines:" in lines
    assert "  KeyError: 'missing'" in lines
    status = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "status", "--config-file", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(),
        check=False,
    )
    assert status.returncode == 1, status
    assert status.stdout.splitlines()[:2] == ["stack: mine (local)", "state: FAILED"]


def test_code_that_prints_no_records_and_exits_0_finished(tmp_path: Path) -> None:
    config = _code_stack(tmp_path, "print('hello from', __import__('os').environ['RANK'])\n")
    code, out, err = finish(local_run(config, "--json"), timeout=120)
    assert (code, out) == (0, ""), err
    lines = err.splitlines()
    assert sorted(line for line in lines if line.startswith("hello from")) == [
        "hello from 0",
        "hello from 1",
    ]
    assert "trainstack local-run mine: finished" in lines


RECORDS = """\
import json, os
rank = int(os.environ["RANK"])
print(json.dumps({"event": "train", "rank": rank, "step": 1, "loss": 0.5}), flush=True)
print(json.dumps({"event": "note", "step": 1}), flush=True)
"""


def test_logs_worker_finds_your_codes_records_and_shows_their_time(tmp_path: Path) -> None:
    config = _code_stack(tmp_path, RECORDS)
    code, _, err = finish(local_run(config), timeout=120)
    assert code == 0, err
    log = tmp_path / "root" / "logs" / "mine.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    # The local-run adds what your code left out: when it arrived, and whose it is (its
    # rank; else the process's index: one node launcher here, so 0).
    ones = [r for r in records if r.get("worker") == 1]
    assert [sorted(r) for r in ones] == [
        ["argv", "event", "rank", "time", "worker"],  # the node launcher's, for rank 1
        ["event", "loss", "rank", "step", "time", "worker"],
    ]
    assert sorted(r["worker"] for r in records if r["event"] == "note") == [0, 0]
    logs = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "logs", "--config-file", str(config)]
        + ["--worker", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(),
        check=False,
    )
    # Before: nothing (no record had a `worker`) and no time on any line.
    launched, trained = (datetime.fromtimestamp(r["time"], UTC).strftime("%H:%M:%S") for r in ones)
    assert (logs.returncode, logs.stdout.splitlines()) == (
        0,
        [f"{launched} rank 1 launch", f"{trained} rank 1 train step 1 loss 0.5000"],
    )

"""Stopping and resuming `trainstack local-run` with real signals, as a person or a
scheduler does it: SIGTERM to the CLI or its process group and Ctrl-C behave like a
preemption (every rank saves, one line, 143 or 130, the same command resumes); a SIGKILLed
launcher takes its workers with it; a hung peer ends a torch run instead of waiting for
30 minutes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainers.conftest import REPO, command, trainer_env
from tests.trainers.local_cli import (
    PROGRESS_LINE,
    alive,
    finish,
    interrupted_line,
    kill_all,
    local_run,
    log_records,
    preempted_step,
    rank0_train,
    stack_file,
    tree,
    wait_for_record,
    wait_gone,
)
from trainstack.trainers.common.contract import COLLECTIVE_TIMEOUT_ENV, EXIT_WITH_PARENT_ENV
from trainstack.trainers.local import RunStopper
from trainstack.trainers.run_lock import process_start

pytestmark = pytest.mark.trainer

# Slow enough that the signal lands mid-run, fast enough for the resumed rest.
STEPS = "60"
SLOW = {"TRAINSTACK_TEST_STEP_DELAY_S": "0.25"}


def _interrupt(
    tmp_path: Path, stack: str, sig: signal.Signals, *, group: bool, code: int
) -> tuple[Path, int]:
    """Start `stack`, signal it once rank 0 has trained 20 steps; check the one line, the
    exit code, the checkpoint every rank saved and that no process is left. Returns the
    stack file and the step it stopped at."""
    config = stack_file(tmp_path, stack)
    proc = local_run(config, "--steps", STEPS, env=SLOW)
    pids: list[int] = []
    try:
        wait_for_record(config, proc, lambda r: rank0_train(r, 20), timeout=240)
        pids = tree(proc.pid)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        rc, out, err = finish(proc, timeout=120)
        left = wait_gone(pids, timeout=5)
    finally:
        kill_all([proc.pid, *pids])
    assert left == []
    step = preempted_step(config)
    assert 20 <= step < int(STEPS)
    assert (rc, out) == (code, "")
    lines = err.splitlines()
    assert lines[-1] == interrupted_line(step), err
    assert [line for line in lines[:-1] if not PROGRESS_LINE.match(line)] == []
    assert (
        config.parent / "root" / "checkpoints" / stack / f"step-{step:08d}" / "COMPLETE"
    ).exists()
    saved = [
        r
        for r in log_records(config)
        if r.get("event") == "checkpoint" and r.get("reason") == "preemption"
    ]
    assert {(r["rank"], r["step"]) for r in saved} == {(0, step), (1, step)}
    return config, step


def _resume(config: Path, stack: str, step: int) -> None:
    """The same command again: resumes from the saved step and finishes."""
    rc, out, err = finish(local_run(config, "--steps", STEPS))
    assert rc == 0, err
    assert f"resumed from step {step}" in err.splitlines()
    summary = out.splitlines()
    assert summary[0] == (
        f"trainstack local-run {stack}: done at step {STEPS}; resumed from step {step}"
    )
    assert f"resumed from: step {step}" in summary


def test_sigterm_to_the_cli_checkpoints_and_the_same_command_resumes(tmp_path: Path) -> None:
    config, step = _interrupt(tmp_path, "local", signal.SIGTERM, group=False, code=143)
    _resume(config, "local", step)


def test_ctrl_c_to_the_process_group_checkpoints_and_exits_130(tmp_path: Path) -> None:
    # A terminal's Ctrl-C sends SIGINT to the foreground process group.
    _interrupt(tmp_path, "local", signal.SIGINT, group=True, code=130)


def test_a_second_local_run_of_the_same_run_waits_for_nothing_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    """About 30 s: while a run trains, `local-run --fresh` of the same stack exits 2 with one
    line naming the first one's pid and start, and its checkpoints stay; `status` sees the
    first one through its recorded pid and start time; once it stops, the record goes."""
    config = stack_file(tmp_path, "local")
    first = local_run(config, "--steps", "400", env=SLOW)  # stopped long before its end
    pids: list[int] = []
    pid_file = config.parent / "root" / "logs" / "local.pid"
    try:
        wait_for_record(
            config, first, lambda r: r.get("event") == "checkpoint" and r["rank"] == 0, 240
        )
        pids = tree(first.pid)
        record = json.loads(pid_file.read_text())
        assert (record["pid"], record["start"]) == (first.pid, process_start(first.pid))
        saved = sorted(p.name for p in (config.parent / "root" / "checkpoints" / "local").iterdir())
        rc, out, err = finish(local_run(config, "--fresh"), timeout=120)
        assert (rc, out, err) == (
            2,
            "",
            f"error: run 'local' is already running here (local-run pid {first.pid}, started "
            f"{record['started_at']}; its lock: {pid_file}); valid: wait for it to end, or stop "
            "it (Ctrl-C in its terminal, or SIGTERM to its pid), then run this again\n",
        )
        now = sorted(p.name for p in (config.parent / "root" / "checkpoints" / "local").iterdir())
        assert now[: len(saved)] == saved  # nothing deleted (the first run may have saved more)
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainstack.infra.cli",
                "status",
                "--config-file",
                str(config),
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=config.parent,
            env=trainer_env({"PYTHONPATH": str(REPO)}),
            timeout=120,
            check=False,
        )
        assert json.loads(status.stdout)["hosts"] == [
            {"name": "local-run", "state": "running", "address": f"pid {first.pid}"}
        ]
        first.send_signal(signal.SIGTERM)
        rc, _, _ = finish(first, timeout=120)
    finally:
        kill_all([first.pid, *pids])
    assert rc == 143
    assert not pid_file.exists()


@pytest.mark.slow  # about 40 s here; the torch case runs by default
def test_tensorflow_sigterm_to_the_process_group_checkpoints_and_resumes(tmp_path: Path) -> None:
    config, step = _interrupt(tmp_path, "local-tf", signal.SIGTERM, group=True, code=143)
    _resume(config, "local-tf", step)


@pytest.mark.parametrize(
    "stack",
    # local-tf is slow (about 25 s here): the same supervision, TensorFlow workers.
    ["local", pytest.param("local-tf", marks=pytest.mark.slow)],
)
def test_workers_die_with_a_sigkilled_launcher(tmp_path: Path, stack: str) -> None:
    config = stack_file(tmp_path, stack)
    proc = local_run(config, "--steps", "400", env=SLOW)
    pids: list[int] = []
    try:
        wait_for_record(config, proc, rank0_train, timeout=240)
        pids = tree(proc.pid)
        # torch: torchrun and its 2 workers; TensorFlow: 2 worker tasks.
        assert len(pids) == (3 if stack == "local" else 2)
        proc.kill()
        proc.wait()
        left = wait_gone(pids, timeout=5)
    finally:
        kill_all([proc.pid, *pids])
    assert left == []


def test_a_hung_peer_times_out_the_torch_collectives(tmp_path: Path) -> None:
    # Rank 1 stops (SIGSTOP: its sockets stay open, so only a timeout can notice); rank 0's
    # next all-reduce must fail after the 3 s timeout instead of torch's 30 minutes.
    out = tmp_path / "run.log"
    args = ["--model=mlp", "--dataset=digits", "--steps=5000", "--log_every=1"]
    env = trainer_env({COLLECTIVE_TIMEOUT_ENV: "3", "TRAINSTACK_TEST_STEP_DELAY_S": "0.05"})
    with out.open("w") as log:
        proc = subprocess.Popen(
            command(args, 2, torchrun=True),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while '"event": "train"' not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = tree(proc.pid)
        ranks = {_rank(pid): pid for pid in pids if _rank(pid) is not None}
        os.kill(ranks[1], signal.SIGSTOP)
        stopped = time.monotonic()
        assert wait_gone([ranks[0]], timeout=60) == []
        waited = time.monotonic() - stopped
    finally:
        kill_all([proc.pid, *pids])
        proc.wait()
    # torch's default would keep it waiting for 30 minutes.
    assert waited < 30
    errors = [line for line in out.read_text().splitlines() if line.startswith("[rank0]: ")]
    # Gloo words it by where the wait was: "Application timeout caused pair closure" or
    # "Timed out waiting 3000ms for recv operation to complete".
    # With the float64 comm hook the error surfaces through a future, so torch may print the
    # hook's frames after the RuntimeError line: look for it among rank 0's lines.
    timed_out = (
        r"^\[rank0\]: (RuntimeError|torch\.distributed\.DistBackendError): .*(timeout|Timed out)"
    )
    assert any(re.search(timed_out, line) for line in errors), errors


def _rank(pid: int) -> int | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [e[5:] for e in environ if e.startswith(b"RANK=")]
    return int(found[0]) if found else None


def test_an_invalid_collective_timeout_is_a_config_error() -> None:
    done = subprocess.run(
        command(["--steps=1"], 1),
        capture_output=True,
        text=True,
        env=trainer_env({COLLECTIVE_TIMEOUT_ENV: "soon"}),
        cwd=REPO,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"trainstack trainer: {COLLECTIVE_TIMEOUT_ENV}: expected seconds > 0, got 'soon'\n"
    )


# -- the mechanisms, on plain processes -------------------------------------------------------

_MIDDLE = """
import subprocess, sys, time
from trainstack.trainers.common.signals import kill_with_parent
child = subprocess.Popen(sys.argv[2:], preexec_fn=kill_with_parent() if sys.argv[1] == "1" else None)
print(child.pid, flush=True)
time.sleep(600)
"""
_WATCHING = "from trainstack.trainers.common.signals import watch_parent; watch_parent(); import time; time.sleep(600)"


def _orphan(pdeathsig: bool, child: list[str], env: dict[str, str]) -> int:
    """Start a launcher that starts `child`, SIGKILL the launcher; returns the child's pid."""
    middle = subprocess.Popen(
        [sys.executable, "-c", _MIDDLE, "1" if pdeathsig else "0", *child],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
    )
    assert middle.stdout is not None
    pid = int(middle.stdout.readline())
    time.sleep(1.0)  # the child's watchdog has read its parent
    middle.kill()
    middle.wait()
    return pid


def test_kill_with_parent_kills_the_child_when_the_launcher_is_killed() -> None:
    pid = _orphan(True, ["sleep", "600"], {})
    try:
        assert wait_gone([pid], timeout=3) == []
    finally:
        kill_all([pid])


def test_watch_parent_ends_the_trainer_when_its_launcher_is_gone() -> None:
    pid = _orphan(False, [sys.executable, "-c", _WATCHING], {EXIT_WITH_PARENT_ENV: "1"})
    try:
        assert wait_gone([pid], timeout=3) == []
    finally:
        kill_all([pid])


def test_watch_parent_is_off_unless_asked() -> None:
    # The local training job's processes are detached on purpose: they outlive `pulumi up`.
    pid = _orphan(False, [sys.executable, "-c", _WATCHING], {EXIT_WITH_PARENT_ENV: ""})
    try:
        time.sleep(2)
        assert alive(pid)
    finally:
        kill_all([pid])


def _sleeper() -> subprocess.Popen[str]:
    return subprocess.Popen(["sleep", "600"], start_new_session=True, text=True)


def test_the_first_signal_is_forwarded_as_sigterm_and_the_second_kills() -> None:
    stopper = RunStopper(grace_s=600)
    chief, server = _sleeper(), _sleeper()
    try:
        stopper.add(chief, True)
        stopper.add(server, False)  # a parameter-server task: it ends when the chief has
        stopper.handle(signal.SIGINT, None)
        assert chief.wait(5) == -signal.SIGTERM
        assert server.poll() is None
        late = _sleeper()
        stopper.add(late, True)  # started while stopping: told at once
        assert late.wait(5) == -signal.SIGTERM
        stopper.handle(signal.SIGINT, None)
        assert server.wait(5) == -signal.SIGKILL
        assert stopper.signum == signal.SIGINT
    finally:
        kill_all([chief.pid, server.pid])


def test_processes_that_outlast_the_grace_period_are_killed() -> None:
    stopper = RunStopper(grace_s=0.0)
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "\n"
        stopper.add(stubborn, True)
        stopper.handle(signal.SIGTERM, None)
        time.sleep(0.5)
        assert stubborn.poll() is None  # SIGTERM ignored
        stopper.check_deadline()
        assert stubborn.wait(5) == -signal.SIGKILL
    finally:
        kill_all([stubborn.pid])

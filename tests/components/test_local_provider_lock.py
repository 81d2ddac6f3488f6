"""`pulumi up -s local` and `trainstack local-run` take the same two locks (the run's pid file
and the checkpoint folder's, `trainstack.trainers.run_lock`), so neither starts a second run
over the other's: each side is a real process (the CLI in a subprocess; the provider in an
"engine" process that is killed once it returns, as the engine's plugin is), your code a
script under the node launcher that waits for a file (a few seconds each)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainers.local_cli import cli_env
from trainstack.components._local_processes import ProcessRef, ProcessTable, stop_processes
from trainstack.components._local_provider import LocalRunProvider
from trainstack.trainers.run_lock import FOLDER_LOCK, RunHolder, RunLocked

pytestmark = pytest.mark.trainer

REPO = Path(__file__).resolve().parents[2]
# Runs until `release` exists (at most 2 minutes), so a run is live for as long as a test
# needs it.
WAITING = (
    "import pathlib, time\n"
    "project = pathlib.Path(__file__).parent.parent\n"
    "release = project / 'release'\n"
    "(project / 'ready').touch()\n"
    "for _ in range(1200):\n"
    "    if release.exists():\n"
    "        break\n"
    "    time.sleep(0.1)\n"
    "print('done waiting')\n"
)
TRAINER = {
    "run_name": "mine",
    "source": "code",
    "entrypoint": ["python", "train.py"],
    "launcher": "node",
}
RUN_HELD = (
    "run 'mine' is already running here ({who}; its lock: {lock}); valid: wait for it to "
    "end, or stop it (Ctrl-C in its terminal, or SIGTERM to its pid), then run this again"
)

# The engine runs a dynamic provider in a plugin process and kills it when `up` is done: the
# run's processes, not the provider, must hold the locks.
_ENGINE = """
import json, sys, time
from trainstack.components._local_provider import LocalRunProvider
result = LocalRunProvider(base_dir=sys.argv[2]).create(json.loads(sys.argv[1]))
print(json.dumps({"id": result.id, "outs": result.outs}), flush=True)
time.sleep(600)
"""


def _project(tmp_path: Path) -> Path:
    """A project with stack `mine` running `code/train.py` with local.root `root`."""
    (tmp_path / "stacks").mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(WAITING)
    (tmp_path / "Pulumi.yaml").write_text("name: locks\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks" / "Pulumi.mine.yaml").write_text(
        "config:\n"
        f"  trainstack:local: {{workers: 1, root: {tmp_path / 'root'}}}\n"
        "  trainstack:trainer: {run_name: mine, source: code, entrypoint: [python, train.py], "
        "launcher: node}\n"
    )
    return tmp_path


def _props(project: Path, **trainer: Any) -> dict[str, Any]:
    return {
        "trainer": {**TRAINER, **trainer},
        "workers": 1,
        "root": str(project / "root"),
        "env": {},
        "stop_grace_s": 10.0,
        "labels": {},
        "source_sha256": "a" * 64,
    }


def _local_run(project: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainstack.infra.cli", "local-run", "--stack", "mine"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=project,
        env=cli_env(),
        start_new_session=True,
    )


def _wait(what: str, pred: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def started() -> Iterator[list[ProcessRef]]:
    """Leaders a test started; stopped afterwards even when the test fails half-way."""
    leaders: list[ProcessRef] = []
    yield leaders
    stop_processes(leaders, grace_s=10.0)


def test_up_is_refused_while_a_local_run_holds_the_run_or_its_folder(tmp_path: Path) -> None:
    project = _project(tmp_path)
    pid_file = project / "root" / "logs" / "mine.pid"
    folder = project / "root" / "checkpoints" / "mine"
    cli = _local_run(project)
    try:
        holder = _wait(
            "local-run to hold both locks",
            lambda: (
                (h := RunHolder.read(pid_file)) is not None
                and h.pid == cli.pid
                and RunHolder.read(folder / FOLDER_LOCK) == h
                and (project / "ready").exists()  # its code runs: its files are all written
                and h
            ),
        )
        provider = LocalRunProvider(base_dir=str(project))
        # The same run: its pid file's lock.
        with pytest.raises(RunLocked) as same_run:
            provider.create(_props(project))
        assert str(same_run.value) == RUN_HELD.format(
            who=f"local-run pid {cli.pid}, started {holder.started_at}", lock=pid_file
        )
        # Another run name, the same checkpoint folder: the folder's lock.
        with pytest.raises(RunLocked) as same_folder:
            provider.create(_props(project, run_name="other", checkpoint_dir=str(folder)))
        assert str(same_folder.value) == (
            f"trainer.checkpoint_dir: {folder} is in use by local-run pid {cli.pid}, started "
            f"{holder.started_at} (its lock: {folder / FOLDER_LOCK}); run 'other' would read, "
            "write and prune that run's checkpoints; valid: a checkpoint folder of this run's "
            "own, or wait for that run to end"
        )
        # Nothing was started: the records are local-run's, the refused run's own lock is
        # gone, and it wrote only its config (as a refused local-run does, `run_local_code`).
        assert RunHolder.read(pid_file) == holder
        assert RunHolder.read(folder / FOLDER_LOCK) == holder
        assert sorted(p.name for p in (project / "root" / "logs").iterdir()) == [
            "mine.config.json",
            "mine.jsonl",
            "mine.pid",
            "mine.stderr.log",
            "other.config.json",
        ]
        (project / "release").touch()
        _, stderr = cli.communicate(timeout=120)
        assert cli.returncode == 0, stderr
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.communicate()


def test_local_run_is_refused_while_the_processes_up_started_run(
    tmp_path: Path, started: list[ProcessRef]
) -> None:
    project = _project(tmp_path)
    pid_file = project / "root" / "logs" / "mine.pid"
    folder = project / "root" / "checkpoints" / "mine"
    with (tmp_path / "engine.stderr").open("w") as err:
        engine = subprocess.Popen(
            [sys.executable, "-c", _ENGINE, json.dumps(_props(project)), str(project)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
    assert engine.stdout is not None
    line = engine.stdout.readline()
    os.killpg(engine.pid, signal.SIGKILL)  # the provider is gone; its run's processes stay
    engine.wait()
    engine.stdout.close()
    assert line, (tmp_path / "engine.stderr").read_text()[-3000:]
    created = json.loads(line)
    outs = created["outs"]
    leaders = [ProcessRef(p, s) for p, s in zip(outs["pids"], outs["start_times"], strict=True)]
    started.extend(leaders)
    assert ProcessTable.snapshot().alive(leaders[0])

    holder = RunHolder.read(pid_file)
    assert holder is not None
    assert (holder.pid, holder.by, holder.alive()) == (leaders[0].pid, "pulumi up -s local", True)
    assert RunHolder.read(folder / FOLDER_LOCK) == holder
    refused = _local_run(project)
    _, stderr = refused.communicate(timeout=120)
    who = f"pulumi up -s local pid {holder.pid}, started {holder.started_at}"
    assert (refused.returncode, stderr) == (
        2,
        "error: " + RUN_HELD.format(who=who, lock=pid_file) + "\n",
    )

    # `pulumi destroy`: the processes stop, the locks go with them, and local-run runs.
    provider = LocalRunProvider(base_dir=str(project))
    provider.delete(created["id"], outs)
    assert (pid_file.exists(), (folder / FOLDER_LOCK).exists()) == (False, False)
    (project / "release").touch()
    after = _local_run(project)
    _, stderr = after.communicate(timeout=120)
    assert after.returncode == 0, stderr

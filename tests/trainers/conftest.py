"""Helpers for real trainer runs: launching torchrun, reading JSON lines, a GCS emulator."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from trainstack.trainers.common.signals import descendants
from trainstack.trainers.local import torchrun_command

REPO = Path(__file__).resolve().parents[2]

Record = dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({"PYTHONUNBUFFERED": "1", "TRAINSTACK_PROGRESS": "0", "OMP_NUM_THREADS": "1"})
    env.update(extra or {})
    return env


def command(args: Sequence[str], workers: int, torchrun: bool = False) -> list[str]:
    if workers == 1 and not torchrun:
        return [sys.executable, "-m", "trainstack.trainers.torch_ddp", *args]
    return torchrun_command(workers, "-m", "trainstack.trainers.torch_ddp", *args)


class Run:
    """A trainer launch in its own session, so a test can signal the whole process tree."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        workers: int,
        out: Path,
        env: dict[str, str],
        torchrun: bool = False,
    ) -> None:
        self.out = out
        self._log = out.open("w")
        self.proc = subprocess.Popen(
            command(args, workers, torchrun),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=trainer_env(env),
            cwd=REPO,
            start_new_session=True,
        )

    def records(self) -> list[Record]:
        out = []
        for line in self.out.read_text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out

    def wait_for(self, pred: Callable[[Record], bool], timeout: float = 60.0) -> Record:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in self.records():
                if pred(rec):
                    return rec
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no matching record; log:\n{self.out.read_text()[-3000:]}")

    def kill(self, sig: int) -> None:
        """SIGTERM goes to the launcher (torchrun forwards it, as a platform's signal would);
        SIGKILL goes to every process of the tree at once, like a VM or container dying."""
        if sig != signal.SIGKILL:
            os.kill(self.proc.pid, sig)
            return
        # torchrun starts each worker in a session of its own, so killpg would miss them.
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def wait(self, timeout: float = 120.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def done(self) -> Record | None:
        return next((r for r in self.records() if r.get("event") == "done"), None)


def run_to_end(
    args: Sequence[str],
    *,
    workers: int,
    out: Path,
    env: dict[str, str] | None = None,
    torchrun: bool = False,
) -> Record:
    run = Run(args, workers=workers, out=out, env=env or {}, torchrun=torchrun)
    code = run.wait()
    done = run.done()
    assert code == 0 and done is not None, out.read_text()[-4000:]
    return done


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A gcp-storage-emulator on a free local port with bucket `trainstack-test`."""
    with running_gcs_emulator("trainstack-test") as host:
        yield host

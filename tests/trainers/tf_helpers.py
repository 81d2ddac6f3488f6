"""Helpers for real TensorFlow trainer runs: the processes of a local run started one by one
(so a test can signal a single task), their JSON lines, and the in-TensorFlow probe."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.trainers.conftest import REPO, Record
from trainstack.trainers.common.cli import load_config
from trainstack.trainers.local import prepare_run

# Flags every TensorFlow test run shares: 2 workers x 32 (or 1 x 64) on the digits set.
TF_BASE = [
    "--framework=tensorflow",
    "--model=mlp",
    "--dataset=digits",
    "--global_batch_size=64",
    "--learning_rate=0.01",
    "--hidden_dim=64",
    "--seed=3",
]


def _task_name(env: dict[str, str]) -> str:
    if "TF_CONFIG" not in env:
        return "main"
    task = json.loads(env["TF_CONFIG"])["task"]
    return f"{task['type']}{task['index']}"


class TFRun:
    """`prepare_run`'s processes (what `trainstack local-run` and the local training job
    start), each in its own session with its own log file, named by task (`worker1`,
    `chief0`, `ps0`)."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        workers: int,
        root: Path,
        env: dict[str, str] | None = None,
        tag: str = "run",
    ) -> None:
        self.prepared = prepare_run(
            load_config(args), workers=workers, root=root, extra_env={"OMP_NUM_THREADS": "1"}
        )
        root.mkdir(parents=True, exist_ok=True)
        self.names = [_task_name(p.env) for p in self.prepared.processes]
        self.logs = {name: root / f"{tag}-{name}.log" for name in self.names}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for name, process in zip(self.names, self.prepared.processes, strict=True):
            with self.logs[name].open("w") as log:
                self.procs[name] = subprocess.Popen(
                    process.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**self.prepared.env, **process.env, **(env or {})},
                    cwd=REPO,
                    start_new_session=True,
                )

    def records(self, name: str | None = None) -> list[Record]:
        out: list[Record] = []
        for task in [name] if name else self.names:
            for line in self.logs[task].read_text().splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        out.append({**json.loads(line), "task": task})
        return out

    def tail(self) -> str:
        return "\n".join(
            f"--- {name}\n{self.logs[name].read_text()[-2500:]}" for name in self.names
        )

    def wait_for(self, pred: Callable[[Record], bool], timeout: float = 90.0) -> Record:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in self.records():
                if pred(rec):
                    return rec
            if any(p.poll() is not None for p in self.procs.values()):
                break
            time.sleep(0.05)
        raise AssertionError(f"no matching record\n{self.tail()}")

    def signal(self, name: str, sig: int) -> None:
        os.kill(self.procs[name].pid, sig)

    def wait(self, timeout: float = 120.0) -> dict[str, int]:
        """Exit codes by task; kills whatever is still running at the deadline."""
        deadline = time.monotonic() + timeout
        codes: dict[str, int] = {}
        try:
            for name, proc in self.procs.items():
                codes[name] = proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"tasks still running after {timeout}s\n{self.tail()}") from None
        finally:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return codes

    def done(self) -> Record | None:
        return next((r for r in self.records() if r.get("event") == "done"), None)


def train_step_at_least(step: int) -> Callable[[Record], bool]:
    def pred(rec: Record) -> bool:
        return rec.get("event") == "train" and rec.get("rank") == 0 and rec["step"] >= step

    return pred


def probe(*args: str, timeout: float = 120.0) -> dict[str, Any]:
    """Run `tests.trainers.tf_probe` (TensorFlow stays out of the pytest process)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.trainers.tf_probe", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"},
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result

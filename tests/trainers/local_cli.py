"""Helpers for `trainstack local-run` as a person runs it: the real CLI in a subprocess
(`python -m trainstack.infra.cli`), a bundled stack file copied with a private `local.root`, real
signals, and process checks through /proc."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.trainers.conftest import REPO, Record
from trainstack.trainers.common.signals import descendants

PROGRESS_LINE = re.compile(
    r"^(starting \d+ workers; log \S+"
    r"|resumed from step \d+"
    r"|step \d+/\d+(, loss \d+\.\d{4})?(, \d+ samples/s)?, \d+s elapsed)$"
)
"""The lines `local-run` prints on stderr while a run trains without a terminal."""


def stack_file(tmp_path: Path, stack: str) -> Path:
    """`stacks/Pulumi.<stack>.yaml` with `local.root` moved to `tmp_path/root`."""
    text = (REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    assert "  trainstack:local:\n    workers: 2\n" in text
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(
        text.replace(
            "  trainstack:local:\n    workers: 2\n",
            f"  trainstack:local:\n    workers: 2\n    root: {tmp_path / 'root'}\n",
        )
    )
    return path


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TF_CONFIG")}
    env.update({"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "COLUMNS": "60"})
    env.update(extra or {})
    return env


def local_run(
    config: Path, *args: str, env: dict[str, str] | None = None, session: bool = True
) -> subprocess.Popen[str]:
    """`trainstack local-run --config-file CONFIG ARGS` with stdout and stderr piped, in a
    session of its own (so a test can signal its process group, as a terminal would)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainstack.infra.cli",
            "local-run",
            "--config-file",
            str(config),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=config.parent,
        env=cli_env(env),
        start_new_session=session,
    )


def log_records(config: Path) -> list[Record]:
    run = config.name.split(".", 1)[1].rsplit(".", 1)[0]
    path = config.parent / "root" / "logs" / f"{run}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_record(
    config: Path, proc: subprocess.Popen[str], pred: Callable[[Record], bool], timeout: float
) -> Record:
    """The first record of the run's log that matches `pred` (the CLI writes the log line by
    line as the workers print)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = next((r for r in log_records(config) if pred(r)), None)
        if found is not None:
            return found
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"local-run exited {proc.returncode}:\n{out}\n{err}")
        time.sleep(0.1)
    raise AssertionError(f"no matching record within {timeout}s: {log_records(config)[-5:]}")


def rank0_train(record: Record, min_step: int = 1) -> bool:
    return bool(
        record.get("event") == "train" and record.get("rank") == 0 and record["step"] >= min_step
    )


def alive(pid: int) -> bool:
    """`pid` runs (a zombie, dead but not yet reaped, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def tree(pid: int) -> list[int]:
    """`pid`'s descendants (torchrun, its workers, TensorFlow tasks)."""
    return descendants(pid)


def wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Poll until every pid is gone or `timeout` passes; returns those still alive."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


def kill_all(pids: Sequence[int]) -> None:
    """Clean up after a failed assertion: no test leaves processes behind."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def finish(proc: subprocess.Popen[str], timeout: float = 240.0) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def interrupted_line(step: int) -> str:
    return (
        f"interrupted at step {step}; checkpoint step-{step:08d} saved; run the same command "
        "to resume"
    )


def preempted_step(config: Path) -> int:
    (record,) = [
        r for r in log_records(config) if r.get("event") == "preempted" and r.get("rank") == 0
    ]
    step: Any = record["step"]
    return int(step)

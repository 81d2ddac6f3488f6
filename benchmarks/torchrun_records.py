"""What the CPU benchmarks share: run a target under `torchrun` with N local workers, in a
clean environment, and return the JSON records it printed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from trainstack.trainers.local import torchrun_command

REPO = Path(__file__).resolve().parents[1]


def benchmark_env() -> dict[str, str]:
    """This environment less any torchrun variables a caller left set, one thread a worker."""
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "TRAINSTACK_PROGRESS": "0", "OMP_NUM_THREADS": "1"})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def torchrun_records(workers: int, target: list[str]) -> list[dict[str, Any]]:
    """Run `target` under torchrun with `workers` processes; the JSON lines it printed."""
    cmd = torchrun_command(workers, *target)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=benchmark_env(), cwd=REPO, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

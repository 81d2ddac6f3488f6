"""The node launcher for real: simulated GPUs become torchrun processes, and a SIGTERM to the
machine's one launcher checkpoints every rank and ends in exit 143."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trainstack.trainers.common.checkpoint import CheckpointStore

pytestmark = pytest.mark.trainer

REPO = Path(__file__).resolve().parents[2]
ARGS = [
    "--model=mlp",
    "--dataset=synthetic",
    "--synthetic_samples=512",
    "--hidden_dim=32",
    "--steps=400",
    "--global_batch_size=32",
    "--log_every=1",
    "--checkpoint_every=1000",
]


def test_sigterm_to_the_launcher_checkpoints_and_exits_143(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "TRAINSTACK_SIMULATED_ACCELERATORS": "2",
        "TRAINSTACK_TEST_STEP_DELAY_S": "0.05",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainstack.trainers.node",
            "trainstack.trainers.torch_ddp",
            *ARGS,
            f"--checkpoint_dir={ckpt}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("{"):
            records.append(json.loads(line))
            rec = records[-1]
            if rec.get("event") == "train" and rec.get("rank") == 0 and rec["step"] >= 3:
                proc.send_signal(signal.SIGTERM)
                break
        assert time.monotonic() < deadline, "no training step within 120 s"
    records += [json.loads(line) for line in proc.stdout if line.startswith("{")]
    code = proc.wait(60)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert code == 143, stderr[-3000:]
    starts = [r for r in records if r.get("event") == "start"]
    assert sorted((r["rank"], r["world_size"], r["platform"]) for r in starts) == [
        (0, 2, "torchrun"),
        (1, 2, "torchrun"),
    ]
    preempted = [r for r in records if r.get("event") == "preempted"]
    assert {r["rank"] for r in preempted} == {0, 1}
    [step] = {r["step"] for r in preempted}
    assert CheckpointStore(str(ckpt), keep=2).complete_steps() == [step]
    assert stderr.splitlines()[-1] == "trainstack-node: exit 143 (target exit 1)"

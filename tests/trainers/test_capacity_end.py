"""The end of a flex-start machine's capacity (`TRAINSTACK_DEADLINE`,
`trainstack.trainers.common.deadline`), for real: the node launcher runs the bundled torch
trainer as two gloo processes under torchrun (two simulated GPUs) with the deadline a few
seconds past the margin. Every rank stops at the same step, the checkpoint of that step is
committed, the launcher exits 6 and records `capacity_ended` with that step; a launcher
started again on the same machine holds instead of training; a new machine resumes from the
step. Your own code gets SIGTERM from the launcher at the margin (the run contract) and ends
the same way. About 35 s here."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trainstack.trainers.common.checkpoint import newest_marked
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S

pytestmark = pytest.mark.trainer

REPO = Path(__file__).resolve().parents[2]
STEPS = 200
MARGIN_S = 30
ARGS = [
    "--model=mlp",
    "--dataset=synthetic",
    "--synthetic_samples=512",
    "--hidden_dim=32",
    f"--steps={STEPS}",
    "--global_batch_size=32",
    "--log_every=1",
    "--checkpoint_every=1000",
    f"--deadline_margin_s={MARGIN_S}",
]


def _launch(
    tmp: Path, prefix: Path, deadline: int | None, delay: str, *argv: str
) -> subprocess.Popen[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "TRAINSTACK_SIMULATED_ACCELERATORS": "2",
        "TRAINSTACK_TEST_STEP_DELAY_S": delay,
        "TRAINSTACK_RUN_RECORD": str(prefix),
        "TRAINSTACK_RUN_FINAL_CODES": "1 2 5",
    }
    if deadline is not None:
        env["TRAINSTACK_DEADLINE"] = str(deadline)
    if not argv:
        argv = ("trainstack.trainers.torch_ddp", *ARGS, f"--checkpoint_dir={tmp / 'ckpt'}")
    return subprocess.Popen(
        [sys.executable, "-m", "trainstack.trainers.node", *argv],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _ended(prefix: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(Path(f"{prefix}.ended").read_text())
    record.pop("time")
    return record


def test_the_torch_trainer_saves_before_the_deadline_and_the_run_ends_capacity_ended(
    tmp_path: Path,
) -> None:
    prefix = tmp_path / "trainstack-run-0123"
    # The stop time (deadline less the margin) 4 s away; 200 slow steps take 10 s and more.
    deadline = int(time.time()) + MARGIN_S + 4
    proc = _launch(tmp_path, prefix, deadline, "0.05")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 6, err[-3000:]
    records = _records(out)
    ended = [r for r in records if r.get("event") == "capacity_ended"]
    assert sorted(r["rank"] for r in ended) == [0, 1]
    [step] = {r["step"] for r in ended}
    assert 0 < step < STEPS
    assert {(r["checkpoint_step"], r["deadline"], r["margin_s"]) for r in ended} == {
        (step, deadline, MARGIN_S)
    }
    saves = [r for r in records if r.get("event") == "checkpoint" and r.get("rank") == 0]
    assert [(r["step"], r["reason"]) for r in saves] == [(step, "capacity_ended")]
    assert newest_marked(str(tmp_path / "ckpt"), strict=True) == (step, f"step-{step:08d}")
    assert not [r for r in records if r.get("event") in ("done", "preempted")]
    assert _ended(prefix) == {"outcome": "capacity_ended", "step": step, "node_rank": 0}
    assert err.splitlines()[-1] == "trainstack-node: exit 6 (target exit 1)"

    # Started again on the same machine (a replaced pod, a restarted unit): it holds, trains
    # nothing, and leaves with 6 when the platform stops it.
    again = _launch(tmp_path, prefix, deadline, "0")
    time.sleep(3)
    assert again.poll() is None
    again.send_signal(signal.SIGTERM)
    out, err = again.communicate(timeout=30)
    assert again.returncode == 6, err
    assert out == ""
    assert err.splitlines()[-1].startswith(
        f"trainstack-node: this machine's capacity ends at {_iso(deadline)} "
        f"(TRAINSTACK_DEADLINE), less than {MARGIN_S} s from now: not starting the target"
    )

    # New capacity (no deadline near): the run resumes from the step and finishes.
    fresh = _launch(tmp_path, prefix, None, "0")
    out, err = fresh.communicate(timeout=120)
    assert fresh.returncode == 0, err[-3000:]
    assert {r["step"] for r in _records(out) if r.get("event") == "start"} == {step}
    assert _ended(prefix) == {"outcome": "done", "node_rank": 0}


def _iso(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# Your code: saves on SIGTERM (here: a line saying so) and exits 143, as the contract asks.
OWN_CODE = (
    "import json, os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (print(json.dumps({'event': 'checkpoint', "
    "'step': 12, 'rank': 0}), flush=True), sys.exit(143)))\n"
    "print(json.dumps({'event': 'deadline', 'at': os.environ['TRAINSTACK_DEADLINE']}), "
    "flush=True)\n"
    "time.sleep(60)\n"
)


def test_your_code_gets_the_deadline_and_sigterm_at_the_margin(tmp_path: Path) -> None:
    prefix = tmp_path / "trainstack-run-0123"
    deadline = int(time.time()) + int(DEFAULT_MARGIN_S) + 2
    own = ("--launcher=node", "--", sys.executable, "-c", OWN_CODE)
    proc = _launch(tmp_path, prefix, deadline, "0", *own)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 6, err
    records = _records(out)
    assert [r for r in records if r.get("event") == "deadline"] == [
        {"event": "deadline", "at": str(deadline)}
    ]
    assert (
        f"trainstack-node: this machine's capacity ends at {_iso(deadline)} "
        "(TRAINSTACK_DEADLINE); stopping the target 600 s before it"
    ) in err.splitlines()
    assert _ended(prefix) == {"outcome": "capacity_ended", "step": 12, "node_rank": 0}

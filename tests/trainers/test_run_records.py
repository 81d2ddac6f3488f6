"""The run's end record and the supervisor's stop request (trainstack.trainers.common.
run_records): the rules, and the node launcher for real (two simulated GPUs under torchrun,
about 25 s): a stop request checkpoints and stops the run with exit 143 and a `stopped`
record; a launcher started while the request stands holds, and trains to the end once it is
withdrawn, recording `done`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trainstack.trainers.common.checkpoint import newest_marked
from trainstack.trainers.common.run_records import RunRecords

pytestmark = pytest.mark.trainer

REPO = Path(__file__).resolve().parents[2]
ARGS = [
    "--model=mlp",
    "--dataset=synthetic",
    "--synthetic_samples=512",
    "--hidden_dim=32",
    "--steps=200",
    "--global_batch_size=32",
    "--log_every=1",
    "--checkpoint_every=1000",
]


def test_what_each_exit_records() -> None:
    records = RunRecords("gs://b/trainstack-run-k", frozenset({1, 2, 5}))
    stop = {"reason": "max_total_usd"}
    assert records.end_record(0, 0, None) == {"outcome": "done", "node_rank": 0}
    assert records.end_record(0, 1, None) is None  # rank 0 speaks for a finished run
    assert records.end_record(143, 0, stop) == {
        "outcome": "stopped",
        "reason": "max_total_usd",
        "node_rank": 0,
    }
    assert records.end_record(143, 1, stop) is None
    assert records.end_record(1, 1, None) == {
        "outcome": "failed",
        "stage": "trainer",
        "exit": 1,
        "reason": "the trainer exited 1 (an error in the code; the log has its traceback)",
        "node_rank": 1,
    }
    assert records.end_record(5, 2, None) == {
        "outcome": "failed",
        "stage": "trainer",
        "exit": 5,
        "reason": "the node launcher exited 5 (this machine has fewer accelerators than the "
        "plan bought)",
        "node_rank": 2,
    }
    # Any node whose machine's capacity ends records it, with the checkpoint's step.
    assert records.end_record(6, 1, None, 40) == {
        "outcome": "capacity_ended",
        "step": 40,
        "node_rank": 1,
    }
    assert records.end_record(6, 0, None) == {
        "outcome": "capacity_ended",
        "step": None,
        "node_rank": 0,
    }
    assert records.end_record(143, 0, None) is None  # preempted: the run goes on
    assert records.end_record(4, 0, None) is None  # a lost peer: restarted
    assert (records.end_uri, records.stop_uri) == (
        "gs://b/trainstack-run-k.ended",
        "gs://b/trainstack-run-k.stop",
    )


def test_from_env() -> None:
    assert RunRecords.from_env({}) is None
    records = RunRecords.from_env(
        {"TRAINSTACK_RUN_RECORD": "gs://b/r", "TRAINSTACK_RUN_FINAL_CODES": "1 2 5"}
    )
    assert records is not None and records.final_codes == frozenset({1, 2, 5})
    with pytest.raises(ValueError, match=r"^TRAINSTACK_RUN_FINAL_CODES: 'x' is not a list of"):
        RunRecords.from_env(
            {"TRAINSTACK_RUN_RECORD": "gs://b/r", "TRAINSTACK_RUN_FINAL_CODES": "x"}
        )


def test_the_heartbeat_is_written_at_once_and_again_until_stopped(tmp_path: Path) -> None:
    records = RunRecords(str(tmp_path / "trainstack-run-k"), frozenset(), heartbeat_s=0.05)
    logged: list[str] = []
    beating = records.heartbeat(3, logged.append)
    alive = tmp_path / "trainstack-run-k.alive" / "3"
    deadline = time.monotonic() + 10
    while not alive.exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    first = json.loads(alive.read_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first.pop("time"))
    assert first == {"node_rank": 3, "stage": "trainer"}
    beating.set()
    assert records.alive_uri(3) == f"{tmp_path}/trainstack-run-k.alive/3"
    assert logged == []


def test_a_heartbeat_that_cannot_be_written_is_logged_once(tmp_path: Path) -> None:
    blocked = tmp_path / "trainstack-run-k.alive"
    blocked.write_text("a file where the folder goes")
    records = RunRecords(str(tmp_path / "trainstack-run-k"), frozenset(), heartbeat_s=0.01)
    logged: list[str] = []
    beating = records.heartbeat(0, logged.append)
    time.sleep(0.3)
    beating.set()
    assert [line.split(":", 1)[0] for line in logged] == [
        f"could not write the heartbeat {blocked}/0"
    ]


def _launch(tmp: Path, prefix: Path, delay: str) -> subprocess.Popen[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "TRAINSTACK_SIMULATED_ACCELERATORS": "2",
        "TRAINSTACK_TEST_STEP_DELAY_S": delay,
        "TRAINSTACK_RUN_RECORD": str(prefix),
        "TRAINSTACK_RUN_FINAL_CODES": "1 2 5",
        "TRAINSTACK_RUN_STOP_POLL_S": "0.2",
    }
    argv = [sys.executable, "-m", "trainstack.trainers.node", "trainstack.trainers.torch_ddp"]
    argv += [*ARGS, f"--checkpoint_dir={tmp / 'ckpt'}"]
    return subprocess.Popen(
        argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _records(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_a_stop_request_saves_and_stops_and_holds_a_restart(tmp_path: Path) -> None:
    prefix = tmp_path / "trainstack-run-0123"
    stop, ended = Path(f"{prefix}.stop"), Path(f"{prefix}.ended")
    proc = _launch(tmp_path, prefix, "0.05")
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        seen.append(line)
        rec = json.loads(line) if line.startswith("{") else {}
        if rec.get("event") == "train" and rec.get("rank") == 0 and rec["step"] >= 3:
            stop.write_text(json.dumps({"reason": "max_total_usd", "time": "x"}))
            break
        assert time.monotonic() < deadline, "no training step within 120 s"
    seen += list(proc.stdout)
    assert proc.wait(60) == 143, (proc.stderr.read() if proc.stderr else "")[-3000:]
    [step] = {r["step"] for r in _records(seen) if r.get("event") == "preempted"}
    assert newest_marked(str(tmp_path / "ckpt")) == (step, f"step-{step:08d}")
    record = json.loads(ended.read_text())
    assert {k: v for k, v in record.items() if k != "time"} == {
        "outcome": "stopped",
        "reason": "max_total_usd",
        "node_rank": 0,
    }

    # Started again while the request stands (a restarted unit): it holds, trains nothing.
    again = _launch(tmp_path, prefix, "0")
    time.sleep(3)
    assert again.poll() is None
    stop.unlink()  # withdrawn: it trains on from the checkpoint to the end
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-3000:]
    assert "holding: the supervisor asked this run to stop (max_total_usd)" in err
    starts = [r for r in _records(out.splitlines()) if r.get("event") == "start"]
    assert {r["step"] for r in starts} == {step}
    done = json.loads(ended.read_text())
    assert {k: v for k, v in done.items() if k != "time"} == {"outcome": "done", "node_rank": 0}
    # The node's heartbeat while its trainer ran (the supervisor's sign of life).
    beat = json.loads(Path(f"{prefix}.alive/0").read_text())
    assert {k: v for k, v in beat.items() if k != "time"} == {"node_rank": 0, "stage": "trainer"}

"""A checkpoint the storage refuses, and checkpoints left broken, in real trainer processes.

The full disk is simulated for real without root or a small filesystem: once the payload of
step 10 is written (inside the `TRAINSTACK_TEST_SLOW_CKPT` pause before the commit), the
test lowers the running trainer's file size limit to 0 (`prlimit(2)` on `RLIMIT_FSIZE`, allowed
on one's own processes). From then on every write that would grow a file fails with EFBIG
("File too large"), as every write fails with ENOSPC on a full disk: the commit's marker
write is refused after the payload, the moment a full disk left an empty `COMPLETE` marker
before. Pipes have no size, so the trainer's stdout and stderr still reach the test.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.trainers.conftest import REPO, trainer_env
from tests.trainers.local_cli import finish, local_run, log_records, tree, wait_for_record
from tests.trainers.test_run_state import TORCH_ARGS
from trainstack.trainers.common.checkpoint import MARKER, CheckpointStore
from trainstack.trainers.common.checkpoint_marker import crc32c_of

pytestmark = pytest.mark.trainer

SLOW_CKPT = {"TRAINSTACK_TEST_SLOW_CKPT": "3"}


def _fill_disk(pids: list[int]) -> None:
    """Every later write that grows a file fails in these processes (EFBIG)."""
    for pid in pids:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, 0))


def _stack(tmp_path: Path, **trainer: object) -> Path:
    """`Pulumi.state.yaml` in `tmp_path`, its local root `tmp_path/root` (where
    `tests.trainers.local_cli` reads the log): 2 workers, checkpoints every 5 steps."""
    settings = {
        "model": "mlp",
        "dataset": "synthetic",
        "synthetic_samples": 256,
        "hidden_dim": 16,
        "global_batch_size": 16,
        "checkpoint_every": 5,
        "log_every": 5,
        **trainer,
    }
    config = {
        "config": {
            "trainstack:local": {"workers": 2, "root": str(tmp_path / "root")},
            "trainstack:trainer": settings,
        }
    }
    path = tmp_path / "Pulumi.state.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _records(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _trainer(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainstack.trainers.torch_ddp", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=trainer_env({"PYTHONPATH": str(REPO), **(env or {})}),
    )


def test_a_full_disk_at_the_commit_is_one_line_and_the_rerun_resumes_the_step_before(
    tmp_path: Path,
) -> None:
    """About 15 s: one trainer process stopped by the full disk, then a rerun."""
    ckpt = tmp_path / "ckpt"
    args = [*TORCH_ARGS, f"--checkpoint_dir={ckpt}", "--steps=15"]
    proc = _trainer(args, SLOW_CKPT)
    assert proc.stdout is not None
    for line in proc.stdout:
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("event") == "checkpoint_begin" and record.get("step") == 10:
            break
    time.sleep(1.0)  # the payload is written; the commit waits out the 3 s pause
    _fill_disk([proc.pid])
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (
        2,
        f"trainstack trainer: checkpoint step 10 could not be written to {ckpt}: File too large\n",
    )
    failed = [r for r in _records(out) if r["event"] == "failed"]
    assert [(r["step"], r["error"], r["exit_code"]) for r in failed] == [
        (10, f"checkpoint step 10 could not be written to {ckpt}: File too large", 2)
    ]
    # Step 10 never became a checkpoint: its temporary folder is all that is left of it.
    names = sorted(p.name for p in ckpt.iterdir())
    assert names[0] == "step-00000005"
    assert re.fullmatch(r"step-00000010\.tmp-[0-9a-f]{12}", names[1]), names
    assert len(names) == 2
    assert CheckpointStore(str(ckpt), keep=1).complete_steps() == [5]

    rerun = _trainer(args)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    records = _records(out)
    assert [r["step"] for r in records if r["event"] == "resume"] == [5]
    assert [r for r in records if r["event"] == "checkpoint_skipped"] == []
    assert [r["step"] for r in records if r["event"] == "done"] == [15]
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "step-00000005",
        "step-00000010",
        "step-00000015",
    ]


def test_a_truncated_state_file_is_passed_over_on_every_retry(tmp_path: Path) -> None:
    """About 10 s: a checkpoint whose `state.pt` was cut short under an intact marker (a
    copy or a disk that lost its tail) is said and passed over, not loaded."""
    ckpt = tmp_path / "ckpt"
    args = [*TORCH_ARGS, f"--checkpoint_dir={ckpt}"]
    first = _trainer([*args, "--steps=10"])
    assert first.wait(timeout=300) == 0
    state = ckpt / "step-00000010" / "state.pt"
    size = state.stat().st_size
    state.write_bytes(state.read_bytes()[: size // 2])
    rerun = _trainer([*args, "--steps=15"])
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    records = _records(out)
    skipped = [
        {k: r[k] for k in ("step", "path", "reason", "resumed_from", "rank")}
        for r in records
        if r["event"] == "checkpoint_skipped"
    ]
    assert skipped == [
        {
            "step": 10,
            "path": f"{ckpt}/step-00000010",
            "reason": f"state.pt holds {size // 2} bytes where its {MARKER} marker records {size}",
            "resumed_from": 5,
            "rank": 0,
        }
    ]
    assert [r["step"] for r in records if r["event"] == "resume"] == [5]
    assert [r["step"] for r in records if r["event"] == "done"] == [15]


def test_a_state_file_damaged_at_the_same_size_is_passed_over(tmp_path: Path) -> None:
    """About 10 s: the attack's damage (100 kB zeroed at offset 2,000,000 of a bigger state,
    the tail overwritten, the size kept) crashed every start with torch's "PytorchStreamReader
    failed reading zip archive"; the marker's CRC32C passes it over instead."""
    ckpt = tmp_path / "ckpt"
    args = [*TORCH_ARGS, f"--checkpoint_dir={ckpt}", "--hidden_dim=512"]
    first = _trainer([*args, "--steps=10"])
    assert first.wait(timeout=300) == 0
    state = ckpt / "step-00000010" / "state.pt"
    data = bytearray(state.read_bytes())
    assert len(data) > 2_100_000
    data[2_000_000:2_100_000] = b"\0" * 100_000
    data[-500:] = b"\xff" * 500
    state.write_bytes(bytes(data))
    recorded = json.loads((ckpt / "step-00000010" / MARKER).read_text())["crc32c"]["state.pt"]
    found = crc32c_of([bytes(data)])
    rerun = _trainer([*args, "--steps=15"])
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    records = _records(out)
    skipped = [
        {k: r[k] for k in ("step", "path", "reason", "resumed_from")}
        for r in records
        if r["event"] == "checkpoint_skipped"
    ]
    assert skipped == [
        {
            "step": 10,
            "path": f"{ckpt}/step-00000010",
            "reason": f"state.pt's content changed since it was saved (CRC32C {found} where "
            f"its {MARKER} marker records {recorded})",
            "resumed_from": 5,
        }
    ]
    assert [r["step"] for r in records if r["event"] == "resume"] == [5]
    assert [r["step"] for r in records if r["event"] == "done"] == [15]


def test_local_run_stops_every_worker_on_a_full_disk_with_one_line(tmp_path: Path) -> None:
    """About 30 s: `trainstack local-run` with 2 torchrun workers; the disk fills under both
    workers during step 10's save. Every rank stops with exit 2 together (rank 0's refusal
    goes to the others with the save's own collective), and local-run ends with the one line
    rank 0 logged, exit 2; `status` says the run failed and names step 5; the same command
    then resumes from step 5."""
    config = _stack(tmp_path, steps=15)
    ckpt = tmp_path / "root" / "checkpoints" / "state"
    proc = local_run(config, env=SLOW_CKPT)
    wait_for_record(
        config,
        proc,
        lambda r: r.get("event") == "checkpoint_begin" and r.get("step") == 10,
        timeout=180,
    )
    time.sleep(1.0)
    workers = [
        pid
        for pid in tree(proc.pid)
        if "trainstack.trainers.torch_ddp" in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        and "torch.distributed.run" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    ]
    assert len(workers) == 2
    _fill_disk(workers)
    code, _, err = finish(proc)
    error = f"checkpoint step 10 could not be written to {ckpt}: File too large"
    assert (code, err.splitlines()[-1]) == (2, f"error: {error}")
    assert "Traceback" not in err
    records = log_records(config)
    assert [r["error"] for r in records if r.get("event") == "failed"] == [error]
    assert records[-1] == {"event": "exit", "exit_code": 2}

    status = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "status", "--config-file", str(config)],
        capture_output=True,
        text=True,
        cwd=config.parent,
        env=trainer_env({"PYTHONPATH": str(REPO)}),
        timeout=120,
        check=False,
    )
    assert status.stdout.splitlines()[1:4] == [
        "state: FAILED",
        "step: 10",
        f"checkpoint: step 5 ({ckpt}/step-00000005)",
    ]
    code, _, err = finish(local_run(config))
    assert code == 0, err
    records = log_records(config)
    assert [r["step"] for r in records if r.get("event") == "resume" and r["rank"] == 0] == [5]


def test_tensorflow_passes_over_a_truncated_checkpoint(tmp_path: Path) -> None:
    """About 30 s: the TensorFlow trainer (mirrored, one CPU replica) reads the same marker:
    a data file shorter than recorded is said and passed over."""
    ckpt = tmp_path / "ckpt"
    args = [
        "--framework=tensorflow",
        "--strategy=mirrored",
        *TORCH_ARGS,
        f"--checkpoint_dir={ckpt}",
    ]
    env = {"TRAINSTACK_TF_CPU_REPLICAS": "1"}

    def tf_run(*extra: str) -> tuple[int, str, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "trainstack.trainers.tf_multiworker", *args, *extra],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=trainer_env({"PYTHONPATH": str(REPO), **env}),
            timeout=300,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    code, _, err = tf_run("--steps=10")
    assert code == 0, err[-2000:]
    (data,) = (ckpt / "step-00000010").glob("ckpt.data-*")
    size = data.stat().st_size
    data.write_bytes(data.read_bytes()[:10])
    code, out, err = tf_run("--steps=15")
    assert code == 0, err[-2000:]
    records = _records(out)
    assert [
        (r["step"], r["reason"], r["resumed_from"])
        for r in records
        if r["event"] == "checkpoint_skipped"
    ] == [(10, f"{data.name} holds 10 bytes where its {MARKER} marker records {size}", 5)]
    assert [r["step"] for r in records if r["event"] == "resume"] == [5]
    assert [r["step"] for r in records if r["event"] == "done"] == [15]

"""A run resumes only its own state: real trainer runs, then reruns under changed settings.

A changed `learning_rate` is refused with exit 2 naming it (the trainer's own check, torch
and TensorFlow, and `trainstack local-run`'s check before anything starts); a changed
`steps` resumes; `local-run --workers N --fresh` with a batch N does not divide exits 2 on
one line and deletes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.trainers.conftest import REPO, trainer_env
from tests.trainers.local_cli import cli_env
from trainstack.trainers.common.checkpoint import MARKER, CheckpointStore
from trainstack.trainers.common.checkpoint_marker import crc32c_of
from trainstack.trainers.common.fingerprint import FINGERPRINT_FIELD, STATE_KEYS

pytestmark = pytest.mark.trainer

TORCH_ARGS = [
    "--model=mlp",
    "--dataset=synthetic",
    "--synthetic_samples=256",
    "--hidden_dim=16",
    "--global_batch_size=16",
    "--checkpoint_every=5",
    "--log_every=5",
]


def _trainer(module: str, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=trainer_env({"PYTHONPATH": str(REPO), **(env or {})}),
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stderr


def _done(stdout_or_records: list[dict[str, object]]) -> dict[str, object]:
    return next(r for r in stdout_or_records if r.get("event") == "done")


def _refusal(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "written with other settings" in line]
    assert len(lines) == 1, stderr
    return lines[0]


def test_torch_trainer_refuses_changed_learning_rate_and_resumes_changed_steps(
    tmp_path: Path,
) -> None:
    """About 10 s: three single-process runs of the torch trainer on one folder."""
    ckpt = tmp_path / "ckpt"
    args = [*TORCH_ARGS, f"--checkpoint_dir={ckpt}"]
    code, stderr = _trainer("trainstack.trainers.torch_ddp", [*args, "--steps=10"])
    assert code == 0, stderr
    marker = json.loads((ckpt / "step-00000010" / MARKER).read_text())
    assert sorted(marker[FINGERPRINT_FIELD]["settings"]) == sorted(STATE_KEYS)
    assert marker[FINGERPRINT_FIELD]["settings"]["learning_rate"] == 0.001

    code, stderr = _trainer(
        "trainstack.trainers.torch_ddp", [*args, "--steps=10", "--learning_rate=0.01"]
    )
    assert code == 2
    line = _refusal(stderr)
    assert f"checkpoint step 10 in {ckpt} was written with other settings " in line
    assert "(learning_rate: 0.001 -> 0.01)" in line
    assert "set a new trainer.run_name" in line and f"fresh by deleting {ckpt}" in line
    assert CheckpointStore(str(ckpt), keep=1).complete_steps() == [5, 10]

    out = tmp_path / "resume.jsonl"
    with out.open("w") as sink:
        resumed = subprocess.run(
            [sys.executable, "-m", "trainstack.trainers.torch_ddp", *args, "--steps=15"],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=trainer_env({"PYTHONPATH": str(REPO)}),
            timeout=300,
            check=False,
        )
    assert resumed.returncode == 0, resumed.stderr
    records = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]
    assert _done(records)["step"] == 15


def test_node_launcher_refuses_before_torchrun_starts(tmp_path: Path) -> None:
    """torchrun would restart a worker that exits 2 and report 1: the node launcher (every
    cloud target's) checks the newest checkpoint first and exits 2 itself."""
    ckpt = tmp_path / "ckpt"
    args = [*TORCH_ARGS, f"--checkpoint_dir={ckpt}", "--steps=5"]
    assert _trainer("trainstack.trainers.torch_ddp", args)[0] == 0
    code, stderr = _trainer(
        "trainstack.trainers.node",
        ["trainstack.trainers.torch_ddp", *args, "--learning_rate=0.01"],
        {"TRAINSTACK_SIMULATED_ACCELERATORS": "2"},
    )
    assert code == 2
    line = _refusal(stderr)
    assert line.startswith(f"trainstack-node: checkpoint step 5 in {ckpt} was written with")
    assert "(learning_rate: 0.001 -> 0.01)" in line
    assert "torch.distributed.run" not in stderr  # torchrun never started


def test_torch_trainer_refuses_a_checkpoint_without_fingerprint(tmp_path: Path) -> None:
    """A checkpoint committed before fingerprints were recorded is not resumed blindly."""
    ckpt = tmp_path / "ckpt"
    args = [*TORCH_ARGS, f"--checkpoint_dir={ckpt}", "--steps=5"]
    assert _trainer("trainstack.trainers.torch_ddp", args)[0] == 0
    marker = ckpt / "step-00000005" / MARKER
    marker.write_text(json.dumps({"step": 5, "committed_at": 1.0}))
    code, stderr = _trainer("trainstack.trainers.torch_ddp", [*args[:-1], "--steps=10"])
    assert code == 2
    assert (
        f"checkpoint step 5 in {ckpt} records no settings fingerprint (written before "
        "trainstack recorded one), so it cannot be resumed safely; set a new "
        "trainer.run_name" in stderr
    )


def _stack(tmp_path: Path, folder: str, **trainer: object) -> Path:
    """`<folder>/Pulumi.state.yaml`: every variant is stack `state`, so one run folder."""
    config = {
        "config": {
            "trainstack:environment": "dev",
            "trainstack:local": {"workers": 2, "root": str(tmp_path / "root")},
            "trainstack:trainer": {
                "model": "mlp",
                "dataset": "synthetic",
                "synthetic_samples": 256,
                "hidden_dim": 16,
                "steps": 10,
                "global_batch_size": 16,
                "checkpoint_every": 5,
                "log_every": 5,
                "learning_rate": 0.001,
                **trainer,
            },
        }
    }
    path = tmp_path / folder / "Pulumi.state.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    return path


def _local_run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.infra.cli",
            "local-run",
            "--config-file",
            str(config),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=config.parent,
        env=cli_env(),
        timeout=300,
        check=False,
    )


def test_local_run_checks_before_it_starts_or_deletes(tmp_path: Path) -> None:
    """About 20 s: `trainstack local-run` (2 torchrun workers) as a person runs it."""
    config = _stack(tmp_path, "first")
    first = _local_run(config)
    assert first.returncode == 0, first.stderr
    ckpt = tmp_path / "root" / "checkpoints" / "state"
    store = CheckpointStore(str(ckpt), keep=1)
    assert store.complete_steps() == [5, 10]

    # The batch of 16 does not split over 3 workers: refused before --fresh deletes anything.
    fresh = _local_run(config, "--workers", "3", "--fresh")
    assert fresh.returncode == 2
    assert fresh.stderr.strip().splitlines() == [
        "error: stack 'state': trainer.global_batch_size: 16 is not divisible by the world "
        "size 3 (3 local processes); valid: 15 or 18"
    ]
    assert store.complete_steps() == [5, 10]

    log = tmp_path / "root" / "logs" / "state.jsonl"
    logged = log.read_text()
    changed = _stack(tmp_path, "changed", learning_rate=0.01)
    refused = _local_run(changed)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: checkpoint step 10 in {ckpt} was written with other settings")
    assert "(learning_rate: 0.001 -> 0.01)" in line
    assert store.complete_steps() == [5, 10]
    assert log.read_text() == logged  # nothing started

    resumed = _local_run(config, "--steps", "15")
    assert resumed.returncode == 0, resumed.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records if r.get("event") == "resume" and r["rank"] == 0] == [10]
    assert [r["step"] for r in records if r.get("event") == "done" and r["rank"] == 0] == [10, 15]

    # Starting fresh under the new settings is the other way on.
    restarted = _local_run(changed, "--fresh")
    assert restarted.returncode == 0, restarted.stderr
    saved = json.loads((ckpt / "step-00000010" / MARKER).read_text())
    assert saved[FINGERPRINT_FIELD]["settings"]["learning_rate"] == 0.01


def test_local_run_passes_over_a_checkpoint_a_full_disk_left_broken(tmp_path: Path) -> None:
    """About 25 s: step 10's marker is empty, as a full disk left it before markers were
    written whole. `status` names step 5, `local-run` says in one line which step it passes
    over and why and resumes from step 5 (before: refused as "written before trainstack
    recorded one", with `--fresh` as the way on, which deletes step 5 too)."""
    config = _stack(tmp_path, "broken")
    assert _local_run(config).returncode == 0
    ckpt = tmp_path / "root" / "checkpoints" / "state"
    (ckpt / "step-00000010" / MARKER).write_bytes(b"")
    status = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "status", "--config-file", str(config)],
        capture_output=True,
        text=True,
        cwd=config.parent,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert status.stdout.splitlines()[3] == f"checkpoint: step 5 ({ckpt}/step-00000005)"
    resumed = _local_run(config, "--steps", "15")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.splitlines()[0] == (
        f"checkpoint {ckpt}/step-00000010 skipped: its COMPLETE marker is empty (a write cut "
        "short, e.g. by a full disk); resuming from step 5"
    )
    records = [
        json.loads(line)
        for line in (tmp_path / "root" / "logs" / "state.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r.get("event") == "resume" and r["rank"] == 0] == [5]
    assert [
        (r["step"], r["resumed_from"]) for r in records if r.get("event") == "checkpoint_skipped"
    ] == [(10, 5)]
    assert CheckpointStore(str(ckpt), keep=1).complete_steps() == [5, 10, 15]


def test_local_run_passes_over_a_state_file_damaged_at_the_same_size(tmp_path: Path) -> None:
    """About 25 s: the attack's repro under `local-run` (2 torchrun workers): step 10's
    state.pt has 100 kB zeroed at offset 2,000,000 and its tail overwritten, its size kept.
    Before, every start failed on both ranks with "PytorchStreamReader failed reading zip
    archive" (exit 1); now one line says which step is passed over and why, the run resumes
    from step 5, and the new save of step 10 replaces the damaged one."""
    config = _stack(tmp_path, "damaged", hidden_dim=512)
    assert _local_run(config).returncode == 0
    ckpt = tmp_path / "root" / "checkpoints" / "state"
    state = ckpt / "step-00000010" / "state.pt"
    data = bytearray(state.read_bytes())
    assert len(data) > 2_100_000
    data[2_000_000:2_100_000] = b"\0" * 100_000
    data[-500:] = b"\xff" * 500
    state.write_bytes(bytes(data))
    recorded = json.loads((ckpt / "step-00000010" / MARKER).read_text())["crc32c"]["state.pt"]
    found = crc32c_of([bytes(data)])
    resumed = _local_run(config, "--steps", "15")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.splitlines()[0] == (
        f"checkpoint {ckpt}/step-00000010 skipped: state.pt's content changed since it was "
        f"saved (CRC32C {found} where its {MARKER} marker records {recorded}); resuming from "
        "step 5"
    )
    records = [
        json.loads(line)
        for line in (tmp_path / "root" / "logs" / "state.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r.get("event") == "resume" and r["rank"] == 0] == [5]
    assert CheckpointStore(str(ckpt), keep=1).complete_steps() == [5, 10, 15]


def test_tensorflow_trainer_refuses_changed_learning_rate_and_resumes_changed_steps(
    tmp_path: Path,
) -> None:
    """About 30 s: three single-process TensorFlow (mirrored, 1 CPU replica) runs."""
    ckpt = tmp_path / "ckpt"
    args = [
        "--framework=tensorflow",
        "--strategy=mirrored",
        *TORCH_ARGS,
        f"--checkpoint_dir={ckpt}",
    ]
    env = {"TRAINSTACK_TF_CPU_REPLICAS": "1"}
    code, stderr = _trainer("trainstack.trainers.tf_multiworker", [*args, "--steps=5"], env)
    assert code == 0, stderr[-2000:]
    code, stderr = _trainer(
        "trainstack.trainers.tf_multiworker", [*args, "--steps=5", "--learning_rate=0.01"], env
    )
    assert code == 2
    line = _refusal(stderr)
    assert f"checkpoint step 5 in {ckpt} was written with other settings " in line
    assert "(learning_rate: 0.001 -> 0.01)" in line
    code, stderr = _trainer("trainstack.trainers.tf_multiworker", [*args, "--steps=10"], env)
    assert code == 0, stderr[-2000:]
    assert CheckpointStore(str(ckpt), keep=1).complete_steps()[-1] == 10

"""Fault injection: SIGKILL at seeded random steps and in the middle of a checkpoint write,
SIGTERM (preemption), restart until done; the result must equal an uninterrupted run bit for
bit (params_sha256), with checkpoints on local disk and on a GCS emulator."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.trainers.conftest import Record, Run, run_to_end
from trainstack.trainers.common.checkpoint import CheckpointStore
from trainstack.trainers.common.cli import load_config
from trainstack.trainers.local import run_local

pytestmark = pytest.mark.trainer

STEPS = 48
ARGS = [
    "--model=mlp",
    "--dataset=synthetic",
    "--synthetic_samples=512",
    "--hidden_dim=32",
    f"--steps={STEPS}",
    "--global_batch_size=32",
    "--learning_rate=0.01",
    "--log_every=1",
    "--checkpoint_every=6",
    "--keep_checkpoints=2",
    "--seed=11",
    "--run_name=resume",
]
# Slows each step so a signal lands at a chosen step rather than after the run ended.
STEP_DELAY = {"TRAINSTACK_TEST_STEP_DELAY_S": "0.04"}
SLOW_CKPT = {**STEP_DELAY, "TRAINSTACK_TEST_SLOW_CKPT": "4"}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The uninterrupted run, through `run_local` (the `trainstack local-run` path)."""
    root = tmp_path_factory.mktemp("baseline")
    result = run_local(load_config(ARGS), workers=2, root=root)
    assert result.exit_code == 0 and result.done is not None
    assert result.done["step"] == STEPS
    assert Path(result.checkpoint_dir) == (root / "checkpoints" / "resume").resolve()
    return str(result.done["params_sha256"])


def _train_step(after: int) -> Callable[[Record], bool]:
    def pred(rec: Record) -> bool:
        return rec.get("event") == "train" and rec.get("rank") == 0 and rec["step"] >= after

    return pred


def _kill_at_step(ckpt: str, step: int, out: Path, env: dict[str, str]) -> None:
    run = Run([*ARGS, f"--checkpoint_dir={ckpt}"], workers=2, out=out, env={**STEP_DELAY, **env})
    run.wait_for(_train_step(step))
    run.kill(signal.SIGKILL)
    run.wait()


def _kill_mid_write(ckpt: str, out: Path, env: dict[str, str]) -> int:
    run = Run([*ARGS, f"--checkpoint_dir={ckpt}"], workers=2, out=out, env={**SLOW_CKPT, **env})
    rec = run.wait_for(lambda r: r.get("event") == "checkpoint_begin" and r.get("rank") == 0)
    time.sleep(1.0)  # inside the 4 s TRAINSTACK_TEST_SLOW_CKPT pause between write and commit
    run.kill(signal.SIGKILL)
    run.wait()
    return int(rec["step"])


def _terminate_at_step(ckpt: str, step: int, out: Path, env: dict[str, str]) -> int:
    run = Run([*ARGS, f"--checkpoint_dir={ckpt}"], workers=2, out=out, env={**STEP_DELAY, **env})
    run.wait_for(_train_step(step))
    run.kill(signal.SIGTERM)
    code = run.wait(60)
    # torchrun itself reports a failed worker as 1; the workers exit 143 after saving.
    assert code != 0
    preempted = [r for r in run.records() if r.get("event") == "preempted"]
    assert {r["rank"] for r in preempted} == {0, 1}
    assert len({r["step"] for r in preempted}) == 1, "ranks must stop at the same step"
    saved = [
        r
        for r in run.records()
        if r.get("event") == "checkpoint" and r.get("reason") == "preemption"
    ]
    assert saved and saved[0]["step"] == preempted[0]["step"]
    return int(preempted[0]["step"])


def _finish(ckpt: str, out: Path, env: dict[str, str], resumed_from: int) -> Record:
    done = run_to_end([*ARGS, f"--checkpoint_dir={ckpt}"], workers=2, out=out, env=env)
    assert done["resumed_from"] == resumed_from
    return done


def _interrupted_run(ckpt: str, tmp: Path, env: dict[str, str], *, full: bool) -> Record:
    store = CheckpointStore(ckpt, keep=2)
    rng = random.Random(20260101)
    if full:
        _kill_at_step(ckpt, rng.randint(4, 14), tmp / "kill1.log", env)
    mid = _kill_mid_write(ckpt, tmp / "midwrite.log", env)
    names = store._names()
    assert any(".tmp-" in n for n in names), f"kill did not land mid-write: {names}"
    assert mid not in store.complete_steps()
    term_step = _terminate_at_step(ckpt, rng.randint(mid + 2, mid + 10), tmp / "term.log", env)
    assert store.latest() == term_step
    if full:
        _kill_at_step(ckpt, rng.randint(term_step + 3, STEPS - 6), tmp / "kill2.log", env)
    latest = store.latest()
    assert latest is not None
    done = _finish(ckpt, tmp / "finish.log", env, latest)
    assert len(store.complete_steps()) <= 2, "keep_checkpoints=2 must prune older steps"
    assert not any(".tmp-" in n for n in store._names())
    return done


def test_resume_local_after_kills_and_sigterm(tmp_path: Path, baseline: str) -> None:
    done = _interrupted_run(str(tmp_path / "ckpt"), tmp_path, {}, full=True)
    assert done["step"] == STEPS
    assert done["params_sha256"] == baseline


@pytest.mark.slow  # about 55 s here; the same resume on a gs:// path (emulator)
def test_resume_on_gcs_emulator(
    tmp_path: Path, baseline: str, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"STORAGE_EMULATOR_HOST": gcs_emulator, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    done = _interrupted_run("gs://trainstack-test/runs/resume", tmp_path, env, full=False)
    assert done["params_sha256"] == baseline


@pytest.mark.slow  # about 70-80 s per case here; FSDP sharded resume (parity covers FSDP = DDP by default)
@pytest.mark.parametrize("async_save", [False, True])
def test_fsdp_sharded_checkpoint_resume(tmp_path: Path, async_save: bool) -> None:
    """A SIGKILLed FSDP run resumes to the digest of an uninterrupted one; with async saves
    (`torch.distributed.checkpoint.async_save`) the kill may land mid-write as well."""
    fsdp = [*ARGS, "--strategy=fsdp", f"--async_checkpoint={async_save}"]
    clean = run_to_end(
        [*fsdp, f"--checkpoint_dir={tmp_path / 'clean'}"], workers=2, out=tmp_path / "clean.log"
    )
    ckpt = str(tmp_path / "ckpt")
    run = Run(
        [*fsdp, f"--checkpoint_dir={ckpt}"], workers=2, out=tmp_path / "kill.log", env=STEP_DELAY
    )
    run.wait_for(_train_step(random.Random(7).randint(8, 30)))
    run.kill(signal.SIGKILL)
    run.wait()
    saves = [r for r in run.records() if r.get("event") == "checkpoint"]
    assert saves and {r["async_write"] for r in saves} == {async_save}
    latest = CheckpointStore(ckpt, keep=2).latest()
    assert latest is not None and latest < STEPS
    done = _finish_args([*fsdp, f"--checkpoint_dir={ckpt}"], tmp_path / "finish.log", latest)
    assert done["params_sha256"] == clean["params_sha256"]


def _finish_args(args: list[str], out: Path, resumed_from: int) -> Record:
    done = run_to_end(args, workers=2, out=out)
    assert done["resumed_from"] == resumed_from
    return done

"""The TensorFlow trainer for real on CPU: MultiWorkerMirrored through `trainstack local-run`,
numerics against one worker and MirroredStrategy, digits accuracy, a worker SIGKILLed and a
worker SIGTERMed with checkpoints on the GCS emulator (the resumed run ends bit for bit where
the uninterrupted one did), and the TPU path as far as a CPU allows.

Every run is 60 steps of the bundled MLP on the digits set, global batch 64 (2 workers x 32,
1 worker x 64, or 2 CPU replicas x 32), one TensorFlow thread per process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.trainers.conftest import REPO, Record
from tests.trainers.tf_helpers import TF_BASE, TFRun, probe, train_step_at_least
from trainstack.trainers.common.checkpoint import CheckpointStore
from trainstack.trainers.common.cli import load_config
from trainstack.trainers.local import run_local

pytestmark = pytest.mark.trainer

STEPS = 60
TRAINER = {
    "framework": "tensorflow",
    "strategy": "multi_worker_mirrored",
    "model": "mlp",
    "dataset": "digits",
    "steps": STEPS,
    "global_batch_size": 64,
    "learning_rate": 0.01,
    "hidden_dim": 64,
    "seed": 3,
    "log_every": 5,
    "checkpoint_every": 10,
    "keep_checkpoints": 2,
}
ARGS = [
    *TF_BASE,
    "--strategy=multi_worker_mirrored",
    f"--steps={STEPS}",
    "--log_every=5",
    "--checkpoint_every=10",
    "--keep_checkpoints=2",
]
# The bundled digits set after 60 steps of 64 samples (about 2.7 passes over the 1,437
# training images); these runs reach 0.96.
DIGITS_ACCURACY = 0.9


def _records(path: Path) -> list[Record]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Record, Path]:
    """2 workers x 32 through `trainstack local-run --config-file` (the CLI, as users run
    it): the done record and the final checkpoint directory."""
    root = tmp_path_factory.mktemp("tf-local-run")
    stack = root / "Pulumi.tf-local.yaml"
    config = {
        "trainstack:environment": "dev",
        "trainstack:local": {"workers": 2, "root": str(root / "local")},
        "trainstack:trainer": TRAINER,
    }
    stack.write_text(yaml.safe_dump({"config": config}))
    done = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "local-run", "--config-file", str(stack)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = _records(root / "local" / "logs" / "tf-local.jsonl")
    finals = [r for r in records if r["event"] == "done"]
    assert len(finals) == 1 and finals[0]["rank"] == 0
    ckpt = root / "local" / "checkpoints" / "tf-local"
    return finals[0], ckpt / f"step-{STEPS:08d}"


@pytest.mark.slow  # about 90 s here; TF multi-worker runs by default in the Vertex and TPU fidelity tests
def test_local_run_two_workers_equal_one_worker_with_double_batch(
    baseline: tuple[Record, Path], tmp_path: Path
) -> None:
    done, two_workers = baseline
    assert (done["step"], done["world_size"], done["workers"]) == (STEPS, 2, 2)
    assert done["test_accuracy"] >= DIGITS_ACCURACY
    assert sorted(p.name for p in two_workers.iterdir()) == [
        "COMPLETE",
        "ckpt.data-00000-of-00001",
        "ckpt.index",
        "meta.json",
    ]

    # One worker, batch 64, same seed: same start, same global batches.
    single = tmp_path / "single"
    env = {"AIP_MODEL_DIR": str(tmp_path / "model")}
    run = TFRun(
        [*ARGS, f"--checkpoint_dir={single}", f"--tensorboard_dir={tmp_path / 'tb'}"],
        workers=1,
        root=tmp_path,
        env=env,
        tag="single",
    )
    assert run.wait() == {"worker0": 0}
    one = run.done()
    assert one is not None and (one["world_size"], one["workers"]) == (1, 1)
    assert one["model_path"] == str(tmp_path / "model")
    assert (tmp_path / "model" / "saved_model.pb").is_file()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))

    compared = probe("compare", str(two_workers), str(single / f"step-{STEPS:08d}"))
    assert compared["only_a"] == [] and compared["only_b"] == []
    model_vars = {k: v for k, v in compared["variables"].items() if k.startswith("model/")}
    assert len(model_vars) == 6  # 3 dense layers x (kernel, bias)
    bad = {k: v for k, v in compared["variables"].items() if not (v.get("ok") or v.get("equal"))}
    assert not bad, bad

    # MirroredStrategy over 2 logical CPU devices sums the same two halves: same bits.
    mirrored = run_local(
        load_config([*ARGS, "--strategy=mirrored", "--run_name=mirrored"]),
        workers=2,
        root=tmp_path / "mirrored",
    )
    assert mirrored.exit_code == 0 and mirrored.done is not None
    assert mirrored.done["world_size"] == 2 and mirrored.done["workers"] == 1
    assert mirrored.done["params_sha256"] == done["params_sha256"]


@pytest.mark.slow  # about 70 s here; TF recovery on gs://
def test_worker_killed_and_preempted_resumes_on_gcs(
    baseline: tuple[Record, Path],
    tmp_path: Path,
    gcs_emulator: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gcs = {"STORAGE_EMULATOR_HOST": gcs_emulator, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    for key, value in gcs.items():
        monkeypatch.setenv(key, value)
    slow = {**gcs, "TRAINSTACK_TEST_STEP_DELAY_S": "0.05"}
    ckpt = "gs://trainstack-test/tf/mwms"
    args = [*ARGS, f"--checkpoint_dir={ckpt}", "--run_name=tf-resume"]
    store = CheckpointStore(ckpt, keep=2)

    # 1. Worker 1 dies (SIGKILL, like its VM vanishing); the chief must fail, not hang.
    run = TFRun(args, workers=2, root=tmp_path, env=slow, tag="kill")
    run.wait_for(train_step_at_least(15))
    run.signal("worker1", signal.SIGKILL)
    codes = run.wait(90)
    assert codes["worker1"] == -signal.SIGKILL
    assert codes["worker0"] == 4, run.tail()  # PEER_LOST_EXIT_CODE: restart, not a crash
    assert "trainstack trainer: a peer task is gone (" in run.logs["worker0"].read_text()
    killed_at = store.latest()
    assert killed_at is not None and 10 <= killed_at < STEPS

    # 2. Restarted, it resumes from the backup; SIGTERM to worker 1 alone stops both
    #    workers after the same step, with a checkpoint, exit 143.
    run = TFRun(args, workers=2, root=tmp_path, env=slow, tag="term")
    resumed = run.wait_for(lambda r: r.get("event") == "resume" and r.get("rank") == 0)
    assert resumed["step"] == killed_at
    run.wait_for(train_step_at_least(killed_at + 5))
    run.signal("worker1", signal.SIGTERM)
    assert run.wait(90) == {"worker0": 143, "worker1": 143}
    preempted = [r for r in run.records() if r["event"] == "preempted"]
    assert sorted(r["task"] for r in preempted) == ["worker0", "worker1"]
    assert len({r["step"] for r in preempted}) == 1, "workers must stop after the same step"
    term_step = preempted[0]["step"]
    saved = [
        r
        for r in run.records("worker0")
        if r["event"] == "checkpoint" and r["reason"] == "preemption"
    ]
    assert [r["step"] for r in saved] == [term_step]
    assert saved[0]["path"] == f"{ckpt}/step-{term_step:08d}"
    assert store.latest() == term_step

    # 3. Restarted again, it finishes where the uninterrupted run ended, bit for bit: same
    #    seed and config give the same params_sha256 (op determinism on).
    run = TFRun(args, workers=2, root=tmp_path, env=gcs, tag="finish")
    assert run.wait() == {"worker0": 0, "worker1": 0}
    done = run.done()
    assert done is not None
    assert (done["step"], done["resumed_from"]) == (STEPS, term_step)
    assert done["params_sha256"] == baseline[0]["params_sha256"]
    assert store.complete_steps() == [50, 60]
    assert not any(".tmp-" in name for name in store._names())


@pytest.mark.slow  # about 40 s here; TF async checkpoints on gs://
def test_async_checkpoints_on_gcs_resume_bit_for_bit(
    baseline: tuple[Record, Path],
    tmp_path: Path,
    gcs_emulator: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TensorFlow's async checkpoint writer with the staged upload to gs://: both workers
    SIGKILLed after async saves, the restart resumes from one and ends bit for bit."""
    gcs = {"STORAGE_EMULATOR_HOST": gcs_emulator, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    for key, value in gcs.items():
        monkeypatch.setenv(key, value)
    ckpt = "gs://trainstack-test/tf/async"
    args = [*ARGS, f"--checkpoint_dir={ckpt}", "--run_name=tf-async", "--async_checkpoint=true"]
    store = CheckpointStore(ckpt, keep=2)
    run = TFRun(args, workers=2, root=tmp_path, env={**gcs, "TRAINSTACK_TEST_STEP_DELAY_S": "0.05"})
    run.wait_for(lambda r: r.get("event") == "checkpoint_written" and r["step"] == 20)
    run.signal("worker0", signal.SIGKILL)
    run.signal("worker1", signal.SIGKILL)
    run.wait(30)
    saves = [r for r in run.records() if r["event"] == "checkpoint"]
    assert saves and all(r["async_write"] and r["write_s"] is None for r in saves)
    written = [r["step"] for r in run.records("worker0") if r["event"] == "checkpoint_written"]
    assert written[:2] == [10, 20]
    killed_at = store.latest()
    assert killed_at is not None and 20 <= killed_at < STEPS

    run = TFRun(args, workers=2, root=tmp_path, env=gcs, tag="finish")
    assert run.wait() == {"worker0": 0, "worker1": 0}
    done = run.done()
    assert done is not None
    assert (done["step"], done["resumed_from"]) == (STEPS, killed_at)
    assert done["params_sha256"] == baseline[0]["params_sha256"]
    assert not any(".tmp-" in name for name in store._names())


def test_tpu_strategy_on_cpu() -> None:
    out = probe("tpu")
    assert out["exit_code"] == 2
    assert (
        "trainstack trainer: strategy 'tpu' found no TPU (TPUClusterResolver(tpu='local'): "
        in out["stderr"]
    )
    assert (
        "It needs a Cloud TPU VM with a TensorFlow TPU runtime (tpu-vm-tf-*; '-pod' on "
        "multi-host slices) and TensorFlow built with TPU support: tpu='local' on a single "
        "host, or on worker 0 of a multi-host slice TPU_WORKER_HOSTNAMES naming every worker "
        "(gRPC port 8470) or TPU_NAME. On CPUs or GPUs use 'mirrored' or "
        "'multi_worker_mirrored'.\n"
    ) in out["stderr"]
    hosts = [f"t1-w-{i}:8470" for i in range(4)]
    assert out["target"] == ",".join(f"grpc://{h}" for h in hosts)
    assert out["cluster_spec"] == {"worker": hosts}
    assert out["master"] == "grpc://t1-w-0:8470"
    assert out["coordination_leader"] == "/job:worker/task:0"
    assert out["selected_target"] == [out["target"]]
    assert out["built"] == {
        "mlp": {
            "variables": 6,
            "optimizer_variables": 13,
            "policy": "mixed_bfloat16",
            "logits": [2, 10],
        },
        "cnn": {
            "variables": 22,
            "optimizer_variables": 45,
            "policy": "mixed_bfloat16",
            "logits": [2, 10],
        },
        "gpt": {
            "variables": 36,
            "optimizer_variables": 73,
            "policy": "mixed_bfloat16",
            "logits": [2, 16, 32],
        },
    }
    from trainstack.trainers.common.config import TrainConfig
    from trainstack.trainers.common.schedule import learning_rate

    cfg = TrainConfig(framework="tensorflow", steps=50, warmup_steps=10, learning_rate=0.02)
    for step, value in out["schedule"].items():
        assert value == pytest.approx(learning_rate(cfg, int(step)), rel=1e-6)

"""`run_local` / `prepare_run` argument checks and plans (the successful torch path runs in
test_resume's baseline, the TensorFlow ones in test_tf_multiworker and
test_tf_parameter_server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.local import prepare_run, run_local

pytestmark = pytest.mark.trainer


def test_tpu_cannot_run_locally(tmp_path: Path) -> None:
    cfg = TrainConfig(framework="tensorflow", strategy="tpu")
    with pytest.raises(ValueError, match=r"^trainer.strategy 'tpu' needs a Cloud TPU VM"):
        run_local(cfg, workers=2, root=tmp_path)


def test_workers_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="local.workers must be >= 1"):
        run_local(TrainConfig(), workers=0, root=tmp_path)


def test_tensorflow_plan_is_one_process_per_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TF_CONFIG inherited from an enclosing launcher must not reach the tasks.
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    # 48 splits over the 3 workers (`prepare_run` refuses a batch that does not).
    cfg = TrainConfig(
        framework="tensorflow",
        strategy="multi_worker_mirrored",
        run_name="tf",
        global_batch_size=48,
    )
    prepared = prepare_run(cfg, workers=3, root=tmp_path)
    assert "TF_CONFIG" not in prepared.env
    config_path = (tmp_path / "logs" / "tf.config.json").resolve()
    assert prepared.config_path == config_path
    assert json.loads(config_path.read_text())["checkpoint_dir"] == str(
        (tmp_path / "checkpoints" / "tf").resolve()
    )
    argv = [
        sys.executable,
        "-m",
        "trainstack.trainers.tf_multiworker",
        "--config",
        str(config_path),
    ]
    assert [p.argv for p in prepared.processes] == [argv] * 3
    tasks = [json.loads(p.env["TF_CONFIG"])["task"] for p in prepared.processes]
    assert tasks == [{"type": "worker", "index": i} for i in range(3)]

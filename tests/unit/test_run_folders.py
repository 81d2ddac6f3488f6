"""Each run keeps its state in a folder of its own on every target, and a folder records the
settings that wrote it (`trainstack.trainers.common.fingerprint`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bundled import bundled_plan
from trainstack.trainers.common.checkpoint import run_checkpoint_dir
from trainstack.trainers.common.cluster import ClusterInfo
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.fingerprint import (
    OTHER_KEYS,
    STATE_KEYS,
    StateMismatch,
    changes,
    check,
    code_fingerprint,
    trainer_fingerprint,
)
from trainstack.trainers.local_code import RUN_MARKER, claim_folder
from trainstack.trainers.user_code import user_code_env

BUCKET = "gs://my-ml-project-{stack}-checkpoints"


def _sent(stack: str) -> str:
    """Everything the stack's plan registers, as one text."""
    return json.dumps(bundled_plan(stack))


@pytest.mark.parametrize("stack", ["dev-a100-gke", "prod-a100-gce"])
def test_gpu_cluster_runs_checkpoint_under_their_run_name(stack: str) -> None:
    sent = _sent(stack)
    folder = f"{BUCKET.format(stack=stack)}/checkpoints/{stack}"
    assert f"--run_name={stack}" in sent
    assert f"--checkpoint_dir={folder}" in sent
    assert f"--checkpoint_dir={BUCKET.format(stack=stack)}/checkpoints " not in sent
    assert f'--checkpoint_dir={BUCKET.format(stack=stack)}/checkpoints"' not in sent


@pytest.mark.parametrize("stack", ["dev-tpu-v5e", "prod-tpu-v4-32"])
def test_tpu_runs_checkpoint_under_their_run_name(stack: str) -> None:
    plan = bundled_plan(stack)
    folder = f"{BUCKET.format(stack=stack)}/checkpoints/{stack}"
    assert plan["outputs"]["checkpoint_dir"] == folder  # type: ignore[index]
    assert f"--checkpoint_dir={folder}" in json.dumps(plan)


@pytest.mark.parametrize("stack", ["prod-vertex-rs", "dev-vertex-hpt"])
def test_vertex_runs_checkpoint_under_their_run_name(stack: str) -> None:
    """The job names no folder (Vertex's is per trial when tuning); the trainer puts the
    run's name below AIP_CHECKPOINT_DIR."""
    sent = _sent(stack)
    assert f"--run_name={stack}" in sent
    assert "--checkpoint_dir=" not in sent
    vertex = {"AIP_CHECKPOINT_DIR": f"{BUCKET.format(stack=stack)}/checkpoints/"}
    cfg = TrainConfig(run_name=stack)
    assert run_checkpoint_dir(cfg, vertex) == f"{BUCKET.format(stack=stack)}/checkpoints/{stack}"
    assert run_checkpoint_dir(cfg.model_copy(update={"checkpoint_dir": "gs://mine/x"}), vertex) == (
        "gs://mine/x"
    )
    assert run_checkpoint_dir(cfg, {}) is None


def test_a_tuning_trial_resumes_only_state_written_under_its_own_settings() -> None:
    """Trial 7 of a new tuning job is not trial 7 of the old one: its folder carries the
    settings' fingerprint, so other hyperparameters get a folder of their own (no refusal,
    no resume of another trial's weights) and the same ones resume."""
    trial = {
        "AIP_CHECKPOINT_DIR": "gs://b/7/checkpoints/",
        "CLUSTER_SPEC": json.dumps({"task": {"type": "workerpool0", "index": 0, "trial": "7"}}),
    }
    cfg = TrainConfig(run_name="hpt", learning_rate=0.01)
    digest = trainer_fingerprint(cfg)["sha256"][:12]
    assert run_checkpoint_dir(cfg, trial) == f"gs://b/7/checkpoints/hpt-{digest}"
    other = cfg.model_copy(update={"learning_rate": 0.02})
    assert run_checkpoint_dir(other, trial) != run_checkpoint_dir(cfg, trial)
    # A setting that may change mid-run keeps the folder.
    assert run_checkpoint_dir(cfg.model_copy(update={"steps": 9}), trial) == (
        f"gs://b/7/checkpoints/hpt-{digest}"
    )


def test_your_code_on_vertex_gets_the_run_folder_below_vertex_checkpoint_dir() -> None:
    cluster = ClusterInfo(0, 1, 0, 1, 0, 1, "localhost", 2222, "chief", "vertex", None)
    env = {
        "AIP_CHECKPOINT_DIR": "gs://b/checkpoints/",
        "AIP_MODEL_DIR": "gs://b/model/",
    }
    added = user_code_env(
        env, cluster, launcher="torchrun", gpus=0, plain_env={"TRAINSTACK_RUN_NAME": "exp-3"}
    )
    assert added["TRAINSTACK_CHECKPOINT_DIR"] == "gs://b/checkpoints/exp-3"
    assert added["TRAINSTACK_OUTPUT_DIR"] == "gs://b/model/"


def test_every_trainer_setting_is_either_state_or_not() -> None:
    assert set(STATE_KEYS).isdisjoint(OTHER_KEYS)
    assert sorted((*STATE_KEYS, *OTHER_KEYS)) == sorted(TrainConfig.model_fields)


def test_settings_a_run_may_change_keep_the_fingerprint() -> None:
    base = TrainConfig(steps=10)
    later = TrainConfig(steps=50, checkpoint_every=7, log_every=1, grad_accum_steps=2, run_name="x")
    assert trainer_fingerprint(base) == trainer_fingerprint(later)


def test_a_refusal_names_each_changed_key_and_the_ways_on() -> None:
    saved = trainer_fingerprint(TrainConfig(learning_rate=0.001, seed=1))
    current = trainer_fingerprint(TrainConfig(learning_rate=0.01, seed=1, model="cnn"))
    assert changes(saved, current) == [
        "learning_rate: 0.001 -> 0.01",
        'model: "mlp" -> "cnn"',
    ]
    with pytest.raises(StateMismatch) as info:
        check(saved, current, what="checkpoint step 40 in gs://b/checkpoints/r", where="gs://b/c")
    assert str(info.value) == (
        "checkpoint step 40 in gs://b/checkpoints/r was written with other settings "
        '(learning_rate: 0.001 -> 0.01; model: "mlp" -> "cnn"); resuming it would continue '
        "another run's state under learning_rate, model. Refused: set a new trainer.run_name "
        "(a new run, in a folder of its own), or start this run fresh by deleting gs://b/c "
        "(`trainstack local-run --fresh` does that for a local run)"
    )
    check(saved, dict(saved), what="x", where="y")  # the same settings pass


def test_your_code_fingerprint_covers_entrypoint_and_env() -> None:
    one = code_fingerprint(["python", "train.py", "--lr=0.1"], {"A": "1"})
    assert changes(one, code_fingerprint(["python", "train.py", "--lr=0.2"], {"A": "1"})) == [
        'entrypoint: ["python", "train.py", "--lr=0.1"] -> ["python", "train.py", "--lr=0.2"]'
    ]
    assert changes(one, code_fingerprint(["python", "train.py", "--lr=0.1"], None)) == [
        'env: {"A": "1"} -> {}'
    ]


def test_your_code_folder_is_claimed_by_its_entrypoint_and_env(tmp_path: Path) -> None:
    """`trainstack local-run` for your code: the folder records the entrypoint and env that
    started it; a marked checkpoint under other ones is refused, before anything starts."""
    folder = str(tmp_path / "ckpt")
    entry = ["python", "train.py", "--lr=0.1"]
    claim_folder(folder, entry, {"A": "1"})
    (tmp_path / "ckpt" / "step-6").mkdir()
    (tmp_path / "ckpt" / "step-6" / "COMPLETE").write_text("{}")
    claim_folder(folder, entry, {"A": "1"})  # the same settings resume
    with pytest.raises(StateMismatch) as info:
        claim_folder(folder, ["python", "train.py", "--lr=0.2"], {"A": "1"})
    assert str(info.value).startswith(
        f"step-6 in {folder} was written with other settings (entrypoint: "
        '["python", "train.py", "--lr=0.1"] -> ["python", "train.py", "--lr=0.2"]); '
    )
    (tmp_path / "ckpt" / RUN_MARKER).unlink()
    with pytest.raises(StateMismatch, match=r"^step-6 in .* records no settings fingerprint"):
        claim_folder(folder, entry, {"A": "1"})


def test_your_code_record_that_cannot_be_read_is_refused_by_its_cause(tmp_path: Path) -> None:
    """A `trainstack-run.json` a full disk left empty (or binary bytes) beside a marked
    checkpoint: refused naming that file and why, not as a checkpoint of an older trainstack;
    with no checkpoint yet it is simply written again."""
    folder = tmp_path / "ckpt"
    entry = ["python", "train.py"]
    claim_folder(str(folder), entry, None)
    (folder / RUN_MARKER).write_bytes(b"")
    claim_folder(str(folder), entry, None)  # nothing saved yet: recorded again
    assert json.loads((folder / RUN_MARKER).read_text()) == {
        "fingerprint": code_fingerprint(entry, None)
    }
    (folder / "step-6").mkdir()
    (folder / "step-6" / "COMPLETE").write_text("{}")
    for text, why in (
        (b"", "trainstack-run.json is empty (a write cut short, e.g. by a full disk)"),
        (
            b"\xff\x00",
            "trainstack-run.json is not JSON (a write cut short, or another program's file)",
        ),
    ):
        (folder / RUN_MARKER).write_bytes(text)
        with pytest.raises(StateMismatch) as info:
            claim_folder(str(folder), entry, None)
        assert str(info.value) == (
            f"step-6 in {folder} cannot be checked: {why}, so it cannot be resumed safely; set a "
            "new trainer.run_name (a new run, in a folder of its own), or start this run fresh "
            f"by deleting {folder} (`trainstack local-run --fresh` does that for a local run)"
        )

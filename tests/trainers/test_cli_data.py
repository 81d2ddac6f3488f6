"""Config loading and the deterministic per-rank data order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainstack.trainers.common.cli import load_config
from trainstack.trainers.common.data import StepSampler, load_dataset, load_digits

pytestmark = pytest.mark.trainer


def test_file_then_flags(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model: cnn\nsteps: 50\ncheckpoint_dir: /x\n")
    cfg = load_config(
        [
            "--config",
            str(cfg_file),
            "--steps=7",
            "--compile=true",
            "--checkpoint-dir=none",
            "--learning_rate",
            "0.5",
        ]
    )
    assert (cfg.model, cfg.steps, cfg.compile, cfg.checkpoint_dir) == ("cnn", 7, True, None)
    assert cfg.learning_rate == 0.5


def test_json_config(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.json"
    cfg_file.write_text(json.dumps({"strategy": "fsdp", "global_batch_size": 8}))
    assert load_config([f"--config={cfg_file}"]).strategy == "fsdp"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stepz=3"], r"unknown trainer key 'stepz'; valid keys: .*steps"),
        (["--steps=abc"], r"invalid trainer config: steps: Input should be a valid integer"),
        (["--strategy=mirrored"], "strategy 'mirrored' is not a torch strategy"),
        (["steps=3"], "unexpected argument 'steps=3'"),
        (["--steps"], r"--steps needs a value"),
        (["--model=gpt", "--dataset=digits"], "model 'gpt' needs token data"),
    ],
)
def test_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(argv)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("epochs: 3\n")
    with pytest.raises(ValueError, match="unknown trainer key.*'epochs' in --config"):
        load_config(["--config", str(cfg_file)])


def test_two_ranks_see_the_single_process_global_batch() -> None:
    one = StepSampler(100, global_batch=16, rank=0, world_size=1, seed=5)
    ranks = [StepSampler(100, global_batch=16, rank=r, world_size=2, seed=5) for r in (0, 1)]
    for step in (0, 6, 7, 13):  # 6 and 13 straddle epoch boundaries
        joined = np.concatenate([s.indices(step) for s in ranks])
        assert np.array_equal(joined, one.indices(step))
    # Each epoch visits every sample exactly once.
    seen = np.concatenate([one.indices(s) for s in range(25)])
    assert sorted(seen[:100].tolist()) == list(range(100))
    # Stateless: a fresh sampler (a resumed run) gives the same batch for a step.
    assert np.array_equal(
        StepSampler(100, global_batch=16, rank=0, world_size=1, seed=5).indices(13), one.indices(13)
    )


def test_digits_split_is_fixed() -> None:
    train, test = load_digits()
    assert (len(train), len(test)) == (1437, 360)
    assert train.x.shape[1:] == (1, 8, 8) and float(train.x.max()) <= 1.0
    again, _ = load_digits()
    assert np.array_equal(train.y, again.y)


def test_files_dataset_shards_per_rank(tmp_path: Path) -> None:
    for i in range(3):
        x = np.full((4, 5), i, dtype=np.float32)
        np.savez(tmp_path / f"part-{i:03d}.npz", x=x, y=np.full(4, i, dtype=np.int64))
    cfg = load_config(["--dataset=files", f"--data_path={tmp_path}"])
    r0 = load_dataset(cfg, rank=0, world_size=2)
    r1 = load_dataset(cfg, rank=1, world_size=2)
    assert set(r0.train.y.tolist()) == {0} and set(r1.train.y.tolist()) == {1}
    assert set(r0.test.y.tolist()) == {2}

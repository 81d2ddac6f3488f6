"""Checkpoint atomicity and retention, in process (no torch.distributed)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from trainstack.trainers.common.checkpoint import MARKER, CheckpointStore, step_name
from trainstack.trainers.torch_ddp.checkpoint import Checkpointer

pytestmark = pytest.mark.trainer


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return model, opt


def test_incomplete_directories_are_never_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), keep=3)
    ckpt = Checkpointer(str(tmp_path), keep=3, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    ckpt.save(model, opt, step=5)
    # A save killed after the move but before the marker, and one killed mid-write.
    (tmp_path / step_name(9)).mkdir()
    (tmp_path / step_name(9) / "state.pt").write_bytes(b"torn")
    (tmp_path / f"{step_name(12)}.tmp-0123abcd").mkdir()
    assert store.complete_steps() == [5]
    assert ckpt.latest_step() == 5
    # The next save clears the leftovers.
    ckpt.save(model, opt, step=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == [step_name(5), step_name(6)]


def test_marker_is_what_makes_a_step_loadable(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep=3, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    ckpt.save(model, opt, step=3)
    (tmp_path / step_name(3) / MARKER).unlink()
    assert ckpt.latest_step() is None


def test_keeps_newest_k(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep=2, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    for step in (10, 20, 30, 40):
        ckpt.save(model, opt, step=step)
    assert ckpt.store.complete_steps() == [30, 40]


@pytest.mark.parametrize("async_save", [False, True])
def test_round_trip_restores_model_optimizer_and_rng(tmp_path: Path, async_save: bool) -> None:
    ckpt = Checkpointer(
        str(tmp_path), keep=2, rank=0, world_size=1, sharded=False, async_save=async_save
    )
    model, opt = _model()
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    ckpt.save(model, opt, step=1)
    ckpt.wait()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    saved_params = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = opt.state_dict()["state"][0]["exp_avg"].clone()

    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    opt.state[next(iter(model.parameters()))]["exp_avg"].zero_()
    assert ckpt.load(1, model, opt) == 1
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, saved_params[k])
    torch.testing.assert_close(opt.state_dict()["state"][0]["exp_avg"], saved_opt)
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]


def test_async_save_does_not_see_later_updates(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep=2, rank=0, world_size=1, sharded=False, async_save=True)
    model, opt = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt.save(model, opt, step=1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.0)
    ckpt.wait()
    ckpt.load(1, model, opt)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k])


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep must be >= 1"):
        CheckpointStore(str(tmp_path), keep=0)


def test_overlapped_copy_is_taken_before_the_next_update(tmp_path: Path) -> None:
    # The trainer's protocol: save, compute the next gradients, before_update(), step.
    ckpt = Checkpointer(
        str(tmp_path),
        keep=2,
        rank=0,
        world_size=1,
        sharded=False,
        async_save=True,
        overlap_copy=True,
    )
    model, opt = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for step in (1, 2):
        ckpt.save(model, opt, step=step)
        assert ckpt.before_update() >= 0.0
        assert ckpt.before_update() == 0.0
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ckpt.wait()
    ckpt.load(1, model, opt)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k])
    ckpt.load(2, model, opt)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k] + 1.0)

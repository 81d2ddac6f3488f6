"""Numerics: 2-rank DDP equals 1 process with the doubled batch; FSDP equals DDP; digits
converge."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainers.conftest import run_to_end

pytestmark = pytest.mark.trainer

STEPS = 120
BASE = [
    "--model=mlp",
    "--dataset=digits",
    f"--steps={STEPS}",
    "--global_batch_size=64",
    "--learning_rate=0.01",
    "--hidden_dim=64",
    "--log_every=20",
    f"--checkpoint_every={STEPS}",
    "--seed=3",
]


def _params(ckpt: Path) -> dict[str, torch.Tensor]:
    step = ckpt / f"step-{STEPS:08d}"
    assert (step / "COMPLETE").exists()
    if (step / "state.pt").exists():
        state: dict[str, dict[str, torch.Tensor]] = torch.load(step / "state.pt", weights_only=True)
        return state["model"]
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(step, ckpt / "full.pt")
    full: dict[str, dict[str, torch.Tensor]] = torch.load(ckpt / "full.pt", weights_only=True)
    return full["model"]


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for name, tensor in a.items():
        torch.testing.assert_close(tensor, b[name], rtol=1e-4, atol=1e-5, msg=name)


def test_ddp_matches_single_process_and_fsdp_matches_ddp(tmp_path: Path) -> None:
    # Global batch 64 everywhere: 1 process x 64 versus 2 ranks x 32 (DDP in two accumulated
    # micro-batches of 16, so no_sync is exercised too).
    single = run_to_end(
        [*BASE, f"--checkpoint_dir={tmp_path / 'single'}"], workers=1, out=tmp_path / "single.log"
    )
    ddp = run_to_end(
        [*BASE, "--grad_accum_steps=2", f"--checkpoint_dir={tmp_path / 'ddp'}"],
        workers=2,
        out=tmp_path / "ddp.log",
    )
    fsdp = run_to_end(
        [*BASE, "--strategy=fsdp", f"--checkpoint_dir={tmp_path / 'fsdp'}"],
        workers=2,
        out=tmp_path / "fsdp.log",
        env={"AIP_MODEL_DIR": str(tmp_path / "model")},
    )
    assert single["world_size"] == 1 and ddp["world_size"] == 2 and fsdp["world_size"] == 2
    _close(_params(tmp_path / "single"), _params(tmp_path / "ddp"))
    _close(_params(tmp_path / "ddp"), _params(tmp_path / "fsdp"))
    # The exported artifact holds the gathered (unsharded) FSDP weights.
    exported = torch.load(tmp_path / "model" / "model.pt", weights_only=True)["model"]
    _close(exported, _params(tmp_path / "fsdp"))
    assert fsdp["model_path"] == str(tmp_path / "model" / "model.pt")
    # Convergence on the real dataset within the few seconds these runs take.
    assert ddp["test_accuracy"] >= 0.9
    assert fsdp["test_accuracy"] >= 0.9

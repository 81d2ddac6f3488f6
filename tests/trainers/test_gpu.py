"""GPU paths: bf16 autocast and NCCL. Skipped where no CUDA device exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainers.conftest import run_to_end

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.trainer,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bf16_gpt_single_process(tmp_path: Path) -> None:
    done = run_to_end(
        [
            "--model=gpt",
            "--dataset=synthetic",
            "--precision=bf16",
            "--steps=30",
            "--global_batch_size=16",
            "--log_every=10",
        ],
        workers=1,
        out=tmp_path / "gpu.log",
    )
    assert done["step"] == 30 and done["test_loss"] < 6.0


def test_nccl_ddp_single_rank_under_torchrun(tmp_path: Path) -> None:
    # torchrun with one process still initialises a NCCL process group and wraps in DDP.
    done = run_to_end(
        [
            "--model=cnn",
            "--dataset=digits",
            "--precision=bf16",
            "--steps=40",
            "--global_batch_size=64",
            "--learning_rate=0.003",
            f"--checkpoint_dir={tmp_path / 'ck'}",
        ],
        workers=1,
        out=tmp_path / "nccl.log",
        torchrun=True,
    )
    assert done["step"] == 40

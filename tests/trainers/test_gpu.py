"""GPU paths: bf16 autocast and NCCL. Skipped where no CUDA device exists."""

from __future__ import annotations

import importlib.util
import json
import signal
from pathlib import Path

import pytest
import torch

from tests.trainers.conftest import Run, run_to_end
from trainstack.trainers.common.checkpoint import CheckpointStore
from trainstack.trainers.common.metrics import gpu_peak_flops

_SPEC = importlib.util.spec_from_file_location(
    "gpu_throughput", Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_throughput.py"
)
assert _SPEC is not None and _SPEC.loader is not None
gpu_throughput = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_throughput)

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
    lines = (tmp_path / "gpu.log").read_text().splitlines()
    train = [r for r in map(json.loads, filter(None, lines)) if r.get("event") == "train"]
    assert [r["step"] for r in train] == [10, 20, 30]
    # MFU against this GPU's own dense bf16 peak; none for a GPU the table lacks.
    peak = gpu_peak_flops(torch.cuda.get_device_name())
    for record in train:
        assert (0.0 < record["mfu"] < 1.0) if peak else record.get("mfu") is None


def test_gpu_throughput_benchmark_reports_mfu() -> None:
    # Eager and tiny: checks the JSON and the FLOPs, not the speed (that is the benchmark's).
    out = gpu_throughput.main(
        ["--preset=gpt2-124m", "--batch=2", "--steps=3", "--warmup=2", "--no-compile"]
    )
    name = torch.cuda.get_device_name()
    assert out["skipped"] is False and out["device"] == name
    assert out["params"] == 124_475_904 and out["flops_per_token"] == 855_383_040.0
    assert out["config"]["sdpa"] == "flash" and out["config"]["compile"] is False
    peak = gpu_peak_flops(name)
    assert out["peak_bf16_flops"] == peak
    expected = out["flops_per_token"] * out["tokens_per_s"] / peak if peak else None
    assert out["mfu"] == expected


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


def test_async_checkpoint_on_cuda_resumes_to_the_synchronous_digest(tmp_path: Path) -> None:
    # Pinned staging buffers filled on a side stream while the next step computes: the
    # checkpoint must hold the state of its own step, not a later one.
    args = [
        "--model=gpt",
        "--dataset=synthetic",
        "--steps=30",
        "--global_batch_size=16",
        "--log_every=1",
        "--checkpoint_every=5",
        "--learning_rate=0.003",
        "--seed=4",
    ]
    sync = run_to_end(
        [*args, f"--checkpoint_dir={tmp_path / 'sync'}"],
        workers=1,
        out=tmp_path / "sync.log",
        torchrun=True,
    )
    killed = tmp_path / "async"
    run = Run(
        [*args, f"--checkpoint_dir={killed}", "--async_checkpoint=true"],
        workers=1,
        out=tmp_path / "kill.log",
        env={"TRAINSTACK_TEST_STEP_DELAY_S": "0.1"},
        torchrun=True,
    )
    run.wait_for(lambda r: r.get("event") == "checkpoint_written" and r["step"] == 15)
    run.kill(signal.SIGKILL)
    run.wait()
    saves = [r for r in run.records() if r.get("event") == "checkpoint"]
    assert saves and all(r["async_write"] for r in saves)
    latest = CheckpointStore(str(killed), keep=3).latest()
    assert latest is not None and 15 <= latest < 30
    done = run_to_end(
        [*args, f"--checkpoint_dir={killed}", "--async_checkpoint=true"],
        workers=1,
        out=tmp_path / "resume.log",
        torchrun=True,
    )
    assert done["resumed_from"] == latest
    assert done["params_sha256"] == sync["params_sha256"]

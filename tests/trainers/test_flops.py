"""The GPT's FLOPs per token against a hand count, and the GPU peak table behind MFU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.metrics import (
    GPU_PEAK_BF16_FLOPS,
    gpu_peak,
    gpu_peak_flops,
    mfu_fields,
)
from trainstack.trainers.torch_ddp.models import GPT, flops_per_sample

# The trainer's default GPT: vocab 256, seq_len 64, dim 64, 2 layers, 4 heads.
V, T, D, L, H = 256, 64, 64, 2, 4


def test_gpt_parameters_by_hand() -> None:
    # One Block, from its module definition:
    #   ln1, ln2 (weight + bias):       2 * 2D       =    256
    #   attn.qkv  Linear(D, 3D):        3D*D + 3D    = 12_480
    #   attn.proj Linear(D, D):         D*D + D      =  4_160
    #   mlp.0     Linear(D, 4D):        4D*D + 4D    = 16_640
    #   mlp.2     Linear(4D, D):        4D*D + D     = 16_448
    #   total                           12D^2 + 13D  = 49_984
    block = 12 * D * D + 13 * D
    assert block == 49_984
    assert sum(p.numel() for p in GPT(V, T, D, L, H).blocks[0].parameters()) == 49_984
    # tok (V x D, tied to the head, counted once) + pos (T x D) + L blocks + ln_f (2D).
    assert V * D + T * D + L * block + 2 * D == 16_384 + 4_096 + 99_968 + 128 == 120_576
    assert sum(p.numel() for p in GPT(V, T, D, L, H).parameters()) == 120_576


def test_gpt_flops_per_token_by_hand() -> None:
    # Matrix-product parameters: everything but the position table; the token table stays
    # because it is also the output head (a D x V product per token).
    matmul_params = 120_576 - T * D
    assert matmul_params == 116_480
    # 6 per parameter (2 forward, 4 backward) + attention scores 12 * L * D * T.
    assert 6 * matmul_params + 12 * L * D * T == 698_880 + 98_304 == 797_184
    model = GPT(V, T, D, L, H)
    assert model.flops_per_token() == 797_184.0
    cfg = TrainConfig(model="gpt", gpt_layers=L, gpt_dim=D, gpt_heads=H, seq_len=T, vocab_size=V)
    assert flops_per_sample(model, cfg) == 797_184.0 * 64


def test_gpt2_small_flops_per_token() -> None:
    # GPT-2 small with nanoGPT's padded vocabulary: 124,475,904 parameters, 786,432 of them
    # positions; 6 * 123,689,472 + 12 * 12 * 768 * 1024.
    with torch.device("meta"):
        model = GPT(50_304, 1024, 768, 12, 12)
    assert sum(p.numel() for p in model.parameters()) == 124_475_904
    assert model.flops_per_token() == 742_136_832.0 + 113_246_208.0 == 855_383_040.0


@pytest.mark.parametrize(
    ("device_name", "model", "peak"),
    [
        ("NVIDIA H200", "H200 SXM", 989.4e12),
        ("NVIDIA H200 NVL", "H200 NVL", 835.5e12),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4e12),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.5e12),
        ("NVIDIA H100 NVL", "H100 NVL", 835.5e12),
        ("NVIDIA A100-SXM4-40GB", "A100", 312e12),
        ("NVIDIA A100-SXM4-80GB", "A100", 312e12),
        ("NVIDIA A100 80GB PCIe", "A100", 312e12),
        ("NVIDIA L4", "L4", 121e12),
        ("NVIDIA L40S", "L40S", 362.05e12),
        ("NVIDIA L40", "L40", 181.05e12),
        ("NVIDIA B200", "B200", 2.25e15),
        ("NVIDIA GB200", "GB200", 2.5e15),
    ],
)
def test_gpu_peak_by_exact_device_name(device_name: str, model: str, peak: float) -> None:
    assert gpu_peak(device_name) == (model, peak)
    assert gpu_peak_flops(device_name) == peak


@pytest.mark.parametrize(
    "device_name",
    [
        "Tesla T4",
        "Tesla V100-SXM2-16GB",
        "Tesla P100-PCIE-16GB",
        "NVIDIA A10G",
        "NVIDIA GH200 480GB",
        "NVIDIA RTX A1000",
        "NVIDIA A1000",
        "cpu",
        "",
    ],
)
def test_gpu_peak_unknown_device_is_none(device_name: str) -> None:
    assert gpu_peak(device_name) is None
    assert gpu_peak_flops(device_name) is None


def test_gpu_peak_rows_are_dense_and_sourced() -> None:
    assert [row.model for row in GPU_PEAK_BF16_FLOPS] == [
        "H100 PCIe",
        "H100 NVL",
        "H100 SXM",
        "H200 NVL",
        "H200 SXM",
        "A100",
        "L4",
        "L40S",
        "L40",
        "B200",
        "GB200",
    ]
    assert all(row.source.startswith("https://") for row in GPU_PEAK_BF16_FLOPS)
    # Only the A100 row carries the A100's peak.
    assert [row.model for row in GPU_PEAK_BF16_FLOPS if row.flops == 312e12] == ["A100"]


def test_mfu_fields() -> None:
    # 8 samples/s x 1e12 FLOPs on 2 H200s: 8e12 / (2 * 989.4e12).
    assert mfu_fields(1e12, 8.0, 989.4e12, 2) == {"mfu": 8e12 / 1978.8e12, "peak_flops": 989.4e12}
    # CPU (no peak) and a model without a FLOPs count: null, never a made-up number.
    assert mfu_fields(1e12, 8.0, None, 1) == {"mfu": None, "peak_flops": None}
    assert mfu_fields(None, 8.0, 312e12, 1) == {"mfu": None, "peak_flops": 312e12}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
def test_gpu_benchmark_skips_without_cuda() -> None:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "gpu_throughput", Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_throughput.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == {
        "skipped": True,
        "reason": "no CUDA GPU (torch.cuda.is_available() is False)",
    }


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="needs the tensorflow extra"
)
def test_tensorflow_gpt_flops_match_the_torch_count() -> None:
    # In a child process: importing TensorFlow here would leave it in this pytest process,
    # where other tests assert that their code paths never load it.
    probe = f"""
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.tf_multiworker.models import build_model, flops_per_sample
cfg = TrainConfig(model="gpt", gpt_layers={L}, gpt_dim={D}, gpt_heads={H}, seq_len={T},
                  vocab_size={V})
model = build_model(cfg, ({T},), {V})
print(model.count_params(), flops_per_sample(model, cfg))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    assert done.stdout.split()[-2:] == ["120576", str(797_184.0 * 64)]

"""Tokens/s and MFU of the bundled GPT model training in bf16 on one GPU.

    python benchmarks/gpu_throughput.py [--preset gpt-1.3b] [--batch 16] [--mode default]
        [--layers 24 --dim 2048 --heads 16] [--seq 1024] [--vocab 50304] [--sdpa flash]
        [--no-compile] [--steps 30 --warmup 10]

Prints one JSON object; `{"skipped": true, "reason": ...}` where no CUDA GPU exists. One step
is the trainer's step on the same model: bf16 autocast forward, cross-entropy, backward, a
fused AdamW update. What differs from `trainstack.trainers.torch_ddp` is only where the compiled region
ends: here the loss is inside it, so Inductor fuses the float32 upcast of the logits into
the cross-entropy instead of writing them out. Attention goes through
scaled_dot_product_attention with every backend but the one named in `--sdpa` switched off,
so a run with `--sdpa flash` proves flash attention ran (it fails otherwise).

MFU = `GPT.flops_per_token()` x tokens/s over the dense bf16 peak of the device from
`trainstack.trainers.common.metrics.gpu_peak` (null for a GPU the table lacks). `matmul_tflops` is an
8192^3 bf16 product on random data measured in the same process: the practical ceiling that
MFU should be read against (about 80% of the datasheet peak on an H200). Measured figures and
their commands: benchmarks/results/gpu_throughput-h200.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

# (layers, dim, heads): GPT-2 small/medium/large and GPT-3 XL shapes.
PRESETS: dict[str, tuple[int, int, int]] = {
    "gpt2-124m": (12, 768, 12),
    "gpt2-350m": (24, 1024, 16),
    "gpt2-774m": (36, 1280, 20),
    "gpt-1.3b": (24, 2048, 16),
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpt-1.3b")
    p.add_argument("--layers", type=int, help="overrides the preset")
    p.add_argument("--dim", type=int, help="overrides the preset")
    p.add_argument("--heads", type=int, help="overrides the preset")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument(
        "--mode",
        default="default",
        choices=["default", "max-autotune-no-cudagraphs", "max-autotune"],
        help="torch.compile mode",
    )
    p.add_argument("--sdpa", default="flash", choices=["flash", "cudnn", "efficient", "any"])
    return p.parse_args(argv)


def _sdpa_only(backend: str) -> None:
    import torch

    if backend == "any":
        return
    torch.backends.cuda.enable_flash_sdp(backend == "flash")
    torch.backends.cuda.enable_cudnn_sdp(backend == "cudnn")
    torch.backends.cuda.enable_mem_efficient_sdp(backend == "efficient")
    torch.backends.cuda.enable_math_sdp(False)


def matmul_tflops(n: int = 8192, reps: int = 20) -> float:
    """bf16 n x n x n product on random data, median over `reps` event-timed runs."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * n**3 / statistics.median(times) / 1e12


def main(argv: list[str] | None = None) -> dict[str, Any]:
    # Options first: --help and bad flags answer on a machine without a GPU too.
    args = parse(argv)
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        return {"skipped": True, "reason": "no CUDA GPU (torch.cuda.is_available() is False)"}
    from trainstack.trainers.common.metrics import gpu_peak
    from trainstack.trainers.torch_ddp.models import GPT

    preset = PRESETS[args.preset]
    layers = args.layers or preset[0]
    dim = args.dim or preset[1]
    heads = args.heads or preset[2]
    seq, batch, vocab = args.seq, args.batch, args.vocab
    torch.set_float32_matmul_precision("high")
    _sdpa_only(args.sdpa)
    ceiling = matmul_tflops()
    torch.manual_seed(0)
    model = GPT(vocab, seq, dim, layers, heads).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        return F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))

    step_loss = torch.compile(loss_of, mode=args.mode) if args.compile else loss_of
    # Fresh random batches, rotated, so nothing is timed on one cached input.
    batches = [
        (
            torch.randint(0, vocab, (batch, seq), device="cuda"),
            torch.randint(0, vocab, (batch, seq), device="cuda"),
        )
        for _ in range(4)
    ]

    def step(i: int) -> torch.Tensor:
        x, y = batches[i % len(batches)]
        loss = step_loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    compile_start = time.perf_counter()
    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - compile_start
    events = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
    start = time.perf_counter()
    events[0].record()
    for i in range(args.steps):
        loss = step(i)
        events[i + 1].record()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    step_times = [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(args.steps)]
    tokens_per_s = args.steps * batch * seq / elapsed
    name = torch.cuda.get_device_name()
    match = gpu_peak(name)
    peak = match[1] if match else None
    flops_per_token = model.flops_per_token()
    achieved = flops_per_token * tokens_per_s
    return {
        "skipped": False,
        "device": name,
        "peak_device": match[0] if match else None,
        "peak_bf16_flops": peak,
        "tokens_per_s": tokens_per_s,
        "mfu": achieved / peak if peak else None,
        "model_tflops": achieved / 1e12,
        "matmul_tflops": ceiling,
        "fraction_of_matmul": achieved / 1e12 / ceiling,
        "flops_per_token": flops_per_token,
        "params": sum(p.numel() for p in model.parameters()),
        "step_time_s": elapsed / args.steps,
        "step_time_median_s": statistics.median(step_times),
        "warmup_s": warmup_s,
        "final_loss": float(loss),
        "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "torch": torch.__version__,
        "config": {
            "preset": args.preset,
            "layers": layers,
            "dim": dim,
            "heads": heads,
            "seq_len": seq,
            "batch": batch,
            "vocab": vocab,
            "steps": args.steps,
            "warmup": args.warmup,
            "compile": args.compile,
            "compile_mode": args.mode if args.compile else None,
            "sdpa": args.sdpa,
            "precision": "bf16",
            "optimizer": "AdamW(fused=True)",
        },
    }


if __name__ == "__main__":
    print(json.dumps(main()))

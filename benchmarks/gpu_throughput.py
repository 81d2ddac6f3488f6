"""Tokens/s and MFU of the bundled GPT model in bf16 on one GPU.

    python benchmarks/gpu_throughput.py [--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16]

Prints one JSON object; `{"skipped": true, "reason": ...}` where no CUDA GPU exists. MFU uses
the model's FLOPs-per-token estimate (6N + 12 * layers * dim * seq) and the dense bf16 peak
from `trainers.common.metrics.GPU_PEAK_BF16_FLOPS`. One training step here is exactly the
trainer's: autocast forward, backward, fused AdamW.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _arg(name: str, default: int) -> int:
    if name in sys.argv:
        return int(sys.argv[sys.argv.index(name) + 1])
    return default


def main() -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        return {"skipped": True, "reason": "no CUDA GPU (torch.cuda.is_available() is False)"}
    from trainers.common.metrics import gpu_peak_flops
    from trainers.torch_ddp.models import GPT

    layers, dim, heads = _arg("--layers", 12), _arg("--dim", 768), _arg("--heads", 12)
    seq, batch, vocab = _arg("--seq", 1024), _arg("--batch", 16), _arg("--vocab", 50304)
    steps, warmup = _arg("--steps", 30), _arg("--warmup", 10)
    compile_model = "--compile" in sys.argv
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = GPT(vocab, seq, dim, layers, heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step_model = torch.compile(model) if compile_model else model
    x = torch.randint(0, vocab, (batch, seq), device=device)
    y = torch.randint(0, vocab, (batch, seq), device=device)

    def step() -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_model(x)
        loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    tokens_per_s = steps * batch * seq / elapsed
    name = torch.cuda.get_device_name(device)
    peak = gpu_peak_flops(name)
    flops_per_token = model.flops_per_token()
    return {
        "skipped": False,
        "device": name,
        "tokens_per_s": tokens_per_s,
        "mfu": flops_per_token * tokens_per_s / peak if peak else None,
        "peak_bf16_flops": peak,
        "flops_per_token": flops_per_token,
        "params": sum(p.numel() for p in model.parameters()),
        "step_time_s": elapsed / steps,
        "final_loss": float(loss),
        "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "config": {
            "layers": layers,
            "dim": dim,
            "heads": heads,
            "seq_len": seq,
            "batch": batch,
            "vocab": vocab,
            "steps": steps,
            "warmup": warmup,
            "compile": compile_model,
            "precision": "bf16",
        },
    }


if __name__ == "__main__":
    print(json.dumps(main()))

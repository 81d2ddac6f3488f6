"""Overhead of the bundled torch trainer against a bare hand-written DDP loop, on CPU.

    python benchmarks/trainer_overhead.py            # prints one JSON object

Same model (the bundled MLP), same synthetic data, same processes (torchrun, gloo, one
thread each). Throughput counts steps after a warm-up and excludes checkpoint stalls, so
`throughput_ratio` (bundled / bare, target >= 0.97) measures what the trainer adds per step:
the preemption flag all-reduce, metrics, the sampler. `scaling_efficiency_2` is the
bundled trainer's throughput with 2 workers over twice that with 1 (weak scaling, fixed
per-worker batch; target >= 0.90). Checkpoint stall is the training time blocked per save,
synchronous versus async (copy to CPU, write on a thread). Throughput pairs are run
alternately and the best of the repeats is kept, which filters out other load on a shared
machine.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from torchrun_records import torchrun_records  # benchmarks/, beside this script

REPO = Path(__file__).resolve().parents[1]
PER_WORKER_BATCH = 1024
HIDDEN = 512
STEPS = 150
WARMUP = 10
REPEATS = 2
CKPT_STEPS = 60
CKPT_EVERY = 10


def _trainer_args(workers: int, steps: int) -> list[str]:
    return [
        "--model=mlp",
        "--dataset=synthetic",
        f"--hidden_dim={HIDDEN}",
        f"--global_batch_size={PER_WORKER_BATCH * workers}",
        f"--steps={steps}",
        f"--log_every={steps}",
        "--torch_threads=1",
        "--learning_rate=0.001",
    ]


def bundled(workers: int) -> float:
    records = torchrun_records(
        workers, ["-m", "trainstack.trainers.torch_ddp", *_trainer_args(workers, STEPS)]
    )
    done = next(r for r in records if r["event"] == "done")
    return float(done["samples_per_s"])


def bare(workers: int) -> float:
    records = torchrun_records(workers, [__file__, "--bare-worker", str(workers)])
    return float(records[0]["samples_per_s"])


def checkpoint_stall(async_save: bool, directory: str) -> dict[str, float]:
    args = [
        *_trainer_args(2, CKPT_STEPS),
        f"--checkpoint_dir={directory}",
        f"--checkpoint_every={CKPT_EVERY}",
        f"--async_checkpoint={async_save}",
    ]
    records = torchrun_records(2, ["-m", "trainstack.trainers.torch_ddp", *args])
    saves = [
        r
        for r in records
        if r["event"] == "checkpoint" and r["rank"] == 0 and r.get("reason") is None
    ]
    writes = [r["write_s"] for r in saves if r.get("write_s") is not None]
    return {
        "stall_s": statistics.median(r["stall_s"] for r in saves),
        # Async writes finish off the training thread; only synchronous ones report write_s.
        "write_s": statistics.median(writes) if writes else None,
        "saves": len(saves),
    }


def bare_worker(workers: int) -> None:
    """A minimal DDP loop as one would write it by hand; run under torchrun."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from trainstack.trainers.common.data import synthetic_classification
    from trainstack.trainers.torch_ddp.models import MLP

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    train, _ = synthetic_classification(8192, 0)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(MLP(train.x.shape[1], HIDDEN, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    rng = np.random.default_rng(rank)
    x_all, y_all = torch.from_numpy(train.x), torch.from_numpy(train.y)
    start = 0.0
    for step in range(STEPS):
        if step == WARMUP:
            start = time.perf_counter()
        idx = torch.from_numpy(rng.integers(0, len(train), PER_WORKER_BATCH))
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    elapsed = time.perf_counter() - start
    if rank == 0:
        rate = (STEPS - WARMUP) * PER_WORKER_BATCH * workers / elapsed
        print(json.dumps({"samples_per_s": rate}), flush=True)
    dist.destroy_process_group()


def main() -> None:
    started = time.perf_counter()
    runs: dict[str, list[float]] = {"bundled_2": [], "bare_2": [], "bundled_1": [], "bare_1": []}
    for _ in range(REPEATS):
        runs["bundled_2"].append(bundled(2))
        runs["bare_2"].append(bare(2))
        runs["bundled_1"].append(bundled(1))
        runs["bare_1"].append(bare(1))
    best = {k: max(v) for k, v in runs.items()}
    with tempfile.TemporaryDirectory() as tmp:
        sync = checkpoint_stall(False, f"{tmp}/sync")
        async_ = checkpoint_stall(True, f"{tmp}/async")
    print(
        json.dumps(
            {
                "throughput_ratio": best["bundled_2"] / best["bare_2"],
                "async_ckpt_stall_s": async_["stall_s"],
                "sync_ckpt_stall_s": sync["stall_s"],
                "scaling_efficiency_2": best["bundled_2"] / (2 * best["bundled_1"]),
                # The same ratio for the bare loop: what this machine allows at all.
                "bare_scaling_efficiency_2": best["bare_2"] / (2 * best["bare_1"]),
                "samples_per_s": best,
                "samples_per_s_all_runs": runs,
                "checkpoint": {"sync": sync, "async": async_},
                "config": {
                    "model": "mlp",
                    "hidden_dim": HIDDEN,
                    "per_worker_batch": PER_WORKER_BATCH,
                    "steps": STEPS,
                    "warmup_steps": WARMUP,
                    "repeats": REPEATS,
                    "checkpoint_every": CKPT_EVERY,
                    "threads_per_worker": 1,
                    "backend": "gloo",
                    "device": "cpu",
                },
                "wall_s": time.perf_counter() - started,
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bare-worker":
        bare_worker(int(sys.argv[2]))
    else:
        main()

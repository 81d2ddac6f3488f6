"""Tokens/s of the bundled GPT trainer on token shards against a bare loop over the same data.

    python benchmarks/token_files.py [--text FILE] [--workers 2]     # prints one JSON object

Shards: `examples/tokens/make_shards.py` turns `--text` (default: generated words, about
2 MB, so nothing is downloaded) into byte-level uint16 shards (3 training shards and a
validation file). Bundled: `trainstack.trainers.torch_ddp --dataset=files` over them (memory-mapped
windows in the global sample order, each rank reading only its slice). Bare: the loop
nanoGPT's `train.py` runs, by hand: each rank memory-maps the training shards and draws
random windows of `seq_len + 1` tokens, then the same GPT, DDP, AdamW step. Both run under
torchrun (gloo, one thread per rank) on CPU with the same model, batch and steps; tokens/s
counts the steps after a warm-up (the trainer's `done` record excludes its first 5 steps and
checkpoint stalls; it keeps no checkpoints here). The pair runs alternately `--repeats`
times and the best of each is kept, which filters out other load on a shared machine;
`ratio` is bundled over bare. `bundled_data_wait_share` is the part of the trainer's step
time spent fetching batches from the shards (its `data_wait_s` over `step_time_s`), the cost
of the token-file reader itself, free of the run-to-run noise in the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchrun_records import torchrun_records  # benchmarks/, beside this script

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "tokens" / "make_shards.py"
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "it",
    "at",
    "from",
    "his",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "or",
    "has",
    "had",
    "not",
    "but",
    "first",
    "one",
    "their",
    "its",
    "new",
    "after",
    "who",
    "they",
    "have",
    "her",
    "she",
    "two",
    "been",
    "other",
    "when",
    "there",
    "all",
    "during",
    "into",
    "school",
    "time",
    "may",
    "years",
    "more",
    "most",
    "only",
    "over",
    "city",
    "some",
]
DIM, LAYERS, HEADS, SEQ = 128, 2, 4, 128
PER_RANK_BATCH = 16
STEPS = 60
WARMUP = 5


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", type=Path, help="any text file (default: generated words)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args(argv)


def make_shards(text: Path | None, out: Path) -> dict[str, Any]:
    if text is None:
        rng = random.Random(0)
        text = out.parent / "words.txt"
        text.write_text(" ".join(rng.choice(WORDS) for _ in range(400_000)))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(text), "--out", str(out), "--shards", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    meta: dict[str, Any] = json.loads(proc.stdout)
    return meta


def bundled(workers: int, data: Path) -> tuple[float, float]:
    """Tokens/s, and the share of step time spent fetching batches (`data_wait_s`)."""
    records = torchrun_records(
        workers,
        [
            "-m",
            "trainstack.trainers.torch_ddp",
            "--model=gpt",
            "--dataset=files",
            f"--data_path={data}",
            f"--gpt_dim={DIM}",
            f"--gpt_layers={LAYERS}",
            f"--gpt_heads={HEADS}",
            f"--seq_len={SEQ}",
            f"--global_batch_size={PER_RANK_BATCH * workers}",
            f"--steps={STEPS}",
            "--log_every=10",
            "--torch_threads=1",
        ],
    )
    done = next(r for r in records if r["event"] == "done")
    windows = [r for r in records if r["event"] == "train" and r["rank"] == 0 and r["step"] > 10]
    data_share = statistics.median(r["data_wait_s"] / r["step_time_s"] for r in windows)
    return float(done["tokens_per_s"]), data_share


def bare(workers: int, data: Path) -> float:
    records = torchrun_records(workers, [__file__, "--bare-worker", str(workers), str(data)])
    return float(records[0]["tokens_per_s"])


def bare_worker(workers: int, data: Path) -> None:
    """nanoGPT's loop by hand: memory-mapped shards, random windows, DDP; under torchrun."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from trainstack.trainers.torch_ddp.models import GPT

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    shards = [np.memmap(p, dtype=np.uint16, mode="r") for p in sorted(data.glob("train*.bin"))]
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(GPT(256, SEQ, DIM, LAYERS, HEADS))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    rng = np.random.default_rng(rank)
    start = 0.0
    for step in range(STEPS):
        if step == WARMUP:
            start = time.perf_counter()
        shard = shards[rng.integers(len(shards))]
        offsets = rng.integers(0, len(shard) - SEQ - 1, PER_RANK_BATCH)
        window = np.stack([shard[o : o + SEQ + 1] for o in offsets]).astype(np.int64)
        tokens = torch.from_numpy(window)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    elapsed = time.perf_counter() - start
    if rank == 0:
        rate = (STEPS - WARMUP) * PER_RANK_BATCH * workers * SEQ / elapsed
        print(json.dumps({"tokens_per_s": rate}), flush=True)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    started = time.perf_counter()
    runs: dict[str, list[float]] = {"bundled": [], "bare": []}
    data_share: list[float] = []
    with tempfile.TemporaryDirectory(prefix="trainstack-tokens-") as tmp:
        data = Path(tmp) / "tokens"
        meta = make_shards(args.text, data)
        for _ in range(args.repeats):
            rate, share = bundled(args.workers, data)
            runs["bundled"].append(rate)
            data_share.append(share)
            runs["bare"].append(bare(args.workers, data))
    best = {k: max(v) for k, v in runs.items()}
    print(
        json.dumps(
            {
                "ratio": best["bundled"] / best["bare"],
                "tokens_per_s": best,
                "tokens_per_s_all_runs": runs,
                # Median over the trainer's log windows of data_wait_s / step_time_s.
                "bundled_data_wait_share": statistics.median(data_share),
                "shards": meta,
                "config": {
                    "model": "gpt",
                    "gpt_dim": DIM,
                    "gpt_layers": LAYERS,
                    "gpt_heads": HEADS,
                    "seq_len": SEQ,
                    "vocab_size": 256,
                    "workers": args.workers,
                    "per_rank_batch": PER_RANK_BATCH,
                    "steps": STEPS,
                    "warmup_steps": WARMUP,
                    "repeats": args.repeats,
                    "threads_per_worker": 1,
                    "backend": "gloo",
                    "device": "cpu",
                },
                "wall_s": time.perf_counter() - started,
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--bare-worker":
        bare_worker(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()

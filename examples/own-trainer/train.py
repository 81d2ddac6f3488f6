"""A plain PyTorch DDP training script that trainstack runs as your own code.

It imports nothing from trainstack: it reads the run contract from the environment
(torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*, and TRAINSTACK_CHECKPOINT_DIR), saves a
checkpoint every --checkpoint-every steps, resumes from the newest one, saves and exits 143 on
SIGTERM (preemption), and ends with one JSON line naming the sha256 of the final weights, so
two runs can be compared exactly.

    torchrun --standalone --nproc-per-node=2 train.py --steps=60
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

PREEMPTED = 143


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow down (tests)")
    return parser.parse_args()


def batch(step: int, rank: int, per_rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of one step: a function of the step, so a resumed run sees the same data."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(per_rank, 16, generator=gen)
    y = (x[:, :4].sum(dim=1, keepdim=True) > 0).float()
    return x, y


def latest_checkpoint(root: Path) -> Path | None:
    steps = [p for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit()]
    return max(steps, key=lambda p: int(p.name[5:]), default=None)


def save(root: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Rank 0 writes step-N atomically: a temporary folder renamed into place."""
    tmp = root / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, tmp / "s.pt")
    os.replace(tmp, root / f"step-{step}")


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    args = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    root = Path(os.environ["TRAINSTACK_CHECKPOINT_DIR"])
    root.mkdir(parents=True, exist_ok=True)
    start = 0
    found = latest_checkpoint(root)
    if found is not None:
        state = torch.load(found / "s.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    ddp = DistributedDataParallel(model)
    stop = torch.zeros(1)
    signal.signal(signal.SIGTERM, lambda *_: stop.fill_(1))
    loss_fn = nn.BCEWithLogitsLoss()
    if rank == 0:
        print(json.dumps({"event": "start", "rank": 0, "step": start, "world": world}), flush=True)
    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, rank, args.global_batch // world, args.seed)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        # Every rank agrees on stopping, so all save the same step.
        flag = stop.clone()
        dist.all_reduce(flag)
        if step % args.checkpoint_every == 0 or step == args.steps or flag.item():
            if rank == 0:
                save(root, step, model, opt)
            dist.barrier()
        if flag.item() and step < args.steps:
            if rank == 0:
                print(json.dumps({"event": "preempted", "rank": 0, "step": step}), flush=True)
            dist.destroy_process_group()
            return PREEMPTED
    if rank == 0:
        record = {"event": "done", "rank": 0, "step": args.steps, "params_sha256": digest(model)}
        print(json.dumps(record), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

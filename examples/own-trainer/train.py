"""A plain PyTorch DDP training script that trainstack runs as your own code.

It imports nothing from trainstack: it reads the run contract from the environment
(torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*, and TRAINSTACK_CHECKPOINT_DIR, a local
folder or a gs:// URL on the cloud), saves a checkpoint every --checkpoint-every steps
through fsspec (gcsfs for gs://), resumes from the newest complete one, saves and exits 143
on SIGTERM (preemption), and ends with one JSON line naming the sha256 of the final weights,
so two runs can be compared exactly. Every --log-every steps rank 0 prints a `train` JSON
line (step, loss), which `trainstack local-run` shows as progress and Cloud Logging keeps.
On GPUs each process trains on its own device (`LOCAL_RANK`) over NCCL; on CPU over gloo.

    torchrun --standalone --nproc-per-node=2 train.py --steps=60
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import signal
import sys
import time

import fsspec
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
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow down (tests)")
    return parser.parse_args()


def batch(step: int, rank: int, per_rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of one step: a function of the step, so a resumed run sees the same data."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(per_rank, 16, generator=gen)
    y = (x[:, :4].sum(dim=1, keepdim=True) > 0).float()
    return x, y


def latest_checkpoint(fs: fsspec.AbstractFileSystem, root: str) -> str | None:
    """The newest step folder whose COMPLETE marker was written (the marker comes last, so a
    save cut short is never loaded; object stores have no atomic folder rename)."""
    done = [p.rsplit("/", 2)[-2] for p in fs.glob(f"{root}/step-*/COMPLETE")]
    steps = [int(name[5:]) for name in done if name[5:].isdigit()]
    return f"{root}/step-{max(steps)}" if steps else None


def save(
    fs: fsspec.AbstractFileSystem,
    root: str,
    step: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
) -> None:
    """Rank 0 writes step-N: the state, then the COMPLETE marker."""
    buffer = io.BytesIO()
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    fs.makedirs(f"{root}/step-{step}", exist_ok=True)
    fs.pipe_file(f"{root}/step-{step}/s.pt", buffer.getvalue())
    fs.pipe_file(f"{root}/step-{step}/COMPLETE", b"{}")


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    args = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        # Deterministic cuBLAS needs this before its first call (torch's reproducibility notes).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fs, root = fsspec.core.url_to_fs(os.environ["TRAINSTACK_CHECKPOINT_DIR"])
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    start = 0
    found = latest_checkpoint(fs, root)
    if found is not None:
        state = torch.load(
            io.BytesIO(fs.cat_file(f"{found}/s.pt")), map_location=device, weights_only=True
        )
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    ddp = DistributedDataParallel(model)
    stop = torch.zeros(1, device=device)
    signal.signal(signal.SIGTERM, lambda *_: stop.fill_(1))
    loss_fn = nn.BCEWithLogitsLoss()
    if rank == 0:
        print(json.dumps({"event": "start", "rank": 0, "step": start, "world": world}), flush=True)
    for step in range(start + 1, args.steps + 1):
        x, y = (t.to(device) for t in batch(step, rank, args.global_batch // world, args.seed))
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and step % args.log_every == 0:
            record = {"event": "train", "rank": 0, "step": step, "loss": round(loss.item(), 6)}
            print(json.dumps(record), flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        # Every rank agrees on stopping, so all save the same step.
        flag = stop.clone()
        dist.all_reduce(flag)
        if step % args.checkpoint_every == 0 or step == args.steps or flag.item():
            if rank == 0:
                save(fs, root, step, model, opt)
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
    code = main()
    # Leave without interpreter finalization: DDP's reducer can outlive
    # destroy_process_group, and when finalization frees it gloo's threads can abort the
    # process ("terminate called without an active exception", exit 134) after a successful
    # run. Everything was written and flushed before main() returned.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

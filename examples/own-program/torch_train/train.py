"""Your own PyTorch code: torchrun starts one process per GPU; each joins the process group
from torchrun's environment and writes to the run contract's folders."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    total = torch.ones(1, device="cuda")
    dist.all_reduce(total)
    if rank == 0:
        print(f"world {int(total.item())}, outputs in {os.environ['TRAINSTACK_OUTPUT_DIR']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

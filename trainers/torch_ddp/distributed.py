"""The torch trainer's process group and model wrapping: NCCL on GPU, gloo on CPU; DDP or
FSDP2, optionally compiled (split from `trainstack.trainers.torch_ddp.train`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from trainstack.trainers.common.cluster import ClusterInfo
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import COLLECTIVE_TIMEOUT_ENV


@dataclass
class Runtime:
    cfg: TrainConfig
    cluster: ClusterInfo
    device: torch.device
    distributed: bool


def collective_timeout(environ: Mapping[str, str]) -> timedelta | None:
    """The process group's timeout from `COLLECTIVE_TIMEOUT_ENV`; None: torch's default.

    Raises ValueError unless the value is a number of seconds > 0.
    """
    raw = environ.get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{COLLECTIVE_TIMEOUT_ENV}: expected seconds > 0, got {raw!r}")
    return timedelta(seconds=seconds)


def init_distributed(
    cfg: TrainConfig, cluster: ClusterInfo, timeout: timedelta | None = None
) -> Runtime:
    if torch.cuda.is_available():
        device = torch.device("cuda", cluster.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # Under torchrun even one process joins a group, so the DDP/NCCL path runs as configured.
    distributed = cluster.world_size > 1 or cluster.platform == "torchrun"
    if distributed:
        init = (
            "env://"
            if cluster.platform == "torchrun"
            else f"tcp://{cluster.coordinator_address}:{cluster.coordinator_port}"
        )
        dist.init_process_group(
            backend=backend,
            init_method=init,
            rank=cluster.rank,
            world_size=cluster.world_size,
            device_id=device if backend == "nccl" else None,
            timeout=timeout,  # None: torch's default for the backend
        )
    return Runtime(cfg, cluster, device, distributed)


def wrap(model: nn.Module, rt: Runtime) -> nn.Module:
    cfg = rt.cfg
    if cfg.strategy == "fsdp":
        if not rt.distributed:
            raise ValueError("strategy 'fsdp' needs more than one process; use 'ddp'")
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if cfg.precision == "bf16" and rt.device.type == "cuda"
            else MixedPrecisionPolicy()
        )
        for unit in model.shard_units():  # type: ignore[operator]
            fully_shard(unit, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    elif rt.distributed:
        model = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[rt.device.index] if rt.device.type == "cuda" else None,
            bucket_cap_mb=cfg.bucket_cap_mb,
        )
        if rt.device.type == "cpu":
            model.register_comm_hook(None, _exact_mean_hook)
    if cfg.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    return model


# No annotations: DDP rejects a hook whose `bucket` annotation is not the GradBucket class,
# and this module's annotations are strings.
def _exact_mean_hook(state, bucket):
    """DDP gradient averaging on gloo (CPU processes) whose result does not depend on the
    order of the summation: float32 gradients summed in float64 are exact, then averaged
    and rounded once. DDP's own float32 ring sum rounds by chunk, and its chunks move when
    a restarted process lays out its buckets again, so with 3 or more processes a resumed
    run would drift from an uninterrupted one by a few ulps."""
    buffer = bucket.buffer()
    future = dist.all_reduce(buffer.to(torch.float64), async_op=True).get_future()

    def average(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        return buffer.copy_(done.value()[0].div_(dist.get_world_size()))

    return future.then(average)

"""The torch side of the trainer telemetry (`trainstack.trainers.common.metrics`): GPU memory and
utilization fields of the `train` line, and torch's TensorBoard writer."""

from __future__ import annotations

import contextlib

import torch

from trainstack.trainers.common.metrics import ScalarWriter


def gpu_stats(device_index: int) -> dict[str, float]:
    if not torch.cuda.is_available():
        return {}
    stats = {
        "gpu_mem_alloc_gib": torch.cuda.memory_allocated(device_index) / 2**30,
        "gpu_mem_peak_gib": torch.cuda.max_memory_allocated(device_index) / 2**30,
    }
    # Utilization needs NVML (pynvml), absent from some images; it is optional.
    with contextlib.suppress(ModuleNotFoundError, RuntimeError):
        stats["gpu_util_pct"] = float(torch.cuda.utilization(device_index))
    return stats


def torch_scalar_writer(directory: str) -> ScalarWriter:
    """torch's SummaryWriter (imported on first use: it pulls in tensorboard)."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(directory)

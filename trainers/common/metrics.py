"""Trainer telemetry: JSON log lines, TensorBoard events, a progress bar on a terminal.

Every line on stdout is one JSON object with `event`, `step`, `rank`, `node` and `worker`
labels and a `severity` that Cloud Logging reads from structured container logs. Events:
`start`, `resume`, `train` (step time, samples/s, tokens/s, MFU, data-loader wait),
`checkpoint` (stall and write time), `preempted`, `eval`, `done` (rank 0, exactly once on
success); names in `trainstack.trainers.common.contract`, the `train` and `done` fields in
`trainstack.trainers.common.records`. TensorBoard scalars go to `AIP_TENSORBOARD_LOG_DIR` (Vertex) or the
configured directory from rank 0 only, through the `ScalarWriter` each trainer passes in:
torch's SummaryWriter (`trainstack.trainers.torch_ddp.metrics`) or a `tf.summary` writer
(`trainstack.trainers.tf_multiworker.metrics`), so this module imports neither framework. A gs://
directory is written locally and uploaded on close, because torch's SummaryWriter writes
local files only and gcsfs (not TensorFlow's own GCS client) is what honours the emulator
settings in `trainstack.trainers.common.storage`.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, TextIO

from trainstack.trainers.common.contract import (
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_LOSS,
    FIELD_MFU,
    FIELD_NODE,
    FIELD_PEAK_FLOPS,
    FIELD_RANK,
    FIELD_RUN,
    FIELD_SEVERITY,
    FIELD_STEP,
    FIELD_TIME,
    FIELD_WORKER,
)


class GpuPeak(NamedTuple):
    """One row of the peak table: a GPU model and its dense bf16 tensor-core peak."""

    model: str
    pattern: str
    """Regular expression searched in the upper-cased CUDA device name."""
    flops: float
    """Dense (no 2:4 sparsity) bf16 FLOP/s of one GPU."""
    source: str


_H100_SHEET = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200_SHEET = "https://www.nvidia.com/en-us/data-center/h200/"

GPU_PEAK_BF16_FLOPS: tuple[GpuPeak, ...] = (
    # Datasheets print the sparse figure with a footnote; the dense peak is half of it.
    # First match wins, so each variant (PCIe, NVL) precedes its SXM part's catch-all row;
    # word boundaries keep 'L4' off 'L40S' and 'H200'/'B200' off 'GH200'/'GB200'.
    GpuPeak("H100 PCIe", r"\bH100\b.*\bPCIE\b", 756.5e12, _H100_SHEET),
    GpuPeak("H100 NVL", r"\bH100\b.*\bNVL\b", 835.5e12, _H100_SHEET),
    GpuPeak("H100 SXM", r"\bH100\b", 989.4e12, _H100_SHEET),
    GpuPeak("H200 NVL", r"\bH200\b.*\bNVL\b", 835.5e12, _H200_SHEET),
    GpuPeak("H200 SXM", r"\bH200\b", 989.4e12, _H200_SHEET),
    GpuPeak(
        "A100",
        r"\bA100\b",
        312e12,
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    ),
    GpuPeak("L4", r"\bL4\b", 121e12, "https://www.nvidia.com/en-us/data-center/l4/"),
    GpuPeak("L40S", r"\bL40S\b", 362.05e12, "https://www.nvidia.com/en-us/data-center/l40s/"),
    GpuPeak("L40", r"\bL40\b", 181.05e12, "https://www.nvidia.com/en-us/data-center/l40/"),
    GpuPeak("B200", r"\bB200\b", 2.25e15, "https://www.nvidia.com/en-us/data-center/hgx/"),
    GpuPeak("GB200", r"\bGB200\b", 2.5e15, "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"),
)
"""Dense bf16 peaks of the GPUs MFU is reported for. GPUs without bf16 tensor cores (T4,
V100, P100, P4) are absent on purpose: MFU against a bf16 peak means nothing there."""


def gpu_peak(device_name: str) -> tuple[str, float] | None:
    """(table model, dense bf16 FLOP/s) for a CUDA device name such as 'NVIDIA H100 80GB
    HBM3'; None for a device the table lacks (never another GPU's peak)."""
    upper = device_name.upper()
    for row in GPU_PEAK_BF16_FLOPS:
        if re.search(row.pattern, upper):
            return row.model, row.flops
    return None


def gpu_peak_flops(device_name: str) -> float | None:
    """Dense bf16 FLOP/s of one device named `device_name`; None where unknown."""
    match = gpu_peak(device_name)
    return match[1] if match else None


def mfu(flops_per_sample: float, samples_per_s: float, peak_flops: float, devices: int) -> float:
    """Model FLOPs utilization: achieved model FLOP/s over the peak of all devices."""
    return flops_per_sample * samples_per_s / (peak_flops * devices)


def mfu_fields(
    flops_per_sample: float | None, samples_per_s: float, peak_flops: float | None, devices: int
) -> dict[str, float | None]:
    """The `train` line's `mfu` and the per-device `peak_flops` it is measured against.

    Both keys are always there; both are null where the device's peak is unknown (CPU, TPU,
    a GPU not in GPU_PEAK_BF16_FLOPS) and `mfu` is null where the model's FLOPs are, rather
    than a figure against some other device's peak. The peak is the dense bf16 one whatever
    the run's precision, so fp32 runs read low.
    """
    value = (
        mfu(flops_per_sample, samples_per_s, peak_flops, devices)
        if flops_per_sample and peak_flops
        else None
    )
    return {FIELD_MFU: value, FIELD_PEAK_FLOPS: peak_flops}


class ScalarWriter(Protocol):
    """What MetricsLogger needs from a TensorBoard writer (torch's SummaryWriter has it)."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> Any: ...

    def close(self) -> Any: ...


class MetricsLogger:
    """Writes this rank's JSON lines; rank 0 also feeds TensorBoard and the progress bar."""

    def __init__(
        self,
        *,
        rank: int,
        node: int,
        worker: int,
        run_name: str,
        total_steps: int,
        tensorboard_dir: str | None = None,
        stream: TextIO | None = None,
        scalar_writer: Callable[[str], ScalarWriter] | None = None,
    ) -> None:
        self.rank = rank
        self.labels = {
            FIELD_RANK: rank,
            FIELD_NODE: node,
            FIELD_WORKER: worker,
            FIELD_RUN: run_name,
        }
        self.stream = stream or sys.stdout
        # Async checkpoint writers log from their own thread.
        self._lock = threading.Lock()
        self._tb: ScalarWriter | None = None
        self._make_writer = scalar_writer
        self._tb_remote: str | None = None
        self._tb_local: str | None = None
        if rank == 0 and tensorboard_dir:
            self._open_tensorboard(tensorboard_dir)
        self._progress: Any = None
        self._task: Any = None
        if rank == 0 and sys.stderr.isatty() and os.environ.get("TRAINSTACK_PROGRESS") != "0":
            from rich.progress import Progress

            self._progress = Progress(transient=True)
            self._progress.start()
            self._task = self._progress.add_task("train", total=total_steps)

    def _open_tensorboard(self, directory: str) -> None:
        if self._make_writer is None:
            raise ValueError(f"tensorboard_dir {directory!r} needs a scalar_writer")
        if "://" in directory:
            self._tb_remote = directory
            self._tb_local = tempfile.mkdtemp(prefix="trainstack-tb-")
            self._tb = self._make_writer(self._tb_local)
        else:
            self._tb = self._make_writer(directory)

    def log(self, event: str, step: int, *, severity: str = "INFO", **fields: Any) -> None:
        record = {
            FIELD_EVENT: event,
            FIELD_STEP: step,
            **fields,
            **self.labels,
            FIELD_SEVERITY: severity,
            FIELD_TIME: round(time.time(), 3),
        }
        with self._lock:
            self.stream.write(json.dumps(record, default=float) + "\n")
            self.stream.flush()
            if self._tb is not None:
                for key, value in fields.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        self._tb.add_scalar(f"{event}/{key}", value, step)
            if self._progress is not None and event == EVENT_TRAIN:
                description = f"loss {fields.get(FIELD_LOSS, 0):.4f}"
                self._progress.update(self._task, completed=step, description=description)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._tb is not None:
            self._tb.close()
            if self._tb_remote and self._tb_local:
                from trainstack.trainers.common.storage import url_to_fs

                fs, root = url_to_fs(self._tb_remote)
                fs.put(self._tb_local + "/", root, recursive=True)
            self._tb = None


HYPERTUNE_METRIC_ENV = "TRAINSTACK_HYPERTUNE_METRIC"
"""Set by trainstack on Vertex hyperparameter-tuning trials: the metric id to report."""
# Metric ids a study may name, mapped to the key of the trainer's final record.
HYPERTUNE_ALIASES = {"accuracy": "test_accuracy", "loss": "test_loss"}


def throughput(
    timed: tuple[int, float], global_batch_size: int, tokens_per_sample: int
) -> dict[str, float]:
    """`samples_per_s` (and `tokens_per_s` for language models) over `timed` = (steps,
    seconds) measured after warm-up with checkpoint stalls taken out; empty with no steps."""
    steps, seconds = timed
    if steps <= 0:
        return {}
    samples_per_s = steps * global_batch_size / max(seconds, 1e-9)
    out = {"samples_per_s": samples_per_s}
    if tokens_per_sample:
        out["tokens_per_s"] = samples_per_s * tokens_per_sample
    return out


def report_hypertune(
    done: Mapping[str, Any], step: int, env: Mapping[str, str] = os.environ
) -> str | None:
    """Report the study's metric to Vertex with cloudml-hypertune; returns the record key used.

    Only on a tuning trial (the env var is set); the study's `metric_id` is the tag, so it
    must match what the service optimizes.
    """
    metric = env.get(HYPERTUNE_METRIC_ENV)
    if not metric:
        return None
    key = metric if metric in done else HYPERTUNE_ALIASES.get(metric, metric)
    numeric = {k for k, v in done.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if key not in numeric:
        reportable = sorted({*HYPERTUNE_ALIASES, *numeric})
        raise ValueError(
            f"{HYPERTUNE_METRIC_ENV}={metric!r} is not a metric the trainer reports; "
            f"valid: {', '.join(reportable)}"
        )
    value = done[key]
    import hypertune  # cloudml-hypertune: writes the file the Vertex tuning service reads

    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=metric, metric_value=float(value), global_step=step
    )
    return key

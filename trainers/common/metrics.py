"""Trainer telemetry: JSON log lines, TensorBoard events, a progress bar on a terminal.

Every line on stdout is one JSON object with `event`, `step`, `rank`, `node` and `worker`
labels and a `severity` that Cloud Logging reads from structured container logs. Events:
`start`, `resume`, `train` (step time, samples/s, tokens/s, MFU, data-loader wait),
`checkpoint` (stall and write time), `preempted`, `eval`, `done` (rank 0, exactly once on
success); names in `trainers.common.contract`, the `train` and `done` fields in
`trainers.common.records`. TensorBoard scalars go to `AIP_TENSORBOARD_LOG_DIR` (Vertex) or the
configured directory from rank 0 only, through the `ScalarWriter` each trainer passes in:
torch's SummaryWriter (`trainers.torch_ddp.metrics`) or a `tf.summary` writer
(`trainers.tf_multiworker.metrics`), so this module imports neither framework. A gs://
directory is written locally and uploaded on close, because torch's SummaryWriter writes
local files only and gcsfs (not TensorFlow's own GCS client) is what honours the emulator
settings in `trainers.common.storage`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO

from trainers.common.contract import (
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_LOSS,
    FIELD_NODE,
    FIELD_RANK,
    FIELD_RUN,
    FIELD_SEVERITY,
    FIELD_STEP,
    FIELD_TIME,
    FIELD_WORKER,
)

# Dense bf16 peak per GPU in FLOP/s (vendor datasheets, without sparsity).
GPU_PEAK_BF16_FLOPS: dict[str, float] = {
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
}


def gpu_peak_flops(device_name: str) -> float | None:
    """Peak bf16 FLOP/s for a CUDA device name such as 'NVIDIA H100 80GB HBM3'."""
    upper = device_name.upper()
    for key, peak in GPU_PEAK_BF16_FLOPS.items():
        if key in upper:
            return peak
    return None


def mfu(flops_per_sample: float, samples_per_s: float, peak_flops: float, devices: int) -> float:
    """Model FLOPs utilization: achieved model FLOP/s over the peak of all devices."""
    return flops_per_sample * samples_per_s / (peak_flops * devices)


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
        self.stream.write(json.dumps(record, default=float) + "\n")
        self.stream.flush()
        if self._tb is not None:
            for key, value in fields.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self._tb.add_scalar(f"{event}/{key}", value, step)
        if self._progress is not None and event == EVENT_TRAIN:
            self._progress.update(
                self._task, completed=step, description=f"loss {fields.get(FIELD_LOSS, 0):.4f}"
            )

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._tb is not None:
            self._tb.close()
            if self._tb_remote and self._tb_local:
                from trainers.common.storage import url_to_fs

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

"""The fields of the `train` and `done` log lines, built the same way by both trainers.

`LogWindow` times the steps between two `train` lines and turns them into the window's
fields (loss, learning rate, step time, samples/s, data wait, tokens/s for language models
and MFU where the peak is known); `done_record` is rank 0's final record. The trainers add
their framework's device fields (GPU memory) and pass the result to `MetricsLogger.log`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainstack.trainers.common.contract import (
    FIELD_DATA_WAIT,
    FIELD_LOSS,
    FIELD_LR,
    FIELD_PARAMS_SHA256,
    FIELD_SAMPLES_PER_S,
    FIELD_STEP_TIME,
    FIELD_TOKENS_PER_S,
)
from trainstack.trainers.common.metrics import mfu_fields, throughput


@dataclass
class LogWindow:
    """The optimizer steps since the last `train` line."""

    start: float = field(default_factory=time.perf_counter)
    steps: int = 0
    data_wait: float = 0.0
    """Seconds the loop waited for input in these steps."""

    def fields(
        self,
        now: float,
        *,
        loss: float,
        lr: float,
        global_batch_size: int,
        tokens_per_sample: int,
        flops_per_sample: float | None,
        peak_flops: float | None,
        devices: int,
    ) -> dict[str, Any]:
        """The `train` line's fields for this window, ending at `now` (perf_counter)."""
        elapsed = max(now - self.start, 1e-9)
        steps = max(self.steps, 1)
        samples_per_s = self.steps * global_batch_size / elapsed
        out: dict[str, Any] = {
            FIELD_LOSS: loss,
            FIELD_LR: lr,
            FIELD_STEP_TIME: elapsed / steps,
            FIELD_SAMPLES_PER_S: samples_per_s,
            FIELD_DATA_WAIT: self.data_wait / steps,
        }
        if tokens_per_sample:
            out[FIELD_TOKENS_PER_S] = samples_per_s * tokens_per_sample
        out.update(mfu_fields(flops_per_sample, samples_per_s, peak_flops, devices))
        return out


def done_record(
    *,
    params_sha256: str,
    loss: float | None,
    metrics: Mapping[str, float],
    world_size: int,
    workers: int | None = None,
    resumed_from: int,
    checkpoint_dir: str | None,
    checkpoint_stall_s: float,
    model_path: str | None,
    timed: tuple[int, float],
    global_batch_size: int,
    tokens_per_sample: int,
) -> dict[str, Any]:
    """The fields of the `done` line (without `event` and `step`), in their logged order.

    `metrics` are the test-set results; `workers` (TensorFlow only) is the number of worker
    tasks, where `world_size` counts replicas; `timed` is (steps, seconds) measured after
    warm-up with checkpoint stalls taken out.
    """
    record: dict[str, Any] = {
        FIELD_PARAMS_SHA256: params_sha256,
        FIELD_LOSS: loss,
        **metrics,
        "world_size": world_size,
    }
    if workers is not None:
        record["workers"] = workers
    record.update(
        {
            "resumed_from": resumed_from,
            "checkpoint_dir": checkpoint_dir,
            "checkpoint_stall_s": checkpoint_stall_s,
            "model_path": model_path,
        }
    )
    record.update(throughput(timed, global_batch_size, tokens_per_sample))
    return record

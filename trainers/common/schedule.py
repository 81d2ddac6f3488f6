"""The learning-rate schedule both trainers use, as a pure function of the step.

Linear warmup over `warmup_steps`, then cosine decay to a tenth of the peak at `steps`. A
function of the step only, so a resumed run needs no scheduler state. The TensorFlow trainer
evaluates the same formula with TensorFlow ops (`trainstack.trainers.tf_multiworker.loop.WarmupCosine`)
and logs this one.
"""

from __future__ import annotations

import math

from trainstack.trainers.common.config import TrainConfig


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """The rate used by optimizer step `step` (0-based)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.learning_rate * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))

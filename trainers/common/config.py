"""Trainer configuration: plain data shared by the stack config and the trainers.

`trainstack:trainer` in a stack file is validated by this model, so the keys a user writes
in a stack are exactly the keys the trainer accepts on its command line
(`python -m trainers.torch_ddp --steps=100 --global_batch_size=64`).
This module must not import torch or tensorflow: the Pulumi program imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Framework = Literal["torch", "tensorflow"]
Strategy = Literal["ddp", "fsdp", "mirrored", "multi_worker_mirrored", "tpu", "parameter_server"]

TORCH_STRATEGIES: tuple[str, ...] = ("ddp", "fsdp")
TF_STRATEGIES: tuple[str, ...] = ("mirrored", "multi_worker_mirrored", "tpu", "parameter_server")


class TrainConfig(BaseModel):
    """What to train and how; identical on every rank."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    framework: Framework = "torch"
    """Which bundled trainer runs: `trainers.torch_ddp` or `trainers.tf_multiworker`."""
    strategy: Strategy = "ddp"
    """Distribution strategy; torch: ddp | fsdp, tensorflow: mirrored | multi_worker_mirrored |
    tpu | parameter_server."""
    model: Literal["mlp", "cnn", "gpt"] = "mlp"
    """Bundled model: a small MLP, a small ResNet-style CNN, or a GPT-style decoder."""
    dataset: Literal["synthetic", "digits", "files"] = "synthetic"
    """Input data: generated on the fly, the small real dataset shipped with the package, or
    sharded files under `data_path` (local or gs://)."""
    data_path: str | None = None
    """Directory (local or gs://) of sharded input files; required when dataset is `files`."""
    steps: int = Field(default=1000, gt=0)
    """Optimizer steps to run in total (a resumed run continues to this number)."""
    global_batch_size: int = Field(default=256, gt=0)
    """Samples per optimizer step across all ranks (per-rank batch = global / world size /
    grad_accum_steps)."""
    grad_accum_steps: int = Field(default=1, gt=0)
    """Micro-batches accumulated per optimizer step."""
    learning_rate: float = Field(default=1e-3, gt=0)
    """Peak learning rate."""
    seed: int = 0
    """Seed for parameters, data order and dropout; the same seed gives the same run."""
    checkpoint_dir: str | None = None
    """Where step directories go (local path or gs://); None keeps no checkpoints. On Vertex
    the platform's AIP_CHECKPOINT_DIR wins when this is unset."""
    checkpoint_every: int = Field(default=100, gt=0)
    """Save a checkpoint every this many steps (and at the end, and on SIGTERM)."""
    keep_checkpoints: int = Field(default=3, gt=0)
    """How many of the newest complete checkpoints to keep."""
    log_every: int = Field(default=10, gt=0)
    """Emit a JSON metrics line every this many steps."""
    bucket_cap_mb: int = Field(default=25, gt=0)
    """DDP gradient bucket size; 64 when a Reduction Server is used."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast on GPU; fp32 everywhere else."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    deterministic: bool = True
    """Deterministic kernels and data order, so two runs end with the same params_sha256."""
    preemption_grace_s: float = Field(default=30.0, gt=0)
    """After SIGTERM, every rank saves a checkpoint within this many seconds and exits."""

    @model_validator(mode="after")
    def _strategy_matches_framework(self) -> TrainConfig:
        allowed = TORCH_STRATEGIES if self.framework == "torch" else TF_STRATEGIES
        if self.strategy not in allowed:
            raise ValueError(
                f"strategy {self.strategy!r} is not a {self.framework} strategy; "
                f"valid: {', '.join(allowed)}"
            )
        if self.dataset == "files" and not self.data_path:
            raise ValueError("data_path is required when dataset is 'files'")
        return self

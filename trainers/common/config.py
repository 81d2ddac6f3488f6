"""Trainer configuration: plain data shared by the stack config and the trainers.

`trainstack:trainer` in a stack file is validated by this model, so the keys a user writes
in a stack are exactly the keys the trainer accepts on its command line
(`python -m trainstack.trainers.torch_ddp --steps=100 --global_batch_size=64`).
This module must not import torch or tensorflow: the Pulumi program imports it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainstack.trainers.common.bounds import (
    MAX_COUNT,
    MAX_GLOBAL_BATCH,
    MAX_GRACE_S,
    MAX_LEARNING_RATE,
    MAX_SEED,
)
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S, MAX_MARGIN_S

Framework = Literal["torch", "tensorflow"]
Strategy = Literal["ddp", "fsdp", "mirrored", "multi_worker_mirrored", "tpu", "parameter_server"]

TORCH_STRATEGIES: tuple[str, ...] = ("ddp", "fsdp")
TF_STRATEGIES: tuple[str, ...] = ("mirrored", "multi_worker_mirrored", "tpu", "parameter_server")
TF_DEFAULT_STRATEGY = "multi_worker_mirrored"


class TrainConfig(BaseModel):
    """What to train and how; identical on every rank."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    framework: Framework = "torch"
    """Which bundled trainer runs: `torch` (`trainstack.trainers.torch_ddp`) or `tensorflow`
    (`trainstack.trainers.tf_multiworker`)."""
    strategy: Strategy = "ddp"
    """Distribution strategy; torch: ddp | fsdp, tensorflow: mirrored | multi_worker_mirrored |
    tpu | parameter_server. Unset, it is ddp for torch and multi_worker_mirrored for
    tensorflow."""
    model: Literal["mlp", "cnn", "gpt"] = "mlp"
    """Bundled model: `mlp` (a small MLP), `cnn` (a small ResNet-style CNN) or `gpt` (a
    GPT-style decoder)."""
    dataset: Literal["synthetic", "digits", "files"] = "synthetic"
    """Input data: `synthetic` (generated on the fly), `digits` (the small real dataset
    shipped with the package) or `files` (sharded files under `data_path`, local or gs://)."""
    data_path: str | None = None
    """Directory (local or gs://) of sharded input files; required when dataset is `files`:
    uint16 token shards `train*.bin` + `val*.bin` (nanoGPT's layout; torch GPT) or `.npz`
    shards with arrays `x` and `y`."""
    steps: int = Field(default=1000, gt=0, le=MAX_COUNT)
    """Optimizer steps to run in total (a resumed run continues to this number)."""
    global_batch_size: int = Field(default=256, gt=0, le=MAX_GLOBAL_BATCH)
    """Samples per optimizer step across all ranks (per-rank batch = global / world size /
    grad_accum_steps)."""
    grad_accum_steps: int = Field(default=1, gt=0, le=MAX_COUNT)
    """Micro-batches accumulated per optimizer step."""
    learning_rate: float = Field(default=1e-3, gt=0, le=MAX_LEARNING_RATE, allow_inf_nan=False)
    """Peak learning rate."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed for parameters, data order and dropout; the same seed gives the same run."""
    checkpoint_dir: str | None = None
    """Where step directories go (local path or gs://); None keeps no checkpoints. On Vertex
    AIP_CHECKPOINT_DIR/<run_name> is used when this is unset; stacks default to
    <checkpoint bucket>/checkpoints/<run_name> (locally <local.root>/checkpoints/<run_name>)."""
    model_dir: str | None = None
    """Where the final model goes once training finishes (local path or gs://): rank 0
    writes it there (torch: `model.pt`; tensorflow: a SavedModel). None: Vertex's
    AIP_MODEL_DIR, else no export. Cloud stacks default to <checkpoint bucket>/model/<run_name>
    (Vertex: AIP_MODEL_DIR), outside the `checkpoints/` prefix the bucket's age rule deletes."""
    checkpoint_every: int = Field(default=100, gt=0, le=MAX_COUNT)
    """Save a checkpoint every this many steps (and at the end, and on SIGTERM)."""
    keep_checkpoints: int = Field(default=3, gt=0, le=MAX_COUNT)
    """How many of the newest complete checkpoints to keep."""
    log_every: int = Field(default=10, gt=0, le=MAX_COUNT)
    """Emit a JSON metrics line every this many steps."""
    bucket_cap_mb: int = Field(default=25, gt=0, le=MAX_COUNT)
    """DDP gradient bucket size; 64 when a Reduction Server is used (torch only)."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast on GPU (tensorflow: the mixed_bfloat16 policy on GPU and TPU); fp32
    everywhere else."""
    compile: bool = False
    """Wrap the model in torch.compile (tensorflow: XLA-compile the forward and backward
    pass; TPU steps are always compiled)."""
    deterministic: bool = True
    """Deterministic kernels and data order, so two runs end with the same params_sha256."""
    preemption_grace_s: float = Field(default=30.0, gt=0, le=MAX_GRACE_S, allow_inf_nan=False)
    """After SIGTERM, every rank saves a checkpoint within this many seconds and exits."""
    deadline_margin_s: float = Field(
        default=DEFAULT_MARGIN_S, gt=0, le=MAX_MARGIN_S, allow_inf_nan=False
    )
    """On a flex-start machine (`TRAINSTACK_DEADLINE`), save a checkpoint and stop this many
    seconds before the machine's run duration ends; the run ends `capacity_ended` (exit 6)."""
    run_name: str = Field(default="run", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Names the run in logs and its checkpoint folder (`checkpoints/<run_name>/`); a
    checkpoint written under other model, data or optimizer settings is not resumed."""
    async_checkpoint: bool = False
    """Copy the state to host memory and write it on a background thread, so training stalls
    only for the copy (torch DDP and FSDP; TensorFlow mirrored and multi_worker_mirrored;
    TPU and parameter-server checkpoints are written synchronously)."""
    torch_threads: int = Field(default=1, ge=0, le=MAX_COUNT)
    """Intra-op CPU threads per process; 1 keeps several ranks on one machine from fighting
    over cores, 0 keeps torch's default (all cores)."""
    tf_threads: int = Field(default=1, ge=0, le=MAX_COUNT)
    """TensorFlow intra- and inter-op CPU threads per process; 1 keeps several workers on one
    machine from fighting over cores, 0 keeps TensorFlow's default (all cores)."""
    hidden_dim: int = Field(default=128, gt=0, le=MAX_COUNT)
    """Width of the MLP's hidden layers and channels of the CNN."""
    gpt_layers: int = Field(default=2, gt=0, le=MAX_COUNT)
    """GPT decoder blocks."""
    gpt_dim: int = Field(default=64, gt=0, le=MAX_COUNT)
    """GPT embedding width; must be divisible by gpt_heads."""
    gpt_heads: int = Field(default=4, gt=0, le=MAX_COUNT)
    """GPT attention heads."""
    seq_len: int = Field(default=64, gt=1, le=MAX_COUNT)
    """GPT context length in tokens."""
    vocab_size: int = Field(default=256, gt=1, le=MAX_COUNT)
    """GPT vocabulary size (synthetic token data draws from it)."""
    synthetic_samples: int = Field(default=8192, gt=0, le=MAX_COUNT)
    """Training samples the synthetic dataset generates (plus a quarter as many for test)."""
    warmup_steps: int = Field(default=0, ge=0, le=MAX_COUNT)
    """Linear learning-rate warmup; after it the rate decays by cosine to a tenth of the peak."""
    tensorboard_dir: str | None = None
    """TensorBoard event folder (local or gs://); on Vertex AIP_TENSORBOARD_LOG_DIR wins when
    this is unset."""

    @model_validator(mode="before")
    @classmethod
    def _default_strategy(cls, data: Any) -> Any:
        tensorflow = isinstance(data, dict) and data.get("framework") == "tensorflow"
        if tensorflow and data.get("strategy") is None:
            return {**data, "strategy": TF_DEFAULT_STRATEGY}
        return data

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
        if self.model == "gpt" and self.dataset == "digits":
            raise ValueError("model 'gpt' needs token data: dataset 'synthetic' or 'files'")
        if self.gpt_dim % self.gpt_heads:
            raise ValueError(
                f"gpt_dim ({self.gpt_dim}) must be divisible by gpt_heads ({self.gpt_heads})"
            )
        if self.global_batch_size % self.grad_accum_steps:
            raise ValueError(
                f"global_batch_size ({self.global_batch_size}) must be divisible by "
                f"grad_accum_steps ({self.grad_accum_steps})"
            )
        return self

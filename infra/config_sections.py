"""The parts of a stack config that sit below the target registry.

`trainstack.infra.config.StackConfig` is assembled above the registry (it asks it for the
target sections and their checks); the modules it asks (the target modules, `estimate`,
`supervision`, `run_args`, `local_paths`) take the validated stack as a `StackView`, the
fields they read, and the generic sections' models from here. So the registry never
imports `config`, and `StackConfig` (or any object with these fields) can be passed to
every `Target` hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, Self

from pydantic import ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from trainstack.components.run_supervisor import max_total_usd_problem
from trainstack.components.training_buckets import MAX_CHECKPOINT_RETENTION_DAYS
from trainstack.trainers.common.bounds import MAX_RUN_HOURS
from trainstack.trainers.common.scalars import StrictScalars
from trainstack.trainers.common.user_code import StackTrainer


class _Model(StrictScalars):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BucketsConfig(_Model):
    """`trainstack:buckets`: the checkpoint/data buckets (`TrainingBuckets` arguments)."""

    location: str | None = None
    """GCS location; defaults to gcp:region upper-cased (same region as the compute)."""
    checkpoint_retention_days: int = Field(default=30, ge=1, le=MAX_CHECKPOINT_RETENTION_DAYS)
    """Checkpoint objects older than this are deleted by a lifecycle rule (1-3650)."""
    delete_data_on_destroy: bool = False
    """Let `pulumi destroy` delete non-empty buckets (force_destroy). Rejected in prod."""
    name_suffix: str | None = None
    """Opt-in suffix for the global bucket namespace (1-16 of a-z, 0-9, '-')."""


class QuotasConfig(_Model):
    """`trainstack:quotas`: quota preflight and increase requests."""

    request_increases: bool = False
    """Create Cloud Quotas preferences for what the stack needs."""
    contact_email: str | None = None
    """Required by Cloud Quotas for increase requests."""
    skip_preflight: bool = False
    """Skip the quota check (capacity comes from a specific reservation)."""


class LimitsConfig(_Model):
    """`trainstack:limits`: guardrails on what a stack may cost and how long it may run."""

    max_hourly_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """`trainstack plan` and `pulumi preview` fail when the stack's estimated $/hour
    (`trainstack.infra.estimate.summarize`) is above this."""
    max_run_hours: float | None = Field(default=None, gt=0, le=MAX_RUN_HOURS, allow_inf_nan=False)
    """Training ends after this long, by the platform's own means (Vertex `timeout`, the GKE
    Job's `activeDeadlineSeconds`, the GCE and TPU run limit), and on tpu and gpu_cluster
    stacks the supervisor then stops the compute; the plan says how, per target."""
    max_total_usd: float | None = None
    """The run's spend cap at list price (tpu and gpu_cluster stacks): the supervisor counts
    the compute's spend across restarts and recoveries, asks the trainer to save and stop
    once it is reached, then stops the compute (`trainstack.components.run_supervisor`)."""

    @field_validator("max_total_usd", mode="before")
    @classmethod
    def _spend_cap(cls, value: Any) -> Any:
        problem = None if value is None else max_total_usd_problem(value, "max_total_usd")
        if problem:
            raise PydanticCustomError("trainstack", problem.split(": ", 1)[1])
        return value

    @property
    def max_run_seconds(self) -> int | None:
        """`max_run_hours` in whole seconds (at least 1), or None."""
        if self.max_run_hours is None:
            return None
        return max(1, round(self.max_run_hours * 3600))


class StackView(Protocol):
    """A validated stack config as the `Target` hooks and the modules below the registry
    read it: `trainstack.infra.config.StackConfig` is one (see its fields for what each
    means). Read-only: a changed stack is a copy (`model_copy`)."""

    @property
    def project(self) -> str | None: ...
    @property
    def region(self) -> str | None: ...
    @property
    def zone(self) -> str | None: ...
    @property
    def environment(self) -> Literal["dev", "staging", "prod"]: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def buckets(self) -> BucketsConfig: ...
    @property
    def quotas(self) -> QuotasConfig: ...
    @property
    def limits(self) -> LimitsConfig: ...
    @property
    def trainer(self) -> StackTrainer: ...
    @property
    def secrets(self) -> frozenset[str]: ...
    @property
    def target(self) -> str:
        """The stack key of the compute target's section (`tpu`, `gpu_cluster`, ...)."""
        ...

    @property
    def compute(self) -> Any:
        """The compute target's section (the model of its target module)."""
        ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with the `update` fields replaced."""
        ...

"""Stack section `trainstack:vertex` (the `VertexTrainingJob` arguments it gives), its
tuned-batch checks and its job timeout, for target `vertex` (`trainstack.infra.targets.vertex`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from trainstack.components import catalog
from trainstack.components.catalog.batch import WorldSize, batch_problem
from trainstack.components.catalog.gpus import VertexAcceleratorType
from trainstack.components.catalog.problems import quote as _q
from trainstack.components.catalog.vertex import (
    DEFAULT_MEASUREMENT_SELECTION,
    DEFAULT_REDUCER_MACHINE,
    Algorithm,
    Goal,
    MeasurementSelectionType,
    ParameterType,
    ScaleType,
    reducer_count,
    reducer_count_problem,
    reducer_count_value,
    vertex_accelerators,
)
from trainstack.infra.targets.base import Section
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.scalars import StrictScalars


def _auto_or_count(value: Any) -> Any:
    # A plain `int | Literal["auto"]` makes pydantic report one error per union member.
    count = reducer_count_value(value)
    if count is None:
        raise PydanticCustomError(
            "trainstack", "{problem}", {"problem": reducer_count_problem(value)}
        )
    return count


class ReductionServerConfig(StrictScalars, Section):
    """`trainstack:vertex.reduction_server`: Vertex Reduction Server (worker pool 2)."""

    enabled: bool = False
    replica_count: Annotated[int | Literal["auto"], BeforeValidator(_auto_or_count)] = "auto"
    """`auto` sizes reducers so their egress covers the workers'
    (`trainstack.components.catalog.vertex.reducers_needed`)."""
    machine_type: str = DEFAULT_REDUCER_MACHINE


class HyperparameterConfig(StrictScalars, Section):
    """One searched trainer key, in the REST `ParameterSpec` vocabulary that
    `VertexTrainingJob` takes; values arrive as `--<parameter_id>=<value>` flags."""

    parameter_id: str
    type: ParameterType
    min_value: float | None = None
    max_value: float | None = None
    values: list[float | str] | None = None
    scale_type: ScaleType | None = None


class HyperparameterTuningConfig(StrictScalars, Section):
    """`trainstack:vertex.hyperparameter_tuning`: run a HyperparameterTuningJob instead."""

    metric_id: str
    goal: Goal
    parameters: list[HyperparameterConfig] = Field(min_length=1)
    algorithm: Algorithm = "ALGORITHM_UNSPECIFIED"
    max_trial_count: int = Field(ge=1)
    parallel_trial_count: int = Field(ge=1)
    max_failed_trial_count: int = Field(default=0, ge=0)
    """0 lets Vertex decide."""
    measurement_selection_type: MeasurementSelectionType = DEFAULT_MEASUREMENT_SELECTION
    """Which measurement of a trial counts: the best (default, as Google's SDK sends) or
    the last (Vertex's choice when unset); your code may report every epoch."""


class VertexConfig(StrictScalars, Section):
    """`trainstack:vertex`: a Vertex AI CustomJob (optionally with Reduction Server)."""

    machine_type: str
    accelerator_type: VertexAcceleratorType | None = None
    """Vertex enum; optional where the machine type fixes it (A2), checked when given."""
    accelerator_count: int | None = Field(default=None, ge=1)
    """Optional where the machine type fixes it (A2), checked when given."""
    replica_count: int = Field(default=1, ge=1)
    """Machines including the chief (pool 0 has 1, pool 1 the rest)."""
    reduction_server: ReductionServerConfig = ReductionServerConfig()
    spot: bool = False
    flex_start: bool = False
    """Dynamic Workload Scheduler: scheduling.strategy FLEX_START (not with spot or
    reduction_server)."""
    flex_start_max_wait_s: int | None = None
    """flex_start: how long the job may wait for its machines (None: Vertex's 24 hours,
    sent explicitly; 0 waits indefinitely)."""
    region: str | None = None
    """Vertex location; defaults to gcp:region."""
    service_account: str | None = None
    image_uri: str | None = None
    """The image the bundled trainer runs in (the trainer package is installed into its
    python3 at start); None: the framework's image (`trainstack.components.catalog.images`)."""
    timeout_s: int | None = Field(default=None, gt=0)
    """Job timeout; None keeps Vertex's default (7 days)."""
    hyperparameter_tuning: HyperparameterTuningConfig | None = None

    @property
    def machine(self) -> catalog.MachineType:
        """Catalog entry of `machine_type`."""
        return catalog.MACHINES[self.machine_type]

    @property
    def gpus_per_replica(self) -> int:
        """GPUs on each replica (0 for CPU machines)."""
        return vertex_accelerators(self.machine_type)[1]

    def reducer_count(self) -> int:
        """Reduction Server replicas: 0 when disabled, `auto` resolved from the catalog."""
        rs = self.reduction_server.model_dump()
        return reducer_count(rs, self.machine_type, self.replica_count)

    def job_args(self) -> dict[str, Any]:
        """The `VertexTrainingJob` arguments this section gives, under their own names."""
        return self.model_dump(
            exclude_none=True, exclude={"region", "service_account", "image_uri"}
        )


_BATCH_KEYS = ("global_batch_size", "grad_accum_steps")


def tuned_batch_problems(vx: VertexConfig, trainer: TrainConfig, world: WorldSize) -> list[str]:
    """Every tuned global_batch_size / grad_accum_steps value checked as the fixed one is
    (`batch_problem`), since each trial runs with it; a range is refused because its values
    cannot be listed and most would not split."""
    assert vx.hyperparameter_tuning is not None
    at = "vertex.hyperparameter_tuning.parameters"
    tried: dict[str, list[tuple[int, str]]] = {}
    errors: list[str] = []
    for i, param in enumerate(vx.hyperparameter_tuning.parameters):
        if param.parameter_id not in _BATCH_KEYS:
            continue
        if param.type in ("integer", "double"):
            errors.append(
                f"{at}[{i}].type: {_q(param.type)} searches a range of trainer."
                f"{param.parameter_id}, whose every value must split over the world size "
                f"{world.size} ({world.how}); valid: discrete or categorical, listing the values"
            )
            continue
        for value in param.values or []:
            number = float(value) if _is_number_text(value) else None
            if number is None or not number.is_integer() or number < 1:
                shown = int(value) if isinstance(value, float) and value.is_integer() else value
                errors.append(
                    f"{at}[{i}].values: {_q(shown)} is not a whole number >= 1; valid: whole "
                    f"numbers for trainer.{param.parameter_id}"
                )
            else:
                tried.setdefault(param.parameter_id, []).append((int(number), f"{at}[{i}].values"))
    if not tried:
        return errors  # no listed value: the fixed ones are checked already
    sizes = tried.get("global_batch_size") or [(trainer.global_batch_size, "")]
    steps = tried.get("grad_accum_steps") or [(trainer.grad_accum_steps, "")]
    for size, size_key in sizes:
        for accum, accum_key in steps:
            problem = batch_problem(size, accum, world)
            if problem:
                errors.append(f"{size_key or accum_key}: a trial would fail: {problem}")
    return errors


def _is_number_text(value: float | str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return not isinstance(value, bool)


def vertex_timeout_s(vx: VertexConfig, max_run_seconds: int | None) -> int | None:
    """The Vertex job's `scheduling.timeout`: the smaller of `vertex.timeout_s` and
    `limits.max_run_hours`, or whichever is given (None keeps Vertex's 7-day default)."""
    given = [t for t in (vx.timeout_s, max_run_seconds) if t is not None]
    return min(given) if given else None

"""Vertex AI training facts and the rules over them: which accelerators a machine type
carries, Reduction Server (machines, sizing, prerequisites) and the hyperparameter-tuning
enums.

Rules return every problem as `<prefix><key>: <problem>; valid: <values>`;
`VertexTrainingJob` calls them without a prefix and the stack config with `vertex.`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from trainstack.components.catalog.gpus import GPU_ACCELERATOR_NAMES, VERTEX_GPU_ENUMS
from trainstack.components.catalog.machines import MACHINES
from trainstack.components.catalog.problems import int_problems, is_int, not_allowed, quote
from trainstack.trainers.common.bounds import MAX_COUNT, MAX_RUN_HOURS

# --------------------------------------------------------------------------------------
# The API's number limits (aiplatform v1 discovery document, revision 20261106)
# --------------------------------------------------------------------------------------

MAX_REPLICA_COUNT: Final = MAX_COUNT
"""`replica_count` (machines incl. the chief) and `reduction_server.replica_count`:
`WorkerPoolSpec.replicaCount` is `format: int64` (a JSON string), and the count also reaches
Pulumi as a number (the plan's machines, the quota guard's needs: protobuf Struct doubles),
exact up to 2**53 (`trainstack.trainers.common.bounds.MAX_COUNT`)."""
MAX_INT32: Final = 2**31 - 1
"""`HyperparameterTuningJob.maxTrialCount`, `parallelTrialCount` and `maxFailedTrialCount`
are `format: int32` ("Required. The desired total number of Trials." and so on): a larger
count fails the create call, after every other resource of the stack was created."""
MAX_TIMEOUT_S: Final = MAX_RUN_HOURS * 3600
"""`timeout_s`: the job's `Scheduling.timeout` (`format: google-duration`, "The maximum job
running time. The default is 7 days."), which `limits.max_run_hours` also sets (the smaller
of the two goes): the same year as that key (`trainstack.trainers.common.bounds.MAX_RUN_HOURS`,
where the Duration's own range is cited)."""

# --------------------------------------------------------------------------------------
# Machines and accelerators
# --------------------------------------------------------------------------------------


def vertex_machine_problems(
    machine_type: Any, accelerator_type: Any, accelerator_count: Any, prefix: str = ""
) -> list[str]:
    """Problems with a worker pool's machine and accelerators.

    A2 machines fix their GPUs, so `accelerator_type`/`accelerator_count` may be omitted
    there (`vertex_accelerators` derives them) and must match the machine when given; the
    catalog's A100s come only with A2 machines, so CPU machines take none.
    """
    p = prefix
    machine = MACHINES.get(machine_type) if isinstance(machine_type, str) else None
    if machine is None:
        valid = ", ".join(MACHINES)
        return [
            f"{p}machine_type: {quote(machine_type)} is not a known machine type; valid: {valid}"
        ]
    problems: list[str] = []
    if accelerator_type is not None and accelerator_type not in VERTEX_GPU_ENUMS:
        problems.append(not_allowed(f"{p}accelerator_type", accelerator_type, VERTEX_GPU_ENUMS))
        accelerator_type = None
    if accelerator_count is not None:
        count_problems = int_problems(f"{p}accelerator_count", accelerator_count, 1)
        problems += count_problems
        if count_problems:
            accelerator_count = None
    if machine.gpu_model is not None:
        expected = GPU_ACCELERATOR_NAMES[machine.gpu_model].vertex
        if accelerator_type is not None and accelerator_type != expected:
            problems.append(
                f"{p}accelerator_type: {quote(accelerator_type)} does not match "
                f"{machine_type} ({machine.gpu_model}); valid: {expected}"
            )
        if accelerator_count is not None and accelerator_count != machine.gpus:
            problems.append(
                f"{p}accelerator_count: {accelerator_count} does not match "
                f"{machine_type}; valid: {machine.gpus}"
            )
        return problems
    if accelerator_type is not None:
        problems.append(
            f"{p}accelerator_type: {quote(accelerator_type)} cannot attach to CPU "
            f"machine type {quote(machine_type)}; valid: no accelerator_type (A100s come "
            "with a2-* machine types)"
        )
    if accelerator_count is not None:
        problems.append(
            f"{p}accelerator_count: {accelerator_count} cannot attach to CPU "
            f"machine type {quote(machine_type)}; valid: no accelerator_count"
        )
    return problems


def vertex_accelerators(machine_type: str) -> tuple[str | None, int]:
    """The Vertex accelerator enum and count a catalog machine carries ((None, 0) on CPU)."""
    machine = MACHINES[machine_type]
    if machine.gpu_model is None:
        return None, 0
    return GPU_ACCELERATOR_NAMES[machine.gpu_model].vertex, machine.gpus


# --------------------------------------------------------------------------------------
# Reduction Server
# --------------------------------------------------------------------------------------

REDUCTION_SERVER_MACHINES: Final = ("n1-highcpu-16", "n2-highcpu-16")
"""Machine types documented for Reduction Server replicas (fact sheet section 4)."""
DEFAULT_REDUCER_MACHINE: Final = "n1-highcpu-16"
REDUCTION_SERVER_MIN_WORKERS: Final = 2
"""Reduction Server serves multi-host data-parallel training (fact sheet section 4)."""
REDUCER_COUNT_VALID: Final = f"'auto' or an integer 1-{MAX_REPLICA_COUNT}"


def reducers_needed(
    worker_machine_type: str, replica_count: int, reducer_machine_type: str = "n1-highcpu-16"
) -> int:
    """Reduction Server replicas needed so reducer bandwidth covers worker bandwidth.

    Google's sizing rule: the total egress of worker pool 2 (reducers) must be at least the
    total of pools 0 and 1, so `ceil(replica_count * worker egress / reducer egress)`.
    Examples from the docs: 5 workers at 100 Gbps with n1-highcpu-16 (32 Gbps) -> 16;
    8 x a2-megagpu-16g -> 25. `replica_count` counts every worker machine incl. the chief.
    """
    if replica_count < 1:
        raise ValueError(f"replica_count: {replica_count} is below 1; valid: >= 1")
    worker = MACHINES.get(worker_machine_type)
    reducer = MACHINES.get(reducer_machine_type)
    if worker is None:
        raise ValueError(
            f"worker_machine_type: {worker_machine_type!r} is not in the catalog; valid: "
            f"{', '.join(MACHINES)}"
        )
    if reducer is None:
        raise ValueError(
            f"reducer_machine_type: {reducer_machine_type!r} is not in the catalog; valid: "
            f"{', '.join(MACHINES)}"
        )
    return math.ceil(replica_count * worker.egress_gbps / reducer.egress_gbps)


def reducer_count_value(value: Any) -> int | Literal["auto"] | None:
    """`reduction_server.replica_count` as given (`auto`, an integer 1 to
    `MAX_REPLICA_COUNT`, or its digits), or None when it is none of these."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if is_int(value) and 1 <= value <= MAX_REPLICA_COUNT:
        return int(value)
    return None


def reducer_count_problem(value: Any) -> str:
    """What is wrong with a `reduction_server.replica_count` that `reducer_count_value`
    refuses, without the key."""
    return f"{quote(value)} is not allowed; valid: {REDUCER_COUNT_VALID}"


def reduction_server_enabled(reduction_server: Any) -> bool:
    """Whether a `reduction_server` setting asks for reducers (given, and not disabled)."""
    return (
        isinstance(reduction_server, Mapping) and reduction_server.get("enabled", True) is not False
    )


def reduction_server_problems(
    reduction_server: Any, machine_type: Any, replica_count: Any, prefix: str = ""
) -> list[str]:
    """Problems with a `reduction_server` setting (`enabled`, default true when given;
    `replica_count`, default `auto`; `machine_type`, default n1-highcpu-16).

    Reduction Server needs NCCL GPU workers on several machines and documented reducer
    machines. A disabled or absent setting has no problems.
    """
    p = f"{prefix}reduction_server"
    if reduction_server is None:
        return []
    if not isinstance(reduction_server, Mapping):
        return [f"{p}: {quote(reduction_server)} is not a mapping"]
    enabled = reduction_server.get("enabled", True)
    if enabled is False:
        return []
    problems: list[str] = []
    if enabled is not True:
        problems.append(f"{p}.enabled: {quote(enabled)} is not a boolean; valid: true, false")
    machine = MACHINES.get(machine_type) if isinstance(machine_type, str) else None
    if machine is not None and machine.gpus == 0:
        problems.append(
            f"{p}.enabled: true needs GPU workers but {quote(machine_type)} has no GPUs; "
            "valid: false"
        )
    elif (
        machine is not None
        and is_int(replica_count)
        and 1 <= replica_count < REDUCTION_SERVER_MIN_WORKERS
    ):
        problems.append(
            f"{p}.enabled: true needs at least {REDUCTION_SERVER_MIN_WORKERS} worker "
            f"machines ({prefix}replica_count is {replica_count}); valid: false"
        )
    reducer = reduction_server.get("machine_type", DEFAULT_REDUCER_MACHINE)
    if reducer not in REDUCTION_SERVER_MACHINES:
        problems.append(
            f"{p}.machine_type: {quote(reducer)} is not a Reduction Server machine type; "
            f"valid: {', '.join(REDUCTION_SERVER_MACHINES)}"
        )
    count = reduction_server.get("replica_count", "auto")
    if reducer_count_value(count) is None:
        problems.append(f"{p}.replica_count: {reducer_count_problem(count)}")
    return problems


def reducer_count(reduction_server: Any, machine_type: str, replica_count: int) -> int:
    """Reduction Server replicas of a valid setting: 0 when absent or disabled, `auto`
    sized by `reducers_needed`."""
    if not reduction_server_enabled(reduction_server):
        return 0
    reducer = reduction_server.get("machine_type", DEFAULT_REDUCER_MACHINE)
    count = reducer_count_value(reduction_server.get("replica_count", "auto"))
    if count == "auto":
        return reducers_needed(machine_type, replica_count, reducer)
    if count is None:
        problems = reduction_server_problems(reduction_server, machine_type, replica_count)
        raise ValueError("\n".join(problems))
    return count


# --------------------------------------------------------------------------------------
# Hyperparameter tuning (StudySpec)
# --------------------------------------------------------------------------------------

Goal = Literal["MAXIMIZE", "MINIMIZE"]
"""`StudySpec.MetricSpec.goal`."""
GOALS: Final[tuple[str, ...]] = get_args(Goal)
Algorithm = Literal["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"]
"""`StudySpec.algorithm`; ALGORITHM_UNSPECIFIED is Vertex's Bayesian optimization."""
ALGORITHMS: Final[tuple[str, ...]] = get_args(Algorithm)
ParameterType = Literal["double", "integer", "categorical", "discrete"]
"""Which `<type>ValueSpec` of `StudySpec.ParameterSpec` a parameter uses."""
PARAMETER_TYPES: Final[tuple[str, ...]] = get_args(ParameterType)
ScaleType = Literal["UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"]
"""`StudySpec.ParameterSpec.scaleType`; not for categorical parameters."""
SCALE_TYPES: Final[tuple[str, ...]] = get_args(ScaleType)
GRID_SEARCH_TYPES: Final = ("integer", "categorical", "discrete")
"""GRID_SEARCH enumerates values, so it cannot search a double range."""
MeasurementSelectionType = Literal["BEST_MEASUREMENT", "LAST_MEASUREMENT"]
"""`StudySpec.measurementSelectionType`: which of a trial's reported measurements counts as
its final one."""
MEASUREMENT_SELECTION_TYPES: Final[tuple[str, ...]] = get_args(MeasurementSelectionType)
DEFAULT_MEASUREMENT_SELECTION: Final = "BEST_MEASUREMENT"
"""What trainstack sends unless told otherwise: the value Google's Vertex AI SDK sends. Left
unset, Vertex uses the trial's last measurement, so code that reports every epoch would be
judged by its last epoch, not its best."""
MEASUREMENT_SELECTION_SOURCE: Final = (
    "aiplatform.v1 discovery document (google-api-python-client, revision 20261106) "
    "GoogleCloudAiplatformV1StudySpec.measurementSelectionType: enum "
    "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED ('Will be treated as LAST_MEASUREMENT.'), "
    "LAST_MEASUREMENT, BEST_MEASUREMENT; Google's SDK default: "
    "googleapis/python-aiplatform google/cloud/aiplatform/jobs.py "
    "HyperparameterTuningJob.__init__(measurement_selection: Optional[str] = 'best')"
)

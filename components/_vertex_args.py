"""VertexTrainingJob's argument checks: pure, and the stack config's too.

Each function returns every problem as `<prefix><key>: <problem>; valid: <values>`. The
component raises on `vertex_training_job_problems` (no prefix); the stack config reports
`vertex_job_spec_problems` for `trainstack:vertex` (prefix `vertex.`), whose keys are the
component's: machine and accelerators, replicas, Reduction Server, Spot or flex-start,
timeout and hyperparameter tuning.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from trainstack.components._node_args import secret_env_names_problems
from trainstack.components.catalog.gpu_families import VERTEX_FLEX_START_GPUS
from trainstack.components.catalog.images import reduction_server_image
from trainstack.components.catalog.machines import MACHINES
from trainstack.components.catalog.problems import (
    int_problems,
    is_int,
    not_allowed,
    quote,
    unknown_keys,
)
from trainstack.components.catalog.vertex import (
    ALGORITHMS,
    DEFAULT_MEASUREMENT_SELECTION,
    GOALS,
    GRID_SEARCH_TYPES,
    MAX_INT32,
    MAX_REPLICA_COUNT,
    MAX_TIMEOUT_S,
    MEASUREMENT_SELECTION_TYPES,
    PARAMETER_TYPES,
    SCALE_TYPES,
    reducer_count,
    reduction_server_enabled,
    reduction_server_problems,
    vertex_machine_problems,
)

TUNING_KEYS: Final = (
    "metric_id",
    "goal",
    "parameters",
    "algorithm",
    "max_trial_count",
    "parallel_trial_count",
    "max_failed_trial_count",
    "measurement_selection_type",
)
PARAMETER_KEYS: Final = ("parameter_id", "type", "min_value", "max_value", "values", "scale_type")
_TUNING_VALID: Final = {
    "metric_id": "the name of a metric the trainer reports, e.g. accuracy",
    "goal": f"one of {', '.join(GOALS)}",
    "max_trial_count": f"an integer 1-{MAX_INT32}",
    "parallel_trial_count": f"an integer 1-{MAX_INT32}, at most max_trial_count",
    "parameters": "a list of parameters, each {parameter_id, type, ...}",
}
_PARAMETER_ID_VALID: Final = "the name of a trainer flag, e.g. learning_rate"


def _trainer_fields() -> tuple[str, ...]:
    from trainstack.trainers.common.config import TrainConfig

    return tuple(TrainConfig.model_fields)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def hyperparameter_tuning_problems(
    tuning: Any, prefix: str = "", bundled_trainer: bool = True
) -> list[str]:
    """Every problem with a `hyperparameter_tuning` mapping, keys prefixed with `prefix`
    (e.g. `vertex.hyperparameter_tuning.`).

    With the bundled trainer, each `parameter_id` must be one of its flags: Vertex passes a
    trial's value as `--<parameter_id>=<value>` and the trainer rejects unknown flags.
    """
    p = prefix
    if not isinstance(tuning, Mapping):
        return [
            (
                f"{p.removesuffix('.')}: {quote(tuning)} is not a mapping; valid: a mapping with "
                f"keys {', '.join(TUNING_KEYS)}"
            )
        ]
    problems = unknown_keys(p, tuning, TUNING_KEYS)
    for key in ("metric_id", "goal", "max_trial_count", "parallel_trial_count", "parameters"):
        if tuning.get(key) is None:
            problems.append(f"{p}{key}: required; valid: {_TUNING_VALID[key]}")
    metric = tuning.get("metric_id")
    if metric is not None and (not isinstance(metric, str) or not metric):
        problems.append(
            f"{p}metric_id: {quote(metric)} is not a non-empty string; valid: "
            f"{_TUNING_VALID['metric_id']}"
        )
    if tuning.get("goal") is not None and tuning["goal"] not in GOALS:
        problems.append(not_allowed(f"{p}goal", tuning["goal"], GOALS))
    algorithm = tuning.get("algorithm", "ALGORITHM_UNSPECIFIED")
    if algorithm not in ALGORITHMS:
        problems.append(not_allowed(f"{p}algorithm", algorithm, ALGORITHMS))
    selection = tuning.get("measurement_selection_type", DEFAULT_MEASUREMENT_SELECTION)
    if selection not in MEASUREMENT_SELECTION_TYPES:
        problems.append(
            not_allowed(f"{p}measurement_selection_type", selection, MEASUREMENT_SELECTION_TYPES)
        )
    counts = {k: tuning.get(k) for k in ("max_trial_count", "parallel_trial_count")}
    for key, value in counts.items():
        problems += int_problems(f"{p}{key}", value, 1, MAX_INT32) if value is not None else []
    if tuning.get("max_failed_trial_count") is not None:
        failed = tuning["max_failed_trial_count"]
        problems += int_problems(f"{p}max_failed_trial_count", failed, 0, MAX_INT32)
    most, parallel = counts["max_trial_count"], counts["parallel_trial_count"]
    if is_int(most) and is_int(parallel) and parallel > most:
        problems.append(
            f"{p}parallel_trial_count: {parallel} exceeds max_trial_count {most}; valid: <= {most}"
        )
    parameters = tuning.get("parameters")
    if parameters is None:
        return problems
    if isinstance(parameters, str) or not isinstance(parameters, list):
        return [*problems, f"{p}parameters: {quote(parameters)} is not a list"]
    if not parameters:
        return [*problems, f"{p}parameters: [] is too short; valid: at least 1 item(s)"]
    fields = _trainer_fields() if bundled_trainer else None
    for i, param in enumerate(parameters):
        problems += _parameter_problems(f"{p}parameters[{i}]", param, fields)
        problems += _grid_problems(p, algorithm, param)
    return problems


def _grid_problems(p: str, algorithm: Any, param: Any) -> list[str]:
    """GRID_SEARCH enumerates values, so it cannot search a double range."""
    if algorithm != "GRID_SEARCH" or not isinstance(param, Mapping):
        return []
    kind = param.get("type")
    if kind in GRID_SEARCH_TYPES or kind not in PARAMETER_TYPES:
        return []
    valid = ", ".join(a for a in ALGORITHMS if a != "GRID_SEARCH")
    pid = quote(param.get("parameter_id"))
    return [f"{p}algorithm: 'GRID_SEARCH' cannot search {kind} parameter {pid}; valid: {valid}"]


def _parameter_problems(at: str, param: Any, fields: tuple[str, ...] | None) -> list[str]:
    if not isinstance(param, Mapping):
        return [
            (
                f"{at}: {quote(param)} is not a mapping; valid: a mapping with keys "
                f"{', '.join(PARAMETER_KEYS)}"
            )
        ]
    problems = unknown_keys(f"{at}.", param, PARAMETER_KEYS)
    pid = param.get("parameter_id")
    if pid is None:
        problems.append(f"{at}.parameter_id: required; valid: {_PARAMETER_ID_VALID}")
    elif not isinstance(pid, str) or not pid:
        problems.append(
            f"{at}.parameter_id: {quote(pid)} is not a non-empty string; valid: "
            f"{_PARAMETER_ID_VALID}"
        )
    elif fields is not None and pid not in fields:
        problems.append(
            f"{at}.parameter_id: {quote(pid)} is not a trainer key; valid: {', '.join(fields)}"
        )
    kind = param.get("type")
    if kind is None:
        return [*problems, f"{at}.type: required"]
    if kind not in PARAMETER_TYPES:
        return [*problems, not_allowed(f"{at}.type", kind, PARAMETER_TYPES)]
    problems += _range_problems(at, param) if kind in ("double", "integer") else []
    problems += _values_problems(at, param) if kind in ("categorical", "discrete") else []
    scale = param.get("scale_type")
    if scale is not None:
        if scale not in SCALE_TYPES:
            problems.append(not_allowed(f"{at}.scale_type", scale, SCALE_TYPES))
        elif kind == "categorical":
            problems.append(
                f"{at}.scale_type: not used by a categorical parameter; valid: leave it out"
            )
    return problems


def _range_problems(at: str, param: Mapping[str, Any]) -> list[str]:
    kind = param["type"]
    problems: list[str] = []
    low, high = param.get("min_value"), param.get("max_value")
    for key, value in (("min_value", low), ("max_value", high)):
        if value is None:
            problems.append(f"{at}.{key}: required for a {kind} parameter; valid: a number")
        elif not _is_number(value):
            problems.append(f"{at}.{key}: {quote(value)} is not a number; valid: a number")
        elif kind == "integer" and not float(value).is_integer():
            problems.append(f"{at}.{key}: {quote(value)} is not a whole number; valid: an integer")
    if _is_number(low) and _is_number(high) and low >= high:
        problems.append(
            f"{at}.min_value: {quote(low)} is not below max_value {quote(high)}; "
            "valid: min_value < max_value"
        )
    if param.get("values") is not None:
        problems.append(f"{at}.values: not used by a {kind} parameter; valid: leave it out")
    return problems


def _values_problems(at: str, param: Mapping[str, Any]) -> list[str]:
    kind = param["type"]
    problems: list[str] = []
    values = param.get("values")
    values_valid = "a list of strings" if kind == "categorical" else "a list of increasing numbers"
    if not values:
        problems.append(f"{at}.values: required for a {kind} parameter; valid: {values_valid}")
    elif isinstance(values, str) or not isinstance(values, list):
        problems.append(f"{at}.values: {quote(values)} is not a list; valid: {values_valid}")
    elif kind == "categorical" and not all(isinstance(v, str) for v in values):
        problems.append(
            f"{at}.values: {quote(values)} is not a list of strings; valid: {values_valid}"
        )
    elif kind == "discrete" and (
        not all(_is_number(v) for v in values) or any(b <= a for a, b in itertools.pairwise(values))
    ):
        problems.append(
            f"{at}.values: {quote(values)} is not increasing numbers; valid: numbers in "
            "increasing order"
        )
    if param.get("min_value") is not None or param.get("max_value") is not None:
        problems.append(
            f"{at}.min_value: not used by a {kind} parameter; valid: values, without min_value"
        )
    return problems


def flex_start_problems(args: Mapping[str, Any], p: str = "") -> list[str]:
    """`flex_start` and `flex_start_max_wait_s` as Vertex takes them
    (`catalog.gpu_families.VERTEX_FLEX_START_SOURCE`)."""
    flex = args.get("flex_start", False)
    wait = args.get("flex_start_max_wait_s")
    if not isinstance(flex, bool):
        return [f"{p}flex_start: {quote(flex)} is not a boolean; valid: true, false"]
    problems = []
    if wait is not None and not flex:
        problems.append(
            f"{p}flex_start_max_wait_s: applies to flex_start, which is off; valid: "
            "flex_start: true, or remove flex_start_max_wait_s"
        )
    elif wait is not None and (not is_int(wait) or wait < 0):
        problems.append(
            f"{p}flex_start_max_wait_s: {quote(wait)} is not a whole number of seconds >= 0; "
            "valid: >= 0 (0 waits indefinitely)"
        )
    if not flex:
        return problems
    if args.get("spot", False) is True:
        problems.append(
            f"{p}flex_start: cannot be used with spot (scheduling.strategy is one of FLEX_START "
            "or SPOT); valid: flex_start: false, or spot: false"
        )
    machine = MACHINES.get(str(args.get("machine_type")))
    if machine is not None and machine.gpu_model not in VERTEX_FLEX_START_GPUS:
        problems.append(
            f"{p}flex_start: machine_type {quote(machine.name)} has no GPU Vertex flex-start "
            "takes (Google: 'requests L4, A100, H100, H200, or B200 GPUs'); valid: an A2, A3 "
            "or A4 machine type, or flex_start: false"
        )
    if reduction_server_enabled(args.get("reduction_server")):
        problems.append(
            f"{p}flex_start: cannot be used with reduction_server (Google: flex-start 'uses "
            "the same machine configuration for all worker pools', and the reducers run on "
            "CPU machines); valid: flex_start: false, or reduction_server.enabled: false"
        )
    return problems


def vertex_job_spec_problems(
    args: Mapping[str, Any], prefix: str = "", bundled_trainer: bool = True
) -> list[str]:
    """Every problem with the job's compute and search arguments (`machine_type`,
    `accelerator_type`, `accelerator_count`, `replica_count`, `reduction_server`, `spot`,
    `timeout_s`, `hyperparameter_tuning`), keys prefixed with `prefix`."""
    p = prefix
    problems = vertex_machine_problems(
        args.get("machine_type"), args.get("accelerator_type"), args.get("accelerator_count"), p
    )
    replica_count = args.get("replica_count")
    problems += (
        [f"{p}replica_count: required"]
        if replica_count is None
        else int_problems(f"{p}replica_count", replica_count, 1, MAX_REPLICA_COUNT)
    )
    problems += reduction_server_problems(
        args.get("reduction_server"), args.get("machine_type"), replica_count, p
    )
    spot = args.get("spot", False)
    if not isinstance(spot, bool):
        problems.append(f"{p}spot: {quote(spot)} is not a boolean; valid: true, false")
    problems += flex_start_problems(args, p)
    timeout_s = args.get("timeout_s")
    if timeout_s is not None:
        if not is_int(timeout_s):
            problems.append(f"{p}timeout_s: {quote(timeout_s)} is not an integer; valid: > 0")
        elif timeout_s <= 0:
            problems.append(f"{p}timeout_s: {timeout_s} is too small; valid: > 0")
        elif timeout_s > MAX_TIMEOUT_S:
            problems.append(f"{p}timeout_s: {timeout_s} is too large; valid: <= {MAX_TIMEOUT_S}")
    if args.get("hyperparameter_tuning") is not None:
        problems += hyperparameter_tuning_problems(
            args["hyperparameter_tuning"], f"{p}hyperparameter_tuning.", bundled_trainer
        )
    return problems


def vertex_training_job_problems(args: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every problem with the plain `VertexTrainingJob` arguments in `args`."""
    p = prefix
    problems = [
        f"{p}{key}: got {args.get(key)!r}; valid: a non-empty string"
        for key in ("region", "display_name")
        if not isinstance(args.get(key), str) or not args[key]
    ]
    has_package = args.get("package_uri") is not None
    own_code = args.get("node_args") is not None
    problems += vertex_job_spec_problems(args, p, bundled_trainer=has_package and not own_code)
    if isinstance(args.get("region"), str) and reduction_server_enabled(
        args.get("reduction_server")
    ):
        try:
            reduction_server_image(args["region"])
        except ValueError as exc:
            problems.append(f"{p}{exc}")
    has_container = args.get("container_image_uri") is not None
    has_executor = args.get("executor_image_uri") is not None
    if own_code and not has_package:
        # Your code always comes in the code package: installed into the image when the
        # replica starts (or on a prebuilt executor_image_uri).
        problems.append(
            f"{p}package_uri: required with node_args (your code's package); valid: the "
            "TrainerPackage's uri"
        )
    elif not own_code and not has_package and not has_container:
        problems.append(
            f"{p}package_uri: required (the trainer package, installed into the image at "
            "start); valid: the TrainerPackage's uri, or container_image_uri with the "
            "trainers installed"
        )
    if args.get("plugin_image_uri") is not None and (
        not has_package or has_container or has_executor
    ):
        problems.append(
            f"{p}plugin_image_uri: the default image rebuilt with the Reduction Server "
            "plugin, which runs package_uri in place of the default image; valid: "
            "package_uri without container_image_uri or executor_image_uri"
        )
    if has_container and has_executor:
        problems.append(
            f"{p}container_image_uri: executor_image_uri names a prebuilt image for "
            "pythonPackageSpec; valid: one of container_image_uri or executor_image_uri"
        )
    if has_executor and not has_package:
        problems.append(
            f"{p}executor_image_uri: runs package_uri, which is missing; valid: the "
            "TrainerPackage's uri as package_uri"
        )
    if has_container and not has_package and args.get("python_module"):
        problems.append(
            f"{p}python_module: applies to package_uri, which is missing; valid: "
            "container_command to start the trainers in your image"
        )
    if own_code:
        problems += [
            f"{p}node_args: runs your own code, which takes no {key}; valid: remove {key}"
            for key in ("python_module", "trainer_args")
            if args.get(key) is not None
        ]
    return problems + secret_env_names_problems(args, p)


def validate_args(args: Mapping[str, Any]) -> int:
    """Check the component's plain arguments, raising one ValueError listing every problem;
    return the number of reducers (0 without Reduction Server)."""
    problems = vertex_training_job_problems(args)
    if problems:
        raise ValueError("\n".join(problems))
    return reducer_count(args.get("reduction_server"), args["machine_type"], args["replica_count"])

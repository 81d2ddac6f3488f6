"""A Vertex AI custom job (optionally with Reduction Server, or as a hyperparameter-tuning
job) that runs the bundled trainer and lives and dies with the stack.

    from components.vertex_training_job import VertexTrainingJob

    job = VertexTrainingJob(
        "exp-42-vertex",
        {
            "project": "my-project",
            "region": "us-central1",
            "display_name": "exp-42",
            "machine_type": "a2-highgpu-8g",
            "accelerator_type": "NVIDIA_TESLA_A100",
            "accelerator_count": 8,
            "replica_count": 4,  # machines, chief included
            "reduction_server": {"replica_count": "auto"},  # 13 x n1-highcpu-16
            "package_uri": package.uri,  # TrainerPackage
            "executor_image_uri": PYTORCH_GPU_IMAGES["2.4"],
            "python_module": "trainers.torch_ddp",
            "trainer_args": ["--steps=1000", "--global_batch_size=256"],
            "service_account": identity.service_account_email,
            "base_output_dir": buckets.checkpoint_url,
        },
    )
    # job.job_name, job.state, job.console_url; `pulumi destroy` cancels and deletes it

The REST body is built by the pure functions `custom_job_body` and
`hyperparameter_tuning_job_body`, validated against the bundled `aiplatform.v1`
discovery schema, and registered as the `body` input of a dynamic resource
(`components._vertex_provider`), so previews and plan diffs show every change. Any change
replaces the job: Vertex jobs are immutable.

Worker pools follow Vertex's fixed order: 0 chief (1 replica), 1 workers
(`replica_count - 1`, `{}` when there are none but a later pool is used), 2 reduction
servers, 3 evaluators (unused).

Naming: `displayName` is `display_name` as given; the body carries the labels
`component=vertex-training-job`, `managed-by=trainstack` and `trainstack_request_id` (a hash
of the rest of the body; the provider finds a job it submitted by it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi

from components._discovery import validate_body
from components._naming import labels_input
from components._vertex_provider import (
    CustomJob,
    HyperparameterTuningJob,
    VertexJobProvider,
)
from infra import catalog

TOKEN: Final = "trainstack:vertex:VertexTrainingJob"
COMPONENT_LABEL: Final = "vertex-training-job"
API: Final = "aiplatform.v1"
REQUEST_ID_LABEL: Final = "trainstack_request_id"
"""Label whose value is a hash of the rest of the body (see `_vertex_provider`)."""

DEFAULT_PYTHON_MODULE: Final = "trainers.torch_ddp"

PREBUILT_IMAGES_VERIFIED: Final = False
PREBUILT_IMAGES_SOURCE: Final = (
    "reference/gcp-facts.md section 3.5 (URIs seen in use); TO VERIFY against "
    "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers before relying on it"
)
PYTORCH_GPU_IMAGES: Final[dict[str, str]] = {
    "2.4": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
    "2.2": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py311:latest",
    "2.1": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1.py310:latest",
}
"""Prebuilt PyTorch GPU training images (`pythonPackageSpec.executorImageUri`), by version.
Reduction Server needs a prebuilt PyTorch image >= 1.4 (all of these)."""
DEFAULT_EXECUTOR_IMAGE: Final = PYTORCH_GPU_IMAGES["2.4"]

REDUCTION_SERVER_IMAGES: Final[dict[str, str]] = {
    "us": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
    "europe": "europe-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
    "asia": "asia-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
}
"""Reduction Server images per Artifact Registry multi-region (gcp-facts section 4)."""
# Region prefix -> nearest multi-region. The Americas pull from us; the Middle East and
# Africa are closer to europe's multi-region than to asia's.
_MULTI_REGION_BY_PREFIX: Final[dict[str, str]] = {
    "us": "us",
    "northamerica": "us",
    "southamerica": "us",
    "europe": "europe",
    "me": "europe",
    "africa": "europe",
    "asia": "asia",
    "australia": "asia",
}
REDUCTION_SERVER_BUCKET_CAP_MB: Final = 64
"""DDP gradient bucket size with Reduction Server (Google: 64 MB instead of 25)."""
REDUCTION_SERVER_ENV: Final[dict[str, str]] = {"NCCL_DEBUG": "INFO"}
"""The one NCCL variable Google's Reduction Server sample sets: its log shows whether the
reduction-server NCCL plugin loaded, the only way to tell Reduction Server is in use."""
HYPERTUNE_METRIC_ENV: Final = "TRAINSTACK_HYPERTUNE_METRIC"
"""Env var carrying the study's metric id to the trainer, which reports it with
`cloudml-hypertune` (`hyperparameter_metric_tag`). An env var rather than a flag: the
trainer's flags are exactly its config fields."""

DEFAULT_BOOT_DISK_TYPE: Final = "pd-ssd"
DEFAULT_BOOT_DISK_SIZE_GB: Final = 100

ParameterType = Literal["double", "integer", "categorical", "discrete"]
_SCALES: Final[dict[str, str]] = {
    "linear": "UNIT_LINEAR_SCALE",
    "log": "UNIT_LOG_SCALE",
    "reverse_log": "UNIT_REVERSE_LOG_SCALE",
}
_GOALS: Final = ("MAXIMIZE", "MINIMIZE")
_ALGORITHMS: Final = ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH")


class ReductionServerArgs(TypedDict):
    """Reduction Server replicas (worker pool 2)."""

    replica_count: int | Literal["auto"]
    """Reducers; `auto` sizes them so their total egress covers the workers'
    (`infra.catalog.reducers_needed`). One reducer is allowed."""
    machine_type: NotRequired[str]
    """Reducer machine type; default `n1-highcpu-16` (Google's recommendation)."""


class HyperparameterSpec(TypedDict):
    """One tuned parameter; Vertex passes it to the trainer as `--<parameter_id>=<value>`."""

    parameter_id: str
    type: ParameterType
    min: NotRequired[float]
    """double/integer: inclusive minimum."""
    max: NotRequired[float]
    """double/integer: inclusive maximum."""
    values: NotRequired[list[Any]]
    """categorical: strings; discrete: increasing numbers."""
    scale: NotRequired[Literal["linear", "log", "reverse_log"]]
    """double/integer/discrete only."""


class HyperparameterTuningArgs(TypedDict):
    """Turns the job into a hyperparameter-tuning job whose trials run the same spec."""

    metric_id: str
    """Metric tag the trainer reports with cloudml-hypertune."""
    goal: Literal["MAXIMIZE", "MINIMIZE"]
    parameters: list[HyperparameterSpec]
    max_trial_count: int
    parallel_trial_count: int
    algorithm: NotRequired[Literal["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"]]
    """Default ALGORITHM_UNSPECIFIED (Vertex's Bayesian optimization)."""
    max_failed_trial_count: NotRequired[int]
    """0 (default) lets Vertex decide."""


class VertexTrainingJobArgs(TypedDict):
    """Arguments for `VertexTrainingJob`."""

    project: pulumi.Input[str]
    """Project that runs the job."""
    region: str
    """Vertex region, e.g. `us-central1` (also picks the Reduction Server image)."""
    display_name: str
    """The job's display name."""
    machine_type: str
    """Machine type of the chief and workers, from the catalog (e.g. `a2-highgpu-8g`)."""
    accelerator_type: NotRequired[str]
    """Vertex accelerator enum (`NVIDIA_TESLA_A100`, `NVIDIA_A100_80GB`); omit for CPU."""
    accelerator_count: NotRequired[int]
    """GPUs per machine: the machine's full count for A2 shapes."""
    replica_count: int
    """Machines including the chief (>= 1)."""
    reduction_server: NotRequired[ReductionServerArgs]
    """Add a Reduction Server pool (GPU jobs only)."""
    package_uri: NotRequired[pulumi.Input[str]]
    """gs:// URI of the trainer sdist (`TrainerPackage.uri`); selects pythonPackageSpec."""
    executor_image_uri: NotRequired[str]
    """Prebuilt training image for pythonPackageSpec (default `DEFAULT_EXECUTOR_IMAGE`)."""
    python_module: NotRequired[str]
    """Module to run (default `trainers.torch_ddp`)."""
    trainer_args: NotRequired[list[str]]
    """Command-line args for the trainer (`--steps=1000`, ...)."""
    container_image_uri: NotRequired[str]
    """Users' own image instead of the package: selects containerSpec."""
    container_command: NotRequired[list[str]]
    """containerSpec command (default: the image's entrypoint)."""
    service_account: NotRequired[pulumi.Input[str]]
    """Email of the account the job runs as (caller needs iam.serviceAccounts.actAs)."""
    base_output_dir: NotRequired[pulumi.Input[str]]
    """gs:// URL (the checkpoint bucket); sets AIP_CHECKPOINT_DIR, AIP_MODEL_DIR, ..."""
    spot: NotRequired[bool]
    """Run on Spot capacity (scheduling.strategy SPOT)."""
    timeout_s: NotRequired[int]
    """Maximum running time; Vertex's default is 7 days."""
    restart_job_on_worker_restart: NotRequired[bool]
    """Restart the whole job when a worker restarts (default False)."""
    boot_disk_size_gb: NotRequired[int]
    """Boot disk per chief/worker machine (default 100)."""
    network: NotRequired[pulumi.Input[str]]
    """`projects/{number}/global/networks/{name}` with Vertex VPC peering."""
    tensorboard: NotRequired[pulumi.Input[str]]
    """Vertex TensorBoard resource name."""
    persistent_resource_id: NotRequired[str]
    """Run on this `AiPersistentResource` instead of fresh machines."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """User labels, merged with trainstack's."""
    hyperparameter_tuning: NotRequired[HyperparameterTuningArgs]
    """Submit a hyperparameterTuningJob instead of a customJob."""
    api_endpoint: NotRequired[str]
    """Override the Vertex endpoint (tests point it at a local server)."""


# --------------------------------------------------------------------------------------
# Validation (pure; raises ValueError naming the argument)
# --------------------------------------------------------------------------------------


def reduction_server_image(region: str) -> str:
    """The Reduction Server image from the multi-region nearest `region`."""
    prefix = region.split("-", 1)[0]
    multi = _MULTI_REGION_BY_PREFIX.get(prefix)
    if multi is None:
        raise ValueError(
            f"region: {region!r} has no known nearest Artifact Registry multi-region "
            f"(known prefixes: {', '.join(sorted(_MULTI_REGION_BY_PREFIX))})"
        )
    return REDUCTION_SERVER_IMAGES[multi]


def validate_machine(
    machine_type: str, accelerator_type: str | None, accelerator_count: int | None
) -> None:
    """Check the accelerator against the catalog's machine shape."""
    machine = catalog.MACHINES.get(machine_type)
    if machine is None:
        raise ValueError(
            f"machine_type: {machine_type!r} is not in the catalog "
            f"(known: {', '.join(sorted(catalog.MACHINES))})"
        )
    if machine.gpu_model is None:
        if accelerator_type or accelerator_count:
            raise ValueError(
                f"accelerator_type: machine_type {machine_type!r} has no GPUs; omit "
                "accelerator_type and accelerator_count"
            )
        return
    expected = catalog.GPU_ACCELERATOR_NAMES[machine.gpu_model].vertex
    if accelerator_type != expected:
        raise ValueError(
            f"accelerator_type: machine_type {machine_type!r} carries {machine.gpu_model} "
            f"GPUs; expected {expected!r}, got {accelerator_type!r}"
        )
    if accelerator_count != machine.gpus:
        raise ValueError(
            f"accelerator_count: machine_type {machine_type!r} has {machine.gpus} GPUs; "
            f"expected {machine.gpus}, got {accelerator_count!r}"
        )


def reducer_count(
    reduction_server: Mapping[str, Any], machine_type: str, replica_count: int
) -> int:
    """Resolve `reduction_server.replica_count` (int or `auto`) to a number of reducers."""
    reducer_machine = reduction_server.get("machine_type", catalog.DEFAULT_REDUCER_MACHINE)
    if reducer_machine not in catalog.REDUCTION_SERVER_MACHINES:
        raise ValueError(
            f"reduction_server.machine_type: {reducer_machine!r} is not a documented "
            f"Reduction Server machine (allowed: {', '.join(catalog.REDUCTION_SERVER_MACHINES)})"
        )
    count = reduction_server.get("replica_count")
    if count == "auto":
        return catalog.reducers_needed(machine_type, replica_count, reducer_machine)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(
            f"reduction_server.replica_count: expected an integer >= 1 or 'auto', got {count!r}"
        )
    return count


def validate_reduction_server(
    machine_type: str, accelerator_type: str | None, accelerator_count: int | None
) -> None:
    """Reduction Server accelerates NCCL all-reduce between GPU machines: GPUs only."""
    if accelerator_type and accelerator_type.startswith("TPU_"):
        raise ValueError(
            f"reduction_server: not supported with TPU accelerator {accelerator_type!r}; "
            "Reduction Server needs NCCL GPU workers"
        )
    if not accelerator_type or not accelerator_count:
        raise ValueError(
            f"reduction_server: needs GPU workers; machine_type {machine_type!r} has no "
            "accelerator (CPU-only jobs do not use NCCL all-reduce)"
        )


def _validate_tuning(tuning: Mapping[str, Any], bundled_trainer: bool) -> None:
    if tuning.get("goal") not in _GOALS:
        raise ValueError(
            f"hyperparameter_tuning.goal: expected one of {', '.join(_GOALS)}, "
            f"got {tuning.get('goal')!r}"
        )
    algorithm = tuning.get("algorithm", "ALGORITHM_UNSPECIFIED")
    if algorithm not in _ALGORITHMS:
        raise ValueError(
            f"hyperparameter_tuning.algorithm: expected one of {', '.join(_ALGORITHMS)}, "
            f"got {algorithm!r}"
        )
    for key in ("max_trial_count", "parallel_trial_count"):
        value = tuning.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"hyperparameter_tuning.{key}: expected an integer >= 1, got {value!r}"
            )
    if tuning["parallel_trial_count"] > tuning["max_trial_count"]:
        raise ValueError(
            "hyperparameter_tuning.parallel_trial_count: must not exceed max_trial_count "
            f"({tuning['parallel_trial_count']} > {tuning['max_trial_count']})"
        )
    parameters = tuning.get("parameters") or []
    if not parameters:
        raise ValueError("hyperparameter_tuning.parameters: at least one parameter is required")
    fields = _trainer_fields() if bundled_trainer else None
    for i, param in enumerate(parameters):
        _validate_parameter(f"hyperparameter_tuning.parameters[{i}]", param, algorithm, fields)


def _trainer_fields() -> frozenset[str]:
    from trainers.common.config import TrainConfig

    return frozenset(TrainConfig.model_fields)


def _validate_parameter(
    where: str, param: Mapping[str, Any], algorithm: str, fields: frozenset[str] | None
) -> None:
    pid = param.get("parameter_id")
    if not isinstance(pid, str) or not pid:
        raise ValueError(f"{where}.parameter_id: expected a non-empty string, got {pid!r}")
    if fields is not None and pid not in fields:
        # Vertex passes each value as `--<parameter_id>=<v>`; the trainer rejects unknown flags.
        raise ValueError(
            f"{where}.parameter_id: {pid!r} is not a bundled trainer flag "
            f"(trainers.common.config.TrainConfig fields)"
        )
    kind = param.get("type")
    if kind in ("double", "integer"):
        low, high = param.get("min"), param.get("max")
        if low is None or high is None or not low < high:
            raise ValueError(f"{where}: {kind} needs min < max, got min={low!r} max={high!r}")
        if kind == "integer" and not (float(low).is_integer() and float(high).is_integer()):
            raise ValueError(f"{where}: integer min and max must be whole numbers")
        if kind == "double" and algorithm == "GRID_SEARCH":
            raise ValueError(f"{where}: GRID_SEARCH does not support double parameters")
    elif kind in ("categorical", "discrete"):
        values = param.get("values") or []
        if not values:
            raise ValueError(f"{where}.values: {kind} needs at least one value")
        if kind == "categorical" and not all(isinstance(v, str) for v in values):
            raise ValueError(f"{where}.values: categorical values must be strings")
        if kind == "discrete" and (
            not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
            or any(b <= a for a, b in itertools.pairwise(values))
        ):
            raise ValueError(f"{where}.values: discrete values must be increasing numbers")
    else:
        raise ValueError(
            f"{where}.type: expected double, integer, categorical or discrete, got {kind!r}"
        )
    scale = param.get("scale")
    if scale is not None and (scale not in _SCALES or kind == "categorical"):
        raise ValueError(
            f"{where}.scale: expected linear, log or reverse_log (not for categorical), "
            f"got {scale!r}"
        )


def validate_args(args: Mapping[str, Any]) -> int:
    """Validate the component's plain arguments; return the number of reducers (0 if none)."""
    for key in ("region", "display_name", "machine_type"):
        if not isinstance(args.get(key), str) or not args[key]:
            raise ValueError(f"{key}: expected a non-empty string, got {args.get(key)!r}")
    replica_count = args.get("replica_count")
    if isinstance(replica_count, bool) or not isinstance(replica_count, int) or replica_count < 1:
        raise ValueError(f"replica_count: expected an integer >= 1, got {replica_count!r}")
    accelerator_type = args.get("accelerator_type")
    accelerator_count = args.get("accelerator_count")
    reducers = 0
    if args.get("reduction_server") is not None:
        # Before the catalog check: a TPU job should hear about TPUs, not machine shapes.
        validate_reduction_server(args["machine_type"], accelerator_type, accelerator_count)
    validate_machine(args["machine_type"], accelerator_type, accelerator_count)
    if args.get("reduction_server") is not None:
        reducers = reducer_count(args["reduction_server"], args["machine_type"], replica_count)
    has_package = args.get("package_uri") is not None
    has_container = args.get("container_image_uri") is not None
    if has_package == has_container:
        raise ValueError(
            "package_uri: give exactly one of package_uri (with executor_image_uri) or "
            "container_image_uri"
        )
    if has_container and (args.get("executor_image_uri") or args.get("python_module")):
        raise ValueError(
            "container_image_uri: executor_image_uri and python_module apply only to package_uri"
        )
    timeout_s = args.get("timeout_s")
    if timeout_s is not None and (not isinstance(timeout_s, int) or timeout_s < 1):
        raise ValueError(f"timeout_s: expected a positive integer, got {timeout_s!r}")
    if args.get("hyperparameter_tuning") is not None:
        _validate_tuning(args["hyperparameter_tuning"], bundled_trainer=has_package)
    return reducers


# --------------------------------------------------------------------------------------
# REST bodies (pure)
# --------------------------------------------------------------------------------------


def _env(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in sorted(values.items())]


def trainer_args_for(trainer_args: Sequence[str], reduction_server: bool) -> list[str]:
    """The trainer's args, with `--bucket_cap_mb=64` added when Reduction Server is on
    (unless the caller set a bucket size explicitly)."""
    result = list(trainer_args)
    if reduction_server and not any(a.startswith("--bucket_cap_mb") for a in result):
        result.append(f"--bucket_cap_mb={REDUCTION_SERVER_BUCKET_CAP_MB}")
    return result


def _task(
    *,
    package_uri: str | None,
    executor_image_uri: str | None,
    python_module: str | None,
    args: list[str],
    container_image_uri: str | None,
    container_command: Sequence[str] | None,
    env: Mapping[str, str],
) -> tuple[str, dict[str, Any]]:
    """(`containerSpec` | `pythonPackageSpec`, its body) for the chief and workers."""
    if container_image_uri is not None:
        task: dict[str, Any] = {"imageUri": container_image_uri}
        if container_command:
            task["command"] = list(container_command)
        task["args"] = args
        key = "containerSpec"
    else:
        task = {
            "executorImageUri": executor_image_uri or DEFAULT_EXECUTOR_IMAGE,
            "packageUris": [package_uri],
            "pythonModule": python_module or DEFAULT_PYTHON_MODULE,
            "args": args,
        }
        key = "pythonPackageSpec"
    if env:
        task["env"] = _env(env)
    return key, task


def custom_job_spec(
    *,
    region: str,
    machine_type: str,
    replica_count: int,
    accelerator_type: str | None = None,
    accelerator_count: int | None = None,
    reducers: int = 0,
    reducer_machine_type: str = catalog.DEFAULT_REDUCER_MACHINE,
    package_uri: str | None = None,
    executor_image_uri: str | None = None,
    python_module: str | None = None,
    trainer_args: Sequence[str] = (),
    container_image_uri: str | None = None,
    container_command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    service_account: str | None = None,
    base_output_dir: str | None = None,
    spot: bool = False,
    timeout_s: int | None = None,
    restart_job_on_worker_restart: bool = False,
    boot_disk_size_gb: int = DEFAULT_BOOT_DISK_SIZE_GB,
    network: str | None = None,
    tensorboard: str | None = None,
    persistent_resource_id: str | None = None,
) -> dict[str, Any]:
    """The `CustomJobSpec` (also a tuning job's `trialJobSpec`) for plain values."""
    machine_spec: dict[str, Any] = {"machineType": machine_type}
    if accelerator_type:
        machine_spec["acceleratorType"] = accelerator_type
        machine_spec["acceleratorCount"] = accelerator_count
    code_key, task = _task(
        package_uri=package_uri,
        executor_image_uri=executor_image_uri,
        python_module=python_module,
        args=trainer_args_for(trainer_args, reducers > 0),
        container_image_uri=container_image_uri,
        container_command=container_command,
        env={**(REDUCTION_SERVER_ENV if reducers else {}), **(env or {})},
    )
    disk = {"bootDiskType": DEFAULT_BOOT_DISK_TYPE, "bootDiskSizeGb": boot_disk_size_gb}

    def pool(replicas: int) -> dict[str, Any]:
        return {
            "machineSpec": dict(machine_spec),
            "replicaCount": str(replicas),  # int64: a JSON string
            "diskSpec": dict(disk),
            code_key: json.loads(json.dumps(task)),
        }

    pools: list[dict[str, Any]] = [pool(1)]
    if replica_count > 1:
        pools.append(pool(replica_count - 1))
    elif reducers:
        pools.append({})  # keeps the reducers at index 2
    if reducers:
        pools.append(
            {
                "machineSpec": {"machineType": reducer_machine_type},
                "replicaCount": str(reducers),
                "containerSpec": {"imageUri": reduction_server_image(region)},
            }
        )
    scheduling: dict[str, Any] = {
        "strategy": "SPOT" if spot else "STANDARD",
        "restartJobOnWorkerRestart": restart_job_on_worker_restart,
    }
    if timeout_s is not None:
        scheduling["timeout"] = f"{timeout_s}s"
    spec: dict[str, Any] = {"workerPoolSpecs": pools, "scheduling": scheduling}
    if service_account:
        spec["serviceAccount"] = service_account
    if base_output_dir:
        spec["baseOutputDirectory"] = {"outputUriPrefix": base_output_dir}
    if network:
        spec["network"] = network
    if tensorboard:
        spec["tensorboard"] = tensorboard
    if persistent_resource_id:
        spec["persistentResourceId"] = persistent_resource_id
    return spec


def request_id(body: Mapping[str, Any]) -> str:
    """Hash of the body without the request-id label: same spec, same id."""
    labels = {k: v for k, v in body.get("labels", {}).items() if k != REQUEST_ID_LABEL}
    canonical = json.dumps({**body, "labels": labels}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _with_request_id(body: dict[str, Any]) -> dict[str, Any]:
    body["labels"] = {**body.get("labels", {}), REQUEST_ID_LABEL: request_id(body)}
    body["labels"] = dict(sorted(body["labels"].items()))
    return body


def custom_job_body(
    *, display_name: str, labels: Mapping[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """The exact `CustomJob` REST body; `spec` is `custom_job_spec`'s keywords.

    `labels` go on as given (the component passes them through `merge_labels`).
    """
    body = {
        "displayName": display_name,
        "jobSpec": custom_job_spec(**spec),
        "labels": dict(sorted((labels or {}).items())),
    }
    return _with_request_id(body)


def _parameter_spec(param: Mapping[str, Any]) -> dict[str, Any]:
    kind = param["type"]
    spec: dict[str, Any] = {"parameterId": param["parameter_id"]}
    if kind == "double":
        spec["doubleValueSpec"] = {"minValue": float(param["min"]), "maxValue": float(param["max"])}
    elif kind == "integer":
        spec["integerValueSpec"] = {
            "minValue": str(int(param["min"])),
            "maxValue": str(int(param["max"])),
        }
    elif kind == "categorical":
        spec["categoricalValueSpec"] = {"values": [str(v) for v in param["values"]]}
    else:
        spec["discreteValueSpec"] = {"values": [float(v) for v in param["values"]]}
    if param.get("scale") is not None:
        spec["scaleType"] = _SCALES[param["scale"]]
    return spec


def hyperparameter_tuning_job_body(
    *,
    display_name: str,
    tuning: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """The exact `HyperparameterTuningJob` REST body; trials run `custom_job_spec(**spec)`.

    The metric id reaches the trainer as env `TRAINSTACK_HYPERTUNE_METRIC`; each trial's
    values arrive as `--<parameter_id>=<value>` and its id in `CLUSTER_SPEC.task.trial`.
    """
    env = {**(spec.pop("env", None) or {}), HYPERTUNE_METRIC_ENV: tuning["metric_id"]}
    body = {
        "displayName": display_name,
        "studySpec": {
            "metrics": [{"metricId": tuning["metric_id"], "goal": tuning["goal"]}],
            "parameters": [_parameter_spec(p) for p in tuning["parameters"]],
            "algorithm": tuning.get("algorithm", "ALGORITHM_UNSPECIFIED"),
        },
        "maxTrialCount": tuning["max_trial_count"],
        "parallelTrialCount": tuning["parallel_trial_count"],
        "maxFailedTrialCount": tuning.get("max_failed_trial_count", 0),
        "trialJobSpec": custom_job_spec(env=env, **spec),
        "labels": dict(sorted((labels or {}).items())),
    }
    return _with_request_id(body)


def job_body(args: Mapping[str, Any], reducers: int, **resolved: Any) -> dict[str, Any]:
    """The body for validated component args; `resolved` holds the plain values of the
    args that may be Outputs (package_uri, service_account, labels, ...)."""
    spec: dict[str, Any] = {
        "region": args["region"],
        "machine_type": args["machine_type"],
        "replica_count": args["replica_count"],
        "accelerator_type": args.get("accelerator_type"),
        "accelerator_count": args.get("accelerator_count"),
        "reducers": reducers,
        "reducer_machine_type": (args.get("reduction_server") or {}).get(
            "machine_type", catalog.DEFAULT_REDUCER_MACHINE
        ),
        "executor_image_uri": args.get("executor_image_uri"),
        "python_module": args.get("python_module"),
        "trainer_args": args.get("trainer_args", []),
        "container_image_uri": args.get("container_image_uri"),
        "container_command": args.get("container_command"),
        "spot": args.get("spot", False),
        "timeout_s": args.get("timeout_s"),
        "restart_job_on_worker_restart": args.get("restart_job_on_worker_restart", False),
        "boot_disk_size_gb": args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_SIZE_GB),
        "persistent_resource_id": args.get("persistent_resource_id"),
    }
    labels = resolved.pop("labels")
    spec.update(resolved)
    tuning = args.get("hyperparameter_tuning")
    if tuning is not None:
        return hyperparameter_tuning_job_body(
            display_name=args["display_name"], tuning=tuning, labels=labels, **spec
        )
    return custom_job_body(display_name=args["display_name"], labels=labels, **spec)


# --------------------------------------------------------------------------------------
# Component
# --------------------------------------------------------------------------------------


class VertexTrainingJob(pulumi.ComponentResource):
    """A Vertex AI customJob or hyperparameterTuningJob running the trainer."""

    job_name: pulumi.Output[str]
    """`projects/{p}/locations/{r}/customJobs/{id}` (or `.../hyperparameterTuningJobs/{id}`)."""
    state: pulumi.Output[str]
    """Job state when created (`JOB_STATE_QUEUED`...); live state: `trainstack status`."""
    console_url: pulumi.Output[str]
    """Cloud console page of the job."""
    body: pulumi.Output[dict[str, Any]]
    """The exact REST body submitted."""
    reducer_count: int
    """Reduction Server replicas (0 without Reduction Server)."""

    def __init__(
        self, name: str, args: VertexTrainingJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        reducers = validate_args(args)
        # Validates plain labels now (Outputs when they resolve) and merges trainstack's.
        labels = labels_input(args.get("labels"), COMPONENT_LABEL)
        super().__init__(TOKEN, name, None, opts)

        names = ("package_uri", "service_account", "base_output_dir", "network", "tensorboard")
        present = [key for key in names if args.get(key) is not None]
        arg_map: dict[str, Any] = dict(args)

        def build(values: list[Any]) -> dict[str, Any]:
            merged, *rest = values
            resolved = dict(zip(present, rest, strict=True))
            body = job_body(arg_map, reducers, labels=merged, **resolved)
            schema = "HyperparameterTuningJob" if "studySpec" in body else "CustomJob"
            errors = validate_body(API, schema, body)
            if errors:
                raise ValueError(f"{schema} body is invalid: " + "; ".join(errors))
            return body

        body = pulumi.Output.all(labels, *(arg_map[k] for k in present)).apply(build)
        resource_cls = (
            HyperparameterTuningJob if args.get("hyperparameter_tuning") is not None else CustomJob
        )
        self.job = resource_cls(
            f"{name}-job",
            project=args["project"],
            region=args["region"],
            body=body,
            api_endpoint=args.get("api_endpoint"),
            provider=VertexJobProvider(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.job_name = self.job.job_name
        self.state = self.job.state
        self.console_url = self.job.console_url
        self.body = body
        self.reducer_count = reducers
        self.register_outputs(
            {
                "job_name": self.job_name,
                "state": self.state,
                "console_url": self.console_url,
                "body": self.body,
            }
        )

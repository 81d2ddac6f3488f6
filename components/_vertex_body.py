"""VertexTrainingJob's REST bodies, as pure functions of plain values.

`custom_job_body` and `hyperparameter_tuning_job_body` build the exact `CustomJob` and
`HyperparameterTuningJob` bodies (aiplatform.v1 field names); `job_body` builds the one a
validated `VertexTrainingJobArgs` mapping asks for. The hyperparameter-tuning arguments use
the REST vocabulary already (`parameter_id`, `min_value`, `scale_type: UNIT_LOG_SCALE`,
...), so a parameter becomes its `ParameterSpec` without renaming anything.

Worker pools follow Vertex's fixed order: 0 chief (1 replica), 1 workers
(`replica_count - 1`, `{}` when there are none but a later pool is used), 2 reduction
servers, 3 evaluators (unused).

Every chief and worker runs the node launcher (`python3 -m trainstack.trainers.node <trainer module>
<trainer args>...`), which starts one process per GPU of the replica. With a `package_uri`
it runs as a custom container: `containerSpec {imageUri, command: <the pod setup script>,
args: [python3, -m, trainstack.trainers.node, ...], env: TRAINSTACK_PACKAGE_URI}`, the script every GKE
pod runs (`trainstack.components._pod_setup`), which downloads the package with the replica's service
account and installs it into the image's Python before it execs the args. The image is
`container_image_uri`, else the trainer framework's
(`trainstack.components.catalog.images.VERTEX_TRAINING_IMAGES`: Google's prebuilt training images are
all past their end of availability), pulled through `image_mirror` when given (the stack's
Artifact Registry remote repository of Docker Hub: `<registry>/pytorch/pytorch@sha256:...`,
`trainstack.components.catalog.images.mirrored_image_uri`). A prebuilt image given as `executor_image_uri` runs the
same launcher through `pythonPackageSpec {pythonModule: trainstack.trainers.node, args}`; a
`container_image_uri` without a package must hold the trainers itself.

Your own code (`node_args`, the `python -m trainstack.trainers.node` arguments of
`trainstack.trainers.common.user_code.node_args`) runs the same launcher with those arguments instead
of a trainer module, from the code package, so the image needs nothing from trainstack and a
new `trainer.source` is a new job. A tuning trial's `--<parameter_id>=<value>` args, which
Vertex appends to `args`, land after the code's own argv (`-- ARGV`), so the code receives
them as Vertex's own samples do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from trainstack.components._node_args import keyed_node_args
from trainstack.components._pod_setup import PACKAGE_URI_ENV, POD_PYTHON, pod_command
from trainstack.components.catalog.gpu_families import (
    VERTEX_FLEX_START_DEFAULT_WAIT_HOURS,
    boot_disk_type,
    cuda_floor_of,
)
from trainstack.components.catalog.images import (
    mirrored_image_uri,
    reduction_server_image,
    vertex_training_image,
)
from trainstack.components.catalog.machines import GPU_MACHINES
from trainstack.components.catalog.vertex import (
    DEFAULT_MEASUREMENT_SELECTION,
    DEFAULT_REDUCER_MACHINE,
    vertex_accelerators,
)
from trainstack.trainers.common.accelerators import EXPECTED_ACCELERATORS_ENV
from trainstack.trainers.common.contract import NODE_MODULE, TF_MODULE, TORCH_MODULE

REQUEST_ID_LABEL: Final = "trainstack_request_id"
"""Label whose value is a hash of the rest of the body (see `_vertex_provider`)."""

DEFAULT_PYTHON_MODULE: Final = TORCH_MODULE
REDUCTION_SERVER_BUCKET_CAP_MB: Final = 64
"""DDP gradient bucket size with Reduction Server (Google: 64 MB instead of 25)."""
REDUCTION_SERVER_ENV: Final[dict[str, str]] = {"NCCL_DEBUG": "INFO"}
"""The one NCCL variable Google's Reduction Server sample sets: its log shows whether the
reduction-server NCCL plugin loaded, the only way to tell Reduction Server is in use."""
TF_KERAS_ENV: Final = "TRAINSTACK_TF_KERAS"
"""1: the setup script (`components/kubernetes_pod.sh`) installs tf-keras at the image's
TensorFlow minor, --no-deps, so the TF trainer's tf.keras is Keras 2 on any TF image."""
HYPERTUNE_METRIC_ENV: Final = "TRAINSTACK_HYPERTUNE_METRIC"
"""Env var carrying the study's metric id to the trainer, which reports it with
`cloudml-hypertune` (`hyperparameter_metric_tag`). An env var rather than a flag: the
trainer's flags are exactly its config fields."""


DEFAULT_SCALE_TYPE: Final = "UNIT_LINEAR_SCALE"
LINEAR_BY_DEFAULT: Final = ("integer", "discrete")
"""Parameter types sent with `DEFAULT_SCALE_TYPE` when no scale_type is given. The REST API
allows none ("Leave unset for CATEGORICAL parameters"), but Google's SDK requires a scale for
integer and discrete parameters (googleapis/python-aiplatform
google/cloud/aiplatform/hyperparameter_tuning.py L262-300 IntegerParameterSpec and
L345-385 DiscreteParameterSpec, `scale: Required`; L42-47 `"linear": UNIT_LINEAR_SCALE`,
commit 91cc8ce4), so the body matches what that client sends for linear ones. A double
range keeps no default: its scale is a modelling choice (log for learning rates)."""

DEFAULT_BOOT_DISK_TYPE: Final = "pd-ssd"
"""The replicas' boot disk on a machine without GPUs; a GPU machine gets its family's
(`catalog.gpu_families.boot_disk_type`: Hyperdisk on A3 Ultra and A4, Vertex's own default on
A3 Ultra, "for A3U machines, the default value is \"hyperdisk-balanced\"", aiplatform.v1
GoogleCloudAiplatformV1DiskSpec.bootDiskType)."""
DEFAULT_BOOT_DISK_SIZE_GB: Final = 100


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
    node_args: Sequence[str] | None = None,
    image_mirror: str | None = None,
    plugin_image_uri: str | None = None,
    cuda_floor: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """(`containerSpec` | `pythonPackageSpec`, its body) for the chief and workers;
    `cuda_floor`: the GPU family's, which picks the default torch image."""
    module = python_module or DEFAULT_PYTHON_MODULE
    launch = list(node_args) if node_args is not None else [module, *args]
    env = dict(env)
    if executor_image_uri is not None:
        # A prebuilt training image runs `python -m <pythonModule>` from the package.
        task: dict[str, Any] = {
            "executorImageUri": executor_image_uri,
            "packageUris": [package_uri],
            # One launcher per replica; it starts one trainer process per GPU.
            "pythonModule": NODE_MODULE,
            "args": launch,
        }
        key = "pythonPackageSpec"
    elif package_uri is not None:
        # The package goes into the image's python3 at start, as in a GKE pod: the bundled
        # trainers on their framework's image (or yours), your code on yours.
        if container_image_uri is None and plugin_image_uri is not None:
            # The default image rebuilt with Google's Reduction Server plugin. NCCL_NET_PLUGIN
            # stays unset: NCCL then loads libnccl-net.so, where the build checked it, in
            # every version, and a path in it fails silently in some (catalog.reduction_server).
            container_image_uri = plugin_image_uri
        task = {
            "imageUri": container_image_uri or default_image_uri(module, image_mirror, cuda_floor),
            "command": pod_command(),
            "args": [POD_PYTHON, "-m", NODE_MODULE, *launch],
        }
        env[PACKAGE_URI_ENV] = package_uri
        if node_args is None and module == TF_MODULE:
            env[TF_KERAS_ENV] = "1"
        key = "containerSpec"
    else:
        # Your image with the trainers already installed.
        task = {"imageUri": container_image_uri}
        if container_command:
            task["command"] = list(container_command)
        task["args"] = args
        key = "containerSpec"
    if env:
        task["env"] = _env(env)
    return key, task


def default_image_uri(
    module: str, image_mirror: str | None = None, cuda_floor: str | None = None
) -> str:
    """The trainer module's default image (on a GPU whose family needs `cuda_floor`, the
    torch image that has it): through the Docker Hub mirror at `image_mirror` (by digest
    where the catalog has one), else from Docker Hub as the catalog names it."""
    image = vertex_training_image(module, cuda_floor)
    return mirrored_image_uri(image, image_mirror) if image_mirror else image.uri


def replica_image(args: Mapping[str, Any]) -> tuple[str, str, bool]:
    """The image the chief and workers of validated component args run, the argument that
    picks it, and whether it is the trainer module's default (no image given)."""
    for key in ("executor_image_uri", "container_image_uri"):
        if args.get(key):
            return str(args[key]), key, False
    module = args.get("python_module") or DEFAULT_PYTHON_MODULE
    floor = cuda_floor_of(str(args.get("machine_type")))
    return vertex_training_image(module, floor).uri, "python_module", True


def custom_job_spec(
    *,
    region: str,
    machine_type: str,
    replica_count: int,
    accelerator_type: str | None = None,
    accelerator_count: int | None = None,
    reducers: int = 0,
    reducer_machine_type: str = DEFAULT_REDUCER_MACHINE,
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
    flex_start: bool = False,
    flex_start_max_wait_s: int = VERTEX_FLEX_START_DEFAULT_WAIT_HOURS * 3600,
    timeout_s: int | None = None,
    restart_job_on_worker_restart: bool = False,
    boot_disk_size_gb: int = DEFAULT_BOOT_DISK_SIZE_GB,
    network: str | None = None,
    tensorboard: str | None = None,
    persistent_resource_id: str | None = None,
    node_args: Sequence[str] | None = None,
    image_mirror: str | None = None,
    plugin_image_uri: str | None = None,
) -> dict[str, Any]:
    """The `CustomJobSpec` (also a tuning job's `trialJobSpec`) for plain values;
    `node_args` runs your own code instead of `python_module` and `trainer_args`;
    `image_mirror` is the registry the default image is pulled through; `plugin_image_uri`
    the default image rebuilt with the Reduction Server plugin (used when reducers run)."""
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
        env={
            **(REDUCTION_SERVER_ENV if reducers else {}),
            # The node launcher stops (exit 5) when fewer GPUs are usable than were bought,
            # rather than training on CPU at GPU prices.
            **({EXPECTED_ACCELERATORS_ENV: str(accelerator_count)} if accelerator_type else {}),
            **(env or {}),
        },
        node_args=node_args,
        image_mirror=image_mirror,
        plugin_image_uri=plugin_image_uri if reducers else None,
        cuda_floor=cuda_floor_of(machine_type),
    )
    disk_type = (
        boot_disk_type(machine_type) if machine_type in GPU_MACHINES else DEFAULT_BOOT_DISK_TYPE
    )
    disk = {"bootDiskType": disk_type, "bootDiskSizeGb": boot_disk_size_gb}

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
        "strategy": "FLEX_START" if flex_start else "SPOT" if spot else "STANDARD",
        "restartJobOnWorkerRestart": restart_job_on_worker_restart,
    }
    if flex_start:
        # Sent even at Vertex's default, so the body (and the plan) says how long it waits:
        # "maximum duration that a job will wait for the requested resources ... If set to 0,
        # the job will wait indefinitely. The default is 24 hours." (aiplatform.v1 discovery
        # document, GoogleCloudAiplatformV1Scheduling.maxWaitDuration)
        scheduling["maxWaitDuration"] = f"{flex_start_max_wait_s}s"
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
        spec["doubleValueSpec"] = {
            "minValue": float(param["min_value"]),
            "maxValue": float(param["max_value"]),
        }
    elif kind == "integer":
        spec["integerValueSpec"] = {
            "minValue": str(int(param["min_value"])),
            "maxValue": str(int(param["max_value"])),
        }
    elif kind == "categorical":
        spec["categoricalValueSpec"] = {"values": [str(v) for v in param["values"]]}
    else:
        spec["discreteValueSpec"] = {"values": [float(v) for v in param["values"]]}
    scale = param.get("scale_type")
    if scale is None and kind in LINEAR_BY_DEFAULT:
        scale = DEFAULT_SCALE_TYPE
    if scale is not None:
        spec["scaleType"] = scale
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
            # Explicit: unset, Vertex judges each trial by its last measurement.
            "measurementSelectionType": tuning.get(
                "measurement_selection_type", DEFAULT_MEASUREMENT_SELECTION
            ),
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
    args that may be Outputs (package_uri, service_account, labels, ...).

    An A2 machine's accelerators are the machine's when `accelerator_type` and
    `accelerator_count` are not given (validation checked them against it when given).
    """
    accelerator_type, accelerator_count = vertex_accelerators(args["machine_type"])
    spec: dict[str, Any] = {
        "region": args["region"],
        "machine_type": args["machine_type"],
        "replica_count": args["replica_count"],
        "accelerator_type": args.get("accelerator_type") or accelerator_type,
        "accelerator_count": args.get("accelerator_count") or accelerator_count or None,
        "reducers": reducers,
        "reducer_machine_type": (args.get("reduction_server") or {}).get(
            "machine_type", DEFAULT_REDUCER_MACHINE
        ),
        "executor_image_uri": args.get("executor_image_uri"),
        "python_module": args.get("python_module"),
        "trainer_args": args.get("trainer_args", []),
        "container_image_uri": args.get("container_image_uri"),
        "container_command": args.get("container_command"),
        "spot": args.get("spot", False),
        "flex_start": args.get("flex_start", False),
        "flex_start_max_wait_s": args.get(
            "flex_start_max_wait_s", VERTEX_FLEX_START_DEFAULT_WAIT_HOURS * 3600
        ),
        "timeout_s": args.get("timeout_s"),
        "restart_job_on_worker_restart": args.get("restart_job_on_worker_restart", False),
        "boot_disk_size_gb": args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_SIZE_GB),
        "persistent_resource_id": args.get("persistent_resource_id"),
        "image_mirror": args.get("image_mirror"),
    }
    labels = resolved.pop("labels")
    spec.update(resolved)
    tuning = args.get("hyperparameter_tuning")

    def build(values: dict[str, Any]) -> dict[str, Any]:
        if tuning is not None:
            return hyperparameter_tuning_job_body(
                display_name=args["display_name"], tuning=tuning, labels=labels, **values
            )
        return custom_job_body(display_name=args["display_name"], labels=labels, **values)

    body = build(spec)
    secret = args.get("secret_env_names") or ()
    if secret and spec.get("node_args") is not None:
        # The request id (a label: any caller who may list jobs sees it) hashes the body
        # with secret --env values left out (`keyed_node_args`), the body keeps them.
        keyed = build({**spec, "node_args": keyed_node_args(spec["node_args"], secret)})
        body["labels"][REQUEST_ID_LABEL] = keyed["labels"][REQUEST_ID_LABEL]
    return body

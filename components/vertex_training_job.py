"""A Vertex AI custom job (optionally with Reduction Server, or as a hyperparameter-tuning
job) that runs the bundled trainer and lives and dies with the stack.

    from trainstack.components.vertex_training_job import VertexTrainingJob

    job = VertexTrainingJob(
        "exp-42-vertex",
        {
            "project": "my-project",
            "region": "us-central1",
            "display_name": "exp-42",
            "machine_type": "a2-highgpu-8g",  # 8 x NVIDIA_TESLA_A100, from the machine
            "replica_count": 4,  # machines, chief included
            "reduction_server": {"replica_count": "auto"},  # 13 x n1-highcpu-16
            # Reduction Server needs google-reduction-server in the image: the default image
            # rebuilt with it (ReductionServerImage), or an image of your own.
            "plugin_image_uri": rs_image.image_uri,
            "package_uri": package.uri,  # TrainerPackage, installed into the image at start
            "python_module": "trainstack.trainers.torch_ddp",
            "trainer_args": ["--steps=1000", "--global_batch_size=256"],
            "service_account": identity.service_account_email,
            "base_output_dir": buckets.checkpoint_url,
        },
    )
    # job.job_name, job.state, job.console_url; `pulumi destroy` cancels and deletes it

Arguments are checked with `vertex_training_job_problems` (`trainstack.components._vertex_args`), the
stack config's `trainstack:vertex` with the same rules (`vertex_job_spec_problems`). The REST
body is built by the pure functions `custom_job_body` and `hyperparameter_tuning_job_body`
(`trainstack.components._vertex_body`), validated against the bundled `aiplatform.v1` discovery schema, and registered as the `body` input of a dynamic resource
(`trainstack.components._vertex_provider`), so previews and plan diffs show every change. Any change
replaces the job: Vertex jobs are immutable. A replacement cancels and deletes the old job
before it submits the new one (delete-before-replace): both at once would need twice the
quota and would write to one checkpoint folder.

Each chief/worker replica runs the node launcher (`python3 -m trainstack.trainers.node <python_module>
<trainer_args>`), which starts torchrun with one process per GPU for the torch trainer (world
size = replicas x GPUs per machine) and the TensorFlow trainer once per replica. It runs as
a custom container whose command is the pod setup script (`pod_command`): it installs
`package_uri` into the image's `python3`, then execs the launcher. The image is
`container_image_uri`, else the trainer framework's
(`trainstack.components.catalog.images.VERTEX_TRAINING_IMAGES`: the official pytorch/pytorch or
tensorflow/tensorflow CUDA image, since Google's prebuilt training images are past their end
of availability), pulled through `image_mirror` when given (the stack's Artifact Registry
remote repository of Docker Hub, `trainstack.components.image_mirror`). A default image past its end
of availability fails the deployment; an image you name that is past it gets a warning.
`executor_image_uri` (a prebuilt image) selects pythonPackageSpec instead. Reduction Server
needs NCCL >= 2.7 and Google's google-reduction-server package in a custom container, which
the default images lack: with reducers the chief and workers run `plugin_image_uri` (the
default image rebuilt with the package, `trainstack.components.reduction_server_image`), whose
plugin NCCL loads by its default name (`NCCL_NET_PLUGIN` unset); a default image without it
is an error, and an image you name gets Google's requirement as a warning.

With `node_args` (your own code, `trainstack.trainers.common.user_code.node_args`) each replica runs
`python3 -m trainstack.trainers.node <node_args>` the same way, from the code package; tuning trials'
values arrive after your code's argv as `--<parameter_id>=<value>`. Give it as `code`, which
builds `node_args` with the run contract's data folder and run name (Vertex names the
checkpoint and output folders itself: AIP_CHECKPOINT_DIR, AIP_MODEL_DIR) and takes its image
as `container_image_uri`:

    VertexTrainingJob("exp-42-vertex", {
        "project": "my-project", "region": "us-central1", "display_name": "exp-42",
        "machine_type": "a2-highgpu-8g", "replica_count": 2,
        "package_uri": package.uri,  # TrainerPackage(..., {"code": code, ...})
        "package": package,  # checked to hold `code`
        "code": UserCode(source="train", entrypoint=["python", "train.py"]),
        "container_image_uri": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "data_url": buckets.data_url,  # run_name: default display_name
    })

Worker pools follow Vertex's fixed order: 0 chief (1 replica), 1 workers
(`replica_count - 1`, `{}` when there are none but a later pool is used), 2 reduction
servers, 3 evaluators (unused).

Naming: `displayName` is `display_name` as given; the body carries the labels
`component=vertex-training-job`, `managed-by=trainstack` and `trainstack_request_id` (a hash
of the rest of the body; the provider finds a job it submitted by it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi

from trainstack.components._args import check_args, component_check
from trainstack.components._discovery import validate_body
from trainstack.components._options import inherited_depends_on
from trainstack.components._pod_setup import pod_command
from trainstack.components._vertex_args import (
    hyperparameter_tuning_problems,
    validate_args,
    vertex_job_spec_problems,
    vertex_training_job_problems,
)
from trainstack.components._vertex_body import (
    DEFAULT_BOOT_DISK_SIZE_GB,
    DEFAULT_PYTHON_MODULE,
    HYPERTUNE_METRIC_ENV,
    REDUCTION_SERVER_BUCKET_CAP_MB,
    REDUCTION_SERVER_ENV,
    REQUEST_ID_LABEL,
    custom_job_body,
    custom_job_spec,
    hyperparameter_tuning_job_body,
    job_body,
    replica_image,
    request_id,
    trainer_args_for,
)
from trainstack.components._vertex_provider import (
    CustomJob,
    HyperparameterTuningJob,
    VertexJobProvider,
)
from trainstack.components.catalog.gpu_families import VERTEX_FLEX_START_DEFAULT_WAIT_HOURS
from trainstack.components.catalog.gpus import VertexAcceleratorType
from trainstack.components.catalog.images import (
    DEFAULT_EXECUTOR_IMAGE,
    PYTORCH_GPU_IMAGES,
    REDUCTION_SERVER_IMAGES,
    availability_date,
    image_availability_problem,
    reduction_server_image,
    reduction_server_image_problem,
)
from trainstack.components.catalog.machines import MACHINES
from trainstack.components.catalog.vertex import (
    DEFAULT_REDUCER_MACHINE,
    Algorithm,
    Goal,
    MeasurementSelectionType,
    ParameterType,
    ScaleType,
    vertex_accelerators,
)
from trainstack.components.code_summary import (
    GPU_NODE_ENV,
    NODE_ENV,
    component_code_summary,
    launcher_world_size,
)
from trainstack.components.facts import (
    VERTEX_NO_TIMEOUT_NOTE,
    make_facts,
    vertex_flex_start_note,
    vertex_quota,
    vertex_summary,
)
from trainstack.components.naming import labels_input
from trainstack.components.training_dashboard.targets import (
    DashboardScope,
    vertex_filters,
    vertex_job_id,
)
from trainstack.components.user_code import (
    CodeRules,
    UserCode,
    args_with_code,
    vertex_run_contract,
)

__all__ = [
    "DEFAULT_BOOT_DISK_SIZE_GB",
    "DEFAULT_EXECUTOR_IMAGE",
    "DEFAULT_PYTHON_MODULE",
    "HYPERTUNE_METRIC_ENV",
    "PYTORCH_GPU_IMAGES",
    "REDUCTION_SERVER_BUCKET_CAP_MB",
    "REDUCTION_SERVER_ENV",
    "REDUCTION_SERVER_IMAGES",
    "REQUEST_ID_LABEL",
    "HyperparameterSpec",
    "HyperparameterTuningArgs",
    "ReductionServerArgs",
    "VertexTrainingJob",
    "VertexTrainingJobArgs",
    "custom_job_body",
    "custom_job_spec",
    "hyperparameter_tuning_job_body",
    "hyperparameter_tuning_problems",
    "job_body",
    "pod_command",
    "reduction_server_image",
    "request_id",
    "trainer_args_for",
    "validate_args",
    "vertex_job_spec_problems",
    "vertex_training_job_problems",
]

TOKEN: Final = "trainstack:vertex:VertexTrainingJob"
COMPONENT_LABEL: Final = "vertex-training-job"
VERTEX_CODE: Final = CodeRules("vertex", runs_image=True, pulumi_secrets=True)
"""What your code may use on Vertex AI: either launcher (default torchrun), an image (the
`vertex` target's own `code_rules`)."""


def _vertex_folders(contract: dict[str, str]) -> dict[str, str]:
    # No checkpoint folder of the code's own here: Vertex's AIP_CHECKPOINT_DIR stands.
    return vertex_run_contract(contract, checkpoint_dir=False)


API: Final = "aiplatform.v1"


class ReductionServerArgs(TypedDict):
    """Reduction Server replicas (worker pool 2); GPU workers on 2 or more machines."""

    enabled: NotRequired[bool]
    """Default true; false leaves the job without reducers (the stack file's switch)."""
    replica_count: NotRequired[int | Literal["auto"]]
    """Reducers; `auto` (default) sizes them so their total egress covers the workers'
    (`trainstack.components.catalog.vertex.reducers_needed`). One reducer is allowed."""
    machine_type: NotRequired[str]
    """Reducer machine type; default `n1-highcpu-16` (Google's recommendation)."""


class HyperparameterSpec(TypedDict):
    """One tuned parameter, in the REST `ParameterSpec` vocabulary; Vertex passes its value
    to the trainer as `--<parameter_id>=<value>`."""

    parameter_id: str
    type: ParameterType
    """Which `<type>ValueSpec` the parameter uses."""
    min_value: NotRequired[float]
    """double/integer: inclusive minimum."""
    max_value: NotRequired[float]
    """double/integer: inclusive maximum."""
    values: NotRequired[list[Any]]
    """categorical: strings; discrete: increasing numbers."""
    scale_type: NotRequired[ScaleType]
    """double/integer/discrete only; integer and discrete default to UNIT_LINEAR_SCALE (what
    Google's SDK sends, `trainstack.components._vertex_body.LINEAR_BY_DEFAULT`)."""


class HyperparameterTuningArgs(TypedDict):
    """Turns the job into a hyperparameter-tuning job whose trials run the same spec."""

    metric_id: str
    """Metric tag the trainer reports with cloudml-hypertune."""
    goal: Goal
    parameters: list[HyperparameterSpec]
    max_trial_count: int
    parallel_trial_count: int
    algorithm: NotRequired[Algorithm]
    """Default ALGORITHM_UNSPECIFIED (Vertex's Bayesian optimization)."""
    max_failed_trial_count: NotRequired[int]
    """0 (default) lets Vertex decide."""
    measurement_selection_type: NotRequired[MeasurementSelectionType]
    """Which of a trial's measurements is its result: BEST_MEASUREMENT (default, what
    Google's SDK sends) or LAST_MEASUREMENT (what Vertex uses when the field is unset)."""


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
    accelerator_type: NotRequired[VertexAcceleratorType]
    """Vertex accelerator enum (`NVIDIA_TESLA_A100`, `NVIDIA_A100_80GB`). An A2 machine
    fixes it, so it may be omitted there (and must match when given); none on CPU."""
    accelerator_count: NotRequired[int]
    """GPUs per machine: fixed by an A2 machine (optional there, checked when given)."""
    replica_count: int
    """Machines including the chief (>= 1)."""
    reduction_server: NotRequired[ReductionServerArgs]
    """Add a Reduction Server pool (GPU jobs only)."""
    package_uri: NotRequired[pulumi.Input[str]]
    """gs:// URI of the trainer sdist (`TrainerPackage.uri`); selects pythonPackageSpec, or
    with `node_args` and `container_image_uri`, the package installed into that image."""
    executor_image_uri: NotRequired[str]
    """A Vertex prebuilt training image: runs package_uri through pythonPackageSpec instead
    of the container path (Google's are all past their end of availability today)."""
    python_module: NotRequired[str]
    """Trainer module the node launcher runs on each replica (default `trainstack.trainers.torch_ddp`);
    the pythonModule itself is always `trainstack.trainers.node`, from the package."""
    trainer_args: NotRequired[list[str]]
    """Command-line args for the trainer (`--steps=1000`, ...)."""
    node_args: NotRequired[pulumi.Input[Sequence[str]]]
    """Your own code instead of a trainer module: the `python -m trainstack.trainers.node` arguments
    (`trainstack.infra.compose.user_code_node_args`), the replicas' args as they are; needs
    `package_uri`. With `container_image_uri` the replica runs the pod setup script
    (`pod_command`): it installs the package into the image's `python3`, then
    runs `python3 -m trainstack.trainers.node <node_args>`. Excludes python_module and trainer_args;
    tuning parameters may then be any flag of your code."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`), which builds `node_args` with the run
    contract as on the `vertex` target (`vertex_run_contract`); its image becomes
    `container_image_uri`."""
    package: NotRequired[Any]
    """With `code`: the `TrainerPackage` of `package_uri`, checked to be built from the same
    code (`trainstack.components.user_code.package_code_problem`)."""
    data_url: NotRequired[pulumi.Input[str]]
    """With `code`: the run contract's data folder (`TrainingBuckets.data_url`)."""
    run_name: NotRequired[str]
    """With `code`: the run's name (`TRAINSTACK_RUN_NAME`; default `display_name`)."""
    secret_env_names: NotRequired[Sequence[str]]
    """The `--env=NAME=VALUE` names of `node_args` whose values are secrets (a stack's
    `secure:` trainer.env values): they reach the replicas but not the request id label (a
    hash any caller who may list jobs sees), which sees the name only
    (`trainstack.components._node_args.keyed_node_args`)."""
    container_image_uri: NotRequired[str]
    """The image the replicas run (containerSpec); default: the python_module's framework
    image (`trainstack.components.catalog.images.vertex_training_image`). With package_uri the pod
    setup script installs the package into its `python3` first; without, the image must
    hold the trainers and `container_command` starts them."""
    plugin_image_uri: NotRequired[pulumi.Input[str]]
    """The default image rebuilt with Google's Reduction Server NCCL plugin, by digest
    (`trainstack.components.reduction_server_image.ReductionServerImage.image_uri`): with
    reducers, the chief and workers run it in place of the default image; NCCL loads the
    plugin its build checked by its default name, `libnccl-net.so`. Needs `package_uri`;
    not with an image you name."""
    image_mirror: NotRequired[str]
    """`REGION-docker.pkg.dev/PROJECT/REPOSITORY` of an Artifact Registry remote repository
    with Docker Hub upstream (`trainstack.components.image_mirror.ImageMirror.registry`): the default
    image is pulled through it, by digest where the catalog has one
    (`trainstack.components.catalog.images.mirrored_image_uri`), instead of anonymously from Docker Hub.
    Unused when an image is named."""
    container_command: NotRequired[list[str]]
    """containerSpec command (default: the image's entrypoint). For one process per GPU with
    trainstack's trainers installed in the image: `["python", "-m", "trainstack.trainers.node",
    "<trainer module>"]`."""
    service_account: NotRequired[pulumi.Input[str]]
    """Email of the account the job runs as (caller needs iam.serviceAccounts.actAs)."""
    base_output_dir: NotRequired[pulumi.Input[str]]
    """gs:// URL (the checkpoint bucket); sets AIP_CHECKPOINT_DIR, AIP_MODEL_DIR, ..."""
    spot: NotRequired[bool]
    """Run on Spot capacity (scheduling.strategy SPOT)."""
    flex_start: NotRequired[bool]
    """Queue for Dynamic Workload Scheduler capacity (scheduling.strategy FLEX_START; GPU
    machines, not with spot or reduction_server)."""
    flex_start_max_wait_s: NotRequired[int]
    """flex_start: how long the job may wait for its machines (scheduling.maxWaitDuration;
    default 24 hours, Vertex's own; 0 waits indefinitely)."""
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


def _check_image(args: Mapping[str, Any], reducers: int) -> None:
    """A default image past its end of availability, or without what Reduction Server needs,
    is an error; an image you named gets the same facts as a warning (`TRAINSTACK_TODAY`
    stands in for today)."""
    image, key, default = replica_image(args)
    problems = [image_availability_problem(image, availability_date(), key, default)]
    rebuilt = default and args.get("plugin_image_uri") is not None
    if reducers and "executor_image_uri" not in args and not rebuilt:
        # A default image is replaced by naming one in container_image_uri.
        where = "container_image_uri" if default else key
        problems.append(reduction_server_image_problem(image, where, default))
    found = [p for p in problems if p is not None]
    if found and default:
        raise ValueError("\n".join(found))
    for problem in found:
        pulumi.log.warn(problem)


def vertex_job_facts(
    args: VertexTrainingJobArgs,
    reducers: int,
    project: str,
    code: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A job's facts (`trainstack.components.facts`), from its validated arguments: the
    sizing a stack's plan gives the same job; `code`: the plan's entry of its `code`
    (`job_code`). Its name is known only once Vertex created it (its registered `job_name`;
    `trainstack status --job NAME` reads it)."""
    machine_type, replicas = args["machine_type"], args["replica_count"]
    reducer = str(
        dict(args.get("reduction_server") or {}).get("machine_type", DEFAULT_REDUCER_MACHINE)
    )
    tuning = args.get("hyperparameter_tuning")
    trials = 1 if tuning is None else int(tuning["parallel_trial_count"])
    spot, flex = args.get("spot", False), args.get("flex_start", False)
    sizing = (machine_type, replicas, reducers, reducer)
    gpus = MACHINES[machine_type].gpus
    notes = [VERTEX_NO_TIMEOUT_NOTE] if gpus and args.get("timeout_s") is None else []
    if flex:
        wait = args.get("flex_start_max_wait_s", VERTEX_FLEX_START_DEFAULT_WAIT_HOURS * 3600)
        notes.append(vertex_flex_start_note(wait))
    return make_facts(
        "VertexTrainingJob",
        "vertex",
        # Priced on demand (no flex-start price is sourced), counted on preemptible quota.
        **vertex_summary(*sizing, spot, trials),
        quota=vertex_quota(*sizing, spot or flex, args["region"], trials),
        notes=notes,
        status={"project": project, "region": args["region"]},
        logs={"platform": "vertex", "workers": replicas},
        code=code,
    )


def job_code(code: UserCode | None, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The plan's "Your code" entry of the job's `code` (None without): in the replicas'
    image, one process per GPU under torchrun (`trainstack.components.code_summary`)."""
    if code is None:
        return None
    gpus = vertex_accelerators(args["machine_type"])[1]
    launcher = code.launcher_for(VERTEX_CODE.default_launcher)
    return component_code_summary(
        code,
        "VertexTrainingJob",
        default_launcher=VERTEX_CODE.default_launcher,
        runs_on=replica_image(args)[0],
        world_size=launcher_world_size(launcher, args["replica_count"], gpus),
        node_env=GPU_NODE_ENV if gpus else NODE_ENV,
    )


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
    facts: pulumi.Output[dict[str, Any]]
    """What `trainstack plan|plan-diff|quota|status|logs --program` read from this job
    (`trainstack.components.facts`; also a registered output): GPUs, replicas and reducers,
    $/hour at list price with Vertex's markup (times the parallel trials when tuning), the
    Vertex training quota it draws and its plan notes. A deployed job's status:
    `trainstack status --job <job_name>`."""
    reducer_count: int
    """Reduction Server replicas (0 without Reduction Server)."""

    def __init__(
        self, name: str, args: VertexTrainingJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("VertexTrainingJob", VertexTrainingJobArgs, args)
        code = args.get("code")
        args = component_check(  # type: ignore[assignment]
            "VertexTrainingJob",
            args_with_code,
            args,
            VERTEX_CODE,
            args["display_name"],
            image_key="container_image_uri",
            folders=_vertex_folders,
            needs=("data_url",),
        )
        reducers = component_check("VertexTrainingJob", validate_args, args)
        component_check("VertexTrainingJob", _check_image, args, reducers)
        code_entry = job_code(code, args)
        # Validates plain labels now (Outputs when they resolve) and merges trainstack's.
        labels = component_check(
            "VertexTrainingJob", labels_input, args.get("labels"), COMPONENT_LABEL
        )
        super().__init__(TOKEN, name, None, opts)

        names = (
            "package_uri",
            "service_account",
            "base_output_dir",
            "network",
            "tensorboard",
            "node_args",
            "plugin_image_uri",
        )
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
            # Cancel the old job before submitting its replacement (the provider's diff says
            # so too): never two jobs holding quota and writing one checkpoint folder.
            # It runs as the training account from the start: wait for that account's
            # bindings (passed as this component's depends_on, see _options).
            opts=pulumi.ResourceOptions(
                parent=self, delete_before_replace=True, depends_on=inherited_depends_on(opts)
            ),
        )
        self.job_name = self.job.job_name
        self.state = self.job.state
        self.console_url = self.job.console_url
        self.body = body
        self.reducer_count = reducers
        log_filter, resource_filter = vertex_filters(vertex_job_id(self.job_name))
        self.dashboard_scope: DashboardScope = {
            "target": "vertex",
            "worker_count": args["replica_count"],
            "log_filter": log_filter,
            "resource_filter": resource_filter,
        }
        self.facts = pulumi.Output.from_input(args["project"]).apply(
            lambda project: vertex_job_facts(args, reducers, project, code_entry)
        )
        self.register_outputs(
            {
                "facts": self.facts,
                "job_name": self.job_name,
                "state": self.state,
                "console_url": self.console_url,
                "body": self.body,
            }
        )

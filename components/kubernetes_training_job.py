"""The bundled trainer as a Kubernetes Indexed Job on GPU nodes, tied to the stack's life.

    from trainstack.components.kubernetes_training_job import KubernetesTrainingJob

    job = KubernetesTrainingJob(
        "exp-42-training",
        {
            "job_name": "exp-42-train",
            "node_count": 4,
            "gpus_per_node": 8,
            "package_uri": package.uri,  # TrainerPackage
            "trainer_args": ["--steps=1000", "--global_batch_size=256"],
            "checkpoint_url": buckets.checkpoint_url,
            "project": "my-project",
            "gcp_service_account_email": identity.service_account_email,
            "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
        },
        opts=pulumi.ResourceOptions(providers={"kubernetes": k8s_provider}),
    )
    # job.job_name; `pulumi destroy` deletes the Job and its pods

What it creates: a ServiceAccount (Workload Identity: annotated with the Google service
account, which grants it `roles/iam.workloadIdentityUser`), a headless Service whose name is
the pods' subdomain (pod i is `<job>-<i>.<job>`, node 0 hosts the rendezvous), and an
Indexed Job with completions = parallelism = nodes. Each pod takes all GPUs of one node
(plus a required anti-affinity: one pod per node), tolerates the GPU taint, mounts a
memory-backed /dev/shm for NCCL and data loaders, and runs `kubernetes_pod.sh` as its
command: it installs the trainer package (and, for TensorFlow >= 2.16, tf-keras at the
image's TensorFlow minor with --no-deps), then execs the container's args, the node launcher
`python3 -m trainstack.trainers.node MODULE ARGS` (`node_argv`). The launcher reads the pod's index
from JOB_COMPLETION_INDEX and starts torchrun with one process per GPU, rendezvousing on
pod 0 (`<job>-0.<job>`, TRAINSTACK_COORDINATOR_PORT), or a non-torch trainer once per pod.
Your own code replaces the module and its flags: the pods run `python3 -m
trainstack.trainers.node <node_args>` in `image` (default: the torch trainer's image). Give it
as `code` (node_args built with the run contract's folders, its image as `image`):

    KubernetesTrainingJob("exp-42-training", {
        "job_name": "exp-42-train", "node_count": 2, "gpus_per_node": 8,
        "package_uri": package.uri,  # TrainerPackage(..., {"code": code, ...})
        "package": package,  # checked to hold `code`
        "code": UserCode(source="train", entrypoint=["python", "train.py"]),
        "checkpoint_url": buckets.checkpoint_url, "data_url": buckets.data_url,
        "run_name": "exp-42",  # default: job_name
    })

With `fabric` (A100Cluster gives it on A3 Mega, A3 Ultra and A4) each pod also carries the
GPUDirect fabric's pieces (`trainstack.components._pod_fabric`): the networking.gke.io
annotations that attach its GPU networks, the tcpxo-daemon sidecar on A3 Mega, the NCCL
plugin's host folders and the NCCL environment; the pod script waits for the plugin's files
and, on A3 Ultra and A4, sources gIB's set_nccl_env.sh before the launcher.

Recovery (podFailurePolicy, first match wins; https://kubernetes.io/docs/concepts/workloads/
controllers/job/#pod-failure-policy): the DisruptionTarget condition (node preempted,
drained or lost), exit 143 (preempted after a checkpoint), exit 4 (a peer pod or pod 0's
store went away, `trainstack.trainers.elastic`) and exit 6 (`capacity_ended`: a flex-start
node's run duration ends, after a checkpoint; `gpu_startup.RESTART_EXIT_CODES`) are
`Ignore`d: "the counter towards the .backoffLimit is not incremented and a replacement Pod is
created" (the per-index limit likewise). torchrun
never restarts in place, so a lost peer replaces every pod; each resumes from the newest
checkpoint. Exit 1 (a code error: a worker raised), 2 (config) and 5 (fewer usable GPUs
than the plan bought, `TRAINSTACK_EXPECTED_ACCELERATORS`) are `FailJob`: the Job stops.
Anything else (3: setup failed; 137: killed) counts against `backoff_limit_per_index`, and
`maxFailedIndexes: 0` fails the Job once one index has used up its retries, not leaving the
others in the rendezvous (https://kubernetes.io/docs/concepts/workloads/controllers/job/
#backoff-limit-per-index). podFailurePolicy requires restartPolicy
Never; podReplacementPolicy Failed starts a replacement only once the old pod is gone
(`tests.fidelity.job_controller` imitates these rules). With `run_records` the pods keep
the run's records for the supervisor: heartbeats, and on an index's last attempt the run's
end when its setup fails (`components/kubernetes_pod.sh`, `_pod_setup.attempt_env`).

`pulumi up` does not wait for training (`pulumi.com/skipAwait`) unless `wait_for_completion`
is set with a `timeout_s`. `pulumi destroy` deletes the Job with foreground propagation, so
it returns once the pods are gone. The Job has no ttlSecondsAfterFinished: a Job that the
cluster garbage-collected would be created again by the next `pulumi up`.

Naming: the Job, the Service and the ServiceAccount are all named `job_name` (a DNS label
short enough that `<job_name>-<index>` fits 63 characters).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import serviceaccount

from trainstack.components._args import check_args, component_check
from trainstack.components._job_launch import (  # noqa: F401 (node_argv: the container's args)
    DEFAULT_MODULE,
    job_launch,
    node_argv,
)
from trainstack.components._kubernetes_job_manifests import (  # noqa: F401 (the manifests' names)
    CONTAINER_NAME,
    DEFAULT_BACKOFF_LIMIT_PER_INDEX,
    DEFAULT_NAMESPACE,
    DEFAULT_SHM_SIZE_GIB,
    DEFAULT_TERMINATION_GRACE_S,
    GPU_TOLERATION,
    manifests,
    pod_failure_policy,
)
from trainstack.components._node_args import secret_env_names_problems
from trainstack.components._options import inherited_depends_on
from trainstack.components._pod_fabric import PodFabric
from trainstack.components._pod_setup import POD_SETUP_ENV
from trainstack.components.catalog.images import KUBERNETES_IMAGES as DEFAULT_IMAGES
from trainstack.components.catalog.images import kubernetes_image
from trainstack.components.gpu_startup import (
    DEFAULT_PORT,
    check_trainer,
    validate_node_args,
)
from trainstack.components.naming import labels_input
from trainstack.components.user_code import CodeRules, UserCode, args_with_code
from trainstack.trainers.common.accelerators import EXPECTED_ACCELERATORS_ENV
from trainstack.trainers.common.contract import TF_MODULE

TOKEN: Final = "trainstack:k8s:KubernetesTrainingJob"
COMPONENT_LABEL: Final = "kubernetes-training-job"
KUBERNETES_CODE: Final = CodeRules("gpu_cluster", runs_image=True, pulumi_secrets=True)
"""What your code may use in a Kubernetes Job: either launcher (default torchrun), an image
(the `gke` target's own `code_rules`)."""
TF_KERAS_MODULES: Final = frozenset({TF_MODULE})
"""Trainer modules that run tf.keras as Keras 2 (tf-keras on TensorFlow >= 2.16)."""
WORKLOAD_IDENTITY_ROLE: Final = "roles/iam.workloadIdentityUser"

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_VALID = "a lowercase letter, then a-z, 0-9 or '-', ending with a letter or digit"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_ENV: Final = frozenset(
    {
        "JOB_COMPLETION_INDEX",
        "JOB_NAME",
        "TRAINSTACK_COORDINATOR",
        "TRAINSTACK_COORDINATOR_PORT",
        EXPECTED_ACCELERATORS_ENV,
        "TRAINSTACK_HEADLESS_SERVICE",
        "TRAINSTACK_NUM_NODES",
        "TRAINSTACK_TF_KERAS",
        *POD_SETUP_ENV,
    }
)


class KubernetesTrainingJobArgs(TypedDict):
    """Arguments for `KubernetesTrainingJob`. Sizes and names are plain values: they shape
    the manifests, which are validated before anything is registered."""

    job_name: str
    """Name of the Job, its headless Service and its ServiceAccount: a DNS label (a-z, 0-9,
    '-'), short enough that `<job_name>-<node_count - 1>` is at most 63 characters."""
    node_count: int
    """Nodes, one pod each (completions = parallelism = node_count)."""
    gpus_per_node: int
    """GPUs each pod requests: all GPUs of a node (torchrun starts one process per GPU)."""
    package_uri: pulumi.Input[str]
    """gs:// URI of the trainer sdist (`TrainerPackage.uri`), installed when a pod starts."""
    trainer_module: NotRequired[str]
    """Trainer to run (default `trainstack.trainers.torch_ddp`, under torchrun with one process per
    GPU; the node launcher runs other modules once per pod)."""
    trainer_args: NotRequired[list[str]]
    """The trainer's `--key=value` flags (`trainstack.infra.run_args.trainer_args`)."""
    node_args: NotRequired[pulumi.Input[Sequence[str]]]
    """Your own code instead of the trainer: `python -m trainstack.trainers.node` arguments
    (`trainstack.infra.compose.user_code_node_args`); excludes trainer_module and trainer_args."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`), which builds `node_args` with the run
    contract's folders in `checkpoint_url` and `data_url` (and `image` from its image)."""
    package: NotRequired[Any]
    """With `code`: the `TrainerPackage` of `package_uri`, checked to be built from the same
    code (`trainstack.components.user_code.package_code_problem`)."""
    data_url: NotRequired[pulumi.Input[str]]
    """With `code`: the run contract's data folder (`TrainingBuckets.data_url`)."""
    run_name: NotRequired[str]
    """With `code`: the run's name in the contract's folders (default `job_name`)."""
    secret_env_names: NotRequired[Sequence[str]]
    """The `--env=NAME=VALUE` names of `node_args` whose values are secrets (a stack's
    `secure:` trainer.env values): they reach the pods but not the run's key
    (`TRAINSTACK_RUN_RECORD`), which names objects in the checkpoint bucket anyone who may
    list it sees; the key sees the name only, so a rotated secret keeps the run
    (`trainstack.components._node_args.keyed_node_args`)."""
    checkpoint_url: NotRequired[pulumi.Input[str]]
    """gs:// URL of the checkpoint bucket: adds `--checkpoint_dir=<url>/checkpoints` unless
    the flags choose one, so a restarted pod resumes."""
    image: NotRequired[str]
    """Container image with CUDA and the framework (default: the pinned image for the module,
    `trainstack.components.catalog.images.KUBERNETES_IMAGES`)."""
    namespace: NotRequired[str]
    """Namespace of every object (default `default`); it must exist."""
    project: NotRequired[pulumi.Input[str]]
    """Project of the GKE cluster (its Workload Identity pool); required with
    `gcp_service_account_email`."""
    gcp_service_account_email: NotRequired[pulumi.Input[str]]
    """Google service account the pods act as through Workload Identity (Cloud Storage)."""
    node_selector: NotRequired[Mapping[str, str]]
    """Node labels the pods require, e.g. `cloud.google.com/gke-accelerator`."""
    tolerations: NotRequired[list[dict[str, Any]]]
    """Pod tolerations (camelCase); default `[GPU_TOLERATION]`."""
    backoff_limit_per_index: NotRequired[int]
    """Counted failures (see the module docstring) each index may have (default 3); the
    first index past it fails the Job (`maxFailedIndexes: 0`)."""
    active_deadline_seconds: NotRequired[int]
    """Job `spec.activeDeadlineSeconds`: fail the Job (and stop its pods) once it has run
    this many seconds, retries included (default: no limit)."""
    wait_for_completion: NotRequired[bool]
    """Make `pulumi up` wait until the Job completes (default False: return once created)."""
    timeout_s: NotRequired[int]
    """How long `pulumi up` waits; required with `wait_for_completion`."""
    shm_size_gib: NotRequired[int]
    """Size limit of the memory-backed /dev/shm (default 32)."""
    termination_grace_period_s: NotRequired[int]
    """Seconds between SIGTERM and SIGKILL (default 60)."""
    port: NotRequired[int]
    """Rendezvous port on node 0 (default 29500)."""
    env: NotRequired[Mapping[str, str]]
    """Extra container environment (e.g. NCCL_DEBUG); it overrides the fabric's."""
    fabric: NotRequired[PodFabric]
    """A GPUDirect fabric's additions to every pod: the multi-network annotations, the
    receive-datapath sidecar, the NCCL plugin's host folders and the NCCL environment
    (`trainstack.components.a100_cluster.gke_fabric.pod_fabric_for`; A100Cluster passes its
    own). Without it the pods see eth0 only and NCCL runs over TCP."""
    pod_annotations: NotRequired[pulumi.Input[Mapping[str, str]]]
    """Annotations on every pod, beside the fabric's (e.g. A100Cluster's link to the
    ProvisioningRequest that brings a queued pool's nodes)."""
    run_records: NotRequired[bool]
    """With `checkpoint_url`: the run's end record and stop request (`pod_run_env`)."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """Labels merged with trainstack's; those that are valid Kubernetes labels go on every
    object (all GCP labels are, except values starting or ending in '-' or '_')."""


# -- Validation (pure; raises ValueError naming the argument) --


def _positive_int(args: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key}: {value!r} is not an integer >= 1; valid: an integer >= 1")
    return value


def default_image(module: str) -> str:
    """The pinned public image for a trainer module, by digest where the catalog has one."""
    image = kubernetes_image(module)
    if image is None:
        raise ValueError(
            f"image: required for trainer_module {module!r}; default images exist for "
            f"{', '.join(DEFAULT_IMAGES)}; valid: an image with the trainer's framework"
        )
    return image


def _check_launch(args: Mapping[str, Any], module: object) -> None:
    if "node_args" not in args:
        check_trainer(module, args.get("trainer_args", []))
    elif "trainer_module" in args or "trainer_args" in args:
        raise ValueError(
            "node_args: runs your own code, which takes no trainer_module or trainer_args; "
            "valid: remove them"
        )
    elif isinstance(args["node_args"], list | tuple):  # an Output is checked when known
        validate_node_args(args["node_args"])
    problems = secret_env_names_problems(args)
    if problems:
        raise ValueError("\n".join(problems))


def validate_args(args: Mapping[str, Any]) -> None:
    """Check the plain arguments; raises ValueError with the argument's name."""
    nodes = _positive_int(args, "node_count")
    _positive_int(args, "gpus_per_node")
    job = args.get("job_name")
    if not isinstance(job, str) or not _DNS_LABEL.fullmatch(job):
        raise ValueError(f"job_name: {job!r} is not a DNS label; valid: {_DNS_VALID}")
    longest = f"{job}-{nodes - 1}"
    if len(longest) > 63:
        raise ValueError(
            f"job_name: {job!r} is too long for {nodes} nodes: pod host name {longest!r} has "
            f"{len(longest)} characters; valid: at most 63"
        )
    namespace = args.get("namespace", DEFAULT_NAMESPACE)
    if not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
        raise ValueError(f"namespace: {namespace!r} is not a DNS label; valid: {_DNS_VALID}")
    module = args.get("trainer_module", DEFAULT_MODULE)
    _check_launch(args, module)
    if "image" not in args:
        default_image(module)
    elif not isinstance(args["image"], str) or not args["image"].strip():
        raise ValueError(
            f"image: {args['image']!r} is not an image reference; valid: REPO/IMAGE:TAG"
        )
    for key in ("backoff_limit_per_index", "active_deadline_seconds", "shm_size_gib", "timeout_s"):
        if key in args:
            _positive_int(args, key)
    if "termination_grace_period_s" in args:
        _positive_int(args, "termination_grace_period_s")
    port = args.get("port", DEFAULT_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port: {port!r} is not a TCP port; valid: 1-65535")
    if args.get("wait_for_completion") and "timeout_s" not in args:
        raise ValueError("timeout_s: required when wait_for_completion is true; valid: >= 1")
    if "timeout_s" in args and not args.get("wait_for_completion"):
        raise ValueError("timeout_s: only used with wait_for_completion: true; valid: remove it")
    if args.get("gcp_service_account_email") is not None and args.get("project") is None:
        raise ValueError(
            "project: required with gcp_service_account_email (the cluster's Workload "
            "Identity pool is <project>.svc.id.goog); valid: the cluster's project id"
        )
    for name in args.get("env") or {}:
        if not _ENV_NAME.fullmatch(name) or name in _RESERVED_ENV:
            raise ValueError(
                f"env: {name!r} is not allowed; valid: a variable name other than "
                f"{', '.join(sorted(_RESERVED_ENV))}"
            )


# --------------------------------------------------------------------------------------
# Component
# --------------------------------------------------------------------------------------


class KubernetesTrainingJob(pulumi.ComponentResource):
    """Indexed Job + headless Service + Workload Identity ServiceAccount for the trainer."""

    job_name: pulumi.Output[str]
    """Name of the Job (and of its Service and ServiceAccount)."""
    namespace: pulumi.Output[str]
    """Namespace of the objects."""
    service_name: pulumi.Output[str]
    """The headless Service; pod i resolves as `<job_name>-<i>.<service_name>`."""
    service_account_name: pulumi.Output[str]
    """The Kubernetes ServiceAccount the pods run as."""
    manifests: pulumi.Output[dict[str, Any]]
    """The applied objects: `service_account`, `service`, `job`."""
    service_account: k8s.core.v1.ServiceAccount
    service: k8s.core.v1.Service
    job: k8s.batch.v1.Job
    workload_identity_binding: serviceaccount.IAMMember | None
    """`roles/iam.workloadIdentityUser` for the ServiceAccount on the Google account."""

    def __init__(
        self,
        name: str,
        args: KubernetesTrainingJobArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        check_args("KubernetesTrainingJob", KubernetesTrainingJobArgs, args)
        args = component_check(  # type: ignore[assignment]
            "KubernetesTrainingJob", args_with_code, args, KUBERNETES_CODE, args["job_name"]
        )
        component_check("KubernetesTrainingJob", validate_args, args)
        labels = component_check(
            "KubernetesTrainingJob", labels_input, args.get("labels"), COMPONENT_LABEL
        )
        super().__init__(TOKEN, name, None, opts)

        job_name = args["job_name"]
        namespace = args.get("namespace", DEFAULT_NAMESPACE)
        module = args.get("trainer_module", DEFAULT_MODULE)
        port = args.get("port", DEFAULT_PORT)
        wait = bool(args.get("wait_for_completion", False))
        gsa = args.get("gcp_service_account_email")
        plain: dict[str, Any] = dict(args)

        def build(values: list[Any]) -> dict[str, Any]:
            merged, package_uri, checkpoint_url, email, node_args, annotations = values
            argv, records = job_launch(plain, package_uri, checkpoint_url, node_args)
            env = {**(plain.get("env") or {}), **records}
            return manifests(
                job_name=job_name,
                node_count=plain["node_count"],
                gpus_per_node=plain["gpus_per_node"],
                image=plain.get("image") or default_image(module),
                package_uri=package_uri,
                args=argv,
                labels=merged,
                namespace=namespace,
                gcp_service_account_email=email,
                node_selector=plain.get("node_selector"),
                tolerations=plain.get("tolerations"),
                backoff_limit_per_index=plain.get(
                    "backoff_limit_per_index", DEFAULT_BACKOFF_LIMIT_PER_INDEX
                ),
                active_deadline_seconds=plain.get("active_deadline_seconds"),
                tf_keras=node_args is None and module in TF_KERAS_MODULES,
                wait_for_completion=wait,
                shm_size_gib=plain.get("shm_size_gib", DEFAULT_SHM_SIZE_GIB),
                termination_grace_period_s=plain.get(
                    "termination_grace_period_s", DEFAULT_TERMINATION_GRACE_S
                ),
                port=port,
                env=env,
                fabric=plain.get("fabric"),
                pod_annotations=annotations,
            )

        objects = pulumi.Output.all(
            labels,
            args["package_uri"],
            args.get("checkpoint_url"),
            gsa,
            args.get("node_args"),
            args.get("pod_annotations"),
        ).apply(build)

        def part(kind: str, field: str) -> pulumi.Output[Any]:
            return objects.apply(lambda m: m[kind][field])

        # A component's depends_on does not reach its children; the Job must still be deleted
        # before, say, the node pool its pods run on.
        deps = inherited_depends_on(opts)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata=part("service_account", "metadata"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )
        self.workload_identity_binding = None
        if gsa is not None:
            project = pulumi.Output.from_input(args["project"])  # validated: given with gsa
            self.workload_identity_binding = serviceaccount.IAMMember(
                f"{name}-wi",
                service_account_id=pulumi.Output.all(project, gsa).apply(
                    lambda v: f"projects/{v[0]}/serviceAccounts/{v[1]}"
                ),
                role=WORKLOAD_IDENTITY_ROLE,
                member=project.apply(
                    lambda p: f"serviceAccount:{p}.svc.id.goog[{namespace}/{job_name}]"
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=part("service", "metadata"),
            spec=part("service", "spec"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )
        job_deps = [*deps, self.service_account, self.service]
        if self.workload_identity_binding is not None:
            job_deps.append(self.workload_identity_binding)
        timeout = f"{args['timeout_s']}s" if wait else None
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=part("job", "metadata"),
            spec=part("job", "spec"),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=job_deps,
                # The Job's name is fixed and its pod template immutable: a changed spec
                # replaces it, and the old one must be gone first.
                delete_before_replace=True,
                custom_timeouts=(
                    pulumi.CustomTimeouts(create=timeout, update=timeout) if wait else None
                ),
            ),
        )

        self.job_name = pulumi.Output.from_input(job_name)
        self.namespace = pulumi.Output.from_input(namespace)
        self.service_name = pulumi.Output.from_input(job_name)
        self.service_account_name = pulumi.Output.from_input(job_name)
        self.manifests = objects
        self.register_outputs(
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "service_name": self.service_name,
                "service_account_name": self.service_account_name,
                "manifests": self.manifests,
            }
        )

"""Stack config -> components.

The one place that wires the reusable components together for a stack, in the order of
the data flow in ARCHITECTURE.md: project APIs, buckets, identity (which grants itself
access to those buckets), network, the trainer package, then exactly one compute target.
Everything here is deterministic in the config: running it twice registers identical
inputs, so a no-op `pulumi up` stays a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pulumi

from trainstack.components._naming import bucket_name
from trainstack.components.a100_cluster import A100Cluster, A100ClusterArgs, A100TrainingArgs
from trainstack.components.catalog.images import (
    availability_date,
    mirrored_image_uri,
    vertex_training_image,
)
from trainstack.components.image_mirror import ImageMirror
from trainstack.components.local_training_job import LocalTrainingJob, LocalTrainingJobArgs
from trainstack.components.project_services import ProjectServices
from trainstack.components.quota_guard import QuotaGuard, QuotaGuardArgs, QuotaNeed
from trainstack.components.tpu_pod_slice import TpuPodSlice, TpuPodSliceArgs
from trainstack.components.tpu_supervisor import SERVICES as SUPERVISOR_SERVICES
from trainstack.components.tpu_supervisor import SUPERVISED_TARGETS
from trainstack.components.trainer_package import TrainerPackage, TrainerPackageArgs
from trainstack.components.training_buckets import TrainingBuckets, TrainingBucketsArgs
from trainstack.components.training_dashboard import TrainingDashboard, TrainingDashboardArgs
from trainstack.components.training_dashboard.targets import DashboardScope
from trainstack.components.training_identity import TrainingIdentity, TrainingIdentityArgs
from trainstack.components.training_network import TrainingNetwork
from trainstack.components.vertex_training_job import VertexTrainingJob, VertexTrainingJobArgs
from trainstack.infra.config import PROJECT_ROOT, StackConfig, load_stack_config
from trainstack.infra.estimate import quota_needs, vertex_timeout_s
from trainstack.infra.local_paths import run_name
from trainstack.infra.supervision import supervise_cluster, supervise_tpu
from trainstack.infra.vertex_image import (
    uses_image_mirror,
    vertex_image,
    vertex_image_problems,
    vertex_module,
)
from trainstack.trainers.common.contract import (
    CHECKPOINT_DIR_ENV,
    DATA_DIR_ENV,
    OUTPUT_DIR_ENV,
    RUN_NAME_ENV,
    TRAINER_MODULES,
)
from trainstack.trainers.common.user_code import node_args, read_requirements, resolve_source

# APIs every cloud stack needs, plus the ones its compute target needs.
BASE_SERVICES: tuple[str, ...] = (
    "cloudquotas.googleapis.com",
    "compute.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "storage.googleapis.com",
)
TARGET_SERVICES: Mapping[str, tuple[str, ...]] = {
    "tpu": ("tpu.googleapis.com",),
    "gpu_cluster": ("container.googleapis.com",),
    "vertex": ("aiplatform.googleapis.com",),
}


# Stack output keys, shared with tests and `trainstack status`.
OUTPUT_TARGET = "target"
OUTPUT_DATA_URL = "data_url"
OUTPUT_CHECKPOINT_URL = "checkpoint_url"
OUTPUT_STAGING_URL = "staging_url"
OUTPUT_SERVICE_ACCOUNT = "service_account_email"
OUTPUT_NETWORK = "network_self_link"
OUTPUT_SUBNETWORK = "subnetwork_self_link"
OUTPUT_TRAINER_PACKAGE = "trainer_package_uri"
OUTPUT_LOCAL_ROOT = "local_root"
OUTPUT_LOCAL_PIDS = "local_pids"
OUTPUT_LOCAL_LOG = "local_log_path"
OUTPUT_LOCAL_CHECKPOINT_DIR = "local_checkpoint_dir"
OUTPUT_JOB_NAME = "job_name"
OUTPUT_JOB_STATE = "job_state"
OUTPUT_CONSOLE_URL = "console_url"
OUTPUT_REDUCERS = "reducers"
OUTPUT_SLICE_NAME = "slice_name"
OUTPUT_WORKER_IPS = "worker_ips"
OUTPUT_TPU_CHIPS = "tpu_chips"
OUTPUT_TPU_HOSTS = "tpu_hosts"
OUTPUT_CHECKPOINT_DIR = "checkpoint_dir"
OUTPUT_CLUSTER_NAME = "cluster_name"
OUTPUT_CLUSTER_ENDPOINT = "cluster_endpoint"
OUTPUT_NODE_POOL = "node_pool"
OUTPUT_KUBECONFIG = "kubeconfig"
OUTPUT_INSTANCE_NAMES = "instance_names"
OUTPUT_GPUS = "gpus"
OUTPUT_DASHBOARD_URL = "dashboard_url"
OUTPUT_METRIC_TYPES = "metric_types"
OUTPUT_NODE_ARGS = "node_args"
"""Your code's `python -m trainstack.trainers.node` arguments: what each machine / TPU host runs."""

SECRET_SERVICE = "secretmanager.googleapis.com"
"""Enabled when your code reads `trainer.secret_env` secrets on the node."""
MIRROR_SERVICE = "artifactregistry.googleapis.com"
"""Enabled when a Vertex stack's default image is pulled through its Docker Hub mirror."""


def secret_names(cfg: StackConfig) -> list[str]:
    """The Secret Manager secrets `trainer.secret_env` reads (versions dropped: access is
    granted per secret), sorted and unique."""
    code = cfg.trainer.user_code
    values = code.secret_env.values() if code is not None else ()
    return sorted({value.split("/versions/", 1)[0] for value in values})


GKE_NODE_ROLE = "roles/container.defaultNodeServiceAccount"
"""What a GKE node's own service account needs (logging, monitoring, image pulls)."""


def compose(cfg: StackConfig, deployment: str) -> dict[str, Any]:
    """Register the stack's resources and return its outputs."""
    labels = {**cfg.labels, "stack": deployment, "environment": cfg.environment}
    if cfg.target == "local":
        assert cfg.local is not None  # target == "local" guarantees it
        # The same trainer config as `trainstack local-run`, so either resumes the other's
        # run from the same checkpoint folder. Previews only check and diff: the provider
        # starts processes on `pulumi up` and stops them (keeping the data) on destroy.
        # Named as in `local-run` (`trainstack.infra.local_paths`), so either resumes the other's run.
        trainer = cfg.trainer.model_copy(update={"run_name": run_name(cfg, deployment)})
        local_args: LocalTrainingJobArgs = {
            "trainer": trainer,
            "workers": cfg.local.workers,
            "root": cfg.local.root,
            "labels": labels,
        }
        if trainer.user_code is not None:
            local_args["base_dir"] = str(PROJECT_ROOT)  # where `trainer.source` was checked
        job = LocalTrainingJob(f"{deployment}-job", local_args)
        return {
            OUTPUT_TARGET: "local",
            OUTPUT_LOCAL_ROOT: cfg.local.root,
            OUTPUT_LOCAL_PIDS: job.pids,
            OUTPUT_LOCAL_LOG: job.log_path,
            OUTPUT_LOCAL_CHECKPOINT_DIR: job.checkpoint_dir,
            OUTPUT_JOB_STATE: job.state,
        }

    project, region = cfg.project, cfg.region
    assert project is not None and region is not None  # validated for cloud targets

    # First, so a shortfall stops the deployment before anything else is registered. A
    # shortfall raises (after filing preferences, with request_increases) and never lets the
    # program finish without the compute: a finished program that left the cluster, MIG,
    # slice or job unregistered would have the engine delete them (trainstack.components.quota_guard).
    guard_args: QuotaGuardArgs = {
        "project": project,
        "deployment_name": deployment,
        # `source` (where each quota id is documented) is for the plan, not an argument.
        "needs": [
            cast(QuotaNeed, {k: v for k, v in need.items() if k != "source"})
            for need in quota_needs(cfg)
        ],
        "preflight": not cfg.quotas.skip_preflight,
        "request_increases": cfg.quotas.request_increases,
    }
    if cfg.quotas.contact_email:
        guard_args["contact_email"] = cfg.quotas.contact_email
    QuotaGuard(f"{deployment}-quota", guard_args)

    secrets = secret_names(cfg)
    service_names = [*BASE_SERVICES, *TARGET_SERVICES[cfg.target]]
    service_names += [SECRET_SERVICE] if secrets else []
    service_names += [MIRROR_SERVICE] if uses_image_mirror(cfg) else []
    if cfg.target in SUPERVISED_TARGETS:
        service_names += SUPERVISOR_SERVICES
    services = ProjectServices(
        f"{deployment}-apis", {"project": project, "services": service_names}
    )
    after_apis = pulumi.ResourceOptions(depends_on=[services])
    bucket_args: TrainingBucketsArgs = {
        "project": project,
        "location": cfg.buckets.location or region.upper(),
        "deployment_name": deployment,
        "environment": cfg.environment,
        "checkpoint_retention_days": cfg.buckets.checkpoint_retention_days,
        "delete_data_on_destroy": cfg.buckets.delete_data_on_destroy,
        "labels": labels,
    }
    if cfg.buckets.name_suffix:
        bucket_args["name_suffix"] = cfg.buckets.name_suffix
    buckets = TrainingBuckets(f"{deployment}-buckets", bucket_args, opts=after_apis)
    identity_args: TrainingIdentityArgs = {
        "project": project,
        "deployment_name": deployment,
        "data_bucket": buckets.data_bucket,
        "checkpoint_bucket": buckets.checkpoint_bucket,
        "staging_bucket": buckets.staging_bucket,
    }
    if cfg.gpu_cluster is not None and cfg.gpu_cluster.backend == "gke":
        # The training account is also the GPU nodes' account.
        identity_args["extra_project_roles"] = [GKE_NODE_ROLE]
    if secrets:
        # Your code's secret_env, read on the node with this account: those secrets only.
        identity_args["secrets"] = secrets
    mirror: ImageMirror | None = None
    if uses_image_mirror(cfg):
        assert cfg.vertex is not None
        mirror = ImageMirror(
            f"{deployment}-images",
            {
                "project": project,
                "location": cfg.vertex.region or region,
                "deployment_name": deployment,
                "labels": labels,
            },
            opts=after_apis,
        )
        # The repository's own Output, so the grant (and the job after it) waits for it.
        identity_args["image_repository"] = {
            "location": mirror.location,
            "repository_id": mirror.repository.repository_id,
        }
    identity = TrainingIdentity(f"{deployment}-identity", identity_args, opts=after_apis)
    package = TrainerPackage(f"{deployment}-trainer", package_args(cfg, buckets, labels))
    outputs: dict[str, Any] = {
        OUTPUT_TARGET: cfg.target,
        OUTPUT_DATA_URL: buckets.data_url,
        OUTPUT_CHECKPOINT_URL: buckets.checkpoint_url,
        OUTPUT_STAGING_URL: buckets.staging_url,
        OUTPUT_SERVICE_ACCOUNT: identity.service_account_email,
        OUTPUT_TRAINER_PACKAGE: package.uri,
    }
    # Vertex runs on Google-managed networking unless VPC peering is set up, so only the
    # targets that own their machines get the private network.
    network: TrainingNetwork | None = None
    if cfg.target in ("tpu", "gpu_cluster"):
        network = TrainingNetwork(
            f"{deployment}-network",
            {
                "project": project,
                "region": region,
                "deployment_name": deployment,
                "labels": labels,
            },
            opts=after_apis,
        )
        outputs[OUTPUT_NETWORK] = network.network_self_link
        outputs[OUTPUT_SUBNETWORK] = network.subnetwork_self_link
    node_args: pulumi.Output[list[str]] | None = None
    if cfg.trainer.user_code is not None:
        node_args = pulumi.Output.all(buckets.checkpoint_url, buckets.data_url).apply(
            lambda urls: user_code_node_args(cfg, deployment, urls[0], urls[1])
        )
        outputs[OUTPUT_NODE_ARGS] = node_args
    # The job, slice or nodes read the staging and checkpoint buckets as the training account
    # from their first minute: they wait for every grant of that account (and `pulumi
    # destroy` stops them before the grants go).
    after_grants = pulumi.ResourceOptions(depends_on=[services, *identity.grants])
    target_outputs: dict[str, Any]
    if cfg.target == "vertex":
        target_outputs, scope = _vertex(
            cfg, deployment, labels, package, buckets, identity, after_grants, node_args, mirror
        )
    elif cfg.target == "tpu":
        assert network is not None
        target_outputs, scope = _tpu(
            cfg, deployment, labels, package, buckets, identity, network, after_grants, node_args
        )
    else:
        assert network is not None and cfg.target == "gpu_cluster"
        target_outputs, scope = _gpu_cluster(
            cfg, deployment, labels, package, buckets, identity, network, after_grants, node_args
        )
    outputs.update(target_outputs)
    outputs.update(_monitoring(cfg, deployment, labels, scope, after_apis))
    return outputs


def trainer_args(cfg: StackConfig, deployment: str) -> list[str]:
    """The stack's trainer settings as the trainer's `--key=value` flags (non-defaults only,
    in field order), so a job's command line shows exactly what the stack changed; the run's
    name is always among them (`trainstack.infra.local_paths.run_name`: the stack's name unless the stack
    sets one), since it names the run's checkpoint folder on every target."""
    named = cfg.trainer.model_copy(update={"run_name": run_name(cfg, deployment)})
    values = named.model_dump(exclude_defaults=True, mode="json")
    return [f"--{key}={value}" for key, value in values.items()]


def cloud_trainer_args(cfg: StackConfig, deployment: str) -> list[str]:
    """`trainer_args` for the bundled trainer on GKE, Compute Engine and TPU, plus
    `--model_dir=gs://<checkpoint bucket>/model/<run name>` unless the stack sets
    `trainer.model_dir`: the final model goes beside Vertex's AIP_MODEL_DIR export
    (`<base_output_dir>/model/`, the same bucket), outside the `checkpoints/` prefix the
    bucket's age rule deletes (`trainstack.components.training_buckets.CHECKPOINT_PREFIX`); without
    it the last checkpoint would be the only copy of the trained weights."""
    args = trainer_args(cfg, deployment)
    if cfg.trainer.model_dir:
        return args
    assert cfg.project is not None
    # The bucket TrainingBuckets names (same project, deployment and suffix): a plain
    # string, since the components take the trainer's flags as a list.
    bucket = bucket_name(cfg.project, deployment, "checkpoints", cfg.buckets.name_suffix or None)
    return [*args, f"--model_dir=gs://{bucket}/model/{run_name(cfg, deployment)}"]


def checkpoint_dir(cfg: StackConfig, deployment: str, checkpoint_url: str) -> str:
    """The run's checkpoint folder in the stack's checkpoint bucket: `trainer.checkpoint_dir`
    when set, else `<bucket>/checkpoints/<run name>`, one folder per run, under the prefix
    the bucket's age rule covers (`trainstack.components.training_buckets.CHECKPOINT_PREFIX`)."""
    chosen = cfg.trainer.checkpoint_dir
    return chosen or f"{checkpoint_url.rstrip('/')}/checkpoints/{run_name(cfg, deployment)}"


def package_args(
    cfg: StackConfig, buckets: TrainingBuckets, labels: Mapping[str, str]
) -> TrainerPackageArgs:
    """The trainer package: the bundled trainers, or your code's folder beside the node
    launcher with its requirements."""
    args: TrainerPackageArgs = {"staging_bucket": buckets.staging_bucket, "labels": dict(labels)}
    code = cfg.trainer.user_code
    if code is not None and code.source is not None:
        args["user_source"] = str(resolve_source(code.source, PROJECT_ROOT))
        args["requirements"] = read_requirements(code, PROJECT_ROOT)
    else:
        args["requirements"] = package_requirements(cfg)
    return args


def user_code_node_args(
    cfg: StackConfig, deployment: str, checkpoint_url: str, data_url: str
) -> list[str]:
    """`python -m trainstack.trainers.node` arguments that run your code on the stack's target, with the
    run contract's folders in the stack's buckets: the one command line each target's launch
    runs once per machine after installing the package (`trainstack.trainers.common.user_code`)."""
    code = cfg.trainer.user_code
    assert code is not None
    run = run_name(cfg, deployment)
    contract = {
        CHECKPOINT_DIR_ENV: checkpoint_dir(cfg, deployment, checkpoint_url),
        DATA_DIR_ENV: data_url,
        OUTPUT_DIR_ENV: f"{checkpoint_url}/outputs/{run}",
        RUN_NAME_ENV: run,
    }
    if cfg.target == "vertex":
        # Vertex names the job's folders (AIP_CHECKPOINT_DIR, AIP_MODEL_DIR; per trial when
        # tuning), which the node gives your code unless the stack names a folder itself
        # (the checkpoint folder with the run's name below it, `trainstack.trainers.user_code`).
        del contract[OUTPUT_DIR_ENV]
        if not cfg.trainer.checkpoint_dir:
            del contract[CHECKPOINT_DIR_ENV]
    return node_args(code, cfg.target, contract=contract)


def package_requirements(cfg: StackConfig) -> list[str]:
    """What the trainer package must add to the image it is installed on: on Vertex, what
    the torch trainer imports there that a CUDA image lacks (tensorboard, for
    AIP_TENSORBOARD_LOG_DIR); the TF trainer's tf-keras comes from the setup script."""
    if cfg.target == "vertex" and cfg.vertex is not None:
        return list(vertex_training_image(TRAINER_MODULES[cfg.trainer.framework]).requirements)
    return []


def _vertex(
    cfg: StackConfig,
    deployment: str,
    labels: Mapping[str, str],
    package: TrainerPackage,
    buckets: TrainingBuckets,
    identity: TrainingIdentity,
    after_grants: pulumi.ResourceOptions,
    node_args: pulumi.Output[list[str]] | None = None,
    mirror: ImageMirror | None = None,
) -> tuple[dict[str, Any], DashboardScope]:
    vx = cfg.vertex
    assert vx is not None and cfg.project is not None and cfg.region is not None
    # The section's job keys are the component's (machine, accelerators, replicas,
    # reduction_server, spot, timeout_s, hyperparameter_tuning): passed on as they are.
    args = cast(
        VertexTrainingJobArgs,
        {
            **vx.job_args(),
            "project": cfg.project,
            "region": vx.region or cfg.region,
            "display_name": deployment,
            "service_account": identity.service_account_email,
            "base_output_dir": buckets.checkpoint_url,
            "labels": labels,
        },
    )
    timeout_s = vertex_timeout_s(vx, cfg.limits.max_run_seconds)
    if timeout_s is not None:
        args["timeout_s"] = timeout_s
    errors, _ = vertex_image_problems(cfg, availability_date())
    if errors:
        # The program refuses what the plan refuses: `pulumi preview` fails here.
        raise ValueError("\n".join(errors))
    image, _, default = vertex_image(cfg)
    # Every replica runs the pod setup script, which installs the package into the image's
    # python3 and then runs the node launcher (trainstack.components._vertex_body).
    args["package_uri"] = package.uri
    code = cfg.trainer.user_code
    if code is not None and node_args is not None:
        args["node_args"] = node_args
        args["container_image_uri"] = (
            mirrored_image_uri(vertex_training_image(vertex_module(cfg)), mirror.registry)
            if default and mirror is not None
            else image
        )
    else:
        args["python_module"] = TRAINER_MODULES[cfg.trainer.framework]
        args["trainer_args"] = trainer_args(cfg, deployment)
        if not default:
            args["container_image_uri"] = image
        elif mirror is not None:
            args["image_mirror"] = mirror.registry
    job = VertexTrainingJob(f"{deployment}-job", args, opts=after_grants)
    outputs = {
        OUTPUT_JOB_NAME: job.job_name,
        OUTPUT_JOB_STATE: job.state,
        OUTPUT_CONSOLE_URL: job.console_url,
        OUTPUT_REDUCERS: job.reducer_count,
    }
    return outputs, job.dashboard_scope


def _tpu(
    cfg: StackConfig,
    deployment: str,
    labels: Mapping[str, str],
    package: TrainerPackage,
    buckets: TrainingBuckets,
    identity: TrainingIdentity,
    network: TrainingNetwork,
    after_grants: pulumi.ResourceOptions,
    node_args: pulumi.Output[list[str]] | None = None,
) -> tuple[dict[str, Any], DashboardScope]:
    tpu_cfg = cfg.tpu
    assert tpu_cfg is not None and cfg.project is not None and cfg.region is not None
    # The section's keys are the component's (slice, zone, runtime, provisioning,
    # reservation): passed on as they are.
    args = cast(
        TpuPodSliceArgs,
        {
            **tpu_cfg.model_dump(exclude_none=True),
            "project": cfg.project,
            "deployment_name": deployment,
            "network_self_link": network.network_self_link,
            "subnetwork_self_link": network.subnetwork_self_link,
            "network_tags": [network.node_tag],
            "service_account_email": identity.service_account_email,
            "package_uri": package.uri,
            # The run's own folder, `<checkpoint bucket>/checkpoints/<run name>`: bundled
            # trainer flags that name a folder (`trainer.checkpoint_dir`) win on the host.
            "checkpoint_dir": buckets.checkpoint_url.apply(
                lambda url: checkpoint_dir(cfg, deployment, url)
            ),
            "labels": labels,
        },
    )
    if cfg.limits.max_run_seconds is not None:
        args["max_run_seconds"] = cfg.limits.max_run_seconds  # the startup script enforces it
    if node_args is not None:
        # Your code, on every host (its checkpoint folder is in node_args' run contract).
        args["node_args"] = node_args
    else:
        args["trainer_module"] = TRAINER_MODULES[cfg.trainer.framework]
        args["trainer_args"] = cloud_trainer_args(cfg, deployment)
    tpu = TpuPodSlice(f"{deployment}-tpu", args, opts=after_grants)
    outputs = {
        OUTPUT_SLICE_NAME: tpu.slice_name,
        OUTPUT_WORKER_IPS: tpu.worker_ips,
        OUTPUT_TPU_CHIPS: tpu.chips,
        OUTPUT_TPU_HOSTS: tpu.hosts,
        OUTPUT_CONSOLE_URL: tpu.console_url,
        OUTPUT_CHECKPOINT_DIR: tpu.checkpoint_dir,
    }
    outputs |= supervise_tpu(cfg, deployment, tpu, args, buckets, identity, labels, after_grants)
    return outputs, tpu.dashboard_scope


def _gpu_cluster(
    cfg: StackConfig,
    deployment: str,
    labels: Mapping[str, str],
    package: TrainerPackage,
    buckets: TrainingBuckets,
    identity: TrainingIdentity,
    network: TrainingNetwork,
    after_grants: pulumi.ResourceOptions,
    node_args: pulumi.Output[list[str]] | None = None,
) -> tuple[dict[str, Any], DashboardScope]:
    gpu = cfg.gpu_cluster
    assert gpu is not None and cfg.project is not None
    training: A100TrainingArgs = {
        "package_uri": package.uri,
        # Bundled: --checkpoint_dir=<url>/checkpoints/<run_name of the flags>; gce: where a
        # run limit's start goes.
        "checkpoint_url": buckets.checkpoint_url,
    }
    code = cfg.trainer.user_code
    if node_args is not None:
        # Your code, on every node (gke: every pod, in your image if given; the config
        # refuses an image on gce, whose VMs run no container).
        training["node_args"] = node_args
        if code is not None and code.image:
            training["image"] = code.image
    else:
        training["trainer_module"] = TRAINER_MODULES[cfg.trainer.framework]
        training["trainer_args"] = cloud_trainer_args(cfg, deployment)
    args: A100ClusterArgs = {
        "project": cfg.project,
        "zone": gpu.zone,
        "deployment_name": deployment,
        "backend": gpu.backend,
        "machine_type": gpu.machine_type,
        "node_count": gpu.node_count,
        "spot": gpu.spot,
        "compact_placement": gpu.compact_placement,
        "tier_1_networking": gpu.tier_1_networking,
        "network_self_link": network.network_self_link,
        "subnetwork_self_link": network.subnetwork_self_link,
        "node_tag": network.node_tag,
        "service_account_email": identity.service_account_email,
        "environment": cfg.environment,
        "labels": labels,
        "training": training,
    }
    if gpu.reservation is not None:
        args["reservation"] = gpu.reservation
    if gpu.master_authorized_cidrs is not None:
        args["master_authorized_cidrs"] = list(gpu.master_authorized_cidrs)
    if cfg.limits.max_run_seconds is not None:
        args["max_run_seconds"] = cfg.limits.max_run_seconds
    cluster = A100Cluster(f"{deployment}-gpu", args, opts=after_grants)
    outputs: dict[str, Any] = {
        OUTPUT_CLUSTER_NAME: cluster.cluster_name,
        OUTPUT_CONSOLE_URL: cluster.console_url,
        OUTPUT_GPUS: cluster.total_gpus,
    }
    if cluster.endpoint is not None:  # gke
        outputs[OUTPUT_CLUSTER_ENDPOINT] = cluster.endpoint
        outputs[OUTPUT_NODE_POOL] = cluster.node_pool_name
        outputs[OUTPUT_KUBECONFIG] = cluster.kubeconfig  # a secret
    if cluster.job_name is not None:
        outputs[OUTPUT_JOB_NAME] = cluster.job_name
    if cluster.instance_names is not None:  # gce
        outputs[OUTPUT_INSTANCE_NAMES] = cluster.instance_names
    outputs |= supervise_cluster(cfg, deployment, cluster, buckets, labels, after_grants)
    return outputs, cluster.dashboard_scope


def _monitoring(
    cfg: StackConfig,
    deployment: str,
    labels: Mapping[str, str],
    scope: DashboardScope,
    after_apis: pulumi.ResourceOptions,
) -> dict[str, Any]:
    """The stack's TrainingDashboard, scoped by its compute component (`dashboard_scope`)."""
    assert cfg.project is not None
    args: TrainingDashboardArgs = {
        "project": cfg.project,
        "deployment_name": deployment,
        **scope,
        "labels": dict(labels),
    }
    board = TrainingDashboard(f"{deployment}-monitoring", args, opts=after_apis)
    return {OUTPUT_DASHBOARD_URL: board.dashboard_url, OUTPUT_METRIC_TYPES: board.metric_types}


def main_program() -> dict[str, Any]:
    """The Pulumi program: validate the stack config once, then compose it."""
    cfg = load_stack_config()
    return compose(cfg, pulumi.get_stack())

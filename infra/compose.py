"""Stack config -> components.

The one place that wires the reusable components together for a stack, in the order of
the data flow in ARCHITECTURE.md: project APIs, buckets, identity (which grants itself
access to those buckets), network, the trainer package, then exactly one compute target:
its target module (`trainstack.infra.targets`) registers the compute and names the APIs,
grants and network it needs; a standalone target (local) composes itself.
Everything here is deterministic in the config: running it twice registers identical
inputs, so a no-op `pulumi up` stays a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pulumi

from trainstack.components.catalog.names import stack_name_problem
from trainstack.components.env_secrets import EnvSecrets
from trainstack.components.project_services import ProjectServices
from trainstack.components.quota_guard import QuotaGuard, QuotaGuardArgs, QuotaNeed
from trainstack.components.run_supervisor import SERVICES as SUPERVISOR_SERVICES
from trainstack.components.trainer_package import TrainerPackage, TrainerPackageArgs
from trainstack.components.training_buckets import TrainingBuckets, TrainingBucketsArgs
from trainstack.components.training_dashboard import TrainingDashboard, TrainingDashboardArgs
from trainstack.components.training_dashboard.targets import DashboardScope
from trainstack.components.training_identity import TrainingIdentity, TrainingIdentityArgs
from trainstack.components.training_network import TrainingNetwork
from trainstack.components.user_code import UserCode, run_contract
from trainstack.infra.config import ConfigError, StackConfig, load_stack_config
from trainstack.infra.config_secrets import secret_env_names
from trainstack.infra.estimate import quota_needs
from trainstack.infra.local_paths import run_name
from trainstack.infra.outputs import (
    OUTPUT_CHECKPOINT_URL,
    OUTPUT_DASHBOARD_URL,
    OUTPUT_DATA_URL,
    OUTPUT_METRIC_TYPES,
    OUTPUT_NETWORK,
    OUTPUT_NODE_ARGS,
    OUTPUT_SERVICE_ACCOUNT,
    OUTPUT_STAGING_URL,
    OUTPUT_SUBNETWORK,
    OUTPUT_TARGET,
    OUTPUT_TRAINER_PACKAGE,
)
from trainstack.infra.project import current_place
from trainstack.infra.targets import CloudTarget, ComposeContext, StandaloneTarget, target_of

# APIs every cloud stack needs; each target adds its own (`CloudTarget.services`).
BASE_SERVICES: tuple[str, ...] = (
    "cloudquotas.googleapis.com",
    "compute.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "storage.googleapis.com",
)
SECRET_SERVICE = "secretmanager.googleapis.com"
"""Enabled when your code reads `trainer.secret_env` secrets on the node."""


def secret_names(cfg: StackConfig) -> list[str]:
    """The Secret Manager secrets `trainer.secret_env` reads (versions dropped: access is
    granted per secret), sorted and unique."""
    code = cfg.trainer.user_code
    values = code.secret_env.values() if code is not None else ()
    return sorted({value.split("/versions/", 1)[0] for value in values})


def compose(cfg: StackConfig, deployment: str) -> dict[str, Any]:
    """Register the stack's resources and return its outputs."""
    labels = {**cfg.labels, "stack": deployment, "environment": cfg.environment}
    target = target_of(cfg)
    if isinstance(target, StandaloneTarget):
        return target.compose_alone(cfg, deployment, labels)
    assert isinstance(target, CloudTarget)

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
    secure_names = sorted(secret_env_names(cfg.secrets))
    service_names = [*BASE_SERVICES, *target.services(cfg)]
    service_names += [SECRET_SERVICE] if secrets or secure_names else []
    service_names += target.extra_services(cfg)
    # A supervised target's compose registers a run supervisor, which needs these.
    service_names += list(SUPERVISOR_SERVICES) if target.supervised else []
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
    extras = target.before_identity(cfg, deployment, labels, after_apis, identity_args)
    env_secrets = _env_secrets(cfg, deployment, labels, secure_names, after_apis)
    identity_opts = after_apis
    if env_secrets is not None:
        secrets = sorted({*secrets, *env_secrets.secret_names})
        # The grants name the secrets, which must exist first.
        identity_opts = pulumi.ResourceOptions(depends_on=[services, env_secrets])
    if secrets:
        # Your code's secret_env, read on the node with this account: those secrets only.
        identity_args["secrets"] = secrets
    identity = TrainingIdentity(f"{deployment}-identity", identity_args, opts=identity_opts)
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
    if target.own_network:
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
    code_args: pulumi.Output[list[str]] | None = None
    if cfg.trainer.user_code is not None:
        # A `secure:` value reaches the node as its Secret Manager version's name
        # (`--secret-env`), never as a value: the command line is in every process listing,
        # the launch's log and, at Google, the template's metadata, pod spec or job body.
        versions = env_secrets.versions if env_secrets is not None else {}
        code_args = pulumi.Output.all(
            buckets.checkpoint_url, buckets.data_url, pulumi.Output.all(**versions)
        ).apply(lambda got: user_code_node_args(cfg, deployment, got[0], got[1], got[2]))
        outputs[OUTPUT_NODE_ARGS] = code_args
    # The job, slice or nodes read the staging and checkpoint buckets as the training account
    # from their first minute: they wait for every grant of that account (and `pulumi
    # destroy` stops them before the grants go).
    after_grants = pulumi.ResourceOptions(depends_on=[services, *identity.grants])
    ctx = ComposeContext(
        cfg=cfg,
        deployment=deployment,
        labels=labels,
        package=package,
        buckets=buckets,
        identity=identity,
        network=network,
        after_grants=after_grants,
        node_args=code_args,
        extras=extras,
        secret_env_names=tuple(sorted(secret_env_names(cfg.secrets))),
    )
    target_outputs, scope = target.compose(ctx)
    outputs.update(target_outputs)
    outputs.update(_monitoring(cfg, deployment, labels, scope, after_apis))
    return outputs


def package_args(
    cfg: StackConfig, buckets: TrainingBuckets, labels: Mapping[str, str]
) -> TrainerPackageArgs:
    """The trainer package: the bundled trainers, or your code's folder beside the node
    launcher with its requirements."""
    args: TrainerPackageArgs = {"staging_bucket": buckets.staging_bucket, "labels": dict(labels)}
    code = UserCode.of(cfg.trainer)
    if code is not None and code.source is not None:
        base_dir = current_place().base_dir
        folder = code.source_folder(base_dir)
        assert folder is not None
        args["user_source"] = str(folder)
        args["requirements"] = code.requirement_lines(base_dir)
    else:
        args["requirements"] = package_requirements(cfg)
    return args


def user_code_node_args(
    cfg: StackConfig,
    deployment: str,
    checkpoint_url: str,
    data_url: str,
    versions: Mapping[str, str] | None = None,
) -> list[str]:
    """`python -m trainstack.trainers.node` arguments that run your code on the stack's target, with the
    run contract's folders in the stack's buckets: the one command line each target's launch
    runs once per machine after installing the package (`trainstack.trainers.common.user_code`).
    `versions` names the Secret Manager version of each `secure:` trainer.env value
    (`EnvSecrets.versions`): it is passed as `--secret-env=NAME=<version>` where the value's
    `--env=NAME=...` would be, so the value itself is in no argument."""
    code = UserCode.of(cfg.trainer)
    assert code is not None
    versions = dict(versions or {})
    if versions:
        env = {**(code.env or {}), **versions}  # the names stand in for the values here
        code = code.model_copy(update={"env": env})
    run = run_name(cfg, deployment)
    contract = run_contract(checkpoint_url, data_url, run, cfg.trainer.checkpoint_dir)
    target = target_of(cfg)
    args = code.node_args(target.default_launcher, target.run_contract(cfg, contract))
    end = args.index("--")
    return [_as_secret_env(arg, versions) if i < end else arg for i, arg in enumerate(args)]


def _as_secret_env(arg: str, versions: Mapping[str, str]) -> str:
    name, sep, value = arg.removeprefix("--env=").partition("=")
    if arg.startswith("--env=") and sep and versions.get(name) == value:
        return f"--secret-env={name}={value}"
    return arg


def _env_secrets(
    cfg: StackConfig,
    deployment: str,
    labels: Mapping[str, str],
    names: list[str],
    opts: pulumi.ResourceOptions,
) -> EnvSecrets | None:
    """The Secret Manager secrets holding the `secure:` trainer.env values (`names`), None
    without any. The values are what the engine decrypted (`[secret]` offline)."""
    if not names:
        return None
    assert cfg.project is not None
    env = cfg.trainer.env or {}
    return EnvSecrets(
        f"{deployment}-env-secrets",
        {
            "project": cfg.project,
            "deployment_name": deployment,
            "values": {name: pulumi.Output.secret(env[name]) for name in names},
            "labels": dict(labels),
        },
        opts=opts,
    )


def package_requirements(cfg: StackConfig) -> list[str]:
    """What the trainer package must add to the image it is installed on
    (`Target.package_requirements`: on Vertex, what the torch trainer imports that a CUDA
    image lacks)."""
    return target_of(cfg).package_requirements(cfg)


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
    deployment = pulumi.get_stack()
    # The name labels every resource: refused here as itself, not as a `labels.stack` value.
    problem = stack_name_problem(deployment, "stack name")
    if problem is not None:
        raise ConfigError([problem])
    return compose(cfg, deployment)

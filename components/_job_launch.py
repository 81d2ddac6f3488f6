"""What a `KubernetesTrainingJob`'s pods launch, from its arguments alone: the container's
args and the run's record prefix, which the run supervisor registered before the Job's GPU
nodes needs (`trainstack.infra.targets.gpu_cluster`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import pulumi

from trainstack.components._node_args import keyed_node_args, validate_node_args
from trainstack.components._pod_setup import POD_PYTHON
from trainstack.components.gpu_startup import node_argv as launcher_argv
from trainstack.components.gpu_startup import pod_run_env, with_checkpoint_dir
from trainstack.trainers.common.contract import TORCH_MODULE
from trainstack.trainers.common.run_records import RUN_RECORD_ENV

DEFAULT_MODULE: Final = TORCH_MODULE


def node_argv(
    module: str | None, trainer_args: Sequence[str], node_args: Sequence[str] | None = None
) -> list[str]:
    """The container's args: the node launcher running `module` with its flags, or your
    code's `node_args` (the pod script installs the package first, then execs these)."""
    return [POD_PYTHON, *launcher_argv(module, trainer_args, node_args)]


def job_launch(
    args: Mapping[str, Any], package_uri: str, checkpoint_url: str | None, node_args: Any
) -> tuple[list[str], dict[str, str]]:
    """(The container's args, its run-record environment `pod_run_env`) of a Job of `args`."""
    if node_args is not None:
        validate_node_args(node_args)
        argv = node_argv(None, [], node_args)
        # The run's key sees secret --env values by name only (`keyed_node_args`).
        keyed = node_argv(None, [], keyed_node_args(node_args, args.get("secret_env_names") or ()))
    else:
        flags = with_checkpoint_dir(args.get("trainer_args", []), checkpoint_url)
        argv = keyed = node_argv(args.get("trainer_module", DEFAULT_MODULE), flags)
    if args.get("run_records") and checkpoint_url:
        return argv, pod_run_env(checkpoint_url, package_uri, keyed, args)
    return argv, {}


def job_run_record(args: Mapping[str, Any]) -> pulumi.Output[str]:
    """The run's record prefix the pods of a Job of `args` (`KubernetesTrainingJobArgs`) get
    ("" without one), before it is registered."""
    launch = (args["package_uri"], args.get("checkpoint_url"), args.get("node_args"))
    return pulumi.Output.all(*launch).apply(
        lambda v: job_launch(args, *v)[1].get(RUN_RECORD_ENV, "")
    )

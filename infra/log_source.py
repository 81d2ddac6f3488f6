"""Where a stack's logs are: its target's log file, or the Cloud Logging query its target
gives (`Target.log_filter`) in the stack's project, joined (without `--worker`) by its run
supervisor's entries where it has one. See `trainstack.infra.logs` for reading."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.components.naming import gcp_name
from trainstack.infra.logs import CloudLogs, FileLogs, any_of, supervisor_query
from trainstack.infra.outputs import OUTPUT_SUPERVISOR_EVENTS
from trainstack.infra.stack_outputs import read_outputs
from trainstack.infra.targets import CloudTarget, StandaloneTarget, target_of

if TYPE_CHECKING:
    from trainstack.infra.config import StackConfig


def cloud_filter(cfg: StackConfig, stack: str, outputs: dict[str, Any], worker: int | None) -> str:
    """The Logging query of the stack's trainer entries (one machine's with `worker`)."""
    target = target_of(cfg)
    assert isinstance(target, CloudTarget)
    return target.log_filter(cfg, stack, outputs, worker)


def supervisor_function(stack: str) -> str:
    """The name of the stack's supervisor function: `RunSupervisor` names it
    `gcp_name(deployment, "supervisor")` (components/run_supervisor.py), and the deployment
    is the stack (`trainstack.infra.compose.main_program`)."""
    return gcp_name(stack, "supervisor")


def stack_filter(cfg: StackConfig, stack: str, outputs: dict[str, Any], worker: int | None) -> str:
    """`cloud_filter`, or with no `worker` on a stack with a supervisor (its
    `supervisor_events_uri` output), its entries or the supervisor's."""
    trainers = cloud_filter(cfg, stack, outputs, worker)
    if worker is not None or not outputs.get(OUTPUT_SUPERVISOR_EVENTS):
        return trainers
    return any_of(trainers, supervisor_query(supervisor_function(stack)))


def log_source(
    cfg: StackConfig,
    stack: str,
    outputs_file: Path | None,
    worker: int | None,
) -> CloudLogs | FileLogs:
    """Where the stack's logs are; cloud targets read the stack's outputs."""
    target = target_of(cfg)
    if isinstance(target, StandaloneTarget):
        return FileLogs(target.log_file(cfg, stack, outputs_file, worker), worker)
    assert cfg.project is not None  # validated for cloud targets
    outputs = read_outputs(stack, outputs_file)
    return CloudLogs(cfg.project, stack_filter(cfg, stack, outputs, worker))

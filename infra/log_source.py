"""Where a stack's logs are: its target's log file, or the Cloud Logging query its target
gives (`Target.log_filter`) in the stack's project. See `trainstack.infra.logs` for reading."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.infra.logs import CloudLogs, FileLogs
from trainstack.infra.stack_outputs import read_outputs
from trainstack.infra.targets import CloudTarget, StandaloneTarget, target_of

if TYPE_CHECKING:
    from trainstack.infra.config import StackConfig


def cloud_filter(cfg: StackConfig, stack: str, outputs: dict[str, Any], worker: int | None) -> str:
    """The Logging query of the stack's trainer entries (one machine's with `worker`)."""
    target = target_of(cfg)
    assert isinstance(target, CloudTarget)
    return target.log_filter(cfg, stack, outputs, worker)


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
    return CloudLogs(cfg.project, cloud_filter(cfg, stack, outputs, worker))

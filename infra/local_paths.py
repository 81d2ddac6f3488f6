"""Where a stack's run lives on this machine: one rule for `trainstack local-run`,
`pulumi up -s local` (`trainstack.components.local_training_job`), `trainstack status` and
`trainstack logs`, so each finds and resumes what the others wrote.

- run name: `trainer.run_name` when the stack sets it, else the stack's name (as on the
  cloud, where it names the run's output folder);
- root: the one the stack's target names (`Target.local_run_root`: `local.root`), relative to
  the project (beside Pulumi.yaml), else `.trainstack/local/<stack>`;
- checkpoints: `trainer.checkpoint_dir` when set, else `<root>/checkpoints/<run name>`;
- log: `<root>/logs/<run name>.jsonl` (stderr beside it, `.stderr.log`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.infra.mocks import REPO_ROOT

if TYPE_CHECKING:
    from trainstack.infra.config import StackConfig


def run_name(cfg: StackConfig, stack: str) -> str:
    """The run's name: `trainer.run_name` when set in the stack, else the stack's name."""
    return cfg.trainer.run_name if "run_name" in cfg.trainer.model_fields_set else stack


def local_root(cfg: StackConfig, stack: str, given: str | None) -> Path:
    """The folder that holds the run's checkpoints, data, outputs and logs: `given` (the
    target's `local_run_root`), else `.trainstack/local/<stack>`."""
    root = Path(given) if given is not None else Path(".trainstack/local") / stack
    return root if root.is_absolute() else REPO_ROOT / root


def local_checkpoint_dir(
    cfg: StackConfig, stack: str, outputs: dict[str, Any] | None, given: str | None
) -> str:
    """The run's checkpoint folder: the deployed stack's `local_checkpoint_dir` output when
    known, else where `local-run` puts it."""
    if outputs and isinstance(outputs.get("local_checkpoint_dir"), str):
        return str(outputs["local_checkpoint_dir"])
    chosen = cfg.trainer.checkpoint_dir
    return chosen or str(local_root(cfg, stack, given) / "checkpoints" / run_name(cfg, stack))


def local_log_path(
    cfg: StackConfig, stack: str, outputs: dict[str, Any] | None, given: str | None
) -> Path:
    """The run's log: the deployed stack's `local_log_path` output when known, else where
    `local-run` writes it."""
    if outputs and isinstance(outputs.get("local_log_path"), str):
        return Path(outputs["local_log_path"])
    return local_root(cfg, stack, given) / "logs" / f"{run_name(cfg, stack)}.jsonl"

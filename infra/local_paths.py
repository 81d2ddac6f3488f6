"""Where a stack's run lives on this machine: one rule for `trainstack local-run`,
`pulumi up -s local` (`trainstack.components.local_training_job`), `trainstack status` and
`trainstack logs`, so each finds and resumes what the others wrote.

- run name: `trainer.run_name` when the stack sets it, else the stack's name (as on the
  cloud, where it names the run's output folder);
- root: the one the stack's target names (`Target.local_run_root`: `local.root`; a relative
  one resolved against the stack's base folder), else the run's own folder
  `<project>/.trainstack/local/<key>`, key the stack's name or `example-NAME` for a bundled
  one (`trainstack.infra.project`), so two projects, or your stack and a bundled one of the
  same name, never share checkpoints or a log;
- checkpoints: `trainer.checkpoint_dir` when set, else `<root>/checkpoints/<run name>`;
- log: `<root>/logs/<run name>.jsonl` (stderr beside it, `.stderr.log`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.infra.project import StackPlace, current_place

if TYPE_CHECKING:
    from trainstack.infra.config import StackConfig


def run_name(cfg: StackConfig, stack: str) -> str:
    """The run's name: `trainer.run_name` when set in the stack, else the stack's name."""
    return cfg.trainer.run_name if "run_name" in cfg.trainer.model_fields_set else stack


def local_root(stack: str, given: str | None, place: StackPlace | None = None) -> Path:
    """The folder that holds the run's checkpoints, data, outputs and logs (absolute):
    `given` (the target's `local_run_root`) against the stack's base folder, else the run's
    own folder."""
    place = place or current_place()
    if given is not None:
        return place.resolve(given).resolve()
    return place.local_dir(stack)


def local_root_arg(stack: str, given: str | None, place: StackPlace | None = None) -> str:
    """`local_root` as the stack program passes it: relative to the base folder when inside
    it, so plans of two checkouts of one project compare equal."""
    place = place or current_place()
    root = local_root(stack, given, place)
    base = place.base_dir.resolve()
    return root.relative_to(base).as_posix() if root.is_relative_to(base) else str(root)


def local_checkpoint_dir(
    cfg: StackConfig, stack: str, outputs: dict[str, Any] | None, given: str | None
) -> str:
    """The run's checkpoint folder: the deployed stack's `local_checkpoint_dir` output when
    known, else where `local-run` puts it."""
    if outputs and isinstance(outputs.get("local_checkpoint_dir"), str):
        return str(outputs["local_checkpoint_dir"])
    chosen = cfg.trainer.checkpoint_dir
    return chosen or str(local_root(stack, given) / "checkpoints" / run_name(cfg, stack))


def local_log_path(
    cfg: StackConfig, stack: str, outputs: dict[str, Any] | None, given: str | None
) -> Path:
    """The run's log: the deployed stack's `local_log_path` output when known, else where
    `local-run` writes it."""
    if outputs and isinstance(outputs.get("local_log_path"), str):
        return Path(outputs["local_log_path"])
    return local_root(stack, given) / "logs" / f"{run_name(cfg, stack)}.jsonl"

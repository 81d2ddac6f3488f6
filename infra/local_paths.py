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
  a relative `checkpoint_dir`, `data_path`, `model_dir` or `tensorboard_dir` is the stack's
  too (`localized`): against its base folder, never the folder a command or process runs in;
- log: `<root>/logs/<run name>.jsonl` (stderr beside it, `.stderr.log`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trainstack.infra.project import LOCAL_PATH_KEYS, StackPlace, current_place, with_local_paths

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView

Stack = TypeVar("Stack", bound="StackView")


def run_name(cfg: StackView, stack: str) -> str:
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


def localized(cfg: Stack, stack: str, given: str | None, place: StackPlace | None = None) -> Stack:
    """`cfg` of a stack that runs on this machine as its run uses it: the trainer's relative
    folders (`LOCAL_PATH_KEYS`) absolute against the place's base folder; InstallWriteError
    naming the key when the run (its root: `given`, the target's `local_run_root`, else its
    own folder) would write inside the installed trainstack."""
    place = place or current_place()
    trainer = with_local_paths(cfg.trainer, place.base_dir)
    for key in LOCAL_PATH_KEYS:
        value = getattr(trainer, key)
        if key != "data_path" and value and Path(value).is_absolute():
            place.writable(Path(value), f"trainer.{key}")
    place.writable(local_root(stack, given, place), "local.root")
    return cfg.model_copy(update={"trainer": trainer})


def local_root_arg(stack: str, given: str | None, place: StackPlace | None = None) -> str:
    """`local_root` as the stack program passes it: relative to the base folder when inside
    it, so plans of two checkouts of one project compare equal."""
    place = place or current_place()
    root = local_root(stack, given, place)
    base = place.base_dir.resolve()
    return root.relative_to(base).as_posix() if root.is_relative_to(base) else str(root)


def local_checkpoint_dir(
    cfg: StackView, stack: str, outputs: dict[str, Any] | None, given: str | None
) -> str:
    """The run's checkpoint folder: the deployed stack's `local_checkpoint_dir` output when
    known, else where `local-run` puts it."""
    if outputs and isinstance(outputs.get("local_checkpoint_dir"), str):
        return str(outputs["local_checkpoint_dir"])
    chosen = with_local_paths(cfg.trainer, current_place().base_dir).checkpoint_dir
    return chosen or str(local_root(stack, given) / "checkpoints" / run_name(cfg, stack))


def local_log_path(
    cfg: StackView, stack: str, outputs: dict[str, Any] | None, given: str | None
) -> Path:
    """The run's log: the deployed stack's `local_log_path` output when known, else where
    `local-run` writes it."""
    if outputs and isinstance(outputs.get("local_log_path"), str):
        return Path(outputs["local_log_path"])
    return local_root(stack, given) / "logs" / f"{run_name(cfg, stack)}.jsonl"

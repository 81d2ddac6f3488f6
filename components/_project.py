"""Which Pulumi project a folder belongs to: the primitive the components that build files
in the project (`TrainerPackage`, `RunSupervisor`) and `trainstack.infra.project` (stacks,
places, the CLI's view) share, so the components never import `infra`.

    project = find_project()            # Project(root=..., stacks_dir=..., state_dir=...)
    project.local_dir("local")          # <root>/.trainstack/local/local
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

import yaml
from pydantic import BaseModel

from trainstack.components._strict_yaml import StrictYamlError, describe, load

PROJECT_FILE: Final = "Pulumi.yaml"
STATE_DIR_NAME: Final = ".trainstack"


@dataclass(frozen=True)
class Project:
    """A Pulumi project folder: its stacks and the state trainstack keeps for it."""

    root: Path
    """The folder holding Pulumi.yaml (or the current folder when none is found)."""
    stacks_dir: Path
    """`root / stackConfigDir` when Pulumi.yaml sets it, else `root`."""

    @property
    def state_dir(self) -> Path:
        """`<root>/.trainstack`: local runs and build folders."""
        return self.root / STATE_DIR_NAME

    @property
    def build_dir(self) -> Path:
        """Where packages (trainer sdist, supervisor zip) are built."""
        return self.state_dir / "build"

    def local_dir(self, key: str) -> Path:
        """The folder of local run `key` (`StackPlace.key`)."""
        return self.state_dir / "local" / key


class ProjectFileError(ValueError):
    """A Pulumi.yaml that cannot be read as a project file."""


def find_project(start: Path | None = None) -> Project:
    """The nearest project at or above `start` (default: the current folder).

    As the Pulumi CLI finds it: the closest folder upward holding the project file, stack
    files in `<that folder>/<stackConfigDir>` (pulumi/pulumi at 1b59498,
    sdk/go/common/workspace/paths.go:87-92 `ProjectStackPath`, :103-128
    `DetectProjectPathFrom`). Pulumi also takes Pulumi.yml and Pulumi.json (:212-221,
    sdk/go/common/encoding/marshal.go:38-43); trainstack reads Pulumi.yaml projects only."""
    here = (start or Path.cwd()).resolve()
    path = project_file_at_or_above(here)
    if path is not None:
        return Project(root=path.parent, stacks_dir=path.parent / _stack_config_dir(path))
    return Project(root=here, stacks_dir=here)


def project_file_at_or_above(folder: Path) -> Path | None:
    """The closest `Pulumi.yaml` in `folder` (absolute) or a folder above it, unread."""
    return next(
        (f / PROJECT_FILE for f in (folder, *folder.parents) if (f / PROJECT_FILE).is_file()),
        None,
    )


def _stack_config_dir(path: Path) -> str:
    try:
        document = load(path.read_text(encoding="utf-8")) or {}
    except StrictYamlError as exc:
        raise ProjectFileError(f"{path}: {describe(exc)}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or getattr(exc, "strerror", None) or str(exc)
        raise ProjectFileError(
            f"{path}: not a readable Pulumi project file ({' '.join(str(reason).split())}"
            f"{where}); valid: a YAML mapping with `name` and `runtime`"
        ) from None
    value = document.get("stackConfigDir", ".") if isinstance(document, dict) else "."
    if not isinstance(value, str) or not value:
        raise ProjectFileError(
            f"{path}: stackConfigDir: {value!r} is not a folder; valid: a path relative to "
            "Pulumi.yaml"
        )
    return value


BUNDLED_ROOT: Final = Path(__file__).resolve().parents[1]
"""Holds the bundled `stacks/` and `examples/`: the repository root in a checkout (this file
is `components/_project.py`, reached through the `trainstack/components` link),
`site-packages/trainstack` in an installed wheel (which ships them there as package data)."""


def installed() -> bool:
    """Whether `BUNDLED_ROOT` is an install (site-packages) rather than a checkout: the
    repository root holds Pulumi.yaml (the project whose stacks the bundled ones are), the
    wheel ships none at `trainstack/` (only inside the example program's own folder)."""
    return not (BUNDLED_ROOT / PROJECT_FILE).is_file()


def in_install(path: Path) -> bool:
    """Whether `path` lies inside the installed trainstack, where nothing is ever written."""
    return installed() and path.resolve().is_relative_to(BUNDLED_ROOT)


class InstallWriteError(ValueError):
    """A write that would land inside the installed trainstack."""


def writable(path: Path, key: str) -> Path:
    """`path`, which a run or build writes to; InstallWriteError naming `key` when it lies in
    the installed trainstack (a relative folder in a bundled stack file)."""
    if in_install(path):
        raise InstallWriteError(
            f"{key}: {path} is inside the installed trainstack ({BUNDLED_ROOT}), which is "
            "never written to; valid: an absolute folder, or run a copy of the stack file "
            "from your project"
        )
    return path


_active: Project | None = None


def activate(project: Project | None) -> None:
    """Make `project` the one `current_project()` gives (None: the current folder's). The
    CLI's stack places set it (`trainstack.infra.project.set_place`), so a program run in
    its own folder still builds into the project of the command that planned it."""
    global _active
    _active = project


def current_project() -> Project:
    """The active project (`activate`), else the current folder's (`pulumi up`)."""
    return _active if _active is not None else find_project()


def current_build_dir() -> Path:
    """Where packages are built now: `<project>/.trainstack/build` of `current_project()`;
    InstallWriteError when that is inside the installed trainstack."""
    return writable(current_project().build_dir, "build_dir")


LOCAL_PATH_KEYS: Final = ("checkpoint_dir", "data_path", "model_dir", "tensorboard_dir")
"""The trainer keys (`trainstack.trainers.common.config.TrainConfig`) that name a folder on
this machine or a URL (`gs://...`)."""
_URL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


Trainer = TypeVar("Trainer", bound=BaseModel)


def with_local_paths(trainer: Trainer, base_dir: Path) -> Trainer:
    """`trainer` with each relative folder of `LOCAL_PATH_KEYS` (`~` expanded) made absolute
    against `base_dir`, the stack's base folder: processes run elsewhere (your code in its
    source folder), so a relative one would follow whichever folder opened it first. URLs
    (`gs://...`) and absolute paths stay as written."""
    update: dict[str, object] = {}
    for key in LOCAL_PATH_KEYS:
        value = getattr(trainer, key, None)
        if not isinstance(value, str) or not value or _URL.match(value):
            continue
        if not Path(value).is_absolute():
            update[key] = str((base_dir / Path(value).expanduser()).resolve())
    return trainer.model_copy(update=update) if update else trainer

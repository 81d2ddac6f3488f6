"""Which Pulumi project a folder belongs to: the primitive the components that build files
in the project (`TrainerPackage`, `TpuSupervisor`) and `trainstack.infra.project` (stacks,
places, the CLI's view) share, so the components never import `infra`.

    project = find_project()            # Project(root=..., stacks_dir=..., state_dir=...)
    project.local_dir("local")          # <root>/.trainstack/local/local
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

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
    for folder in (here, *here.parents):
        path = folder / PROJECT_FILE
        if path.is_file():
            return Project(root=folder, stacks_dir=folder / _stack_config_dir(path))
    return Project(root=here, stacks_dir=here)


def _stack_config_dir(path: Path) -> str:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
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

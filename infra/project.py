"""Where a stack's files are read from and where its runs write: your project, never the install.

- `find_project()`: the nearest folder upward from the current one holding `Pulumi.yaml` is
  the project; its stacks are in its `stackConfigDir` (else beside Pulumi.yaml) and its run
  state in `<root>/.trainstack/` (`local/<key>/` per local run, `build/` for packages).
  Without a Pulumi.yaml anywhere up, the current folder is all three.
- `BUNDLED_ROOT`: the folder holding the bundled `stacks/` and `examples/` (the repository,
  or `trainstack/` in site-packages, where the wheel ships them as package data). A bundled
  stack is named `example:NAME` and only ever read from there.
- `StackPlace`: for one stack, the folder its relative paths (`trainer.source`,
  `trainer.requirements`, `local.root`) resolve against and the project its runs write into.
  The CLI sets it for one command (`set_place` in a `place_scope`; `placed` for code); the
  Pulumi program and a component built in your own program see the default, the project of
  the current folder, which under `pulumi up` is the Pulumi project folder: the engine runs
  the program in its `main` folder, the project folder when `main` is unset (pulumi/pulumi
  at 1b59498, pkg/engine/project.go:45-70, as Pulumi.yaml's comment cites).

    project = find_project()            # Project(root=..., stacks_dir=..., state_dir=...)
    project.local_dir("local")          # <root>/.trainstack/local/local
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

PROJECT_FILE: Final = "Pulumi.yaml"
STATE_DIR_NAME: Final = ".trainstack"
EXAMPLE_PREFIX: Final = "example:"
BUNDLED_ROOT: Final = Path(__file__).resolve().parents[1]
"""Holds the bundled `stacks/` and `examples/`: the repository root in a checkout (this file
is `infra/project.py`, reached through the `trainstack/infra` link), `site-packages/trainstack`
in an installed wheel (which ships them there as package data)."""


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


def bundled_stacks_dir() -> Path:
    return BUNDLED_ROOT / "stacks"


@dataclass(frozen=True)
class StackPlace:
    """Where one stack's relative paths start and where its runs write."""

    base_dir: Path
    """Relative `trainer.source`, `trainer.requirements` and `local.root` resolve here."""
    project: Project
    """The project whose `.trainstack/` holds the stack's run state."""
    example: bool = False
    """A bundled stack (`--stack example:NAME`): its runs are keyed `example-NAME`."""

    def key(self, stack: str) -> str:
        """The name of the stack's local run folder (`Project.local_dir`)."""
        return f"example-{stack}" if self.example else stack

    def local_dir(self, stack: str) -> Path:
        return self.project.local_dir(self.key(stack))

    def resolve(self, path: str | Path) -> Path:
        """`path` (`~` expanded) against `base_dir` when relative."""
        return self.base_dir / Path(path).expanduser()


def project_place(start: Path | None = None) -> StackPlace:
    """A stack of the project at `start` (default: the current folder)."""
    project = find_project(start)
    return StackPlace(base_dir=project.root, project=project)


def example_place() -> StackPlace:
    """A bundled stack: paths from the bundled root, runs in the current folder's project."""
    return StackPlace(base_dir=BUNDLED_ROOT, project=find_project(), example=True)


def file_place(path: Path) -> StackPlace:
    """A stack file given by path: inside a project, that project's stack; outside any, its
    paths start at the file's folder and its runs go into the current folder's project."""
    folder = path.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / PROJECT_FILE).is_file():
            return project_place(candidate)
    return StackPlace(base_dir=folder, project=find_project())


_active: StackPlace | None = None


def current_place() -> StackPlace:
    """The place set by `placed`, else the current folder's project (`pulumi up`)."""
    return _active if _active is not None else project_place()


@contextmanager
def placed(place: StackPlace) -> Iterator[StackPlace]:
    """Make `place` the `current_place()` for the program and checks run inside.

    A plain module variable, not a ContextVar: the mocked program runs callbacks on the
    engine's worker threads, which a ContextVar set here would not reach."""
    with place_scope():
        set_place(place)
        yield place


def set_place(place: StackPlace) -> None:
    """Make `place` the `current_place()` until the enclosing `place_scope` ends."""
    global _active
    _active = place


@contextmanager
def place_scope() -> Iterator[None]:
    """Restores `current_place()` on exit, whatever `set_place` did inside (a CLI command
    sets it once it has read its stack file)."""
    global _active
    previous = _active
    try:
        yield
    finally:
        _active = previous

"""Where a stack's files are read from and where its runs write: your project, never the install.

- `find_project()` (in `trainstack.components._project`, which the components share): the
  nearest folder upward from the current one holding `Pulumi.yaml` is the project; its
  stacks are in its `stackConfigDir` (else beside Pulumi.yaml) and its run state in
  `<root>/.trainstack/` (`local/<key>/` per local run, `build/` for packages). Without
  a Pulumi.yaml anywhere up, the current folder is all three.
- `BUNDLED_ROOT`: the folder holding the bundled `stacks/` and `examples/` (the repository,
  or `trainstack/` in site-packages, where the wheel ships them as package data). A bundled
  stack is named `example:NAME` (`example:DIR/NAME` for `examples/DIR/Pulumi.NAME.yaml`)
  and only ever read from there; nothing is written inside an install (`installed`).
- `StackPlace`: for one stack, the folder its relative paths (`trainer.source`,
  `trainer.requirements`, `local.root`, the trainer's local folders) resolve against, the
  project its runs write into and its run folder's key. `--stack NAME` is the current
  folder's project's stack, `example:NAME` a bundled one, `--config-file` goes by where the
  file is (`file_place`). The CLI sets it for one command (`set_place` in a `place_scope`;
  `placed` for code); the Pulumi program and a component built in your own program see the
  default, the project of the current folder, which under `pulumi up` is the Pulumi project
  folder: the engine runs the program in its `main` folder, the project folder when `main`
  is unset (pulumi/pulumi at 1b59498, pkg/engine/project.go:45-70, as Pulumi.yaml's comment
  cites).

    project = find_project()            # Project(root=..., stacks_dir=..., state_dir=...)
    project.local_dir("local")          # <root>/.trainstack/local/local
    # acme/ holds Pulumi.yaml with `stackConfigDir: stacks`: this file is not one of its stacks
    file_place(Path("acme/trials/Pulumi.local.yaml")).key("local")   # "local-<8 hex>"
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trainstack.components._project import (
    BUNDLED_ROOT,
    LOCAL_PATH_KEYS,
    PROJECT_FILE,
    STATE_DIR_NAME,
    InstallWriteError,
    Project,
    ProjectFileError,
    activate,
    current_build_dir,
    find_project,
    in_install,
    installed,
    with_local_paths,
    writable,
)

__all__ = [
    "BUNDLED_ROOT",
    "EXAMPLE_PREFIX",
    "LOCAL_PATH_KEYS",
    "PROJECT_FILE",
    "STATE_DIR_NAME",
    "InstallWriteError",
    "Project",
    "ProjectFileError",
    "StackPlace",
    "bundled_stacks_dir",
    "current_build_dir",
    "current_place",
    "example_place",
    "file_place",
    "find_project",
    "in_install",
    "installed",
    "place_scope",
    "placed",
    "project_place",
    "set_place",
    "with_local_paths",
]

EXAMPLE_PREFIX: Final = "example:"


def bundled_stacks_dir() -> Path:
    return BUNDLED_ROOT / "stacks"


def example_files() -> dict[str, Path]:
    """The bundled stack files by example name: `NAME` for `stacks/Pulumi.NAME.yaml`,
    `DIR/NAME` for `examples/DIR/Pulumi.NAME.yaml` (your-own-code examples; a folder with
    its own Pulumi.yaml is a program, planned with `--program`, not a stack)."""
    found = {_stack_of(p): p for p in bundled_stacks_dir().glob("Pulumi.*.yaml")}
    for path in (BUNDLED_ROOT / "examples").glob("*/Pulumi.*.yaml"):
        if not (path.parent / PROJECT_FILE).is_file():
            found[f"{path.parent.name}/{_stack_of(path)}"] = path
    return dict(sorted(found.items()))


def _stack_of(path: Path) -> str:
    """The stack a file names: NAME of `Pulumi.NAME.yaml`, else the file's stem (as
    `trainstack.infra.plan.read_stack_file` names it)."""
    name = path.name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        return name.split(".", 1)[1].rsplit(".", 1)[0]
    return path.stem


@dataclass(frozen=True)
class StackPlace:
    """Where one stack's relative paths start and where its runs write."""

    base_dir: Path
    """Relative `trainer.source`, `trainer.requirements`, `local.root` and the trainer's
    local folders (`checkpoint_dir`, `data_path`, ...) resolve here."""
    project: Project
    """The project whose `.trainstack/` holds the stack's run state."""
    key_prefix: str = ""
    """Before the stack's name in its run folder's name: `example-` (and the example's
    folder) for a bundled stack."""
    key_suffix: str = ""
    """After it: `-<8 hex>` of the file's path for a stack file that is not its project's
    own, so it never shares a folder with the project's stack of that name."""

    def key(self, stack: str) -> str:
        """The name of the stack's local run folder (`Project.local_dir`)."""
        return f"{self.key_prefix}{stack}{self.key_suffix}"

    def local_dir(self, stack: str) -> Path:
        return self.project.local_dir(self.key(stack))

    def resolve(self, path: str | Path) -> Path:
        """`path` (`~` expanded) against `base_dir` when relative."""
        return self.base_dir / Path(path).expanduser()

    def writable(self, path: Path, key: str) -> Path:
        """`path`, which the run writes to (`trainstack.components._project.writable`)."""
        return writable(path, key)


def project_place(start: Path | None = None) -> StackPlace:
    """A stack of the project at `start` (default: the current folder)."""
    project = find_project(start)
    return StackPlace(base_dir=project.root, project=project)


def example_place(name: str) -> StackPlace:
    """The bundled stack `example:NAME` (`example_files`): paths from the bundled root, runs
    in the current folder's project as `example-NAME` (`/` as `-`)."""
    folder, _, _ = name.rpartition("/")
    prefix = f"example-{folder.replace('/', '-')}-" if folder else "example-"
    return StackPlace(base_dir=BUNDLED_ROOT, project=find_project(), key_prefix=prefix)


def file_place(path: Path) -> StackPlace:
    """The place of `--config-file PATH`, by where the file is:

    - its project's own stack file (`<stacks_dir>/Pulumi.NAME.yaml` of the project found
      from its folder, `find_project`): that project's stack, as `--stack NAME` there;
    - inside the bundled stacks or examples (`BUNDLED_ROOT`), or anywhere in an installed
      trainstack: that example (`example_place`), run in the current folder's project;
    - anything else: its paths from its project's root (its Pulumi.yaml's folder, else its
      own folder) and its runs in that project, keyed `NAME-<8 hex of sha256 of its
      resolved path>`, so the same file resumes its run from any folder and never shares
      one with the project's own stack NAME.
    """
    file = path.resolve()
    stack = _stack_of(file)
    project = find_project(file.parent)
    own = file == (project.stacks_dir / f"Pulumi.{stack}.yaml").resolve()
    if own and not in_install(project.root):
        return StackPlace(base_dir=project.root, project=project)
    if file.is_relative_to(BUNDLED_ROOT):
        folders = file.relative_to(BUNDLED_ROOT).parts[:-1]
        bundled = bool(folders) and folders[0] in ("stacks", "examples")
        if bundled or in_install(file):
            return example_place("/".join([*folders[bundled:], stack]))
    digest = hashlib.sha256(str(file).encode()).hexdigest()[:8]
    return StackPlace(base_dir=project.root, project=project, key_suffix=f"-{digest}")


def program_place(root: Path) -> StackPlace:
    """The place of your own program in `root` (`--program DIR`): its project, unless that
    is inside the installed trainstack (the bundled example program), whose builds go to the
    current folder's project instead."""
    place = project_place(root)
    if in_install(place.project.root):
        return StackPlace(base_dir=place.base_dir, project=find_project())
    return place


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
    activate(place.project)


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
        activate(previous.project if previous is not None else None)

"""A second folder named `trainstack` on `sys.path` is reported instead of merging silently.

`trainstack` is a namespace package (pyproject.toml: the trainer packages that go to machines
install `trainstack.trainers` beside it without owning a shared file), and Python merges every
folder named `trainstack` it finds on `sys.path` into a namespace package, recomputing the
merge whenever `sys.path` changes (PEP 420, "Dynamic path computation"). The working directory
comes first on `sys.path` for `python -c`, `-m` and a script's folder, and a Pulumi program's
folder comes first when the language host runs it, so a `trainstack/` folder there (a clone of
trainstack, a project's own package of that name) would be imported as part of trainstack:
its `components/` in place of trainstack's, or its modules as `trainstack.*`.

`trainstack.components` and `trainstack.infra` call `check` when they are imported, and
`trainstack plan --program` checks the program's folder before running it
(`trainstack.infra.program_run`). This module sits in the namespace itself, not in one of its
packages, so a folder that shadows `components/` cannot hide it from `trainstack.infra`.
"""

from __future__ import annotations

import importlib.machinery
from collections.abc import Iterable
from pathlib import Path

TRAINER_ONLY = frozenset({"trainers", "user_source", "__pycache__"})
"""What a trainer package's own `trainstack/` folder holds (`trainstack.trainers` and your
code's `trainstack.user_source`, trainstack.components.trainer_package): a folder holding no
more than these is that package installed beside trainstack, not a second trainstack."""


def importable(folder: Path) -> list[str]:
    """The names `import trainstack.<name>` could find in `folder` (a package, a namespace
    folder or a module file), those of a trainer package left out; all of them, and
    `__init__`, for a folder holding `__init__.py` (a regular package replaces trainstack)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    suffixes = tuple(importlib.machinery.all_suffixes())
    names = []
    for entry in entries:
        stem = entry.name.split(".", 1)[0]
        if entry.is_dir() and entry.name.isidentifier():
            names.append(entry.name)
        elif entry.is_file() and entry.name.endswith(suffixes) and stem.isidentifier():
            names.append(stem)
    if "__init__" in names:
        return names
    return [name for name in names if name not in TRAINER_ONLY]


def foreign(path: Iterable[str], own: Path) -> list[Path]:
    """The folders of `path` (a namespace package's `__path__`) other than `own` (where the
    calling package was imported from) that hold modules trainstack would import."""
    seen = {own.resolve()}
    found: list[Path] = []
    for entry in path:
        folder = Path(entry)
        if not folder.is_dir() or folder.resolve() in seen:
            continue  # the editable install's finder entry is a name, not a folder
        seen.add(folder.resolve())
        if importable(folder):
            found.append(folder)
    return found


def problem(other: Path, own: Path) -> str:
    """The one line naming the second folder."""
    return (
        f"{other} is a second folder named trainstack on Python's import path (the working "
        "directory, PYTHONPATH or a program's folder), and Python merges it into the "
        f"trainstack package imported from {own} (a namespace package), so its modules would "
        "be imported as trainstack's; valid: rename or move that folder, or run from another "
        "folder"
    )


def check(own: Path) -> None:
    """ImportError naming the first folder that merges into trainstack beside `own`."""
    import trainstack

    others = foreign(trainstack.__path__, own)
    if others:
        raise ImportError(problem(others[0], own))

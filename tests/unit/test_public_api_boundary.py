"""The config-driven program (`infra/`, `__main__.py`) is built on the components' public API.

Whatever a program of your own could not import, the stack program must not use either,
or the two drift apart: a private name of `trainstack.components` (a module or package
part starting with `_`, or a `_name` from a public module) reached from the program is a
failure naming file:line, unless `ALLOWED` lists it with the reason it is not part of
composing components. Imports count in every scope (inside functions, under
`if TYPE_CHECKING:`), and so do strings naming a private module (what `importlib` loads by
name) and `_name` attributes of a name imported from it; docstrings do not.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from tests import REPO_ROOT

PACKAGE: Final = "trainstack.components"
PRIVATE_MODULE_TEXT: Final = re.compile(r"trainstack\.components(\.\w+)*\._\w+(\.\w+)*")

ALLOWED: Final = frozenset(
    {
        # Google API client plumbing (discovery client, retries, error classes) that status
        # and logs share with the dynamic providers: reading the cloud, not composing it.
        "trainstack.components._google_api",
        # The Pulumi project machinery the components need too (find_project, the build
        # folder); the CLI's own view of projects (`infra/project.py`) builds on it.
        "trainstack.components._project",
        # The reader of stack and project files (no anchors, aliases or repeated keys),
        # which `_project` reads Pulumi.yaml with.
        "trainstack.components._strict_yaml",
        # `status --job` reads a Vertex AI job's state as the job's dynamic provider does.
        "trainstack.components._vertex_provider.job_status",
    }
)
"""Private imports the program may make: a module (any of its names) or `module.name`."""

PROVIDERS_BY_NAME: Final = frozenset(
    {
        # A RunResource names its dynamic provider (module, class) so that plan-diff asks the
        # provider's own diff: a resource's implementation, not an API to compose with.
        "trainstack.components._local_provider",
        "trainstack.components._tpu_queued_provider",
        "trainstack.components._vertex_provider",
    }
)
"""Private modules the program may name in a string (loaded by name, never imported)."""


def program_files() -> list[Path]:
    return [REPO_ROOT / "__main__.py", *sorted((REPO_ROOT / "infra").rglob("*.py"))]


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[2:])


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of every docstring node: a string statement (module, class, function and
    attribute docstrings alike)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def private_uses(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, what, key) for each private use: `key` is what `ALLOWED` would name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bound: set[str] = set()  # local names bound to a components module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(f"{PACKAGE}."):
                    if alias.asname:  # bare `import a.b` binds `trainstack`, not the module
                        bound.add(alias.asname)
                    if _private(alias.name):
                        yield node.lineno, f"import {alias.name}", alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module != PACKAGE and not module.startswith(f"{PACKAGE}."):
                continue
            for alias in node.names:
                what = f"from {module} import {alias.name}"
                if _private(module):
                    yield node.lineno, what, f"{module}.{alias.name}"
                elif alias.name.startswith("_"):
                    # A private submodule (`from trainstack.components import _x`) or name.
                    yield node.lineno, what, f"{module}.{alias.name}"
                else:
                    bound.add(alias.asname or alias.name)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and PRIVATE_MODULE_TEXT.fullmatch(node.value)
        ):
            yield node.lineno, f"the string {node.value!r}", f"by name: {node.value}"
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            yield node.lineno, f"{node.value.id}.{node.attr}", f"{node.value.id}.{node.attr}"


def _allowed(key: str) -> bool:
    if key.startswith("by name: "):
        return key.removeprefix("by name: ") in PROVIDERS_BY_NAME
    module = key.rpartition(".")[0]
    return key in ALLOWED or module in ALLOWED


def test_the_program_uses_no_private_component_name_but_the_allowed() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {what}"
        for path in program_files()
        for line, what, key in private_uses(path)
        if not _allowed(key)
    ]
    assert sorted(found) == [], "\n".join(["private names the program uses:", *sorted(found)])


def test_every_allowed_entry_is_still_used() -> None:
    """An entry nothing needs any more is removed, so the list stays as short as it can."""
    keys = {key for path in program_files() for _, _, key in private_uses(path)}
    unused = [
        entry
        for entry in ALLOWED
        if entry not in keys and not any(k.rpartition(".")[0] == entry for k in keys)
    ]
    unused += [m for m in PROVIDERS_BY_NAME if f"by name: {m}" not in keys]
    assert unused == []


def test_the_scan_finds_each_kind_of_private_use(tmp_path: Path) -> None:
    source = tmp_path / "program.py"
    source.write_text(
        '"""Docstring naming trainstack.components._naming is not a use."""\n'
        "from typing import TYPE_CHECKING\n"
        "from trainstack.components import _strict_yaml as strict_yaml, catalog\n"
        "from trainstack.components.a100_cluster._common import instance_name_pattern\n"
        "from trainstack.components.catalog.problems import quote as _q\n"
        "from trainstack.components.facts import _hidden\n"
        "import trainstack.components._naming\n"
        "if TYPE_CHECKING:\n"
        "    from trainstack.components._args import ArgsError\n"
        "def f():\n"
        "    from trainstack.components._pod_setup import pod_command\n"
        "    return catalog._private, ('trainstack.components._local_provider', 'P')\n"
    )
    assert sorted((line, what) for line, what, _ in private_uses(source)) == [
        (3, "from trainstack.components import _strict_yaml"),
        (4, "from trainstack.components.a100_cluster._common import instance_name_pattern"),
        (6, "from trainstack.components.facts import _hidden"),
        (7, "import trainstack.components._naming"),
        (9, "from trainstack.components._args import ArgsError"),
        (11, "from trainstack.components._pod_setup import pod_command"),
        (12, "catalog._private"),
        (12, "the string 'trainstack.components._local_provider'"),
    ]

"""The shape of the `trainers` package: a framework-free common layer, no import cycles,
modules under 600 lines."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "trainers"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = ("trainstack", *path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
COMMON = sorted(name for name in MODULES if name.startswith("trainstack.trainers.common."))
# Modules the components, the CLI and the TensorFlow launcher import before any framework.
FRAMEWORK_FREE = [*COMMON, "trainstack.trainers.local", "trainstack.trainers.tf_multiworker.launch"]


def _imports(name: str) -> set[str]:
    """The `trainers` modules that `name` imports, at module level or inside a function."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name) for name in MODULES}


def test_common_modules_exist() -> None:
    # Guards the discovery itself: an empty list would make the next test pass vacuously.
    assert {
        "trainstack.trainers.common.checkpoint",
        "trainstack.trainers.common.cluster",
        "trainstack.trainers.common.contract",
        "trainstack.trainers.common.digest",
        "trainstack.trainers.common.exit_codes",
        "trainstack.trainers.common.metrics",
        "trainstack.trainers.common.records",
        "trainstack.trainers.common.signals",
        "trainstack.trainers.common.storage",
    } <= set(COMMON)


def test_common_imports_neither_torch_nor_tensorflow() -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {FRAMEWORK_FREE!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in ('torch', 'tensorflow', 'tf_keras', 'keras')"
        " if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


def test_common_depends_on_common_only() -> None:
    outside = {
        name: sorted(m for m in GRAPH[name] if not m.startswith("trainstack.trainers.common."))
        for name in COMMON
    }
    assert {name: deps for name, deps in outside.items() if deps} == {}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in sorted(GRAPH[name]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(GRAPH):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_trainer_imports_have_no_cycle() -> None:
    # Function-level imports count: a late import still ties the two modules together.
    assert _cycle() is None
    assert (
        "trainstack.trainers.tf_multiworker.train"
        in GRAPH["trainstack.trainers.tf_multiworker.launch"]
    )


def test_trainer_modules_stay_under_600_lines() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in lengths.items() if n >= MAX_LINES} == {}

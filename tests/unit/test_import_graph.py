"""The program's modules import one another without a circle, type-only imports included.

A circle hides in Python until someone imports the modules in the other order (or a type
checker, a docs generator or a fresh program imports one of them first): then a name is
read from a half-initialised module. Counting the imports inside functions and under
`if TYPE_CHECKING:` as edges keeps the layering of ARCHITECTURE.md ("Imports only point
down") checkable: what a target module needs lives below it, the stack config model is
assembled above the registry.

An edge goes from a module to the module its import names (`from trainstack.a import b`
names module `a.b` when `b` is a submodule, else module `a`); the implicit import of a
package's `__init__` by its submodules is not an edge, as in import-linter and pydeps.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("infra", "components", "trainers", "policies")
TOP = "trainstack"


def module_files() -> dict[str, Path]:
    """Every module of the scanned packages, by its dotted name under `trainstack`."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([TOP, *parts])] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` starts with (a name may end in a symbol)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported_modules(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The scanned modules `module` imports anywhere in its file (every scope, every branch)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module, path)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # `from pkg import sub` imports module pkg.sub; `from mod import name` imports mod.
            names = [f"{base}.{alias.name}" for alias in node.names] or [base]
        else:
            continue
        for name in names:
            if not name.startswith(f"{TOP}."):
                continue
            target = _resolve(name, modules)
            if target is not None and target != module:
                yield target


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {
        module: set(imported_modules(module, path, modules)) for module, path in modules.items()
    }


def knots(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (each sorted): the
    modules that reach one another through imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(start: str) -> None:
        # Iterative, so a deep graph cannot hit the recursion limit.
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return sorted(components)


def circle(graph: dict[str, set[str]], knot: list[str]) -> list[str]:
    """One circle through the knot's first module, in import order: a shortest way back."""
    component = set(knot)
    start = knot[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no circle through {start}")  # a component always has one


def _short(module: str) -> str:
    return module.removeprefix(f"{TOP}.")


def test_the_graph_is_read() -> None:
    """The scan sees the imports it must: function-level, TYPE_CHECKING and relative ones."""
    graph = import_graph()
    assert len(graph) > 100
    assert "trainstack.infra.targets.base" in graph["trainstack.infra.targets"]
    # policies/rules import their siblings relatively (`from ._inputs import ...`).
    assert "trainstack.policies.rules._inputs" in graph["trainstack.policies.rules.labels"]


def test_no_import_circle() -> None:
    graph = import_graph()
    lines = [
        f"{len(knot)} modules ({', '.join(map(_short, knot))}), "
        f"e.g. {' -> '.join(map(_short, circle(graph, knot)))}"
        for knot in knots(graph)
    ]
    assert not lines, "import circles (each module imports the next):\n" + "\n".join(lines)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c", "a"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}, [["a", "b", "a"], ["c", "d", "c"]]),
        ({"a": {"b", "c"}, "b": {"c"}, "c": {"d"}, "d": {"a"}}, [["a", "c", "d", "a"]]),
    ],
)
def test_each_knot_is_found_with_a_circle(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert [circle(graph, knot) for knot in knots(graph)] == expected

"""`components` exports every ComponentResource the package defines, with its Args."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pulumi

from trainstack import components

ROOT = Path(components.__file__).parent


def _defined_components() -> set[str]:
    """Every public class deriving from pulumi.ComponentResource in the package's sources."""
    names = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {ast.unparse(b) for b in node.bases}
                if "pulumi.ComponentResource" in bases:
                    names.add(node.name)
    return names


def test_every_component_and_its_args_are_exported() -> None:
    defined = _defined_components()
    assert "VertexTrainingJob" in defined and "QuotaGuard" in defined
    # UserCode: the one public class beside them, your code as every compute component takes it.
    values = {"UserCode"}
    assert set(components.__all__) == defined | {f"{name}Args" for name in defined} | values
    for name in components.__all__:
        value = getattr(components, name)
        module = importlib.import_module(value.__module__)
        assert getattr(module, name) is value
        if not name.endswith("Args") and name not in values:
            assert issubclass(value, pulumi.ComponentResource)


def test_readme_lists_every_component() -> None:
    readme = (ROOT.resolve().parent / "README.md").read_text()
    for name in sorted(_defined_components()):
        module = getattr(components, name).__module__
        assert f"| `{name}` | `{module}` |" in readme, name

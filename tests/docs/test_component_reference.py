"""The component reference (docs/reference/components.md, mkdocstrings over griffe) shows each
output attribute with the docstring written under it in the class body: griffe gives every
name of a chained assignment in `__init__` (`self.a = self.b = None`) the docstring of the
first, so `A100Cluster.node_pool_name` read "gke: control-plane IP"."""

from __future__ import annotations

import ast
import inspect
from functools import cache

import griffe
import pytest

from tests import REPO_ROOT
from trainstack import components


def _classes() -> list[type]:
    names = [n for n in components.__all__ if not n.endswith("Args")]
    return [c for n in names if inspect.isclass(c := getattr(components, n))]


@cache
def _module(name: str) -> griffe.Module:
    loaded = griffe.load(name, search_paths=[str(REPO_ROOT)])
    assert isinstance(loaded, griffe.Module)
    return loaded


def _written(cls: type) -> dict[str, str]:
    """Each annotated attribute of the class body with the docstring under it."""
    body = ast.parse(inspect.getsource(inspect.getmodule(cls))).body  # type: ignore[arg-type]
    node = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    out = {}
    for first, second in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            out[first.target.id] = inspect.cleandoc(second.value.value)
    return out


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_output_is_shown_with_its_own_docstring(cls: type) -> None:
    shown = _module(cls.__module__)[cls.__name__]
    wrong = {
        name: (doc, shown.members[name].docstring.value if shown.members[name].docstring else None)
        for name, doc in _written(cls).items()
        if (shown.members[name].docstring or griffe.Docstring("")).value != doc
    }
    assert wrong == {}

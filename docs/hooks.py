"""mkdocs hooks: the reference pages that are generated from the code, so they cannot go stale.

A page holds a marker line and the build puts the generated Markdown in its place:

- `<!-- generated: stack-keys -->`: every key of the stack config models
  (`trainstack.infra.config.stack_schema`), its type and default from pydantic, its meaning from
  `docs/stack_keys.yaml` or else the field's docstring;
- `<!-- generated: cli -->`: every `trainstack` command, its usage and options, from the typer
  app as click builds its `--help`;
- `<!-- generated: components -->`: a table of `trainstack.components` and an mkdocstrings
  block per component module (its docstring, the component and its Args).

A key without a meaning, or a meaning for a key that does not exist, fails the build, and so
does an unknown marker. The tests import this module to check the same pages (tests/docs/).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
import types
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

DOCS = Path(__file__).resolve().parent
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
# The stack file spells the provider's keys in the `gcp` namespace.
GCP_FIELDS = {"project": "gcp:project", "region": "gcp:region", "zone": "gcp:zone"}


class DocsError(Exception):
    """A generated page cannot be made: the message says what is missing or stale."""


# --- stack keys -------------------------------------------------------------------------------


def _models(annotation: Any) -> Iterator[tuple[type[BaseModel], bool]]:
    """The models an annotation holds, and whether each sits in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, False
        return
    origin = get_origin(annotation)
    for arg in get_args(annotation):
        if origin in (list, tuple):
            yield from ((model, True) for model, _ in _models(arg))
        elif origin is not None:
            yield from _models(arg)


@cache
def _field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field's attribute docstring (the string right after it), base classes first."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # a model built at run time (create_model) has no source
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return found


def _type_text(annotation: Any) -> str:
    """A key's type as a reader writes it: `a` | `b` for choices, `list of ...`."""
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " \\| ".join(_type_text(a) for a in args)
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"map of {_type_text(args[0])} to {_type_text(args[1])}"
    if get_args(annotation) and hasattr(annotation, "__metadata__"):  # Annotated[T, ...]
        return _type_text(get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _default_text(field: Any) -> str:
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    if default is None or isinstance(default, BaseModel) or default in ({}, []):
        return ""
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def stack_key_rows(
    model: type[BaseModel] | None = None, prefix: str = ""
) -> Iterator[tuple[str, str, str, str | None]]:
    """(dotted key, type, default, docstring) for every key of the stack config, nested
    sections and the entries of lists of sections included."""
    from trainstack.infra.config import stack_schema

    model = model or stack_schema()
    docstrings = _field_docstrings(model)
    for name, field in model.model_fields.items():
        path = GCP_FIELDS.get(name, name) if not prefix else f"{prefix}{name}"
        yield path, _type_text(field.annotation), _default_text(field), docstrings.get(name)
        for nested, listed in _models(field.annotation):
            yield from stack_key_rows(nested, f"{path}[]." if listed else f"{path}.")


def stack_key_meanings() -> dict[str, str]:
    loaded = yaml.safe_load((DOCS / "stack_keys.yaml").read_text(encoding="utf-8"))
    return {str(k): " ".join(str(v).split()) for k, v in loaded.items()}


def stack_keys_markdown() -> str:
    meanings = stack_key_meanings()
    rows = list(stack_key_rows())
    keys = {key for key, *_ in rows}
    stale = sorted(set(meanings) - keys)
    if stale:
        raise DocsError(f"docs/stack_keys.yaml names keys the config has not: {', '.join(stale)}")
    missing = [key for key, _, _, doc in rows if key not in meanings and not doc]
    if missing:
        raise DocsError(
            "stack keys with neither a docstring nor an entry in docs/stack_keys.yaml: "
            + ", ".join(missing)
        )
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, doc in rows:
        meaning = (meanings.get(key) or doc or "").replace("|", "\\|").replace("\\\\|", "\\|")
        lines.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines)


# --- CLI --------------------------------------------------------------------------------------


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")


def cli_markdown() -> str:
    import typer.main

    from trainstack.infra import cli

    # typer builds its commands on its own copy of click: its context class, not click's.
    group: Any = typer.main.get_command(cli.app)
    root = group.context_class(group, info_name="trainstack")
    out = []
    for name, command in group.commands.items():
        if command.hidden:
            continue
        ctx = command.context_class(command, info_name=name, parent=root)
        usage = " ".join(["trainstack", name, *command.collect_usage_pieces(ctx)])
        out += [f"### `trainstack {name}`", "", "```text", usage, "```", ""]
        out += [(command.help or "").strip(), ""]
        records = [r for p in command.get_params(ctx) if (r := p.get_help_record(ctx)) is not None]
        out += ["| option | meaning |", "|---|---|"]
        for opts, help_text in records:
            cell = " ".join(help_text.split()).replace("|", "\\|")
            out.append(f"| `{opts}` | {_escape(cell)} |")
        out.append("")
    return "\n".join(out)


# --- components -------------------------------------------------------------------------------


def component_names() -> list[str]:
    """The components `trainstack.components` exports: not their Args, nor the error they
    raise (`ArgsError`, which the page documents after them)."""
    from trainstack import components

    return [name for name in components.__all__ if not name.endswith(("Args", "Error"))]


def components_markdown() -> str:
    from trainstack import components

    lines = ["| component | module | what it creates |", "|---|---|---|"]
    blocks = []
    for name in component_names():
        module_name = getattr(components, name).__module__
        module = importlib.import_module(module_name)
        summary = " ".join(inspect.cleandoc(module.__doc__ or "").split("\n\n")[0].split())
        if not summary:
            raise DocsError(f"{module_name} has no module docstring to describe {name}")
        anchor = name.lower()
        lines.append(f"| [`{name}`](#{anchor}) | `{module_name}` | {summary} |")
        blocks += [
            f"## {name} {{#{anchor}}}",
            "",
            f"::: {module_name}",
            "    options:",
            "      show_root_heading: false",
            f"      members: [{name}, {name}Args]",
            "",
        ]
    return "\n".join(lines + [""] + blocks)


GENERATORS = {
    "stack-keys": stack_keys_markdown,
    "cli": cli_markdown,
    "components": components_markdown,
}


def expand(markdown: str) -> str:
    """The page with each marker replaced by what it names."""

    def generated(match: re.Match[str]) -> str:
        kind = match.group(1)
        if kind not in GENERATORS:
            raise DocsError(f"unknown marker <!-- generated: {kind} -->")
        return GENERATORS[kind]()

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)

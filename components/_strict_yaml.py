"""YAML as trainstack reads stack and project files: PyYAML's safe loader, minus the two
things that let a small file say something else than it shows.

- Anchors and aliases (`&name`, `*name`, and merge keys `<<: *name`, which need them) are
  refused: an alias is a reference, so nine nested levels of ten aliases each (a 700-byte
  "billion laughs" file) stand for 10^9 values once anything walks them (the JSON the engine
  gets, pydantic's errors), which took 48 s, 1.6 GB and printed a 226 MB error. Stack files
  never need them: Pulumi's own stack file writer (`pulumi config set`) writes none.
- A key given twice in one mapping is refused: PyYAML keeps the last one silently, so
  `steps: 100` above `steps: 100000` plans the second. The YAML 1.2 spec requires mapping
  keys to be unique (https://yaml.org/spec/1.2.2/#mapping, "The content of a mapping node is
  an unordered set of key/value node pairs, with the restriction that each of the keys is
  unique"), and the Pulumi CLI's parser (gopkg.in/yaml.v3) refuses them too
  ("mapping key ... already defined").

- Values nested deeper than `MAX_DEPTH` are refused: PyYAML composes a nested node by
  recursion, so 5,000 levels of `[` ended in a RecursionError and 3,000 lines of traceback.
  A stack file's deepest value (`trainstack:vertex: {hyperparameter_tuning: {parameters:
  [{values: [...]}]}}` under `config:`) is 6 levels down.

All three are `yaml.MarkedYAMLError`s, so callers that already turn a YAML error into one line
(`problem at line L, column C`) say these the same way.

    document = load(path.read_text(encoding="utf-8"))
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, ScalarNode

MAX_DEPTH: Final = 64
"""How deep values may nest: ten times what a stack file needs, far inside Python's recursion
limit (1,000 frames; PyYAML spends about three per level)."""


class StrictYamlError(yaml.MarkedYAMLError):
    """An anchor, alias, repeated key or value nested too deep: YAML PyYAML would read (or
    fail on with a RecursionError), refused here."""


class _StrictLoader(yaml.SafeLoader):
    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if self._depth >= MAX_DEPTH:
            raise StrictYamlError(
                problem=(
                    f"values nested more than {MAX_DEPTH} levels deep are not accepted; "
                    "valid: a stack file's sections, a few levels deep"
                ),
                problem_mark=event.start_mark,
            )
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise StrictYamlError(
                problem=(
                    "YAML anchors and aliases (&name, *name) are not accepted; valid: each "
                    "value written out where it is used"
                ),
                problem_mark=event.start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode):
                continue  # a complex key: the safe constructor refuses an unhashable one
            key = self.construct_object(key_node)
            if key in seen:
                raise StrictYamlError(
                    problem=(
                        f"key {str(key)[:80]!r} is given twice in one mapping (first at line "
                        f"{seen[key]}); valid: each key once"
                    ),
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def describe(exc: yaml.YAMLError) -> str:
    """A YAML error on one line (PyYAML's own text spans lines): `<problem> at line L,
    column C` for a syntax error, `line L, column C: <problem>; valid: ...` for a refusal
    here, whose `valid:` ends the line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return problem
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    return f"{where}: {problem}" if isinstance(exc, StrictYamlError) else f"{problem} at {where}"


def load(text: str) -> Any:
    """The YAML document in `text`; `yaml.YAMLError` (a `StrictYamlError` for an anchor,
    alias or repeated key) when it is not one trainstack reads."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no object tags

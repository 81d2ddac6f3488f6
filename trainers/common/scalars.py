"""Stack-file scalars taken as written: a count is a whole number, a rate a number, a switch
true or false (`StrictScalars`).

pydantic's lax mode reads YAML's `true` as 1 for an int and 1.0 for a float, `"20"` as 20,
and `1`, `"yes"` and `"false"` as booleans (https://docs.pydantic.dev/latest/concepts/
conversion_table/): `node_count: true` planned one machine, `max_run_hours: true` an hour,
`spot: "false"` was false only by luck of the string. A stack file is typed by hand; its
scalars are refused unless they are of the key's kind. Two readings still count:

- the engine hands a dynamic provider or a component its numbers as doubles (protobuf
  Struct `number_value`), so a whole float (`20.0`) is the count 20, as pydantic's lax int
  reads it; `20.5` stays refused by pydantic itself;
- PyYAML reads YAML 1.1, whose float needs a dot (`1.0e-3`): an unquoted `1e-3` or `1e308`
  arrives as text. Text that only YAML 1.1 leaves unread as a number (`_YAML12_ONLY_FLOAT`)
  is the number it reads as in YAML 1.2 (and in Pulumi's own reader); `'0.1'`, which YAML
  1.1 would have read as a number, is text the stack file quoted, and refused.

The trainer's command line (`TrainConfig`) stays lax: it gives every value as a string.
"""

from __future__ import annotations

import re
import types
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

_YAML12_ONLY_FLOAT: Final = re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$")
"""YAML 1.2's float with an exponent that YAML 1.1 reads as text (`1e-3`, `1e308`, `2E5`)."""


def _kinds(annotation: Any) -> set[type]:
    """The scalar types `annotation` admits (str for a Literal of strings); none inside a
    list or a mapping."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _kinds(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_kinds(arg) for arg in get_args(annotation)))
    if origin is Literal:
        return {type(arg) for arg in get_args(annotation)}
    if annotation in (bool, int, float, str):
        return {annotation}
    return set()


def strict_scalar(value: Any, kinds: set[type]) -> None:
    """Raise pydantic's own error type (worded by `catalog.problems.pydantic_problem`) when
    `value` is not of a scalar kind in `kinds`."""
    numeric = kinds & {int, float}
    if isinstance(value, bool):
        if bool not in kinds and numeric:
            kind = "int_type" if float not in numeric else "float_type"
            raise PydanticCustomError(kind, "Input should be a valid number")
        return
    if isinstance(value, str):
        if str in kinds:
            return
        if numeric == {int}:
            raise PydanticCustomError("int_type", "Input should be a valid integer")
        if float in numeric and not _YAML12_ONLY_FLOAT.match(value.strip()):
            raise PydanticCustomError("float_type", "Input should be a valid number")
        if not numeric and bool in kinds:
            raise PydanticCustomError("bool_type", "Input should be a valid boolean")
        return
    if isinstance(value, int | float) and kinds == {bool}:
        raise PydanticCustomError("bool_type", "Input should be a valid boolean")


class StrictScalars(BaseModel):
    """A stack section: every bool, int and float key takes only its own kind (see the
    module doc)."""

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalar(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None:
            strict_scalar(value, _kinds(field.annotation))
        return value

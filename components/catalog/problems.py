"""How a rule words a problem, in one place.

Every problem is one line, `<dotted.key.path>: <what is wrong>[; valid: <allowed values>]`,
whether a component reports it about its own arguments (no prefix) or the stack config
about a stack file (the caller's prefix, e.g. `tpu.`). The rules of the catalog and the
components build their lines with these helpers, and `pydantic_problem` turns pydantic's
structural errors (the stack config's models) into the same shape.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Iterable
from typing import Annotated, Any, TypeGuard, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

QUOTE_CHARS = 80
"""The most of a bad value a message repeats: a problem is one line, and a value is
repeated to be recognised, not read back (a stack file's value can be megabytes long)."""


def quote(value: Any) -> str:
    """A bad value the way the user wrote it: strings quoted, the rest as YAML/JSON; past
    QUOTE_CHARS characters its start, then how long it is."""
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) <= QUOTE_CHARS:
        return text
    return f"{text[: QUOTE_CHARS - 20]}... ({len(text):,} characters)"


def did_you_mean(value: Any, valid: Iterable[Any]) -> str:
    """`; did you mean `x`?` naming the valid string nearest a misspelt string `value`
    (`a2-higpu-1g` -> `a2-highgpu-1g`), else `;`: the separator before `valid:`."""
    if not isinstance(value, str):
        return ";"
    scores = sorted(
        ((difflib.SequenceMatcher(None, value, str(v)).ratio(), str(v)) for v in valid),
        reverse=True,
    )
    # Only a clear winner at difflib's default cutoff (0.6): `a2-highgpu-3g` is as near
    # `-1g` as `-8g`, and naming one of them would be a guess.
    if not scores or scores[0][0] < 0.6 or (len(scores) > 1 and scores[1][0] == scores[0][0]):
        return ";"
    return f"; did you mean `{scores[0][1]}`?"


def not_allowed(key: str, value: Any, valid: Iterable[Any]) -> str:
    """`<key>: <value> is not allowed; valid: a, b, c` for a value outside a fixed set, with
    `did you mean `x`?` before `valid:` when a valid value is near."""
    known = list(valid)
    hint = did_you_mean(value, known)
    return f"{key}: {quote(value)} is not allowed{hint} valid: {', '.join(str(v) for v in known)}"


def is_int(value: Any) -> TypeGuard[int]:
    """True for an int that is not a bool (YAML `true` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_problems(key: str, value: Any, minimum: int, maximum: int | None = None) -> list[str]:
    """Problems with an integer setting bounded by `minimum` (and `maximum`), worded as the
    stack config's pydantic bounds are."""
    if not is_int(value):
        bounds = f">= {minimum}" if maximum is None else f"{minimum}-{maximum}"
        return [f"{key}: {quote(value)} is not an integer; valid: an integer {bounds}"]
    if value < minimum:
        return [f"{key}: {quote(value)} is too small; valid: >= {minimum}"]
    if maximum is not None and value > maximum:
        return [f"{key}: {quote(value)} is too large; valid: <= {maximum}"]
    return []


def nearest_key(key: object, valid: Iterable[str]) -> str | None:
    """The valid key closest to a misspelled `key` (`node_cont` -> `node_count`), or None
    when none is close (difflib's similarity ratio at its default cutoff, 0.6). A plural
    names its count first (`nodes` -> `node_count`, `workers` -> `worker_count`): difflib
    finds `nodes` nearer `node_tag`, or not near anything."""
    known = list(valid)
    count = f"{str(key).removesuffix('s')}_count"
    if str(key).endswith("s") and count in known:
        return count
    found = difflib.get_close_matches(str(key), known, n=1)
    return found[0] if found else None


def unknown_key(where: str, key: object, valid: Iterable[str]) -> str:
    """`<where>: unknown key; did you mean `x`? valid: a, b, c` for the key `key` found at
    dotted path `where`; without a close valid key, `<where>: unknown key; valid: a, b, c`."""
    known = list(valid)
    nearest = nearest_key(key, known)
    hint = f"; did you mean `{nearest}`?" if nearest is not None else ";"
    return f"{where}: unknown key{hint} valid: {', '.join(known) or '(none)'}"


def unknown_keys(prefix: str, given: Iterable[str], valid: Iterable[str]) -> list[str]:
    """`unknown_key` for each key of `given` not in `valid`, at `<prefix><key>`."""
    known = list(valid)
    return [unknown_key(f"{prefix}{key}", key, known) for key in given if key not in known]


# --------------------------------------------------------------------------------------
# pydantic errors
# --------------------------------------------------------------------------------------

_SIMPLE: dict[str, str] = {
    "int_type": "is not an integer; valid: a whole number",
    "int_parsing": "is not an integer; valid: a whole number",
    "int_from_float": "is not an integer; valid: a whole number",
    "float_type": "is not a number; valid: a number",
    "float_parsing": "is not a number; valid: a number",
    "finite_number": "is not a finite number; valid: a finite number",
    "string_type": "is not a string; valid: a string",
    "list_type": "is not a list; valid: a list",
}
_BOUNDS: dict[str, tuple[str, str, str]] = {
    "greater_than_equal": ("ge", "is too small", ">="),
    "greater_than": ("gt", "is too small", ">"),
    "less_than_equal": ("le", "is too large", "<="),
    "less_than": ("lt", "is too large", "<"),
}


def _find_model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    if get_origin(tp) in (Union, types.UnionType, list, Annotated):
        for arg in get_args(tp):
            found = _find_model(arg)
            if found is not None:
                return found
    return None


def _model_at(root: Any, loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    model = _find_model(root)
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        model = _find_model(info.annotation) if info else None
    return model


def _field_at(root: Any, loc: tuple[int | str, ...]) -> FieldInfo | None:
    """The model field at `loc` (its last key), or None."""
    model = _model_at(root, loc[:-1])
    return model.model_fields.get(str(loc[-1])) if model is not None and loc else None


def _path(path: str, loc: tuple[int | str, ...]) -> str:
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    # A component's own arguments have no section: `zone`, not `.zone`.
    return path.removeprefix(".")


def pydantic_problem(err: ErrorDetails, path: str, root: Any) -> str:
    """One pydantic error as a problem line.

    `path` is the dotted key of the value that was validated (`gpu_cluster`) and `root`
    its type annotation (a model, or a union/list of one), used to list the valid keys.
    """
    loc = tuple(err["loc"])
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    where = _path(path, loc)
    if kind == "missing":
        return f"{where}: required"
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        return unknown_key(where, loc[-1], parent.model_fields if parent else ())
    if kind == "literal_error":
        return not_allowed(where, value, re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
    if kind in _SIMPLE:
        return f"{where}: {quote(value)} {_SIMPLE[kind]}"
    if kind in ("bool_type", "bool_parsing"):
        return f"{where}: {quote(value)} is not a boolean; valid: true, false"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        model = _model_at(root, loc)
        keys = f" with keys: {', '.join(model.model_fields)}" if model else ""
        return f"{where}: {quote(value)} is not a mapping; valid: a mapping{keys}"
    if kind == "int_parsing_size":  # past pydantic's own integer size: above any `le`
        field = _field_at(root, loc)
        ceiling = next((m.le for m in field.metadata if hasattr(m, "le")), None) if field else None
        valid = f"<= {ceiling}" if ceiling is not None else "a smaller whole number"
        return f"{where}: {quote(value)} is too large; valid: {valid}"
    if kind in _BOUNDS:
        key, what, op = _BOUNDS[kind]
        return f"{where}: {quote(value)} {what}; valid: {op} {ctx.get(key)}"
    if kind == "too_short":
        return (
            f"{where}: {quote(value)} is too short; valid: at least {ctx.get('min_length')} item(s)"
        )
    if kind == "trainstack":
        return f"{where}: {err['msg']}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: {msg} (got {quote(value)})"

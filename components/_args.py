"""A component's arguments checked against its `TypedDict` at run time, in the stack's words.

Python does not check a dict against a TypedDict when a program runs, so without this a
misspelled key (`{"node_cont": 2}`) was silently ignored and a default used instead. Every
public component calls `check_args` first thing in its constructor, before anything is
registered. It reports every problem in one `ArgsError`, one line each, worded as the stack
config's errors are (`trainstack.components.catalog.problems`), under `<Component>.<key path>`::

    A100Cluster.node_cont: unknown key; did you mean `node_count`? valid: project, zone, ...
    A100Cluster.node_count: '2' is not an integer; valid: an integer
    A100Cluster.training.package_uri: required
    A100Cluster.backend: 5 is not allowed; valid: gke, gce
    A100Cluster.machine_type: 'a2-higpu-1g' is not a known A2 machine type; did you mean ...

The components' own value checks (`component_check`) raise the same ArgsError under the
same `<Component>.` prefix.

What it checks is the annotation and no more: keys, required keys, and value types
(`str`, `int`, `float`, `bool`, the type of a `Literal`'s values, lists, mappings, nested
TypedDicts, unions, classes). Allowed values, ranges and cross-key rules stay with each
component's own validators, which the stack config shares, so a value of the right type
gets the same words from a component as from a stack file. Wherever an annotation allows
`pulumi.Input[T]` (or `Output[T]`), a pulumi Output or other awaitable is accepted as is:
its value is known only at deploy time.

Why not pydantic's `TypeAdapter` on the TypedDict, as the stack config uses models (pydantic
2.14): on Python < 3.12 it refuses `typing.TypedDict` ("Please use
`typing_extensions.TypedDict` instead", pydantic/_internal/_generate_schema.py, error code
`typed-dict-version`); a TypedDict's `extra="forbid"` cannot be set from outside
(`TypeAdapter(config=...)`: "Cannot use `config` when the type is a BaseModel, dataclass or
TypedDict", pydantic/type_adapter.py:170); and its lax mode would take `"2"` for an int,
which the component would then use as a string.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import (
    Awaitable,
    Callable,
    Mapping,
    MutableMapping,
    MutableSequence,
    Sequence,
)
from dataclasses import dataclass
from functools import cache
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    ParamSpec,
    Required,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

import pulumi

from trainstack.components.catalog.problems import is_int, not_allowed, quote, unknown_key

__all__ = ["ArgsError", "Bounds", "arg_problems", "check_args", "component_check"]

P = ParamSpec("P")
R = TypeVar("R")

_LISTS: tuple[Any, ...] = (list, Sequence, MutableSequence)
_MAPPINGS: tuple[Any, ...] = (dict, Mapping, MutableMapping)
_UNIONS: tuple[Any, ...] = (Union, types.UnionType)
_PLAIN = (
    "must be a plain value, not a pulumi Output (it shapes the resources and is checked "
    "before any is registered)"
)
"""The words `A100Cluster`'s own check uses for the same mistake (a100_cluster/validate.py)."""
_NOUNS: dict[Any, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


@dataclass(frozen=True)
class Bounds:
    """`Annotated[int, Bounds(ge=1, le=3650)]`: an args field's range, named in the `valid:`
    part of its type problem (the value itself is checked by the component's validator)."""

    ge: int | None = None
    le: int | None = None


class ArgsError(ValueError):
    """Invalid component arguments, raised by a component's constructor before it registers
    anything (`trainstack.components.ArgsError`). `str()` is every problem, one per line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors: list[str] = list(errors)
        """One line per problem: `<Component>.<key path>: <what is wrong>[; valid: ...]`."""
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


def check_args(component: str, args_type: type, args: object) -> None:
    """Raise `ArgsError` listing every problem of `args` against the TypedDict `args_type`,
    each under `<component>.<key>`; return quietly when there is none."""
    problems = arg_problems(component, args_type, args)
    if problems:
        raise ArgsError(problems)


def component_check(component: str, check: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`check(*args, **kwargs)`, a shared validator of the component's values (the stack
    config's rules, which raise ValueError with lines `<key>: ...`), with its ValueError
    raised as `check_args`'s ArgsError, each line under `<component>.`."""
    try:
        return check(*args, **kwargs)
    except ArgsError:
        raise
    except ValueError as exc:
        problems = str(exc).splitlines()
    # Raised outside the handler, so the validator's ValueError is not its context: a
    # traceback shows the component's problems once.
    raise ArgsError([f"{component}.{line}" for line in problems])


def arg_problems(component: str, args_type: type, args: object) -> list[str]:
    """Every problem of `args` against the TypedDict `args_type`, one line each."""
    if not is_typeddict(args_type):
        raise TypeError(f"{component}: {args_type!r} is not a TypedDict")
    return _problems(args_type, args, component)


# --------------------------------------------------------------------------------------
# Annotations
# --------------------------------------------------------------------------------------


@cache
def _fields(td: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's resolved field annotations and its required keys.

    Computed from the annotations rather than `__required_keys__`, which is wrong under
    `from __future__ import annotations` (every key counts as required here on 3.11;
    https://github.com/python/cpython/issues/97727, and the note under
    `__optional_keys__` in https://docs.python.org/3/library/typing.html). `pulumi.Input[T]` is `Union[T, Awaitable[T], "Output[T]"]`
    (pulumi/output.py), whose forward reference resolves only with `Output` and `T` given.
    """
    module = vars(sys.modules[td.__module__])
    pulumi_names = {"Output": pulumi.Output, "T": Any}
    local = {name: value for name, value in pulumi_names.items() if name not in module}
    hints = get_type_hints(td, localns=local, include_extras=True)
    fields: dict[str, Any] = {}
    required: set[str] = set()
    for key, tp in hints.items():
        origin = get_origin(tp)
        if origin is Required or (origin is not NotRequired and getattr(td, "__total__", True)):
            required.add(key)
        fields[key] = _strip(tp)
        _supported(fields[key], f"{td.__qualname__}.{key}")
    return fields, frozenset(required)


def _strip(tp: Any) -> Any:
    while get_origin(tp) in (Annotated, Required, NotRequired):
        tp = get_args(tp)[0]
    return tp


def _deferred_type(tp: Any) -> bool:
    """`Output[T]` or `Awaitable[T]`: the part of `pulumi.Input[T]` known only at deploy."""
    return tp in (pulumi.Output, Awaitable) or get_origin(tp) in (pulumi.Output, Awaitable)


def _supported(tp: Any, where: str) -> None:
    """Raise TypeError for an annotation this checker cannot check, so a new args field
    fails the first time its component is built (and in the tests), never silently."""
    tp = _strip(tp)
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object or _deferred_type(tp) or origin is Literal:
        return
    if is_typeddict(tp):
        _fields(tp)
    elif origin in _UNIONS or origin in _LISTS or origin in _MAPPINGS:
        for arg in args:
            _supported(arg, where)
    elif not (origin is None and isinstance(tp, type)):
        raise TypeError(
            f"{where}: annotation {tp!r} is not supported by trainstack.components._args"
        )


def _noun(tp: Any) -> str:
    tp = _strip(tp)
    origin = get_origin(tp)
    if origin is Literal:
        return " or ".join(quote(v) for v in get_args(tp))
    if origin in _UNIONS:
        return " or ".join(_noun(m) for m in get_args(tp) if not _deferred_type(m))
    if tp in _NOUNS:
        return _NOUNS[tp]
    if origin in _LISTS or tp in _LISTS:
        return "a list"
    if is_typeddict(tp) or origin in _MAPPINGS or tp in _MAPPINGS:
        return "a mapping"
    if _deferred_type(tp):
        return "a pulumi Output"
    return f"a {getattr(tp, '__name__', repr(tp))}"


# --------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------


def _bounds(tp: Any) -> str:
    """` 1-3650` or ` >= 1` from an `Annotated[int, Bounds(...)]` annotation, for the
    `valid:` part of a type problem; else ``."""
    low = high = None
    while get_origin(tp) in (Annotated, Required, NotRequired):
        if get_origin(tp) is Annotated:
            for meta in tp.__metadata__:
                if isinstance(meta, Bounds):
                    low, high = meta.ge, meta.le
        tp = get_args(tp)[0]
    if low is not None and high is not None:
        return f" {low}-{high}"
    if low is not None:
        return f" >= {low}"
    return "" if high is None else f" <= {high}"


def _problems(tp: Any, value: Any, where: str) -> list[str]:
    bounds = _bounds(tp)
    tp = _strip(tp)
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object:
        return []
    if _deferred(value) and not _allows_deferred(tp):
        return [f"{where}: {_PLAIN}; expected {_noun(tp)}"]
    if is_typeddict(tp):
        return _typeddict_problems(tp, value, where)
    if origin in _UNIONS:
        return _union_problems(args, value, where)
    if origin is Literal:
        return [] if _literal_type_ok(value, args) else [not_allowed(where, value, args)]
    if _deferred_type(tp):
        ok = _deferred(value)
        return [] if ok else [f"{where}: {quote(value)} is not a pulumi Output"]
    if origin in _LISTS or tp in _LISTS:
        return _list_problems(tp, args, value, where)
    if origin in _MAPPINGS or tp in _MAPPINGS:
        return _mapping_problems(args, value, where)
    return [] if _instance(tp, value) else [_type_problem(tp, value, where, bounds)]


def _deferred(value: Any) -> bool:
    return isinstance(value, pulumi.Output) or inspect.isawaitable(value)


def _allows_deferred(tp: Any) -> bool:
    if get_origin(tp) in _UNIONS:
        return any(_deferred_type(m) for m in get_args(tp))
    return _deferred_type(tp)


def _literal_type_ok(value: Any, allowed: tuple[Any, ...]) -> bool:
    # Only the type: which values are allowed is each component's own rule, shared with the
    # stack config and often more helpful than a list (TrainingDashboard's `target: local`
    # says that local runs need no dashboard). tests/components/test_component_args.py
    # checks that every component refuses a value outside each of its Literals.
    return any(type(value) is type(v) for v in allowed)


def _instance(tp: type, value: Any) -> bool:
    if tp is int:
        return is_int(value)
    if tp is float:  # an int is a number too (PEP 484's numeric tower); a bool is not
        return is_int(value) or isinstance(value, float)
    return isinstance(value, tp)


def _type_problem(tp: Any, value: Any, where: str, bounds: str = "") -> str:
    if tp is bool:  # the stack config's wording for a bad boolean
        return f"{where}: {quote(value)} is not a boolean; valid: true, false"
    noun = _noun(tp)
    return f"{where}: {quote(value)} is not {noun}; valid: {noun}{bounds}"


def _fixed_values(tp: Any) -> tuple[Any, ...]:
    """The values a `Literal` field (or `Input[Literal[...]]`) allows; () for any other."""
    tp = _strip(tp)
    if get_origin(tp) is Literal:
        return get_args(tp)
    if get_origin(tp) in _UNIONS:
        for member in get_args(tp):
            if get_origin(_strip(member)) is Literal:
                return get_args(_strip(member))
    return ()


def _required(td: type, key: str, where: str) -> str:
    fixed = _fixed_values(_fields(td)[0][key])
    valid = f"; valid: {', '.join(str(v) for v in fixed)}" if fixed else ""
    return f"{where}.{key}: required{valid}"


def _typeddict_problems(td: type, value: Any, where: str) -> list[str]:
    fields, required = _fields(td)
    if not isinstance(value, Mapping):
        keys = ", ".join(fields)
        return [f"{where}: {quote(value)} is not a mapping; expected a mapping with keys: {keys}"]
    problems = [unknown_key(f"{where}.{key}", key, fields) for key in value if key not in fields]
    problems += [
        _required(td, key, where) for key in fields if key in required and key not in value
    ]
    for key, item in value.items():
        if key in fields:
            problems += _problems(fields[key], item, f"{where}.{key}")
    return problems


def _union_problems(members: tuple[Any, ...], value: Any, where: str) -> list[str]:
    if _deferred(value):  # `_problems` let it through: a member is an Output
        return []
    plain = [m for m in members if not _deferred_type(m)]
    found = [_problems(m, value, where) for m in plain]
    if any(not problems for problems in found):
        return []
    # One member of the value's own kind (the mapping of `TrainConfig | Mapping`, the list
    # of `Input[list[str]]`) says what is wrong inside it; otherwise name every member.
    for member, problems in zip(plain, found, strict=True):
        if len(plain) == 1 or _same_kind(member, value):
            return problems
    nouns = " or ".join(_noun(m) for m in plain)
    return [f"{where}: {quote(value)} is not {nouns}; valid: {nouns}"]


def _same_kind(tp: Any, value: Any) -> bool:
    tp = _strip(tp)
    origin = get_origin(tp)
    if isinstance(value, Mapping):
        return is_typeddict(tp) or origin in _MAPPINGS or tp in _MAPPINGS
    if isinstance(value, list | tuple):
        return origin in _LISTS or tp in _LISTS
    return False


def _list_problems(tp: Any, args: tuple[Any, ...], value: Any, where: str) -> list[str]:
    # `list[T]` asks for a list; `Sequence[T]` also takes a tuple, never a string.
    strict_list = tp is list or get_origin(tp) is list
    if strict_list and isinstance(value, tuple):  # quote() would print it as a list
        return [f"{where}: {value!r} is a tuple, not a list; valid: a list"]
    if isinstance(value, str | bytes) or not isinstance(value, list if strict_list else Sequence):
        return [f"{where}: {quote(value)} is not a list; valid: a list"]
    item = args[0] if args else Any
    problems: list[str] = []
    for i, entry in enumerate(value):
        problems += _problems(item, entry, f"{where}[{i}]")
    return problems


def _mapping_problems(args: tuple[Any, ...], value: Any, where: str) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{where}: {quote(value)} is not a mapping; valid: a mapping"]
    key_type, item_type = args if len(args) == 2 else (Any, Any)
    problems: list[str] = []
    for key, item in value.items():
        if _problems(key_type, key, where):
            noun = _noun(key_type)
            problems.append(f"{where}: key {quote(key)} is not {noun}; valid: keys that are {noun}")
        problems += _problems(item_type, item, f"{where}.{key}")
    return problems

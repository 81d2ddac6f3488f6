"""Reading a planned resource's inputs: what the plan tools (`plan`, `plan-diff`) and the
target modules' `RunResource` readers share, and the Markdown spans `plan-diff`'s lines
quote them in (`code_span`, `md_text`).

It sits below the target registry: the target modules read their resources' inputs with
it, and `plan_runs` / `plan_replace`, which ask the registry, import it too, so neither
side imports the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

RUN_NAME_FLAG = re.compile(r"--run_name=([^\s\"'\\)]+)")
"""The bundled trainer's `--run_name` flag in a command line or script."""


def integral_numbers(value: Any) -> Any:
    """`value` with every integral float as an int: the engine sends every number as a
    double, and `2.0 -> 4.0` reads worse than `2 -> 4`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: integral_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral_numbers(item) for item in value]
    return value


def number(value: Any) -> str:
    """A count as the engine sends it (a double, or an int64 as a string) written plainly."""
    if isinstance(value, str) and value.isdigit():
        return value
    return str(integral_numbers(value))


def input_strings(value: Any) -> Iterable[str]:
    """Every string in a resource's inputs, nested mappings and lists included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from input_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from input_strings(item)


def code_span(text: str) -> str:
    """`text` as an inline code span, where Markdown is inert (no heading, link, emphasis or
    @mention: https://github.github.com/gfm/#code-spans): a backtick would end the span and a
    line break the list item, so they show as `'` and `\\n`."""
    one_line = text.replace("\r", "\\r").replace("\n", "\\n")
    return "`" + one_line.replace("`", "'") + "`"


PLAIN_TEXT: Final = re.compile(r"[A-Za-z0-9:/._=, -]*")
"""Text that is plain in Markdown wherever it stands: types, quota ids, dimensions."""


def md_text(text: str) -> str:
    """`text` as is when it is plain (`PLAIN_TEXT`), else as a code span."""
    return text if PLAIN_TEXT.fullmatch(text) else code_span(text)

"""Trainer command line: `--config FILE` (JSON or YAML) plus `--key=value` overrides.

Keys are exactly `TrainConfig`'s fields (dashes may stand for underscores); values on the
command line are strings that pydantic converts to the field's type (`--steps=100`,
`--compile=true`, `--checkpoint_dir=none`). Later flags win over earlier ones and over the
file. Vertex passes a job's `args` this way, so a CustomJob needs no wrapper script.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import TORCH_MODULE

_NONE = ("none", "null")


def _allows_none(name: str) -> bool:
    annotation = TrainConfig.model_fields[name].annotation
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _read_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--config: no such file {path!r}")
    text = file.read_text()
    data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of trainer keys")  # noqa: TRY004
    return data


def _valid_keys() -> str:
    return ", ".join(sorted(TrainConfig.model_fields))


def help_text(prog: str = TORCH_MODULE) -> str:
    lines = [f"usage: python -m {prog} [--config FILE] [--key=value ...]", ""]
    for name, field in TrainConfig.model_fields.items():
        doc = " ".join((field.description or "").split())
        lines.append(f"  --{name}={field.default!r}  {doc}".rstrip())
    return "\n".join(lines)


def load_config(argv: Sequence[str]) -> TrainConfig:
    """Build the trainer config from `argv` (without the program name).

    Raises ValueError for an unknown key (listing the valid ones), a malformed flag, or a
    value the model rejects.
    """
    values: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ValueError(f"unexpected argument {arg!r}; use --key=value")
        key, sep, value = arg[2:].partition("=")
        if not sep:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ValueError(f"--{key} needs a value (--{key}=VALUE)")
            value = args[i + 1]
            i += 1
        i += 1
        key = key.replace("-", "_")
        if key == "config":
            values.update(_read_file(value))
            continue
        if key not in TrainConfig.model_fields:
            raise ValueError(f"unknown trainer key {key!r}; valid keys: {_valid_keys()}")
        overrides[key] = None if value.lower() in _NONE and _allows_none(key) else value
    unknown = sorted(set(values) - set(TrainConfig.model_fields))
    if unknown:
        raise ValueError(
            f"unknown trainer key(s) {', '.join(map(repr, unknown))} in --config; "
            f"valid keys: {_valid_keys()}"
        )
    values.update(overrides)
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in e.errors()
        )
        raise ValueError(f"invalid trainer config: {problems}") from None

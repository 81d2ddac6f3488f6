"""Your code's `trainer.env` values in a plan, as `trainstack plan-diff` shows them: a short
hash (`sha256:1a2b3c4d`) unless asked (`--show-values`).

A plan diff is posted on the pull request (`.github/workflows/preview-comment.yml`), where
anyone who can read the repository reads it, and env values are where a credential ends up
when its name says nothing (`DATABASE_URL`). The config checks refuse the credentials they
recognise (`trainstack.infra.config_secrets`); the hash keeps the rest out of the comment
while still showing that a value changed. Pulumi secrets are `[secret]` in the plan already.

The values are the ones the plan's `code` entry lists; they are hashed wherever the plan
carries them: as `--env=NAME=VALUE` in the node launcher's arguments (a Vertex job's args, a
pod's args, shell-quoted in a startup script, JSON-quoted in a run record) and as
`trainer.env.NAME` in the local target's inputs.

    masked = hide_env_values(plan)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from trainstack.policies.rules.credentials import find_credential

HASH_CHARS: Final = 8
"""Hex digits of the sha256 shown: enough to tell two values apart in a review."""


def env_hash(value: str) -> str:
    """`sha256:<first HASH_CHARS hex digits>` of `value`."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:HASH_CHARS]


def _forms(value: str) -> list[str]:
    """`value` as it may appear inside a longer text: as is, inside a shell single-quoted word
    (`shlex.quote` turns `'` into `'"'"'`), inside a JSON string."""
    forms = [value, value.replace("'", "'\"'\"'"), json.dumps(value)[1:-1]]
    return list(dict.fromkeys(f for f in forms if f))


def _replacements(env: Mapping[str, str]) -> list[tuple[str, str]]:
    pairs = []
    for name, value in env.items():
        for form in _forms(value):
            pairs.append((f"--env={name}={form}", f"--env={name}={env_hash(value)}"))
    # Longest first: a value that extends another must not be half replaced.
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def _hide(value: Any, env: Mapping[str, str], replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in replacements:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key == "env" and isinstance(item, Mapping):
                out[key] = {
                    k: env_hash(v) if isinstance(v, str) and env.get(k) == v else v
                    for k, v in item.items()
                }
            else:
                out[key] = _hide(item, env, replacements)
        return out
    if isinstance(value, list):
        return [_hide(item, env, replacements) for item in value]
    return value


def hide_env_values(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    """`plan` with its `code` entry's env values (a program's: those of every entry of
    `code_by_component`) hashed in the code entries and in every resource input; a plan
    without them as it is."""
    entries = [plan.get("code")]
    by_component = plan.get("code_by_component")
    if isinstance(by_component, Mapping):
        entries += list(by_component.values())
    plain: dict[str, str] = {}
    if "target" not in plan:
        # A program's (a stack plan names its target): its node args may come from no code
        # entry (`node_args` given by hand, a plan made before the component had one).
        plain |= dict(_node_arg_env(plan.get("resources", [])))
    for entry in entries:
        env = entry.get("env") if isinstance(entry, Mapping) else None
        if isinstance(env, Mapping):
            plain |= {k: v for k, v in env.items() if isinstance(v, str) and v != "[secret]"}
    if not plain:
        return plan
    replacements = _replacements(plain)
    resources = [
        {**r, "inputs": _hide(r["inputs"], plain, replacements)}
        if isinstance(r, Mapping) and "inputs" in r
        else r
        for r in plan.get("resources", [])
    ]
    out = {**plan, "resources": resources}
    if isinstance(plan.get("code"), Mapping):
        out["code"] = _hidden_entry(plan["code"], plain)
    if isinstance(by_component, Mapping):
        out["code_by_component"] = {
            name: _hidden_entry(entry, plain) if isinstance(entry, Mapping) else entry
            for name, entry in by_component.items()
        }
    return out


_ENV_ARG: Final = re.compile(r"--env=([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def _node_arg_env(value: Any) -> Iterator[tuple[str, str]]:
    """Every `--env=NAME=VALUE` argument in `value` (a list entry of its own, as node args
    are) but trainstack's own `TRAINSTACK_*` settings (the folders it gives the code), whose
    values a review needs to see."""
    if isinstance(value, str):
        found = _ENV_ARG.fullmatch(value)
        if found and not found[1].startswith("TRAINSTACK_") and found[2] != "[secret]":
            yield found[1], found[2]
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _node_arg_env(item)
    elif isinstance(value, list):
        for item in value:
            yield from _node_arg_env(item)


def _hidden_entry(code: Mapping[str, Any], plain: Mapping[str, str]) -> dict[str, Any]:
    """A code entry with its plain env values hashed."""
    env = code.get("env")
    if not isinstance(env, Mapping):
        return dict(code)
    return {**code, "env": {k: env_hash(v) if plain.get(k) == v else v for k, v in env.items()}}


_FLAG: Final = re.compile(r"--?[A-Za-z][\w.-]*")


def _masked(text: str, flag: str = "") -> str:
    """`text`, or in its place what the credential scanner found in it and a short hash (so
    a change still shows): never the credential. A line of a longer text is masked alone, so
    a script's diff keeps its other lines; `flag` is the argument before it (`--api-key`)."""
    if "\n" in text:
        return "\n".join(_masked(line) for line in text.split("\n"))
    found = find_credential(text)
    if found is None and _FLAG.fullmatch(flag) and not text.startswith("-"):
        found = find_credential(f"{flag}={text}")
    return text if found is None else f"[{found.words}, {env_hash(text)}]"


def hide_credentials(value: Any) -> Any:
    """`value` (a plan, or any part of one) with every string the credential scanner flags
    (`trainstack.policies.rules.credentials`, the config checks' and the policy's) masked, as
    an argument after its option (`--api-key`, `VALUE`) too: what `trainstack plan-diff`
    prints, with or without `--show-values`."""
    if isinstance(value, str):
        return _masked(value)
    if isinstance(value, Mapping):
        return {key: hide_credentials(item) for key, item in value.items()}
    if isinstance(value, list):
        return [
            _masked(item, value[i - 1] if i and isinstance(value[i - 1], str) else "")
            if isinstance(item, str)
            else hide_credentials(item)
            for i, item in enumerate(value)
        ]
    return value

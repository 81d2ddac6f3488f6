"""The code lines of `trainstack plan-diff`: what changed in what a stack's job (the plan's
`code` entry) or a program's compute component (`code_by_component`) runs, in one line each.

    line = code_change("dev", base_plan.get("code"), head_plan.get("code"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainstack.infra.plan_inputs import code_span as _code
from trainstack.infra.plan_secrets import secret_env_changes

CODE_FIELDS = ("source", "image", "entrypoint", "launcher", "world_size")


def _short(field: str, value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "-" if value is None else str(value)


def code_change(stack: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None) -> str:
    """One line for the stack's job when what it runs changed (the plan's `code` entry):
    your code's source hash and whatever else of it changed, or the trainer it switched to."""
    if base == head:
        return ""
    if base is None or head is None:
        return (
            "- **code**: the bundled trainer -> your code\n"
            if base is None
            else ("- **code**: your code -> the bundled trainer\n")
        )
    parts = _code_parts(base, head)
    if not parts:
        left_out = _left_out(base, head)
        return f"- **code** {_code(stack)}: {left_out}\n" if left_out else ""
    return f"- **code** {_code(stack)}: {'; '.join(parts)}\n"


def _code_parts(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """What changed in what the job runs, in `code_change`'s words (none: it runs the same
    code)."""
    parts = []
    a, b = base.get("source_sha256"), head.get("source_sha256")
    if a != b:
        parts.append(f"source sha256 {_code((a or '-')[:16])} -> {_code((b or '-')[:16])}")
    parts += [
        f"{field} {_code(_short(field, base.get(field)))} -> {_code(_short(field, head.get(field)))}"
        for field in CODE_FIELDS
        if base.get(field) != head.get(field)
    ]
    rest = ("requirements", "env", "secret_env")
    changed = [field for field in rest if base.get(field) != head.get(field)]
    if changed:
        parts.append(f"{', '.join(changed)} changed")
    secrets = secret_env_changes(base, head)
    if secrets:
        names = ", ".join(f"trainer.env.{name}" for name in secrets)
        # Its new Secret Manager version has a new name (`EnvSecrets`), which the compute's
        # `--secret-env` carries: the engine relaunches the training with it, though this
        # offline plan cannot name the version yet.
        parts.append(
            f"a secret input changed: {names} (its value is not shown); a new Secret Manager "
            "version, whose new name relaunches the training"
        )
    return parts


def _left_out(base: Mapping[str, Any], head: Mapping[str, Any]) -> str:
    """The files the package leaves out (excluded or ignored), when only they changed."""

    def names(code: Mapping[str, Any]) -> str:
        files = code.get("files") or {}
        paths = [e["path"] for e in files.get("excluded") or []]
        paths += list((files.get("ignored") or {}).get("first") or [])
        return ", ".join(sorted(paths)) or "-"

    before, after = names(base), names(head)
    if before == after:
        return ""
    return (
        f"files left out {_code(before)} -> {_code(after)} (its source sha256 is the same: "
        "the job runs the same code)"
    )


def code_changed(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """The compute components whose code changed in what their job runs (a program's)."""
    a, b = base.get("code_by_component") or {}, head.get("code_by_component") or {}
    return [
        name
        for name in sorted(set(a) | set(b))
        if name not in a or name not in b or _code_parts(a[name], b[name])
    ]


def components_code_change(base: Mapping[str, Any], head: Mapping[str, Any]) -> str:
    """A program's code lines: one per compute component whose "Your code" entry changed
    (`code_by_component`), named by the component, in `code_change`'s words."""
    a, b = base.get("code_by_component") or {}, head.get("code_by_component") or {}
    lines = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            now = "runs your code" if name in b else "no longer runs your code"
            lines.append(f"- **code** {_code(name)}: {now}\n")
        else:
            lines.append(code_change(name, a[name], b[name]))
    return "".join(lines)

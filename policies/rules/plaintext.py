"""`secrets-as-secrets`: credentials reach resources only as Pulumi secrets."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from .credentials import find_credential, plaintext, secret_like
from .model import K8S_SECRET, SECRET, UNKNOWN, Context, Resource

_SECRET_HOLDING_TYPES: tuple[str, ...] = (K8S_SECRET,)
"""Resources whose purpose is to hold a secret (the Kubernetes provider marks a Secret's
`data` and `stringData` secret itself)."""
FIX_SECRET: Final = (
    "pass it as a Pulumi secret (in a stack: a `secure:` value in trainer.env, `pulumi config "
    "set --secret --path 'trainstack:trainer.env.NAME' VALUE`; in your own program: "
    "pulumi.Output.secret) or read it from Secret Manager at run time (trainer.secret_env)"
)
"""What every finding of the rule says to do."""


def _scan_text(path: str, text: str) -> str | None:
    found = find_credential(text)
    return None if found is None else f"{path} {found.words} in plaintext; {FIX_SECRET}"


def _scan(value: Any, path: str, found: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        name, literal = value.get("name"), value.get("value")
        # Environment variables: [{"name": "HF_TOKEN", "value": "..."}] (Vertex, Kubernetes).
        if (
            isinstance(name, str)
            and isinstance(literal, str)
            and secret_like(name)
            and plaintext(literal)
        ):
            found.setdefault(f"{path}.value", f"{path}.value sets {name} in plaintext")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "__provider":  # a dynamic provider's pickled code, always secret
                continue
            if isinstance(item, str) and secret_like(str(key)) and plaintext(item):
                found.setdefault(where, f"{where} holds a plaintext credential")
            else:
                _scan(item, where, found)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for i, item in enumerate(value):
            _scan(item, f"{path}[{i}]", found)
    elif isinstance(value, str) and value not in (SECRET, UNKNOWN):
        message = _scan_text(path, value)
        if message:
            found.setdefault(path, message)


def check_plaintext_secrets(resource: Resource, _: Context) -> Iterator[str]:
    """Credentials reach resources only as Pulumi secrets (shown as "[secret]")."""
    if resource.type in _SECRET_HOLDING_TYPES:
        return
    found: dict[str, str] = {}
    _scan(resource.inputs, "", found)
    for message in found.values():
        yield message if FIX_SECRET in message else f"{message}; {FIX_SECRET}"

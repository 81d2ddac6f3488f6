"""`secrets-as-secrets`: credentials reach resources only as Pulumi secrets."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .model import K8S_SECRET, SECRET, UNKNOWN, Context, Resource

_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "token", "apikey", "accesskey", "privatekey"}
)
_SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("signing", "key"),
    }
)
# A key ending in one of these names or points at a secret rather than holding it
# (`secretName`, `tokenFile`, `passwordSecretRef`, `token_count`).
_REFERENCE_WORDS = frozenset(
    {
        "name", "names", "ref", "id", "ids", "path", "file", "dir", "version", "uri", "url",
        "mount", "env", "type", "ttl", "expiry", "expiration", "count", "length", "len",
        "size", "limit", "max", "min", "scope", "scopes", "header", "prefix", "suffix",
        "field", "source",
    }
)  # fmt: skip
# In a training stack "token" is as often a text token (`pad_token`, `max_tokens`,
# `per_token_loss`) or a Pulumi type token (`TYPE_TOKEN`) as a credential.
_TEXT_TOKEN_WORDS = frozenset(
    {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "per", "num", "special", "start",
     "end", "vocab", "type"}
)  # fmt: skip
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no"})
_CREDENTIALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("a service account key", re.compile(r"\"private_key(?:_id)?\"\s*:")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("a Google OAuth access token", re.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,})")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
)
# `NAME=value`, `NAME: value`, `--name=value` and `"name": "value"` in scripts and args.
# The value must end the word: `token = os.environ["T"]` reads a secret, it does not hold one.
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])-{0,2}([A-Za-z_][\w.-]*)[\"']?\s*[=:]\s*([\"']?)"
    r"([^\s\"'`;&|()\[\]{}]+)(?=[\s\"'`;&|)]|$)"
)
_SECRET_HOLDING_TYPES: tuple[str, ...] = (K8S_SECRET,)
"""Resources whose purpose is to hold a secret (the Kubernetes provider marks a Secret's
`data` and `stringData` secret itself)."""
_FIX_SECRET = (
    "pass it as a Pulumi secret (pulumi.Output.secret / `pulumi config set --secret`) or "
    "read it from Secret Manager at run time"
)


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def secret_like(key: str) -> bool:
    """Whether a key or variable name names a credential (`HF_TOKEN`, `apiKey`...)."""
    words = _words(key)
    if not words or words[-1] in _REFERENCE_WORDS:
        return False
    if any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words)):
        return True
    found = _SECRET_WORDS.intersection(words)
    if found == {"token"} and _TEXT_TOKEN_WORDS.intersection(words):
        return False
    return bool(found)


def _plaintext(value: str) -> bool:
    """A literal value, not a secret marker, a reference or a flag."""
    value = value.strip()
    return not (
        value in ("", SECRET, UNKNOWN)
        or value.startswith(("$", "projects/", "sm://"))
        or value.lower() in _NOT_SECRET_VALUES
        or value.isdigit()  # ports, counts, ids
    )


def _scan_text(path: str, text: str) -> str | None:
    for kind, pattern in _CREDENTIALS:
        if pattern.search(text):
            return f"{path} contains {kind} in plaintext; {_FIX_SECRET}"
    for match in _ASSIGNMENT.finditer(text):
        name, value = match.group(1), match.group(3)
        if secret_like(name) and _plaintext(value):
            return f"{path} sets {name} in plaintext; {_FIX_SECRET}"
    return None


def _scan(value: Any, path: str, found: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        name, literal = value.get("name"), value.get("value")
        # Environment variables: [{"name": "HF_TOKEN", "value": "..."}] (Vertex, Kubernetes).
        if (
            isinstance(name, str)
            and isinstance(literal, str)
            and secret_like(name)
            and _plaintext(literal)
        ):
            found.setdefault(f"{path}.value", f"{path}.value sets {name} in plaintext")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "__provider":  # a dynamic provider's pickled code, always secret
                continue
            if isinstance(item, str) and secret_like(str(key)) and _plaintext(item):
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
        yield message if _FIX_SECRET in message else f"{message}; {_FIX_SECRET}"

"""Inputs that carry a Pulumi secret, made comparable in `trainstack plan-diff`.

A `secure:` trainer.env value makes every input derived from it a secret (the node
launcher's arguments, hence a GKE Job's spec and metadata, a startup script, a Vertex job
body: `trainstack.infra.compose`), and a plan shows each as `[secret]`, so two plans that
differ in an entrypoint argument beside the secret held the same strings and the diff hid
the relaunch. The plan of a stack with `secure:` values records, per secret input, a digest
of its non-secret content (taken offline, where the secret is its `[secret]` placeholder:
`trainstack.infra.mocks.secret_digest`), and per `secure:` value the digest of its ciphertext as the stack file
writes it (`code.secure_sha256`, `trainstack.infra.config_secrets.ciphertext_digests`).
`fold_secrets` puts the first in place of the input's `[secret]`, with the second for an
input that carries a `secure:` value (`secure_inputs`), so a change to either reads as a
changed input (and the engine's replace rules apply to it) while no value shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

SECRET: Final = "[secret]"
MARKER: Final = "[secret, sha256 "
"""How a folded secret input reads: `[secret, sha256 <16 hex>]`."""


def _marker(digest: str, ciphertexts: Mapping[str, Any] | None) -> str:
    if ciphertexts is None:
        return f"{MARKER}{digest[:16]}]"
    both = json.dumps([digest, dict(sorted(ciphertexts.items()))], separators=(",", ":"))
    return f"{MARKER}{hashlib.sha256(both.encode()).hexdigest()[:16]}]"


def fold_secrets(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    """`plan` with each `[secret]` input that has a `secret_digests` entry read as
    `[secret, sha256 <16 hex>]`, the digest of its non-secret content and, for one of the
    `secure_inputs`, of every `secure:` value's ciphertext (the engine decrypts them into
    it); a plan without them as it is."""
    code = plan.get("code")
    ciphertexts = code.get("secure_sha256") if isinstance(code, Mapping) else None
    ciphertexts = ciphertexts if isinstance(ciphertexts, Mapping) else {}
    resources: list[Any] = []
    for resource in plan.get("resources", []):
        digests = resource.get("secret_digests") if isinstance(resource, Mapping) else None
        if not isinstance(digests, Mapping):
            resources.append(resource)
            continue
        inputs = dict(resource["inputs"])
        secure = resource.get("secure_inputs")
        secure = secure if isinstance(secure, list) else []
        for key, digest in digests.items():
            if inputs.get(key) == SECRET and isinstance(digest, str):
                inputs[key] = _marker(digest, ciphertexts if key in secure else None)
        rest = {k: v for k, v in resource.items() if k not in ("secret_digests", "secure_inputs")}
        resources.append({**rest, "inputs": inputs})
    return {**plan, "resources": resources}


def is_secret(value: Any) -> bool:
    """`value` is a secret input as a plan or `fold_secrets` shows it."""
    return isinstance(value, str) and (value == SECRET or value.startswith(MARKER))


def secret_change(path: str, old: Any, new: Any) -> str:
    """The line for a changed secret input: that it changed, never its value."""

    def shown(value: Any) -> str:
        if isinstance(value, str) and value.startswith(MARKER):
            return value.removeprefix(MARKER).removesuffix("]")
        return "-" if value is None else "not recorded"

    return (
        f"  - `{path}`: a secret input changed (its value is not shown; sha256 "
        f"{shown(old)} -> {shown(new)})"
    )


def secret_env_changes(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """The `trainer.env` names whose `secure:` ciphertext differs between two plans' `code`
    entries."""
    a, b = base.get("secure_sha256"), head.get("secure_sha256")
    a, b = (a if isinstance(a, Mapping) else {}), (b if isinstance(b, Mapping) else {})
    return sorted(str(name) for name in set(a) | set(b) if a.get(name) != b.get(name))

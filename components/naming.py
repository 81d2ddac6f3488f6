"""Physical GCP names and labels for every trainstack component, in one place.

The components name what they create with these functions, and so does the stack program
(`trainstack.infra`); a program of your own can use them for what it creates beside the
components, so its names follow the same rules and limits.

Names are derived only from their inputs: no random suffixes, no timestamps, so running the
same program twice registers identical names and a no-op `pulumi up` stays a no-op. When a
name would exceed its limit it is cut and given a short hash of the untruncated parts, so
two long deployment names that share a prefix still get distinct names.

    >>> gcp_name("exp-42", "net")
    'exp-42-net'
    >>> bucket_name("my-project", "exp-42", "checkpoints")
    'my-project-exp-42-checkpoints'
    >>> account_id("exp-42", "train")
    'exp-42-train'
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

import pulumi

from trainstack.components.catalog.names import MANAGED_BY, label_problems

_HASH_LEN = 8
_INVALID = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")


def _sanitize(text: str) -> str:
    text = _INVALID.sub("-", text.lower())
    return _DASHES.sub("-", text).strip("-")


def _short_hash(*parts: str) -> str:
    # NUL-joined so ("ab", "c") and ("a", "bc") hash differently.
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:_HASH_LEN]


def _fit(name: str, max_len: int, parts: tuple[str, ...]) -> str:
    if len(name) <= max_len:
        return name
    head = name[: max_len - _HASH_LEN - 1].rstrip("-")
    return f"{head}-{_short_hash(*parts)}"


def gcp_name(deployment: str, role: str, max_len: int = 63) -> str:
    """A resource name `<deployment>-<role>` that satisfies RFC 1035 (GCP compute, tags).

    Lowercase letters, digits and dashes; starts with a letter, ends with a letter or digit;
    at most `max_len` characters (a hash suffix replaces the cut part).
    """
    if max_len < 2 * _HASH_LEN:
        raise ValueError(f"max_len must be at least {2 * _HASH_LEN}, got {max_len}")
    name = _sanitize(f"{deployment}-{role}")
    if not name:
        raise ValueError(
            f"deployment {deployment!r} and role {role!r} contain no characters usable in a "
            "GCP name (a-z, 0-9, -)"
        )
    if not name[0].isalpha():
        # RFC 1035 names start with a letter; a prefix (not dropping digits) keeps "1exp" and
        # "2exp" distinct.
        name = f"ts-{name}"
    return _fit(name, max_len, (deployment, role))


def bucket_name(project: str, deployment: str, role: str, suffix: str | None = None) -> str:
    """A globally unique bucket name `<project>-<deployment>-<role>[-<suffix>]`, 3-63 chars.

    The project id is included because bucket names share one namespace across all of GCS.
    `suffix` is an opt-in, caller-chosen disambiguator (never random: names must be stable).
    """
    parts = (project, deployment, role) if suffix is None else (project, deployment, role, suffix)
    name = _sanitize("-".join(parts))
    if len(name) < 3:
        raise ValueError(f"bucket name {name!r} is shorter than 3 characters")
    # GCS reserves these; a project id cannot contain them either, so this is a typo guard.
    if name.startswith("goog") or "google" in name:
        raise ValueError(f"bucket name {name!r} must not start with 'goog' or contain 'google'")
    return _fit(name, 63, parts)


def account_id(deployment: str, role: str) -> str:
    """A service account id `<deployment>-<role>`: 6-30 chars, `^[a-z][a-z0-9-]{4,28}[a-z0-9]$`."""
    name = gcp_name(deployment, role, max_len=30)
    if len(name) < 6:
        # Too short for IAM: pad deterministically instead of failing on short deployments.
        name = f"{name}-{_short_hash(deployment, role)}"[:30]
    return name


def validate_labels(labels: Mapping[str, str]) -> None:
    """Raise ValueError listing every problem (`trainstack.components.catalog.names.label_problems`)
    unless `labels` are valid GCP labels that leave trainstack's own keys alone."""
    problems = label_problems(labels)
    if problems:
        raise ValueError("\n".join(problems))


def merge_labels(user: Mapping[str, str] | None, component: str) -> dict[str, str]:
    """User labels plus trainstack's identity labels, with keys in sorted order."""
    merged = {**(user or {}), "component": component, "managed-by": MANAGED_BY}
    return dict(sorted(merged.items()))


def labels_input(
    user: pulumi.Input[Mapping[str, str]] | None, component: str
) -> pulumi.Input[Mapping[str, str]]:
    """`merge_labels` for an Input: validated and merged now when plain, else when resolved."""
    if user is None or isinstance(user, Mapping):
        plain: Mapping[str, str] = user or {}
        validate_labels(plain)
        return merge_labels(plain, component)

    def resolve(value: Mapping[str, str] | None) -> dict[str, str]:
        validate_labels(value or {})
        return merge_labels(value, component)

    return pulumi.Output.from_input(cast(Any, user)).apply(resolve)


def name_input(build: Callable[..., str], *parts: pulumi.Input[str] | None) -> pulumi.Input[str]:
    """Apply a name builder to Inputs: a plain str (validated now) when all parts are plain."""
    if all(part is None or isinstance(part, str) for part in parts):
        return build(*parts)
    return pulumi.Output.all(*parts).apply(lambda values: build(*values))


ENVIRONMENT_LABEL = "environment"
"""The label a component's `environment` argument sets: the policy pack's
`accelerators-labelled` requires it on every GPU/TPU machine
(`trainstack.policies.rules.model.REQUIRED_MACHINE_LABELS`)."""


STACK_LABEL = "stack"
"""The other label the policy pack's `accelerators-labelled` requires on GPU/TPU machines
(`REQUIRED_MACHINE_LABELS`): the compute components (`A100Cluster`, `TpuGkeSlices`,
`TpuPodSlice`) set it to the Pulumi stack's name where their labels have none (a stack
config's is its deployment name)."""


def _with_stack(given: Mapping[str, str]) -> dict[str, str]:
    out = dict(given)
    stack = pulumi.get_stack().lower()
    # A stack name that is no label value (`Prod.EU`) is left to the policy's line.
    if STACK_LABEL not in out and not label_problems({STACK_LABEL: stack}):
        out[STACK_LABEL] = stack
    return out


def stack_labels(user: pulumi.Input[Mapping[str, str]] | None) -> pulumi.Input[Mapping[str, str]]:
    """User labels with `stack` set to the Pulumi stack's name (lowercased) where they have
    none (`STACK_LABEL`)."""
    if user is None or isinstance(user, Mapping):
        return _with_stack(user or {})
    return pulumi.Output.from_input(cast(Any, user)).apply(lambda v: _with_stack(v or {}))


def environment_labels(
    user: pulumi.Input[Mapping[str, str]] | None, environment: str, key: str = "labels"
) -> pulumi.Input[Mapping[str, str]]:
    """User labels with `environment` set from the component's `environment` argument; a
    different `environment` label in them is one line naming `key`."""

    def add(value: Mapping[str, str] | None) -> dict[str, str]:
        given = dict(value or {})
        if given.get(ENVIRONMENT_LABEL, environment) != environment:
            raise ValueError(
                f"{key}: environment {given[ENVIRONMENT_LABEL]!r} differs from the "
                f"component's environment {environment!r}; valid: leave the label out "
                "(environment sets it) or give the same value"
            )
        return {**given, ENVIRONMENT_LABEL: environment}

    if user is None or isinstance(user, Mapping):
        return add(user)
    return pulumi.Output.from_input(cast(Any, user)).apply(add)

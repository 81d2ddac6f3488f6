"""GCP naming rules (labels, zones) and the label keys trainstack sets itself.

`label_problems` is the one check of a labels mapping, `stack_name_problem` of a stack's name: components run it on their `labels`
argument (`trainstack.components._naming.labels_input`) and the stack config on `trainstack:labels`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from trainstack.components.catalog.problems import quote

LABEL_KEY: Final = re.compile(r"[a-z][a-z0-9_-]{0,62}")
"""A label key: a lowercase letter, then up to 62 of a-z, 0-9, '_', '-'."""
LABEL_VALUE: Final = re.compile(r"[a-z0-9_-]{0,63}")
"""A label value: up to 63 of a-z, 0-9, '_', '-'."""

STACK_NAME: Final = re.compile(r"[a-z0-9_-]{1,63}")
"""A trainstack stack name: Pulumi allows more (`[A-Za-z0-9_.-]{1,100}`), but the name is the
`stack` label of every resource, so it must also be a non-empty label value
(https://cloud.google.com/compute/docs/labeling-resources#requirements)."""
STACK_NAME_VALID: Final = "1-63 of a-z, 0-9, '_', '-' (it is the `stack` label of every resource)"

MANAGED_BY: Final = "trainstack"
"""Value of the `managed-by` label on every resource trainstack creates."""
RESERVED_LABEL_KEYS: Final[tuple[str, ...]] = ("component", "managed-by")
"""Label keys trainstack sets itself; user labels may not override them."""


def label_problems(labels: Any, key: str = "labels") -> list[str]:
    """Every problem with a user labels mapping found at dotted key `key`."""
    if not isinstance(labels, Mapping):
        return [
            f"{key}: {quote(labels)} is not a mapping; valid: a mapping of label keys to values"
        ]
    problems: list[str] = []
    for name, value in labels.items():
        if name in RESERVED_LABEL_KEYS:
            problems.append(
                f"{key}: {quote(name)} is reserved by trainstack; valid: a key other than "
                f"{', '.join(RESERVED_LABEL_KEYS)}"
            )
        elif not isinstance(name, str) or not LABEL_KEY.fullmatch(name):
            problems.append(
                f"{key}: {quote(name)} is not a valid label key; valid: a lowercase letter "
                "then up to 62 of a-z, 0-9, '_', '-'"
            )
        if not isinstance(value, str):
            problems.append(
                f"{key}.{name}: {quote(value)} is not a string; valid: up to 63 of a-z, 0-9, "
                "'_', '-'"
            )
        elif not LABEL_VALUE.fullmatch(value):
            problems.append(
                f"{key}.{name}: {quote(value)} is not a valid label value; valid: up to 63 "
                "of a-z, 0-9, '_', '-'"
            )
    return problems


def stack_name_problem(name: str, key: str) -> str | None:
    """The one check of a stack's name, wherever it comes from (`--stack-name`, a stack file's
    name, `pulumi stack`): None when it is valid, else the problem at `key`."""
    if STACK_NAME.fullmatch(name):
        return None
    return f"{key}: {quote(name)} is not a stack name; valid: {STACK_NAME_VALID}"


def zone_in_region_problems(
    zone: str, region: str | None, key: str, region_key: str = "gcp:region"
) -> list[str]:
    """A problem when `zone` (at dotted key `key`) is not a zone of `region` (named
    `region_key`: a stack's `gcp:region`, a component's subnet). The one rule a stack's
    compute section and a compute component given a subnet are held to."""
    if region and not zone.startswith(region + "-"):
        return [
            (
                f"{key}: {quote(zone)} is not in {region_key} {quote(region)}; "
                f"valid: a zone named {region}-<zone>"
            )
        ]
    return []

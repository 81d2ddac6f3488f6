"""GCP naming rules (labels, zones) and the label keys trainstack sets itself.

`label_problems` is the one check of a labels mapping, `stack_name_problem` of a stack's name: components run it on their `labels`
argument (`trainstack.components.naming.labels_input`) and the stack config on `trainstack:labels`.
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
"""Label keys every component sets itself; its `labels` may not override them."""
STACK_LABEL_KEYS: Final[tuple[str, ...]] = ("environment", "stack")
"""Label keys a stack sets on every resource besides those (`trainstack.infra.compose`):
`trainstack:labels` may not override them either."""
MAX_LABELS: Final = 64
"""Labels one Google Cloud resource may carry: "No more than 64 labels can be associated with
a given resource" (cloudresourcemanager.v3 discovery document, Project.labels; the same for
Compute Engine, Cloud Storage, Vertex AI and Cloud TPU,
https://cloud.google.com/resource-manager/docs/labels-overview)."""
OWN_LABELS_PER_RESOURCE: Final = 1
"""The most labels a component adds to one resource beyond `RESERVED_LABEL_KEYS`: a Vertex
job's `trainstack_request_id` (components/_vertex_body.py REQUEST_ID_LABEL), a queued TPU's
`trainstack_spec` (components/_tpu_queued_provider.py SPEC_LABEL)."""


def label_problems(labels: Any, key: str = "labels", *, stack: bool = False) -> list[str]:
    """Every problem with a user labels mapping found at dotted key `key`: a component's
    `labels`, or with `stack` the stack's `trainstack:labels`, which also may not set
    `STACK_LABEL_KEYS` and leaves room for them."""
    if not isinstance(labels, Mapping):
        return [
            f"{key}: {quote(labels)} is not a mapping; valid: a mapping of label keys to values"
        ]
    reserved = sorted(RESERVED_LABEL_KEYS + (STACK_LABEL_KEYS if stack else ()))
    problems: list[str] = []
    own = len(reserved) + OWN_LABELS_PER_RESOURCE
    if len(labels) + own > MAX_LABELS:
        problems.append(
            f"{key}: {len(labels)} labels plus the {own} trainstack sets on a resource "
            f"({', '.join(reserved)}, and a Vertex job's or queued TPU's own) make "
            f"{len(labels) + own}, over the {MAX_LABELS} Google Cloud allows on one resource; "
            f"valid: at most {MAX_LABELS - own} labels"
        )
    for name, value in labels.items():
        if name in RESERVED_LABEL_KEYS:
            problems.append(
                f"{key}: {quote(name)} is reserved by trainstack; valid: a key other than "
                f"{', '.join(RESERVED_LABEL_KEYS)}"
            )
        elif name in reserved:
            problems.append(
                f"{key}: {quote(name)} is reserved by trainstack: the stack sets it on every "
                f"resource; valid: a key other than {', '.join(reserved)}"
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

"""Resource options a component hands on to the children that do its work."""

from __future__ import annotations

from typing import Any

import pulumi


def inherited_depends_on(opts: pulumi.ResourceOptions | None) -> list[Any]:
    """The `depends_on` a component was given, for the children that must wait for it.

    A component's `depends_on` is not recorded on its children: the engine would neither
    create them after those resources (beyond waiting for the component's own registration)
    nor delete them before. Compute that reads the training account's buckets passes the
    account's IAM bindings here (`trainstack.infra.compose`), so a VM, slice or job starts only once
    its permissions exist, and `pulumi destroy` stops it before they go."""
    deps = opts.depends_on if opts is not None else None
    if deps is None:
        return []
    return list(deps) if isinstance(deps, list | tuple) else [deps]

"""The node launcher's arguments for your own code (`python -m trainstack.trainers.node <node_args>`),
checked the same way by every startup script that runs them (TPU workers, Compute Engine
VMs, GKE pods)."""

from __future__ import annotations

from collections.abc import Sequence


def validate_node_args(node_args: Sequence[str]) -> None:
    """Raise ValueError unless `node_args` are single-line strings ending in `-- ARGV`."""
    if isinstance(node_args, str) or not isinstance(node_args, Sequence):
        raise ValueError(  # noqa: TRY004 - a config mistake, reported like every other
            f"node_args: got {node_args!r}; valid: a list of strings"
        )
    for i, arg in enumerate(node_args):
        if not isinstance(arg, str) or "\n" in arg or "\0" in arg:
            raise ValueError(f"node_args[{i}]: {arg!r} is not a single-line string")
    if "--" not in node_args or node_args[-1] == "--":
        raise ValueError(f"node_args: {list(node_args)!r} has no '-- ARGV' (your entrypoint)")

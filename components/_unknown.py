"""Values Pulumi does not know yet, as the dynamic providers receive them.

In a preview (`pulumi preview`, and the preview half of `pulumi up`) an input built from
another resource's output that is not computed yet reaches a dynamic provider's `check`
and `diff` as an unknown. The engine sends the sentinel string `UNKNOWN_SENTINEL` on the
wire (pulumi/pulumi pkg/resource/plugin/provider_plugin.go, `Check` marshals its news with
`KeepUnknowns: req.AllowUnknowns`), and the SDK's dynamic-provider host turns it into a
`pulumi.output.Unknown` object before calling the provider: `python -m pulumi.dynamic`
(pulumi/dynamic/__main__.py, `Check` and `Diff`) deserializes with
`rpc.deserialize_properties(request.news, True)`, and `keep_unknowns=True` makes
`rpc.deserialize_property` answer `Unknown()` for the sentinel (pulumi/runtime/rpc.py,
`deserialize_property`, SDK 3.272.0). Code that calls a provider directly may still hand
it the string, so both count as unknown.

    from trainstack.components._unknown import is_unknown

    if not is_unknown(news.get("body")):
        ...  # validate what is known
"""

from __future__ import annotations

from typing import Any, Final

from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN as _RPC_UNKNOWN

UNKNOWN_SENTINEL: Final[str] = _RPC_UNKNOWN
"""The engine's wire placeholder for an unknown value (`04da6b54-...`)."""


def is_unknown(value: Any) -> bool:
    """True for a value Pulumi does not know yet: the host's `Unknown` or the sentinel."""
    return isinstance(value, Unknown) or (isinstance(value, str) and value == UNKNOWN_SENTINEL)


def contains_unknown(value: Any) -> bool:
    """True when `value` is unknown or holds an unknown anywhere inside lists and dicts."""
    if is_unknown(value):
        return True
    if isinstance(value, dict):
        return any(contains_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(contains_unknown(v) for v in value)
    return False

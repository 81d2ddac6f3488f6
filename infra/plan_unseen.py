"""The relaunches a program's plan diff cannot see in the resources' inputs.

A resource's inputs that depend on a value the preview does not know (the name of an
auto-named `gcp.storage.Bucket`, say) are "(known after deploy)" in the plan, on both sides
of a diff: a GKE Job whose whole `spec` is unknown reads the same before and after a code
change that replaces it. The component's "Your code" entry (its `facts["code"]`,
`code_by_component` in the plan) is known all the same, and the code reaches the resource
that runs it (the package's digest in its URI, the `--env=` arguments), so a changed entry
with such a resource under the component is a change the inputs hide. What the engine does
with it is read from the resource's replace-on-change table (or its replaceOnChanges
option) for the unknown paths: the change lies somewhere inside them.

    for unseen in unseen_runs(components, resources, shown):
        ...
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainstack.infra.mocks import UNKNOWN
from trainstack.infra.plan_replace import Verdict, classify, relaunch_note
from trainstack.infra.targets import run_resource


@dataclass(frozen=True)
class Unseen:
    """A resource running `component`'s changed code whose `paths` are unknown in the plan."""

    component: str
    resource: Mapping[str, Any]
    paths: tuple[str, ...]
    verdict: Verdict
    note: str | None


def unknown_paths(value: Any, prefix: str = "") -> Iterator[str]:
    """The paths (`spec`, `metadata.name`, `args[2]`) of `value` that are unknown."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from unknown_paths(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from unknown_paths(item, f"{prefix}[{i}]")
    elif value == UNKNOWN:
        yield prefix


def _component_of(resource: Mapping[str, Any], parents: Mapping[str, str | None]) -> set[str]:
    """The names of `resource`'s ancestors (its parent, its parent's parent, ...)."""
    names: set[str] = set()
    parent = resource.get("parent")
    while isinstance(parent, str) and parent not in names:
        names.add(parent)
        parent = parents.get(parent)
    return names


def unseen_runs(
    components: Iterable[str], resources: Iterable[Mapping[str, Any]], shown: Iterable[str]
) -> list[Unseen]:
    """For each of `components` (those whose code entry changed), the resources under it
    that run the trainer (`run_resource`), are not among `shown` (the names the diff lists
    as changed) and have unknown inputs: the change the plan cannot show in them."""
    resources = list(resources)
    parents = {r["name"]: r.get("parent") for r in resources}
    shown = set(shown)
    wanted = set(components)
    out = []
    for r in resources:
        run = run_resource(r["type"])
        if run is None or r["name"] in shown:
            continue
        owners = _component_of(r, parents) & wanted
        paths = tuple(unknown_paths(r.get("inputs") or {}))
        if not owners or not paths:
            continue
        if run.provider is not None:
            # A dynamic provider's diff needs the values themselves.
            verdict = Verdict("change (may replace)", unknown=paths)
        else:
            verdict = classify(
                r["type"],
                {},
                r["inputs"],
                paths,
                r.get("replaceOnChanges", ()),
                bool(r.get("deleteBeforeReplace")),
            )
        note = relaunch_note(r, r, resources) if verdict.action == "replace" else None
        out.append(Unseen(min(owners), r, paths, verdict, note))
    return out

"""What the Pulumi engine would do with a changed resource of a plan: update it in place or
replace it (and whether it deletes the old one first), and, for a resource that runs the
trainer, what the relaunched run starts from. `trainstack.infra.plan_diff` prints the answers.

- trainstack's dynamic resources: the provider's own `diff` answers, called with the two
  plans' inputs, exactly as the engine calls it on `pulumi preview`.
- pulumi-gcp and Kubernetes resources: the tables of components/catalog/replace_on_change.py.
  A change no table covers is "change (may replace)": the diff cannot rule a replace out.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from trainstack.components.catalog.replace_on_change import (
    in_place_paths,
    replace_blocks,
    replace_paths,
)
from trainstack.infra.plan_inputs import input_strings
from trainstack.infra.targets import run_resource
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.fingerprint import STATE_KEYS

Action = Literal["replace", "change", "change (may replace)", "none"]


INSTANCE_TEMPLATE: Final = "gcp:compute/instanceTemplate:InstanceTemplate"
GROUP_MANAGER: Final = "gcp:compute/instanceGroupManager:InstanceGroupManager"
PER_INSTANCE_CONFIG: Final = "gcp:compute/perInstanceConfig:PerInstanceConfig"
RECREATING_ACTIONS: Final = frozenset({"REPLACE", "RESTART"})
"""A PROACTIVE group rolls a new template out to its running VMs by itself, doing at least
its `minimalAction` to each: REPLACE deletes and recreates the VM, RESTART stops and starts
it, and either restarts the trainer. ("Automated rolling update",
https://cloud.google.com/compute/docs/instance-groups/updating-migs; updatePolicy.type and
.minimalAction in https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers.)
With REFRESH or NONE the group still does what a change needs, but which changes need a
restart is not modelled here, so only these two minimal actions get the note."""

_CHECKPOINT_FLAG = re.compile(r"--checkpoint_dir=([^\s\"'\\)]+)")
_CHECKPOINT_ENV = re.compile(r"TRAINSTACK_CHECKPOINT_DIR=([^\s\"'\\)]+)")


@dataclass(frozen=True)
class Verdict:
    """What the engine would do with one changed resource."""

    action: Action
    replaces: tuple[str, ...] = ()
    """The changed inputs that force the replacement."""
    delete_first: bool = False
    source: str = ""
    """Where the answer comes from, for the reader."""
    unknown: tuple[str, ...] = ()
    """Changed inputs no table covers (why a change may replace)."""


def _strip_indices(path: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", path)


def _covered(path: str, table: Iterable[str]) -> bool:
    """True when `path` is a table path, lies under one, or holds one (a whole object that
    changed includes the table path inside it)."""
    plain = _strip_indices(path)
    return any(plain == t or plain.startswith(t + ".") or t.startswith(plain + ".") for t in table)


def _dynamic(
    provided: tuple[str, str, Mapping[str, Any]], old: Mapping[str, Any], new: Mapping[str, Any]
) -> Verdict:
    module, cls, kwargs = provided
    provider = getattr(importlib.import_module(module), cls)(**kwargs)
    olds = {k: v for k, v in old.items() if k != "__provider"}
    news = {k: v for k, v in new.items() if k != "__provider"}
    result = provider.diff("", olds, news)
    # The repository path (`components/...`): the import name's `trainstack/` is only a link.
    source = f"its provider's diff, {module.removeprefix('trainstack.').replace('.', '/')}.py"
    if result.replaces:
        return Verdict(
            "replace", tuple(result.replaces), bool(result.delete_before_replace), source
        )
    return Verdict("change" if result.changes else "none", source=source)


def _has(inputs: Mapping[str, Any], path: str) -> bool:
    """True when the dotted `path` holds a value in `inputs`."""
    value: Any = inputs
    for key in path.split("."):
        if not isinstance(value, Mapping) or value.get(key) is None:
            return False
        value = value[key]
    return True


def _top_level_name(old: Mapping[str, Any], new: Mapping[str, Any], key: str) -> bool:
    return key in new and old.get(key) == new.get(key)


def _delete_first(type_: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether the engine deletes the old resource before creating its replacement: a
        Kubernetes object whose metadata.name (and namespace) is set and unchanged, a pulumi-gcp
        resource whose `name` is (DELETE_FIRST_SOURCE), for a replace the tables found (a
    replaceOnChanges one goes by the option: `classify`)."""
    if type_.startswith("kubernetes:"):
        # A metadata the preview knows only after deploy is a string, not an object.
        meta_old, meta_new = (
            m if isinstance(m, Mapping) else {} for m in (old.get("metadata"), new.get("metadata"))
        )
        return _top_level_name(meta_old, meta_new, "name") and meta_old.get(
            "namespace"
        ) == meta_new.get("namespace")
    return _top_level_name(old, new, "name")


REPLACE_ON_CHANGES_SOURCE: Final = "its replaceOnChanges option"
"""https://www.pulumi.com/docs/iac/concepts/resources/options/replaceonchanges/: "changes to
certain properties on a resource should force a replacement of the resource instead of an
in-place update" (even where the provider would update it in place)."""


def classify(
    type_: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    changed: Iterable[str],
    replace_on_changes: Iterable[str] = (),
    delete_before_replace: bool = False,
) -> Verdict:
    """The engine's answer for a `type_` resource whose inputs go from `old` to `new`;
    `changed` are the flattened input paths that differ; `replace_on_changes` and
    `delete_before_replace` the resource's options of those names (the plan's
    `replaceOnChanges`, `deleteBeforeReplace`)."""
    changed = list(changed)
    if not changed:
        return Verdict("change")  # only options (protect, parent) differ: no input to replace on
    forced = tuple(p for p in changed if _covered(p, replace_on_changes))
    if forced:
        # The option wins over the provider's word (pulumi/pulumi pkg/resource/deploy/
        # step_generator.go: `deleteBeforeReplace := diff.DeleteBeforeReplace; if
        # goal.DeleteBeforeReplace != nil {...}`), and pulumi-kubernetes says delete first only
        # for replaces its own Diff found (provider/pkg/provider/provider.go Diff:
        # `len(replaces) > 0 && ...`), none for a replace the option forces.
        first = delete_before_replace or _top_level_name(old, new, "name")
        return Verdict("replace", forced, first, REPLACE_ON_CHANGES_SOURCE)
    resource = run_resource(type_)
    if resource is not None and resource.provider is not None:
        return _dynamic(resource.provider, old, new)
    found = replace_paths(type_)
    if found is None:
        return Verdict("change (may replace)", unknown=tuple(changed))
    table, source = found
    # A ForceNew block added or removed replaces, whatever its fields' own schemas say.
    blocks = [b for b in replace_blocks(type_) if _has(old, b) != _has(new, b)]
    replaces = tuple(p for p in changed if _covered(p, table) or _covered(p, blocks))
    if replaces:
        return Verdict("replace", replaces, _delete_first(type_, old, new), source)
    unknown = tuple(p for p in changed if not _covered(p, in_place_paths(type_)))
    if unknown:
        return Verdict("change (may replace)", source=source, unknown=unknown)
    return Verdict("change", source=source)


# -- what a relaunched run starts from ---------------------------------------------------


def _env_value(value: Any, name: str) -> str | None:
    """The last `{"name": name, "value": ...}` entry anywhere in `value` (a container's or a
    Vertex worker pool's env)."""
    found = None
    if isinstance(value, Mapping):
        if value.get("name") == name and isinstance(value.get("value"), str):
            found = value["value"]
        for item in value.values():
            found = _env_value(item, name) or found
    elif isinstance(value, list):
        for item in value:
            found = _env_value(item, name) or found
    return found


def checkpoint_dir(resource: Mapping[str, Any]) -> str | None:
    """Where a training resource's run keeps the checkpoints it resumes from, read from its
    inputs the way the launch resolves it; None when the inputs do not say."""
    inputs = resource["inputs"]
    run = run_resource(resource["type"])
    own = run.checkpoint_dir if run is not None else None
    if own is not None and run is not None and run.checkpoint_first:
        return own(inputs)
    # A --checkpoint_dir flag (the bundled trainers) or your code's TRAINSTACK_CHECKPOINT_DIR
    # wins over the platform's own folder (e.g. Vertex's AIP_CHECKPOINT_DIR;
    # trainers/torch_ddp/train.py, trainers/user_code.py).
    flags = [m for s in input_strings(inputs) for m in _CHECKPOINT_FLAG.findall(s)]
    flags += [m for s in input_strings(inputs) for m in _CHECKPOINT_ENV.findall(s)]
    env = _env_value(inputs, "TRAINSTACK_CHECKPOINT_DIR")
    if env or flags:
        return env or flags[-1]
    return own(inputs) if own is not None else None


def _flag_value(text: str, key: str) -> str | None:
    match = re.search(rf"(?<![\w-])--{key}=([^\s\"'\\)]+)", text)
    return match.group(1) if match else None


def state_settings(resource: Mapping[str, Any]) -> dict[str, str]:
    """The run's fingerprinted settings (trainstack.trainers.common.fingerprint.STATE_KEYS) as text: the
    local TrainingRun's `trainer` mapping, else the bundled trainer's `--<key>=<value>`
    flags in the inputs (the first), a key with neither at TrainConfig's default. A tuning
    job's tuned keys are left out: each trial sets its own."""
    inputs = resource["inputs"]
    run = run_resource(resource["type"])
    trainer = run.settings(inputs) if run is not None and run.settings is not None else None
    # A script's flags are read from its lines that also pass --run_name (the trainer's
    # command line), not from the examples in its comments and docstrings.
    texts = [
        line
        for text in input_strings(inputs)
        for line in text.splitlines() or [text]
        if "\n" not in text or "--run_name=" in line
    ]
    tuned = run.tuned(inputs) if run is not None and run.tuned is not None else set()
    found: dict[str, str] = {}
    for key in STATE_KEYS:
        if key in tuned:
            continue
        if isinstance(trainer, Mapping) and key in trainer:
            value: Any = trainer[key]
        else:
            value = next((v for t in texts if (v := _flag_value(t, key)) is not None), None)
            if value is None:
                value = TrainConfig.model_fields[key].default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        found[key] = str(value)
    return found


def _state_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    a, b = state_settings(old), state_settings(new)
    return [f"{key} {a[key]} -> {b[key]}" for key in STATE_KEYS if a.get(key) != b.get(key)]


RESIZE_REQUEST: Final = "gcp:compute/resizeRequest:ResizeRequest"
FLEX_GROUP_NOTE: Final = (
    "(flex-start: a new template replaces the group, `replace_on_changes` in "
    "components/a100_cluster/gce.py, with its VMs and resize request, and the new request "
    "waits for capacity again)"
)


def _flex_group(plan: Iterable[Mapping[str, Any]]) -> str | None:
    """The name of a flex-start group in `plan` (one a resize request fills), or None."""
    plan = list(plan)
    filled = {r["inputs"].get("instanceGroupManager") for r in plan if r["type"] == RESIZE_REQUEST}
    for r in plan:
        if r["type"] == GROUP_MANAGER and r["inputs"].get("name") in filled:
            return str(r["name"])
    return None


def _group_recreates_vms(plan: Iterable[Mapping[str, Any]]) -> str | None:
    """The name of a group in `plan` whose update policy recreates or restarts every VM on
    a new template, or None."""
    for r in plan:
        if r["type"] == GROUP_MANAGER:
            policy = r["inputs"].get("updatePolicy") or {}
            if policy.get("type") == "PROACTIVE" and policy.get("minimalAction") in (
                RECREATING_ACTIONS
            ):
                return str(r["name"])
    return None


def _gce_vms_replaced(
    new: Mapping[str, Any], plan: Iterable[Mapping[str, Any]]
) -> tuple[str, Mapping[str, Any]] | None:
    """For a replaced GCE group or per-instance config: which VMs the replacement deletes
    and creates again (both go first, `delete_before_replace`, and the configs create the
    VMs: components/a100_cluster/gce.py), and the plan's template that runs on them."""
    templates = [r for r in plan if r["type"] == INSTANCE_TEMPLATE]
    if new["type"] not in (GROUP_MANAGER, PER_INSTANCE_CONFIG) or len(templates) != 1:
        return None
    if new["type"] == PER_INSTANCE_CONFIG:
        what = f"VM `{_inline(str(new['inputs'].get('name')))}` is deleted and created again with its rank"
    else:
        what = "every VM goes with the group and its per-instance configs create them again"
    return f"{what}, which relaunches", templates[0]


def _inline(text: str | None) -> str | None:
    """A value read from the inputs as the note's code spans may hold it: one line, no
    backtick (which would end the span and let Markdown after it render)."""
    if text is None:
        return None
    return text.replace("`", "'").replace("\r", "\\r").replace("\n", "\\n")


def relaunch_note(
    old: Mapping[str, Any], new: Mapping[str, Any], plan: Iterable[Mapping[str, Any]] = ()
) -> str | None:
    """For a replaced resource that runs the trainer (a GCE instance template whose group
    in `plan`, the new plan's resources, recreates its VMs on a new template, or a GCE group
    or per-instance config whose VMs the replacement deletes and creates again): that it
    relaunches training and what the new run starts from; None for any other resource."""
    lead = "relaunches"
    plan = list(plan)
    vms = _gce_vms_replaced(new, plan)
    if vms is not None:
        # The run is the template's; the VMs keep its checkpoint folder.
        lead, old = vms
        new = old
    elif new["type"] == INSTANCE_TEMPLATE and _flex_group(plan) is not None:
        group = _flex_group(plan)
        lead = f"group `{_inline(group)}` is replaced {FLEX_GROUP_NOTE}, which relaunches"
    elif new["type"] == INSTANCE_TEMPLATE:
        group = _group_recreates_vms(plan)
        if group is None:
            return None
        lead = f"group `{_inline(group)}` (PROACTIVE update policy) recreates every VM, which relaunches"
    elif run_resource(new["type"]) is None:
        return None
    before, after = (_inline(checkpoint_dir(r)) for r in (old, new))
    run = run_resource(new["type"])
    tuning = run is not None and run.tuned is not None
    what = "tuning" if tuning else "training"
    if after is None:
        return f"{lead} {what}; the plan does not say where its checkpoints are"
    changed = _state_changes(old, new)
    if before == after:
        if tuning:
            if changed:
                # The trial's folder carries its settings' fingerprint
                # (trainstack.trainers.common.checkpoint.run_checkpoint_dir): new settings, new folders.
                return (
                    f"{lead} tuning; {', '.join(changed)} changed, so every trial starts at "
                    f"step 0 in a new `{after}-<settings>` folder"
                )
            return (
                f"{lead} tuning; each trial resumes from `{after}-<settings>` only "
                f"what the old job's trial of the same id wrote under the same settings"
            )
        if changed:
            return (
                f"{lead} training, but the new run refuses the checkpoints in `{after}` "
                f"(exit 2): {', '.join(changed)} changed; set a new `trainer.run_name` (a new "
                f"folder) or delete `{after}` to start fresh"
            )
        return f"{lead} training; resumes from the newest checkpoint in `{after}`"
    return (
        f"{lead} {what}; starts at step 0 unless `{after}` already holds a checkpoint "
        f"(the old run's are in `{before or 'an unknown folder'}`)"
    )

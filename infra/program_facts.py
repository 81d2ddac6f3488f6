"""A program's totals, quota and notes from the `facts` its components register.

Each compute component (`TpuPodSlice`, `A100Cluster`, `VertexTrainingJob`) and each
`RunSupervisor` registers its `facts` output (`trainstack.components.facts`): its cost, quota
and notes, computed from its own arguments by the functions a stack config's plan uses.
`program_totals` adds them up into the `summary`, `quota` and `notes` a stack plan of the
same resources shows (compute before supervisors, each kind by resource name, so two runs of
one program list them alike), and gives each compute component that runs your code its
"Your code" entry (`code_by_component`, by the component's name), the stack plan's `code`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from trainstack.components.facts import (
    QUOTA_GUARD_TARGET,
    RUN_LIMIT_KEY,
    STOPS_ON,
    SUPERVISOR_STOPS,
    SUPERVISOR_TARGET,
    is_facts,
    supervisor_usd_per_month,
)
from trainstack.infra.estimate import after_stop_note
from trainstack.infra.plan import ESTIMATE_NOTE, integral_numbers, unverified_quota_note
from trainstack.infra.targets import StillBilling

SUPERVISOR = SUPERVISOR_TARGET
"""The `target` of a `RunSupervisor`'s facts."""
QUOTA_GUARD = QUOTA_GUARD_TARGET
"""The `target` of a `QuotaGuard`'s facts."""
NOT_COMPUTE = (SUPERVISOR, QUOTA_GUARD)
"""The `target`s of facts that are no compute of their own."""
LOCAL = "local"
"""The `target` of a `LocalTrainingJob`'s facts."""
DOCS_PAGE = "docs/own-program.md"
NO_QUOTA_GUARD_NOTE = (
    "quota: no QuotaGuard in this program, so nothing checks the quota before `pulumi up` "
    "creates the compute; a shortfall shows as a failed create. Add one "
    "(trainstack.components.quota_guard.QuotaGuard, registered first, with the quota this "
    f"plan lists as its needs): {DOCS_PAGE}"
)


def no_supervisor_note(unsupervised: Iterable[Mapping[str, Any]]) -> str:
    """The plan's note on compute that no `RunSupervisor` of the program stops."""
    names = ", ".join(f"{item['component']} ({item['target']})" for item in unsupervised)
    return (
        f"run supervisor: none in this program stops its {names}: nothing stops the machines "
        "at the run's end or at its limits (max_run_seconds stops the trainer, not the "
        "machines), so they bill until `pulumi destroy`. Add a RunSupervisor "
        f"(trainstack.components.run_supervisor) for it: {DOCS_PAGE}"
    )


def is_compute(facts: Mapping[str, Any]) -> bool:
    """Whether `facts` are a compute component's (not a supervisor's or a quota guard's)."""
    return facts["target"] not in NOT_COMPUTE


def registered_facts(registered: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The facts among components' registered outputs (by URN): compute first, then
    supervisors, each by the component's URN."""
    # Serialized numbers are floats: counts and ids are integral again, as in a stack plan.
    found = [
        (not is_compute(outputs["facts"]), urn, integral_numbers(outputs["facts"]))
        for urn, outputs in registered.items()
        if is_facts(outputs.get("facts"))
    ]
    return [facts for _, _, facts in sorted(found, key=lambda item: item[:2])]


def facts_summary(facts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`tpu_chips`, `gpus`, `machines`, `hourly_usd` (rounded to cents) of the components,
    and `supervisor_usd_per_month` where a supervisor is among them, as
    `trainstack.infra.estimate.summarize` gives a stack's."""
    facts = list(facts)
    out: dict[str, Any] = {"tpu_chips": 0, "gpus": 0, "machines": 0, "hourly_usd": 0.0}
    for item in facts:
        for key in ("tpu_chips", "gpus", "machines", "hourly_usd"):
            out[key] += item[key]
    supervisors = [item["hourly_usd"] for item in facts if item["target"] == SUPERVISOR]
    if supervisors:
        out["supervisor_usd_per_month"] = supervisor_usd_per_month(sum(supervisors))
    out["hourly_usd"] = round(out["hourly_usd"], 2)
    return out


def facts_quota(facts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The quota the components need, one entry per quota id and location (two components
    drawing the same quota add up), in the order they first appear."""
    needs: dict[str, dict[str, Any]] = {}
    for item in facts:
        for need in item["quota"]:
            key = repr((need["service"], need["quota_id"], sorted(need["dimensions"].items())))
            if key in needs:
                needs[key]["needed"] += need["needed"]
            else:
                needs[key] = {**need, "dimensions": dict(need["dimensions"])}
    return list(needs.values())


def facts_notes(facts: Iterable[Mapping[str, Any]], quota: list[dict[str, Any]]) -> list[str]:
    """The plan's notes, in a stack plan's order: the estimate's, the quota guard's (or that
    there is none), each component's own, the quota ids that are unverified, the run limits'
    (with what a supervisor of that compute does then) and spend caps' (`limit_notes`), and,
    where a supervisor stops the compute, what bills after its stop. Compute that no
    supervisor stops gets a note saying so."""
    facts = list(facts)
    compute = [item for item in facts if is_compute(item)]
    guards = [item for item in facts if item["target"] == QUOTA_GUARD]
    # Per compute target, what its supervisors stop it on (`STOPS_ON`; facts made before
    # they said so: everything, as a stack's supervisor).
    stops_on: dict[str | None, set[str]] = {}
    for item in facts:
        if item["target"] == SUPERVISOR:
            on = item.get("stops_on", list(STOPS_ON))
            stops_on.setdefault(item.get("stops"), set()).update(on)
    stopped = {target for target, on in stops_on.items() if "end_uri" in on}
    notes = [ESTIMATE_NOTE]
    for item in guards:
        notes += [note for note in item["notes"] if note not in notes]
    # A local run draws no quota: a stack of one has no quota note either.
    if not guards and any(item["target"] != LOCAL for item in compute):
        notes.append(NO_QUOTA_GUARD_NOTE)
    for item in facts:
        notes += [note for note in item["notes"] if note not in notes]
    unverified = unverified_quota_note(quota)
    notes += [unverified] if unverified else []
    for item in facts:
        own = item.get("run_limit")
        if own is not None:
            limited = "max_run_seconds" in stops_on.get(item["target"], ())
            stop = f"; {SUPERVISOR_STOPS[item['target']]}" if limited else ""
            notes.append(f"{RUN_LIMIT_KEY}: {own}{stop}")
        notes += [note for note in item.get("limit_notes", []) if note not in notes]
    supervised = [item for item in compute if item["target"] in stopped]
    if supervised:
        after = [StillBilling(**e) for item in supervised for e in item.get("after_stop", [])]
        stoppable = sum(item.get("stoppable_hourly_usd", 0.0) for item in supervised)
        after_stop = after_stop_note(stoppable, after)
        notes += [after_stop] if after_stop else []
    blind = [item for item in compute if item["target"] in set(stops_on) - stopped]
    for item in blind:
        notes.append(no_run_end_note(item, stops_on[item["target"]]))
    unsupervised = [
        item
        for item in compute
        if item["target"] in SUPERVISOR_STOPS and item not in supervised and item not in blind
    ]
    notes += [no_supervisor_note(unsupervised)] if unsupervised else []
    return notes


def no_run_end_note(compute: Mapping[str, Any], stops_on: Iterable[str]) -> str:
    """The plan's note on compute whose `RunSupervisor` has no `run` end record: what it
    stops the machines on instead (`STOPS_ON`), and how to give it the run's end."""
    on = [STOPS_ON[key] for key in STOPS_ON if key in set(stops_on)]
    what = (
        f"it stops the machines only at {' or '.join(on)}; otherwise they bill until "
        "`pulumi destroy`"
        if on
        else "with nothing else in its `run`, it never stops the machines: they bill until "
        "`pulumi destroy`"
    )
    named = " ".join(str(v) for v in (compute["component"], compute.get("name")) if v)
    nodes, helper = RUN_TARGETS.get(compute["target"], ("target.node_count", None))
    where = f" with `target = {helper}(args)`" if helper else ""
    return (
        f"run supervisor: the RunSupervisor of {named} ({compute['target']}) has no `run` "
        f"with the run's end record, so it cannot see the run's end; {what}. To stop them at "
        f'the run\'s end, give it `"run": supervisor_run(target.run_record, {nodes}, ...)`'
        f"{where} (trainstack.components.run_supervisor): {DOCS_PAGE}"
    )


RUN_TARGETS: Final = {
    "gke": ("target.node_count", "supervised_compute"),
    "gce": ("target.node_count", "supervised_compute"),
    "tpu_gke": ("target.node_count", "supervised_slices"),
    "tpu": ("<the slice's hosts>", "slice_target"),
}
"""Per compute target, what `supervisor_run` counts the nodes from and the helper that
gives the `target` its record prefix (and `hourly_usd`) comes from, before the compute is
registered."""


def facts_code(facts: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The plan's "Your code" entries of the compute components given your code, by the
    component's Pulumi name (its class where its facts name none), in the facts' order."""
    return {
        str(item.get("name") or item["component"]): dict(item["code"])
        for item in facts
        if is_compute(item) and item.get("code")
    }


def program_totals(registered: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The plan's `summary`, `quota` and `notes` from the components' facts, or None when
    the program registers no component with facts."""
    facts = registered_facts(registered)
    if not facts:
        return None
    quota = facts_quota(facts)
    code = facts_code(facts)
    return {
        **({"code_by_component": code} if code else {}),
        "summary": facts_summary(facts),
        "quota": quota,
        "notes": facts_notes(facts, quota),
    }

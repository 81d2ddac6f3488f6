"""Offline sizing of a validated stack: accelerator totals, $/hour and quota needed.

Generic over the targets: each target's module (`trainstack.infra.targets`) sizes its own
compute (`Target.summary`, `CloudTarget.quota`, `Target.run_limit`) from
`trainstack.components.catalog` (machine shapes) and `trainstack.infra.catalog` (prices and
quota ids); `trainstack plan` prints the results. Prices are catalog ESTIMATES (us-central1
list prices, spot at the upper end of Google's documented discount range), not quotes. Quota
ids marked `verified: False` must be confirmed with `gcp.cloudquota.get_s_quota_infos`
before requesting increases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainstack.components.catalog.supervisor_region import supervisor_region
from trainstack.components.facts import (
    supervisor_hourly_usd,
    supervisor_region_note,
    supervisor_usd_per_month,
)
from trainstack.infra.targets import CloudTarget, target_of
from trainstack.trainers.common.run_records import NO_HEARTBEAT_S

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView
    from trainstack.infra.targets import StillBilling

__all__ = [
    "after_stop_note",
    "limit_problems",
    "limits_plan",
    "quota_needs",
    "spend_cap_text",
    "still_billing_note",
    "stoppable_hourly_usd",
    "summarize",
    "supervisor_hourly_usd",
    "supervisor_note",
    "unbounded_run_note",
]


def _round(usd: float) -> float:
    return round(usd, 2)


def supervisor_note(cfg: StackView) -> str | None:
    """The plan's note on the supervisor's region and what its monthly figure counts, or None
    without a supervisor (`trainstack.components.facts.supervisor_region_note`, which the
    `RunSupervisor` component's facts carry too)."""
    if not target_of(cfg).supervised or cfg.region is None:
        return None
    return supervisor_region_note(supervisor_region(cfg.region), cfg.region)


def stoppable_hourly_usd(cfg: StackView) -> float:
    """$/hour at list price, rounded to cents, of the compute the supervisor stops at the
    run's end (`Target.stoppable_hourly_usd`: the TPU slice; the GCE group or GKE GPU pool,
    without GKE's cluster fee and system node): what its spend count for
    `limits.max_total_usd` adds per hour of billing."""
    target = target_of(cfg)
    assert target.supervised, f"target {target.name} has no supervisor"
    return target.stoppable_hourly_usd(cfg)


def still_billing_note(cfg: StackView, stack: str) -> str | None:
    """The plan's note on what keeps billing after the supervisor's stop
    (`Target.still_billing_after_stop`), or None when nothing does or there is no
    supervisor."""
    target = target_of(cfg)
    if not target.supervised:
        return None
    return after_stop_note(
        target.stoppable_hourly_usd(cfg), target.still_billing_after_stop(cfg, stack)
    )


def after_stop_note(stoppable_hourly_usd: float, after: Sequence[StillBilling]) -> str | None:
    """The words of `still_billing_note` (a program's plan says them from its components'
    facts): the $/hour the stop ends, and what bills on."""
    if not after:
        return None
    return (
        f"the supervisor's stop at the run's end (or a limit) ends the compute's "
        f"${stoppable_hourly_usd:,.2f}/hour; still billing after it, outside its "
        "spend count: " + "; ".join(item.phrase() for item in after)
    )


def summarize(cfg: StackView) -> dict[str, Any]:
    """Totals for the plan: `tpu_chips`, `gpus`, `machines`, `hourly_usd`.

    `machines` counts TPU hosts, GPU nodes, Vertex replicas plus reducers, or local
    workers. `hourly_usd` is an estimate from catalog list prices (spot price when spot),
    rounded to cents; a local run costs 0. Hyperparameter tuning multiplies Vertex cost by
    the parallel trials. A `supervised` target adds its run supervisor's cost (and
    `supervisor_usd_per_month`).
    """
    target = target_of(cfg)
    out = target.summary(cfg)
    if target.supervised:
        supervisor = supervisor_hourly_usd()
        out["hourly_usd"] += supervisor
        # Too small to show in $/hour: the plan shows it per month as well.
        out["supervisor_usd_per_month"] = supervisor_usd_per_month(supervisor)
    out["hourly_usd"] = _round(out["hourly_usd"])
    return out


def quota_needs(cfg: StackView) -> list[dict[str, Any]]:
    """Quota the stack needs: `service`, `quota_id`, `dimensions`, `needed`, `verified`,
    `source` per entry. A local target needs none.

    TPU needs are counted in chips (the TPU API may count TensorCores for v4/v5p; the ids
    are unverified). GPU clusters need the Compute Engine A100 quota (preemptible when
    spot), the global GPU cap and A2 vCPUs; Vertex needs its own training quotas.
    """
    target = target_of(cfg)
    return target.quota(cfg) if isinstance(target, CloudTarget) else []


# --------------------------------------------------------------------------- limits


def limit_problems(cfg: StackView) -> list[str]:
    """`limits.max_hourly_usd` against the stack's estimated $/hour: one problem when the
    estimate is above the limit, in the project's `<key>: <what>; valid: <allowed>` shape."""
    limit = cfg.limits.max_hourly_usd
    if limit is None:
        return []
    hourly = summarize(cfg)["hourly_usd"]
    if hourly <= limit:
        return []
    problem = (
        f"limits.max_hourly_usd: the stack's estimated ${hourly:,.2f}/hour is above the "
        f"limit of ${limit:g}/hour; valid: a stack estimated at or below "
        f"${limit:g}/hour, or limits.max_hourly_usd >= {hourly:.2f}"
    )
    return [problem]


def spend_cap_text(cfg: StackView, cap: float) -> str:
    """How `limits.max_total_usd` is enforced (`trainstack.components.run_supervisor.
    spend_cap_text`, which the supervisor's facts use too), at the compute's stoppable
    $/hour."""
    from trainstack.components.run_supervisor import spend_cap_text as cap_text

    return cap_text(stoppable_hourly_usd(cfg), cap, cfg.limits.max_run_hours)


def limits_plan(cfg: StackView) -> dict[str, Any] | None:
    """The plan's `limits` entry, or None when the stack sets no limits: the limits, the
    estimate they were checked against, and how the run limit is enforced on this target."""
    limits = cfg.limits
    if limits.max_hourly_usd is None and limits.max_run_hours is None and not limits.max_total_usd:
        return None
    out: dict[str, Any] = {
        "max_hourly_usd": limits.max_hourly_usd,
        "max_run_hours": limits.max_run_hours,
    }
    if limits.max_total_usd is not None:
        # Only where set, so the plans of stacks without one keep their shape.
        out["max_total_usd"] = limits.max_total_usd
        out["spend_cap"] = spend_cap_text(cfg, limits.max_total_usd)
    seconds = limits.max_run_seconds
    if seconds is not None:
        enforced, how = target_of(cfg).run_limit(cfg, seconds)
        out["max_run_seconds"] = seconds
        out["run_limit_enforced"] = enforced
        out["run_limit"] = how
    return out


def unbounded_run_note(cfg: StackView) -> str | None:
    """The plan's note on a supervised target (tpu, gke, gce) whose stack sets neither
    `limits.max_run_hours` nor `limits.max_total_usd`: what bounds its run then, and what
    does not. A node's heartbeat says its launcher is alive, not that training progresses,
    and a node that starts again reports again (`trainers.common.run_records`), so a hung
    trainer or a restart loop (a GKE pod exiting 4 or 143 is replaced without counting,
    `KubernetesTrainingJob`'s podFailurePolicy) is stopped by no one. None elsewhere."""
    target, limits = target_of(cfg), cfg.limits
    if not target.supervised or {limits.max_run_hours, limits.max_total_usd} != {None}:
        return None
    return (
        f"{target.name}: no limits.max_run_hours or limits.max_total_usd, so only the run's "
        "end stops this run: the run supervisor stops the compute when rank 0 finishes, when a "
        f"failure is final (an exit {target.name} never retries, a setup stage's last attempt) "
        f"or when no node has reported for {NO_HEARTBEAT_S // 60} minutes; a trainer that hangs "
        "while its node still reports, or nodes that keep restarting (each start reports "
        "again), bill until `pulumi destroy`; set limits.max_run_hours (a bound on the run's "
        "time) or limits.max_total_usd (a cap on its spend)"
    )

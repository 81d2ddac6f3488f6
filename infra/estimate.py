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

from typing import TYPE_CHECKING, Any

from trainstack.infra.targets import CloudTarget, target_of

if TYPE_CHECKING:
    from trainstack.infra.config import StackConfig

__all__ = [
    "limit_problems",
    "limits_plan",
    "quota_needs",
    "summarize",
]


def _round(usd: float) -> float:
    return round(usd, 2)


def summarize(cfg: StackConfig) -> dict[str, Any]:
    """Totals for the plan: `tpu_chips`, `gpus`, `machines`, `hourly_usd`.

    `machines` counts TPU hosts, GPU nodes, Vertex replicas plus reducers, or local
    workers. `hourly_usd` is an estimate from catalog list prices (spot price when spot),
    rounded to cents; a local run costs 0. Hyperparameter tuning multiplies Vertex cost by
    the parallel trials.
    """
    out = target_of(cfg).summary(cfg)
    out["hourly_usd"] = _round(out["hourly_usd"])
    return out


def quota_needs(cfg: StackConfig) -> list[dict[str, Any]]:
    """Quota the stack needs: `service`, `quota_id`, `dimensions`, `needed`, `verified`,
    `source` per entry. A local target needs none.

    TPU needs are counted in chips (the TPU API may count TensorCores for v4/v5p; the ids
    are unverified). GPU clusters need the Compute Engine A100 quota (preemptible when
    spot), the global GPU cap and A2 vCPUs; Vertex needs its own training quotas.
    """
    target = target_of(cfg)
    return target.quota(cfg) if isinstance(target, CloudTarget) else []


# --------------------------------------------------------------------------- limits


def limit_problems(cfg: StackConfig) -> list[str]:
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


def limits_plan(cfg: StackConfig) -> dict[str, Any] | None:
    """The plan's `limits` entry, or None when the stack sets no limits: the limits, the
    estimate they were checked against, and how the run limit is enforced on this target."""
    limits = cfg.limits
    if limits.max_hourly_usd is None and limits.max_run_hours is None:
        return None
    out: dict[str, Any] = {
        "max_hourly_usd": limits.max_hourly_usd,
        "max_run_hours": limits.max_run_hours,
    }
    seconds = limits.max_run_seconds
    if seconds is not None:
        enforced, how = target_of(cfg).run_limit(cfg, seconds)
        out["max_run_seconds"] = seconds
        out["run_limit_enforced"] = enforced
        out["run_limit"] = how
    return out

"""A run supervisor's own cost and the plan's notes on it (what its account can reach, where
it runs, how its spend cap holds, what it stops the compute on): the part of its facts
(`trainstack.components.facts.supervisor_facts`) the stack config's plan uses too
(`trainstack.infra.estimate`, `trainstack.infra.targets`); `facts` re-exports every name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from trainstack.components.catalog.supervisor_iam import (
    CONDITION_NOTES,
    CUSTOM_ROLE_LIMIT,
    DELETED_ROLE_DAYS,
    GROUP_REACH,
    REACH,
    role_count,
)
from trainstack.components.catalog.supervisor_region import price_tier
from trainstack.trainers.common.run_records import NO_HEARTBEAT_S

# One Cloud Scheduler job and one Cloud Run functions call every 2 minutes.
SCHEDULER_JOB_USD_PER_31_DAYS = 0.10
"""https://cloud.google.com/scheduler/pricing: "A job is billed $0.10/job/31 days"; "Each
Google billing account gets 3 jobs per month free" (not subtracted here: shared by the
billing account)."""
RUN_VCPU_SECOND_USD = 0.000024
RUN_GIB_SECOND_USD = 0.0000025
RUN_REQUEST_USD = 0.40 / 1_000_000
RUN_PRICE_TIER = 1
"""Cloud Run request-based billing, Tier 1 (https://cloud.google.com/run/pricing; Cloud Run
functions, formerly Cloud Functions 2nd gen, are billed as Cloud Run, per
https://cloud.google.com/functions/pricing-1stgen). The monthly free tier (2 million
requests, 180,000 vCPU-seconds, 360,000 GiB-seconds per billing account) covers a
supervisor; not subtracted. Per-second figures: verified: False (the table was not in the
page text read)."""
SUPERVISOR_CALLS_PER_HOUR = 30
SUPERVISOR_CALL_S = 2.0
"""Assumed billed time per check (three TPU and GCS round trips, rounded up to 100 ms)."""
SUPERVISOR_VCPU = 0.167
SUPERVISOR_GIB = 0.25
"""256 MiB functions get 0.167 vCPU (https://cloud.google.com/functions/docs/configuring/memory)."""
SUPERVISOR_EXCLUDED = "Artifact Registry storage of its built images and Cloud Build minutes"
"""Each deploy of the function builds an image with Cloud Build and keeps it in Artifact
Registry (https://cloud.google.com/functions/docs/building: the project is billed for Cloud
Build, Cloud Storage and Artifact Registry); not priced here."""
HOURS_PER_MONTH = 730
CHECK_INTERVAL_S: Final = 120  # how late a check can see
STOP_GRACE_S: Final = 300
"""`supervisor/main.py`'s wait for the trainer's checkpoint after a stop request (the bundle
cannot import this module; a test holds the two equal)."""


def supervisor_hourly_usd() -> float:
    """$/hour of a run supervisor at list price."""
    per_call = SUPERVISOR_CALL_S * (
        SUPERVISOR_VCPU * RUN_VCPU_SECOND_USD + SUPERVISOR_GIB * RUN_GIB_SECOND_USD
    )
    function = SUPERVISOR_CALLS_PER_HOUR * (per_call + RUN_REQUEST_USD)
    return function + SCHEDULER_JOB_USD_PER_31_DAYS / (31 * 24)


def supervisor_usd_per_month(hourly_usd: float) -> float:
    """A supervisor's $/hour per month, rounded to cents (too small to show per hour)."""
    return round(hourly_usd * HOURS_PER_MONTH, 2)


def supervisor_region_note(region: str, compute_region: str) -> str:
    """The plan's note on where a supervisor in `region` runs, beside compute in
    `compute_region`, and what its monthly figure counts."""
    tier = price_tier(region)
    cost = f"Cloud Run Tier {RUN_PRICE_TIER} prices"
    if tier != RUN_PRICE_TIER:
        cost += f" (its region is Tier {tier}, whose prices are not in the catalog)"
    where = f"runs in {region}"
    if region != compute_region:
        where += (
            f", not the stack's {compute_region}, where Cloud Run functions and Cloud Scheduler "
            "are not both listed (the APIs it calls are global)"
        )
    return (
        f"run supervisor: {where}; supervisor_usd_per_month is at {cost} and leaves out "
        f"{SUPERVISOR_EXCLUDED}"
    )


def reach_note(kind: str, recover: bool, project: str | None, autoscaled: bool = False) -> str:
    """The plan's note on what the supervisor's account can reach beyond the stack, and how
    far IAM conditions are known to hold its compute grant (`catalog.supervisor_iam.REACH`,
    `CONDITION_NOTES`); `autoscaled`: a GKE supervisor that deletes a flex-start pool's VMs
    (`GROUP_REACH`)."""
    verbs = "get, delete and create" if recover else "get and delete"
    reach = GROUP_REACH if autoscaled else REACH[kind]
    count = role_count(kind)
    roles = "2 custom roles, once" if count > 1 else "custom role, once"
    return (
        f"run supervisor reach: its account can {reach.format(verbs=verbs, project=project)}: "
        f"{CONDITION_NOTES[kind]}; "
        "its grant on the checkpoint bucket holds for the run records (trainstack-run-*) "
        "only, and it alone writes its state bucket. Run each stack in a project of its own "
        f"to keep the supervisor to this stack's compute. Its {roles} deleted with "
        f"the stack, still count{'' if count > 1 else 's'} toward the project's limit of "
        f"{CUSTOM_ROLE_LIMIT} custom roles for {DELETED_ROLE_DAYS} days after, and each deploy "
        "after a destroy makes new ones"
    )


def spend_cap_text(hourly: float, cap: float, max_run_hours: float | None) -> str:
    """How a spend cap of `cap` is enforced on compute the supervisor counts at `hourly`
    $/hour, with what it can overshoot by: a check can come up to `CHECK_INTERVAL_S` late and
    the trainer gets `STOP_GRACE_S` to save (plus the time Google takes to delete the
    machines, not counted)."""
    late_s = CHECK_INTERVAL_S + STOP_GRACE_S
    text = (
        f"the supervisor counts the compute's spend at ${hourly:,.2f}/hour (the catalog's "
        f"list-price estimate) from its first check on, across restarts and recoveries; at "
        f"${cap:,.2f} it asks the trainer to save and stop, then stops the compute. It can go "
        f"past the cap by up to {late_s // 60} minutes of compute (a check every "
        f"{CHECK_INTERVAL_S // 60} minutes, {STOP_GRACE_S // 60} minutes to save), about "
        f"${hourly * late_s / 3600:,.2f}, plus the deletion"
    )
    if max_run_hours is not None and max_run_hours * hourly < cap:
        text += (
            f"; with limits.max_run_hours {max_run_hours:g} the run stops at about "
            f"${max_run_hours * hourly:,.2f}, before the cap"
        )
    return text


STOPS_ON: Final = {
    "end_uri": "the run's end",
    "alive_uri": f"no node reporting for {NO_HEARTBEAT_S // 60} minutes",
    "max_run_seconds": "its run limit (run.max_run_seconds)",
    "max_total_usd": "its spend cap (run.max_total_usd)",
}
"""What a supervisor stops the compute on, by the key of its `run` that turns it on
(`components/supervisor/main.py`, `end_of_run`: the end record, else `_limit`); without
`end_uri` it cannot see the run's end."""


def supervisor_stops_on(run: Mapping[str, Any]) -> list[str]:
    """The `STOPS_ON` keys a supervisor's `run` sets (`max_total_usd` with `hourly_usd`)."""
    keys = [key for key in STOPS_ON if run.get(key) is not None]
    return [k for k in keys if k != "max_total_usd" or run.get("hourly_usd") is not None]

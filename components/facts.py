"""What a compute component tells trainstack's CLI about itself: its `facts`.

Every compute component (`TpuPodSlice`, `A100Cluster`) and the `RunSupervisor` computes, from
its own arguments alone, one JSON-able dict and keeps it as its `facts` attribute and its
registered output `facts`:

    {
        "trainstack_facts": 1,          # FACTS_VERSION: the shape of this dict
        "component": "TpuPodSlice",     # the component's class
        "target": "tpu",                # tpu | gke | gce | supervisor
        "tpu_chips": 16, "gpus": 0, "machines": 4,
        "hourly_usd": 7.68,             # catalog list price, unrounded (spot when spot)
        "quota": [{"service", "quota_id", "dimensions", "needed", "verified"}, ...],
        "notes": ["..."],               # the plan's notes on it
        "status": {...},                # where its state is read (target-specific)
        "logs": {...},                  # which Cloud Logging entries are its trainer's
    }

`trainstack plan|plan-diff|quota --program DIR --stack NAME` run a program under mocks and add
the facts of every component it registers into the totals, quota and notes a stack plan shows
(`trainstack.infra.program_facts`); `trainstack status|logs --program DIR --stack NAME` read
them back from the deployed stack (export them: `pulumi.export("tpu", tpu.facts)`, then save
`pulumi stack output --json`; or a `pulumi stack export`, whose checkpoint keeps every
component's registered outputs).

The arithmetic here is the one the stack config's plan uses too (`trainstack.infra.targets`
call the same functions), so a program and a stack of the same resources plan the same
numbers. Prices and quota ids: `trainstack.components.catalog.prices`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from trainstack.components.catalog import prices
from trainstack.components.catalog.machines import GKE_SYSTEM_NODE_MACHINE, MACHINES
from trainstack.components.catalog.supervisor_iam import CONDITION_NOTES, REACH
from trainstack.components.catalog.supervisor_region import price_tier
from trainstack.components.catalog.tpu import TpuSlice

FACTS_KEY: Final = "trainstack_facts"
"""The key that marks a dict as a component's facts; its value is `FACTS_VERSION`."""
FACTS_VERSION: Final = 1
QUOTA_FIELDS: Final = ("service", "quota_id", "dimensions", "needed", "verified")
"""What a quota need shows in a plan and in facts (its `source` stays in the catalog)."""


def make_facts(
    component: str,
    target: str,
    *,
    tpu_chips: int = 0,
    gpus: int = 0,
    machines: int = 0,
    hourly_usd: float = 0.0,
    quota: Sequence[Mapping[str, Any]] = (),
    notes: Sequence[str] = (),
    status: Mapping[str, Any] | None = None,
    logs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One component's facts (module docstring)."""
    return {
        FACTS_KEY: FACTS_VERSION,
        "component": component,
        "target": target,
        "tpu_chips": tpu_chips,
        "gpus": gpus,
        "machines": machines,
        "hourly_usd": hourly_usd,
        "quota": [{key: need[key] for key in QUOTA_FIELDS} for need in quota],
        "notes": list(notes),
        "status": dict(status or {}),
        "logs": dict(logs or {}),
    }


def is_facts(value: Any) -> bool:
    """Whether `value` is a component's facts of a version this trainstack reads."""
    return isinstance(value, Mapping) and value.get(FACTS_KEY) == FACTS_VERSION


def region_of(zone: str) -> str:
    """The region of a zone: a zone's name is its region's and a letter,
    `<region>-<zone letter>` (https://cloud.google.com/compute/docs/regions-zones: "zone names
    ... us-central1-a")."""
    return zone.rsplit("-", 1)[0]


# --------------------------------------------------------------------------- TPU slice


def tpu_hourly_usd(found: TpuSlice, spot: bool) -> float:
    """$/hour of a slice at list price (spot price when spot), unrounded."""
    return found.chips * prices.TPU_CHIP_PRICES[found.generation].hourly(spot)


def tpu_summary(found: TpuSlice, provisioning: str) -> dict[str, Any]:
    """`tpu_chips`, `gpus`, `machines` (hosts) and `hourly_usd` of a slice."""
    hourly = tpu_hourly_usd(found, provisioning == "spot")
    return {"tpu_chips": found.chips, "gpus": 0, "machines": found.hosts, "hourly_usd": hourly}


def tpu_quota(found: TpuSlice, provisioning: str, zone: str) -> list[dict[str, Any]]:
    """The TPU quota a slice draws, in chips. Queued resources draw from on-demand quota
    unless they are spot."""
    tier: prices.TpuTier = {"spot": "spot", "reserved": "reserved"}.get(  # type: ignore[assignment]
        provisioning, "on-demand"
    )
    spec = prices.TPU_QUOTAS[(found.generation, tier)]
    return [prices.quota_need(spec, {"zone": zone}, found.chips)]


# --------------------------------------------------------------------------- A100 cluster


def a100_nodes_hourly_usd(machine_type: str, node_count: int, spot: bool) -> float:
    """$/hour of the GPU nodes at list price, unrounded (what the supervisor stops)."""
    return node_count * prices.MACHINE_PRICES[machine_type].hourly(spot)


def gke_extra_hourly_usd() -> float:
    """$/hour of what a GKE cluster runs beside its GPU nodes: the cluster fee and the system
    node, on-demand (DNS must survive a spot reclaim of the GPU nodes)."""
    system = prices.MACHINE_PRICES[GKE_SYSTEM_NODE_MACHINE].hourly(False)
    return prices.GKE_CLUSTER_FEE_USD + system


def a100_summary(backend: str, machine_type: str, node_count: int, spot: bool) -> dict[str, Any]:
    """`tpu_chips`, `gpus`, `machines` (GKE's system node counted) and `hourly_usd`."""
    gke = backend == "gke"
    return {
        "tpu_chips": 0,
        "gpus": node_count * MACHINES[machine_type].gpus,
        "machines": node_count + (1 if gke else 0),
        "hourly_usd": a100_nodes_hourly_usd(machine_type, node_count, spot)
        + (gke_extra_hourly_usd() if gke else 0.0),
    }


def a100_quota(
    backend: str, machine_type: str, node_count: int, spot: bool, region: str
) -> list[dict[str, Any]]:
    """The Compute Engine quota of the GPU nodes (A100s, preemptible when spot; the global GPU
    cap; A2 vCPUs) and, on GKE, the system node's vCPUs."""
    machine = MACHINES[machine_type]
    assert machine.gpu_model is not None
    gpus = node_count * machine.gpus
    needs = [
        prices.quota_need(
            prices.COMPUTE_QUOTAS[(machine.gpu_model, spot)], {"region": region}, gpus
        ),
        prices.quota_need(prices.GPUS_ALL_REGIONS_QUOTA, {}, gpus),
    ]
    if machine_type.startswith("a2-"):
        # No vCPU quota of the A3 and A4 families is in a stored source.
        needs.append(
            prices.quota_need(prices.A2_CPUS_QUOTA, {"region": region}, machine.vcpus * node_count)
        )
    if backend == "gke":
        system = MACHINES[GKE_SYSTEM_NODE_MACHINE]
        needs.append(prices.quota_need(prices.CPUS_QUOTA, {"region": region}, system.vcpus))
    return needs


# --------------------------------------------------------------------------- run supervisor

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


def reach_note(kind: str, recover: bool, project: str | None) -> str:
    """The plan's note on what the supervisor's account can reach beyond the stack, and how
    far IAM conditions are known to hold its compute grant (`catalog.supervisor_iam.REACH`,
    `CONDITION_NOTES`)."""
    verbs = "get, delete and create" if recover else "get and delete"
    return (
        f"run supervisor reach: its account can {REACH[kind].format(verbs=verbs, project=project)}: "
        f"{CONDITION_NOTES[kind]}; "
        "its grant on the checkpoint bucket holds for the run records (trainstack-run-*) "
        "only, and it alone writes its state bucket. Run each stack in a project of its own "
        "to keep the supervisor to this stack's compute"
    )

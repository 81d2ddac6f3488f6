"""What a compute component tells trainstack's CLI about itself: its `facts`.

Every compute component (`TpuPodSlice`, `TpuGkeSlices`, `A100Cluster`, `VertexTrainingJob`,
`LocalTrainingJob`), the `RunSupervisor` and the `QuotaGuard` computes, from
its own arguments alone, one JSON-able dict and keeps it as its `facts` attribute and its
registered output `facts`:

    {
        "trainstack_facts": 1,          # FACTS_VERSION: the shape of this dict
        "component": "TpuPodSlice",     # the component's class
        "name": "acme-tpu",             # its Pulumi name (compute; `status --component NAME`)
        "target": "tpu",                # tpu | tpu_gke | gke | gce | vertex | local | supervisor
        "tpu_chips": 16, "gpus": 0, "machines": 4,
        "hourly_usd": 7.68,             # catalog list price, unrounded (spot when spot)
        "quota": [{"service", "quota_id", "dimensions", "needed", "verified"}, ...],
        "notes": ["..."],               # the plan's notes on it
        "limit_notes": ["..."],         # its spend cap's (after the others)
        "run_limit": "...",             # what the compute does at its max_run_seconds, or None
        "stops": "tpu",                 # a supervisor's: the target of the compute it stops
        "stoppable_hourly_usd": 7.68,   # what a supervisor stops of it (compute; rounded)
        "after_stop": [{...}],          # what bills after that stop (`StillBilling`'s fields)
        "status": {...},                # where its state is read (target-specific)
        "logs": {...},                  # which Cloud Logging entries are its trainer's
        "code": {...},                  # given your code: the plan's "Your code" entry
    }

`trainstack plan|plan-diff|quota --program DIR --stack NAME` run a program under mocks and add
the facts of every component it registers into the totals, quota and notes a stack plan shows
(`trainstack.infra.program_facts`); `trainstack status|logs --program DIR --stack NAME` read
them back from the deployed stack (export them: `pulumi.export("tpu", tpu.facts)`, then save
`pulumi stack output --json`; or a `pulumi stack export`, whose checkpoint keeps every
component's registered outputs). A note that depends on another component comes from that
component's facts: what a supervisor does at a run limit (`SUPERVISOR_STOPS`) only where one of
the compute's target is registered, the quota check's only where a `QuotaGuard` is; a program
without them is told so (`trainstack.infra.program_facts`).

The arithmetic here is the one the stack config's plan uses too (`trainstack.infra.targets`
call the same functions), so a program and a stack of the same resources plan the same
numbers. Prices and quota ids: `trainstack.components.catalog.prices`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import pulumi

# A supervisor's cost and notes, which the stack config's plan uses too, re-exported here.
from trainstack.components._supervisor_notes import (  # noqa: F401 (re-exported)
    CHECK_INTERVAL_S,
    HOURS_PER_MONTH,
    RUN_GIB_SECOND_USD,
    RUN_PRICE_TIER,
    RUN_REQUEST_USD,
    RUN_VCPU_SECOND_USD,
    SCHEDULER_JOB_USD_PER_31_DAYS,
    STOP_GRACE_S,
    STOPS_ON,
    SUPERVISOR_CALL_S,
    SUPERVISOR_CALLS_PER_HOUR,
    SUPERVISOR_EXCLUDED,
    SUPERVISOR_GIB,
    SUPERVISOR_VCPU,
    reach_note,
    spend_cap_text,
    supervisor_hourly_usd,
    supervisor_region_note,
    supervisor_stops_on,
    supervisor_usd_per_month,
)
from trainstack.components.catalog import billing, prices
from trainstack.components.catalog.gpu_families import (
    FLEX_START_DISCOUNT_NOTE,
    VERTEX_FLEX_START_QUOTA_NOTE,
)
from trainstack.components.catalog.machines import GKE_SYSTEM_NODE_MACHINE, MACHINES
from trainstack.components.catalog.tpu import TpuSlice
from trainstack.trainers.common.contract import CHECKPOINT_DIR_ENV

FACTS_KEY: Final = "trainstack_facts"
"""The key that marks a dict as a component's facts; its value is `FACTS_VERSION`."""
FACTS_VERSION: Final = 1
SUPERVISOR_TARGET: Final = "supervisor"
"""The `target` of a `RunSupervisor`'s facts."""
QUOTA_GUARD_TARGET: Final = "quota_guard"
"""The `target` of a `QuotaGuard`'s facts."""
QUOTA_FIELDS: Final = ("service", "quota_id", "dimensions", "needed", "verified")
"""What a quota need shows in a plan and in facts (its `source` stays in the catalog)."""


def make_facts(
    component: str,
    target: str,
    *,
    name: str | None = None,
    tpu_chips: int = 0,
    gpus: int = 0,
    machines: int = 0,
    hourly_usd: float = 0.0,
    quota: Sequence[Mapping[str, Any]] = (),
    notes: Sequence[str] = (),
    limit_notes: Sequence[str] = (),
    run_limit: str | None = None,
    stops: str | None = None,
    stoppable_hourly_usd: float = 0.0,
    after_stop: Sequence[Mapping[str, Any]] = (),
    status: Mapping[str, Any] | None = None,
    logs: Mapping[str, Any] | None = None,
    code: Mapping[str, Any] | None = None,
    stops_on: Sequence[str] | None = None,
) -> dict[str, Any]:
    """One component's facts (module docstring); `code` only where the compute runs your
    code (`trainstack.components.code_summary`)."""
    return {
        FACTS_KEY: FACTS_VERSION,
        "component": component,
        "name": name,
        "target": target,
        "tpu_chips": tpu_chips,
        "gpus": gpus,
        "machines": machines,
        "hourly_usd": hourly_usd,
        "quota": [{key: need[key] for key in QUOTA_FIELDS} for need in quota],
        "notes": list(notes),
        "limit_notes": list(limit_notes),
        # A compute's own part of its run limit's note (`run_limit_own_text`); a plan adds
        # what a supervisor of its target does then (`SUPERVISOR_STOPS`).
        "run_limit": run_limit,
        # A supervisor's: the `target` of the compute it stops (`KIND_TARGETS`).
        "stops": stops,
        "stoppable_hourly_usd": stoppable_hourly_usd,
        "after_stop": [dict(item) for item in after_stop],
        "status": dict(status or {}),
        "logs": dict(logs or {}),
        **({"code": dict(code)} if code is not None else {}),
        # A supervisor's: what it stops the compute on, from its `run` (`STOPS_ON`).
        **({"stops_on": list(stops_on)} if stops_on is not None else {}),
    }


def deployed_facts(
    make: Callable[[Sequence[Any]], dict[str, Any]],
    values: Sequence[pulumi.Input[Any]],
    placeholders: Sequence[Any],
) -> dict[str, Any]:
    """A component's facts whose cost, quota and notes are plain values and whose `status` and
    `logs` are Outputs of `values` (names and folders known only after deploy).

    `make(values)` builds the facts; only its `status` and `logs` may depend on `values`, so
    the rest is `make(placeholders)`, known in a preview even where a value is not (an
    autonamed bucket's URL): the plan keeps its totals, quota and notes. Registered as an
    output, the engine keeps the known parts of this dict as they are."""
    full = pulumi.Output.all(*values).apply(make)
    return {
        **make(placeholders),
        "status": full.apply(lambda facts: facts["status"]),
        "logs": full.apply(lambda facts: facts["logs"]),
    }


def is_facts(value: Any) -> bool:
    """Whether `value` is a component's facts of a version this trainstack reads."""
    return isinstance(value, Mapping) and value.get(FACTS_KEY) == FACTS_VERSION


def region_of(zone: str) -> str:
    """The region of a zone: a zone's name is its region's and a letter,
    `<region>-<zone letter>` (https://cloud.google.com/compute/docs/regions-zones: "zone names
    ... us-central1-a")."""
    return zone.rsplit("-", 1)[0]


def checkpoint_dir_of(node_args: Sequence[str]) -> str | None:
    """Where your code's checkpoints go: the run contract's `TRAINSTACK_CHECKPOINT_DIR` among
    `node_args`' `--env=` options (`trainstack.trainers.common.user_code.node_args`), or None."""
    prefix = f"--env={CHECKPOINT_DIR_ENV}="
    options = list(node_args)[: list(node_args).index("--")] if "--" in node_args else node_args
    found = [arg.removeprefix(prefix) for arg in options if arg.startswith(prefix)]
    return found[-1] if found else None


# --------------------------------------------------------------------------- quota guard

QUOTA_OFFLINE_NOTE: Final = (
    "quota limits are not read offline; QuotaGuard reads them during `pulumi preview` "
    "and `pulumi up` and stops the deployment before anything is created on a shortfall."
)


def quota_guard_facts() -> dict[str, Any]:
    """A `QuotaGuard`'s facts: no cost or quota of its own (the compute's facts carry the
    quota it checks), the plan's note on when it reads the limits."""
    return make_facts("QuotaGuard", QUOTA_GUARD_TARGET, notes=[QUOTA_OFFLINE_NOTE])


# --------------------------------------------------------------------------- limits


RUN_LIMIT_KEY: Final = "limits.max_run_hours"
SPEND_CAP_KEY: Final = "limits.max_total_usd"


def run_limit_own_text(target: str, seconds: int, flex_start: bool = False) -> str:
    """What the compute itself does at a run limit of `seconds` on `target` (tpu, gke, gce):
    it stops the trainer (or fails the Job), not the machines; a gke flex-start pool's nodes
    end themselves instead (`flex_start`)."""
    if target == "tpu":
        return (
            f"enforced by the TPU startup script: it stops the trainer {seconds}s after the "
            "run's first start (TpuPodSlice max_run_seconds)"
        )
    if target == "gke" and flex_start:
        return (
            f"each flex-start node's max_run_duration {seconds}s (no Job activeDeadlineSeconds: "
            "the Job waits for its nodes, and the wait must not count)"
        )
    if target == "gke":
        return f"GKE Job activeDeadlineSeconds {seconds}"
    return (
        f"the VMs' startup script stops the trainer {seconds}s after the run's first "
        "start (A100Cluster max_run_seconds)"
    )


SUPERVISOR_STOPS: Final = {
    "tpu": "the Cloud TPU API has no run limit, so the supervisor then deletes the slice",
    "gke": "then the supervisor sets the GPU node pool to 0 nodes",
    "gce": "then the supervisor deletes the instance group's VMs",
    "tpu_gke": (
        "the run supervisor asks the trainer to save and stop at that time after its first "
        "sight of the slices billing, then sets their node pools to 0 nodes"
    ),
}
"""What a run supervisor does to the compute of a `target` after its run limit."""
KIND_TARGETS: Final = {
    "node": "tpu",
    "queued": "tpu",
    "mig": "gce",
    "node_pool": "gke",
    "node_pools": "tpu_gke",
}
"""The compute `target` a `RunSupervisor` of each kind stops."""


def run_limit_text(target: str, seconds: int, flex_start: bool = False) -> str:
    """How a run limit of `seconds` is enforced on a supervised `target` (tpu, gke, gce), in
    the plan's words (the component's `max_run_seconds`; a stack's `limits.max_run_hours`)."""
    return f"{run_limit_own_text(target, seconds, flex_start)}; {SUPERVISOR_STOPS[target]}"


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


def tpu_after_stop(
    found: TpuSlice, provisioning: str, reservation: str | None, zone: str
) -> list[dict[str, Any]]:
    """What bills after a supervisor deleted the slice (`StillBilling`'s fields): the TPU
    reservation it consumed, if any (reserved provisioning, or a queued resource's
    `reservation`)."""
    if provisioning == "reserved":
        # A TPU VM created directly consumes any matching reservation; it names none.
        what = f"the TPU reservation the slice used (any matching one in {zone})"
    elif reservation == "-":
        what = f"the TPU reservation the queued resource used (any of the project's in {zone})"
    elif reservation is not None:
        where = "" if reservation.startswith("projects/") else f" in {zone}"
        what = f"reservation {reservation}{where}"
    else:
        return []
    # Not the stack's: it bills after the slice is deleted, until its period ends or it
    # is deleted (billing.TPU_RESERVATION_BILLS_UNTIL_ENDED, inferred). Reserved TPUs
    # cost less than on-demand, so the on-demand price is the most it bills.
    return [
        {
            "what": what,
            "hourly_usd": round(tpu_hourly_usd(found, False), 2),
            "until": "its period ends or it is deleted",
            "ours": False,
            "basis": (
                f"the slice's {found.chips} {found.generation} chips at on-demand list price, "
                "the most it costs"
            ),
            "verified": billing.TPU_RESERVATION_BILLS_UNTIL_ENDED_VERIFIED,
        }
    ]


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


def a100_after_stop(
    machine_type: str, node_count: int, reservation: str | None, zone: str
) -> list[dict[str, Any]]:
    """What bills after a supervisor stopped the GPU nodes (`StillBilling`'s fields): the
    reservation they consumed, if any."""
    if reservation is None:
        return []
    # The reservation is not the stack's: with the nodes gone it still bills its VMs,
    # at on-demand rates (billing.RESERVATION_BILLS_UNTIL_DELETED; never spot: spot with a
    # reservation is refused). At least this stack's nodes' worth.
    price = prices.MACHINE_PRICES[machine_type].hourly(False)
    return [
        {
            "what": f"reservation {reservation} in {zone}",
            "hourly_usd": round(node_count * price, 2),
            "until": "it is deleted",
            "ours": False,
            "basis": (
                f"the {node_count} x {machine_type} this stack used, at on-demand list price"
            ),
            "verified": billing.RESERVATION_BILLS_UNTIL_DELETED_VERIFIED,
        }
    ]


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


def gke_cluster_after_stop(stack: str) -> dict[str, Any]:
    """What of a GKE cluster bills after its supervisor emptied the GPU pool (`StillBilling`'s
    fields): the cluster and its system node, until the stack is destroyed
    (billing.GKE_CLUSTER_BILLS_UNTIL_DELETED)."""
    return {
        "what": "GKE cluster fee and system node",
        "hourly_usd": round(gke_extra_hourly_usd(), 2),
        "until": f"`pulumi destroy -s {stack}`",
        "ours": True,
        # The credit is the billing account's: the estimate does not subtract it.
        "basis": (
            f"the GKE free tier's ${billing.GKE_FREE_TIER_USD_PER_MONTH:.2f} monthly credit "
            f"per billing account may cover one zonal cluster's "
            f"${prices.GKE_CLUSTER_FEE_USD:.2f}/hour fee"
        ),
        "verified": billing.GKE_CLUSTER_BILLS_UNTIL_DELETED_VERIFIED,
    }


# --------------------------------------------------------------------------- Vertex AI job


def vertex_summary(
    machine_type: str,
    replica_count: int,
    reducers: int,
    reducer_machine: str,
    spot: bool,
    trials: int = 1,
) -> dict[str, Any]:
    """`tpu_chips`, `gpus`, `machines` (replicas and reducers) and `hourly_usd` of a Vertex
    AI job at list price with Vertex's training markup, unrounded; `trials`: a tuning job's
    parallel trials, each a full copy of the job's worker pools."""
    hourly = replica_count * prices.MACHINE_PRICES[machine_type].hourly(spot)
    if reducers:
        hourly += reducers * prices.MACHINE_PRICES[reducer_machine].hourly(spot)
    out: dict[str, Any] = {
        "tpu_chips": 0,
        "gpus": replica_count * MACHINES[machine_type].gpus,
        "machines": replica_count + reducers,
        "hourly_usd": hourly * prices.VERTEX_TRAINING_MARKUP,
    }
    return {key: value * trials for key, value in out.items()}


def vertex_quota(
    machine_type: str,
    replica_count: int,
    reducers: int,
    reducer_machine: str,
    spot: bool,
    region: str,
    trials: int = 1,
) -> list[dict[str, Any]]:
    """The Vertex AI training quota of a job: its GPUs (preemptible when spot) or its CPU
    family's vCPUs, and its reducers' vCPUs, times the parallel trials."""
    dims = {"region": region}
    out: list[dict[str, Any]] = []
    cpu_vcpus: dict[str, int] = {}
    machine = MACHINES[machine_type]
    if machine.gpu_model is not None:
        spec = prices.VERTEX_GPU_QUOTAS[(machine.gpu_model, spot)]
        out.append(prices.quota_need(spec, dims, replica_count * machine.gpus))
    else:
        cpu_vcpus[machine_type.split("-", 1)[0]] = replica_count * machine.vcpus
    if reducers:
        reducer = MACHINES[reducer_machine]
        family = reducer.name.split("-", 1)[0]
        cpu_vcpus[family] = cpu_vcpus.get(family, 0) + reducers * reducer.vcpus
    for family, vcpus in cpu_vcpus.items():
        out.append(prices.quota_need(prices.VERTEX_CPU_QUOTAS[family], dims, vcpus))
    for item in out:
        item["needed"] *= trials
    return out


VERTEX_NO_TIMEOUT_NOTE: Final = (
    "vertex: this GPU job has no scheduling.timeout, so Vertex's default of 7 days "
    "caps a hung or stalled run; set limits.max_run_hours or vertex.timeout_s"
)


def vertex_flex_start_note(max_wait_s: int) -> str:
    """What a FLEX_START job may wait and what it costs (`catalog.gpu_families`)."""
    wait = (
        "indefinitely (maxWaitDuration 0s)"
        if max_wait_s == 0
        else f"up to {max_wait_s / 3600:g} hours (maxWaitDuration {max_wait_s}s)"
    )
    return (
        f"vertex: flex-start (scheduling.strategy FLEX_START): the job queues {wait} for "
        "all its GPUs at once, then runs at most its scheduling.timeout (7 days at most), "
        "where Vertex AI ends it; what its replicas get then (a SIGTERM, a grace) Google does "
        "not say, so the run gets no deadline: its newest checkpoint is the last "
        "trainer.checkpoint_every step; "
        + FLEX_START_DISCOUNT_NOTE
        + "; "
        + VERTEX_FLEX_START_QUOTA_NOTE
    )


# --------------------------------------------------------------------------- run supervisor


def supervisor_facts(
    kind: str,
    recover: bool,
    instances: Sequence[str] | None,
    values: Sequence[Any],
    stops_on: Sequence[str] | None = None,
    autoscaled: bool = False,
) -> dict[str, Any]:
    """A supervisor's facts (`trainstack.components.facts`): its cost and notes from its
    arguments (`values`: project, region, resource name, its `run`, function name, events URI
    and roles); the compute's region is its zone's (`resource`'s fourth part, `NAME_FORMS`).
    With a spend cap and the compute's $/hour in `run`, the plan's note on how the cap is
    enforced. `autoscaled`: `RunSupervisorArgs.autoscaled`."""
    project, region, resource, run, function, events = values
    run = dict(run or {})
    zone = resource.split("/")[3]
    notes = [
        reach_note(kind, recover, project, autoscaled),
        supervisor_region_note(region, region_of(zone)),
    ]
    cap, hourly = run.get("max_total_usd"), run.get("hourly_usd")
    limit_notes = []
    if cap is not None and hourly is not None:
        seconds = run.get("max_run_seconds")
        hours = None if seconds is None else seconds / 3600
        limit_notes.append(f"{SPEND_CAP_KEY}: {spend_cap_text(hourly, cap, hours)}")
    return make_facts(
        "RunSupervisor",
        SUPERVISOR_TARGET,
        stops=KIND_TARGETS.get(kind),
        hourly_usd=supervisor_hourly_usd(),
        notes=notes,
        limit_notes=limit_notes,
        status={
            "project": project,
            "resource_name": resource,
            "events_uri": events,
            "max_total_usd": cap,
            "instances": list(instances) if instances is not None else None,
        },
        logs={"function_name": function},
        stops_on=supervisor_stops_on(run) if stops_on is None else stops_on,
    )

"""Offline sizing of a validated stack: accelerator totals, $/hour and quota needed.

Pure functions over `StackConfig`, `trainstack.components.catalog` (machine shapes) and `trainstack.infra.catalog`
(prices and quota ids); `trainstack plan` prints their results. Prices are catalog ESTIMATES (us-central1 list prices, spot at the upper end of
Google's documented discount range), not quotes. Quota ids marked `verified: False` must
be confirmed with `gcp.cloudquota.get_s_quota_infos` before requesting increases.
"""

from __future__ import annotations

from typing import Any

from trainstack.components.catalog.machines import GKE_SYSTEM_NODE_MACHINE, MACHINES
from trainstack.components.catalog.tpu import TPU_RUN_LIMIT_ENFORCED
from trainstack.infra import catalog
from trainstack.infra.config import GpuClusterConfig, StackConfig, TpuConfig, VertexConfig

__all__ = [
    "limit_problems",
    "limits_plan",
    "quota_needs",
    "stoppable_hourly_usd",
    "summarize",
    "supervisor_hourly_usd",
    "vertex_timeout_s",
]


def _round(usd: float) -> float:
    return round(usd, 2)


# The run supervisor (trainstack.components.tpu_supervisor) of a TPU or GPU-cluster stack: one
# Cloud Scheduler job and one Cloud Run functions call every 2 minutes.
SCHEDULER_JOB_USD_PER_31_DAYS = 0.10
"""https://cloud.google.com/scheduler/pricing: "A job is billed $0.10/job/31 days"; "Each
Google billing account gets 3 jobs per month free" (not subtracted here: shared by the
billing account)."""
RUN_VCPU_SECOND_USD = 0.000024
RUN_GIB_SECOND_USD = 0.0000025
RUN_REQUEST_USD = 0.40 / 1_000_000
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


def supervisor_hourly_usd() -> float:
    """$/hour of a stack's run supervisor at list price."""
    per_call = SUPERVISOR_CALL_S * (
        SUPERVISOR_VCPU * RUN_VCPU_SECOND_USD + SUPERVISOR_GIB * RUN_GIB_SECOND_USD
    )
    function = SUPERVISOR_CALLS_PER_HOUR * (per_call + RUN_REQUEST_USD)
    return function + SCHEDULER_JOB_USD_PER_31_DAYS / (31 * 24)


def _tpu_summary(tpu: TpuConfig) -> dict[str, Any]:
    s = tpu.slice
    price = catalog.TPU_CHIP_PRICES[s.generation].hourly(tpu.spot)
    return {"tpu_chips": s.chips, "gpus": 0, "machines": s.hosts, "hourly_usd": s.chips * price}


def stoppable_hourly_usd(cfg: StackConfig) -> float:
    """$/hour at list price of the compute the supervisor stops at the run's end (the TPU
    slice; the GCE group or GKE GPU pool, without GKE's cluster fee and system node): what
    its spend count for `limits.max_total_usd` adds per hour of billing."""
    if cfg.tpu is not None:
        s = cfg.tpu.slice
        return _round(s.chips * catalog.TPU_CHIP_PRICES[s.generation].hourly(cfg.tpu.spot))
    assert cfg.gpu_cluster is not None, "only tpu and gpu_cluster stacks have a supervisor"
    gpu = cfg.gpu_cluster
    return _round(gpu.node_count * catalog.MACHINE_PRICES[gpu.machine_type].hourly(gpu.spot))


def _gpu_summary(gpu: GpuClusterConfig) -> dict[str, Any]:
    hourly = gpu.node_count * catalog.MACHINE_PRICES[gpu.machine_type].hourly(gpu.spot)
    machines = gpu.node_count
    if gpu.backend == "gke":
        # The system node runs on-demand: DNS must survive a spot reclaim of the GPU nodes.
        system = catalog.MACHINE_PRICES[GKE_SYSTEM_NODE_MACHINE].hourly(False)
        hourly += catalog.GKE_CLUSTER_FEE_USD + system
        machines += 1
    return {
        "tpu_chips": 0,
        "gpus": gpu.total_gpus,
        "machines": machines,
        "hourly_usd": hourly,
    }


def _vertex_summary(vx: VertexConfig) -> dict[str, Any]:
    reducers = vx.reducer_count()
    hourly = vx.replica_count * catalog.MACHINE_PRICES[vx.machine_type].hourly(vx.spot)
    if reducers:
        reducer_price = catalog.MACHINE_PRICES[vx.reduction_server.machine_type]
        hourly += reducers * reducer_price.hourly(vx.spot)
    return {
        "tpu_chips": 0,
        "gpus": vx.replica_count * vx.gpus_per_replica,
        "machines": vx.replica_count + reducers,
        "hourly_usd": hourly * catalog.VERTEX_TRAINING_MARKUP,
    }


def summarize(cfg: StackConfig) -> dict[str, Any]:
    """Totals for the plan: `tpu_chips`, `gpus`, `machines`, `hourly_usd`.

    `machines` counts TPU hosts, GPU nodes, Vertex replicas plus reducers, or local
    workers. `hourly_usd` is an estimate from catalog list prices (spot price when spot),
    rounded to cents; a local run costs 0. Hyperparameter tuning multiplies Vertex cost by
    the parallel trials.
    """
    target = cfg.target
    if target == "tpu":
        assert cfg.tpu is not None
        out = _tpu_summary(cfg.tpu)
    elif target == "gpu_cluster":
        assert cfg.gpu_cluster is not None
        out = _gpu_summary(cfg.gpu_cluster)
    elif target == "vertex":
        assert cfg.vertex is not None
        out = _vertex_summary(cfg.vertex)
        hp = cfg.vertex.hyperparameter_tuning
        if hp is not None:
            # Each parallel trial is a full copy of the job's worker pools.
            out = {k: v * hp.parallel_trial_count for k, v in out.items()}
    else:
        assert cfg.local is not None
        out = {"tpu_chips": 0, "gpus": 0, "machines": cfg.local.workers, "hourly_usd": 0.0}
    if target in ("tpu", "gpu_cluster"):
        supervisor = supervisor_hourly_usd()
        out["hourly_usd"] += supervisor
        # Too small to show in $/hour: the plan shows it per month as well.
        out["supervisor_usd_per_month"] = round(supervisor * 730, 2)
    out["hourly_usd"] = _round(out["hourly_usd"])
    return out


def _need(spec: catalog.QuotaSpec, dimensions: dict[str, str], needed: int) -> dict[str, Any]:
    return {
        "service": spec.service,
        "quota_id": spec.quota_id,
        "dimensions": dimensions,
        "needed": needed,
        "verified": spec.verified,
        "source": spec.source,
    }


def _tpu_quota(tpu: TpuConfig) -> list[dict[str, Any]]:
    s = tpu.slice
    # Queued resources draw from on-demand quota unless they are spot.
    tier: catalog.TpuTier = {"spot": "spot", "reserved": "reserved"}.get(  # type: ignore[assignment]
        tpu.provisioning, "on-demand"
    )
    return [_need(catalog.TPU_QUOTAS[(s.generation, tier)], {"zone": tpu.zone}, s.chips)]


def _gpu_quota(gpu: GpuClusterConfig, region: str) -> list[dict[str, Any]]:
    m = gpu.machine
    assert m.gpu_model is not None
    gpus = gpu.total_gpus
    needs = [
        _need(catalog.COMPUTE_QUOTAS[(m.gpu_model, gpu.spot)], {"region": region}, gpus),
        _need(catalog.GPUS_ALL_REGIONS_QUOTA, {}, gpus),
        _need(catalog.A2_CPUS_QUOTA, {"region": region}, m.vcpus * gpu.node_count),
    ]
    if gpu.backend == "gke":
        system = MACHINES[GKE_SYSTEM_NODE_MACHINE]
        needs.append(_need(catalog.CPUS_QUOTA, {"region": region}, system.vcpus))
    return needs


def _vertex_quota(vx: VertexConfig, region: str) -> list[dict[str, Any]]:
    dims = {"region": vx.region or region}
    out: list[dict[str, Any]] = []
    cpu_vcpus: dict[str, int] = {}
    m = vx.machine
    if m.gpu_model is not None:
        spec = catalog.VERTEX_GPU_QUOTAS[(m.gpu_model, vx.spot)]
        out.append(_need(spec, dims, vx.replica_count * m.gpus))
    else:
        family = vx.machine_type.split("-", 1)[0]
        cpu_vcpus[family] = vx.replica_count * m.vcpus
    reducers = vx.reducer_count()
    if reducers:
        rm = MACHINES[vx.reduction_server.machine_type]
        family = rm.name.split("-", 1)[0]
        cpu_vcpus[family] = cpu_vcpus.get(family, 0) + reducers * rm.vcpus
    for family, vcpus in cpu_vcpus.items():
        out.append(_need(catalog.VERTEX_CPU_QUOTAS[family], dims, vcpus))
    hp = vx.hyperparameter_tuning
    if hp is not None:
        for item in out:
            item["needed"] *= hp.parallel_trial_count
    return out


def quota_needs(cfg: StackConfig) -> list[dict[str, Any]]:
    """Quota the stack needs: `service`, `quota_id`, `dimensions`, `needed`, `verified`,
    `source` per entry. A local target needs none.

    TPU needs are counted in chips (the TPU API may count TensorCores for v4/v5p; the ids
    are unverified). GPU clusters need the Compute Engine A100 quota (preemptible when
    spot), the global GPU cap and A2 vCPUs; Vertex needs its own training quotas.
    """
    target = cfg.target
    if target == "tpu":
        assert cfg.tpu is not None
        return _tpu_quota(cfg.tpu)
    if target == "gpu_cluster":
        assert cfg.gpu_cluster is not None and cfg.region is not None
        return _gpu_quota(cfg.gpu_cluster, cfg.region)
    if target == "vertex":
        assert cfg.vertex is not None and cfg.region is not None
        return _vertex_quota(cfg.vertex, cfg.region)
    return []


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


def vertex_timeout_s(vx: VertexConfig, max_run_seconds: int | None) -> int | None:
    """The Vertex job's `scheduling.timeout`: the smaller of `vertex.timeout_s` and
    `limits.max_run_hours`, or whichever is given (None keeps Vertex's 7-day default)."""
    given = [t for t in (vx.timeout_s, max_run_seconds) if t is not None]
    return min(given) if given else None


def _run_limit(cfg: StackConfig, seconds: int) -> tuple[bool, str]:
    target = cfg.target
    if target == "vertex":
        assert cfg.vertex is not None
        timeout = vertex_timeout_s(cfg.vertex, seconds)
        return True, (
            f"Vertex job scheduling.timeout {timeout}s (the smaller of vertex.timeout_s and "
            "limits.max_run_hours)"
        )
    if target == "gpu_cluster":
        assert cfg.gpu_cluster is not None
        if cfg.gpu_cluster.backend == "gke":
            return True, (
                f"GKE Job activeDeadlineSeconds {seconds}; then the supervisor sets the GPU "
                "node pool to 0 nodes"
            )
        return True, (
            f"Compute Engine run limit of {seconds}s (A100Cluster max_run_seconds); then the "
            "supervisor resizes the instance group to 0"
        )
    if target == "tpu":
        return TPU_RUN_LIMIT_ENFORCED, (
            f"enforced by the TPU startup script: it stops the trainer {seconds}s after the "
            "run's first start (TpuPodSlice max_run_seconds); the Cloud TPU API has no run "
            "limit, so the supervisor then deletes the slice"
        )
    return False, "not enforced: the local runner ignores it; stop it with Ctrl-C or SIGTERM"


def limits_plan(cfg: StackConfig) -> dict[str, Any] | None:
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
        out["spend_cap"] = (
            f"the supervisor counts the compute's spend at ${stoppable_hourly_usd(cfg):,.2f}/hour "
            f"list price; at ${limits.max_total_usd:,.2f} it asks the trainer to save and stop, "
            "then stops the compute"
        )
    seconds = limits.max_run_seconds
    if seconds is not None:
        enforced, how = _run_limit(cfg, seconds)
        out["max_run_seconds"] = seconds
        out["run_limit_enforced"] = enforced
        out["run_limit"] = how
    return out

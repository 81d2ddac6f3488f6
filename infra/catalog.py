"""Google Cloud facts the stack config is validated against, as plain data.

Every table carries its source (`*_SOURCE`) and the date it was compiled (`*_AS_OF`).
Facts that the team's fact sheet (`reference/gcp-facts.md`, "checked facts") marks as
unverified carry `verified=False` and a note, so callers can say so instead of presenting a
guess as a fact. Nothing here calls a cloud API: these tables let `trainstack plan` reject a
bad config offline, before any resource is registered. At deploy time, prefer the live
answers (`gcp.tpu.get_v2_accelerator_types`, `gcp.compute.get_machine_types`,
`gcp.cloudquota.get_s_quota_infos`) where they disagree.

Prices are list-price ESTIMATES (USD, us-central1) for the offline plan only; they are not
quotes and are not verified.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Final, Literal

TpuGenerationName = Literal["v4", "v5e", "v5p", "v6e"]
TpuTier = Literal["on-demand", "spot", "reserved"]
GpuModel = Literal["A100 40GB", "A100 80GB"]

FACT_SHEET: Final = "reference/gcp-facts.md (compiled 2026-11)"

# --------------------------------------------------------------------------------------
# Cloud TPU
# --------------------------------------------------------------------------------------

TPU_SOURCE: Final = (
    "https://cloud.google.com/tpu/docs/v4, https://docs.cloud.google.com/tpu/docs/v5e, "
    "https://docs.cloud.google.com/tpu/docs/v5p-training, "
    "https://docs.cloud.google.com/tpu/docs/v6e.md.txt, "
    "AI-Hypercomputer/xpk:src/xpk/core/system_characteristics.py; "
    f"{FACT_SHEET} sections 1.1-1.2"
)
TPU_AS_OF: Final = "2026-11-01"

TPU_ZONES_SOURCE: Final = (
    "https://cloud.google.com/tpu/docs/regions-zones, "
    f"https://docs.cloud.google.com/tpu/docs/types-zones; {FACT_SHEET} section 1.3"
)
TPU_ZONES_AS_OF: Final = "2026-11-01"

TPU_RUNTIME_SOURCE: Final = (
    "https://cloud.google.com/tpu/docs/runtimes, "
    f"https://cloud.google.com/tpu/docs/supported-versions; {FACT_SHEET} section 1.4"
)
TPU_RUNTIME_AS_OF: Final = "2026-11-01"


@dataclass(frozen=True)
class TpuSlice:
    """One TPU slice shape as the Cloud TPU VM API names it (`accelerator_type`)."""

    accelerator_type: str
    """API name, e.g. `v4-32` or `v5litepod-16`."""
    generation: TpuGenerationName
    topology: str
    """Chip topology for `AcceleratorConfig.topology`, e.g. `2x2x4`."""
    chips: int
    hosts: int
    """TPU VMs (workers) in the slice; each runs the startup script."""
    verified: bool = True
    note: str = ""

    @property
    def chips_per_host(self) -> int:
        """Chips attached to each TPU VM of this slice."""
        return self.chips // self.hosts

    @property
    def multi_host(self) -> bool:
        """True when the slice spans several VMs (needs a `-pod` TF runtime)."""
        return self.hosts > 1


@dataclass(frozen=True)
class TpuGeneration:
    """Per-generation TPU facts."""

    name: TpuGenerationName
    type_prefix: str
    """Prefix of the accelerator type name: `v4-32`, `v5litepod-16`, `v5p-8`, `v6e-4`."""
    api_type: Literal["V4", "V5LITE_POD", "V5P", "V6E"]
    """`AcceleratorConfig.type` enum value in tpu.v2."""
    name_counts: Literal["tensorcores", "chips"]
    """What N in `<prefix>-N` counts."""
    tensorcores_per_chip: int
    hbm_gb_per_chip: int
    """HBM per chip in GB (GiB for v4, as Google's table states it)."""
    chips_per_multi_host_vm: int
    base_runtime: str
    """Runtime for frameworks installed by the user (PyTorch, JAX, TensorFlow via pip)."""
    gke_accelerator: str
    """GKE node label `cloud.google.com/gke-tpu-accelerator`."""
    gke_machine_type: str
    zones: dict[str, bool]
    """Zone -> verified (False where the fact sheet marks the zone unverified)."""
    slices: tuple[TpuSlice, ...]
    tf_min_version: tuple[int, int, int]
    """Oldest TensorFlow with a TPU VM runtime for this generation."""
    tf_requires_pjrt: bool
    """v5e/v5p/v6e only have `-pjrt` TF runtimes."""

    def slice(self, accelerator_type: str) -> TpuSlice | None:
        """The slice named `accelerator_type`, or None when this generation has none."""
        return next((s for s in self.slices if s.accelerator_type == accelerator_type), None)

    def slice_for_topology(self, topology: str) -> TpuSlice | None:
        """The slice with chip topology `topology`, or None."""
        return next((s for s in self.slices if s.topology == topology), None)

    @property
    def runtime_family(self) -> str:
        """Human description of the runtime versions valid for this generation."""
        if self.tf_requires_pjrt:
            tf = "tpu-vm-tf-X.Y.Z[-pod]-pjrt (TF >= {}.{}.{})".format(*self.tf_min_version)
            return f"{self.base_runtime}, {tf}"
        return (
            f"{self.base_runtime}, tpu-vm-tf-X.Y.Z[-pod][-pjrt] (TF >= 2.10.1), "
            "tpu-vm-tf-X.Y.Z[-pod]-v4 (TF <= 2.10.0)"
        )


def _slice(
    gen: TpuGenerationName,
    prefix: str,
    n: int,
    topology: str,
    chips: int,
    *,
    single_host: bool = False,
    verified: bool = True,
    note: str = "",
) -> TpuSlice:
    # xpk: chips_per_vm = 1 if total_chips == 1 else 4, so multi-host VMs = chips / 4.
    hosts = 1 if single_host else max(1, chips // 4)
    return TpuSlice(f"{prefix}-{n}", gen, topology, chips, hosts, verified, note)


_V4_SHAPES: Final = (
    ("2x2x1", 4),
    ("2x2x2", 8),
    ("2x2x4", 16),
    ("2x4x4", 32),
    ("4x4x4", 64),
    ("4x4x8", 128),
    ("4x8x8", 256),
    ("8x8x8", 512),
    ("8x8x12", 768),
    ("8x8x16", 1024),
    ("8x16x16", 2048),
)

_V5P_SHAPES: Final = (
    ("2x2x1", 4, True, ""),
    ("2x2x2", 8, True, ""),
    ("2x2x4", 16, True, "v5p-32 is used in Google's JAX pod example (europe-west4-b)"),
    ("2x4x4", 32, True, ""),
    ("4x4x4", 64, True, ""),
    ("4x4x8", 128, True, ""),
    ("4x8x8", 256, True, ""),
    ("8x8x8", 512, True, ""),
    ("8x8x16", 1024, False, "row elided in the fact sheet's copy of Google's table"),
    ("8x16x16", 2048, False, "row elided in the fact sheet's copy of Google's table"),
    ("16x16x16", 4096, False, "row elided in the fact sheet's copy of Google's table"),
    ("16x16x24", 6144, True, "largest single v5p slice"),
)

# v5e and v6e share the 2D shapes; N in the name is the chip count.
_2D_SHAPES: Final = (
    ("1x1", 1),
    ("2x2", 4),
    ("2x4", 8),
    ("4x4", 16),
    ("4x8", 32),
    ("8x8", 64),
    ("8x16", 128),
    ("16x16", 256),
)

_EIGHT_CHIP_NOTE: Final = (
    "believed to be one 8-chip VM in the Cloud TPU VM API; xpk/GKE model 2x4 as 2 VMs of "
    "4 chips. Check len(network_endpoints) on a real slice."
)
_V5E_MULTI_HOST_NOTE: Final = (
    "4 chips per VM comes from xpk and ai-on-gke code, not a Google doc sentence"
)


def _v4_slices() -> tuple[TpuSlice, ...]:
    return tuple(
        _slice("v4", "v4", 2 * chips, topo, chips, single_host=chips == 4)
        for topo, chips in _V4_SHAPES
    )


def _v5p_slices() -> tuple[TpuSlice, ...]:
    return tuple(
        _slice("v5p", "v5p", 2 * chips, topo, chips, single_host=chips == 4, verified=ok, note=n)
        for topo, chips, ok, n in _V5P_SHAPES
    )


def _2d_slices(gen: TpuGenerationName, prefix: str, multi_note: str) -> tuple[TpuSlice, ...]:
    out = []
    for topo, chips in _2D_SHAPES:
        if chips == 8:
            out.append(
                _slice(gen, prefix, chips, topo, chips, single_host=True, verified=False,
                       note=_EIGHT_CHIP_NOTE)
            )  # fmt: skip
        elif chips <= 4:
            out.append(_slice(gen, prefix, chips, topo, chips, single_host=True))
        else:
            out.append(
                _slice(gen, prefix, chips, topo, chips, verified=not multi_note, note=multi_note)
            )
    return tuple(out)


TPU_GENERATIONS: Final[dict[TpuGenerationName, TpuGeneration]] = {
    "v4": TpuGeneration(
        name="v4",
        type_prefix="v4",
        api_type="V4",
        name_counts="tensorcores",
        tensorcores_per_chip=2,
        hbm_gb_per_chip=32,
        chips_per_multi_host_vm=4,
        base_runtime="tpu-ubuntu2204-base",
        gke_accelerator="tpu-v4-podslice",
        gke_machine_type="ct4p-hightpu-4t",
        zones={"us-central2-b": True},
        slices=_v4_slices(),
        tf_min_version=(2, 10, 1),
        tf_requires_pjrt=False,
    ),
    "v5e": TpuGeneration(
        name="v5e",
        type_prefix="v5litepod",
        api_type="V5LITE_POD",
        name_counts="chips",
        tensorcores_per_chip=1,
        hbm_gb_per_chip=16,
        chips_per_multi_host_vm=4,
        base_runtime="v2-alpha-tpuv5-lite",
        gke_accelerator="tpu-v5-lite-podslice",
        gke_machine_type="ct5lp-hightpu-4t",
        zones={
            "us-central1-a": True,
            "us-south1-a": True,
            "us-west1-c": True,
            "us-west4-a": True,
            "europe-west4-b": True,
        },
        slices=_2d_slices("v5e", "v5litepod", _V5E_MULTI_HOST_NOTE),
        tf_min_version=(2, 15, 0),
        tf_requires_pjrt=True,
    ),
    "v5p": TpuGeneration(
        name="v5p",
        type_prefix="v5p",
        api_type="V5P",
        name_counts="tensorcores",
        tensorcores_per_chip=2,
        hbm_gb_per_chip=95,
        chips_per_multi_host_vm=4,
        base_runtime="v2-alpha-tpuv5",
        gke_accelerator="tpu-v5p-slice",
        gke_machine_type="ct5p-hightpu-4t",
        zones={"us-central1-a": True, "us-east5-a": True, "europe-west4-b": True},
        slices=_v5p_slices(),
        tf_min_version=(2, 15, 0),
        tf_requires_pjrt=True,
    ),
    "v6e": TpuGeneration(
        name="v6e",
        type_prefix="v6e",
        api_type="V6E",
        name_counts="chips",
        tensorcores_per_chip=1,
        hbm_gb_per_chip=32,
        chips_per_multi_host_vm=4,
        base_runtime="v2-alpha-tpuv6e",
        gke_accelerator="tpu-v6e-slice",
        gke_machine_type="ct6e-standard-4t",
        zones={
            "us-central1-b": True,
            "us-east1-d": True,
            "us-east5-a": True,
            "us-east5-b": True,
            "europe-west4-a": True,
            # The fact sheet saw these on a newer page but their spelling is uncertain.
            "us-central1-ai1a": False,
            "us-south1-ai1b": False,
            "asia-northeast1-b": False,
        },
        slices=_2d_slices("v6e", "v6e", ""),
        tf_min_version=(2, 15, 0),
        tf_requires_pjrt=True,
    ),
}


def tpu_generation_of(accelerator_type: str) -> TpuGeneration | None:
    """The generation whose name prefix `accelerator_type` uses (`v4-12` -> v4), or None."""
    prefix = accelerator_type.rsplit("-", 1)[0]
    return next((g for g in TPU_GENERATIONS.values() if g.type_prefix == prefix), None)


def tpu_slice(accelerator_type: str) -> TpuSlice | None:
    """The slice named `accelerator_type` in any generation, or None."""
    gen = tpu_generation_of(accelerator_type)
    return gen.slice(accelerator_type) if gen else None


_TF_RUNTIME = re.compile(r"^tpu-vm-tf-(\d+)\.(\d+)\.(\d+)(-pod)?(-pjrt)?(-v4)?$")


@dataclass(frozen=True)
class RuntimeMatch:
    """How a runtime version relates to a TPU generation."""

    belongs: bool
    """The runtime can run on this generation."""
    pod: bool
    """The runtime is a `-pod` (multi-host) TensorFlow runtime."""
    tensorflow: bool
    """The runtime ships TensorFlow (`tpu-vm-tf-*`)."""


def tpu_runtime_match(generation: TpuGenerationName, runtime_version: str) -> RuntimeMatch:
    """Say whether `runtime_version` belongs to `generation` and whether it is a `-pod` one.

    Rules (fact sheet 1.4): each generation has one base runtime; TensorFlow runtimes are
    `tpu-vm-tf-X.Y.Z[-pod][-pjrt]`. v5e/v5p/v6e need TF >= 2.15.0 with `-pjrt`; v4 uses
    the plain names from TF 2.10.1 on and a `-v4` suffix up to TF 2.10.0. Accepting `-pjrt`
    on v4 is an assumption (unverified); the TPU API's runtime list is authoritative.
    """
    gen = TPU_GENERATIONS[generation]
    if runtime_version == gen.base_runtime:
        return RuntimeMatch(belongs=True, pod=False, tensorflow=False)
    m = _TF_RUNTIME.match(runtime_version)
    if not m:
        return RuntimeMatch(belongs=False, pod=False, tensorflow=False)
    version = (int(m[1]), int(m[2]), int(m[3]))
    pod, pjrt, v4_suffix = bool(m[4]), bool(m[5]), bool(m[6])
    if gen.tf_requires_pjrt:
        ok = pjrt and not v4_suffix and version >= gen.tf_min_version
    elif v4_suffix:
        ok = not pjrt and version <= (2, 10, 0)
    else:
        ok = version >= gen.tf_min_version
    return RuntimeMatch(belongs=ok, pod=pod, tensorflow=True)


# --------------------------------------------------------------------------------------
# Machine shapes (A2 GPU machines, CPU machines for reducers, chiefs and tests)
# --------------------------------------------------------------------------------------

MACHINES_SOURCE: Final = (
    "https://docs.cloud.google.com/compute/docs/gpus (A2 table), "
    "https://cloud.google.com/compute/docs/general-purpose-machines; "
    f"{FACT_SHEET} sections 2.1 and 4"
)
MACHINES_AS_OF: Final = "2026-11-01"


@dataclass(frozen=True)
class MachineType:
    """A Compute Engine machine shape."""

    name: str
    vcpus: int
    memory_gb: float
    egress_gbps: int
    """Max default (non Tier-1) egress bandwidth."""
    gpus: int = 0
    gpu_model: GpuModel | None = None
    local_ssd_gib: int | None = None
    """Bundled local SSD; None when local SSD is optional (attach your own)."""
    verified: bool = True
    note: str = ""


def _a2(
    name: str, gpus: int, model: GpuModel, vcpus: int, mem: float, gbps: int, ssd: int | None
) -> MachineType:
    return MachineType(name, vcpus, mem, gbps, gpus, model, ssd)


A2_MACHINES: Final[dict[str, MachineType]] = {
    m.name: m
    for m in (
        _a2("a2-highgpu-1g", 1, "A100 40GB", 12, 85, 24, None),
        _a2("a2-highgpu-2g", 2, "A100 40GB", 24, 170, 32, None),
        _a2("a2-highgpu-4g", 4, "A100 40GB", 48, 340, 50, None),
        _a2("a2-highgpu-8g", 8, "A100 40GB", 96, 680, 100, None),
        _a2("a2-megagpu-16g", 16, "A100 40GB", 96, 1360, 100, None),
        _a2("a2-ultragpu-1g", 1, "A100 80GB", 12, 170, 24, 375),
        _a2("a2-ultragpu-2g", 2, "A100 80GB", 24, 340, 32, 750),
        _a2("a2-ultragpu-4g", 4, "A100 80GB", 48, 680, 50, 1500),
        _a2("a2-ultragpu-8g", 8, "A100 80GB", 96, 1360, 100, 3000),
    )
}

CPU_MACHINES: Final[dict[str, MachineType]] = {
    m.name: m
    for m in (
        # Reduction Server: n1-highcpu-16 is Google's recommendation and the SDK default.
        MachineType("n1-highcpu-16", 16, 14.4, 32),
        MachineType(
            "n2-highcpu-16", 16, 16, 32, note="egress taken equal to n1-highcpu-16 (16 vCPUs)"
        ),
        MachineType("n1-standard-4", 4, 15, 8),
        MachineType("n1-standard-8", 8, 30, 16),
        MachineType("e2-standard-4", 4, 16, 8),
    )
}

MACHINES: Final[dict[str, MachineType]] = {**A2_MACHINES, **CPU_MACHINES}

REDUCTION_SERVER_MACHINES: Final = ("n1-highcpu-16", "n2-highcpu-16")
"""Machine types documented for Reduction Server replicas (fact sheet section 4)."""
DEFAULT_REDUCER_MACHINE: Final = "n1-highcpu-16"


def reducers_needed(
    worker_machine_type: str, replica_count: int, reducer_machine_type: str = "n1-highcpu-16"
) -> int:
    """Reduction Server replicas needed so reducer bandwidth covers worker bandwidth.

    Google's sizing rule: the total egress of worker pool 2 (reducers) must be at least the
    total of pools 0 and 1, so `ceil(replica_count * worker egress / reducer egress)`.
    Examples from the docs: 5 workers at 100 Gbps with n1-highcpu-16 (32 Gbps) -> 16;
    8 x a2-megagpu-16g -> 25. `replica_count` counts every worker machine incl. the chief.
    """
    if replica_count < 1:
        raise ValueError(f"replica_count: {replica_count} is below 1; expected >= 1")
    worker = MACHINES.get(worker_machine_type)
    reducer = MACHINES.get(reducer_machine_type)
    if worker is None:
        raise ValueError(f"worker_machine_type: {worker_machine_type!r} is not in the catalog")
    if reducer is None:
        raise ValueError(f"reducer_machine_type: {reducer_machine_type!r} is not in the catalog")
    return math.ceil(replica_count * worker.egress_gbps / reducer.egress_gbps)


# --------------------------------------------------------------------------------------
# GPU accelerator names and zones
# --------------------------------------------------------------------------------------

ACCELERATOR_NAMES_SOURCE: Final = (
    f"Compute Engine GPU docs; DISC:aiplatform.v1.json#MachineSpec; {FACT_SHEET} section 2.2"
)
ACCELERATOR_NAMES_AS_OF: Final = "2026-11-01"


@dataclass(frozen=True)
class GpuAcceleratorNames:
    """How each API spells one GPU model."""

    compute: str
    """Compute Engine `guest_accelerator.type` and GKE `cloud.google.com/gke-accelerator`."""
    vertex: str
    """Vertex `MachineSpec.acceleratorType` enum."""


GPU_ACCELERATOR_NAMES: Final[dict[GpuModel, GpuAcceleratorNames]] = {
    "A100 40GB": GpuAcceleratorNames(compute="nvidia-tesla-a100", vertex="NVIDIA_TESLA_A100"),
    "A100 80GB": GpuAcceleratorNames(compute="nvidia-a100-80gb", vertex="NVIDIA_A100_80GB"),
}

VERTEX_GPU_ENUMS: Final = tuple(n.vertex for n in GPU_ACCELERATOR_NAMES.values())

A100_ZONES_SOURCE: Final = (
    "skypilot-catalog/catalogs/v8/gcp/vms.csv (a2-highgpu-1g rows) for A100 40GB; A100 80GB "
    f"from general knowledge of Google's GPU regions page; {FACT_SHEET} section 2.3"
)
A100_ZONES_AS_OF: Final = "2026-11-01"
A100_ZONES_VERIFIED: Final = False
"""Zone lists are volatile and unverified: query `gcp.compute.get_machine_types` at deploy."""

A100_ZONES: Final[dict[GpuModel, tuple[str, ...]]] = {
    "A100 40GB": (
        "asia-northeast1-a",
        "asia-northeast1-c",
        "asia-northeast3-a",
        "asia-northeast3-b",
        "asia-southeast1-a",
        "asia-southeast1-b",
        "asia-southeast1-c",
        "europe-west4-a",
        "europe-west4-b",
        "me-west1-a",
        "me-west1-c",
        "us-central1-a",
        "us-central1-b",
        "us-central1-c",
        "us-central1-f",
        "us-east1-b",
        "us-west1-b",
        "us-west3-b",
        "us-west4-b",
    ),
    "A100 80GB": (
        "asia-southeast1-c",
        "europe-west4-a",
        "us-central1-a",
        "us-central1-c",
        "us-east4-c",
        "us-east5-b",
    ),
}

# Standard-mode limits were not re-verified; the Autopilot page says 1,500 nodes per
# placement group (an older version said 150).
COMPACT_PLACEMENT_MAX_NODES: Final = 1500
COMPACT_PLACEMENT_VERIFIED: Final = False

# --------------------------------------------------------------------------------------
# Quotas
# --------------------------------------------------------------------------------------

QUOTAS_SOURCE: Final = f"{FACT_SHEET} section 6.3; https://cloud.google.com/tpu/docs/quota"
QUOTAS_AS_OF: Final = "2026-11-01"

ENUMERATE_HINT: Final = (
    "enumerate the real ids with gcp.cloudquota.get_s_quota_infos(parent='projects/P', service=...)"
)


@dataclass(frozen=True)
class QuotaSpec:
    """One Cloud Quotas quota: what to request and how sure we are of its id."""

    service: str
    quota_id: str
    dimension: Literal["region", "zone", "none"]
    unit: str
    verified: bool
    source: str
    note: str = ""


_PUBLIC_TOOLS: Final = "public tools using the live Cloud Quotas API (fact sheet 6.3)"

COMPUTE_QUOTAS: Final[dict[tuple[GpuModel, bool], QuotaSpec]] = {
    ("A100 40GB", False): QuotaSpec(
        "compute.googleapis.com",
        "NVIDIA-A100-GPUS-per-project-region",
        "region",
        "GPUs",
        True,
        _PUBLIC_TOOLS,
    ),
    ("A100 80GB", False): QuotaSpec(
        "compute.googleapis.com",
        "NVIDIA-A100-80GB-GPUS-per-project-region",
        "region",
        "GPUs",
        True,
        _PUBLIC_TOOLS,
    ),
    ("A100 40GB", True): QuotaSpec(
        "compute.googleapis.com",
        "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region",
        "region",
        "GPUs",
        True,
        _PUBLIC_TOOLS,
        "Spot VMs use the preemptible quota",
    ),
    ("A100 80GB", True): QuotaSpec(
        "compute.googleapis.com",
        "PREEMPTIBLE-NVIDIA-A100-80GB-GPUS-per-project-region",
        "region",
        "GPUs",
        True,
        _PUBLIC_TOOLS,
        "Spot VMs use the preemptible quota",
    ),
}
"""Compute Engine GPU quota by (model, spot)."""

GPUS_ALL_REGIONS_QUOTA: Final = QuotaSpec(
    "compute.googleapis.com",
    "GPUS-ALL-REGIONS-per-project",
    "none",
    "GPUs",
    True,
    _PUBLIC_TOOLS,
)

A2_CPUS_QUOTA: Final = QuotaSpec(
    "compute.googleapis.com",
    "A2-CPUS-per-project-region",
    "region",
    "vCPUs",
    False,
    "terraform-provider-google acceptance test (fact sheet 6.3)",
    "GCE docs quoted by a public tool say A2 VMs only need the A100 GPU quota",
)

CPUS_QUOTA: Final = QuotaSpec(
    "compute.googleapis.com",
    "CPUS-per-project-region",
    "region",
    "vCPUs",
    False,
    "Compute Engine regional CPUs quota as named in the Console; not read back here",
)
"""General-purpose vCPUs in a region (the GKE system node's E2 vCPUs count here)."""

GKE_SYSTEM_NODE_MACHINE: Final = "e2-standard-4"
"""Machine of the one-node system pool a GKE GPU cluster gets, because kube-dns and the other
add-ons do not tolerate the GPU taint (components.a100_cluster)."""

_VERTEX_SOURCE: Final = (
    "metric names from vertex-ai-samples helpers (fact sheet 6.3); the Cloud Quotas quotaId "
    "may differ from the metric name"
)

VERTEX_GPU_QUOTAS: Final[dict[tuple[GpuModel, bool], QuotaSpec]] = {
    (model, spot): QuotaSpec(
        "aiplatform.googleapis.com",
        "custom_model_training_"
        + ("preemptible_" if spot else "")
        + ("nvidia_a100_gpus" if model == "A100 40GB" else "nvidia_a100_80gb_gpus"),
        "region",
        "GPUs",
        False,
        _VERTEX_SOURCE,
        ENUMERATE_HINT + " with service='aiplatform.googleapis.com'",
    )
    for model in ("A100 40GB", "A100 80GB")
    for spot in (False, True)
}
"""Vertex custom-training GPU quota by (model, spot); separate from Compute Engine quota."""

VERTEX_CPU_QUOTAS: Final[dict[str, QuotaSpec]] = {
    family: QuotaSpec(
        "aiplatform.googleapis.com",
        quota_id,
        "region",
        "vCPUs",
        False,
        _VERTEX_SOURCE,
        ENUMERATE_HINT + " with service='aiplatform.googleapis.com'",
    )
    for family, quota_id in (
        ("n1", "custom_model_training_cpus"),
        ("e2", "custom_model_training_cpus"),
        ("n2", "custom_model_training_n2_cpus"),
    )
}
"""Vertex custom-training vCPU quota by machine family (CPU-only pools such as reducers)."""

_TPU_QUOTA_STEMS: Final[dict[TpuGenerationName, str]] = {
    "v4": "TPUV4",
    "v5e": "TPUV5sLite",
    "v5p": "TPUV5p",
    "v6e": "TPUV6E",
}
_TPU_TIER_INFIX: Final[dict[TpuTier, str]] = {
    "on-demand": "",
    "spot": "Preemptible",
    "reserved": "Reserved",
}


def _tpu_quota(gen: TpuGenerationName, tier: TpuTier) -> QuotaSpec:
    stem = _TPU_QUOTA_STEMS[gen]
    return QuotaSpec(
        "tpu.googleapis.com",
        f"{stem}{_TPU_TIER_INFIX[tier]}PodPerProjectPerZoneForTPUAPI",
        "zone",
        "chips",
        False,
        "naming pattern of TPUV2sPodPerProjectPerZoneForTPUAPI seen in an error message "
        "(fact sheet 6.3); https://cloud.google.com/tpu/docs/quota",
        "id is a guess from the naming pattern, and v4/v5p quota may count TensorCores "
        f"rather than chips; {ENUMERATE_HINT} with service='tpu.googleapis.com'",
    )


TPU_QUOTAS: Final[dict[tuple[TpuGenerationName, TpuTier], QuotaSpec]] = {
    (gen, tier): _tpu_quota(gen, tier) for gen in TPU_GENERATIONS for tier in _TPU_TIER_INFIX
}
"""Cloud TPU API quota by (generation, tier). Every id here is UNVERIFIED."""

# --------------------------------------------------------------------------------------
# Prices (ESTIMATES)
# --------------------------------------------------------------------------------------

PRICES_SOURCE: Final = (
    "ESTIMATES, not verified: us-central1 list prices as remembered from "
    "https://cloud.google.com/tpu/pricing, https://cloud.google.com/compute/gpus-pricing and "
    "https://cloud.google.com/compute/vm-instance-pricing; spot derived from "
    "https://cloud.google.com/spot-vms/pricing (A2 spot vCPU $0.01264 = 0.4 x on-demand)"
)
PRICES_AS_OF: Final = "2026-11-01"
PRICES_VERIFIED: Final = False
PRICE_REGION: Final = "us-central1"

SPOT_PRICE_FRACTION: Final = 0.4
"""Spot price as a fraction of on-demand. Google documents spot discounts of 60-91%, so
0.4 is the upper end: plans overstate rather than understate spot cost."""

VERTEX_TRAINING_MARKUP: Final = 1.15
"""Vertex custom training charges about 15% over the Compute Engine price of the same
machine (estimate, unverified; Vertex publishes its own per-machine price table)."""

GKE_CLUSTER_FEE_USD: Final = 0.10
"""GKE cluster management fee per cluster-hour (the free-tier credit is ignored)."""


@dataclass(frozen=True)
class Price:
    """Hourly USD list price estimate."""

    on_demand: float
    verified: bool = False
    note: str = ""

    @property
    def spot(self) -> float:
        """Spot estimate (upper end of Google's documented discount range)."""
        return round(self.on_demand * SPOT_PRICE_FRACTION, 6)

    def hourly(self, spot: bool) -> float:
        """Spot or on-demand price per hour."""
        return self.spot if spot else self.on_demand


TPU_CHIP_PRICES: Final[dict[TpuGenerationName, Price]] = {
    "v4": Price(3.22),
    "v5e": Price(1.20),
    "v5p": Price(4.20),
    "v6e": Price(2.70),
}
"""Per chip-hour; reserved/CUD capacity is billed lower than this list price."""

MACHINE_PRICES: Final[dict[str, Price]] = {
    "a2-highgpu-1g": Price(3.673385),
    "a2-highgpu-2g": Price(7.34677),
    "a2-highgpu-4g": Price(14.69354),
    "a2-highgpu-8g": Price(29.38708),
    "a2-megagpu-16g": Price(55.739504),
    "a2-ultragpu-1g": Price(5.0688),
    "a2-ultragpu-2g": Price(10.1376),
    "a2-ultragpu-4g": Price(20.2752),
    "a2-ultragpu-8g": Price(40.5504),
    "n1-highcpu-16": Price(0.566788),
    "n2-highcpu-16": Price(0.573568),
    "n1-standard-4": Price(0.189999),
    "n1-standard-8": Price(0.379998),
    "e2-standard-4": Price(0.134012),
}
"""Per machine-hour on Compute Engine (GPUs included for A2)."""


@dataclass(frozen=True)
class CatalogTable:
    """Index entry: one table, its source and date."""

    name: str
    source: str
    as_of: str
    verified: bool
    notes: tuple[str, ...] = field(default=())


TABLES: Final = (
    CatalogTable("TPU_GENERATIONS", TPU_SOURCE, TPU_AS_OF, False,
                 ("v5e multi-host VM counts and v5litepod-8/v6e-8 single-host are unverified",
                  "some v5p shapes above 8x8x8 are unverified")),
    CatalogTable("TPU zones", TPU_ZONES_SOURCE, TPU_ZONES_AS_OF, False,
                 ("v6e AI zones and asia-northeast1-b unverified",)),
    CatalogTable("TPU runtimes", TPU_RUNTIME_SOURCE, TPU_RUNTIME_AS_OF, True,
                 ("-pjrt TF runtimes on v4 are accepted on assumption",)),
    CatalogTable("MACHINES", MACHINES_SOURCE, MACHINES_AS_OF, True,
                 ("CPU egress values are general GCE knowledge",)),
    CatalogTable("GPU_ACCELERATOR_NAMES", ACCELERATOR_NAMES_SOURCE, ACCELERATOR_NAMES_AS_OF,
                 True),
    CatalogTable("A100_ZONES", A100_ZONES_SOURCE, A100_ZONES_AS_OF, A100_ZONES_VERIFIED,
                 ("volatile",)),
    CatalogTable("quotas", QUOTAS_SOURCE, QUOTAS_AS_OF, False,
                 ("compute A100 ids verified; Vertex, TPU and A2 CPU ids unverified",)),
    CatalogTable("prices", PRICES_SOURCE, PRICES_AS_OF, PRICES_VERIFIED, ("estimates",)),
)  # fmt: skip
"""Every table with its source and date, for `trainstack plan` footnotes."""

"""Quota ids and prices: what a compute component counts its cost and quota with
(`trainstack.components.facts`), and what the offline plan and the quota preflight read.

The Google Cloud facts the components need to build (TPU slices, machine shapes, accelerator
names, zones, images) live beside this in `trainstack.components.catalog`; this module adds
the tables of what the compute costs and draws, each with its source (`*_SOURCE`) and date (`*_AS_OF`), and
`TABLES`, the index of every table for `trainstack plan` footnotes. Facts that the team's
fact sheet (`trainstack.components.catalog.sources.FACT_SHEET`) marks as unverified carry `verified=False` and a note.
Nothing here calls a cloud API; at deploy time, prefer the live answers
(`gcp.cloudquota.get_s_quota_infos`) where they disagree.

Prices are list-price ESTIMATES (USD, us-central1) for the offline plan only; they are not
quotes and are not verified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from trainstack.components.catalog.gpus import (
    A100_ZONES_AS_OF,
    A100_ZONES_SOURCE,
    A100_ZONES_VERIFIED,
    ACCELERATOR_NAMES_AS_OF,
    ACCELERATOR_NAMES_SOURCE,
    GpuModel,
)
from trainstack.components.catalog.images import (
    PREBUILT_IMAGES_VERIFIED,
    TF_IMAGE_SOURCE,
    TORCH_IMAGE_SOURCE,
    VERTEX_IMAGE_END_OF_AVAILABILITY_SOURCE,
)
from trainstack.components.catalog.machines import (
    MACHINES_AS_OF,
    MACHINES_SOURCE,
)
from trainstack.components.catalog.sources import FACT_SHEET
from trainstack.components.catalog.tpu import (
    TPU_AS_OF,
    TPU_GENERATIONS,
    TPU_RUNTIME_AS_OF,
    TPU_RUNTIME_SOURCE,
    TPU_SOURCE,
    TPU_ZONES_AS_OF,
    TPU_ZONES_SOURCE,
    TpuGenerationName,
)

__all__ = [
    "A2_CPUS_QUOTA",
    "COMPUTE_QUOTAS",
    "CPUS_QUOTA",
    "ENUMERATE_HINT",
    "GKE_CLUSTER_FEE_USD",
    "GPUS_ALL_REGIONS_QUOTA",
    "MACHINE_PRICES",
    "PRICES_AS_OF",
    "PRICES_SOURCE",
    "PRICES_VERIFIED",
    "PRICE_REGION",
    "QUOTAS_AS_OF",
    "QUOTAS_SOURCE",
    "SPOT_PRICE_FRACTION",
    "TABLES",
    "TPU_CHIP_PRICES",
    "TPU_QUOTAS",
    "VERTEX_CPU_QUOTAS",
    "VERTEX_GPU_QUOTAS",
    "VERTEX_IMAGES_AS_OF",
    "VERTEX_TRAINING_MARKUP",
    "CatalogTable",
    "Price",
    "QuotaSpec",
    "TpuTier",
    "quota_need",
]

TpuTier = Literal["on-demand", "spot", "reserved"]

VERTEX_IMAGES_AS_OF: Final = "2026-11-26"
"""When the Vertex image tables (`trainstack.components.catalog.images`) were last checked."""

# --------------------------------------------------------------------------------------
# Quotas
# --------------------------------------------------------------------------------------

QUOTAS_SOURCE: Final = (
    f"{FACT_SHEET} section 6.3; facts memo 13 section 1; https://cloud.google.com/tpu/docs/quota"
)
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
_GUESS_NEW_GPU: Final = (
    "not in a stored source: named after NVIDIA_H100_GPUS (GoogleCloudPlatform/"
    "cluster-toolkit:pkg/validators/quota.go) and the machine's accelerator type"
)

_NEW_GPU_QUOTA_STEMS: Final[tuple[tuple[GpuModel, str, str], ...]] = (
    (
        "H100 80GB",
        "H100",
        (
            "metric NVIDIA_H100_GPUS: GoogleCloudPlatform/cluster-toolkit:"
            "pkg/validators/quota.go acceleratorMetricMap"
        ),
    ),
    ("H100 Mega 80GB", "H100-MEGA", _GUESS_NEW_GPU),
    ("H200 141GB", "H200", _GUESS_NEW_GPU),
    ("B200", "B200", _GUESS_NEW_GPU),
)

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
    **{
        (model, spot): QuotaSpec(
            "compute.googleapis.com",
            f"{'PREEMPTIBLE-' if spot else ''}NVIDIA-{stem}-GPUS-per-project-region",
            "region",
            "GPUs",
            False,
            source,
            "the id follows the A100 ids' pattern (metric NVIDIA_<GPU>_GPUS, id "
            "NVIDIA-<GPU>-GPUS-per-project-region); Google may count these GPUs in "
            "GPUS-PER-GPU-FAMILY-per-project-region instead (gcp-facts.md 6.3); "
            + ("Spot and flex-start VMs use the preemptible quota; " if spot else "")
            + ENUMERATE_HINT,
        )
        for model, stem, source in _NEW_GPU_QUOTA_STEMS
        for spot in (False, True)
    },
}
"""Compute Engine GPU quota by (model, spot); spot also stands for flex-start (preemptible
quota, frontier.md 5.2)."""

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
    # Kept as a need, not dropped: the sentence below was searched for on Google's own pages
    # (2026-11-23: cloud.google.com/compute/resource-usage and the GPU VM pages in the docs
    # and pages corpora) and found only quoted by third-party code. Unverified, so a
    # shortfall or an unknown id only warns (components/quota_guard.py).
    "advisory: third-party code quotes Google's resource-usage page as 'To create A2 VMs, "
    "you only need to have the required NVIDIA A100 GPU quotas. You don't need to request "
    "CPU quotas' (facts memo 13 section 1c, V-3p); not found on a Google page, so kept",
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


_MEMO: Final = "facts memo 13 section 1"
_VERTEX_SAMPLE: Final = (
    "GoogleCloudPlatform/vertex-ai-samples:notebooks/community/model_garden/docker_source_codes/"
    "notebook_util/common_util.py get_quota_id (Google sample code; read with `gcloud beta "
    f"quotas info describe ... --service=aiplatform.googleapis.com`), {_MEMO}b"
)
_VERTEX_HINT: Final = ENUMERATE_HINT + " with service='aiplatform.googleapis.com'"


_VERTEX_STEMS: Final[dict[GpuModel, str]] = {
    # get_quota_id's accelerator_map (_VERTEX_SAMPLE @cc0d791, lines 538-549), by the
    # MachineSpec accelerator each model is: NVIDIA_TESLA_A100, NVIDIA_A100_80GB,
    # NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB ("H100MEGAGPUs", capitals as Google spells it),
    # NVIDIA_H200_141GB, NVIDIA_B200.
    "A100 40GB": "A100GPUs",
    "A100 80GB": "A10080GBGPUs",
    "H100 80GB": "H100GPUs",
    "H100 Mega 80GB": "H100MEGAGPUs",
    "H200 141GB": "H200GPUs",
    "B200": "B200GPUs",
}


def _vertex_gpu_quota(model: GpuModel, spot: bool) -> QuotaSpec:
    stem = _VERTEX_STEMS[model]
    quota_id = f"CustomModelTraining{'Preemptible' if spot else ''}{stem}PerProjectPerRegion"
    if not spot:
        return QuotaSpec(
            "aiplatform.googleapis.com", quota_id, "region", "GPUs", True, _VERTEX_SAMPLE
        )
    return QuotaSpec(
        "aiplatform.googleapis.com",
        quota_id,
        "region",
        "GPUs",
        False,
        _VERTEX_SAMPLE,
        # The id is Google's, and Dynamic Workload Scheduler (flex-start) jobs draw on it
        # (get_quota_id: is_dynamic_workload_scheduler -> dws_training_accelerator_map);
        # that Spot jobs draw on it too is not.
        "Google's sample uses the Preemptible id for Dynamic Workload Scheduler jobs; that "
        "Spot jobs draw on it too is reported only by third parties (memo 13 section 1b)",
    )


VERTEX_GPU_QUOTAS: Final[dict[tuple[GpuModel, bool], QuotaSpec]] = {
    (model, spot): _vertex_gpu_quota(model, spot)
    for model in _VERTEX_STEMS
    for spot in (False, True)
}
"""Vertex custom-training GPU quota by (model, spot); separate from Compute Engine quota.
On-demand ids VERIFIED (Google sample code, every GPU here); the Preemptible ones are
Google's ids for flex-start jobs, unverified for Spot."""

_VERTEX_CPU_NOTE: Final = (
    "no source names this quotaId: it follows the pattern of the GPU ids "
    "(CustomModelTraining<what>PerProjectPerRegion); "
)
VERTEX_CPU_QUOTAS: Final[dict[str, QuotaSpec]] = {
    family: QuotaSpec(
        "aiplatform.googleapis.com",
        quota_id,
        "region",
        "vCPUs",
        False,
        f"{_MEMO}b: {source}",
        _VERTEX_CPU_NOTE + _VERTEX_HINT,
    )
    for family, quota_id, source in (
        # The metric is aiplatform.googleapis.com/custom_model_training_cpus, shown as "Custom
        # model training CPUs for N1/E2 machine types per region".
        ("n1", "CustomModelTrainingCPUsPerProjectPerRegion", "metric custom_model_training_cpus"),
        ("e2", "CustomModelTrainingCPUsPerProjectPerRegion", "metric custom_model_training_cpus"),
        ("n2", "CustomModelTrainingN2CPUsPerProjectPerRegion", "no N2 id or metric found"),
    )
}
"""Vertex custom-training vCPU quota by machine family (CPU-only pools such as reducers).
Every id here is UNVERIFIED."""

_MARIN_87: Final = "marin-community/marin issue #87 (quota error text; third party)"
_TPU_TABLE: Final = "a research group's TPU quota table and public tools (third party)"
_PASTED: Final = "quota error text pasted in public repositories (third party)"
_GUESS: Final = "none found"
_TPU_IDS: Final[dict[tuple[TpuGenerationName, TpuTier], tuple[str, str]]] = {
    # (generation, tier): (quotaId, source). Each zone id has a ...PerProjectPerRegion twin,
    # also enforced; the zone one is what a slice in one zone needs.
    ("v4", "on-demand"): ("TPUV4sPodPerProjectPerZoneForTPUAPI", _GUESS),
    ("v4", "spot"): ("TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI", _MARIN_87),
    ("v4", "reserved"): ("TPUV4sReservedPodPerProjectPerZoneForTPUAPI", _GUESS),
    ("v5e", "on-demand"): ("TPUV5sLitepodPerProjectPerZoneForTPUAPI", _TPU_TABLE),
    ("v5e", "spot"): ("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", _MARIN_87),
    ("v5e", "reserved"): ("TPUV5sReservedLitepodPerProjectPerZoneForTPUAPI", _GUESS),
    ("v5p", "on-demand"): ("TPUV5PPerProjectPerZoneForTPUAPI", _PASTED),
    ("v5p", "spot"): ("TPUV5PPreemptiblePerProjectPerZoneForTPUAPI", _PASTED),
    ("v5p", "reserved"): ("TPUV5PReservedPerProjectPerZoneForTPUAPI", _GUESS),
    ("v6e", "on-demand"): ("TPUV6EPerProjectPerZoneForTPUAPI", _TPU_TABLE),
    ("v6e", "spot"): ("TPUV6EPreemptiblePerProjectPerZoneForTPUAPI", _TPU_TABLE),
    ("v6e", "reserved"): ("TPUV6EReservedPerProjectPerZoneForTPUAPI", _GUESS),
}
"""v4 on-demand is guessed from v4 spot's id and the older TPUV2sPodPerProjectPerZoneForTPUAPI;
the reserved ids from each generation's spot id (no reserved id was found anywhere)."""


_TPU_TIERS: Final[tuple[TpuTier, ...]] = ("on-demand", "spot", "reserved")


def _tpu_quota(gen: TpuGenerationName, tier: TpuTier) -> QuotaSpec:
    quota_id, source = _TPU_IDS[(gen, tier)]
    note = (
        ("id guessed from the ids of the other tiers; " if source == _GUESS else "")
        + (
            "Google: 'For TPU v4 and v5p, quota can be specified in terms of Cloud TPU chips "
            "or TensorCores' (https://cloud.google.com/tpu/docs/quota): the project's unit is "
            "not knowable here; needed counts chips, a TensorCore quota needs twice that; "
            if gen in ("v4", "v5p")
            else ""
        )
        + (
            "v5litepod-1/-4/-8 may draw the v5e serving quota "
            "TPUV5sLitepodServingPerProjectPerZoneForTPUAPI instead; "
            if gen == "v5e"
            else ""
        )
        + f"{ENUMERATE_HINT} with service='tpu.googleapis.com'"
    )
    return QuotaSpec(
        "tpu.googleapis.com",
        quota_id,
        "zone",
        "chips",
        False,
        f"{_MEMO}a: {source}; https://cloud.google.com/tpu/docs/quota",
        note,
    )


TPU_QUOTAS: Final[dict[tuple[TpuGenerationName, TpuTier], QuotaSpec]] = {
    (gen, tier): _tpu_quota(gen, tier) for gen in TPU_GENERATIONS for tier in _TPU_TIERS
}
"""Cloud TPU API quota by (generation, tier). Every id here is UNVERIFIED: no Google page
names them; the on-demand and spot ids of v4 spot, v5e, v5p and v6e appear in quota errors
and tools that read the live API, the v4 on-demand and reserved ids are guesses."""

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

_NEW_GPU_PRICE: Final = (
    "not in a stored source (remembered list price, us-central1); spot and flex-start have "
    "no stored price either"
)

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
    # NOT in a stored source: remembered us-central1 list prices. skypilot-catalog
    # catalogs/v8/gcp/vms.csv @006059e0 has only the host part (a3-*gpu-8g $9.46006,
    # a3-ultragpu-8g $12.266, a4-highgpu-8g 0.0: no price) without the GPUs.
    "a3-highgpu-8g": Price(88.25, note=_NEW_GPU_PRICE),
    "a3-megagpu-8g": Price(88.25, note=_NEW_GPU_PRICE + "; taken equal to a3-highgpu-8g"),
    "a3-ultragpu-8g": Price(84.81, note=_NEW_GPU_PRICE),
    "a4-highgpu-8g": Price(
        100.0, note=_NEW_GPU_PRICE + "; no list price known at all: a placeholder above A3"
    ),
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
    CatalogTable("VERTEX_TRAINING_IMAGES", f"{TORCH_IMAGE_SOURCE}; {TF_IMAGE_SOURCE}",
                 VERTEX_IMAGES_AS_OF, False,
                 ("Docker Hub tags seen in public Dockerfiles",
                  "Python and CUDA from the frameworks' Dockerfiles, not the tags",
                  "Docker Hub publishes no end of availability")),
    CatalogTable("VERTEX_IMAGE_END_OF_AVAILABILITY", VERTEX_IMAGE_END_OF_AVAILABILITY_SOURCE,
                 VERTEX_IMAGES_AS_OF, PREBUILT_IMAGES_VERIFIED,
                 ("every Google prebuilt GPU training image is past its date",)),
    CatalogTable("quotas", QUOTAS_SOURCE, QUOTAS_AS_OF, False,
                 ("compute A100 and Vertex on-demand GPU ids verified",
                  "Vertex Spot and CPU, TPU and A2 CPU ids unverified")),
    CatalogTable("prices", PRICES_SOURCE, PRICES_AS_OF, PRICES_VERIFIED, ("estimates",)),
)  # fmt: skip
"""Every table with its source and date, for `trainstack plan` footnotes."""


def quota_need(spec: QuotaSpec, dimensions: dict[str, str], needed: int) -> dict[str, Any]:
    """One entry of a stack's quota needs (`trainstack.infra.estimate.quota_needs`)."""
    return {
        "service": spec.service,
        "quota_id": spec.quota_id,
        "dimensions": dimensions,
        "needed": needed,
        "verified": spec.verified,
        "source": spec.source,
    }

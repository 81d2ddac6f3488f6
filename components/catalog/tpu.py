"""Cloud TPU facts: generations, slice shapes, zones, runtimes, provisioning and Secure Boot.

Every table carries its source (`*_SOURCE`) and the date it was compiled (`*_AS_OF`).
Facts that the team's fact sheet (`sources.FACT_SHEET`, "checked facts") marks as
unverified carry `verified=False` and a note, so callers can say so instead of presenting a
guess as a fact. Nothing here calls a cloud API: these tables let `trainstack plan` and
`TpuPodSlice` reject a bad slice offline, before any resource is registered. At deploy time,
prefer the live answers (`gcp.tpu.get_v2_accelerator_types`) where they disagree.
The rules over these facts are in `trainstack.components.catalog.tpu_rules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from trainstack.components.catalog.sources import FACT_SHEET
from trainstack.components.catalog.tpu_runtimes import (
    DEVICE_API_REQUIRED_FROM,
    HARDWARE_SUFFIX_FROM,
    HARDWARE_SUFFIX_GENERATIONS,
    TF_RUNTIME_NAMES_SOURCE,
    TfRuntime,
    newest_tf_runtime,
    parse_tf_runtime,
)

TpuGenerationName = Literal["v4", "v5e", "v5p", "v6e"]

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
    f"https://cloud.google.com/tpu/docs/supported-versions; {FACT_SHEET} section 1.4; "
    f"{TF_RUNTIME_NAMES_SOURCE}"
)
TPU_RUNTIME_AS_OF: Final = "2026-11-01"

CLOUD_TPU_API_SOURCE: Final = (
    # "Migrate from the Cloud TPU API", read in zh-cn and ja (the English copy stops before
    # it): "Cloud TPU API 不再处于积极开发阶段 ... 将仅接收 bug 修复和安全更新。从 TPU7x
    # (Ironwood) 开始的新硬件代系仅通过 Compute Engine 或 Google Kubernetes Engine (GKE)
    # 提供支持" ("The Cloud TPU API is no longer in active development ... will only receive
    # bug fixes and security updates. New hardware generations starting with TPU7x (Ironwood)
    # are only supported through Compute Engine or Google Kubernetes Engine (GKE)").
    "https://docs.cloud.google.com/tpu/docs/tpus-in-compute-engine; "
    # The banner of the runtime and JAX-slice pages: "This page applies to the Cloud TPU API,
    # which is no longer under active development ... The Cloud TPU API is not supported on
    # TPU7x and later".
    "https://docs.cloud.google.com/tpu/docs/runtimes, "
    f"https://docs.cloud.google.com/tpu/docs/jax-pods; {FACT_SHEET} section 1.0"
)
CLOUD_TPU_API_AS_OF: Final = "2026-11-29"
CLOUD_TPU_API_NOTE: Final = (
    "tpu: the slice is created through the Cloud TPU API (tpu.googleapis.com v2), which Google "
    'says is "no longer in active development" (bug fixes and security updates only) and '
    '"not supported on TPU7x and later" (https://docs.cloud.google.com/tpu/docs/runtimes, '
    "https://docs.cloud.google.com/tpu/docs/tpus-in-compute-engine); this target serves v4, "
    "v5e, v5p and v6e, and TPU7x and later need GKE (Google's supported path for TPU7x and "
    "later)"
)
"""The plan note on every `tpu` stack (`trainstack.infra.targets.tpu`)."""


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
        low, since = _v(self.tf_min_version), _v(HARDWARE_SUFFIX_FROM)
        if self.tf_requires_pjrt:
            suffix = next(s for s, g in HARDWARE_SUFFIX_GENERATIONS.items() if self.name in g)
            return (
                f"{self.base_runtime}, tpu-vm-tf-X.Y.Z[-pod]-pjrt (TF >= {low}), "
                f"tpu-vm-tf-X.Y.Z[-pod]-pjrt-{suffix} (TF >= {since})"
            )
        return (
            f"{self.base_runtime}, tpu-vm-tf-X.Y.Z[-pod]-pjrt, tpu-vm-tf-X.Y.Z[-pod]-se "
            f"(TF >= {_v(DEVICE_API_REQUIRED_FROM)}), tpu-vm-tf-X.Y.Z[-pod] (TF {low} to 2.14.x), "
            f"tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5p-and-below (TF >= {since}), "
            "tpu-vm-tf-X.Y.Z[-pod]-v4 (TF <= 2.10.0)"
        )


def _v(version: tuple[int, int, int]) -> str:
    return ".".join(str(n) for n in version)


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


@dataclass(frozen=True)
class RuntimeMatch:
    """How a runtime version relates to a TPU generation."""

    belongs: bool
    """The runtime can run on this generation."""
    pod: bool
    """The runtime is a `-pod` (multi-host) TensorFlow runtime."""
    tensorflow: bool
    """The runtime ships TensorFlow (`tpu-vm-tf-*`)."""
    tf: TfRuntime | None = None
    """What the TensorFlow runtime's name says (its TF version, device API, Keras rule)."""


def tpu_runtime_match(generation: TpuGenerationName, runtime_version: str) -> RuntimeMatch:
    """Say whether `runtime_version` belongs to `generation` and whether it is a `-pod` one.

    Rules (`trainstack.components.catalog.tpu_runtimes.TF_RUNTIME_NAMES_SOURCE`): each generation has one
    base runtime; TensorFlow runtimes are `tpu-vm-tf-X.Y.Z[-pod][-{pjrt,se}]`. v5e/v5p/v6e
    need TF >= 2.15.0 with `-pjrt`. v4 follows the v2/v3 rules from TF 2.10.1 on: plain
    names (stream executor) before TF 2.15.0, a device API (`-pjrt` or `-se`) from it; up to
    TF 2.10.0 its names end in `-v4`. `-pjrt-v5e-and-v6` / `-pjrt-v5p-and-below` names
    (TF >= 2.18.0) fit the generations they name (unverified). The TPU API's runtime list
    is authoritative.
    """
    gen = TPU_GENERATIONS[generation]
    if runtime_version == gen.base_runtime:
        return RuntimeMatch(belongs=True, pod=False, tensorflow=False)
    rt = parse_tf_runtime(runtime_version)
    if rt is None:
        return RuntimeMatch(belongs=False, pod=False, tensorflow=False)
    return RuntimeMatch(belongs=_tf_runtime_fits(gen, rt), pod=rt.pod, tensorflow=True, tf=rt)


def _tf_runtime_fits(gen: TpuGeneration, rt: TfRuntime) -> bool:
    if rt.hardware == "v4":
        return gen.name == "v4" and rt.device_api is None and rt.version <= (2, 10, 0)
    if rt.hardware is not None and (
        gen.name not in HARDWARE_SUFFIX_GENERATIONS[rt.hardware]
        or not rt.pjrt
        or rt.version < HARDWARE_SUFFIX_FROM
    ):
        return False
    if rt.version < gen.tf_min_version:
        return False
    if gen.tf_requires_pjrt:
        return rt.pjrt
    if rt.version >= DEVICE_API_REQUIRED_FROM:
        return rt.device_api is not None
    return rt.device_api is None


def default_tpu_runtime(generation: TpuGenerationName, framework: str, multi_host: bool) -> str:
    """The runtime a slice gets when `tpu.runtime_version` is not given: for the tensorflow
    trainer the newest TensorFlow runtime the catalog knows for `generation`
    (`trainstack.components.catalog.tpu_runtimes.KNOWN_TF_RUNTIMES`, `-pod` on a multi-host slice);
    for any other framework the generation's base runtime, where Google's guide has the
    framework installed by the user."""
    if framework == "tensorflow":
        return newest_tf_runtime(generation, multi_host)
    return TPU_GENERATIONS[generation].base_runtime


TPU_RUN_LIMIT_SOURCE: Final = (
    "DISC:tpu.v2.json (revision 20261001): Node.schedulingConfig has only preemptible, "
    "reserved and spot, QueuedResource no run duration; DISC:tpu.v2alpha1.json (revision "
    "20261001): QueuedResource.runDuration{maxRunDuration, terminationTime} ('Defines the "
    "maximum lifetime of the requested resource'), alpha only"
)
TPU_RUN_LIMIT_ENFORCED: Final = True
"""The GA Cloud TPU API (tpu.v2, which TpuPodSlice uses for nodes and queued resources)
offers no run limit (`TPU_RUN_LIMIT_SOURCE`), so `limits.max_run_hours` is enforced by an
equivalent, not a platform field: the slice's startup script (components/startup/
tpu_worker.sh, TpuPodSlice `max_run_seconds`) records the run's first start once in the
checkpoint bucket with the Compute Engine node helper (`run-started`, ifGenerationMatch=0;
`trainstack.components.catalog.recovery.GCE_RUN_LIMIT_SOURCE`), sends the trainer SIGTERM once the
limit has passed since then, logs `max_run_hours reached` and exits 0 without relaunching
it; a boot after the deadline exits at once. The slice itself keeps running (and billing)
until `pulumi destroy`: only the training stops."""


# --------------------------------------------------------------------------------------
# How capacity is obtained
# --------------------------------------------------------------------------------------

TpuProvisioning = Literal["on-demand", "spot", "queued", "reserved"]
"""on-demand, spot and reserved create a TPU VM directly (`schedulingConfig`); queued goes
through a queued resource, the only form that can name a reservation."""
TPU_PROVISIONING: Final[tuple[str, ...]] = get_args(TpuProvisioning)
QueuedTier = Literal["on-demand", "spot", "guaranteed"]
"""Capacity tier of a queued resource (its `spot` / `guaranteed` fields; neither is
on-demand)."""
QUEUED_TIERS: Final[tuple[str, ...]] = get_args(QueuedTier)
DISK_MODES: Final = ("READ_WRITE", "READ_ONLY")
"""`AttachedDisk.mode` of a TPU VM data disk."""
READ_ONLY_MULTI_HOST_SOURCE: Final = (
    "https://docs.cloud.google.com/tpu/docs/attach-durable-block-storage (read-write mode "
    "attaches a disk to at most one instance)"
)

SECURE_BOOT_GENERATIONS: Final[frozenset[str]] = frozenset({"v4", "v5e", "v5p", "v6e"})
SECURE_BOOT_VERIFIED: Final = False
SECURE_BOOT_SOURCE: Final = (
    "DISC:tpu.v2.json#Node.shieldedInstanceConfig; gcloud compute tpus queued-resources "
    "create --shielded-secure-boot; Cloud TPU's answer to constraints/compute.requireShieldedVm "
    "('Please create TPUs with Secure Boot enabled', quoted in "
    "google/fully-homomorphic-encryption#103). No Google page lists the generations."
)

"""GPU facts: how each API spells an A100 model, where A100s are offered, and the compact
placement limit.

Every table carries its source (`*_SOURCE`) and the date it was compiled (`*_AS_OF`); the
zone lists are volatile and marked unverified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from trainstack.components.catalog.sources import FACT_SHEET

GpuModel = Literal["A100 40GB", "A100 80GB", "H100 80GB", "H100 Mega 80GB", "H200 141GB", "B200"]

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
    # The GKE labels of the newer GPUs: frontier.md 4.1 [X5 system_characteristics.py, C7
    # examples/gke-a3-megagpu, gke-a3-ultragpu, gke-a4]; the Vertex enum values:
    # DISC:aiplatform.v1.json#GoogleCloudAiplatformV1MachineSpec.acceleratorType.
    "H100 80GB": GpuAcceleratorNames(compute="nvidia-h100-80gb", vertex="NVIDIA_H100_80GB"),
    "H100 Mega 80GB": GpuAcceleratorNames(
        compute="nvidia-h100-mega-80gb", vertex="NVIDIA_H100_MEGA_80GB"
    ),
    "H200 141GB": GpuAcceleratorNames(compute="nvidia-h200-141gb", vertex="NVIDIA_H200_141GB"),
    "B200": GpuAcceleratorNames(compute="nvidia-b200", vertex="NVIDIA_B200"),
}

VertexAcceleratorType = Literal[
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
]
"""The Vertex `MachineSpec.acceleratorType` values of the catalog's GPU models (the
`vertex` names above, in the same order)."""
VERTEX_GPU_ENUMS: Final[tuple[str, ...]] = get_args(VertexAcceleratorType)

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

NEW_GPU_ZONES_SOURCE: Final = (
    "skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e0 (the a3-highgpu-8g, "
    "a3-megagpu-8g, a3-ultragpu-8g and a4-highgpu-8g rows: the zones Compute Engine listed "
    "those machine types in when the catalog was fetched)"
)
NEW_GPU_ZONES_VERIFIED: Final = False
"""Read from a third-party copy of `machineTypes.list`, not a Google page: volatile."""

NEW_GPU_ZONES: Final[dict[GpuModel, tuple[str, ...]]] = {
    "H100 80GB": (
        "asia-east1-c", "asia-northeast1-b", "asia-south1-c", "asia-south2-b",
        "asia-southeast1-b", "asia-southeast1-c", "australia-southeast1-c", "europe-north1-c",
        "europe-west1-b", "europe-west1-c", "europe-west3-c", "europe-west4-b",
        "europe-west4-c", "europe-west9-c", "us-central1-a", "us-central1-b", "us-central1-c",
        "us-east4-a", "us-east4-b", "us-east4-c", "us-east5-a", "us-west1-a", "us-west1-b",
        "us-west4-a",
    ),
    "H100 Mega 80GB": (
        "asia-east1-c", "asia-northeast1-b", "asia-southeast1-b", "asia-southeast1-c",
        "australia-southeast1-c", "europe-north1-c", "europe-west1-b", "europe-west1-c",
        "europe-west3-c", "europe-west4-b", "europe-west4-c", "us-central1-a",
        "us-central1-b", "us-central1-c", "us-east4-a", "us-east4-b", "us-east4-c",
        "us-east5-a", "us-west1-a", "us-west1-b", "us-west4-a",
    ),
    "H200 141GB": (
        "asia-south1-b", "asia-south2-c", "europe-west1-b", "europe-west4-a", "us-central1-b",
        "us-east4-b", "us-east5-a", "us-south1-b", "us-west1-c",
    ),
    "B200": (
        "asia-northeast1-b", "asia-southeast1-b", "europe-north1-b", "europe-west4-b",
        "us-central1-b", "us-east1-b", "us-east4-b", "us-south1-b", "us-west2-c",
        "us-west3-b", "us-west3-c",
    ),
}  # fmt: skip

GPU_ZONES: Final[dict[GpuModel, tuple[str, ...]]] = {**A100_ZONES, **NEW_GPU_ZONES}
"""Every GPU model's zones (A100 and the newer families)."""

MAX_NODES: Final = 1000
"""An A100 cluster's `node_count` on either backend, both one zone:
- gke, one node pool in `zone`: "Nodes per node pool zone | 1,000" (GKE quotas and limits,
  https://cloud.google.com/kubernetes-engine/quotas, a system limit, "can't be changed");
- gce, one zonal managed instance group: "By default, you can create up to 1,000 VMs in a
  zonal MIG" (https://cloud.google.com/compute/docs/instance-groups/creating-groups-of-managed-instances,
  Limitations), and its per-instance configs: "When updating a MIG, you can specify up to
  1,000 VMs in a single request"."""

# Standard-mode limits were not re-verified; the Autopilot page says 1,500 nodes per
# placement group (an older version said 150). Above MAX_NODES for now: the rule stays for a
# catalog where it is the smaller.
COMPACT_PLACEMENT_MAX_NODES: Final = 1500
COMPACT_PLACEMENT_VERIFIED: Final = False

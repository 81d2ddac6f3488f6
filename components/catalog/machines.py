"""Compute Engine machine shapes: A2 GPU machines, and the CPU machines used for reducers,
chiefs, GKE system nodes and tests.

Every table carries its source (`MACHINES_SOURCE`) and the date it was compiled; nothing
here calls a cloud API (prefer `gcp.compute.get_machine_types` at deploy time where they
disagree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from trainstack.components.catalog.gpus import GpuModel
from trainstack.components.catalog.sources import FACT_SHEET

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

NEW_GPU_MACHINES_SOURCE: Final = (
    "vCPUs and memory: skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e0; GPU "
    "model and count: /work/shared/reference/frontier.md 4.1 [X5, C7, CEA]"
)
_NEW_NOTE: Final = (
    "egress_gbps is the primary gVNIC's figure as assumed here, not a stored source (the GPU "
    "NICs of the fabric carry NCCL traffic); bundled local SSD not recorded"
)


def _a3(name: str, model: GpuModel, vcpus: int, mem: float) -> MachineType:
    return MachineType(name, vcpus, mem, 200, 8, model, None, verified=False, note=_NEW_NOTE)


NEW_GPU_MACHINES: Final[dict[str, MachineType]] = {
    m.name: m
    for m in (
        _a3("a3-highgpu-8g", "H100 80GB", 208, 1872),
        _a3("a3-megagpu-8g", "H100 Mega 80GB", 208, 1872),
        _a3("a3-ultragpu-8g", "H200 141GB", 224, 2952),
        _a3("a4-highgpu-8g", "B200", 224, 3968),
    )
}
"""The 8-GPU A3 High (H100), A3 Mega (H100 Mega), A3 Ultra (H200) and A4 (B200) machines."""

GPU_MACHINES: Final[dict[str, MachineType]] = {**A2_MACHINES, **NEW_GPU_MACHINES}
"""Every GPU machine a GPU cluster or a Vertex pool may use."""

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

MACHINES: Final[dict[str, MachineType]] = {**GPU_MACHINES, **CPU_MACHINES}

GKE_SYSTEM_NODE_MACHINE: Final = "e2-standard-4"
"""Machine of the one-node system pool a GKE GPU cluster gets, because kube-dns and the other
add-ons do not tolerate the GPU taint (trainstack.components.a100_cluster)."""

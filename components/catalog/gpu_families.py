"""GPU machine families past A2: what each needs around it (fabric, driver floor, GKE
version) and the rules of Dynamic Workload Scheduler flex-start, each with its source.

Source keys (`FRONTIER`) name /work/shared/reference/frontier.md sections and its keys:
X5 AI-Hypercomputer/xpk @367c838, C7 GoogleCloudPlatform/cluster-toolkit @1047080, CEA
GoogleCloudPlatform/container-engine-accelerators @992db812, G-RDMA Google's "RDMA network
profiles" page, G-GKEDWS / G-VXDWS Google's flex-start pages, DISC the discovery documents
shipped with google-api-python-client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from trainstack.components.catalog.gpus import GpuModel

FRONTIER: Final = "/work/shared/reference/frontier.md"

Fabric = Literal["none", "tcpx", "tcpxo", "rdma"]
"""What carries NCCL between machines: plain TCP on the primary NIC (`none`),
GPUDirect-TCPX (A3 High), GPUDirect-TCPXO (A3 Mega), GPUDirect RDMA over RoCE (A3 Ultra, A4)."""


@dataclass(frozen=True)
class GpuFamily:
    """One machine family's facts beyond its machine shapes (`catalog.machines`)."""

    name: str
    gpu_model: GpuModel
    fabric: Fabric
    gpu_networks: int
    """Extra networks the GPU NICs attach to (TCPX 4, TCPXO 8, RDMA: 1 gVNIC VPC + 8 RoCE
    subnets of one RoCE VPC, counted here as 9 NICs beyond the primary)."""
    network_mtu: int
    """MTU of those networks."""
    cuda_floor: str
    """Oldest CUDA that runs the GPU (sm_90 Hopper, sm_100 Blackwell)."""
    gke_version_floor: str
    """The version Cluster Toolkit pins for the family's GKE blueprint."""
    source: str
    verified: bool = True
    note: str = ""


GPU_FAMILIES: Final[dict[GpuModel, GpuFamily]] = {
    "A100 40GB": GpuFamily(
        "A2", "A100 40GB", "none", 0, 1460, "11.0", "1.29",
        "trainstack's A2 cluster (no GPUDirect fabric on A2)",
    ),
    "A100 80GB": GpuFamily(
        "A2 Ultra", "A100 80GB", "none", 0, 1460, "11.0", "1.29",
        "trainstack's A2 cluster (no GPUDirect fabric on A2)",
    ),
    "H100 80GB": GpuFamily(
        "A3 High", "H100 80GB", "tcpx", 4, 8244, "12.0", "1.32",
        f"{FRONTIER} 4.1 (X5; S3:G5 'up to 4 secondary NICs'), 4.2 A3 High (CEA "
        "gpudirect-tcpx/nccl-tcpx-installer.yaml)",
        verified=False,
        note="MTU 8244 and the GKE floor are not in a stored source for A3 High",
    ),
    "H100 Mega 80GB": GpuFamily(
        "A3 Mega", "H100 Mega 80GB", "tcpxo", 8, 8244, "12.0", "1.32",
        f"{FRONTIER} 4.2 A3 Mega (C7 examples/gke-a3-megagpu: multivpc network_count 8, "
        "version prefix 1.32; CEA gpudirect-tcpxo)",
        verified=False,
        note="MTU 8244 is Cluster Toolkit's multivpc default as remembered, not re-read",
    ),
    "H200 141GB": GpuFamily(
        "A3 Ultra", "H200 141GB", "rdma", 9, 8896, "12.0", "1.35",
        f"{FRONTIER} 4.1 RoCE VPC facts (G-RDMA: MTU 8896, MRDMA NICs only on A3 Ultra, A4, "
        "A4X), 4.2 A4 / A3 Ultra networks (C7 gke-a3-ultragpu: net-1 + gpu-rdma-vpc 8 "
        "subnets, version prefix 1.35)",
    ),
    "B200": GpuFamily(
        "A4", "B200", "rdma", 9, 8896, "12.8", "1.35",
        f"{FRONTIER} 4.2 (C7 gke-a4), 4.3 A4 VMs (C7 machine-learning/a4-highgpu-8g/"
        "a4high-vm.yaml: CUDA toolkit 12.8, 2 gVNIC VPCs at MTU 8896 + gpu-rdma-vpc)",
    ),
}  # fmt: skip
"""Every GPU model's family. CUDA floors of Hopper (12.0) and Ampere (11.0) are NVIDIA's
compute capability support as generally known, not a stored source; Blackwell's 12.8 is what
Cluster Toolkit installs for A4 (C7 a4high-vm.yaml)."""

# --------------------------------------------------------------------------------------
# Dynamic Workload Scheduler flex-start
# --------------------------------------------------------------------------------------

FLEX_START_MAX_HOURS: Final = 7 * 24
"""A flex-start node, VM or job runs at most 7 days: GKE "Nodes run for at most 7 days"
(G-GKEDWS), Compute Engine "run <= 7 days" (DISC-C, S3:G7), Vertex "timeout <= 7 days"
(G-VXDWS); frontier.md 5.1, 5.2, 5.3."""
FLEX_START_QUEUE_HOURS_GCE: Final = 2
"""Compute Engine holds a flex-start request at most 2 h before it fails (frontier.md 5.2)."""
VERTEX_FLEX_START_DEFAULT_WAIT_HOURS: Final = 24
"""Vertex `Scheduling.maxWaitDuration`: "The default is 24 hours" and "If set to 0, the job
will wait indefinitely" (DISC:aiplatform.v1.json#GoogleCloudAiplatformV1Scheduling)."""
FLEX_START_DISCOUNT_NOTE: Final = (
    "flex-start is billed at Dynamic Workload Scheduler prices, 'discounts (up to 53%)' on "
    "vCPU and GPU (https://cloud.google.com/kubernetes-engine/docs/concepts/dws); no "
    "per-machine flex-start price is in a stored source, so the plan counts on-demand price "
    "(an upper bound)"
)
FLEX_START_QUOTA_NOTE: Final = (
    "flex-start draws on the preemptible GPU quota (frontier.md 5.2, Compute Engine; taken "
    "to hold on GKE too, unverified)"
)
VERTEX_FLEX_START_SOURCE: Final = (
    "https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws: 'set the "
    "scheduling.strategy API field to FLEX_START'; requirements 'requests L4, A100, H100, H200, "
    "or B200 GPUs', 'a maximum timeout of 7 days or less', 'uses the same machine "
    "configuration for all worker pools'"
)
VERTEX_FLEX_START_GPUS: Final[tuple[GpuModel, ...]] = (
    "A100 40GB", "A100 80GB", "H100 80GB", "H100 Mega 80GB", "H200 141GB", "B200",
)  # fmt: skip
"""The catalog's GPUs among those Vertex flex-start takes (VERTEX_FLEX_START_SOURCE; L4 is not
in the catalog). All of them: kept so a GPU added later is checked, not assumed."""
VERTEX_FLEX_START_QUOTA_NOTE: Final = (
    "Vertex flex-start is taken to draw on Vertex AI preemptible GPU quota ('Make sure you "
    "have sufficient Vertex AI preemptible quota', Google's flex-start page for Vertex "
    "inference, https://docs.cloud.google.com/vertex-ai/docs/predictions/use-flex-start-vms; "
    "the training page does not say, unverified)"
)
GKE_FLEX_START_VERSION: Final = "1.32.2-gke.1652000"
"""GPUs on GKE flex-start need at least this version (frontier.md 5.1, G-GKEDWS)."""
FLEX_START_ZONES_NOTE: Final = (
    "flex-start may be offered in fewer zones than the machine (Google's GPU regions page "
    "notes a narrower list; gcp-facts.md 1.3): not checked offline"
)


def family_of(model: GpuModel) -> GpuFamily:
    """The family of a GPU model."""
    return GPU_FAMILIES[model]

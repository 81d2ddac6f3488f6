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

from trainstack.components.catalog.gke_versions import GPU_FLEX_START_VERSION
from trainstack.components.catalog.gpus import GpuModel
from trainstack.components.catalog.machines import GPU_MACHINES

FRONTIER: Final = "/work/shared/reference/frontier.md"
CTK: Final = "GoogleCloudPlatform/cluster-toolkit @1047080"
XPK: Final = "AI-Hypercomputer/xpk @367c838"

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
    """Oldest CUDA whose compiler emits the GPU's native code (sm_80 Ampere, sm_90 Hopper,
    sm_100 Blackwell): an image built with an older CUDA has no kernels for it."""
    gke_version_floor: str
    """Oldest GKE minor (`1.N`) a Cluster Toolkit blueprint deploys the family on
    (`GKE_VERSION_FLOOR_SOURCE`); Google's own minimum is not in a stored source."""
    source: str
    verified: bool = True
    note: str = ""
    boot_disk_type: str = "pd-ssd"
    """The boot disk every target gives the family's machines (`BOOT_DISK_SOURCE`)."""
    compact_with_flex_start: bool = False
    """Whether a GKE flex-start pool of the family may have COMPACT placement
    (`COMPACT_FLEX_START_SOURCE`)."""


HYPERDISK: Final = "hyperdisk-balanced"
BOOT_DISK_SOURCE: Final = (
    "A3 Ultra and A4 boot from Hyperdisk: aiplatform.v1 discovery document, "
    "GoogleCloudAiplatformV1DiskSpec.bootDiskType ('For non-A3U machines, the default value is "
    '"pd-ssd", for A3U machines, the default value is "hyperdisk-balanced"\'); '
    f"{CTK} examples/machine-learning/a3-ultragpu-8g/a3ultra-vm.yaml and "
    "a4-highgpu-8g/a4high-vm.yaml (`disk_type: hyperdisk-balanced`); "
    f"{XPK} src/xpk/core/blueprint/blueprint_generator.py (the A4 pool's "
    '`"disk_type": "hyperdisk-balanced"`); hashicorp/terraform-provider-google '
    "google/services/compute/resource_compute_instance_group_manager_test.go "
    "(testAccInstanceGroupManager_withTargetSize: a4-highgpu-8g with `disk_type = "
    '"hyperdisk-balanced"`). A3 High and A3 Mega keep pd-ssd: '
    f"{CTK} examples/machine-learning/a3-highgpu-8g/a3high-slurm-blueprint.yaml and "
    "a3-megagpu-8g/a3mega-slurm-blueprint.yaml (their GPU nodesets: `disk_type: pd-ssd`)"
)
COMPACT_FLEX_START_SOURCE: Final = (
    f"{CTK} modules/compute/gke-node-pool/main.tf, precondition: 'Compact placement with "
    "DWS Flex start is only supported for A3 Ultra, A4, and H4D machine types.' "
    '(`!can(regex("^(a3-ultragpu-|a4-|h4d-)", var.machine_type))` for GPU pools). Not found '
    "for Compute Engine flex-start VMs (about-flex-start-vms and about-resize-requests-mig "
    "read), so the gce backend keeps its placement policy"
)
GKE_VERSION_FLOOR_SOURCE: Final = (
    f"{CTK} version_prefix of each GKE GPU blueprint: examples/gke-a3-highgpu/"
    "gke-a3-highgpu.yaml '1.33.', examples/gke-a3-megagpu/gke-a3-megagpu.yaml '1.32.', "
    "examples/gke-consumption-options/dws-flex-start/gke-a3-ultragpu.yaml and "
    "dws-flex-start-queued-provisioning/gke-a3-ultragpu.yaml '1.32.' (gke-a3-ultragpu.yaml "
    "'1.35.'), examples/gke-a4/gke-a4.yaml '1.35.' (the only A4 blueprint); the lowest per "
    "family"
)

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
        "A3 High", "H100 80GB", "tcpx", 4, 8244, "11.8", "1.33",
        f"{FRONTIER} 4.1 (X5; S3:G5 'up to 4 secondary NICs'), 4.2 A3 High (CEA "
        "gpudirect-tcpx/nccl-tcpx-installer.yaml); GKE floor: GKE_VERSION_FLOOR_SOURCE",
        verified=False,
        note="MTU 8244 is not in a stored source for A3 High",
    ),
    "H100 Mega 80GB": GpuFamily(
        "A3 Mega", "H100 Mega 80GB", "tcpxo", 8, 8244, "11.8", "1.32",
        f"{FRONTIER} 4.2 A3 Mega (C7 examples/gke-a3-megagpu: multivpc network_count 8, "
        "version prefix 1.32; CEA gpudirect-tcpxo)",
        verified=False,
        note="MTU 8244 is Cluster Toolkit's multivpc default as remembered, not re-read",
    ),
    "H200 141GB": GpuFamily(
        "A3 Ultra", "H200 141GB", "rdma", 9, 8896, "11.8", "1.32",
        f"{FRONTIER} 4.1 RoCE VPC facts (G-RDMA: MTU 8896, MRDMA NICs only on A3 Ultra, A4, "
        "A4X), 4.2 A4 / A3 Ultra networks (C7 gke-a3-ultragpu: net-1 + gpu-rdma-vpc 8 "
        "subnets); GKE floor: GKE_VERSION_FLOOR_SOURCE",
        boot_disk_type=HYPERDISK,
        compact_with_flex_start=True,
    ),
    "B200": GpuFamily(
        "A4", "B200", "rdma", 9, 8896, "12.8", "1.35",
        f"{FRONTIER} 4.2 (C7 gke-a4), 4.3 A4 VMs (C7 machine-learning/a4-highgpu-8g/"
        "a4high-vm.yaml: CUDA toolkit 12.8, 2 gVNIC VPCs at MTU 8896 + gpu-rdma-vpc)",
        boot_disk_type=HYPERDISK,
        compact_with_flex_start=True,
    ),
}  # fmt: skip
"""Every GPU model's family. CUDA floors: Ampere's 11.0 is NVIDIA's compute capability
support as generally known, not a stored source; Hopper's 11.8 is NVIDIA's (Hopper
Compatibility Guide, https://docs.nvidia.com/cuda/hopper-compatibility-guide: sections
'Applications Built Using CUDA Toolkit 11.7 or Earlier' (PTX only) and 'Building
Applications Using CUDA Toolkit 11.8', the first to build sm_90 cubins; 'a cubin generated
with compute capability 8.x is not supported to run on a GPU with compute capability 9.0');
Blackwell's 12.8 is what Cluster Toolkit installs for A4 (C7 a4high-vm.yaml) and the
first CUDA pytorch builds Blackwell(10.0) kernels with (pytorch/pytorch#172663: CUDA
12.6.3 'Maxwell(5.0) ... Hopper(9.0)', 12.8.1 '... Hopper(9.0), Blackwell(10.0, 12.0)')."""


def machine_family(machine_type: str) -> GpuFamily:
    """The family of a GPU machine type (`catalog.machines.GPU_MACHINES`)."""
    model = GPU_MACHINES[machine_type].gpu_model
    assert model is not None  # every GPU machine carries its GPUs
    return GPU_FAMILIES[model]


def boot_disk_type(machine_type: str) -> str:
    """The boot disk type of a GPU machine's nodes on every target (`BOOT_DISK_SOURCE`)."""
    return machine_family(machine_type).boot_disk_type


def cuda_floor_of(machine_type: str) -> str | None:
    """The CUDA floor of a GPU machine's family; None for a machine without GPUs."""
    return machine_family(machine_type).cuda_floor if machine_type in GPU_MACHINES else None


# --------------------------------------------------------------------------------------
# Dynamic Workload Scheduler flex-start
# --------------------------------------------------------------------------------------

FLEX_START_MAX_HOURS: Final = 7 * 24
"""A flex-start node, VM or job runs at most 7 days: GKE "Nodes run for at most 7 days"
(G-GKEDWS), Compute Engine "run <= 7 days" (DISC-C, S3:G7), Vertex "timeout <= 7 days"
(G-VXDWS); frontier.md 5.1, 5.2, 5.3."""
GKE_FLEX_START_MAX_RUN_SOURCE: Final = (
    'GKE: flex-start nodes "run for at most 7 days", '
    "https://cloud.google.com/kubernetes-engine/docs/concepts/dws"
)


def flex_start_run_problems(
    run_seconds: int | None, run_key: str, setting: str, instead: str, source: str = ""
) -> list[str]:
    """A flex-start run (`run_key`: the component's `max_run_seconds`, a stack's
    `limits.max_run_hours`) of at most FLEX_START_MAX_HOURS, for every target that takes
    flex-start capacity (`setting` names the key that asks for it, `instead` the way out,
    `source` the limit's source where the message should carry it)."""
    if run_seconds is None or run_seconds <= FLEX_START_MAX_HOURS * 3600:
        return []
    why = f" ({source})" if source else ""
    problem = (
        f"{run_key}: {run_seconds / 3600:g} hours is longer than {setting} allows{why}; "
        f"valid: up to {FLEX_START_MAX_HOURS} hours (7 days), or {instead}"
    )
    return [problem]


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
    "Vertex flex-start draws on Vertex AI preemptible GPU quota (Google's sample "
    "GoogleCloudPlatform/vertex-ai-samples notebook_util/common_util.py get_quota_id: a "
    "training job with is_dynamic_workload_scheduler gets "
    "CustomModelTrainingPreemptible<GPU>PerProjectPerRegion)"
)
GKE_FLEX_START_VERSION: Final = GPU_FLEX_START_VERSION
"""GPUs on GKE flex-start need at least this version (`gke_versions.GPU_FLEX_START_SOURCE`)."""
FLEX_START_ZONES_NOTE: Final = (
    "flex-start may be offered in fewer zones than the machine (Google's GPU regions page "
    "notes a narrower list; gcp-facts.md 1.3): not checked offline"
)


def family_of(model: GpuModel) -> GpuFamily:
    """The family of a GPU model."""
    return GPU_FAMILIES[model]

"""The GPU-to-GPU network of A3 Mega (GPUDirect-TCPXO) and A3 Ultra (GPUDirect RDMA) on GKE,
as Cluster Toolkit renders it: the extra VPCs and subnets with their MTU, the node pool's
`network_config.additional_node_network_configs`, GKE's multi-network objects and the NCCL
plugin installer image, pinned by version.

Source (`CTK`): GoogleCloudPlatform/cluster-toolkit @1047080 (v1.95.0):
`examples/gke-a3-megagpu/gke-a3-megagpu.yaml` (module `gpunets`: multivpc, network_count 8,
global_ip_address_range 192.168.0.0/16, subnetwork_cidr_suffix 20, mtu 8244;
`nccl_tcpxo_version: v1.0.15`), `modules/network/multivpc/main.tf` (VPC
"${network_name}-${count.index}", subnet "...-${count.index}-subnet", range
`cidrsubnet(global, suffix - global_suffix, count.index)`),
`examples/gke-a3-megagpu/nccl-tcpxo-installer.yaml.tftpl` (image
us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:${version}),
`examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml` (net-1: sub-1 192.168.64.0/18;
rdma-net: network_profile ${zone}-vpc-roce, 8 subnets "rdma-sub" in 192.168.128.0/18; gib
`version: v1.1.0`), `modules/network/vpc/variables.tf` and
`modules/network/gpu-rdma-vpc/{main.tf,variables.tf}` (mtu default 8896; subnets
`cidrsubnet(ip_range, ceil(log(count, 2)), i)` named "${name_prefix}-${i}", nic_type MRDMA),
`modules/management/kubectl-apply/variables.tf` (gib image
us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib),
`modules/compute/gke-node-pool/main.tf` (`additional_node_network_configs` {network,
subnetwork} for each of `additional_networks`). GKE network objects and NCCL settings:
/work/shared/reference/frontier.md 4.2 (CEA gpudirect-tcpxo/README.md, gpudirect-rdma).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final, Literal

from trainstack.components.catalog.gpu_families import Fabric, family_of
from trainstack.components.catalog.machines import MACHINES

CTK: Final = "GoogleCloudPlatform/cluster-toolkit @1047080"
TCPXO_INSTALLER_IMAGE: Final = (
    "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15"
)
"""CTK examples/gke-a3-megagpu: nccl-tcpxo-installer.yaml.tftpl image with
`nccl_tcpxo_version: v1.0.15`."""
GIB_INSTALLER_IMAGE: Final = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0"
"""CTK kubectl-apply `gib.template_vars.image` default with gke-a3-ultragpu's `version: v1.1.0`."""
NCCL_SEES: Final[dict[Fabric, str]] = {
    "tcpxo": (
        "NCCL loads the FasTrak (TCPXO) net plugin from the installer's library folder and "
        "needs the tcpxo-daemon receive-datapath sidecar in every pod; NCCL_FASTRAK_CTRL_DEV="
        "eth0, NCCL_FASTRAK_IFNAME=eth1..eth8, NCCL_SOCKET_IFNAME=eth0, NCCL_CROSS_NIC=0 "
        "(frontier.md 4.2, CEA gpudirect-tcpxo/README.md)"
    ),
    "rdma": (
        "NCCL loads the gIB plugin from /usr/local/gib (the installer's /home/kubernetes/bin/"
        "gib) after `source /usr/local/gib/scripts/set_nccl_env.sh`, over eth2..eth9 on "
        "rdma-0..7 (frontier.md 4.2, CEA gpudirect-rdma)"
    ),
}


@dataclass(frozen=True)
class FabricNetwork:
    """One extra VPC of the fabric and its subnets."""

    name: str
    mtu: int
    subnets: tuple[tuple[str, str], ...]
    """(name, primary range) of each subnet."""
    network_profile: str | None = None
    """RDMA: the zonal RoCE network profile (`<zone>-vpc-roce`)."""
    device_mode: Literal["NetDevice", "RDMA"] = "NetDevice"
    """GKENetworkParamSet.deviceMode of its subnets (gVNIC or MRDMA)."""


@dataclass(frozen=True)
class GkeFabric:
    """What a GKE GPU pool of one family needs for its fabric."""

    fabric: Fabric
    networks: tuple[FabricNetwork, ...]
    installer_image: str

    @property
    def additional_node_network_configs(self) -> list[dict[str, str]]:
        """The node pool's `network_config.additional_node_network_configs`, in NIC order."""
        return [
            {"network": net.name, "subnetwork": sub}
            for net in self.networks
            for sub, _ in net.subnets
        ]

    def note(self, machine_type: str) -> str:
        """The plan's line: which fabric, which networks, what NCCL sees."""
        nets = ", ".join(
            f"{n.name} (MTU {n.mtu}, {len(n.subnets)} subnet{'s' if len(n.subnets) > 1 else ''})"
            for n in self.networks
        )
        return (
            f"gpu_cluster: {machine_type} uses GPUDirect-{self.fabric.upper()} on GKE as "
            f"Cluster Toolkit renders it ({CTK}): networks {nets}; plugin installer "
            f"{self.installer_image}; {NCCL_SEES[self.fabric]}"
        )


def _split(cidr: str, count: int) -> list[str]:
    # Terraform's cidrsubnet(range, ceil(log2(count)), i): the first `count` equal parts.
    net = ipaddress.ip_network(cidr)
    bits = (count - 1).bit_length()
    return [str(s) for s in list(net.subnets(prefixlen_diff=bits))[:count]]


def gke_fabric(machine_type: str, deployment: str, zone: str) -> GkeFabric | None:
    """The fabric of `machine_type` on GKE, named as Cluster Toolkit names it for a
    deployment; None for families whose fabric trainstack does not render (A2, A3 High, A4)."""
    model = MACHINES[machine_type].gpu_model
    if model is None:
        return None
    family = family_of(model)
    if family.fabric == "tcpxo":
        prefix = f"{deployment}-gpunet"
        ranges = [str(s) for s in ipaddress.ip_network("192.168.0.0/16").subnets(new_prefix=20)]
        networks = tuple(
            FabricNetwork(f"{prefix}-{i}", family.network_mtu, ((f"{prefix}-{i}-subnet", r),))
            for i, r in enumerate(ranges[:8])
        )
        return GkeFabric("tcpxo", networks, TCPXO_INSTALLER_IMAGE)
    if family.fabric == "rdma" and family.name == "A3 Ultra":
        rdma_subnets = tuple(
            (f"{deployment}-rdma-sub-{i}", r) for i, r in enumerate(_split("192.168.128.0/18", 8))
        )
        networks = (
            FabricNetwork(
                f"{deployment}-net-1",
                family.network_mtu,
                ((f"{deployment}-sub-1", "192.168.64.0/18"),),
            ),
            FabricNetwork(
                f"{deployment}-rdma-net",
                family.network_mtu,
                rdma_subnets,
                network_profile=f"{zone}-vpc-roce",
                device_mode="RDMA",
            ),
        )
        return GkeFabric("rdma", networks, GIB_INSTALLER_IMAGE)
    return None

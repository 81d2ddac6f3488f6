"""The GPU-to-GPU network of A3 Mega (GPUDirect-TCPXO), A3 Ultra and A4 (GPUDirect RDMA) on
GKE, as Cluster Toolkit renders it: the extra VPCs and subnets with their MTU, the node pool's
`network_config.additional_node_network_configs`, GKE's multi-network objects and the NCCL
plugin installer image, pinned by version; and what the training pods need of it (the
receive-datapath sidecar's image, the NCCL environment), as Google's and XPK's pod manifests
set it (`trainstack.components._pod_fabric` renders the pod pieces).

Source (`CTK`): GoogleCloudPlatform/cluster-toolkit @1047080 (v1.95.0):
`examples/gke-a3-megagpu/gke-a3-megagpu.yaml` (module `gpunets`: multivpc, network_count 8,
global_ip_address_range 192.168.0.0/16, subnetwork_cidr_suffix 20, mtu 8244;
`nccl_tcpxo_version: v1.0.15`; gke_cluster `k8s_network_names: {gvnic_prefix: vpc,
gvnic_start_index: 1}`), `modules/network/multivpc/main.tf` (VPC
"${network_name}-${count.index}", subnet "...-${count.index}-subnet", range
`cidrsubnet(global, suffix - global_suffix, count.index)`),
`examples/gke-a3-megagpu/nccl-tcpxo-installer.yaml.tftpl` (image
us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:${version}),
`examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml` and `examples/gke-a4/gke-a4.yaml` (the same
networks: net-1: sub-1 192.168.64.0/18; rdma-net: network_profile ${zone}-vpc-roce, 8 subnets
"rdma-sub" in 192.168.128.0/18; gib `version: v1.1.0`; their nccl-installer.yaml.tftpl
differ by one trailing space), `modules/network/vpc/variables.tf` and
`modules/network/gpu-rdma-vpc/{main.tf,variables.tf}` (mtu default 8896; subnets
`cidrsubnet(ip_range, ceil(log(count, 2)), i)` named "${name_prefix}-${i}", nic_type MRDMA),
`modules/management/kubectl-apply/variables.tf` (gib image
us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib),
`modules/compute/gke-node-pool/main.tf` (`additional_node_network_configs` {network,
subnetwork} for each of `additional_networks`), `modules/scheduler/gke-cluster/variables.tf`
(`k8s_network_names` defaults: gvnic-<1..>, rdma-<0..>). GKE network objects and NCCL
settings: /work/shared/reference/frontier.md 4.2.

Pod side (`CEA`: GoogleCloudPlatform/container-engine-accelerators @992db812;
`XPK`: AI-Hypercomputer/xpk @367c838): `CEA gpudirect-tcpxo/README.md` (release Jan 9, 2026:
the installer v1.0.15, the tcpxo-daemon v1.0.21 and the NCCL configs),
`CEA gpudirect-tcpxo/nccl-test-latest.yaml` and `best-practice.md`, `CEA
gpudirect-rdma/nccl-test.yaml`, `XPK src/xpk/core/workload_decorators/{tcpxo,rdma}_decorator.py`,
`CTK examples/gke-a3-ultragpu/nccl-jobset-example.yaml`.
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
CEA: Final = "GoogleCloudPlatform/container-engine-accelerators @992db812"
XPK: Final = "AI-Hypercomputer/xpk @367c838"

RXDM_IMAGE: Final = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21"
"""The TCPXO receive-datapath manager (the `tcpxo-daemon` sidecar): CEA gpudirect-tcpxo/
README.md, release Jan 9, 2026, "TCPXO-daemon image: ...tcpgpudmarxd-dev:v1.0.21" beside the
installer v1.0.15 (`TCPXO_INSTALLER_IMAGE`); "The tcpxo-daemon version is coupled with the
NCCL plugin installer version". XPK's tcpxo_decorator.py pins `rxdm = 'v1.0.12'` (the Oct 18,
2024 release, paired with installer v1.0.6)."""
RXDM_ENTRYPOINT: Final = (
    "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
    "/fts/entrypoint_rxdm_container.sh --num_hops=2"
)
"""The sidecar's `sh -c` script: CEA gpudirect-tcpxo/nccl-test-latest.yaml @992db812 (the
commit "bump tcpxo-daemon version to 1.0.21 and remove deprecated flags"; the README's Nov 19,
2025 release retired `--num_nics`, its Aug 21, 2025 one `--uid=` and `--alsologtostderr`,
which XPK still passes)."""
RXDM_HEALTH_FILE: Final = "/run/health-check"
"""CEA gpudirect-tcpxo/best-practice.md, "Setup Startup Probe for the TCPXO-daemon Sidecar":
with `HEALTH_CHECK_LOG_FILE` set the daemon creates that file once its initialization
(typically ~30 s) completes; its example probe `cat`s it (initialDelaySeconds 1,
periodSeconds 5, timeoutSeconds 1, successThreshold 1, failureThreshold 6)."""
TCPXO_LIB_DIR: Final = "/usr/local/nvidia/lib64"
"""Where the installer's libraries are in the pod: the installer copies them into the host's
/home/kubernetes/bin/nvidia/lib64 (nccl-tcpxo-installer.yaml.tftpl) and the pod mounts
/home/kubernetes/bin/nvidia at /usr/local/nvidia (XPK tcpxo_decorator.py `add_volumes`,
`update_gpu_containers`); CEA README: NCCL_LIB_DIR="/usr/local/nvidia/lib64"."""
TCPXO_NCCL_ENV: Final[dict[str, str]] = {
    "NCCL_FASTRAK_CTRL_DEV": "eth0",
    "NCCL_FASTRAK_IFNAME": ",".join(f"eth{i}" for i in range(1, 9)),
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_CROSS_NIC": "0",
    "NCCL_PROTO": "Simple,LL128",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
    "NCCL_TUNER_CONFIG_PATH": f"{TCPXO_LIB_DIR}/a3plus_tuner_config.textproto",
    "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": (
        f"{TCPXO_LIB_DIR}/a3plus_guest_config.textproto"
    ),
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_FASTRAK_NUM_FLOWS": "2",
    "NCCL_FASTRAK_USE_SNAP": "1",
    "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
    "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
    "NCCL_BUFFSIZE": "8388608",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
    "NCCL_FASTRAK_USE_LLCM": "1",
    "NCCL_NVLS_ENABLE": "1",
    "NCCL_DEBUG": "WARN",
    "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV,COLL,GRAPH",
}
"""The NCCL configs of CEA gpudirect-tcpxo/README.md's Jan 9, 2026 release (installer
v1.0.15), in its order, "required for using GPUDirect-TCPX(O) ... set them as environment
variables", with its `/usr/local/tcpxo/lib64/` replaced by the library folder in the pod
("Please replace `/usr/local/tcpxo/lib64/` as the NCCL lib directory installed inside the
workload container"), `TCPXO_LIB_DIR`. The guest config checker aborts a workload without
NCCL_NVLSTREE_MAX_CHUNKSIZE (README, Aug 21, 2025)."""
GIB_DIR: Final = "/usr/local/gib"
"""Where the pod mounts the host's /home/kubernetes/bin/gib, the gIB installer's copy of the
plugin (XPK rdma_decorator.py `update_gpu_containers`; CEA gpudirect-rdma/nccl-test.yaml)."""
GIB_NCCL_ENV_SCRIPT: Final = f"{GIB_DIR}/scripts/set_nccl_env.sh"
"""Sourced before NCCL starts: "source /usr/local/gib/scripts/set_nccl_env.sh" (CEA
gpudirect-rdma/nccl-test.yaml, CTK examples/gke-a3-ultragpu/ and gke-a4/
nccl-jobset-example.yaml "Set all the correct libnccl-gib environment variables", XPK
examples/nccl/nccl-a3ultra.sh). Its values differ by machine and plugin version (CTK
examples/machine-learning/a3-ultragpu-8g/nemo-framework/Dockerfile lists A3 Ultra's with
tuner_config_a3u.txtpb, a4-highgpu-8g/a4high-vm.yaml A4's with NCCL_IB_GID_INDEX=3 and
tuner_config.txtpb), so the pods source the node's own script rather than pin them."""
GIB_NCCL_ENV: Final[dict[str, str]] = {"NCCL_NET": "gIB"}
"""Set before the script is sourced: "# Force use of libnccl-gib / export NCCL_NET=gIB" (CTK
examples/gke-a3-ultragpu/nccl-jobset-example.yaml, XPK examples/nccl/nccl-a3ultra.sh)."""
NCCL_SEES: Final[dict[Fabric, str]] = {
    "tcpxo": (
        "each training pod attaches eth1..eth8 to vpc1..vpc8 (networking.gke.io/interfaces), "
        "runs the tcpxo-daemon receive-datapath sidecar "
        f"({RXDM_IMAGE.rpartition('/')[2]}, given the GPUs by the NRI device injector "
        "DaemonSet) and mounts the installer's libraries at /usr/local/nvidia; NCCL gets the FasTrak settings of the installer's release "
        "(NCCL_FASTRAK_CTRL_DEV=eth0, NCCL_FASTRAK_IFNAME=eth1..eth8, NCCL_SOCKET_IFNAME=eth0, "
        "NCCL_CROSS_NIC=0, NCCL_PROTO=Simple,LL128, the tuner and guest config in "
        f"{TCPXO_LIB_DIR}; CEA gpudirect-tcpxo/README.md, Jan 9, 2026)"
    ),
    "rdma": (
        "each training pod attaches eth2..eth9 to rdma-0..rdma-7 (networking.gke.io/interfaces)"
        f", mounts the installer's /home/kubernetes/bin/gib at {GIB_DIR} and sources "
        f"{GIB_NCCL_ENV_SCRIPT} before the launcher, with NCCL_NET=gIB (CEA gpudirect-rdma/"
        "nccl-test.yaml, CTK nccl-jobset-example.yaml)"
    ),
}
"""What NCCL in the training pods sees of each fabric (the plan's note). Not run on the
hardware: the plan says what is rendered, not a measured bandwidth."""


@dataclass(frozen=True)
class FabricFirewall:
    """An ingress rule CTK gives a fabric VPC: tcp and udp on ports 0-65535 and icmp from
    `source_ranges` (CTK modules/network/vpc/main.tf `allow_internal_traffic`, and the
    blueprints' own `firewall_rules` entries, which list the same three protocols and ports)."""

    name: str
    source_ranges: tuple[str, ...]
    description: str | None = None


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
    firewall: FabricFirewall | None = None
    """gVNIC VPCs: the rule letting the nodes reach each other on it (NCCL's bootstrap and
    socket traffic). RoCE VPCs take none: CTK gpu-rdma-vpc has no firewall input, and
    modules/network/vpc/main.tf `network_profile_firewall_validation` refuses rules on a
    network profile containing 'roce' ("var.firewall_rules must be empty and
    var.enable_internal_traffic must be false")."""


@dataclass(frozen=True)
class GkeFabric:
    """What a GKE GPU pool of one family needs for its fabric."""

    fabric: Fabric
    networks: tuple[FabricNetwork, ...]
    installer_image: str
    gvnic_prefix: str = "gvnic-"
    """The name of the k-th gVNIC network's GKENetworkParamSet / Network objects is this and
    k (from 1): CTK modules/scheduler/gke-cluster/variables.tf `k8s_network_names` defaults
    ("gvnic-", start index 1); examples/gke-a3-megagpu/gke-a3-megagpu.yaml sets "vpc", the
    names Google's TCPXO pod manifests attach (vpc1..vpc8, CEA gpudirect-tcpxo/
    nccl-test-latest.yaml). RDMA subnets are always rdma-<0..>."""

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
    deployment; None for families whose fabric trainstack does not render (A2, A3 High)."""
    model = MACHINES[machine_type].gpu_model
    if model is None:
        return None
    family = family_of(model)
    if family.fabric == "tcpxo":
        prefix = f"{deployment}-gpunet"
        ranges = [str(s) for s in ipaddress.ip_network("192.168.0.0/16").subnets(new_prefix=20)]
        # multivpc passes `enable_internal_traffic` (default true) to each modules/network/vpc,
        # whose `network_address_range` is the VPC's range: one
        # "${network_name}-fw-allow-internal-traffic" rule per VPC for its own range.
        networks = tuple(
            FabricNetwork(
                f"{prefix}-{i}",
                family.network_mtu,
                ((f"{prefix}-{i}-subnet", r),),
                firewall=FabricFirewall(
                    f"{prefix}-{i}-fw-allow-internal-traffic",
                    (r,),
                    "allow traffic between nodes of this VPC",
                ),
            )
            for i, r in enumerate(ranges[:8])
        )
        return GkeFabric("tcpxo", networks, TCPXO_INSTALLER_IMAGE, gvnic_prefix="vpc")
    if family.fabric == "rdma":
        # A3 Ultra and A4: CTK's gke-a3-ultragpu.yaml and gke-a4.yaml declare the same
        # networks, ranges and gIB version (module docstring).
        rdma_subnets = tuple(
            (f"{deployment}-rdma-sub-{i}", r) for i, r in enumerate(_split("192.168.128.0/18", 8))
        )
        networks = (
            FabricNetwork(
                f"{deployment}-net-1",
                family.network_mtu,
                ((f"{deployment}-sub-1", "192.168.64.0/18"),),
                # gke-a3-ultragpu.yaml / gke-a4.yaml `firewall_rules`: name
                # $(vars.deployment_name)-internal-1, ranges [192.168.0.0/16], no description.
                # modules/network/vpc also adds "${network_name}-fw-allow-internal-traffic"
                # for its default `network_address_range` 10.0.0.0/9, where no node of
                # this VPC has an address: not rendered.
                firewall=FabricFirewall(f"{deployment}-internal-1", ("192.168.0.0/16",)),
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

"""A3 Mega (TCPXO), A3 Ultra and A4 (RDMA) fabric on GKE, compared field by field with what
Cluster Toolkit renders (GoogleCloudPlatform/cluster-toolkit @1047080): the values below are
copied from its files, named next to each."""

from __future__ import annotations

import pytest

from trainstack.components.a100_cluster.gke_fabric import fabric_note
from trainstack.components.catalog.gpu_fabric import gke_fabric


def test_a3_mega_networks_are_cluster_toolkits_multivpc() -> None:
    fabric = gke_fabric("a3-megagpu-8g", "d", "us-central1-a")
    assert fabric is not None and fabric.fabric == "tcpxo"
    # examples/gke-a3-megagpu/gke-a3-megagpu.yaml `gpunets`: network_name_prefix
    # $(vars.deployment_name)-gpunet, global_ip_address_range 192.168.0.0/16, network_count 8,
    # subnetwork_cidr_suffix 20, mtu 8244; modules/network/multivpc/main.tf names
    # "${network_name}-${count.index}" and "...-${count.index}-subnet", range
    # cidrsubnet(192.168.0.0/16, 4, count.index).
    assert [
        (n.name, n.mtu, n.subnets, n.network_profile, n.device_mode) for n in fabric.networks
    ] == [
        (
            f"d-gpunet-{i}",
            8244,
            ((f"d-gpunet-{i}-subnet", f"192.168.{16 * i}.0/20"),),
            None,
            "NetDevice",
        )
        for i in range(8)
    ]
    # modules/compute/gke-node-pool/main.tf: additional_node_network_configs {network,
    # subnetwork} for each of additional_networks (multivpc's, in order).
    assert fabric.additional_node_network_configs == [
        {"network": f"d-gpunet-{i}", "subnetwork": f"d-gpunet-{i}-subnet"} for i in range(8)
    ]
    # examples/gke-a3-megagpu/nccl-tcpxo-installer.yaml.tftpl with nccl_tcpxo_version v1.0.15.
    assert fabric.installer_image == (
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15"
    )
    # gke_cluster `k8s_network_names: {gvnic_prefix: vpc, gvnic_start_index: 1}`.
    assert fabric.gvnic_prefix == "vpc"


@pytest.mark.parametrize("machine", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_a3_ultra_and_a4_networks_are_cluster_toolkits(machine: str) -> None:
    # examples/gke-a4/gke-a4.yaml declares what gke-a3-ultragpu.yaml does, below (gke-a4-net-1
    # sub-1 192.168.64.0/18, gke-a4-rdma-net with the zone's vpc-roce profile and 8 rdma-sub
    # subnets of 192.168.128.0/18, gib version v1.1.0).
    fabric = gke_fabric(machine, "d", "us-central1-b")
    assert fabric is not None and fabric.fabric == "rdma"
    # examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml: gke-a3-ultra-net-1 (modules/network/vpc,
    # mtu default 8896) with sub-1 192.168.64.0/18; gke-a3-ultra-rdma-net
    # (modules/network/gpu-rdma-vpc, mtu default 8896, network_profile ${zone}-vpc-roce,
    # subnetworks_template name_prefix rdma-sub, count 8, ip_range 192.168.128.0/18, split by
    # cidrsubnet(ip_range, ceil(log(8, 2)), i)).
    net1, rdma = fabric.networks
    assert (net1.name, net1.mtu, net1.subnets, net1.network_profile, net1.device_mode) == (
        "d-net-1",
        8896,
        (("d-sub-1", "192.168.64.0/18"),),
        None,
        "NetDevice",
    )
    assert (rdma.name, rdma.mtu, rdma.network_profile, rdma.device_mode) == (
        "d-rdma-net",
        8896,
        "us-central1-b-vpc-roce",
        "RDMA",
    )
    assert rdma.subnets == tuple(
        (f"d-rdma-sub-{i}", f"192.168.{128 + 8 * i}.0/21") for i in range(8)
    )
    # The pool's additional_networks: concat(net-1.instance_additional_networks,
    # rdma-net.subnetwork_interfaces_gke).
    assert fabric.additional_node_network_configs == [
        {"network": "d-net-1", "subnetwork": "d-sub-1"},
        *({"network": "d-rdma-net", "subnetwork": f"d-rdma-sub-{i}"} for i in range(8)),
    ]
    # modules/management/kubectl-apply/variables.tf gib image, gke-a3-ultragpu version v1.1.0.
    assert (
        fabric.installer_image
        == "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0"
    )


def test_families_without_a_rendered_fabric() -> None:
    machines = ("a2-highgpu-8g", "n1-standard-8", "a3-highgpu-8g")
    assert [gke_fabric(m, "d", "us-central1-a") for m in machines] == [None, None, None]


def test_plan_note_names_the_fabric_and_what_nccl_sees() -> None:
    fabric = gke_fabric("a3-megagpu-8g", "d", "us-central1-a")
    assert fabric is not None
    nets = ", ".join(f"d-gpunet-{i} (MTU 8244, 1 subnet)" for i in range(8))
    assert fabric_note(fabric, "a3-megagpu-8g") == (
        "gpu_cluster: a3-megagpu-8g uses GPUDirect-TCPXO on GKE as Cluster Toolkit renders it "
        f"(GoogleCloudPlatform/cluster-toolkit @1047080): networks {nets}; plugin installer "
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15; "
        "each training pod attaches eth1..eth8 to vpc1..vpc8 (networking.gke.io/interfaces), "
        "runs the tcpxo-daemon receive-datapath sidecar (tcpgpudmarxd-dev:v1.0.21, given the "
        "GPUs by the NRI device injector DaemonSet) and mounts the installer's libraries at "
        "/usr/local/nvidia; NCCL gets the FasTrak settings of the installer's release "
        "(NCCL_FASTRAK_CTRL_DEV=eth0, NCCL_FASTRAK_IFNAME=eth1..eth8, NCCL_SOCKET_IFNAME=eth0, "
        "NCCL_CROSS_NIC=0, NCCL_PROTO=Simple,LL128, the tuner and guest config in "
        "/usr/local/nvidia/lib64; CEA gpudirect-tcpxo/README.md, Jan 9, 2026). Rendered as "
        "Google's and XPK's manifests do it, not run on the hardware here"
    )


def test_plan_note_of_a4_says_the_pods_source_gibs_settings() -> None:
    fabric = gke_fabric("a4-highgpu-8g", "d", "us-central1-b")
    assert fabric is not None
    assert fabric_note(fabric, "a4-highgpu-8g") == (
        "gpu_cluster: a4-highgpu-8g uses GPUDirect-RDMA on GKE as Cluster Toolkit renders it "
        "(GoogleCloudPlatform/cluster-toolkit @1047080): networks d-net-1 (MTU 8896, 1 subnet), "
        "d-rdma-net (MTU 8896, 8 subnets); plugin installer "
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0; each training pod "
        "attaches eth2..eth9 to rdma-0..rdma-7 (networking.gke.io/interfaces), mounts the "
        "installer's /home/kubernetes/bin/gib at /usr/local/gib and sources "
        "/usr/local/gib/scripts/set_nccl_env.sh before the launcher, with NCCL_NET=gIB (CEA "
        "gpudirect-rdma/nccl-test.yaml, CTK nccl-jobset-example.yaml). Rendered as Google's and "
        "XPK's manifests do it, not run on the hardware here"
    )

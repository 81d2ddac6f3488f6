"""A3 Mega (TCPXO) and A3 Ultra (RDMA) on the gke backend: the fabric `catalog.gpu_fabric`
describes, wired into the cluster, the GPU pool and the cluster's objects, compared with
Cluster Toolkit @1047080 (files named next to each value); gce refuses these machines."""

from __future__ import annotations

from typing import Any

from tests.components.test_a100_cluster import _run
from trainstack.components.a100_cluster.gke_fabric import PAUSE_IMAGE

NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"


def _of(run: Any, keep: Any) -> list[Any]:
    # Pulumi registers resources concurrently: order them by name.
    return sorted((r for r in run.resources if keep(r)), key=lambda r: r.name)


def _mega(**overrides: Any) -> Any:
    return _run(machine_type="a3-megagpu-8g", node_count=2, **overrides)


def test_a3_mega_creates_cluster_toolkits_eight_vpcs_as_children() -> None:
    run = _mega()
    nets = _of(run, lambda r: r.type == NETWORK)
    subs = _of(run, lambda r: r.type == SUBNETWORK)
    # examples/gke-a3-megagpu/gke-a3-megagpu.yaml `gpunets` (multivpc): 8 VPCs, MTU 8244.
    assert [(r.name, r.inputs["name"], r.inputs["mtu"]) for r in nets] == [
        (f"gpu-gpunet-{i}", f"exp-42-gpunet-{i}", 8244) for i in range(8)
    ]
    assert {r.inputs["autoCreateSubnetworks"] for r in nets} == {False}
    assert [
        (r.name, r.inputs["name"], r.inputs["ipCidrRange"], r.inputs["region"]) for r in subs
    ] == [
        (
            f"gpu-gpunet-{i}-subnet",
            f"exp-42-gpunet-{i}-subnet",
            f"192.168.{16 * i}.0/20",
            "us-central1",
        )
        for i in range(8)
    ]
    assert {str(r.parent) for r in [*nets, *subs]} == {"gpu"}


def test_a3_mega_pool_and_cluster_networking() -> None:
    run = _mega()
    # modules/compute/gke-node-pool/main.tf: additional_node_network_configs in NIC order.
    assert run.named("gpu-gpu-pool").inputs["networkConfig"]["additionalNodeNetworkConfigs"] == [
        {"network": f"exp-42-gpunet-{i}", "subnetwork": f"exp-42-gpunet-{i}-subnet"}
        for i in range(8)
    ]
    cluster = run.named("gpu-cluster").inputs
    # modules/scheduler/gke-cluster/main.tf: datapath_provider ADVANCED_DATAPATH with
    # enable_multi_networking when there are additional_networks.
    assert (cluster["datapathProvider"], cluster["enableMultiNetworking"]) == (
        "ADVANCED_DATAPATH",
        True,
    )


def test_a3_mega_network_objects_are_cluster_toolkits() -> None:
    run = _mega()
    # modules/scheduler/gke-cluster/templates/gke-network-paramset.yaml.tftpl and
    # network-object.yaml.tftpl, named gvnic-<1..> (k8s_network_names defaults).
    params = _of(run, lambda r: r.type.endswith(":GKENetworkParamSet"))
    assert [(r.inputs["metadata"]["name"], r.inputs["spec"]) for r in params] == [
        (
            f"gvnic-{i + 1}",
            {
                "vpc": f"exp-42-gpunet-{i}",
                "vpcSubnet": f"exp-42-gpunet-{i}-subnet",
                "deviceMode": "NetDevice",
            },
        )
        for i in range(8)
    ]
    networks = _of(run, lambda r: r.type == "kubernetes:networking.gke.io/v1:Network")
    assert [(r.inputs["metadata"]["name"], r.inputs["spec"]) for r in networks] == [
        (
            f"gvnic-{i}",
            {
                "parametersRef": {
                    "group": "networking.gke.io",
                    "kind": "GKENetworkParamSet",
                    "name": f"gvnic-{i}",
                },
                "type": "Device",
            },
        )
        for i in range(1, 9)
    ]


def test_a3_mega_installer_daemonset_is_cluster_toolkits() -> None:
    ds = _mega().named("gpu-nccl-tcpxo-installer").inputs
    # examples/gke-a3-megagpu/nccl-tcpxo-installer.yaml.tftpl, nccl_tcpxo_version v1.0.15.
    assert ds["metadata"] == {
        "name": "nccl-tcpxo-installer",
        "namespace": "kube-system",
        "labels": {"k8s-app": "nccl-tcpxo-installer"},
    }
    pod = ds["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["initContainers"]] == [
        "ubuntu",
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15",
    ]
    assert pod["containers"] == [{"image": PAUSE_IMAGE, "name": "pause"}]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {
            "key": "cloud.google.com/gke-accelerator",
            "operator": "In",
            "values": ["nvidia-h100-mega-80gb"],
        }
    ]
    assert (pod["hostNetwork"], pod["hostPID"], pod["tolerations"]) == (
        True,
        True,
        [{"operator": "Exists"}],
    )


def test_a3_mega_pods_get_the_tcpxo_nccl_env() -> None:
    container = (
        _mega().named("gpu-training-job").inputs["spec"]["template"]["spec"]["containers"][0]
    )
    env = {e["name"]: e.get("value") for e in container["env"]}
    # frontier.md 4.2 (CEA gpudirect-tcpxo/README.md).
    assert {k: env[k] for k in env if k.startswith("NCCL_")} == {
        "NCCL_FASTRAK_CTRL_DEV": "eth0",
        "NCCL_FASTRAK_IFNAME": "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_CROSS_NIC": "0",
    }


def test_a3_ultra_rdma_network_has_the_roce_profile_and_rdma_objects() -> None:
    run = _run(machine_type="a3-ultragpu-8g", node_count=2, zone="us-central1-b")
    rdma = run.named("gpu-rdma-net").inputs
    # examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml rdma-net network_profile.
    assert rdma["networkProfile"] == (
        "https://www.googleapis.com/compute/beta/projects/acme-ml/global/networkProfiles/"
        "us-central1-b-vpc-roce"
    )
    assert "networkProfile" not in run.named("gpu-net-1").inputs
    params = _of(run, lambda r: r.type.endswith(":GKENetworkParamSet"))
    assert [(r.inputs["metadata"]["name"], r.inputs["spec"]["deviceMode"]) for r in params] == [
        ("gvnic-1", "NetDevice"),
        *[(f"rdma-{i}", "RDMA") for i in range(8)],
    ]
    ds = run.named("gpu-nccl-rdma-installer").inputs["spec"]["template"]["spec"]
    assert ds["initContainers"][1]["image"] == (
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0"
    )


def test_a100_has_no_fabric() -> None:
    run = _run()
    assert [r.name for r in run.resources if r.type in (NETWORK, SUBNETWORK)] == []
    assert "datapathProvider" not in run.named("gpu-cluster").inputs

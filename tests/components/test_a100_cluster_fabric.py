"""A3 Mega (TCPXO), A3 Ultra and A4 (RDMA) on the gke backend: the fabric `catalog.gpu_fabric`
describes, wired into the cluster, the GPU pool, the cluster's objects and the training pods,
compared with Cluster Toolkit @1047080 (files named next to each value; the pods against XPK
in test_gke_pod_fabric_xpk.py); gce refuses these machines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.components.test_a100_cluster import CLUSTER, _args, _cluster_outputs, _run
from trainstack.components.a100_cluster import A100Cluster
from trainstack.components.a100_cluster.gke_fabric import PAUSE_IMAGE
from trainstack.components.catalog import images
from trainstack.infra.mocks import run_program

NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
# terraform-google-modules/network @c0b32b1 (v13.1.0, CTK's vpc module pins `~> 13.0`)
# modules/firewall-rules/main.tf: `allow { protocol, ports = lookup(allow.value, "ports",
# null) }`; CTK modules/network/vpc/main.tf `allow_internal_traffic` and the blueprints'
# `internal-1` both list tcp ["0-65535"], udp ["0-65535"], icmp.
CTK_ALLOWS = [
    {"protocol": "tcp", "ports": ["0-65535"]},
    {"protocol": "udp", "ports": ["0-65535"]},
    {"protocol": "icmp"},
]


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
    # network-object.yaml.tftpl, named vpc<1..> (examples/gke-a3-megagpu/gke-a3-megagpu.yaml
    # k8s_network_names: gvnic_prefix vpc, gvnic_start_index 1).
    params = _of(run, lambda r: r.type.endswith(":GKENetworkParamSet"))
    assert [(r.inputs["metadata"]["name"], r.inputs["spec"]) for r in params] == [
        (
            f"vpc{i + 1}",
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
            f"vpc{i}",
            {
                "parametersRef": {
                    "group": "networking.gke.io",
                    "kind": "GKENetworkParamSet",
                    "name": f"vpc{i}",
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


def test_a3_mega_nri_device_injector_is_cluster_toolkits() -> None:
    ds = _mega().named("gpu-device-injector").inputs
    # examples/gke-a3-megagpu/nri-device-injector.yaml (gke-a3-megagpu.yaml applies it).
    assert ds["metadata"] == {
        "name": "device-injector",
        "namespace": "kube-system",
        "labels": {"k8s-app": "device-injector"},
    }
    pod = ds["spec"]["template"]["spec"]
    assert pod["containers"] == [
        {
            "image": (
                "gcr.io/gke-release/nri-device-injector@sha256:"
                "6e79483d52abdc28454bf186320b10a56b0f117a10e8d65d5c74dbb821a76970"
            ),
            "name": "device-injector",
            "resources": {"requests": {"cpu": "150m"}},
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": "dev", "mountPath": "/dev"},
                {"name": "nri", "mountPath": "/var/run/nri"},
            ],
        }
    ]
    assert pod["volumes"] == [
        {"name": "nri", "hostPath": {"path": "/var/run/nri"}},
        {"name": "dev", "hostPath": {"path": "/dev"}},
    ]
    assert (pod["hostNetwork"], pod["hostPID"], pod["priorityClassName"]) == (
        True,
        True,
        "system-node-critical",
    )
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "nvidia-h100-mega-80gb"
    ]


def _pod(run: Any) -> dict[str, Any]:
    return dict(run.named("gpu-training-job").inputs["spec"]["template"])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_a3_mega_pods_get_the_tcpxo_pod_pieces() -> None:
    pod = _pod(_mega())
    annotations = pod["metadata"]["annotations"]
    # CEA gpudirect-tcpxo/nccl-test-latest.yaml: eth1..eth8 on vpc1..vpc8.
    assert json.loads(annotations["networking.gke.io/interfaces"]) == [
        {"interfaceName": "eth0", "network": "default"},
        *({"interfaceName": f"eth{i}", "network": f"vpc{i}"} for i in range(1, 9)),
    ]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["tcpxo-daemon"]
    [container] = pod["spec"]["containers"]
    env = _env(container)
    # CEA gpudirect-tcpxo/README.md, Jan 9, 2026 (installer v1.0.15): its NCCL configs.
    assert {k: env[k] for k in env if k.startswith("NCCL_")} == {
        "NCCL_FASTRAK_CTRL_DEV": "eth0",
        "NCCL_FASTRAK_IFNAME": "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_CROSS_NIC": "0",
        "NCCL_PROTO": "Simple,LL128",
        "NCCL_MIN_NCHANNELS": "4",
        "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
        "NCCL_TUNER_CONFIG_PATH": "/usr/local/nvidia/lib64/a3plus_tuner_config.textproto",
        "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": (
            "/usr/local/nvidia/lib64/a3plus_guest_config.textproto"
        ),
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
        # XPK tcpxo_decorator.py update_gpu_containers.
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
    }
    assert (env["CUDA_VISIBLE_DEVICES"], env["LD_LIBRARY_PATH"]) == (
        "0,1,2,3,4,5,6,7",
        "/usr/local/nvidia/lib64",
    )
    assert env["TRAINSTACK_NCCL_PLUGIN_FILES"] == (
        "/usr/local/nvidia/lib64/a3plus_tuner_config.textproto"
    )
    assert "TRAINSTACK_NCCL_ENV_SCRIPT" not in env


@pytest.mark.parametrize(
    ("machine", "zone"), [("a3-ultragpu-8g", "us-central1-b"), ("a4-highgpu-8g", "us-central1-b")]
)
def test_rdma_pods_mount_gib_and_source_its_settings(machine: str, zone: str) -> None:
    pod = _pod(_run(machine_type=machine, node_count=2, zone=zone))
    # CEA gpudirect-rdma/nccl-test.yaml: eth2..eth9 on rdma-0..rdma-7; net-1 (eth1) not.
    assert json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"]) == [
        {"interfaceName": "eth0", "network": "default"},
        *({"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)),
    ]
    assert "initContainers" not in pod["spec"]
    assert pod["spec"]["volumes"][1:] == [
        {"name": "library-dir-host", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}},
    ]
    [container] = pod["spec"]["containers"]
    assert container["volumeMounts"][1:] == [
        {"name": "library-dir-host", "mountPath": "/usr/local/nvidia"},
        {"name": "gib", "mountPath": "/usr/local/gib"},
    ]
    env = _env(container)
    assert {k: env[k] for k in env if k.startswith("NCCL_")} == {"NCCL_NET": "gIB"}
    assert (
        env["LD_LIBRARY_PATH"],
        env["TRAINSTACK_NCCL_PLUGIN_FILES"],
        env["TRAINSTACK_NCCL_ENV_SCRIPT"],
    ) == (
        "/usr/local/nvidia/lib64",
        "/usr/local/gib/scripts/set_nccl_env.sh",
        "/usr/local/gib/scripts/set_nccl_env.sh",
    )


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


def test_a3_mega_each_vpc_has_cluster_toolkits_internal_traffic_rule() -> None:
    # gke-a3-megagpu.yaml `gpunets` (multivpc) leaves `enable_internal_traffic` at its
    # default true (modules/network/multivpc/variables.tf) and passes it to each
    # modules/network/vpc, whose main.tf `allow_internal_traffic` is: name
    # "${network_name}-fw-allow-internal-traffic", description "allow traffic between nodes
    # of this VPC", INGRESS, ranges [network_address_range] (the VPC's /20), priority null.
    run = _mega()
    rules = _of(run, lambda r: r.type == FIREWALL)
    assert [(r.name, str(r.parent), r.inputs) for r in rules] == [
        (
            f"gpu-gpunet-{i}-fw-allow-internal-traffic",
            "gpu",
            {
                "project": "acme-ml",
                "name": f"exp-42-gpunet-{i}-fw-allow-internal-traffic",
                "description": "allow traffic between nodes of this VPC",
                "network": f"exp-42-gpunet-{i}",
                "direction": "INGRESS",
                "sourceRanges": [f"192.168.{16 * i}.0/20"],
                "allows": CTK_ALLOWS,
            },
        )
        for i in range(8)
    ]


@pytest.mark.parametrize("machine", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_rdma_net_1_has_cluster_toolkits_internal_1_rule_and_the_roce_vpc_none(
    machine: str,
) -> None:
    # gke-a3-ultragpu.yaml / gke-a4.yaml `*-net-1.firewall_rules`: name
    # $(vars.deployment_name)-internal-1, ranges [192.168.0.0/16], tcp/udp 0-65535 and icmp;
    # no description, direction or priority (terraform-google-modules/network variables.tf
    # `firewall_rules`: direction optional "INGRESS", description and priority null).
    # gpu-rdma-vpc renders no rule (vpc/main.tf refuses rules on a 'roce' profile).
    run = _run(machine_type=machine, node_count=2, zone="us-central1-b")
    [rule] = run.of_type(FIREWALL)
    assert (rule.name, str(rule.parent), rule.inputs) == (
        "gpu-internal-1",
        "gpu",
        {
            "project": "acme-ml",
            "name": "exp-42-internal-1",
            "network": "exp-42-net-1",
            "direction": "INGRESS",
            "sourceRanges": ["192.168.0.0/16"],
            "allows": CTK_ALLOWS,
        },
    )


def test_a100_has_no_fabric() -> None:
    run = _run()
    assert [r.name for r in run.resources if r.type in (NETWORK, SUBNETWORK, FIREWALL)] == []
    assert "datapathProvider" not in run.named("gpu-cluster").inputs


def test_a3_high_on_gke_says_nccl_runs_over_tcp_on_eth0() -> None:
    args = _args(machine_type="a3-highgpu-8g", node_count=2, zone="us-central1-a", spot=False)

    def program() -> dict[str, Any]:
        return {"facts": A100Cluster("gpu", args).facts}  # type: ignore[arg-type]

    run = run_program(program, outputs={CLUSTER: _cluster_outputs})
    assert [r.name for r in run.resources if r.type in (NETWORK, SUBNETWORK, FIREWALL)] == []
    assert run.outputs["facts"]["notes"] == [
        "gpu_cluster: a3-highgpu-8g (A3 High) on GKE gets no GPUDirect-TCPX fabric here (no "
        "extra VPCs, no TCPX plugin, no receive-datapath sidecar): NCCL runs between nodes "
        "over TCP on eth0, the pods' only network interface, well below the machine's network "
        "bandwidth"
    ]


@pytest.mark.parametrize(
    ("machine", "app", "init", "image"),
    [
        ("a3-megagpu-8g", "nccl-tcpxo-installer", "pre-installation", "ubuntu"),
        ("a3-ultragpu-8g", "nccl-rdma-installer", "disable-log-martian", "alpine:latest"),
        ("a4-highgpu-8g", "nccl-rdma-installer", "disable-log-martian", "alpine:latest"),
    ],
)
def test_installer_helper_images_come_from_the_image_catalog(
    machine: str, app: str, init: str, image: str
) -> None:
    # CTK nccl-tcpxo-installer.yaml.tftpl `image: ubuntu`, nccl-installer.yaml.tftpl
    # `image: alpine:latest`: pinned in the catalog by tag, digest unverified (its rule).
    assert images.FABRIC_HELPER_IMAGES_VERIFIED is False
    assert (images.FABRIC_PRE_INSTALL_IMAGE, images.FABRIC_LOG_MARTIANS_IMAGE) == (
        "ubuntu",
        "alpine:latest",
    )
    run = _run(machine_type=machine, node_count=2, zone="us-central1-b")
    ds = run.named(f"gpu-{app}").inputs["spec"]["template"]["spec"]
    assert [(c["name"], c["image"]) for c in ds["initContainers"][:1]] == [(init, image)]

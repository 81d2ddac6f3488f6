"""The GPUDirect fabric of the gke backend for A3 Mega (TCPXO), A3 Ultra and A4 (RDMA): the
extra VPCs and subnets `trainstack.components.catalog.gpu_fabric` describes, the cluster's
multi-networking, the GPU pool's additional node networks, GKE's network objects, the NCCL
plugin installer DaemonSet (and on A3 Mega the NRI device injector), as Cluster Toolkit
renders them (`CTK`: GoogleCloudPlatform/cluster-toolkit @1047080); and what the training
pods get of it (`pod_fabric_for`: `trainstack.components._pod_fabric`'s annotations,
sidecar, mounts and NCCL environment, named after this cluster's Network objects).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import compute

from trainstack.components._pod_fabric import PodFabric, rdma_pod, tcpxo_pod
from trainstack.components.a100_cluster._common import (
    fabric_subnetworks,
    network_profile,
    region_of,
)
from trainstack.components.catalog.gpu_fabric import FabricFirewall, GkeFabric, gke_fabric
from trainstack.components.catalog.gpu_families import family_of
from trainstack.components.catalog.images import (
    FABRIC_LOG_MARTIANS_IMAGE,
    FABRIC_PRE_INSTALL_IMAGE,
)
from trainstack.components.catalog.machines import MACHINES

CLUSTER_EXTRA: Final[Mapping[str, Any]] = {
    "datapath_provider": "ADVANCED_DATAPATH",
    "enable_multi_networking": True,
}
"""CTK modules/scheduler/gke-cluster/main.tf: `enable_multi_networking` defaults to true when
there are `additional_networks`, and Dataplane V2 (`datapath_provider = ADVANCED_DATAPATH`)
with it (`derived_enable_dataplane_v2`); frontier.md 4.2."""
PAUSE_IMAGE: Final = (
    "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
)
"""The installers' keep-alive container (CTK examples/gke-a3-megagpu/
nccl-tcpxo-installer.yaml.tftpl and examples/gke-a3-ultragpu/nccl-installer.yaml.tftpl)."""
NRI_DEVICE_INJECTOR_IMAGE: Final = (
    "gcr.io/gke-release/nri-device-injector"
    "@sha256:6e79483d52abdc28454bf186320b10a56b0f117a10e8d65d5c74dbb821a76970"
)
"""CTK examples/gke-a3-megagpu/nri-device-injector.yaml (upstream CEA
nri_device_injector/nri-device-injector.yaml @70cf610), applied by gke-a3-megagpu.yaml's
`workload_manager_install`: it acts on the pods' `devices.gke.io/container.<name>`
annotations, which give the tcpxo-daemon sidecar the GPUs (`_pod_fabric.tcpxo_pod`)."""


@dataclass(frozen=True)
class FabricResources:
    """The fabric's Google resources, registered before the cluster and the GPU pool."""

    fabric: GkeFabric
    networks: list[compute.Network]
    subnetworks: list[compute.Subnetwork]
    firewalls: list[compute.Firewall]
    additional_node_network_configs: list[dict[str, pulumi.Output[str]]]
    """The pool's `network_config.additional_node_network_configs`, in NIC order."""


def fabric_for(machine_type: str, deployment: str, zone: str) -> GkeFabric | None:
    """The fabric the gke backend renders for `machine_type` (None: A2, A3 High)."""
    return gke_fabric(machine_type, deployment, zone)


def fabric_note(fabric: GkeFabric, machine_type: str) -> str:
    """The plan's line: the fabric, its networks and what NCCL in the pods sees."""
    return (
        f"{fabric.note(machine_type)}. Rendered as Google's and XPK's manifests do it, not "
        "run on the hardware here"
    )


def no_fabric_note(machine_type: str) -> str | None:
    """The plan's line for a family whose GPUDirect fabric the gke backend does not render
    (A3 High's TCPX: `catalog.gpu_families`), None for the others. Its pods attach only the
    cluster's network (no `networking.gke.io/interfaces` annotation, no TCPX plugin or
    receive-datapath sidecar: `pod_fabric_for` is not called), so NCCL between nodes takes its
    socket transport on that one interface."""
    model = MACHINES[machine_type].gpu_model
    if model is None or family_of(model).fabric != "tcpx":
        return None
    return (
        f"gpu_cluster: {machine_type} ({family_of(model).name}) on GKE gets no GPUDirect-TCPX "
        "fabric here (no extra VPCs, no TCPX plugin, no receive-datapath sidecar): NCCL runs "
        "between nodes over TCP on eth0, the pods' only network interface, well below the "
        "machine's network bandwidth"
    )


def pod_interfaces(fabric: GkeFabric) -> list[tuple[str, str]]:
    """(pod interface, Network object) of the networks the training pods attach. A node's
    NICs are eth0 (the cluster's network) then the pool's additional networks in order
    (eth1...), and a pod's interface takes its NIC's name: A3 Mega's pods attach all 8 gVNIC
    networks as eth1..eth8 (CEA gpudirect-tcpxo/nccl-test-latest.yaml: vpc1..vpc8), A3
    Ultra's and A4's the 8 RDMA subnets as eth2..eth9 and not net-1's eth1 (CEA
    gpudirect-rdma/nccl-test.yaml, CTK gke-a3-ultragpu/ and gke-a4/nccl-jobset-example.yaml:
    rdma-0..rdma-7)."""
    return [
        (f"eth{i + 1}", name)
        for i, (name, _, _, mode) in enumerate(k8s_network_names(fabric))
        if fabric.fabric == "tcpxo" or mode == "RDMA"
    ]


def pod_fabric_for(fabric: GkeFabric, gpus: int) -> PodFabric:
    """What every training pod on a pool with `fabric` gets (`gpus`: GPUs per node)."""
    if fabric.fabric == "tcpxo":
        return tcpxo_pod(pod_interfaces(fabric), gpus)
    return rdma_pod(pod_interfaces(fabric))


def create_fabric_networks(
    name: str,
    fabric: GkeFabric,
    deployment: str,
    project: pulumi.Output[str],
    zone: str,
    parent: pulumi.Resource,
) -> FabricResources:
    """The fabric's VPCs, subnets and the gVNIC VPCs' ingress rules (CTK modules/network/
    multivpc, vpc, gpu-rdma-vpc), named `<name>-<network>` in Pulumi and as `gpu_fabric`
    names them in Google. Neither `compute.Network`, `compute.Subnetwork` nor
    `compute.Firewall` takes labels."""
    region = region_of(zone)
    opts = pulumi.ResourceOptions(parent=parent)
    networks: list[compute.Network] = []
    subnetworks: list[compute.Subnetwork] = []
    firewalls: list[compute.Firewall] = []
    configs: list[dict[str, pulumi.Output[str]]] = []
    for net in fabric.networks:
        network = compute.Network(
            f"{name}-{net.name.removeprefix(deployment + '-')}",
            project=project,
            name=net.name,
            auto_create_subnetworks=False,
            mtu=net.mtu,
            network_profile=network_profile(project, net.network_profile),
            opts=opts,
        )
        networks.append(network)
        subs = fabric_subnetworks(name, deployment, project, region, network, net.subnets, opts)
        subnetworks += subs
        configs += [{"network": network.name, "subnetwork": sub.name} for sub in subs]
        if net.firewall is not None:
            firewalls.append(_firewall(name, net.firewall, deployment, project, network, opts))
    return FabricResources(fabric, networks, subnetworks, firewalls, configs)


def _firewall(
    name: str,
    rule: FabricFirewall,
    deployment: str,
    project: pulumi.Output[str],
    network: compute.Network,
    opts: pulumi.ResourceOptions,
) -> compute.Firewall:
    # Without it a VPC admits nothing: NCCL's bootstrap and socket traffic between the
    # nodes' eth1.. would be dropped. CTK's rules (`FabricFirewall`) as CTK's vpc module
    # passes them to terraform-google-modules/network ~> 13.0 (@c0b32b1, v13.1.0:
    # variables.tf `firewall_rules` direction optional "INGRESS", priority null;
    # modules/firewall-rules/main.tf `network = var.network_name`, `source_ranges` the
    # rule's ranges, `ports = lookup(allow.value, "ports", null)`).
    return compute.Firewall(
        f"{name}-{rule.name.removeprefix(deployment + '-')}",
        project=project,
        name=rule.name,
        description=rule.description,
        network=network.name,
        direction="INGRESS",
        source_ranges=list(rule.source_ranges),
        allows=[
            compute.FirewallAllowArgs(protocol="tcp", ports=["0-65535"]),
            compute.FirewallAllowArgs(protocol="udp", ports=["0-65535"]),
            compute.FirewallAllowArgs(protocol="icmp"),
        ],
        opts=opts,
    )


def k8s_network_names(fabric: GkeFabric) -> list[tuple[str, str, str, str]]:
    """(name, vpc, subnet, deviceMode) of each GKENetworkParamSet / Network pair, as CTK
    modules/scheduler/gke-cluster/main.tf names them: gVNIC networks `<gvnic_prefix><1..>`
    (`GkeFabric.gvnic_prefix`), RDMA subnets `rdma-<0..>`, gVNIC first."""
    gvnic = [
        (net.name, sub)
        for net in fabric.networks
        if net.device_mode == "NetDevice"
        for sub, _ in net.subnets
    ]
    rdma = [
        (net.name, sub)
        for net in fabric.networks
        if net.device_mode == "RDMA"
        for sub, _ in net.subnets
    ]
    prefix = fabric.gvnic_prefix
    return [(f"{prefix}{i + 1}", v, s, "NetDevice") for i, (v, s) in enumerate(gvnic)] + [
        (f"rdma-{i}", v, s, "RDMA") for i, (v, s) in enumerate(rdma)
    ]


def network_objects(fabric: GkeFabric) -> list[dict[str, Any]]:
    """The GKENetworkParamSet and Network manifests (CTK modules/scheduler/gke-cluster/
    templates/gke-network-paramset.yaml.tftpl and network-object.yaml.tftpl)."""
    objects: list[dict[str, Any]] = []
    for name, vpc, subnet, mode in k8s_network_names(fabric):
        objects.append(
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "GKENetworkParamSet",
                "metadata": {"name": name},
                "spec": {"vpc": vpc, "vpcSubnet": subnet, "deviceMode": mode},
            }
        )
        objects.append(
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "Network",
                "metadata": {"name": name},
                "spec": {
                    "parametersRef": {
                        "group": "networking.gke.io",
                        "kind": "GKENetworkParamSet",
                        "name": name,
                    },
                    "type": "Device",
                },
            }
        )
    return objects


def installer_daemonset(fabric: GkeFabric, accelerator: str, gpus: int) -> dict[str, Any]:
    """The NCCL plugin installer: CTK examples/gke-a3-megagpu/nccl-tcpxo-installer.yaml.tftpl
    (from CEA gpudirect-tcpxo/nccl-tcpxo-installer.yaml @1d592a4) or examples/gke-a3-ultragpu/
    nccl-installer.yaml.tftpl (its `rollingUpdate.maxUnavailable` left to Kubernetes' default),
    with `accelerator` the GPU nodes' `cloud.google.com/gke-accelerator` label."""
    app = "nccl-tcpxo-installer" if fabric.fabric == "tcpxo" else "nccl-rdma-installer"
    affinity = _on_gpu_nodes(accelerator)
    if fabric.fabric == "tcpxo":
        volumes, init = _tcpxo_installer(fabric.installer_image)
    else:
        volumes, init = _rdma_installer(fabric.installer_image, gpus)
    return _node_daemonset(
        app,
        affinity,
        {
            "volumes": volumes,
            "initContainers": init,
            "containers": [{"image": PAUSE_IMAGE, "name": "pause"}],
        },
    )


def _node_daemonset(app: str, affinity: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """A kube-system DaemonSet of CTK's installer shape (system-node-critical, every taint
    tolerated, the host's network and PIDs) running `pod`'s containers and volumes."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": app, "namespace": "kube-system", "labels": {"k8s-app": app}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": app}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"name": app, "k8s-app": app}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "affinity": affinity,
                    "tolerations": [{"operator": "Exists"}],
                    "hostNetwork": True,
                    "hostPID": True,
                    **pod,
                },
            },
        },
    }


def _on_gpu_nodes(accelerator: str) -> dict[str, Any]:
    term = {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": [accelerator]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def nri_device_injector(accelerator: str) -> dict[str, Any]:
    """The NRI device injector DaemonSet A3 Mega's pods need for their tcpxo-daemon
    annotation: CTK examples/gke-a3-megagpu/nri-device-injector.yaml, on the GPU nodes of
    `accelerator` only (CTK lists the TCPX, TCPXO and RTX PRO 6000 labels), without its
    `root` hostPath volume of `/`, which no container mounts."""
    app = "device-injector"
    container = {
        "image": NRI_DEVICE_INJECTOR_IMAGE,
        "name": app,
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "dev", "mountPath": "/dev"},
            {"name": "nri", "mountPath": "/var/run/nri"},
        ],
    }
    return _node_daemonset(
        app,
        _on_gpu_nodes(accelerator),
        {
            "containers": [container],
            "volumes": [
                {"name": "nri", "hostPath": {"path": "/var/run/nri"}},
                {"name": "dev", "hostPath": {"path": "/dev"}},
            ],
        },
    )


_TCPXO_PRE_INSTALL: Final = """\
/sbin/iptables -I INPUT -p tcp -m tcp -j ACCEPT && modprobe import-helper
sudo mkdir -p /dev/aperture_devices
while IFS= read -r line; do
  BDF=$( echo "$line" | awk '{print $1}' );
  target_aperture_path="/dev/aperture_devices/$BDF"
  host_aperture_device=$(readlink -f "/sys/bus/pci/devices/$BDF");
  sudo mkdir -p $target_aperture_path;
  sudo umount -R $target_aperture_path;
  sudo mount --bind $host_aperture_device $target_aperture_path;
done < <(lspci -nn -D | grep '1ae0:0084')
if [ -d /dev/aperture_devices ]; then
    chmod -R a+r /dev/aperture_devices/
    chmod a+rw /dev/aperture_devices/*/resource*
fi
"""
_TCPXO_INSTALL: Final = """\
set -ex
chmod 755 /scripts/container_entry.sh
/scripts/container_entry.sh install --install-nccl
mkdir -p /usr/local/nvidia/lib64
cp -r /var/lib/tcpxo/lib64/. /usr/local/nvidia/lib64
echo "installation finishes"
"""


def _tcpxo_installer(image: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "var-lib", "hostPath": {"path": "/var/lib"}},
        {"name": "tcpxo", "hostPath": {"path": "/var/lib/tcpxo"}},
        {"name": "library-dir-host", "hostPath": {"path": "/home/kubernetes/bin"}},
    ]
    init: list[dict[str, Any]] = [
        {
            "image": FABRIC_PRE_INSTALL_IMAGE,
            "name": "pre-installation",
            "securityContext": {"privileged": True},
            "command": ["nsenter", "-at", "1", "--", "sh", "-c", _TCPXO_PRE_INSTALL],
        },
        {
            "name": "nccl-tcpxo-installer",
            "image": image,
            "resources": {"requests": {"cpu": "150m"}},
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": "var-lib", "mountPath": "/var/lib"},
                {"name": "library-dir-host", "mountPath": "/usr/local"},
            ],
            "command": ["/bin/sh", "-c"],
            "args": [_TCPXO_INSTALL],
        },
    ]
    return volumes, init


_RDMA_INSTALL: Final = """\
set -ex
/scripts/container_entry.sh install --install-nccl
cp -r /var/lib/gib/lib64/. /usr/local/home/kubernetes/bin/nvidia/lib64
cp -r /var/lib/gib/. /usr/local/home/kubernetes/bin/gib
echo "installation finishes"
"""


def _rdma_installer(image: str, gpus: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lib = "/home/kubernetes/bin/nvidia/lib64"
    volumes: list[dict[str, Any]] = [
        {"name": "library-dir-host", "hostPath": {"path": lib, "type": "DirectoryOrCreate"}},
        {"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}},
    ]
    martians = "".join(f"sysctl -w net.ipv4.conf.gpu{i}rdma0.log_martians=0\n" for i in range(gpus))
    init: list[dict[str, Any]] = [
        {
            "name": "disable-log-martian",
            "image": FABRIC_LOG_MARTIANS_IMAGE,
            "command": ["/bin/sh"],
            "securityContext": {"privileged": True},
            "args": ["-c", martians],
        },
        {
            "image": image,
            "name": "nccl-rdma-installer",
            "resources": {"requests": {"cpu": "150m"}},
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": "library-dir-host", "mountPath": f"/usr/local{lib}"},
                {"name": "gib", "mountPath": "/usr/local/home/kubernetes/bin/gib"},
            ],
            "command": ["/bin/sh", "-c"],
            "args": [_RDMA_INSTALL],
        },
    ]
    return volumes, init


def create_fabric_objects(
    name: str,
    fabric: GkeFabric,
    accelerator: str,
    gpus: int,
    parent: pulumi.Resource,
    provider: k8s.Provider,
) -> list[pulumi.Resource]:
    """The network objects, the installer DaemonSet and (TCPXO) the NRI device injector on
    the cluster, children of `parent`."""
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    created: list[pulumi.Resource] = []
    for obj in network_objects(fabric):
        created.append(
            k8s.apiextensions.CustomResource(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                metadata=obj["metadata"],
                spec=obj["spec"],
                opts=opts,
            )
        )
    daemonsets = [installer_daemonset(fabric, accelerator, gpus)]
    if fabric.fabric == "tcpxo":
        daemonsets.append(nri_device_injector(accelerator))
    for ds in daemonsets:
        created.append(
            k8s.apps.v1.DaemonSet(
                f"{name}-{ds['metadata']['name']}",
                metadata=ds["metadata"],
                spec=ds["spec"],
                opts=opts,
            )
        )
    return created

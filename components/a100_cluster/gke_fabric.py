"""The GPUDirect fabric of the gke backend for A3 Mega (TCPXO) and A3 Ultra (RDMA): the extra
VPCs and subnets `trainstack.components.catalog.gpu_fabric` describes, the cluster's
multi-networking, the GPU pool's additional node networks, GKE's network objects, the NCCL
plugin installer DaemonSet and the pods' NCCL environment, as Cluster Toolkit renders them
(`CTK`: GoogleCloudPlatform/cluster-toolkit @1047080).

Not rendered yet: the pods' `networking.gke.io/interfaces` annotation, the TCPXO
receive-datapath sidecar (`tcpxo-daemon`) and the plugin's library mounts in the training
pods (XPK `tcpxo_decorator.py`, frontier.md 4.2); until they are, NCCL in the pods sees eth0
only and runs over TCP. The plan note says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import compute

from trainstack.components.a100_cluster._common import region_of
from trainstack.components.catalog.gpu_fabric import GkeFabric, gke_fabric

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
NETWORK_PROFILE_URL: Final = (
    "https://www.googleapis.com/compute/beta/projects/{project}/global/networkProfiles/{profile}"
)
"""CTK examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml `rdma-net.network_profile`."""
NCCL_ENV: Final[Mapping[str, Mapping[str, str]]] = {
    # frontier.md 4.2, CEA gpudirect-tcpxo/README.md (release 2026-01-09): the interfaces.
    "tcpxo": {
        "NCCL_FASTRAK_CTRL_DEV": "eth0",
        "NCCL_FASTRAK_IFNAME": ",".join(f"eth{i}" for i in range(1, 9)),
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_CROSS_NIC": "0",
    },
    # gIB's settings come from `source /usr/local/gib/scripts/set_nccl_env.sh` in the pod
    # (frontier.md 4.2, CEA gpudirect-rdma), which needs the plugin's mount: none set here.
    "rdma": {},
}


@dataclass(frozen=True)
class FabricResources:
    """The fabric's Google resources, registered before the cluster and the GPU pool."""

    fabric: GkeFabric
    networks: list[compute.Network]
    subnetworks: list[compute.Subnetwork]
    additional_node_network_configs: list[dict[str, pulumi.Output[str]]]
    """The pool's `network_config.additional_node_network_configs`, in NIC order."""


def fabric_for(machine_type: str, deployment: str, zone: str) -> GkeFabric | None:
    """The fabric the gke backend renders for `machine_type` (None: A2, A3 High, A4)."""
    return gke_fabric(machine_type, deployment, zone)


def fabric_note(fabric: GkeFabric, machine_type: str) -> str:
    """The plan's line: the fabric and what NCCL sees, and what is not rendered yet."""
    return (
        f"{fabric.note(machine_type)}. Not rendered yet: the pods' networking.gke.io/interfaces "
        "annotation"
        + (", the tcpxo-daemon receive-datapath sidecar" if fabric.fabric == "tcpxo" else "")
        + " and the plugin's library mounts, so NCCL in the training pods sees eth0 only "
        "and runs over TCP"
    )


def create_fabric_networks(
    name: str,
    fabric: GkeFabric,
    deployment: str,
    project: pulumi.Output[str],
    zone: str,
    parent: pulumi.Resource,
) -> FabricResources:
    """The fabric's VPCs and subnets (CTK modules/network/multivpc, vpc, gpu-rdma-vpc), named
    `<name>-<network>` in Pulumi and as `gpu_fabric` names them in Google. Neither
    `compute.Network` nor `compute.Subnetwork` takes labels."""
    region = region_of(zone)
    opts = pulumi.ResourceOptions(parent=parent)
    networks: list[compute.Network] = []
    subnetworks: list[compute.Subnetwork] = []
    configs: list[dict[str, pulumi.Output[str]]] = []
    for net in fabric.networks:
        profile = (
            pulumi.Output.format(NETWORK_PROFILE_URL, project=project, profile=net.network_profile)
            if net.network_profile
            else None
        )
        network = compute.Network(
            f"{name}-{net.name.removeprefix(deployment + '-')}",
            project=project,
            name=net.name,
            auto_create_subnetworks=False,
            mtu=net.mtu,
            network_profile=profile,
            opts=opts,
        )
        networks.append(network)
        for sub_name, cidr in net.subnets:
            subnetwork = compute.Subnetwork(
                f"{name}-{sub_name.removeprefix(deployment + '-')}",
                project=project,
                region=region,
                name=sub_name,
                network=network.id,
                ip_cidr_range=cidr,
                opts=opts,
            )
            subnetworks.append(subnetwork)
            configs.append({"network": network.name, "subnetwork": subnetwork.name})
    return FabricResources(fabric, networks, subnetworks, configs)


def k8s_network_names(fabric: GkeFabric) -> list[tuple[str, str, str, str]]:
    """(name, vpc, subnet, deviceMode) of each GKENetworkParamSet / Network pair, as CTK
    modules/scheduler/gke-cluster/main.tf names them: gVNIC networks `gvnic-<1..>`, RDMA
    subnets `rdma-<0..>` (`k8s_network_names` defaults), gVNIC first."""
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
    return [(f"gvnic-{i + 1}", v, s, "NetDevice") for i, (v, s) in enumerate(gvnic)] + [
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
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "cloud.google.com/gke-accelerator",
                                "operator": "In",
                                "values": [accelerator],
                            }
                        ]
                    }
                ]
            }
        }
    }
    if fabric.fabric == "tcpxo":
        volumes, init = _tcpxo_installer(fabric.installer_image)
    else:
        volumes, init = _rdma_installer(fabric.installer_image, gpus)
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
                    "volumes": volumes,
                    "initContainers": init,
                    "containers": [{"image": PAUSE_IMAGE, "name": "pause"}],
                },
            },
        },
    }


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
            "image": "ubuntu",
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
            "image": "alpine:latest",
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
    """The network objects and the installer DaemonSet on the cluster, children of `parent`."""
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
    ds = installer_daemonset(fabric, accelerator, gpus)
    created.append(
        k8s.apps.v1.DaemonSet(
            f"{name}-{ds['metadata']['name']}",
            metadata=ds["metadata"],
            spec=ds["spec"],
            opts=opts,
        )
    )
    return created

"""The GPUDirect RDMA fabric of the gce backend (A4, A3 Ultra): the extra VPCs, subnets and
firewall rule `trainstack.components.catalog.gpu_fabric_gce` describes, and the instance
template's NICs in Google's order, as Cluster Toolkit's VM blueprints render them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import compute

from trainstack.components.a100_cluster._common import (
    fabric_subnetworks,
    network_profile,
    region_of,
)
from trainstack.components.catalog.gpu_fabric_gce import (
    RDMA_MTU,
    GceFabric,
)


@dataclass(frozen=True)
class GceFabricResources:
    """The fabric's Google resources, registered before the instance template."""

    fabric: GceFabric
    networks: list[compute.Network]
    subnetworks: list[compute.Subnetwork]
    firewalls: list[compute.Firewall]
    nics: list[compute.InstanceTemplateNetworkInterfaceArgs]
    """The template's NICs after the primary, in NIC order."""


def create_gce_fabric(
    name: str,
    fabric: GceFabric,
    deployment: str,
    project: pulumi.Output[str],
    zone: str,
    parent: pulumi.Resource,
) -> GceFabricResources:
    """The fabric's VPCs (CTK modules/network/vpc for net-1, gpu-rdma-vpc for the RoCE VPC),
    named `<name>-<network>` in Pulumi and as `gpu_fabric_gce` names them in Google. Neither
    `compute.Network`, `compute.Subnetwork` nor `compute.Firewall` takes labels."""
    region = region_of(zone)
    opts = pulumi.ResourceOptions(parent=parent)
    networks: list[compute.Network] = []
    subnetworks: list[compute.Subnetwork] = []
    firewalls: list[compute.Firewall] = []
    nics: list[compute.InstanceTemplateNetworkInterfaceArgs] = []
    for net in fabric.networks:
        network = compute.Network(
            f"{name}-{net.key}",
            project=project,
            name=net.name,
            description=f"trainstack: {fabric.family} GPU fabric ({net.nic_type} NICs)",
            auto_create_subnetworks=False,
            mtu=RDMA_MTU,
            network_profile=network_profile(project, net.network_profile),
            routing_mode=net.routing_mode,
            opts=opts,
        )
        networks.append(network)
        subs = fabric_subnetworks(name, deployment, project, region, network, net.subnets, opts)
        subnetworks += subs
        for subnetwork in subs:
            if net.role == "rdma":
                # gpu-rdma-vpc `output_subnets`: the subnetwork's self link, no network.
                nics.append(
                    compute.InstanceTemplateNetworkInterfaceArgs(
                        subnetwork=subnetwork.self_link, nic_type=net.nic_type
                    )
                )
            else:
                nics.append(
                    compute.InstanceTemplateNetworkInterfaceArgs(
                        network=network.self_link,
                        subnetwork=subnetwork.self_link,
                        nic_type=net.nic_type,
                    )
                )
        if net.firewall is not None:
            # CTK's `<deployment>-internal-1`: tcp, udp and icmp from the subnet's own range
            # (NCCL's bootstrap and gIB's socket traffic on eth1). The RoCE VPC takes none:
            # gpu-rdma-vpc refuses firewall rules.
            firewalls.append(
                compute.Firewall(
                    f"{name}-{net.key}-internal",
                    project=project,
                    name=net.firewall,
                    description=f"trainstack: traffic between the GPU VMs on {net.name}",
                    network=network.self_link,
                    direction="INGRESS",
                    source_ranges=[cidr for _, cidr in net.subnets],
                    allows=[
                        compute.FirewallAllowArgs(protocol="tcp"),
                        compute.FirewallAllowArgs(protocol="udp"),
                        compute.FirewallAllowArgs(protocol="icmp"),
                    ],
                    opts=opts,
                )
            )
    return GceFabricResources(fabric, networks, subnetworks, firewalls, nics)

"""A private VPC for training nodes: one subnet, Cloud NAT egress, closed firewall.

    from trainstack.components.training_network import TrainingNetwork

    net = TrainingNetwork(
        "exp-42-net",
        {"project": "my-project", "region": "us-central1", "deployment_name": "exp-42"},
    )
    # compute components take net.network_self_link, net.subnetwork_self_link, net.node_tag

Nodes get no external IPs: they reach the internet (pip, container registries) through
Cloud NAT and Google APIs through Private Google Access. Ingress is open only between
nodes carrying `node_tag` inside the subnet (all of TCP, UDP and ICMP: NCCL, gloo and TF
gRPC pick ports at random), plus SSH from Google's IAP TCP-forwarding range. The network
MTU is 8896 (jumbo frames), which multi-node GPU and TPU collectives benefit from.

Naming: every physical name is `<deployment_name>-<role>` (see `trainstack.components.naming`).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final, NotRequired, TypedDict

import pulumi
from pulumi_gcp import compute

from trainstack.components._args import check_args, component_check
from trainstack.components.catalog.names import zone_in_region_problems
from trainstack.components.naming import gcp_name, labels_input, name_input

TOKEN = "trainstack:network:TrainingNetwork"
COMPONENT_LABEL = "training-network"

DEFAULT_SUBNET_CIDR = "10.128.0.0/20"
JUMBO_MTU = 8896
"""Largest MTU a VPC allows; fewer packets per collective on GPU/TPU interconnect traffic."""
IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"
"""Source range of Identity-Aware Proxy TCP forwarding (`gcloud compute ssh --tunnel-through-iap`)."""

_PRIVATE_RANGES = tuple(
    ipaddress.IPv4Network(r) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
_MIN_PREFIX = 8
_MAX_PREFIX = 29


class TrainingNetworkArgs(TypedDict):
    """Arguments for `TrainingNetwork`."""

    project: pulumi.Input[str]
    """Project id of the network."""
    region: pulumi.Input[str]
    """Region of the subnet, router and NAT; the same region as the training compute."""
    deployment_name: pulumi.Input[str]
    """Deployment prefix of every physical name and of the node tag."""
    subnet_cidr: NotRequired[str]
    """Primary range of the subnet (default 10.128.0.0/20): a private RFC 1918 IPv4 range,
    /8 to /29. Plain value: it is validated up front and also scopes the firewall."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Accepted for the shared vocabulary; VPC networks, subnets, routers, NATs and firewall
    rules carry no labels (pulumi_gcp 10.2)."""


def _validate_cidr(cidr: str) -> str:
    try:
        network = ipaddress.ip_network(cidr, strict=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"subnet_cidr: {cidr!r} is not a valid IPv4 network ({exc}); valid: a private "
            f"IPv4 range such as {DEFAULT_SUBNET_CIDR}"
        ) from None
    if not isinstance(network, ipaddress.IPv4Network) or not any(
        network.subnet_of(private) for private in _PRIVATE_RANGES
    ):
        raise ValueError(
            f"subnet_cidr: {cidr!r} is outside the private RFC 1918 ranges; valid: a range "
            "inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"
        )
    if not _MIN_PREFIX <= network.prefixlen <= _MAX_PREFIX:
        raise ValueError(
            f"subnet_cidr: {cidr!r} has prefix length /{network.prefixlen}; valid: "
            f"/{_MIN_PREFIX} to /{_MAX_PREFIX}"
        )
    return str(network)


class TrainingNetwork(pulumi.ComponentResource):
    """VPC, subnet, Cloud Router + NAT and firewall rules for training nodes."""

    network_self_link: pulumi.Output[str]
    """Self link of the VPC network."""
    subnetwork_self_link: pulumi.Output[str]
    """Self link of the training subnet."""
    network_name: pulumi.Output[str]
    """Name of the VPC network."""
    subnetwork_name: pulumi.Output[str]
    """Name of the training subnet."""
    node_tag: pulumi.Output[str]
    """Network tag that training instances must carry for the firewall rules to apply."""
    network: compute.Network
    """The VPC network."""
    subnetwork: compute.Subnetwork
    """The training subnet."""
    router: compute.Router
    """Cloud Router that hosts the NAT."""
    nat: compute.RouterNat
    """Cloud NAT giving the nodes (which have no external IPs) outbound internet access."""
    internal_firewall: compute.Firewall
    """Ingress rule: all TCP/UDP/ICMP from the subnet to tagged nodes."""
    iap_ssh_firewall: compute.Firewall
    """Ingress rule: SSH from the IAP TCP-forwarding range to tagged nodes."""

    def __init__(
        self, name: str, args: TrainingNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("TrainingNetwork", TrainingNetworkArgs, args)
        cidr = component_check(
            "TrainingNetwork", _validate_cidr, args.get("subnet_cidr", DEFAULT_SUBNET_CIDR)
        )
        component_check(
            "TrainingNetwork", labels_input, args.get("labels"), COMPONENT_LABEL
        )  # validation only
        deployment = args["deployment_name"]
        physical = {
            role: name_input(gcp_name, deployment, role)
            for role in ("net", "subnet", "router", "nat", "allow-internal", "allow-iap-ssh")
        }
        tag = name_input(gcp_name, deployment, "train-node")
        super().__init__(TOKEN, name, None, opts)

        child = pulumi.ResourceOptions(parent=self)
        project, region = args["project"], args["region"]
        self.network = compute.Network(
            f"{name}-network",
            project=project,
            name=physical["net"],
            auto_create_subnetworks=False,
            mtu=JUMBO_MTU,
            description="trainstack training network",
            opts=child,
        )
        self.subnetwork = compute.Subnetwork(
            f"{name}-subnet",
            project=project,
            region=region,
            name=physical["subnet"],
            network=self.network.self_link,
            ip_cidr_range=cidr,
            # Nodes have no external IPs; this is how they reach GCS and other Google APIs.
            private_ip_google_access=True,
            opts=child,
        )
        self.router = compute.Router(
            f"{name}-router",
            project=project,
            region=region,
            name=physical["router"],
            network=self.network.self_link,
            opts=child,
        )
        self.nat = compute.RouterNat(
            f"{name}-nat",
            project=project,
            region=region,
            name=physical["nat"],
            router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config={"enable": True, "filter": "ERRORS_ONLY"},
            opts=child,
        )
        self.internal_firewall = compute.Firewall(
            f"{name}-allow-internal",
            project=project,
            name=physical["allow-internal"],
            network=self.network.self_link,
            direction="INGRESS",
            allows=[{"protocol": "tcp"}, {"protocol": "udp"}, {"protocol": "icmp"}],
            source_ranges=[cidr],
            target_tags=[tag],
            opts=child,
        )
        self.iap_ssh_firewall = compute.Firewall(
            f"{name}-allow-iap-ssh",
            project=project,
            name=physical["allow-iap-ssh"],
            network=self.network.self_link,
            direction="INGRESS",
            allows=[{"protocol": "tcp", "ports": ["22"]}],
            source_ranges=[IAP_TCP_FORWARDING_RANGE],
            target_tags=[tag],
            opts=child,
        )

        self.network_self_link = self.network.self_link
        self.subnetwork_self_link = self.subnetwork.self_link
        self.network_name = self.network.name
        self.subnetwork_name = self.subnetwork.name
        self.node_tag = pulumi.Output.from_input(tag)
        self.region: str | None = region if isinstance(region, str) else None
        """The subnet's region when given as a plain value: the compute it is given to checks
        its zone against it (`subnet_region`)."""
        if self.region is not None:
            _SUBNET_REGIONS[id(self.subnetwork_self_link)] = (
                self.subnetwork_self_link,
                self.region,
            )
        self.register_outputs(
            {
                "network_self_link": self.network_self_link,
                "subnetwork_self_link": self.subnetwork_self_link,
                "network_name": self.network_name,
                "subnetwork_name": self.subnetwork_name,
                "node_tag": self.node_tag,
                "router": self.router,
                "nat": self.nat,
            }
        )


_SUBNET_REGIONS: dict[int, tuple[Any, str]] = {}
"""`subnetwork_self_link` Outputs of this program's networks, by id, with their region (the
Output is kept, so its id is not reused)."""


def subnet_region(subnetwork: Any) -> str | None:
    """The region of a subnet as a compute component is given it: a `TrainingNetwork`'s
    `subnetwork_self_link` (its `region`); None for any other value (not known before
    deployment, or a link the program wrote itself)."""
    entry = _SUBNET_REGIONS.get(id(subnetwork))
    return entry[1] if entry is not None and entry[0] is subnetwork else None


SUBNET_REGION_KEY: Final = "the region of subnetwork_self_link"
"""What a component's zone is checked against (a stack's: `gcp:region`)."""


def subnet_zone_problems(zone: Any, subnetwork: Any, key: str) -> list[str]:
    """A problem when `zone` (at `key`) is not in the region of `subnetwork` (a
    `TrainingNetwork`'s `subnetwork_self_link`; nothing to check for any other value): the
    one check every compute component given a zone and a subnet makes
    (`zone_in_region_problems`, as a stack's compute section against `gcp:region`)."""
    if not isinstance(zone, str):
        return []
    return zone_in_region_problems(zone, subnet_region(subnetwork), key, SUBNET_REGION_KEY)

"""TrainingNetwork under Pulumi mocks: private subnet, NAT egress and a closed firewall."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainstack.components.training_network import TOKEN, TrainingNetwork
from trainstack.infra.mocks import ProgramRun, run_program

NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
ROUTER = "gcp:compute/router:Router"
NAT = "gcp:compute/routerNat:RouterNat"
FIREWALL = "gcp:compute/firewall:Firewall"
NETWORK_LINK = (
    "https://www.googleapis.com/compute/v1/projects/my-project/global/networks/exp-42-net"
)
SUBNET_LINK = (
    "https://www.googleapis.com/compute/v1/projects/my-project/regions/us-central1/"
    "subnetworks/exp-42-subnet"
)


def _run(**overrides: Any) -> ProgramRun:
    args: dict[str, Any] = {
        "project": "my-project",
        "region": "us-central1",
        "deployment_name": "exp-42",
        **overrides,
    }

    def program() -> dict[str, Any]:
        net = TrainingNetwork("net", args)  # type: ignore[arg-type]
        return {
            "network_self_link": net.network_self_link,
            "subnetwork_self_link": net.subnetwork_self_link,
            "network_name": net.network_name,
            "subnetwork_name": net.subnetwork_name,
            "node_tag": net.node_tag,
        }

    return run_program(program)


def test_children_and_outputs() -> None:
    run = _run()
    assert {(r.type, r.name, r.parent) for r in run.resources} == {
        (TOKEN, "net", None),
        (NETWORK, "net-network", "net"),
        (SUBNET, "net-subnet", "net"),
        (ROUTER, "net-router", "net"),
        (NAT, "net-nat", "net"),
        (FIREWALL, "net-allow-internal", "net"),
        (FIREWALL, "net-allow-iap-ssh", "net"),
    }
    assert len(run.resources) == 7
    assert run.outputs == {
        "network_self_link": NETWORK_LINK,
        "subnetwork_self_link": SUBNET_LINK,
        "network_name": "exp-42-net",
        "subnetwork_name": "exp-42-subnet",
        "node_tag": "exp-42-train-node",
    }


def test_network_and_subnet() -> None:
    run = _run()
    assert run.named("net-network").inputs == {
        "project": "my-project",
        "name": "exp-42-net",
        "autoCreateSubnetworks": False,
        "mtu": 8896,
        "description": "trainstack training network",
    }
    assert run.named("net-subnet").inputs == {
        "project": "my-project",
        "region": "us-central1",
        "name": "exp-42-subnet",
        "network": NETWORK_LINK,
        "ipCidrRange": "10.128.0.0/20",
        "privateIpGoogleAccess": True,
    }


def test_router_and_nat() -> None:
    run = _run()
    assert run.named("net-router").inputs["network"] == NETWORK_LINK
    assert run.named("net-nat").inputs == {
        "project": "my-project",
        "region": "us-central1",
        "name": "exp-42-nat",
        "router": "exp-42-router",
        "natIpAllocateOption": "AUTO_ONLY",
        "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
        "logConfig": {"enable": True, "filter": "ERRORS_ONLY"},
    }


def test_firewall_rules_are_scoped() -> None:
    run = _run(subnet_cidr="10.8.0.0/16")
    internal = run.named("net-allow-internal").inputs
    assert internal == {
        "project": "my-project",
        "name": "exp-42-allow-internal",
        "network": NETWORK_LINK,
        "direction": "INGRESS",
        "allows": [{"protocol": "tcp"}, {"protocol": "udp"}, {"protocol": "icmp"}],
        "sourceRanges": ["10.8.0.0/16"],
        "targetTags": ["exp-42-train-node"],
    }
    ssh = run.named("net-allow-iap-ssh").inputs
    assert ssh["allows"] == [{"protocol": "tcp", "ports": ["22"]}]
    assert ssh["sourceRanges"] == ["35.235.240.0/20"]
    assert ssh["targetTags"] == ["exp-42-train-node"]
    for rule in run.of_type(FIREWALL):
        assert "0.0.0.0/0" not in rule.inputs["sourceRanges"]
        assert "sourceTags" not in rule.inputs


@pytest.mark.parametrize(
    ("cidr", "message"),
    [
        ("10.128.0.0/33", "subnet_cidr: '10.128.0.0/33' is not a valid IPv4 network ("),
        ("10.128.0.1/20", "subnet_cidr: '10.128.0.1/20' is not a valid IPv4 network ("),
        (
            "8.8.0.0/16",
            (
                "subnet_cidr: '8.8.0.0/16' is outside the private RFC 1918 ranges; valid: a "
                "range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"
            ),
        ),
        (
            "0.0.0.0/0",
            "subnet_cidr: '0.0.0.0/0' is outside the private RFC 1918 ranges; valid: ",
        ),
        ("fd00::/64", "subnet_cidr: 'fd00::/64' is outside the private RFC 1918 ranges; valid: "),
        (
            "10.0.0.0/30",
            "subnet_cidr: '10.0.0.0/30' has prefix length /30; valid: /8 to /29",
        ),
    ],
)
def test_cidr_validation(cidr: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _run(subnet_cidr=cidr)


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "172.16.0.0/12", "192.168.10.0/24", "10.1.2.0/29"])
def test_cidr_accepted(cidr: str) -> None:
    assert _run(subnet_cidr=cidr).named("net-subnet").inputs["ipCidrRange"] == cidr


def test_same_program_registers_identical_inputs() -> None:
    first, second = _run(), _run()
    assert {r.name: (r.type, r.inputs) for r in first.resources} == {
        r.name: (r.type, r.inputs) for r in second.resources
    }

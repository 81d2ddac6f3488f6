"""`gpu_cluster.master_authorized_cidrs` in the stack config: validated with one line per bad
value, and sent as the GKE cluster's authorized networks."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.plan import build_plan, load_stack

HINT = (
    "is not a CIDR block; valid: an address/prefix with the host bits zero, e.g. "
    "203.0.113.0/24 or 198.51.100.7/32"
)


def _config(stack: str, cidrs: Any) -> dict[str, Any]:
    _, config = load_stack(stack, None)
    section = {**config["trainstack:gpu_cluster"], "master_authorized_cidrs": cidrs}
    return {**config, "trainstack:gpu_cluster": section}


def test_the_gke_cluster_admits_only_the_listed_networks() -> None:
    plan = build_plan(
        "dev-a100-gke", _config("dev-a100-gke", ["203.0.113.0/24", "198.51.100.7/32"])
    )
    [cluster] = [r for r in plan["resources"] if r["type"] == "gcp:container/cluster:Cluster"]
    assert cluster["inputs"]["masterAuthorizedNetworksConfig"] == {
        "cidrBlocks": [
            {"cidrBlock": "203.0.113.0/24", "displayName": "authorized-0"},
            {"cidrBlock": "198.51.100.7/32", "displayName": "authorized-1"},
        ]
    }


@pytest.mark.parametrize(
    ("stack", "cidrs", "problems"),
    [
        (
            "dev-a100-gke",
            ["10.0.0.0/8", "10.0.0.1/8", "nope", 5],
            [
                f"gpu_cluster.master_authorized_cidrs[1]: '10.0.0.1/8' {HINT}",
                f"gpu_cluster.master_authorized_cidrs[2]: 'nope' {HINT}",
                f"gpu_cluster.master_authorized_cidrs[3]: 5 {HINT}",
            ],
        ),
        (
            "dev-a100-gke",
            ["203.0.113.0/24", "2001:db8::/48"],
            [
                "gpu_cluster.master_authorized_cidrs[1]: '2001:db8::/48' is IPv6; valid: an "
                "IPv4 block (the GKE provider takes IPv4 only), e.g. 203.0.113.0/24"
            ],
        ),
        (
            "dev-a100-gke",
            [],
            [
                "gpu_cluster.master_authorized_cidrs: [] names no network (the cluster would "
                "stay open to any address); valid: at least one CIDR block, or remove the key"
            ],
        ),
        (
            "dev-a100-gke",
            "10.0.0.0/8",
            ["gpu_cluster.master_authorized_cidrs: '10.0.0.0/8' is not a list; valid: a list"],
        ),
        (
            "prod-a100-gce",
            ["10.0.0.0/8"],
            [
                "gpu_cluster.master_authorized_cidrs: applies to backend 'gke' only (the GKE "
                "control plane); backend 'gce' has none; valid: remove the key"
            ],
        ),
    ],
)
def test_bad_values_are_named(stack: str, cidrs: Any, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(_config(stack, cidrs))
    assert str(caught.value).splitlines() == problems

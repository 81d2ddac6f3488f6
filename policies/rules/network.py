"""`no-public-ips`: no external IPs on training machines."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ._inputs import _get, _hidden, _list, _queued_nodes, _show
from .model import GKE_CLUSTER, GKE_NODE_POOL, TPU_VM, VM_TYPES, Context, Resource


def _external_ip_flags(path: str, node: Mapping[str, Any]) -> Iterator[str]:
    configs = [(f"{path}networkConfig", node.get("networkConfig"))]
    configs += [
        (f"{path}networkConfigs[{i}]", c) for i, c in enumerate(_list(node.get("networkConfigs")))
    ]
    for where, config in configs:
        if _get(config, "enableExternalIps") is True:
            yield (
                f"{where}.enableExternalIps is true: every TPU worker gets an external IP; "
                "set it to false (the subnet's Private Google Access and Cloud NAT reach "
                "Google APIs and the internet)"
            )


def check_public_ips(resource: Resource, _: Context) -> Iterator[str]:
    """No external IPs on training machines."""
    inputs = resource.inputs
    if resource.type in VM_TYPES:
        for i, nic in enumerate(_list(inputs.get("networkInterfaces"))):
            if _list(_get(nic, "accessConfigs")):
                yield (
                    f"networkInterfaces[{i}].accessConfigs gives the machine an external IPv4 "
                    "address; remove it and reach the internet through Cloud NAT"
                )
            if _list(_get(nic, "ipv6AccessConfigs")):
                yield (
                    f"networkInterfaces[{i}].ipv6AccessConfigs gives the machine an external "
                    "IPv6 address; remove it"
                )
    elif resource.type == TPU_VM:
        yield from _external_ip_flags("", inputs)
    elif resource.type == GKE_CLUSTER:
        private = _get(inputs, "privateClusterConfig", "enablePrivateNodes")
        if private is not True and not _hidden(private):
            yield (
                f"privateClusterConfig.enablePrivateNodes is {_show(private)}: GKE gives every "
                "node an external IP; set it to true"
            )
        for i, pool in enumerate(_list(inputs.get("nodePools"))):
            if _get(pool, "networkConfig", "enablePrivateNodes") is False:
                yield (
                    f"nodePools[{i}].networkConfig.enablePrivateNodes is false: the pool's "
                    "nodes get external IPs; remove the override or set it to true"
                )
    elif (
        resource.type == GKE_NODE_POOL
        and _get(inputs, "networkConfig", "enablePrivateNodes") is False
    ):
        yield (
            "networkConfig.enablePrivateNodes is false: the pool's nodes get external "
            "IPs; remove the override or set it to true"
        )
    for path, node in _queued_nodes(resource):
        yield from _external_ip_flags(f"{path}.", node)

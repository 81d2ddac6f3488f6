"""What each resource that runs the trainer runs, and what a GKE node pool provisions, for
the text plan (`trainstack.infra.plan.render_plan`).

A dynamic resource's first inputs say little: `__provider` is the pickled provider (a secret
in every plan) and the work itself sits in a nested request body. The text plan shows
instead, under the resource, what it starts, read from those same inputs by the target
that registers it (`RunResource.describe` in its target module): the local `TrainingRun`'s
workers and trainer, a Vertex job's worker pools (and trials), the TPU `QueuedResource`'s
accelerator, runtime, node count and tier, a TPU JobSet's slices, pods and failure policy.

A node pool's first inputs are its node count and where it is; what a reviewer checks (the
machine, its accelerators, spot / flex-start / reservation, placement) sits in
`nodeConfig` and `placementPolicy`. Node pools are pulumi-gcp's, registered by more than one
target (gke, tpu_gke), so `node_pool_lines` reads them here, the same for every target.

The JSON plan (`--json`) keeps every input as registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from trainstack.infra.plan_inputs import number
from trainstack.infra.targets import run_resource

PROVIDER_INPUT = "__provider"
"""The input a dynamic resource carries its serialized provider in (pulumi/dynamic)."""

NODE_POOL: Final = "gcp:container/nodePool:NodePool"


def _mapping(value: Any) -> Mapping[str, Any]:
    # An input a preview knows only after deploy is a string, not an object.
    return value if isinstance(value, Mapping) else {}


def _capacity(config: Mapping[str, Any], queued: bool) -> str:
    """How the pool's nodes are obtained: spot, flex-start (queued), a reservation, or
    on-demand."""
    parts = []
    if config.get("spot") is True:
        parts.append("spot")
    if config.get("flexStart") is True:
        parts.append("flex-start")
    if queued:
        parts.append("queued provisioning")
    if "maxRunDuration" in config:
        parts.append(f"max run {config['maxRunDuration']}")
    affinity = _mapping(config.get("reservationAffinity"))
    kind = affinity.get("consumeReservationType")
    if kind is not None:
        values = affinity.get("values")
        named = f" {', '.join(map(str, values))}" if isinstance(values, list) and values else ""
        parts.append(f"reservation {kind}{named}")
    return ", ".join(parts or ["on-demand"])


def node_pool_lines(inputs: Mapping[str, Any]) -> list[str]:
    """The text plan's line for a planned GKE node pool: its nodes (a fixed count or the
    autoscaler's bounds), machine type and accelerators, how they are obtained and their
    placement."""
    config = _mapping(inputs.get("nodeConfig"))
    autoscaling = _mapping(inputs.get("autoscaling"))
    if autoscaling:
        low = autoscaling.get("totalMinNodeCount", autoscaling.get("minNodeCount"))
        high = autoscaling.get("totalMaxNodeCount", autoscaling.get("maxNodeCount"))
        nodes = f"{number(low)}..{number(high)} (autoscaled)"
    else:
        nodes = number(inputs.get("nodeCount"))
    # A node config the preview knows only after deploy is said so, not as a missing type.
    machine_type = config.get("machineType") if config else inputs.get("nodeConfig")
    machine = f"{nodes} x {machine_type}"
    accelerators = [_mapping(a) for a in config.get("guestAccelerators") or []]
    machine += "".join(f" with {number(a.get('count'))} x {a.get('type')}" for a in accelerators)
    queued = _mapping(inputs.get("queuedProvisioning")).get("enabled") is True
    line = f"{machine}, {_capacity(config, queued)}"
    placement = _mapping(inputs.get("placementPolicy"))
    if placement:
        line += f", placement {placement.get('type')}"
        if placement.get("tpuTopology"):
            line += f" (TPU topology {placement['tpuTopology']})"
    return [line]


def runs_lines(resource_type: str, inputs: Mapping[str, Any]) -> list[str]:
    """Lines saying what a resource runs (its target's `RunResource.describe`) or, for a
    node pool, what it provisions (`node_pool_lines`); [] for any other resource."""
    if resource_type == NODE_POOL:
        return node_pool_lines(inputs)
    resource = run_resource(resource_type)
    if resource is None or resource.describe is None:
        return []
    return resource.describe(inputs)

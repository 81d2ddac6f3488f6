"""The shape of a `TpuGkeSlices` slice's node pool and of its cluster's networking (pure
pulumi-gcp arguments), as XPK's `core/nodepool.py` creates them."""

from __future__ import annotations

from typing import Any

from pulumi_gcp import container

from trainstack.components.a100_cluster._common import RESERVATION_KEY
from trainstack.components.catalog.tpu import TpuSlice
from trainstack.components.catalog.tpu_gke import (
    ACCELERATOR_NETWORK_PROFILE,
    ACCELERATOR_NETWORK_PROFILE_GENERATIONS,
    NETWORKING_DRA_LABEL,
    gke_machine_type,
    gke_vms,
)


def cluster_args(found: TpuSlice) -> dict[str, Any]:
    """The cluster's networking its TPU pools need (`container.Cluster` keyword arguments):
    GKE Dataplane V2 and multi-networking where the pools use the accelerator network
    profile (ACCELERATOR_NETWORK_PROFILE_GENERATIONS)."""
    if found.generation not in ACCELERATOR_NETWORK_PROFILE_GENERATIONS:
        return {}
    return {"datapath_provider": "ADVANCED_DATAPATH", "enable_multi_networking": True}


def node_pool_args(found: TpuSlice, provisioning: str, reservation: str | None) -> dict[str, Any]:
    """The fields of one slice's pool that depend on its shape and capacity (pulumi-gcp
    `container.NodePool` keyword arguments and `node_config` fields)."""
    vms = gke_vms(found)
    pool: dict[str, Any] = {}
    config: dict[str, Any] = {"machine_type": gke_machine_type(found)}
    if found.generation in ACCELERATOR_NETWORK_PROFILE_GENERATIONS:
        pool["network_config"] = container.NodePoolNetworkConfigArgs(
            accelerator_network_profile=ACCELERATOR_NETWORK_PROFILE
        )
        config["labels"] = {NETWORKING_DRA_LABEL: "true"}
    if vms > 1:
        # xpk core/nodepool.py: COMPACT placement with the topology on multi-host pools only.
        pool["placement_policy"] = container.NodePoolPlacementPolicyArgs(
            type="COMPACT", tpu_topology=found.topology
        )
    if provisioning == "flex-start":
        # GKE flex-start (FLEX_START_SOURCE): no nodes until the slice's pods ask; the
        # autoscaler then obtains the whole slice and holds it at most max_run_duration.
        config["flex_start"] = True
        config["reservation_affinity"] = container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="NO_RESERVATION"
        )
        pool["initial_node_count"] = 0
        pool["autoscaling"] = container.NodePoolAutoscalingArgs(
            total_min_node_count=0, total_max_node_count=vms, location_policy="ANY"
        )
        pool["management"] = container.NodePoolManagementArgs(auto_repair=False, auto_upgrade=True)
    else:
        pool["node_count"] = vms
        pool["management"] = container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True)
    if provisioning == "spot":
        config["spot"] = True
    if provisioning == "reserved":
        config["reservation_affinity"] = (
            container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION",
                key=RESERVATION_KEY,
                values=[reservation],
            )
            if reservation
            else container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="ANY_RESERVATION"
            )
        )
    return {"pool": pool, "config": config}

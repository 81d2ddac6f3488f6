"""What stops accelerator billing on each target, as the run supervisor
(`trainstack.components.run_supervisor`, `components/supervisor/main.py`) relies on it, and
what keeps billing after its stop (GKE's cluster and system node, a consumed reservation),
each with its source. `*_VERIFIED` is True only where the cited source states the fact itself.
"""

from __future__ import annotations

from typing import Final

TPU_BILLS_WHILE_READY: Final = True
TPU_BILLS_WHILE_READY_VERIFIED: Final = False
TPU_BILLS_WHILE_READY_SOURCE: Final = (
    "https://cloud.google.com/tpu/pricing ('Charges for Cloud TPU accrue while your TPU node "
    "is in a READY state.'): quoted from an earlier reading; an outside audit on 2026-11-26 "
    "found the sentence in none of the stored copies of the page, so it is not re-checked"
)
"""A deleted slice (node or queued resource) bills nothing more for its TPUs."""

MIG_RESIZE_DELETES_INSTANCES: Final = True
MIG_RESIZE_DELETES_INSTANCES_VERIFIED: Final = True
MIG_RESIZE_DELETES_INSTANCES_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/resize "
    "('If you decrease the size, the group deletes instances. The resize operation is marked "
    "DONE when the resize actions are scheduled even if the group has not yet added or "
    "deleted any instances.'); the tpu.v2/compute.v1 discovery documents in "
    "google-api-python-client: resize takes `size` as a query parameter and no body"
)
"""Resizing the group to 0 deletes its VMs (and their GPUs). That a group with per-instance
configs deletes those VMs on a resize down is inferred from the method's description, not
quoted for stateful groups."""

MIG_RESIZE_DROPS_PER_INSTANCE_CONFIGS: Final = True
MIG_RESIZE_DROPS_PER_INSTANCE_CONFIGS_VERIFIED: Final = False
MIG_RESIZE_DROPS_PER_INSTANCE_CONFIGS_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/instance-groups/preserved-state ('How group "
    "resizing handles preserved state'), as issue 29 reads it: a resize to 0 drops the "
    "per-instance state; that section is not in the stored copies read here. A VM deleted "
    "by deleteInstances loses its config too: the provider deletes a config with "
    "remove_instance_on_destroy by deleteInstances alone and its acceptance test then finds "
    "it gone (TestAccComputePerInstanceConfig_removeInstanceOnDestroy, "
    "hashicorp/terraform-provider-google google/services/compute/"
    "resource_compute_per_instance_config_test.go)"
)
"""The supervisor's stop takes the per-instance configs with the VMs, so the stack's state
still lists configs Google no longer has: `pulumi up --refresh` finds them gone and creates
them again, `node_count` VMs with their names and ranks (a plain `pulumi up` reads nothing
and changes nothing). tests/fidelity/test_gce_group_count.py."""

GKE_POOL_RESIZE_REMOVES_VMS: Final = True
GKE_POOL_RESIZE_REMOVES_VMS_VERIFIED: Final = True
GKE_POOL_RESIZE_REMOVES_VMS_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/resizing-a-container-cluster "
    "('When you add or remove nodes in your cluster, GKE adds or removes the associated "
    "virtual machine (VM) instances from the underlying Compute Engine Managed Instance "
    "Groups (MIGs) provisioned for your node pools.'); nodePools.setSize with "
    "SetNodePoolSizeRequest {nodeCount} (container.v1 discovery document)"
)
"""Setting the GPU pool to 0 nodes removes its VMs; GKE's cluster fee and the system pool's
node keep billing until `pulumi destroy`."""

SUPERVISOR_PERMISSIONS_VERIFIED: Final = False
SUPERVISOR_PERMISSIONS_SOURCE: Final = (
    "compute.instanceGroupManagers.get/.update and container.clusters.get/.update follow "
    "the API permission references (https://cloud.google.com/compute/docs/reference/rest/v1/"
    "instanceGroupManagers/resize, https://cloud.google.com/kubernetes-engine/docs/reference/"
    "api-permissions); not read in full here and not checked on a live project"
)

# What keeps billing after the supervisor's stop (`Target.still_billing_after_stop`).

GKE_CLUSTER_BILLS_UNTIL_DELETED: Final = True
GKE_CLUSTER_BILLS_UNTIL_DELETED_VERIFIED: Final = True
GKE_CLUSTER_BILLS_UNTIL_DELETED_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/pricing ('A flat cluster management fee of "
    "$0.10 per cluster per hour (charged in 1 second increments) applies to all GKE clusters "
    "irrespective of the mode of operation, cluster size, or topology.'; 'In Standard mode, "
    "GKE uses Compute Engine instances worker nodes in the cluster. You are billed for each "
    "of those instances according to Compute Engine's pricing, until the nodes are deleted.')"
)
"""A GKE cluster whose GPU pool is at 0 nodes still bills its management fee and its system
pool's node; only deleting the cluster (`pulumi destroy`) ends both."""

GKE_FREE_TIER_USD_PER_MONTH: Final = 74.40
GKE_FREE_TIER_VERIFIED: Final = True
GKE_FREE_TIER_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/pricing ('The GKE free tier provides $74.40 "
    "in monthly credits per billing account, which is equivalent to one free Autopilot or "
    "zonal Standard cluster per month. Free tier credits are only applied to zonal and "
    "Autopilot clusters ...')"
)
"""The credit is the billing account's, shared by all its clusters, so trainstack's
estimates do not subtract it (a stack's cluster is zonal: `gpu_cluster.zone`)."""

RESERVATION_BILLS_UNTIL_DELETED: Final = True
RESERVATION_BILLS_UNTIL_DELETED_VERIFIED: Final = True
RESERVATION_BILLS_UNTIL_DELETED_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/instances/reservations-overview ('you begin paying "
    "for the reserved resources immediately, and, when you no longer need a reservation, you "
    "can delete the reservation to stop incurring charges for it. While a VM is consuming a "
    "reservation, it does not incur separate charges.'; 'reserved resources are charged at "
    "the same on-demand rates as running VMs, including any applicable discounts.'); "
    "https://cloud.google.com/compute/docs/instances/reservations-delete ('Delete a "
    "reservation to stop incurring charges for reserved resources that you no longer need.')"
)
"""A Compute Engine reservation bills at on-demand rates whether or not a VM consumes it: the
GPU nodes' share of it stops billing separately while they run, and bills as the reservation
once the supervisor removes them. trainstack only consumes a reservation
(`gpu_cluster.reservation`); it never creates or deletes one."""

TPU_RESERVATION_BILLS_UNTIL_ENDED: Final = True
TPU_RESERVATION_BILLS_UNTIL_ENDED_VERIFIED: Final = False
TPU_RESERVATION_BILLS_UNTIL_ENDED_SOURCE: Final = (
    "inferred from the Compute Engine rule (RESERVATION_BILLS_UNTIL_DELETED_SOURCE): TPU "
    "reservations are Compute Engine reservations, a future reservation in calendar mode "
    "(1 to 90 days) or one of a year or longer with a committed use discount "
    "(https://cloud.google.com/tpu/docs/about-tpu-reservations); 'Compute Engine "
    "automatically deletes the reservation, and any TPUs that consume it, at the end of your "
    "reservation period' (https://cloud.google.com/tpu/docs/calendar-mode-reservation); no "
    "page read here says in so many words that an unconsumed TPU reservation bills"
)
"""A TPU reservation (`tpu.provisioning: reserved`, or a queued resource naming
`tpu.reservation`) goes on billing after the supervisor deletes the slice, until its period
ends or it is deleted. Its price is below on-demand (about-tpu-reservations: up to 30% lower
in calendar mode, 30% to 55% lower with a commitment), so the slice's on-demand list price is
an upper bound."""

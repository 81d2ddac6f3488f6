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

MIG_DELETE_INSTANCES_DELETES_VMS: Final = True
MIG_DELETE_INSTANCES_DELETES_VMS_VERIFIED: Final = True
MIG_DELETE_INSTANCES_DELETES_VMS_SOURCE: Final = (
    "compute.v1 discovery document in google-api-python-client, instanceGroupManagers."
    "deleteInstances: 'Flags the specified instances in the managed instance group for "
    "immediate deletion. ... This method reduces the targetSize of the managed instance group "
    "by the number of instances that you delete. This operation is marked as DONE when the "
    "action is scheduled even if the instances are still being deleted.'; "
    "InstanceGroupManagersDeleteInstancesRequest.skipInstancesOnValidationError: 'proceed "
    "despite the inclusion of instances that are not members of the group or that are "
    "already in the process of being deleted or abandoned'"
)
"""Deleting the group's VMs by name deletes them (and their GPUs) and lowers its target size
by as many, so the group does not create them again."""

MIG_DELETE_INSTANCES_DROPS_PER_INSTANCE_CONFIGS: Final = True
MIG_DELETE_INSTANCES_DROPS_PER_INSTANCE_CONFIGS_VERIFIED: Final = True
MIG_DELETE_INSTANCES_DROPS_PER_INSTANCE_CONFIGS_SOURCE: Final = (
    "hashicorp/terraform-provider-google google/services/compute/"
    "resource_compute_per_instance_config.go resourceComputePerInstanceConfigDelete: a config "
    "with remove_instance_on_destroy is deleted by one deleteInstances call naming "
    "'zones/{{zone}}/instances/{{name}}' and nothing else (then it polls listManagedInstances "
    "until the VM is gone, stateful_mig_polling.go PollCheckInstanceConfigInstanceDeleted); "
    "its acceptance test TestAccComputePerInstanceConfig_removeInstanceOnDestroy "
    "(resource_compute_per_instance_config_test.go) then checks that listPerInstanceConfigs "
    "no longer lists the config (testAccCheckComputePerInstanceConfigDestroyed)"
)
"""The supervisor's stop deletes the VMs by name as the provider does, so their per-instance
configs go with them and the stack's state still lists configs Google no longer has: `pulumi
up`, which refreshes first (Pulumi.yaml's `options.refresh: always`), finds them gone and
creates them again, `node_count` VMs with their names and ranks, and `pulumi destroy` deletes
the empty group; without a refresh `up` changes nothing and `destroy` is refused at the
configs (tests/fidelity/test_gce_group_count.py, test_gce_destroy.py). What a resize of the
group does to per-instance configs is in no source read here, so the supervisor never
resizes a group."""

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
    "instanceGroupManagers/deleteInstances, https://cloud.google.com/kubernetes-engine/docs/"
    "reference/api-permissions); not read in full here and not checked on a live project"
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

"""What stops accelerator billing on each target, as the run supervisor
(`trainstack.components.run_supervisor`, `components/supervisor/main.py`) relies on it, each
with its source. `*_VERIFIED` is True only where the cited source states the fact itself.
"""

from __future__ import annotations

from typing import Final

TPU_BILLS_WHILE_READY: Final = True
TPU_BILLS_WHILE_READY_VERIFIED: Final = True
TPU_BILLS_WHILE_READY_SOURCE: Final = (
    "https://cloud.google.com/tpu/pricing ('Charges for Cloud TPU accrue while your TPU node "
    "is in a READY state.')"
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
"""Resizing the group to 0 deletes its VMs (and their GPUs); the per-instance configs stay,
so a resize back (`pulumi up`) recreates the same names and ranks. That a group with
per-instance configs deletes those VMs on a resize down is inferred from the method's
description, not quoted for stateful groups."""
MIG_RESIZE_KEEPS_PER_INSTANCE_CONFIGS_VERIFIED: Final = False

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

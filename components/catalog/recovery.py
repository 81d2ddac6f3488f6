"""How a multi-node GPU run comes back after a node stops: the Compute Engine and torchrun
mechanisms the gce backend of `A100Cluster` relies on, each with its source.

`*_VERIFIED` is True only where the cited source states the fact itself.
"""

from __future__ import annotations

from typing import Final

MIG_REPAIRS_STOPPED_VM: Final = True
MIG_REPAIRS_STOPPED_VM_VERIFIED: Final = True
MIG_REPAIRS_STOPPED_VM_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/instance-groups/preserved-state (How autohealing "
    "handles preserved state: 'When a virtual machine (VM) instance stops running or becomes "
    "unhealthy, autohealing recreates the VM and keeps the preserved state ... The MIG "
    "preserves stateful metadata, configured in per-instance configurations, and sets it on "
    "VM recreation.'); instanceLifecyclePolicy.defaultActionOnFailure REPAIR (default) / "
    "DO_NOTHING: https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers"
)
"""A zonal MIG recreates a VM that stops running (a spot VM stopped on preemption with
termination action STOP included) and sets the per-instance config's metadata again."""

MIG_PER_INSTANCE_NAME: Final = True
MIG_PER_INSTANCE_NAME_VERIFIED: Final = True
MIG_PER_INSTANCE_NAME_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/samples/"
    "compute-stateful-instance-group-manager-metadata-pic ('In a managed instance group "
    "(MIG), create a managed instance with a custom name and set stateful metadata on that "
    "VM': google_compute_per_instance_config with name and preserved_state.metadata)"
)
"""A per-instance config names its VM and carries its stateful metadata (the node rank)."""

MIG_PER_INSTANCE_CONFIG_ADDS_ITS_VM: Final = True
MIG_PER_INSTANCE_CONFIG_ADDS_ITS_VM_VERIFIED: Final = False
MIG_PER_INSTANCE_CONFIG_ADDS_ITS_VM_SOURCE: Final = (
    "hashicorp/terraform-provider-google google/services/compute/"
    "resource_compute_per_instance_config.go resourceComputePerInstanceConfigCreate (POST "
    ".../instanceGroupManagers/{igm}/createInstances: 'Creates instances with per-instance "
    "configurations in this managed instance group', compute.v1 discovery); the group holds "
    "them on top of its own target size: hashicorp/terraform-provider-google#15911 ('Stateful "
    "MIG with 2 instance is created setting target_size=1'), #20662, infracost/infracost#1644 "
    "('it will increase the `target_size` of the group manager'); reported by the provider's "
    "users, not stated in Google's reference"
)
"""So the gce group is created with no target size of its own (the provider sends 0) and
its `node_count` configs make exactly `node_count` VMs."""

MIG_PLACEMENT_AND_RESERVATION_IN_TEMPLATE_VERIFIED: Final = False
MIG_PLACEMENT_AND_RESERVATION_IN_TEMPLATE_SOURCE: Final = (
    "instance template fields resourcePolicies and reservationAffinity (pulumi_gcp "
    "compute.InstanceTemplate); that a MIG honours a compact placement policy set in its "
    "template is inferred, not quoted from a Google page"
)

COMPACT_PLACEMENT_WITHOUT_VM_COUNT_VERIFIED: Final = True
COMPACT_PLACEMENT_WITHOUT_VM_COUNT_SOURCE: Final = (
    "compute.v1 discovery ResourcePolicyGroupPlacementPolicy.vmCount: 'Number of VMs in this "
    "placement group. Google does not recommend that you use this field unless you use a "
    "compact policy and you want your policy to work only if it contains this exact number of "
    "VMs.'; hashicorp/terraform-provider-google google/services/compute/"
    "resource_compute_resource_policy.go (group_placement_policy.collocation): 'If compute "
    "instances are created with a COLLOCATED policy, then exactly vm_count instances must be "
    "created at the same time with the resource policy attached' (its text also says "
    "'Can only be specified with vm_count', which the schema does not enforce and its own "
    "acceptance test TestAccComputeResourcePolicy_resourcePolicyPlacementPolicyGpuTopologyExample "
    "does not follow: COLLOCATED without vm_count); GoogleCloudPlatform/cluster-toolkit "
    "modules/compute/vm-instance/README.md: 'When vm_count is not set ... the VMs will be "
    "added to the placement policy incrementally. This is the recommended way to use "
    "placement policies. If vm_count is specified then VMs will stay in pending state until "
    "the specified number of VMs are created'; gcloud compute resource-policies create "
    "group-placement (https://cloud.google.com/sdk/gcloud/reference/compute/resource-policies/"
    "create/group-placement): --collocation and --vm-count are separate optional flags"
)
"""So the gce group's compact placement policy sets `collocation` only: the group creates its
VMs one `createInstances` call each, REPAIR recreates one VM at a time, and a changed
`node_count` would PATCH the count of a policy its running VMs use."""

MIG_RECREATES_MAX_RUN_DURATION_VM: Final = True
MIG_RECREATES_MAX_RUN_DURATION_VM_VERIFIED: Final = False
MIG_RECREATES_MAX_RUN_DURATION_VM_SOURCE: Final = (
    "inferred: scheduling.maxRunDuration stops or deletes the VM "
    "(https://cloud.google.com/compute/docs/instances/limit-vm-runtime), and a MIG repairs "
    "a VM that stops running (MIG_REPAIRS_STOPPED_VM_SOURCE), with a fresh run duration"
)
"""Why the gce backend does not end a run with maxRunDuration in its template: the node
launcher enforces max_run_seconds instead (`GCE_RUN_LIMIT_SOURCE`)."""

GCE_RUN_LIMIT_VERIFIED: Final = True
GCE_RUN_LIMIT_SOURCE: Final = (
    "trainstack's own mechanism, tested in tests/components/test_gpu_startup.py: "
    "components/gpu_startup/launch.sh records the run's first start once in the checkpoint "
    "bucket (a Cloud Storage upload with ifGenerationMatch=0, created only if absent: "
    "https://cloud.google.com/storage/docs/request-preconditions) and stops the trainer "
    "with SIGTERM and exit 0 once max_run_seconds have passed; systemd does not restart a "
    "unit that exits 0 with Restart=on-failure "
    "(https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html)"
)
"""The gce run limit: per run, not per VM, so a recreated VM does not restart the clock."""

TORCHRUN_ELASTIC_VERIFIED: Final = True
TORCHRUN_ELASTIC_SOURCE: Final = (
    "https://docs.pytorch.org/docs/stable/elastic/quickstart.html (fault-tolerant launch: "
    "--nnodes, --max-restarts, --rdzv-id, --rdzv-backend=c10d, --rdzv-endpoint; failures "
    "are membership changes and restart all workers); c10d is_host rendezvous option: "
    "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py _create_tcp_store "
    "(torch 2.13)"
)
"""Elastic rendezvous: a node that restarts rejoins, and every worker restarts (from the
newest checkpoint). Node 0 hosts the store (`is_host`), so its name must be stable."""

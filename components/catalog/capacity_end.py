"""What happens at the end of a flex-start machine's run duration on each target, each with
its source, and what Google's pages read here do not say. trainstack acts on it in
`trainstack.trainers.common.deadline` (the run saves before the end and ends
`capacity_ended`), the launch scripts (`components/gpu_startup/launch.sh`,
`components/kubernetes_pod.sh`: the deadline) and the run supervisor (the compute stopped at
once, resumed by `pulumi up`). `*_VERIFIED` is True only where the cited source states the
fact itself. Read with the search tool on 2026-11-29.
"""

from __future__ import annotations

from typing import Final

# ------------------------------------------------------------------------- Compute Engine

GCE_VM_ENDS_AT_RUN_DURATION_VERIFIED: Final = True
GCE_VM_ENDS_AT_RUN_DURATION_SOURCE: Final = (
    "https://docs.cloud.google.com/compute/docs/instances/about-flex-start-vms ('A limited "
    "run duration: Flex-start VMs run uninterrupted for up to seven days. After that time, "
    "Compute Engine automatically stops or deletes the VMs based on the termination action "
    "that is specified in the VM properties.'); compute.v1 discovery Scheduling."
    "maxRunDuration ('If specified, the instance termination action will be performed at "
    "the end of the run duration'), instanceTerminationAction DELETE ('Delete the VM.'), "
    "which the gce backend sets (`a100_cluster.gce._scheduling`)"
)
"""At the end of its maxRunDuration a flex-start VM of the gce backend is deleted."""

GCE_RUN_DURATION_STARTS_AT_RUNNING_VERIFIED: Final = True
GCE_RUN_DURATION_STARTS_AT_RUNNING_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/instances/limit-vm-runtime ('A VM's termination "
    "timestamp (terminationTimestamp) is a read-only field that represents the planned time "
    "for automatic termination and is automatically defined by Compute Engine whenever a VM "
    "has a time limit and enters the RUNNING state.'; restrictions, zh-cn copy: "
    "'自动终止所需的时间最多可能比您指定的开始停止或删除虚拟机的时长或时间多 30 秒', the "
    "termination may start up to 30 s after the time)"
)
"""The duration counts from RUNNING, before the guest boots: the VM's boot time plus the
duration (what the launcher uses) is late by the boot, never early; the margin covers it."""

GCE_NO_NOTICE_FOUND: Final = (
    "no page read here says that a VM reaching its time limit gets a notice: the metadata "
    "server's maintenance-event key is for host maintenance ('The metadata server receives "
    "maintenance event notices before a compute instance is live migrated or terminated', "
    "https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice), "
    "instance/preempted for Spot and preemptible VMs, and no metadata key holds the time "
    "limit; the API's Instance.resourceStatus.scheduling.terminationTimestamp ('Time in "
    "future when the instance will be terminated', compute.v1 discovery "
    "ResourceStatusScheduling) needs compute.instances.get, which the training account does "
    "not hold, so the launcher does not read it"
)
"""Why the deadline is computed on the VM rather than read: nothing tells it in time."""

GCE_MIG_DELETES_AT_TIME_LIMIT_VERIFIED: Final = True
GCE_MIG_DELETES_AT_TIME_LIMIT_SOURCE: Final = (
    "https://cloud.google.com/compute/docs/instance-groups/limit-vm-runtime-in-migs ('When a "
    "VM reaches its time limit, the MIG automatically terminates (deletes) that VM.'); "
    "whether the group then creates it again is not in the stored copies "
    "(`catalog.recovery.MIG_RECREATES_MAX_RUN_DURATION_VM`, inferred): the supervisor stops "
    "the group on the run's capacity_ended record, which comes the margin before"
)

# ----------------------------------------------------------------------------------- GKE

GKE_NODE_ENDS_AT_RUN_DURATION_VERIFIED: Final = True
GKE_NODE_ENDS_AT_RUN_DURATION_SOURCE: Final = (
    "container.v1 discovery NodeConfig.maxRunDuration ('The maximum duration for the nodes "
    "to exist. If unspecified, the nodes can exist indefinitely.'); "
    "https://cloud.google.com/kubernetes-engine/docs/concepts/dws (zh-cn copy: "
    "'这些节点最多运行 7 天', these nodes run for at most 7 days; the English copy of "
    "concepts/provisioning-model: 'If you don't specify a value for the "
    "maxRunDurationSeconds parameter, the default is seven days')"
)
"""A flex-start pool's node exists at most its max_run_duration (7 days without one)."""

GKE_HOW_THE_NODE_GOES_FOUND: Final = False
GKE_HOW_THE_NODE_GOES: Final = (
    "how GKE removes a flex-start node at its run duration (a drain with a grace period, a "
    "SIGTERM to the pods, a DisruptionTarget condition, or the VM deleted outright) is not "
    "in the pages read here; GKE's scale-down evictions give a grace 'up to 10 minutes' "
    "(https://cloud.google.com/kubernetes-engine/docs/how-to/extended-duration-pods), which "
    "is not stated for this end. So the run saves before it on its own clock: the node's "
    "boot time plus the duration, late by the time from the node's creation to its boot"
)

# -------------------------------------------------------------------------------- Vertex AI

VERTEX_JOB_ENDS_AT_TIMEOUT_VERIFIED: Final = True
VERTEX_JOB_ENDS_AT_TIMEOUT_SOURCE: Final = (
    "aiplatform.v1 discovery Scheduling.timeout ('The maximum job running time. The default "
    "is 7 days.'), maxWaitDuration ('the maximum duration that a job will wait for the "
    "requested resources to be provisioned if the scheduling strategy is set to "
    "[Strategy.DWS_FLEX_START]. If set to 0, the job will wait indefinitely. The default is "
    "24 hours.'); https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws ('Your "
    "serverless training job has a maximum timeout of 7 days or less.')"
)
VERTEX_REPLICAS_AT_TIMEOUT: Final = (
    "what a replica's processes get when the job reaches its timeout (a SIGTERM and a grace, "
    "or nothing) is not in the pages read here, nor when the timeout's clock starts; so no "
    "deadline is given on Vertex: the job ends at scheduling.timeout with the checkpoints "
    "trainer.checkpoint_every left"
)

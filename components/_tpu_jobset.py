"""The JobSet a `TpuGkeSlices` runs (pure): one replicated Job `slice` of `replicas =
slices`, each child Job one slice (`parallelism = completions = VMs per slice`), pinned to
one node pool by JobSet's exclusive placement.

Recovery. Each child Job has `backoffLimit: 0`: one failed pod fails its slice's Job, as
in XPK's golden JobSet (AI-Hypercomputer/xpk recipes/Workload_create.md) and JobSet's
host-maintenance example (kubernetes-sigs/jobset site/static/examples/failure-policy/
host-maintenance-event-model.yaml), since a TPU slice's hosts run one program and a
replaced host cannot rejoin it. Its podFailurePolicy fails the Job with reason
`PodFailurePolicy` on the GPU Job's code and config exit codes (`FAIL_FAST_EXIT_CODES`:
1 a worker raised, 2 a config error, 5 fewer accelerators than planned), and the JobSet's
first rule turns that reason into `FailJobSet` (XPK's rule). Every other failure, a
preemption or host maintenance (the pod's DisruptionTarget condition), a lost peer (4) or
SIGTERM after a checkpoint (143), fails the Job with `BackoffLimitExceeded`, for which the
second rule restarts the whole set (`RestartJobSet`: every slice, as multislice needs)
up to `max_restarts` times; each restart resumes from the newest checkpoint
(api/jobset/v1alpha2/jobset_types.go: "If no matching rule is found, the RestartJobSet
action is applied"; FailurePolicyRule.OnJobFailureReasons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from trainstack.components.catalog.tpu_gke import (
    DEFAULT_MAX_RESTARTS,
    EXCLUSIVE_TOPOLOGY,
    JOBSET_API,
    NODEPOOL_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOLERATION,
    TPU_TOPOLOGY_LABEL,
)
from trainstack.components.gpu_startup import FAIL_FAST_EXIT_CODES

REPLICATED_JOB: Final = "slice"
CONTAINER_NAME: Final = "trainer"
TPU_PORTS: Final = (8471, 8080, 8431)
"""The TPU runtime's ports in Google's GKE TPU examples (cluster-toolkit
examples/gke-tpu-v6e/tpu-multislice.yaml; jobset site/static/examples/tpu-multislice)."""

JOBSET_LABELS: Final = "jobset.sigs.k8s.io/"
MULTISLICE_ENV: Final[dict[str, str]] = {
    "MEGASCALE_NUM_SLICES": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']",
    "MEGASCALE_SLICE_ID": "metadata.labels['jobset.sigs.k8s.io/job-index']",
    "MEGASCALE_COORDINATOR_ADDRESS": "metadata.labels['jobset.sigs.k8s.io/coordinator']",
}
"""Multislice over DCN, from the labels JobSet's controller stamps on every pod
(pkg/controllers/jobset_controller.go labelAndAnnotateObject). No Google or JobSet source
says GKE sets these for pods (kubernetes-sigs/jobset#787 asks JobSet to, and gives this
recipe); XPK's Pathways template sets them the same way (src/xpk/templates/
pathways_workload_create.yaml.j2). JAX reads them (jax-ml/jax jax/_src/clusters/
cloud_tpu_cluster.py get_coordinator_address: "For both GCE via QueuedResources and GKE via
JobSet, the Megascale coordinator address is set as the host with process id = 0"). No
MEGASCALE_PORT: libtpu's default port is left (not verified). Set only with more than one
slice."""


def pod_failure_policy() -> dict[str, Any]:
    """FailJob (reason PodFailurePolicy) on the code and config exit codes; anything else
    counts against backoffLimit 0 (reason BackoffLimitExceeded)."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER_NAME,
                    "operator": "In",
                    "values": list(FAIL_FAST_EXIT_CODES),
                },
            }
        ]
    }


FAIL_RULE: Final = "failOnCodeOrConfigExit"
RESTART_RULE: Final = "restartOnOtherFailure"
"""The rules' names: the CRD requires `name` and JobSet's defaulting webhook would fill
`failurePolicyRule<index>` (kubernetes-sigs/jobset@v0.12.0 pkg/webhooks/jobset_webhook.go
Default, validateFailurePolicy: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, unique)."""


def failure_policy(max_restarts: int) -> dict[str, Any]:
    return {
        "maxRestarts": max_restarts,
        "rules": [
            {
                "name": FAIL_RULE,
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            },
            {
                "name": RESTART_RULE,
                "action": "RestartJobSet",
                "onJobFailureReasons": ["BackoffLimitExceeded"],
            },
        ],
    }


def jobset_manifest(
    *,
    name: str,
    namespace: str,
    slices: int,
    vms: int,
    chips_per_vm: int,
    accelerator: str,
    topology: str,
    image: str,
    command: Sequence[str],
    args: Sequence[str],
    env: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str],
    service_account: str,
    spot: bool = False,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    termination_grace_period_s: int = 60,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JobSet object, camelCase, as applied."""
    selector = {TPU_ACCELERATOR_LABEL: accelerator, TPU_TOPOLOGY_LABEL: topology}
    if spot:
        selector["cloud.google.com/gke-spot"] = "true"
    pod_env = [dict(e) for e in env]
    if slices > 1:
        pod_env += [
            {"name": key, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for key, path in MULTISLICE_ENV.items()
        ]
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": list(command),
        "args": list(args),
        "env": pod_env,
        "ports": [{"containerPort": port} for port in TPU_PORTS],
        "securityContext": {"privileged": True},
        "resources": {"limits": {TPU_RESOURCE: str(chips_per_vm)}},
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": service_account,
        "terminationGracePeriodSeconds": termination_grace_period_s,
        # In every Google example (XPK, Cluster Toolkit, JobSet's TPU page): the TPU runtime
        # and DCN traffic use the host's interfaces.
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": dict(sorted(selector.items())),
        "tolerations": [dict(TPU_TOLERATION)],
        "containers": [container],
    }
    spec: dict[str, Any] = {
        "failurePolicy": failure_policy(max_restarts),
        # Pod 0 of slice 0: its address is the `coordinator` label every pod gets.
        "coordinator": {"replicatedJob": REPLICATED_JOB, "jobIndex": 0, "podIndex": 0},
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "replicatedJobs": [
            {
                "name": REPLICATED_JOB,
                "replicas": slices,
                "template": {
                    "spec": {
                        "completionMode": "Indexed",
                        "parallelism": vms,
                        "completions": vms,
                        "backoffLimit": 0,
                        "podFailurePolicy": pod_failure_policy(),
                        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
                    }
                },
            }
        ],
    }
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": {EXCLUSIVE_TOPOLOGY: NODEPOOL_LABEL, **(annotations or {})},
        },
        "spec": spec,
    }

"""The container command that installs trainstack's code package into an image's own Python
and then execs its args (`kubernetes_pod.sh`): every GKE training pod, and every Vertex
replica that runs your code in your image (`containerSpec`), so your image needs no
trainstack inside and a change to `trainer.source` reaches the job as a new package.

A GKE pod also keeps the run's records for the supervisor (`TRAINSTACK_RUN_RECORD`,
`trainstack.trainers.common.run_records`) with the node helper the script carries
(`components/gpu_startup/node_helper.py`), and learns whether it is its index's last
attempt from `attempt_env`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from trainstack.components.gpu_startup import NODE_HELPER

_HELPER_EOF: Final = "TRAINSTACK_HELPER_EOF"
_TEMPLATE: Final = (Path(__file__).parent / "kubernetes_pod.sh").read_text()
_HELPER: Final = NODE_HELPER.read_text().rstrip("\n")
assert _HELPER_EOF not in _HELPER.splitlines(), "the node helper holds its heredoc terminator"
POD_SCRIPT: Final = _TEMPLATE.replace("@@NODE_HELPER@@", _HELPER)
"""The container command's script (`bash -c POD_SCRIPT trainstack-pod ARGS...`)."""
POD_PYTHON: Final = "python3"
"""The image's interpreter the package goes into: `python3`, which Python images and
Debian/Ubuntu-based ones all have (`python` is not always there)."""
PACKAGE_URI_ENV: Final = "TRAINSTACK_PACKAGE_URI"
"""The gs:// URI of the code package the script installs."""
NCCL_PLUGIN_FILES_ENV: Final = "TRAINSTACK_NCCL_PLUGIN_FILES"
"""Files of the node's NCCL plugin (space-separated) the script waits for before the
launcher: a GPUDirect fabric's installer DaemonSet copies them onto the node
(`trainstack.components._pod_fabric`)."""
NCCL_ENV_SCRIPT_ENV: Final = "TRAINSTACK_NCCL_ENV_SCRIPT"
"""A script of the node's NCCL plugin the script sources before the launcher (gIB's
set_nccl_env.sh)."""
INDEX_FAILURES_ENV: Final = "TRAINSTACK_INDEX_FAILURES"
BACKOFF_LIMIT_ENV: Final = "TRAINSTACK_BACKOFF_LIMIT_PER_INDEX"
INDEX_FAILURE_COUNT_ANNOTATION: Final = "batch.kubernetes.io/job-index-failure-count"
"""What the Job controller writes on every pod of a Job with backoffLimitPerIndex: "the
number of failures per index is kept in the pod's batch.kubernetes.io/job-index-failure-count
annotation" (JobSpec.backoffLimitPerIndex, https://kubernetes.io/docs/reference/kubernetes-api/
workload-resources/job-v1/); kubernetes pkg/controller/job/indexed_job_utils.go
`addIndexFailureCountAnnotation` sets it on each new pod (0 on the first, the replaced pod's
count plus its counted failure on a replacement) and `isIndexFailed` fails the index when a
pod whose count is at least backoffLimitPerIndex fails and is counted."""


def pod_command() -> list[str]:
    """The command of every container that runs a trainstack code package (a Vertex
    replica in a container, a GKE training pod): the pod setup script (`POD_SCRIPT`,
    `components/kubernetes_pod.sh`) under bash, which installs the package at
    `TRAINSTACK_PACKAGE_URI` into the image's `python3`, then execs the container's args."""
    return ["bash", "-c", POD_SCRIPT, "trainstack-pod"]


POD_SETUP_ENV: Final = frozenset(
    {
        PACKAGE_URI_ENV,
        INDEX_FAILURES_ENV,
        BACKOFF_LIMIT_ENV,
        NCCL_PLUGIN_FILES_ENV,
        NCCL_ENV_SCRIPT_ENV,
    }
)
"""The variables the pod script reads that the Job sets (none may come from `env`)."""


def container_env(values: Mapping[str, str], backoff_limit_per_index: int) -> list[dict[str, Any]]:
    """A training pod's container `env`, sorted by name: `values` and `attempt_env`."""
    plain = [{"name": k, "value": v} for k, v in values.items()]
    return sorted([*plain, *attempt_env(backoff_limit_per_index)], key=lambda e: str(e["name"]))


def attempt_env(backoff_limit_per_index: int) -> list[dict[str, Any]]:
    """The container environment that tells the pod script its index's last attempt: the
    Job's backoffLimitPerIndex and the pod's failure-count annotation through the downward
    API (`fieldRef` to one annotation's value, as the Job controller itself reads
    JOB_COMPLETION_INDEX: indexed_job_utils.go `addCompletionIndexEnvVariable`; the kubelet
    resolves it with pkg/fieldpath `ExtractFieldPathAsString`, empty when absent)."""
    return [
        {"name": BACKOFF_LIMIT_ENV, "value": str(backoff_limit_per_index)},
        {
            "name": INDEX_FAILURES_ENV,
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": f"metadata.annotations['{INDEX_FAILURE_COUNT_ANNOTATION}']"
                }
            },
        },
    ]

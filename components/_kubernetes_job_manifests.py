"""The Kubernetes objects of a `KubernetesTrainingJob` (its ServiceAccount, headless Service
and Indexed Job) as plain camelCase dicts, exactly as they are applied: pure, so the
component, the tests and the fidelity runs read the same manifests. See
`trainstack.components.kubernetes_training_job` for what each field is for; a GPUDirect
fabric's additions to the pod come from `trainstack.components._pod_fabric`."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from trainstack.components._pod_fabric import PodFabric
from trainstack.components._pod_setup import PACKAGE_URI_ENV, container_env, pod_command
from trainstack.components.gpu_startup import (
    DEFAULT_PORT,
    FAIL_FAST_EXIT_CODES,
    RESTART_EXIT_CODES,
)
from trainstack.trainers.common.accelerators import EXPECTED_ACCELERATORS_ENV

CONTAINER_NAME: Final = "trainer"
"""The images' interpreter: the pod script installs into it and it runs the launcher."""

GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_TOLERATION: Final[dict[str, str]] = {
    "key": GPU_RESOURCE,
    "operator": "Exists",
    "effect": "NoSchedule",
}
"""Tolerates the taint GKE (or A100Cluster) puts on GPU nodes."""

INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
NAME_LABEL: Final = "app.kubernetes.io/name"
APP_NAME: Final = "trainstack-trainer"
WORKLOAD_IDENTITY_ANNOTATION: Final = "iam.gke.io/gcp-service-account"
SKIP_AWAIT_ANNOTATION: Final = "pulumi.com/skipAwait"
PROPAGATION_ANNOTATION: Final = "pulumi.com/deletionPropagationPolicy"
"""pulumi-kubernetes >= 4.12: `foreground` deletes the pods before the Job is gone."""

DEFAULT_BACKOFF_LIMIT_PER_INDEX: Final = 3
MAX_FAILED_INDEXES: Final = 0
"""One index out of retries fails the Job: the others cannot train without it."""
DEFAULT_SHM_SIZE_GIB: Final = 32
DEFAULT_TERMINATION_GRACE_S: Final = 60
"""Above the trainer's default preemption grace (30 s): time to write the last checkpoint."""
DEFAULT_NAMESPACE: Final = "default"

_K8S_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def kubernetes_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels that are valid Kubernetes label values, sorted by key."""
    return {k: v for k, v in sorted(labels.items()) if _K8S_LABEL_VALUE.fullmatch(v)}


def pod_failure_policy() -> dict[str, Any]:
    """Ignore disruptions, preemptions, lost peers; FailJob on code, config, GPU errors."""
    on_codes = {"containerName": CONTAINER_NAME, "operator": "In"}
    return {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {"action": "Ignore", "onExitCodes": {**on_codes, "values": list(RESTART_EXIT_CODES)}},
            {
                "action": "FailJob",
                "onExitCodes": {**on_codes, "values": list(FAIL_FAST_EXIT_CODES)},
            },
        ]
    }


def manifests(
    *,
    job_name: str,
    node_count: int,
    gpus_per_node: int,
    image: str,
    package_uri: str,
    args: Sequence[str],
    labels: Mapping[str, str],
    namespace: str = DEFAULT_NAMESPACE,
    gcp_service_account_email: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    backoff_limit_per_index: int = DEFAULT_BACKOFF_LIMIT_PER_INDEX,
    active_deadline_seconds: int | None = None,
    tf_keras: bool = False,
    wait_for_completion: bool = False,
    shm_size_gib: int = DEFAULT_SHM_SIZE_GIB,
    termination_grace_period_s: int = DEFAULT_TERMINATION_GRACE_S,
    port: int = DEFAULT_PORT,
    env: Mapping[str, str] | None = None,
    fabric: PodFabric | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The ServiceAccount, headless Service and Indexed Job (`service_account`, `service`,
    `job`) as Kubernetes objects, camelCase, exactly as they are applied. `args` are the
    container's (`node_argv`); `tf_keras` makes the pod install tf-keras for TensorFlow;
    `fabric` adds a GPUDirect fabric's pod pieces (its environment under `env`'s);
    `pod_annotations` go on the pods beside the fabric's."""
    bucket, _, obj = package_uri.removeprefix("gs://").partition("/")
    if not package_uri.startswith("gs://") or not bucket or not obj or obj.endswith("/"):
        raise ValueError(
            f"package_uri: {package_uri!r} is not a gs://bucket/object URI of the trainer sdist"
        )
    k8s_labels = kubernetes_labels(labels)
    selector = {INSTANCE_LABEL: job_name}
    pod_labels = {**k8s_labels, NAME_LABEL: APP_NAME, INSTANCE_LABEL: job_name}

    def metadata(annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": job_name, "namespace": namespace, "labels": k8s_labels}
        if annotations:
            meta["annotations"] = dict(annotations)
        return meta

    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(
            {WORKLOAD_IDENTITY_ANNOTATION: gcp_service_account_email}
            if gcp_service_account_email
            else None
        ),
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            # Pod 0's name must resolve before it is Ready: every node dials it at start.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    pod_env = {
        **(fabric.env if fabric else {}),
        **(env or {}),
        "JOB_NAME": job_name,
        "TRAINSTACK_HEADLESS_SERVICE": job_name,
        "TRAINSTACK_NUM_NODES": str(node_count),
        "TRAINSTACK_COORDINATOR_PORT": str(port),
        EXPECTED_ACCELERATORS_ENV: str(gpus_per_node),
        PACKAGE_URI_ENV: package_uri,
    }
    if tf_keras:
        pod_env["TRAINSTACK_TF_KERAS"] = "1"
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": pod_command(),
        "args": list(args),
        "env": container_env(pod_env, backoff_limit_per_index),
        "ports": [{"name": "rendezvous", "containerPort": port, "protocol": "TCP"}],
        "resources": {"limits": {GPU_RESOURCE: str(gpus_per_node)}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": job_name,
        "serviceAccountName": job_name,
        "terminationGracePeriodSeconds": termination_grace_period_s,
        "tolerations": [
            dict(t) for t in (tolerations if tolerations is not None else [GPU_TOLERATION])
        ],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": selector},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_size_gib}Gi"}}
        ],
        "containers": [container],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(sorted(node_selector.items()))
    annotations = {PROPAGATION_ANNOTATION: "foreground"}
    if not wait_for_completion:
        annotations[SKIP_AWAIT_ANNOTATION] = "true"
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": node_count,
        "parallelism": node_count,
        "backoffLimitPerIndex": backoff_limit_per_index,
        "maxFailedIndexes": MAX_FAILED_INDEXES,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": pod_failure_policy(),
        "template": _with_fabric(_pod_template(pod_labels, pod_annotations, pod_spec), fabric),
    }
    if active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = active_deadline_seconds
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(annotations),
        "spec": job_spec,
    }
    return {"service_account": account, "service": service, "job": job}


def _pod_template(
    labels: Mapping[str, str], annotations: Mapping[str, str] | None, spec: dict[str, Any]
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return {"metadata": meta, "spec": spec}


def _with_fabric(template: dict[str, Any], fabric: PodFabric | None) -> dict[str, Any]:
    """The pod template with `fabric`'s annotations, volumes and sidecars, and its mounts on
    the trainer container (its environment is in the container's already)."""
    if fabric is None:
        return template
    spec = template["spec"]
    meta = template["metadata"]
    meta["annotations"] = {**meta.get("annotations", {}), **fabric.annotations}
    spec["volumes"] = [*spec["volumes"], *copy.deepcopy(fabric.volumes)]
    if fabric.init_containers:
        spec["initContainers"] = copy.deepcopy(list(fabric.init_containers))
    [container] = spec["containers"]
    container["volumeMounts"] = [*container["volumeMounts"], *copy.deepcopy(fabric.volume_mounts)]
    return template

"""Flex-start with queued provisioning for a multi-node GKE GPU pool, without Kueue: the
PodTemplate and ProvisioningRequest that ask Dynamic Workload Scheduler for all the nodes at
once, and the annotations that let the training Job's pods consume them.

Source (all quotes): https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest
(last updated 2026-04-08), "Flex-start with queued provisioning for Jobs without Kueue":
"With flex-start with queued provisioning, GKE allocates all requested resources at the same
time"; "Use flex-start with queued provisioning ... when ... Your workloads are required to
run across multiple nodes simultaneously. For smaller workloads that can run on a single
node, use Flex-start VMs" (so one node keeps the plain flex-start pool)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s

from trainstack.components._kubernetes_job_manifests import (
    DEFAULT_NAMESPACE,
    GPU_RESOURCE,
    GPU_TOLERATION,
    kubernetes_labels,
)
from trainstack.components.gpu_startup import run_key
from trainstack.components.kubernetes_training_job import (
    DEFAULT_MODULE,
    KubernetesTrainingJobArgs,
    default_image,
)

PROVISIONING_CLASS: Final = "queued-provisioning.gke.io"
"""`spec.provisioningClassName: queued-provisioning.gke.io` (the page's manifest)."""
PROVISIONING_REQUEST_API: Final = "autoscaling.x-k8s.io/v1"
"""API_VERSION: "either v1 or v1beta1. We recommend using v1 for stability and access to the
latest features" (GKE serves v1 from 1.32.2-gke.1652000, the flex-start floor the cluster
already needs: "Ensure that you have a GKE cluster in version 1.32.2-gke.1652000 or later")."""
CONSUME_ANNOTATION: Final = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION: Final = "autoscaling.x-k8s.io/provisioning-class-name"
"""The pods' link to the request: "link the Pods to the ProvisioningRequest using the
following annotations"; GKE uses them "To schedule the Pods only in the nodes provisioned by
flex-start with queued provisioning" and "To avoid double counting of resource requests"."""
WARDEN_LABEL: Final = "cloud.google.com/apply-warden-policies"
"""On the PodTemplate: "This label is necessary for GKE to calculate node resource
requirements for your Pods"."""
FLEX_START_NODE_LABEL: Final = "cloud.google.com/gke-flex-start"
"""The PodTemplate's node selector beside the pool's (`cloud.google.com/gke-flex-start:
"true"` in the page's Standard manifest)."""
QUEUED_TOLERATION: Final[dict[str, str]] = {
    "key": "cloud.google.com/gke-queued",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
"""GKE taints the pool: "--flex-start ... combined with the --enable-queued-provisioning flag
instructs GKE to create a node pool ... and to add the cloud.google.com/gke-queued taint";
the toleration as Cluster Toolkit's pods carry it (GoogleCloudPlatform/cluster-toolkit
examples/gke-a4/nccl-jobset-example.yaml: key cloud.google.com/gke-queued, effect
NoSchedule, value "true")."""


QUEUED_POOL_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest: "
    "'gcloud container node-pools create NODEPOOL_NAME ... --enable-queued-provisioning ... "
    "--flex-start --enable-autoscaling --num-nodes=0 --total-max-nodes TOTAL_MAX_NODES "
    "--location-policy=ANY --reservation-affinity=none --no-enable-autorepair' (pulumi_gcp "
    "NodePool.queued_provisioning.enabled: 'nodes in this node pool are obtainable solely "
    "through the ProvisioningRequest API', terraform-provider-google resource_container_"
    "node_pool.go); GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf: "
    "'placement_policy cannot be COMPACT when enable_queued_provisioning is true, unless "
    "using TPUs'"
)
"""How a queued pool differs from a plain flex-start one: queued_provisioning enabled and no
compact placement (its run duration is the request's `maxRunDurationSeconds`)."""


def is_queued(flex_start: bool, node_count: int) -> bool:
    """Whether a GKE GPU pool gets queued provisioning: flex-start across nodes."""
    return flex_start and node_count > 1


def request_name(job: KubernetesTrainingJobArgs) -> pulumi.Output[str]:
    """The PodTemplate's and the request's name: the Job's and a digest of its arguments (all
    but the pod annotations, which carry this name), so a Job whose pods change gets a new
    request. The Job is replaced when its pod template changes (pulumi-kubernetes replaces a
    Job on `spec.template`, `catalog.replace_on_change.KUBERNETES_REPLACES`), and its new pods
    would wait forever on a request of the old name: that one's nodes are spent and its spec
    cannot change ("The spec is immutable, to make changes to the request users are expected
    to delete an existing and create a new object", kubernetes/autoscaler cluster-autoscaler/
    apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml). Every pod input is among
    the arguments, so a new template always means a new name; a changed argument that leaves
    the pods as they were (e.g. `timeout_s`) gives a new name too, which changes the pods'
    annotation and so replaces the Job with it."""
    keyed = {k: v for k, v in job.items() if k != "pod_annotations"}
    return pulumi.Output.from_input(keyed).apply(
        lambda plain: f"{job['job_name']}-{run_key(**plain)[:8]}"
    )


def pod_annotations(request_name: str) -> dict[str, str]:
    """The Job's pod annotations that consume the request `request_name`."""
    return {CONSUME_ANNOTATION: request_name, CLASS_ANNOTATION: PROVISIONING_CLASS}


def job_tolerations() -> list[dict[str, str]]:
    """The pods' tolerations on a queued pool: the GPU taint's and the queued one's."""
    return [dict(GPU_TOLERATION), dict(QUEUED_TOLERATION)]


def queued_manifests(
    *,
    name: str,
    namespace: str,
    node_count: int,
    gpus_per_node: int,
    image: str,
    node_selector: Mapping[str, str],
    labels: Mapping[str, str],
    max_run_seconds: int | None,
) -> dict[str, dict[str, Any]]:
    """The PodTemplate and ProvisioningRequest (`pod_template`, `provisioning_request`), both
    named `name` (`request_name`), in the Job's namespace ("The namespace must be the same as the namespace of the Pods"),
    as Kubernetes objects. One pod set of `node_count` pods, one per node like the Job's
    ("COUNT: Number of Pods requested. The nodes are scheduled atomically in one zone";
    "supports only one PodSet spec"), each asking for the node's GPUs."""
    k8s_labels = kubernetes_labels(labels)
    resources = {GPU_RESOURCE: str(gpus_per_node)}
    template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**k8s_labels, WARDEN_LABEL: "true"},
        },
        "template": {
            "spec": {
                "nodeSelector": dict(
                    sorted({**node_selector, FLEX_START_NODE_LABEL: "true"}.items())
                ),
                "tolerations": job_tolerations(),
                "containers": [
                    {
                        "name": "trainer",
                        "image": image,
                        "resources": {"limits": resources, "requests": resources},
                    }
                ],
                "restartPolicy": "Never",
            }
        },
    }
    spec: dict[str, Any] = {
        "provisioningClassName": PROVISIONING_CLASS,
        "podSets": [{"count": node_count, "podTemplateRef": {"name": name}}],
    }
    if max_run_seconds is not None:
        # "MAX_RUN_DURATION_SECONDS: Optionally, the maximum runtime of a node in seconds, up
        # to the default of seven days" (a string in the page's manifest).
        spec["parameters"] = {"maxRunDurationSeconds": str(max_run_seconds)}
    request = {
        "apiVersion": PROVISIONING_REQUEST_API,
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace, "labels": k8s_labels},
        "spec": spec,
    }
    return {"pod_template": template, "provisioning_request": request}


def queued_fields(job: KubernetesTrainingJobArgs, max_run_seconds: int | None) -> dict[str, Any]:
    """`queued_manifests`' arguments (all but labels) for the training Job `job`: the
    request's name (`request_name`, an Output), its namespace, pods, image and node
    selector."""
    return {
        "name": request_name(job),
        "namespace": job.get("namespace", DEFAULT_NAMESPACE),
        "node_count": job["node_count"],
        "gpus_per_node": job["gpus_per_node"],
        "image": job.get("image") or default_image(job.get("trainer_module", DEFAULT_MODULE)),
        "node_selector": dict(job.get("node_selector", {})),
        "max_run_seconds": max_run_seconds,
    }


@dataclass(frozen=True)
class QueuedRequest:
    """The registered request: the PodTemplate it sizes the nodes from, and itself."""

    pod_template: k8s.core.v1.PodTemplate
    provisioning_request: k8s.apiextensions.CustomResource
    manifests: pulumi.Output[dict[str, dict[str, Any]]]


def create_queued_request(
    name: str,
    fields: Mapping[str, Any],
    labels: pulumi.Input[Mapping[str, str]],
    parent: pulumi.Resource,
    provider: k8s.Provider,
    depends_on: Sequence[Any],
) -> QueuedRequest:
    """Register `queued_manifests(**fields, labels=...)` as children of `parent` (the
    component `name`), on the cluster's `provider`, after `depends_on` (the pools)."""
    objects = pulumi.Output.all(labels, dict(fields)).apply(
        lambda v: queued_manifests(**v[1], labels=v[0])
    )

    def part(kind: str, field: str) -> pulumi.Output[Any]:
        return objects.apply(lambda m: m[kind][field])

    opts = pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(depends_on))
    pod_template = k8s.core.v1.PodTemplate(
        f"{name}-pod-template",
        metadata=part("pod_template", "metadata"),
        template=part("pod_template", "template"),
        opts=opts,
    )
    request = k8s.apiextensions.CustomResource(
        f"{name}-provisioning-request",
        api_version=PROVISIONING_REQUEST_API,
        kind="ProvisioningRequest",
        metadata=part("provisioning_request", "metadata"),
        spec=part("provisioning_request", "spec"),
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                depends_on=[pod_template],
                # "The spec is immutable, to make changes to the request users are expected
                # to delete an existing and create a new object" (kubernetes/autoscaler
                # cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests
                # .yaml, v1 spec): a new request, the old one gone first. A new run has a new
                # name (`request_name`), which replaces it too.
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        ),
    )
    return QueuedRequest(pod_template=pod_template, provisioning_request=request, manifests=objects)

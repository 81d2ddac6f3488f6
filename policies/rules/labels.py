"""`accelerators-labelled`: GPU and TPU machines carry the labels cost reports group by."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._inputs import (
    _accelerator_kind,
    _cluster_node_configs,
    _dynamic_body,
    _get,
    _list,
    _mapping,
    _queued_nodes,
    _vertex_job_spec,
)
from .model import (
    DYNAMIC_PREFIX,
    GKE_CLUSTER,
    GKE_NODE_POOL,
    K8S_JOB,
    TPU_QUEUED,
    TPU_VM,
    VM_TYPES,
    Context,
    Resource,
)

_K8S_ACCELERATOR_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu", "google.com/tpu")


LabelSet = tuple[str, str, Mapping[str, Any]]
"""(what the machines are, where their labels live, the labels)."""


def _tpu_vm_labels(resource: Resource) -> Iterator[LabelSet]:
    yield "TPU VM", "labels", _mapping(resource.inputs.get("labels"))


def _static_queued_labels(resource: Resource) -> Iterator[LabelSet]:
    for path, _ in _queued_nodes(resource):
        # pulumi-gcp's queued resource has no node labels at all.
        yield "TPU queued resource (which cannot label its nodes)", f"{path}.labels", {}


def _vm_labels(resource: Resource) -> Iterator[LabelSet]:
    inputs = resource.inputs
    kind = _accelerator_kind(inputs.get("machineType"), inputs.get("guestAccelerators"))
    if kind:
        yield f"{kind} VM", "labels", _mapping(inputs.get("labels"))


def _node_pool_labels(resource: Resource) -> Iterator[LabelSet]:
    config = _mapping(resource.inputs.get("nodeConfig"))
    kind = _accelerator_kind(config.get("machineType"), config.get("guestAccelerators"))
    if kind:
        labels = _mapping(config.get("resourceLabels"))
        yield f"{kind} node pool", "nodeConfig.resourceLabels", labels


def _cluster_labels(resource: Resource) -> Iterator[LabelSet]:
    cluster_labels = _mapping(resource.inputs.get("resourceLabels"))
    for path, config in _cluster_node_configs(resource.inputs):
        kind = _accelerator_kind(config.get("machineType"), config.get("guestAccelerators"))
        if kind:
            merged = {**cluster_labels, **_mapping(config.get("resourceLabels"))}
            yield f"{kind} nodes", f"resourceLabels / {path}.resourceLabels", merged


def _k8s_job_labels(resource: Resource) -> Iterator[LabelSet]:
    pod = _mapping(_get(resource.inputs, "spec", "template", "spec"))
    containers = _list(pod.get("containers")) + _list(pod.get("initContainers"))
    wants = {
        key
        for c in containers
        for section in ("limits", "requests")
        for key in _mapping(_get(c, "resources", section))
        if key in _K8S_ACCELERATOR_RESOURCES
    }
    if wants:
        what = f"Kubernetes Job requesting {', '.join(sorted(wants))}"
        yield what, "metadata.labels", _mapping(_get(resource.inputs, "metadata", "labels"))


def _dynamic_labels(resource: Resource) -> Iterator[LabelSet]:
    for path, node in _queued_nodes(resource):
        yield "TPU queued resource", f"{path}.labels", _mapping(node.get("labels"))
    job = _vertex_job_spec(resource)
    if job is None:
        return
    kinds = set()
    for pool in _list(job[1].get("workerPoolSpecs")):
        spec = _mapping(_get(pool, "machineSpec"))
        accelerator = spec.get("acceleratorType")
        if accelerator and accelerator != "ACCELERATOR_TYPE_UNSPECIFIED":
            kinds.add("TPU" if str(accelerator).startswith("TPU") else "GPU")
        elif kind := _accelerator_kind(spec.get("machineType")):
            kinds.add(kind)
    if kinds:
        what = f"Vertex AI job on {'/'.join(sorted(kinds))}s"
        yield what, "body.labels", _mapping(_dynamic_body(resource).get("labels"))


_LABEL_SETS: dict[str, Callable[[Resource], Iterator[LabelSet]]] = {
    **dict.fromkeys(VM_TYPES, _vm_labels),
    TPU_VM: _tpu_vm_labels,
    TPU_QUEUED: _static_queued_labels,
    GKE_NODE_POOL: _node_pool_labels,
    GKE_CLUSTER: _cluster_labels,
    K8S_JOB: _k8s_job_labels,
}


def _accelerator_label_sets(resource: Resource) -> Iterator[LabelSet]:
    """Every set of accelerator machines the resource creates, with its labels."""
    if resource.type.startswith(DYNAMIC_PREFIX):
        return _dynamic_labels(resource)
    found = _LABEL_SETS.get(resource.type)
    return found(resource) if found is not None else iter(())


def check_accelerator_labels(resource: Resource, context: Context) -> Iterator[str]:
    """GPU/TPU machines carry the labels cost reports group by."""
    for what, where, labels in _accelerator_label_sets(resource):
        missing = [
            key
            for key in context.required_labels
            if not (isinstance(labels.get(key), str) and labels[key])
        ]
        if missing:
            yield (
                f"{what} without the label(s) {', '.join(missing)} in {where}: accelerator "
                f"spend is attributed by {', '.join(context.required_labels)}"
            )

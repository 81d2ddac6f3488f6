"""Reading resource inputs: safe paths into nested inputs, and where each resource type
keeps its TPU nodes, Vertex job spec, GKE node configs, machine type and labels."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .model import DYNAMIC_PREFIX, SECRET, TPU_QUEUED, UNKNOWN, Resource

# GPU families (A2, A3, A4, G2, G4) and the GKE TPU machine types (ct4p-, ct5lp-, ct6e-...).
_ACCELERATOR_MACHINE = re.compile(r"^(?:(?:a2|a3|a4|a4x|g2|g4)-|ct\d)")
_TPU_MACHINE = re.compile(r"^ct\d|^cloud-tpu$")


def _get(value: Any, *path: str | int) -> Any:
    """`value[path0][path1]...`, or None where the path does not exist."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, Sequence) or isinstance(value, str) or key >= len(value):
                return None
        elif not isinstance(value, Mapping):
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
    return value


def _list(value: Any) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _hidden(value: Any) -> bool:
    """A value a rule cannot read: computed at deploy time or secret."""
    return value in (UNKNOWN, SECRET)


def _show(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def _dynamic_body(resource: Resource) -> Mapping[str, Any]:
    if not resource.type.startswith(DYNAMIC_PREFIX):
        return {}
    return _mapping(resource.inputs.get("body"))


def _vertex_job_spec(resource: Resource) -> tuple[str, Mapping[str, Any]] | None:
    """(path, spec) of a Vertex CustomJob (`jobSpec`) or tuning job (`trialJobSpec`) body."""
    body = _dynamic_body(resource)
    for key in ("jobSpec", "trialJobSpec"):
        if isinstance(body.get(key), Mapping):
            return f"body.{key}", body[key]
    return None


def _queued_nodes(resource: Resource) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, node) of every TPU node a queued resource creates: pulumi-gcp's
    (`tpu.nodeSpecs`) or a dynamic provider's REST body (`body.tpu.nodeSpec`)."""
    if resource.type == TPU_QUEUED:
        specs, path = _get(resource.inputs, "tpu", "nodeSpecs"), "tpu.nodeSpecs"
    else:
        specs, path = _get(_dynamic_body(resource), "tpu", "nodeSpec"), "body.tpu.nodeSpec"
    return [
        (f"{path}[{i}].node", _mapping(spec.get("node")))
        for i, spec in enumerate(_list(specs))
        if isinstance(spec, Mapping)
    ]


def _cluster_node_configs(inputs: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, nodeConfig) of the node pools a GKE cluster keeps itself: its inline pools, or
    else its default pool unless removed (a removed default pool lives only while the
    cluster is created) or managed by Autopilot."""
    pools = _list(inputs.get("nodePools"))
    configs = []
    if (
        not pools
        and inputs.get("removeDefaultNodePool") is not True
        and not (inputs.get("enableAutopilot") is True)
    ):
        configs.append(("nodeConfig", _mapping(inputs.get("nodeConfig"))))
    for i, pool in enumerate(pools):
        configs.append((f"nodePools[{i}].nodeConfig", _mapping(_get(pool, "nodeConfig"))))
    return configs


def _machine_type(value: Any) -> str:
    # GCE accepts both `a2-highgpu-8g` and `zones/<zone>/machineTypes/a2-highgpu-8g`.
    return value.rsplit("/", 1)[-1] if isinstance(value, str) else ""


def _accelerator_kind(machine_type: Any, guest_accelerators: Any = None) -> str | None:
    """The accelerator of a machine type ("TPU" or "GPU"), or None for a plain VM."""
    name = _machine_type(machine_type)
    if _TPU_MACHINE.match(name):
        return "TPU"
    if _list(guest_accelerators) or _ACCELERATOR_MACHINE.match(name):
        return "GPU"
    return None


def _labels(resource: Resource) -> Mapping[str, Any]:
    """The resource's own labels, wherever its type keeps them."""
    inputs = resource.inputs
    for found in (
        inputs.get("labels"),
        inputs.get("resourceLabels"),
        _get(inputs, "metadata", "labels"),
        _dynamic_body(resource).get("labels"),
    ):
        if isinstance(found, Mapping):
            return found
    return {}

"""What a Vertex AI job runs, for the text plan (`trainstack.infra.plan_runs`): per worker
pool its role, replica count, machine type, accelerators, image and command; for tuning,
the trials and the metric. `RUN_RESOURCES` declares the two job types to the registry."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any, Final

from trainstack.components._pod_setup import pod_command
from trainstack.infra.plan_replace import CUSTOM_JOB, TUNING_JOB
from trainstack.infra.plan_runs import number
from trainstack.infra.targets.base import RunResource

# Worker pool roles by index (gcp-facts section 3.2, from
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/distributed-training
# and googleapis/python-aiplatform google/cloud/aiplatform/utils/worker_spec_utils.py
# `_SPEC_ORDERS`); pool 2 is a Reduction Server when it runs Google's reductionserver image.
POOL_ROLES: Final = ("chief", "workers", "parameter servers", "evaluators")
REDUCTION_SERVER_IMAGE: Final = "/vertex-ai-restricted/training/reductionserver:"
_PROVIDER: Final[tuple[str, str, dict[str, Any]]] = (
    "trainstack.components._vertex_provider",
    "VertexJobProvider",
    {},
)


def _pool_line(index: int, pool: Mapping[str, Any]) -> str:
    package = pool.get("pythonPackageSpec")
    container = pool.get("containerSpec")
    if isinstance(package, Mapping):
        image = str(package.get("executorImageUri"))
        command = ["python", "-m", str(package.get("pythonModule")), *package.get("args", [])]
    elif isinstance(container, Mapping):
        image = str(container.get("imageUri"))
        command = [*container.get("command", []), *container.get("args", [])]
        if list(container.get("command", [])) == pod_command():
            # The setup script's text is long and the same everywhere: name it instead.
            setup = "the pod setup script (installs the trainer package)"
            args = shlex.join(str(a) for a in container.get("args", []))
            return f"{_hardware_line(index, pool, image)}, runs {setup}, then {args}"
    else:
        image, command = "(none)", []
    line = _hardware_line(index, pool, image)
    return line + (f", runs {shlex.join(str(a) for a in command)}" if command else "")


def _hardware_line(index: int, pool: Mapping[str, Any], image: str) -> str:
    machine = pool.get("machineSpec") or {}
    role = POOL_ROLES[index] if index < len(POOL_ROLES) else f"pool {index}"
    if index == 2 and REDUCTION_SERVER_IMAGE in image:
        role = "reduction server"
    hardware = f"{number(pool.get('replicaCount'))} x {machine.get('machineType')}"
    if machine.get("acceleratorType"):
        hardware += f" with {number(machine.get('acceleratorCount'))} x "
        hardware += str(machine["acceleratorType"])
    return f"{role}: {hardware}, image {image}"


def vertex_lines(body: Any) -> list[str]:
    if not isinstance(body, Mapping):
        return [f"job body {body}"]  # unknown until deploy: the preview cannot say more
    spec = body.get("jobSpec") or body.get("trialJobSpec") or {}
    lines = []
    if "studySpec" in body:
        study = body["studySpec"]
        metrics = ", ".join(f"{m.get('goal')} {m.get('metricId')}" for m in study["metrics"])
        lines.append(
            f"{number(body.get('maxTrialCount'))} trials, "
            f"{number(body.get('parallelTrialCount'))} at a time, "
            f"{study.get('algorithm', 'ALGORITHM_UNSPECIFIED')}, {metrics}"
        )
    lines += [
        _pool_line(index, pool)
        for index, pool in enumerate(spec.get("workerPoolSpecs", []))
        if pool  # an empty pool stands for a role the job does not use
    ]
    scheduling = spec.get("scheduling") or {}
    if scheduling.get("strategy"):
        lines.append(f"scheduling {scheduling['strategy']}")
    return lines


RUN_RESOURCES: Final = tuple(
    RunResource(kind, _PROVIDER, lambda inputs: vertex_lines(inputs.get("body")))
    for kind in (CUSTOM_JOB, TUNING_JOB)
)

"""What a Vertex AI job runs, for the text plan (`trainstack.infra.plan_runs`): per worker
pool its role, replica count, machine type, accelerators, image and command; for tuning,
the trials and the metric. `RUN_RESOURCES` declares the two job types to the registry."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any, Final

from trainstack.components.vertex_training_job import pod_command
from trainstack.infra.plan_inputs import RUN_NAME_FLAG, input_strings, number
from trainstack.infra.targets.base import RunResource

# Worker pool roles by index (gcp-facts section 3.2, from
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/distributed-training
# and googleapis/python-aiplatform google/cloud/aiplatform/utils/worker_spec_utils.py
# `_SPEC_ORDERS`); pool 2 is a Reduction Server when it runs Google's reductionserver image.
CUSTOM_JOB: Final = "pulumi-python:dynamic/vertex:CustomJob"
TUNING_JOB: Final = "pulumi-python:dynamic/vertex:HyperparameterTuningJob"
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


def job_checkpoint_dir(inputs: Mapping[str, Any], trials: bool) -> str | None:
    """Vertex's AIP_CHECKPOINT_DIR: <baseOutputDirectory>/checkpoints/, per trial
    <baseOutputDirectory>/<trial id>/checkpoints/ (aiplatform v1 discovery document,
    CustomJobSpec.baseOutputDirectory)."""
    body = inputs.get("body") or {}
    spec = body.get("jobSpec") or body.get("trialJobSpec") or {}
    prefix = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if not prefix:
        return None
    trial = "/<trial id>" if trials else ""
    # The bundled trainers keep each run in its own folder below it (--run_name); a
    # tuning trial's also carries its settings' fingerprint
    # (trainstack.trainers.common.checkpoint.run_checkpoint_dir).
    runs = [m for s in input_strings(inputs) for m in RUN_NAME_FLAG.findall(s)]
    run = f"/{runs[-1]}" if runs else ""
    return f"{prefix.rstrip('/')}{trial}/checkpoints{run}"


def tuned_keys(inputs: Mapping[str, Any]) -> set[str]:
    """The keys a tuning job's trials set themselves (its study's parameters)."""
    params = ((inputs.get("body") or {}).get("studySpec") or {}).get("parameters") or []
    return {
        p["parameterId"]
        for p in params
        if isinstance(p, Mapping) and isinstance(p.get("parameterId"), str)
    }


RUN_RESOURCES: Final = (
    RunResource(
        CUSTOM_JOB,
        _PROVIDER,
        lambda inputs: vertex_lines(inputs.get("body")),
        checkpoint_dir=lambda inputs: job_checkpoint_dir(inputs, trials=False),
    ),
    RunResource(
        TUNING_JOB,
        _PROVIDER,
        lambda inputs: vertex_lines(inputs.get("body")),
        checkpoint_dir=lambda inputs: job_checkpoint_dir(inputs, trials=True),
        tuned=tuned_keys,
    ),
)

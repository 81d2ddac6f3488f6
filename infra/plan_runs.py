"""What each dynamic resource runs, for the text plan (`trainstack.infra.plan.render_plan`).

A dynamic resource's first inputs say little: `__provider` is the pickled provider (a secret
in every plan) and the work itself sits in a nested request body. The text plan shows
instead, under the resource, what it starts, read from those same inputs:

- the local `TrainingRun`: the workers and the trainer (bundled, or your code's entrypoint
  and launcher);
- a Vertex `CustomJob` / `HyperparameterTuningJob`: per worker pool its role, replica count,
  machine type, accelerators, image and command; for tuning, the trials and the metric;
- the TPU `QueuedResource`: accelerator, runtime, node count and tier.

The JSON plan (`--json`) keeps every input as registered.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from trainstack.components._pod_setup import pod_command
from trainstack.infra.plan_diff import integral_numbers

PROVIDER_INPUT = "__provider"
"""The input a dynamic resource carries its serialized provider in (pulumi/dynamic)."""

LOCAL_RUN = "pulumi-python:dynamic/local:TrainingRun"
VERTEX_JOBS = (
    "pulumi-python:dynamic/vertex:CustomJob",
    "pulumi-python:dynamic/vertex:HyperparameterTuningJob",
)
TPU_QUEUED = "pulumi-python:dynamic/tpu:QueuedResource"

# Worker pool roles by index (gcp-facts section 3.2, from
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/distributed-training
# and googleapis/python-aiplatform google/cloud/aiplatform/utils/worker_spec_utils.py
# `_SPEC_ORDERS`); pool 2 is a Reduction Server when it runs Google's reductionserver image.
POOL_ROLES = ("chief", "workers", "parameter servers", "evaluators")
REDUCTION_SERVER_IMAGE = "/vertex-ai-restricted/training/reductionserver:"


def _number(value: Any) -> str:
    """A count as the engine sends it (a double, or an int64 as a string) written plainly."""
    if isinstance(value, str) and value.isdigit():
        return value
    return str(integral_numbers(value))


def runs_lines(resource_type: str, inputs: Mapping[str, Any]) -> list[str]:
    """Lines saying what a dynamic resource runs; [] for any other resource."""
    if resource_type == LOCAL_RUN:
        return _local_lines(inputs)
    if resource_type in VERTEX_JOBS:
        return _vertex_lines(inputs.get("body"))
    if resource_type == TPU_QUEUED:
        return _tpu_lines(inputs.get("body"))
    return []


def _local_lines(inputs: Mapping[str, Any]) -> list[str]:
    trainer = inputs.get("trainer")
    trainer = trainer if isinstance(trainer, Mapping) else {}
    workers = f"{_number(inputs.get('workers'))} workers on this machine run"
    if "entrypoint" in trainer:
        entrypoint = trainer["entrypoint"]
        command = (
            shlex.join(str(a) for a in entrypoint) if isinstance(entrypoint, list) else entrypoint
        )
        source = f" {trainer['source']}" if trainer.get("source") else ""
        # No launcher given: torchrun off a TPU slice (trainers/common/user_code.py
        # `UserCode.launcher_for`).
        launcher = trainer.get("launcher", "torchrun")
        return [f"{workers} your code{source}: {command} (launcher {launcher})"]
    bundled = (
        f"{workers} the bundled {trainer.get('framework')} trainer: strategy "
        f"{trainer.get('strategy')}, model {trainer.get('model')} on {trainer.get('dataset')}, "
        f"{_number(trainer.get('steps'))} steps, global batch "
        f"{_number(trainer.get('global_batch_size'))}"
    )
    return [bundled]


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
    hardware = f"{_number(pool.get('replicaCount'))} x {machine.get('machineType')}"
    if machine.get("acceleratorType"):
        hardware += f" with {_number(machine.get('acceleratorCount'))} x "
        hardware += str(machine["acceleratorType"])
    return f"{role}: {hardware}, image {image}"


def _vertex_lines(body: Any) -> list[str]:
    if not isinstance(body, Mapping):
        return [f"job body {body}"]  # unknown until deploy: the preview cannot say more
    spec = body.get("jobSpec") or body.get("trialJobSpec") or {}
    lines = []
    if "studySpec" in body:
        study = body["studySpec"]
        metrics = ", ".join(f"{m.get('goal')} {m.get('metricId')}" for m in study["metrics"])
        lines.append(
            f"{_number(body.get('maxTrialCount'))} trials, "
            f"{_number(body.get('parallelTrialCount'))} at a time, "
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


def _tpu_lines(body: Any) -> list[str]:
    if not isinstance(body, Mapping):
        return [f"queued resource body {body}"]
    specs = body.get("tpu", {}).get("nodeSpec", [])
    tier = "spot" if "spot" in body else "guaranteed" if "guaranteed" in body else "on-demand"
    lines = []
    for spec in specs:
        node = spec.get("node", {})
        config = node.get("acceleratorConfig") or {}
        accelerator = node.get("acceleratorType") or (
            f"{config.get('type')} topology {config.get('topology')}"
        )
        count = (spec.get("multisliceParams") or {}).get("nodeCount", 1)
        lines.append(
            f"{_number(count)} x TPU {accelerator}, runtime {node.get('runtimeVersion')}, "
            f"{tier}, in {spec.get('parent')}"
        )
    if "reservationName" in body:
        lines.append(f"reservation {body['reservationName']}")
    return lines

"""Which dynamic resources each bundled stack and example registers, and the config changes
the tier makes to drive an in-place update and a replace."""

from __future__ import annotations

import copy
from typing import Any

CUSTOM_JOB = "pulumi-python:dynamic/vertex:CustomJob"
HPT_JOB = "pulumi-python:dynamic/vertex:HyperparameterTuningJob"
QUEUED_RESOURCE = "pulumi-python:dynamic/tpu:QueuedResource"
LOCAL_RUN = "pulumi-python:dynamic/local:TrainingRun"
IMAGE_BUILD = "pulumi-python:dynamic/cloudbuild:ImageBuild"

DYNAMIC_RESOURCES: dict[str, list[tuple[str, str]]] = {
    "stacks/dev-a100-gke": [],
    "stacks/dev-b200-gce": [],
    "stacks/dev-h100-gke": [],
    "stacks/dev-tpu-v5e": [],
    "stacks/dev-tpu-v6e-gke": [],
    "stacks/dev-vertex-hpt": [(HPT_JOB, "dev-vertex-hpt-job-job")],
    "stacks/local": [(LOCAL_RUN, "local-job-run")],
    "stacks/local-tf": [(LOCAL_RUN, "local-tf-job-run")],
    "stacks/prod-a100-gce": [],
    "stacks/prod-tpu-v4-32": [],
    "stacks/prod-vertex-rs": [
        (IMAGE_BUILD, "prod-vertex-rs-rs-image-build"),
        (CUSTOM_JOB, "prod-vertex-rs-job-job"),
    ],
    "examples/own-jax/Pulumi.local.yaml": [(LOCAL_RUN, "local-job-run")],
    "examples/own-jax/Pulumi.tpu.yaml": [],
    "examples/own-trainer/Pulumi.gce.yaml": [],
    "examples/own-trainer/Pulumi.gke.yaml": [],
    "examples/own-trainer/Pulumi.local.yaml": [(LOCAL_RUN, "local-job-run")],
    "examples/own-trainer/Pulumi.vertex.yaml": [(CUSTOM_JOB, "vertex-job-job")],
}
"""label (tests/engine/programs.py `sources`) -> (type, logical name) of each dynamic resource."""

IMAGE_BUILD_CASE = "stacks/prod-vertex-rs"
"""The stack whose Reduction Server builds the plugin image (`ImageBuild`)."""

QUEUED_TPU = "stacks/dev-tpu-v5e"
"""No bundled stack or example queues its TPU, so the tier drives this stack with
`tpu.provisioning: queued` (`queued_variant`)."""

VERTEX_CASES = [
    "stacks/prod-vertex-rs",
    "stacks/dev-vertex-hpt",
    "examples/own-trainer/Pulumi.vertex.yaml",
]
LOCAL_CASES = [
    "stacks/local",
    "stacks/local-tf",
    "examples/own-trainer/Pulumi.local.yaml",
    "examples/own-jax/Pulumi.local.yaml",
]


def queued_variant(config: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    changed["trainstack:tpu"]["provisioning"] = "queued"
    return changed


def replaced(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with a trainer change every provider replaces on: more steps for a bundled
    trainer, one more environment variable for your own code."""
    changed = copy.deepcopy(config)
    trainer = changed["trainstack:trainer"]
    if "source" in trainer:
        trainer["env"] = {**trainer.get("env", {}), "ENGINE_TIER_RUN": "replaced"}
    else:
        trainer["steps"] = int(trainer["steps"]) + 100
    return changed


def relabelled(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with one more stack label (the local run updates its labels in place)."""
    changed = copy.deepcopy(config)
    changed["trainstack:labels"] = {**changed.get("trainstack:labels", {}), "tier": "engine"}
    return changed

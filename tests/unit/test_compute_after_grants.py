"""Compute that runs as the training account starts only after that account's grants exist.

A TPU slice, a managed instance group, a GKE training Job or a Vertex job that reads the
staging bucket before its `roles/storage.objectViewer` binding exists fails its package
download and sits idle, billing. Each bundled stack's compute resource must therefore depend
on every IAM binding of the training identity (recorded as the engine receives it)."""

from __future__ import annotations

import pytest

from trainstack.infra.compose import main_program
from trainstack.infra.mocks import run_program
from trainstack.infra.plan import load_stack

IDENTITY_GRANT_TYPES = {
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:projects/iAMMember:IAMMember",
    "gcp:secretmanager/secretIamMember:SecretIamMember",
}

COMPUTE = {
    "dev-tpu-v5e": ("gcp:tpu/v2Vm:V2Vm", "dev-tpu-v5e-tpu-vm"),
    "prod-tpu-v4-32": ("gcp:tpu/v2Vm:V2Vm", "prod-tpu-v4-32-tpu-vm"),
    "prod-a100-gce": (
        "gcp:compute/instanceGroupManager:InstanceGroupManager",
        "prod-a100-gce-gpu-group",
    ),
    "dev-a100-gke": ("trainstack:k8s:KubernetesTrainingJob", "dev-a100-gke-gpu-training"),
    "prod-vertex-rs": ("pulumi-python:dynamic/vertex:CustomJob", "prod-vertex-rs-job-job"),
    "dev-vertex-hpt": (
        "pulumi-python:dynamic/vertex:HyperparameterTuningJob",
        "dev-vertex-hpt-job-job",
    ),
}


@pytest.mark.parametrize("stack", sorted(COMPUTE))
def test_compute_depends_on_every_grant_of_the_training_identity(stack: str) -> None:
    name, config = load_stack(stack, None)
    run = run_program(main_program, config=config, stack=name)
    grants = sorted(
        r.urn
        for r in run.resources
        if r.type in IDENTITY_GRANT_TYPES and r.parent == f"{stack}-identity"
    )
    # data viewer, checkpoint admin, staging viewer, log writer, metric writer (+ GKE node role)
    assert len(grants) == (6 if stack == "dev-a100-gke" else 5)
    kind, logical = COMPUTE[stack]
    [compute] = [r for r in run.resources if r.type == kind and r.name == logical]
    missing = [urn.rsplit("::", 1)[-1] for urn in grants if urn not in compute.dependencies]
    assert missing == []


def test_a_queued_slice_waits_for_the_grants_too() -> None:
    name, config = load_stack("dev-tpu-v5e", None)
    config = {**config, "trainstack:tpu": {**config["trainstack:tpu"], "provisioning": "queued"}}
    run = run_program(main_program, config=config, stack=name)
    # The training identity's grants (the stack's TPU supervisor has grants of its own).
    grants = {
        r.urn
        for r in run.resources
        if r.type in IDENTITY_GRANT_TYPES and r.parent == f"{name}-identity"
    }
    [queued] = [r for r in run.resources if r.type == "pulumi-python:dynamic/tpu:QueuedResource"]
    assert len(grants) == 5
    assert grants <= set(queued.dependencies)

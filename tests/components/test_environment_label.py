"""A component's `environment` argument sets the `environment` label that the policy pack's
`accelerators-labelled` requires on GPU/TPU machines (policies/rules/model.py
REQUIRED_MACHINE_LABELS), so a program that gives it passes `trainstack policy`."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components import A100Cluster, TrainingBuckets
from trainstack.components._args import ArgsError
from trainstack.components.tpu_gke_slices import TpuGkeSlices
from trainstack.infra.mocks import run_program
from trainstack.policies.rules import Context, Resource, evaluate


def _cluster(**extra: Any) -> dict[str, Any]:
    return {
        "project": "p",
        "zone": "us-central1-a",
        "deployment_name": "exp",
        "backend": "gke",
        "machine_type": "a2-highgpu-1g",
        "network_self_link": "projects/p/global/networks/n",
        "subnetwork_self_link": "projects/p/regions/us-central1/subnetworks/s",
        "node_tag": "exp-node",
        "service_account_email": "sa@p.iam.gserviceaccount.com",
        "training": {"package_uri": "gs://staging/pkg.tar.gz"},
        "labels": {"stack": "dev"},
        **extra,
    }


def _run(**extra: Any) -> Any:
    def program() -> None:
        A100Cluster("exp-gpu", _cluster(**extra))  # type: ignore[arg-type]

    return run_program(program)


def _violations(extra: dict[str, Any]) -> list[str]:
    run = _run(**extra)
    resources = [Resource(r.type, r.name, r.inputs) for r in run.resources]
    return [v.message for v in evaluate(resources, Context()) if v.rule == "accelerators-labelled"]


def test_environment_labels_the_gpu_nodes_and_the_job_for_the_policy() -> None:
    assert _violations({"environment": "staging"}) == []
    run = _run(environment="staging")
    job = run.named("exp-gpu-training-job")
    assert job.inputs["metadata"]["labels"]["environment"] == "staging"
    pool = run.named("exp-gpu-gpu-pool")
    assert pool.inputs["nodeConfig"]["resourceLabels"] == {
        "component": "a100-cluster",
        "environment": "staging",
        "managed-by": "trainstack",
        "stack": "dev",
    }


def test_without_environment_the_policy_still_asks_for_the_label() -> None:
    assert _violations({}) == [
        "GPU node pool without the label(s) environment in nodeConfig.resourceLabels: "
        "accelerator spend is attributed by environment, stack",
        "Kubernetes Job requesting nvidia.com/gpu without the label(s) environment in "
        "metadata.labels: accelerator spend is attributed by environment, stack",
    ]


def test_a_different_environment_label_is_one_line() -> None:
    def program() -> None:
        A100Cluster("exp-gpu", _cluster(environment="dev", labels={"environment": "prod"}))  # type: ignore[arg-type]

    with pytest.raises(ArgsError) as caught:
        run_program(program)
    assert caught.value.errors == [
        "A100Cluster.labels: environment 'prod' differs from the component's environment "
        "'dev'; valid: leave the label out (environment sets it) or give the same value"
    ]


def test_training_buckets_label_their_environment() -> None:
    def program() -> None:
        TrainingBuckets(
            "exp-buckets",
            {"project": "p", "location": "US", "deployment_name": "exp", "environment": "dev"},
        )

    run = run_program(program)
    assert run.named("exp-buckets-data").inputs["labels"] == {
        "component": "training-buckets",
        "environment": "dev",
        "managed-by": "trainstack",
    }


def _slices(**extra: Any) -> dict[str, Any]:
    return {
        "project": "p",
        "zone": "us-east5-b",
        "deployment_name": "exp",
        "accelerator_type": "v6e-16",
        "image": "us-docker.pkg.dev/p/jax/tpu:1",
        "node_args": ["--launcher=node", "--", "python", "train.py"],
        "package_uri": "gs://staging/pkg.tar.gz",
        "network_self_link": "projects/p/global/networks/n",
        "subnetwork_self_link": "projects/p/regions/us-east5/subnetworks/s",
        "node_tag": "exp-node",
        "service_account_email": "sa@p.iam.gserviceaccount.com",
        "labels": {"stack": "dev"},
        **extra,
    }


def _slice_violations(**extra: Any) -> tuple[Any, list[str]]:
    def program() -> None:
        TpuGkeSlices("exp-tpu", _slices(**extra))  # type: ignore[arg-type]

    run = run_program(program)
    resources = [Resource(r.type, r.name, r.inputs) for r in run.resources]
    found = [v.message for v in evaluate(resources, Context()) if v.rule == "accelerators-labelled"]
    return run, found


def test_environment_labels_the_tpu_node_pools_and_the_jobset_for_the_policy() -> None:
    run, violations = _slice_violations(environment="staging")
    # Before: "TPU node pool without the label(s) environment in nodeConfig.resourceLabels".
    assert violations == []
    labels = {
        "component": "tpu-gke-slices",
        "environment": "staging",
        "managed-by": "trainstack",
        "stack": "dev",
    }
    assert run.named("exp-tpu-slice-0").inputs["nodeConfig"]["resourceLabels"] == labels
    assert run.named("exp-tpu-jobset").inputs["metadata"]["labels"] == labels


def test_tpu_slices_without_environment_the_policy_still_asks_for_the_label() -> None:
    assert _slice_violations()[1] == [
        "TPU node pool without the label(s) environment in nodeConfig.resourceLabels: "
        "accelerator spend is attributed by environment, stack"
    ]


def test_tpu_slices_with_another_environment_label_is_one_line() -> None:
    with pytest.raises(ArgsError) as caught:
        _slice_violations(environment="dev", labels={"environment": "prod", "stack": "dev"})
    assert caught.value.errors == [
        "TpuGkeSlices.labels: environment 'prod' differs from the component's environment "
        "'dev'; valid: leave the label out (environment sets it) or give the same value"
    ]
    with pytest.raises(ArgsError) as caught:
        _slice_violations(environment="test")
    assert caught.value.errors == [
        "TpuGkeSlices.environment: 'test' is not allowed; valid: dev, staging, prod"
    ]

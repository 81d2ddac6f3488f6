"""Each compute component scopes its own dashboard (`dashboard_scope`): the filters are
built from the names and ids the component owns, so `compose` passes them on unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.components import test_a100_cluster as a100
from tests.components import test_tpu_pod_slice as tpu
from tests.components import test_vertex_training_job as vertex
from trainstack.components.a100_cluster import A100Cluster, instance_name_pattern, instance_names
from trainstack.components.tpu_pod_slice import TpuPodSlice
from trainstack.components.vertex_training_job import VertexTrainingJob
from trainstack.infra.mocks import run_program


def _scope(build: Any, preview: bool = True, **mock_outputs: Any) -> dict[str, Any]:
    run = run_program(lambda: dict(build().dashboard_scope), preview=preview, outputs=mock_outputs)
    return run.outputs


def test_vertex_job_scope_keys_on_the_job_id() -> None:
    def build() -> VertexTrainingJob:
        return VertexTrainingJob("exp-42-vertex", {**vertex.ARGS, "package_uri": "gs://b/p.tgz"})

    def job(_name: str, _inputs: dict[str, Any]) -> dict[str, Any]:
        return {"job_name": "projects/p/locations/europe-west4/customJobs/8812"}

    scope = _scope(build, preview=False, **{"pulumi-python:dynamic/vertex:CustomJob": job})
    assert scope == {
        "target": "vertex",
        "worker_count": 4,
        "log_filter": 'resource.labels.job_id="8812"',
        "resource_filter": 'resource.label.job_id="8812"',
    }


def test_tpu_slice_scope_keys_on_the_slice_name() -> None:
    scope = _scope(lambda: TpuPodSlice("exp-42-tpu", tpu.ARGS), **{tpu.VM_TYPE: tpu._vm_outputs})
    assert scope == {
        "target": "tpu",
        "worker_count": 1,
        "log_filter": 'resource.labels.node_id="exp-42-tpu"',
        "resource_filter": 'resource.label.node_id="exp-42-tpu"',
    }


def test_gke_cluster_scope_keys_on_the_cluster_name() -> None:
    scope = _scope(
        lambda: A100Cluster("gpu", a100._args(backend="gke")),  # type: ignore[arg-type]
        **{a100.CLUSTER: a100._cluster_outputs},
    )
    assert scope == {
        "target": "gpu_cluster",
        "gpu_backend": "gke",
        "worker_count": 4,
        "log_filter": 'resource.labels.cluster_name="exp-42-a100"',
        "resource_filter": 'resource.label.cluster_name="exp-42-a100"',
    }


def test_gce_instances_scope_matches_the_instance_names() -> None:
    scope = _scope(
        lambda: A100Cluster("gpu", a100._args(backend="gce")),  # type: ignore[arg-type]
        **{a100.POLICY: a100._policy_outputs},
    )
    assert scope == {
        "target": "gpu_cluster",
        "gpu_backend": "gce",
        "worker_count": 4,
        "log_filter": 'labels."compute.googleapis.com/resource_name"=~"^exp-42-a100-"',
        "resource_filter": 'metadata.user_labels.stack="exp-42"',
    }


@pytest.mark.parametrize(
    ("deployment", "nodes", "pattern"),
    [
        ("exp-42", 4, "^exp-42-a100-"),
        ("exp-42", 1, "^exp-42-a100-"),
        ("Exp_42", 2, "^exp-42-a100-"),  # the names gcp_name really gives, not the raw name
        (
            "a-deployment-name-long-enough-to-be-shortened-with-a-hash-x",
            2,
            "^(a-deployment-name-long-enough-to-be-shortened-with-a-h-beed59d8"
            "|a-deployment-name-long-enough-to-be-shortened-with-a-h-5321731a)$",
        ),
    ],
)
def test_instance_name_pattern(deployment: str, nodes: int, pattern: str) -> None:
    names = instance_names(deployment, nodes)
    assert instance_name_pattern(names) == pattern

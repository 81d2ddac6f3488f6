"""Vertex's Reduction Server pool is not a TensorFlow task, whichever variable the cluster
comes from: Vertex lists workerpool2 as `ps` in TF_CONFIG (gcp-facts 3.2), and the bundled
MultiWorkerMirrored trainer must still train, asking TensorFlow for NCCL all-reduce on GPUs."""

from __future__ import annotations

import json

import pytest

from trainstack.trainers.common.cluster import resolve_cluster
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.tf_multiworker.cluster import (
    TFCluster,
    all_reduce_implementation,
    tf_cluster,
)
from trainstack.trainers.tf_multiworker.launch import check_topology, main

HOSTS = {
    "workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
    "workerpool1": ["cmle-training-workerpool1-ab12-0:2222"],
    "workerpool2": [
        "cmle-training-workerpool2-ab12-0:2222",
        "cmle-training-workerpool2-ab12-1:2222",
    ],
}
JOB = {
    "worker_pool_specs": [
        {"python_package_spec": {"python_module": "trainstack.trainers.node"}},
        {"python_package_spec": {"python_module": "trainstack.trainers.node"}},
        {
            "container_spec": {
                "image_uri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
            }
        },
    ]
}
TF_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps"}


def _env(pool: str, index: int, job: dict[str, object] = JOB) -> dict[str, str]:
    """Both variables, as Vertex sets them on a distributed job's replica."""
    task = {"type": pool, "index": index}
    return {
        "CLUSTER_SPEC": json.dumps(
            {"cluster": HOSTS, "environment": "cloud", "task": task, "job": job}
        ),
        "TF_CONFIG": json.dumps(
            {
                "cluster": {TF_ROLES[p]: h for p, h in HOSTS.items()},
                "task": {"type": TF_ROLES[pool], "index": index},
                "environment": "cloud",
            }
        ),
    }


def _cluster(env: dict[str, str]) -> TFCluster:
    return tf_cluster(env, resolve_cluster(env))


def test_tf_config_ps_pool_is_dropped_when_it_runs_reduction_server() -> None:
    chief = _cluster(_env("workerpool0", 0))
    assert chief == TFCluster(
        {
            "cluster": {
                "chief": ["cmle-training-workerpool0-ab12-0:2222"],
                "worker": ["cmle-training-workerpool1-ab12-0:2222"],
            },
            "task": {"type": "chief", "index": 0},
            "environment": "cloud",
        },
        "chief",
        0,
        2,
        0,
        True,
    )
    reducer = _cluster(_env("workerpool2", 1))
    assert (reducer.task_type, reducer.task_index, reducer.ps) == ("reducer", 1, 0)


def test_a_real_ps_pool_stays_a_ps_pool() -> None:
    job = {"worker_pool_specs": [{}, {}, {"python_package_spec": {"python_module": "x"}}]}
    worker = _cluster(_env("workerpool1", 0, job))
    assert (worker.task_type, worker.ps, worker.reduction_server) == ("worker", 2, False)
    assert worker.tf_config is not None
    assert sorted(worker.tf_config["cluster"]) == ["chief", "ps", "worker"]


def test_cluster_spec_alone_gives_the_same_cluster() -> None:
    env = _env("workerpool1", 0)
    del env["TF_CONFIG"]
    worker = _cluster(env)
    assert worker.tf_config == {
        "cluster": {
            "chief": ["cmle-training-workerpool0-ab12-0:2222"],
            "worker": ["cmle-training-workerpool1-ab12-0:2222"],
        },
        "task": {"type": "worker", "index": 0},
    }
    assert (worker.workers, worker.ps, worker.reduction_server) == (2, 0, True)


def test_nccl_only_for_reduction_server_on_gpus() -> None:
    assert all_reduce_implementation(True, 8) == "NCCL"
    assert all_reduce_implementation(True, 0) == "AUTO"
    assert all_reduce_implementation(False, 8) == "AUTO"


def test_reducer_replica_idles_and_trainers_pass_the_topology_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = TrainConfig(framework="tensorflow", strategy="multi_worker_mirrored")
    for pool in ("workerpool0", "workerpool1"):
        env = _env(pool, 0)
        check_topology(cfg, _cluster(env), resolve_cluster(env))
    for name in ("TF_CONFIG", "CLUSTER_SPEC"):
        monkeypatch.delenv(name, raising=False)
    for name, value in _env("workerpool2", 0).items():
        monkeypatch.setenv(name, value)
    assert main(["--framework=tensorflow", "--strategy=multi_worker_mirrored"]) == 0
    out = capsys.readouterr().out
    assert out == (
        '{"event": "idle", "role": "reducer", "index": 0, '
        '"reason": "reducer tasks have no part in multi_worker_mirrored", '
        '"severity": "INFO"}\n'
    )

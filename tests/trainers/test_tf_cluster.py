"""The TensorFlow trainer's decisions that need no TensorFlow: which TF_CONFIG each launch shape
gets, what a TPU resolver connects to, the local processes of each strategy, and the tasks
that exit before TensorFlow loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from trainstack.trainers.common.cluster import resolve_cluster
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.schedule import learning_rate
from trainstack.trainers.local import local_processes, tf_cluster_tasks
from trainstack.trainers.tf_multiworker.cluster import (
    TFCluster,
    simulated_tpu_chips,
    tf_cluster,
    tpu_target,
)
from trainstack.trainers.tf_multiworker.launch import main

_VERTEX_CLUSTER = {
    "workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
    "workerpool1": [
        "cmle-training-workerpool1-ab12-0:2222",
        "cmle-training-workerpool1-ab12-1:2222",
    ],
    "workerpool2": ["cmle-training-workerpool2-ab12-0:2222"],
}


def _cluster(env: dict[str, str]) -> TFCluster:
    return tf_cluster(env, resolve_cluster(env))


def test_tf_config_is_used_as_given() -> None:
    spec = {
        "cluster": {
            "chief": ["c:2222"],
            "worker": ["w0:2222", "w1:2222"],
            "ps": ["p0:2222"],
        },
        "task": {"type": "worker", "index": 1, "trial": "7"},
        "environment": "cloud",
    }
    tfc = _cluster({"TF_CONFIG": json.dumps(spec)})
    assert tfc == TFCluster(spec, "worker", 1, 3, 1)
    assert not tfc.is_chief
    assert tfc.chief_address == "c:2222"
    chief = _cluster({"TF_CONFIG": json.dumps({**spec, "task": {"type": "chief", "index": 0}})})
    assert chief.is_chief


def test_workers_only_tf_config_makes_worker_0_the_chief() -> None:
    spec = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}
    tfc = _cluster({"TF_CONFIG": json.dumps(spec)})
    assert (tfc.is_chief, tfc.workers, tfc.ps, tfc.chief_address) == (True, 2, 0, "a:1")


def test_vertex_cluster_spec_alone_becomes_tf_config() -> None:
    env = {
        "CLUSTER_SPEC": json.dumps(
            {"cluster": _VERTEX_CLUSTER, "task": {"type": "workerpool1", "index": 1}}
        )
    }
    assert _cluster(env) == TFCluster(
        {
            "cluster": {
                "chief": ["cmle-training-workerpool0-ab12-0:2222"],
                "worker": [
                    "cmle-training-workerpool1-ab12-0:2222",
                    "cmle-training-workerpool1-ab12-1:2222",
                ],
                "ps": ["cmle-training-workerpool2-ab12-0:2222"],
            },
            "task": {"type": "worker", "index": 1},
        },
        "worker",
        1,
        3,
        1,
    )


def test_vertex_reduction_server_pool_is_not_a_parameter_server() -> None:
    job = {
        "worker_pool_specs": [
            {},
            {},
            {"container_spec": {"image_uri": "us-docker.pkg.dev/x/reductionserver:latest"}},
        ]
    }
    spec = {"cluster": _VERTEX_CLUSTER, "job": job}
    chief = _cluster(
        {"CLUSTER_SPEC": json.dumps({**spec, "task": {"type": "workerpool0", "index": 0}})}
    )
    assert chief.tf_config is not None
    assert sorted(chief.tf_config["cluster"]) == ["chief", "worker"]
    assert (chief.task_type, chief.ps, chief.is_chief) == ("chief", 0, True)
    reducer = _cluster(
        {"CLUSTER_SPEC": json.dumps({**spec, "task": {"type": "workerpool2", "index": 0}})}
    )
    assert reducer.task_type == "reducer"


def test_gke_indexed_job_addresses_every_pod() -> None:
    env = {
        "JOB_COMPLETION_INDEX": "1",
        "TRAINSTACK_NUM_NODES": "3",
        "JOB_NAME": "train",
        "TRAINSTACK_HEADLESS_SERVICE": "train-svc",
        "TRAINSTACK_COORDINATOR_PORT": "2222",
    }
    assert _cluster(env).tf_config == {
        "cluster": {
            "worker": ["train-0.train-svc:2222", "train-1.train-svc:2222", "train-2.train-svc:2222"]
        },
        "task": {"type": "worker", "index": 1},
    }


def test_multi_node_shapes_without_a_host_list_are_refused() -> None:
    gke = {
        "JOB_COMPLETION_INDEX": "0",
        "TRAINSTACK_NUM_NODES": "2",
        "TRAINSTACK_COORDINATOR": "10.0.0.2",
    }
    with pytest.raises(
        ValueError,
        match=r"^a multi-pod TensorFlow job on GKE needs JOB_NAME and "
        r"TRAINSTACK_HEADLESS_SERVICE to address every pod \(or TF_CONFIG\)$",
    ):
        _cluster(gke)
    gce = {
        "TRAINSTACK_NODE_RANK": "0",
        "TRAINSTACK_NUM_NODES": "2",
        "TRAINSTACK_COORDINATOR": "10.0.0.2",
    }
    with pytest.raises(
        ValueError,
        match=r"^a 2-node TensorFlow job on gce needs TF_CONFIG listing every worker "
        r"\(TRAINSTACK_COORDINATOR names only the first\)$",
    ):
        _cluster(gce)


def test_tpu_vm_hosts_and_single_process() -> None:
    env = {"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "t-w-0,t-w-1"}
    assert _cluster(env).tf_config == {
        "cluster": {"worker": ["t-w-0:29500", "t-w-1:29500"]},
        "task": {"type": "worker", "index": 1},
    }
    assert _cluster({}) == TFCluster(None, "worker", 0, 1, 0)
    assert _cluster({}).is_chief


@pytest.mark.parametrize(
    ("env", "target"),
    [
        ({}, "local"),
        ({"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "t-w-0"}, "local"),
        (
            {"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "t-w-0, t-w-1"},
            "grpc://t-w-0:8470,grpc://t-w-1:8470",
        ),
        ({"TPU_NAME": "my-slice", "TPU_WORKER_HOSTNAMES": "a,b"}, "my-slice"),
    ],
)
def test_tpu_target(env: dict[str, str], target: str) -> None:
    assert tpu_target(env) == target


def _tf(strategy: str) -> TrainConfig:
    return TrainConfig(framework="tensorflow", strategy=strategy)  # type: ignore[arg-type]


def _configs(processes: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(p.env["TF_CONFIG"]) for p in processes]


def test_local_multi_worker_processes(tmp_path: Path) -> None:
    config = tmp_path / "run.json"
    procs = local_processes(_tf("multi_worker_mirrored"), 2, config)
    argv = [sys.executable, "-m", "trainstack.trainers.tf_multiworker", "--config", str(config)]
    assert [p.argv for p in procs] == [argv, argv]
    specs = _configs(procs)
    assert [s["task"] for s in specs] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    cluster = specs[0]["cluster"]
    assert specs[1]["cluster"] == cluster and list(cluster) == ["worker"]
    hosts = cluster["worker"]
    assert len(set(hosts)) == 2 and all(h.startswith("127.0.0.1:") for h in hosts)


def test_local_parameter_server_processes(tmp_path: Path) -> None:
    procs = local_processes(_tf("parameter_server"), 2, tmp_path / "run.json")
    specs = _configs(procs)
    assert [s["task"] for s in specs] == [
        {"type": "chief", "index": 0},
        {"type": "ps", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    cluster = specs[0]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"chief": 1, "ps": 1, "worker": 2}
    assert len({h for hosts in cluster.values() for h in hosts}) == 4
    assert tf_cluster_tasks("parameter_server", 1) == [("chief", 0), ("ps", 0), ("worker", 0)]


def test_local_mirrored_is_one_process_with_cpu_replicas(tmp_path: Path) -> None:
    (proc,) = local_processes(_tf("mirrored"), 3, tmp_path / "run.json")
    assert proc.env == {"TRAINSTACK_TF_CPU_REPLICAS": "3"}


def test_local_tpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"^trainer.strategy 'tpu' needs a Cloud TPU VM and cannot run locally; local "
        r"runs support mirrored, multi_worker_mirrored and parameter_server$",
    ):
        local_processes(_tf("tpu"), 1, tmp_path / "run.json")


_TF = ["--framework=tensorflow"]


@pytest.mark.parametrize(
    ("env", "args", "code", "out", "err"),
    [
        (
            {},
            ["--strategy=ddp"],
            2,
            "",
            "trainstack trainer: trainer.framework is 'torch'; trainstack.trainers.tf_multiworker runs "
            "'tensorflow' only\n",
        ),
        (
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {}})},
            [*_TF, "--strategy=mirrored"],
            2,
            "",
            "trainstack trainer: TF_CONFIG: task.type is missing\n",
        ),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker"}}
                )
            },
            [*_TF, "--strategy=mirrored"],
            2,
            "",
            "trainstack trainer: strategy 'mirrored' runs on one machine but the cluster has "
            "2 workers; use 'multi_worker_mirrored' for several machines\n",
        ),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "worker"}}
                )
            },
            [*_TF, "--strategy=multi_worker_mirrored"],
            2,
            "",
            "trainstack trainer: the cluster has 1 ps task(s), which multi_worker_mirrored "
            "does not use; use 'parameter_server' or drop the ps pool\n",
        ),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker"}}
                )
            },
            [*_TF, "--strategy=parameter_server"],
            2,
            "",
            "trainstack trainer: strategy 'parameter_server' needs a TF_CONFIG cluster with "
            "chief, ps and worker tasks; missing: chief, ps\n",
        ),
        (
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})},
            [*_TF, "--strategy=tpu"],
            2,
            "",
            "trainstack trainer: strategy 'tpu' runs on a Cloud TPU VM (TPU_WORKER_ID set), "
            "not on vertex\n",
        ),
        (
            {"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "t-w-0,t-w-1"},
            [*_TF, "--strategy=tpu"],
            0,
            '{"event": "idle", "role": "worker", "index": 1, '
            '"reason": "TPU worker 0 drives the slice", "severity": "INFO"}\n',
            "",
        ),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}
                )
            },
            [*_TF, "--strategy=multi_worker_mirrored"],
            0,
            '{"event": "idle", "role": "evaluator", "index": 0, '
            '"reason": "evaluator tasks are not used by the bundled trainer", '
            '"severity": "INFO"}\n',
            "",
        ),
        (
            {
                "CLUSTER_SPEC": json.dumps(
                    {
                        "cluster": _VERTEX_CLUSTER,
                        "task": {"type": "workerpool2", "index": 0},
                        "job": {
                            "worker_pool_specs": [
                                {},
                                {},
                                {"container_spec": {"image_uri": "x/reductionserver:1"}},
                            ]
                        },
                    }
                )
            },
            [*_TF, "--strategy=multi_worker_mirrored"],
            0,
            '{"event": "idle", "role": "reducer", "index": 0, '
            '"reason": "reducer tasks have no part in multi_worker_mirrored", '
            '"severity": "INFO"}\n',
            "",
        ),
    ],
)
def test_launch_decides_before_loading_tensorflow(
    env: dict[str, str],
    args: list[str],
    code: int,
    out: str,
    err: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("TF_CONFIG", "CLUSTER_SPEC", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(args) == code
    assert capsys.readouterr() == (out, err)
    assert "tensorflow" not in sys.modules


def test_simulated_tpu_chips() -> None:
    assert simulated_tpu_chips({}) is None
    assert simulated_tpu_chips({"TRAINSTACK_SIMULATED_ACCELERATORS": " "}) is None
    assert simulated_tpu_chips({"TRAINSTACK_SIMULATED_ACCELERATORS": "4"}) == 4
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError) as info:
            simulated_tpu_chips({"TRAINSTACK_SIMULATED_ACCELERATORS": bad})
        assert str(info.value) == (
            f"TRAINSTACK_SIMULATED_ACCELERATORS: {bad!r} is not an integer >= 1"
        )


def test_a_malformed_simulated_chip_count_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("TF_CONFIG", "CLUSTER_SPEC", "TPU_WORKER_HOSTNAMES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    monkeypatch.setenv("TRAINSTACK_SIMULATED_ACCELERATORS", "0")
    assert main([*_TF, "--strategy=tpu"]) == 2
    assert capsys.readouterr() == (
        "",
        "trainstack trainer: TRAINSTACK_SIMULATED_ACCELERATORS: '0' is not an integer >= 1\n",
    )
    assert "tensorflow" not in sys.modules


def test_both_trainers_use_the_one_schedule() -> None:
    from trainstack.trainers.torch_ddp import train as torch_train

    assert torch_train.learning_rate is learning_rate
    cfg = TrainConfig(steps=50, warmup_steps=10, learning_rate=0.02)
    rates = [learning_rate(cfg, step) for step in (0, 9, 10, 30, 60)]
    # warmup 1/10 .. 10/10 of the peak, cosine from the peak, a tenth of it at the end
    assert rates == pytest.approx([0.002, 0.02, 0.02, 0.011, 0.002], rel=1e-12)


def test_tensorflow_strategy_defaults_to_multi_worker_mirrored() -> None:
    assert TrainConfig(framework="tensorflow").strategy == "multi_worker_mirrored"
    assert TrainConfig().strategy == "ddp"
    with pytest.raises(ValueError, match="strategy 'ddp' is not a tensorflow strategy; valid: "):
        TrainConfig(framework="tensorflow", strategy="ddp")

"""Every documented launch environment resolves to the right place in the job."""

from __future__ import annotations

import json

import pytest

from trainstack.trainers.common.cluster import ClusterInfo, resolve_cluster

# Shapes as Vertex documents them (gcp-facts 3.3): chief in workerpool0, 2 workers in
# workerpool1, a Reduction Server in workerpool2, an evaluator in workerpool3.
_VERTEX_CLUSTER = {
    "workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
    "workerpool1": [
        "cmle-training-workerpool1-ab12-0:2222",
        "cmle-training-workerpool1-ab12-1:2222",
    ],
    "workerpool2": ["cmle-training-workerpool2-ab12-0:2222"],
    "workerpool3": ["cmle-training-workerpool3-ab12-0:2222"],
}
_REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
_VERTEX_JOB = {
    "worker_pool_specs": [
        {"machine_spec": {"machine_type": "a2-highgpu-8g"}, "replica_count": 1},
        {"machine_spec": {"machine_type": "a2-highgpu-8g"}, "replica_count": 2},
        {
            "machine_spec": {"machine_type": "n1-highcpu-16"},
            "replica_count": 1,
            "container_spec": {"image_uri": _REDUCTION_SERVER_IMAGE},
        },
    ]
}


def _cluster_spec(pool: str, index: int, *, trial: str | None = None, job: bool = True) -> str:
    task: dict[str, object] = {"type": pool, "index": index}
    if trial:
        task["trial"] = trial
    spec = {"cluster": _VERTEX_CLUSTER, "environment": "cloud", "task": task}
    if job:
        spec["job"] = _VERTEX_JOB
    return json.dumps(spec)


def _tf_config(task_type: str, index: int, trial: str | None = None) -> str:
    task: dict[str, object] = {"type": task_type, "index": index, "cloud": "abc"}
    if trial:
        task["trial"] = trial
    return json.dumps(
        {
            "cluster": {
                "chief": ["cmle-training-workerpool0-ab12-0:2222"],
                "worker": [
                    "cmle-training-workerpool1-ab12-0:2222",
                    "cmle-training-workerpool1-ab12-1:2222",
                ],
                "ps": ["cmle-training-workerpool2-ab12-0:2222"],
            },
            "task": task,
            "job": {},
            "environment": "cloud",
        }
    )


_VERTEX_HOST = "cmle-training-workerpool0-ab12-0"

CASES: list[tuple[str, dict[str, str], dict[str, object]]] = [
    ("empty", {}, {"rank": 0, "world_size": 1, "platform": "local_single", "role": "chief"}),
    (
        "torchrun two nodes",
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "10.0.0.2",
            "MASTER_PORT": "29400",
        },
        {
            "rank": 5,
            "world_size": 8,
            "local_rank": 1,
            "local_world_size": 4,
            "node_rank": 1,
            "num_nodes": 2,
            "coordinator_address": "10.0.0.2",
            "coordinator_port": 29400,
            "role": "worker",
            "platform": "torchrun",
        },
    ),
    (
        "torchrun inside a Vertex trial keeps the trial id",
        {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "2",
            "CLUSTER_SPEC": _cluster_spec("workerpool0", 0, trial="7"),
        },
        {"rank": 0, "world_size": 2, "role": "chief", "platform": "torchrun", "trial_id": "7"},
    ),
    (
        # Vertex sets RANK/WORLD_SIZE per node without LOCAL_RANK: CLUSTER_SPEC decides.
        "vertex chief with node-level RANK",
        {
            "RANK": "0",
            "WORLD_SIZE": "3",
            "MASTER_ADDR": _VERTEX_HOST,
            "MASTER_PORT": "2222",
            "CLUSTER_SPEC": _cluster_spec("workerpool0", 0),
        },
        {
            "rank": 0,
            "world_size": 3,
            "node_rank": 0,
            "num_nodes": 3,
            "coordinator_address": _VERTEX_HOST,
            "coordinator_port": 2222,
            "role": "chief",
            "platform": "vertex",
            "trial_id": None,
        },
    ),
    (
        "vertex worker 1",
        {"CLUSTER_SPEC": _cluster_spec("workerpool1", 1, trial="3")},
        {
            "rank": 2,
            "world_size": 3,
            "node_rank": 2,
            "num_nodes": 3,
            "role": "worker",
            "platform": "vertex",
            "coordinator_address": _VERTEX_HOST,
            "trial_id": "3",
        },
    ),
    (
        "vertex reduction server",
        {"CLUSTER_SPEC": _cluster_spec("workerpool2", 0)},
        {"role": "reducer", "rank": 0, "world_size": 1, "platform": "vertex"},
    ),
    (
        "vertex parameter server (no reduction server image)",
        {"CLUSTER_SPEC": _cluster_spec("workerpool2", 0, job=False)},
        {"role": "ps", "rank": 0, "platform": "vertex"},
    ),
    (
        "vertex evaluator",
        {"CLUSTER_SPEC": _cluster_spec("workerpool3", 0)},
        {"role": "evaluator", "rank": 0, "platform": "vertex"},
    ),
    (
        "TF_CONFIG chief",
        {"TF_CONFIG": _tf_config("chief", 0, trial="2")},
        {
            "rank": 0,
            "world_size": 3,
            "role": "chief",
            "coordinator_address": _VERTEX_HOST,
            "coordinator_port": 2222,
            "trial_id": "2",
            "platform": "vertex",
        },
    ),
    (
        "TF_CONFIG worker 0 comes after the chief",
        {"TF_CONFIG": _tf_config("worker", 0)},
        {"rank": 1, "world_size": 3, "role": "worker", "node_rank": 1},
    ),
    ("TF_CONFIG ps", {"TF_CONFIG": _tf_config("ps", 0)}, {"role": "ps", "rank": 0}),
    (
        "TF_CONFIG evaluator",
        {"TF_CONFIG": _tf_config("evaluator", 0)},
        {"role": "evaluator", "rank": 0},
    ),
    (
        "GKE indexed job pod 3",
        {
            "JOB_COMPLETION_INDEX": "3",
            "TRAINSTACK_NUM_NODES": "4",
            "JOB_NAME": "train",
            "TRAINSTACK_HEADLESS_SERVICE": "train-svc",
        },
        {
            "rank": 3,
            "world_size": 4,
            "node_rank": 3,
            "num_nodes": 4,
            "coordinator_address": "train-0.train-svc",
            "coordinator_port": 29500,
            "role": "worker",
            "platform": "gke",
        },
    ),
    (
        "GKE with explicit coordinator and port",
        {
            "JOB_COMPLETION_INDEX": "0",
            "TRAINSTACK_NUM_NODES": "2",
            "TRAINSTACK_COORDINATOR": "10.1.0.5:1234",
        },
        {"rank": 0, "coordinator_address": "10.1.0.5", "coordinator_port": 1234, "role": "chief"},
    ),
    (
        "TPU VM worker 2 of 4",
        {
            "TPU_WORKER_ID": "2",
            "TPU_WORKER_HOSTNAMES": "t1k-w-0,t1k-w-1,t1k-w-2,t1k-w-3",
            "TRAINSTACK_COORDINATOR_PORT": "8476",
        },
        {
            "rank": 2,
            "world_size": 4,
            "coordinator_address": "t1k-w-0",
            "coordinator_port": 8476,
            "platform": "tpu_vm",
            "role": "worker",
        },
    ),
    (
        # What GKE gives the pod of slice 1, worker 1 of a 2 x 2-host JobSet: the Indexed
        # Job's JOB_COMPLETION_INDEX, the TPU webhook's TPU_WORKER_* for its slice and
        # MEGASCALE_* from JobSet's labels (components/_tpu_jobset.py); no TRAINSTACK_NUM_NODES.
        "GKE TPU JobSet pod, slice 1 worker 1 of 2 x 2",
        {
            "JOB_COMPLETION_INDEX": "1",
            "TPU_WORKER_ID": "1",
            "TPU_WORKER_HOSTNAMES": "exp-tpu-slice-1-0.exp-tpu,exp-tpu-slice-1-1.exp-tpu",
            "MEGASCALE_NUM_SLICES": "2",
            "MEGASCALE_SLICE_ID": "1",
            "MEGASCALE_COORDINATOR_ADDRESS": "exp-tpu-slice-0-0.exp-tpu",
        },
        {
            "rank": 3,
            "world_size": 4,
            "node_rank": 3,
            "num_nodes": 4,
            "coordinator_address": "exp-tpu-slice-0-0.exp-tpu",
            "coordinator_port": 29500,
            "platform": "tpu_vm",
            "role": "worker",
        },
    ),
    (
        "GKE TPU JobSet pod, one slice: MEGASCALE_* empty (no such labels)",
        {
            "JOB_COMPLETION_INDEX": "0",
            "TPU_WORKER_ID": "0",
            "TPU_WORKER_HOSTNAMES": "exp-tpu-slice-0-0.exp-tpu,exp-tpu-slice-0-1.exp-tpu",
            "MEGASCALE_NUM_SLICES": "",
            "MEGASCALE_SLICE_ID": "",
        },
        {
            "rank": 0,
            "world_size": 2,
            "coordinator_address": "exp-tpu-slice-0-0.exp-tpu",
            "platform": "tpu_vm",
            "role": "chief",
        },
    ),
    (
        "GCE startup script",
        {
            "TRAINSTACK_NODE_RANK": "1",
            "TRAINSTACK_NUM_NODES": "2",
            "TRAINSTACK_COORDINATOR": "a100-node-0",
        },
        {
            "rank": 1,
            "world_size": 2,
            "coordinator_address": "a100-node-0",
            "coordinator_port": 29500,
            "platform": "gce",
            "role": "worker",
        },
    ),
]


@pytest.mark.parametrize(("env", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_resolves(env: dict[str, str], expected: dict[str, object]) -> None:
    info = resolve_cluster(env)
    assert isinstance(info, ClusterInfo)
    actual = {key: getattr(info, key) for key in expected}
    assert actual == expected


ERRORS: list[tuple[dict[str, str], str]] = [
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, r"RANK=2 must be in \[0, WORLD_SIZE=2\)"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK must be an integer, got 'x'"),
    (
        {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        "WORLD_SIZE=3 is not a multiple of LOCAL_WORLD_SIZE=2",
    ),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
        "LOCAL_RANK=2 must be in",
    ),
    ({"CLUSTER_SPEC": "{not json"}, "CLUSTER_SPEC is not valid JSON"),
    ({"CLUSTER_SPEC": _cluster_spec("workerpool1", 2)}, "CLUSTER_SPEC task.index=2"),
    (
        {
            "CLUSTER_SPEC": json.dumps(
                {"cluster": {"workerpool0": []}, "task": {"type": "workerpool0"}}
            )
        },
        "workerpool0 must hold exactly one host",
    ),
    ({"TF_CONFIG": _tf_config("driver", 0)}, "TF_CONFIG: task.type 'driver'"),
    (
        {"JOB_COMPLETION_INDEX": "4", "TRAINSTACK_NUM_NODES": "4"},
        r"JOB_COMPLETION_INDEX=4 must be in \[0, TRAINSTACK_NUM_NODES=4\)",
    ),
    ({"JOB_COMPLETION_INDEX": "0"}, "TRAINSTACK_NUM_NODES is required"),
    (
        {"JOB_COMPLETION_INDEX": "1", "TRAINSTACK_NUM_NODES": "2"},
        "JOB_NAME and TRAINSTACK_HEADLESS",
    ),
    ({"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "a,b"}, "TPU_WORKER_ID=2 must be in"),
    (
        {"TPU_WORKER_ID": "0", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "2"},
        r"MEGASCALE_SLICE_ID=2 must be in \[0, MEGASCALE_NUM_SLICES=2\)",
    ),
    (
        {"TPU_WORKER_ID": "0", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "0"},
        "MEGASCALE_NUM_SLICES=2 needs MEGASCALE_COORDINATOR_ADDRESS",
    ),
    (
        {"TRAINSTACK_NODE_RANK": "1", "TRAINSTACK_NUM_NODES": "2"},
        "TRAINSTACK_COORDINATOR is required",
    ),
]


@pytest.mark.parametrize(("env", "message"), ERRORS)
def test_inconsistent_env_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_cluster(env)

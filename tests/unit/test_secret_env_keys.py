"""Secret `--env` values of the node launcher's arguments reach no hash others can list
(`trainstack.components._node_args.keyed_node_args`): each component that takes `node_args`
takes `secret_env_names` and keys its run, request id or spec label on the names only."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components import gpu_startup
from trainstack.components._job_launch import job_launch
from trainstack.components._node_args import keyed_node_args, secret_env_names_problems
from trainstack.components._vertex_args import vertex_training_job_problems
from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.components.kubernetes_training_job import validate_args as validate_job_args
from trainstack.components.startup.tpu_worker import slice_run_record
from trainstack.trainers.common.run_records import RUN_RECORD_ENV

ARGS = [
    "--launcher=node",
    "--env=TRAINSTACK_RUN_NAME=r1",
    "--env=DB_PASSWORD=hunter2",
    "--env=WANDB_MODE=offline",
    "--",
    "python",
    "train.py",
    "--env=DB_PASSWORD=kept",
]


def _with(password: str) -> list[str]:
    return [a.replace("hunter2", password) for a in ARGS]


def test_keyed_node_args_leave_out_the_secret_values_before_the_entrypoint_only() -> None:
    assert keyed_node_args(ARGS, ["DB_PASSWORD"]) == [
        "--launcher=node",
        "--env=TRAINSTACK_RUN_NAME=r1",
        "--env=DB_PASSWORD",
        "--env=WANDB_MODE=offline",
        "--",
        "python",
        "train.py",
        "--env=DB_PASSWORD=kept",  # your entrypoint's own argument, not the launcher's
    ]
    assert keyed_node_args(ARGS, ()) == ARGS
    with pytest.raises(ValueError) as raised:
        keyed_node_args(ARGS, ["DB_PASSWORD", "HF_TOKEN"])
    assert str(raised.value) == (
        "secret_env_names: 'HF_TOKEN' is set by no --env=NAME=VALUE of node_args; valid: the "
        "names of node_args' --env values that are secrets"
    )


def test_each_launch_keys_its_run_on_the_secrets_names() -> None:
    gce = {
        "package_uri": "gs://b/code/c.tar.gz",
        "module": None,
        "trainer_args": [],
        "num_nodes": 2,
        "procs_per_node": 8,
        "coordinator": "exp-a100-0",
    }
    keys = {
        gpu_startup.gce_run_key(**gce, node_args=_with(p), secret_env_names=["DB_PASSWORD"])
        for p in ("hunter2", "rotated")
    }
    plain = gpu_startup.gce_run_key(**gce, node_args=ARGS)
    assert len(keys) == 1 and plain not in keys
    tpu = {
        "slice_name": "exp-tpu",
        "package_uri": "gs://b/code/c.tar.gz",
        "trainer_module": "trainstack.trainers.tf_multiworker",
        "trainer_args": [],
        "checkpoint_dir": "gs://ckpt/checkpoints/r1",
    }
    records = {
        slice_run_record(**tpu, node_args=_with(p), secret_env_names=["DB_PASSWORD"])
        for p in ("hunter2", "rotated")
    }
    assert len(records) == 1 and slice_run_record(**tpu, node_args=ARGS) not in records
    job: dict[str, Any] = {"node_count": 2, "gpus_per_node": 8, "run_records": True}
    pods = {
        job_launch(
            {**job, "secret_env_names": ["DB_PASSWORD"]}, "gs://b/c.tar.gz", "gs://ckpt", _with(p)
        )[1][RUN_RECORD_ENV]
        for p in ("hunter2", "rotated")
    }
    assert len(pods) == 1
    argv, env = job_launch(job, "gs://b/c.tar.gz", "gs://ckpt", ARGS)
    assert env[RUN_RECORD_ENV] not in pods
    assert "--env=DB_PASSWORD=hunter2" in argv  # the pods still get the value


SECRET_WITHOUT_CODE = (
    "secret_env_names: names --env values of node_args, which is not given; valid: node_args, "
    "or no secret_env_names"
)
NOT_A_NAME = (
    "secret_env_names[0]: '1X' is not an environment variable name; valid: letters, digits "
    "and '_', not starting with a digit"
)


def test_every_component_checks_its_secret_env_names_alike() -> None:
    assert secret_env_names_problems({"secret_env_names": ["DB_PASSWORD"]}) == [SECRET_WITHOUT_CODE]
    assert secret_env_names_problems({"node_args": ARGS, "secret_env_names": ["1X"]}) == [
        NOT_A_NAME
    ]
    assert secret_env_names_problems({"node_args": ARGS, "secret_env_names": "DB"}) == [
        "secret_env_names: 'DB' is not a list; valid: a list of --env names in node_args"
    ]
    vertex = {
        "region": "us-central1",
        "display_name": "exp",
        "machine_type": "a2-highgpu-8g",
        "replica_count": 2,
        "package_uri": "gs://b/c.tar.gz",
        "secret_env_names": ["DB_PASSWORD"],
    }
    assert vertex_training_job_problems(vertex) == [SECRET_WITHOUT_CODE]
    with pytest.raises(ValueError) as raised:
        validate_job_args(
            {
                "job_name": "exp",
                "node_count": 2,
                "gpus_per_node": 8,
                "package_uri": "gs://b/c.tar.gz",
                "node_args": ARGS,
                "secret_env_names": ["1X"],
            }
        )
    assert str(raised.value) == NOT_A_NAME
    cluster = {
        "project": "p",
        "zone": "us-central1-a",
        "deployment_name": "exp",
        "machine_type": "a2-highgpu-8g",
        "network_self_link": "n",
        "subnetwork_self_link": "s",
        "node_tag": "t",
        "service_account_email": "sa@p.iam.gserviceaccount.com",
        "backend": "gce",
        "training": {"package_uri": "gs://b/c.tar.gz", "secret_env_names": ["DB_PASSWORD"]},
    }
    assert a100_cluster_problems(cluster, prefix="") == [f"training.{SECRET_WITHOUT_CODE}"]

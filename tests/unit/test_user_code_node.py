"""Your code on a node: the variables `launcher: node` adds (JAX's coordinator and process
count, TF_CONFIG), what it leaves to the platform (TPU VMs, Vertex's TF_CONFIG and folders),
and `secret_env` read from Secret Manager over real HTTP, never logged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.secret_manager import TOKEN, TOKEN_PATH, SecretManagerFake
from trainstack.trainers.common.cluster import resolve_cluster
from trainstack.trainers.node import node_command, parse_args
from trainstack.trainers.user_code import user_code_env

REPO = Path(__file__).resolve().parents[2]
GCE = {
    "TRAINSTACK_NODE_RANK": "1",
    "TRAINSTACK_NUM_NODES": "2",
    "TRAINSTACK_COORDINATOR": "10.0.0.2:8476",
}


def test_launcher_node_gives_jax_and_tensorflow_their_cluster() -> None:
    env = {**GCE, "TRAINSTACK_WORKER_HOSTS": "10.0.0.2,10.0.0.3"}
    added = user_code_env(
        env, resolve_cluster(env), launcher="node", gpus=8, plain_env={"WANDB_MODE": "offline"}
    )
    assert added == {
        "WANDB_MODE": "offline",
        # jax.distributed.initialize() reads the coordinator itself and the process count and
        # id from the Open MPI shape (jax/_src/clusters/ompi_cluster.py).
        "JAX_COORDINATOR_ADDRESS": "10.0.0.2:8476",
        "OMPI_MCA_orte_hnp_uri": "0.0;tcp://10.0.0.2:8476",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "JAX_LOCAL_DEVICE_IDS": "0,1,2,3,4,5,6,7",
        "TF_CONFIG": json.dumps(
            {
                "cluster": {"worker": ["10.0.0.2:2222", "10.0.0.3:2222"]},
                "task": {"type": "worker", "index": 1},
            }
        ),
    }


def test_gke_pods_name_their_tf_workers() -> None:
    env = {
        "JOB_COMPLETION_INDEX": "0",
        "TRAINSTACK_NUM_NODES": "2",
        "JOB_NAME": "train",
        "TRAINSTACK_HEADLESS_SERVICE": "train-svc",
    }
    added = user_code_env(env, resolve_cluster(env), launcher="node", gpus=0, plain_env={})
    assert json.loads(added["TF_CONFIG"])["cluster"] == {
        "worker": ["train-0.train-svc:2222", "train-1.train-svc:2222"]
    }
    assert "JAX_LOCAL_DEVICE_IDS" not in added


def test_tpu_vms_keep_jax_own_detection_and_torchrun_adds_nothing() -> None:
    tpu = {"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "w0,w1"}
    assert user_code_env(tpu, resolve_cluster(tpu), launcher="node", gpus=0, plain_env={}) == {}
    assert user_code_env(GCE, resolve_cluster(GCE), launcher="torchrun", gpus=8, plain_env={}) == {}


def test_vertex_folders_and_tf_config_are_the_platforms() -> None:
    spec = {
        "cluster": {"workerpool0": ["cmle-0:2222"], "workerpool1": ["cmle-1:2222"]},
        "task": {"type": "workerpool1", "index": 0},
    }
    env = {
        "CLUSTER_SPEC": json.dumps(spec),
        "TF_CONFIG": '{"platform": "vertex"}',
        "AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints",
        "AIP_MODEL_DIR": "gs://b/job/model",
    }
    added = user_code_env(env, resolve_cluster(env), launcher="node", gpus=0, plain_env={})
    assert "TF_CONFIG" not in added
    assert added["TRAINSTACK_CHECKPOINT_DIR"] == "gs://b/job/checkpoints"
    assert added["TRAINSTACK_OUTPUT_DIR"] == "gs://b/job/model"
    assert added["OMPI_COMM_WORLD_RANK"] == "1"


def test_every_process_runs_through_the_wrapper_with_the_contract() -> None:
    request = parse_args(
        ["--launcher=node", "--source=/src", "--env=A=1", "--", "python", "train.py"]
    )
    command = node_command(request, {**GCE, "TRAINSTACK_SIMULATED_ACCELERATORS": "1"})
    assert command.argv == [
        sys.executable, "-m", "trainstack.trainers.user_code", "--source=/src", "--", "python", "train.py",
    ]  # fmt: skip
    assert (command.env["A"], command.env["TRAINSTACK_NODE_RANK"]) == ("1", "1")


def _node(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainstack.trainers.node", *argv],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env},
        timeout=60,
    )


PRINT_SECRET = "import os; print('got', os.environ['HF_TOKEN'])"


def test_secret_env_is_read_on_the_node_and_never_logged() -> None:
    value = "hf_s3cr3t-value"
    with SecretManagerFake({"projects/p/secrets/hf/versions/latest": value}) as fake:
        env = {
            "TRAINSTACK_SIMULATED_ACCELERATORS": "1",
            "GCE_METADATA_HOST": fake.host,
            "TRAINSTACK_SECRETMANAGER_ENDPOINT": fake.base_url,
        }
        result = _node(
            "--launcher=node",
            "--secret-env=HF_TOKEN=projects/p/secrets/hf",
            "--",
            "python",
            "-c",
            PRINT_SECRET,
            env=env,
        )
    assert result.returncode == 0, result.stderr
    assert f"got {value}" in result.stdout.splitlines()
    assert value not in result.stderr
    assert "trainstack-node: secret_env: read HF_TOKEN" in result.stderr.splitlines()
    (token, access) = fake.requests
    assert (token[0], token[1]["Metadata-Flavor"]) == (TOKEN_PATH, "Google")
    assert access[0] == "/v1/projects/p/secrets/hf/versions/latest:access"
    assert access[1]["Authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("value", "forbidden", "why"),
    [
        ("x", True, "HTTP 403"),  # the identity has no accessor role on it
        (b"\xff\xfe\x00binary", False, "the secret's value is not UTF-8 text"),
    ],
)
def test_a_secret_the_node_cannot_use_stops_it_with_exit_2_naming_it(
    value: str | bytes, forbidden: bool, why: str
) -> None:
    name = "projects/p/secrets/hf/versions/3"
    blocked = frozenset({name}) if forbidden else frozenset()
    with SecretManagerFake({name: value}, forbidden=blocked) as fake:
        env = {
            "TRAINSTACK_SIMULATED_ACCELERATORS": "1",
            "GCE_METADATA_HOST": fake.host,
            "TRAINSTACK_SECRETMANAGER_ENDPOINT": fake.base_url,
        }
        result = _node(
            "--launcher=node", f"--secret-env=HF_TOKEN={name}", "--", "python", "-c", "1", env=env
        )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"trainstack-node: secret_env.HF_TOKEN: could not read {name}: {why}\n"
    )


def test_local_run_takes_secret_env_from_this_environment(tmp_path: Path) -> None:
    from trainstack.trainers.common.user_code import StackTrainer
    from trainstack.trainers.local_code import plan_code_run

    trainer = StackTrainer.model_validate(
        {
            "source": str(tmp_path),
            "entrypoint": ["python", "train.py"],
            "secret_env": {"HF_TOKEN": "projects/p/secrets/hf"},
            "run_name": "mine",
        }
    )
    assert trainer.user_code is not None
    with pytest.raises(ValueError) as missing:
        plan_code_run(trainer, trainer.user_code, workers=2, root=tmp_path, base_dir=tmp_path)
    assert str(missing.value) == (
        "trainer.secret_env.HF_TOKEN: local-run reads secrets from this environment (no "
        "metadata server here to reach projects/p/secrets/hf); valid: export HF_TOKEN before "
        "local-run"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_TOKEN", "hf_local")
        plan = plan_code_run(
            trainer, trainer.user_code, workers=2, root=tmp_path, base_dir=tmp_path
        )
    (process,) = plan.processes
    assert process.env["HF_TOKEN"] == "hf_local"
    # In the environment only: never on the command line.
    assert not any("HF_TOKEN" in arg or "hf_local" in arg for arg in process.argv)

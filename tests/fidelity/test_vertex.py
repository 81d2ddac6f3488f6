"""Vertex AI fidelity: a planned CustomJob, run here the way Vertex runs it.

Each test builds the plan of a Vertex stack with `trainstack.infra.plan.build_plan`, takes the
CustomJob body's workerPoolSpecs and, for every replica, sets the environment Vertex
documents and runs the pool's container `command` + `args` in a fresh container of the
image: the pod setup script downloads the package the plan uploads (from a GCS emulator,
with a fake metadata server's token), installs it into the image's `python3` and execs
`python3 -m trainstack.trainers.node ...` (`tests.fidelity.vertex`, whose docstring lists what differs
from Vertex). GPUs are simulated with `TRAINSTACK_SIMULATED_ACCELERATORS`, as many per
replica as the pool's `machineSpec.acceleratorCount`.

The image is only what the catalog lists for it plus what the package requires (with their
dependencies): the torch run caught that the PyTorch image has no tensorboard, which the
trainer imports on Vertex (AIP_TENSORBOARD_LOG_DIR is always set).

Versions: torch 2.13 here is the torch image's (pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime;
its torch is the CUDA build); Python is 3.11 here (the shared venv's), while that image ships
Python 3.12 (`trainstack.components.catalog.images.TORCH_IMAGE_PYTHON_SOURCE`), so this run does not
prove the torch path on 3.12. TensorFlow is
2.20 here with tf-keras 2.20.1, not the TF image's 2.17.0 (not installable on this offline
machine): the setup script picks tf-keras at the image's TensorFlow minor, so here it asks
for tf-keras 2.20.*, which the layer has.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.components.test_tpu_startup import MetadataServer
from tests.fidelity.nodes import Image, sdist_requires, stage_buckets
from tests.fidelity.vertex import (
    PlannedJob,
    ReplicaRun,
    planned_job,
    run_container_replicas,
    stack_config,
)
from tests.trainers.conftest import REPO
from tests.trainers.local_cli import finish, local_run
from trainstack.components._pod_setup import POD_SCRIPT
from trainstack.components.catalog.images import (
    VERTEX_TRAINING_IMAGES,
    VertexTrainingImage,
    mirror_registry,
    mirrored_image_uri,
)
from trainstack.infra.plan import build_plan
from trainstack.trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV
from trainstack.trainers.common.contract import TF_MODULE, TORCH_MODULE

TWO_BY_TWO = {
    "machine_type": "a2-highgpu-2g",  # 2 x A100 per replica
    "replica_count": 2,
    "reduction_server": {"enabled": False},
}
TRAINER = {"model": "mlp", "dataset": "digits", "steps": 4, "global_batch_size": 32}
# Every GPU replica is told how many GPUs it must find (the simulated ones count here).
GPUS_2 = {"name": "TRAINSTACK_EXPECTED_ACCELERATORS", "value": "2"}
RUNTIME_REQUIRES = [
    "pydantic>=2.7,<3",
    "numpy>=1.26",
    "pyyaml>=6",
    "fsspec>=2024.6",
    "gcsfs>=2024.6",
    "cloudml-hypertune>=0.1.0.dev6",
]


COMMAND = ["bash", "-c", POD_SCRIPT, "trainstack-pod"]


@pytest.fixture
def metadata() -> Iterator[str]:
    """A fake metadata server handing out the replica's token (`GCE_METADATA_HOST`)."""
    with MetadataServer({}) as server:
        yield server.base_url.removeprefix("http://")


def _objects(gcs_emulator: str, url: str) -> list[str]:
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    query = f"{gcs_emulator}/storage/v1/b/{bucket}/o?prefix={prefix}"
    with urllib.request.urlopen(query, timeout=10) as response:
        return sorted(item["name"] for item in json.load(response).get("items", []))


def _events(runs: list[ReplicaRun], event: str) -> list[dict[str, Any]]:
    return [rec for run in runs for rec in run.records() if rec.get("event") == event]


def _explain(runs: list[ReplicaRun]) -> str:
    return "\n".join(
        f"--- replica {r.replica.pool}/{r.replica.index}\n{r.output[-3000:]}" for r in runs
    )


def _stage(job: PlannedJob, storage: str) -> None:
    """The plan's staging bucket with the package at its object name, and the checkpoint
    bucket, in the emulator."""
    staging = job.package_uri.removeprefix("gs://").split("/", 1)[0]
    checkpoints = job.base_output.removeprefix("gs://")
    stage_buckets(storage, [staging, checkpoints], job.package_uri, job.sdist)


def _pulled(image: VertexTrainingImage, stack: str) -> str:
    """The default image as the plan's job pulls it: through the stack's Docker Hub mirror."""
    return mirrored_image_uri(
        image, mirror_registry("us-central1", "fidelity-project", f"{stack}-dockerhub")
    )


def _env(storage: str, metadata: str, gpus: int = 2) -> dict[str, str]:
    return {
        SIMULATED_ACCELERATORS_ENV: str(gpus),
        "STORAGE_EMULATOR_HOST": storage,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "GCE_METADATA_HOST": metadata,
    }


@pytest.mark.trainer
def test_two_replicas_of_two_gpus_train_as_one_world_of_four(
    tmp_path: Path, gcs_emulator: str, metadata: str
) -> None:
    config = stack_config(TWO_BY_TWO, {"framework": "torch", **TRAINER, "checkpoint_every": 2})
    job = planned_job(build_plan("fidelity-torch", config))
    pools = job.job_spec["workerPoolSpecs"]
    assert [(p["replicaCount"], p["machineSpec"]["acceleratorCount"]) for p in pools] == [
        ("1", 2),
        ("1", 2),
    ]
    image = VERTEX_TRAINING_IMAGES[TORCH_MODULE]
    for pool in pools:
        spec = pool["containerSpec"]
        assert (spec["imageUri"], spec["command"]) == (_pulled(image, "fidelity-torch"), COMMAND)
        assert spec["args"][:4] == ["python3", "-m", "trainstack.trainers.node", TORCH_MODULE]
        assert spec["env"] == [GPUS_2, {"name": "TRAINSTACK_PACKAGE_URI", "value": job.package_uri}]
    # The torch image has no tensorboard, which torch.utils.tensorboard imports when
    # AIP_TENSORBOARD_LOG_DIR is set: the package requires it (any version torch accepts).
    assert sdist_requires(job.sdist) == [*RUNTIME_REQUIRES, "tensorboard>=1.15"]
    _stage(job, gcs_emulator)
    container = Image(tmp_path / "image", job.sdist, [*image.packages, "setuptools"])
    runs = run_container_replicas(
        job, container, tmp_path, extra_env=_env(gcs_emulator, metadata), timeout_s=300
    )
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    for node, run in enumerate(runs):
        assert f"trainstack-pod: installing {job.package_uri}" in run.output
        assert f"trainstack-node: node {node} of 2, 2 accelerator(s), 2 process(es): " in run.output
    starts = _events(runs, "start")
    assert sorted((s["rank"], s["node"], s["worker"]) for s in starts) == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert {(s["world_size"], s["platform"], s["per_rank_batch"], s["device"]) for s in starts} == {
        (4, "torchrun", 8, "cpu")
    }
    [done] = _events(runs, "done")
    assert (done["world_size"], done["step"], done["rank"]) == (4, 4, 0)
    # The run's own folder below AIP_CHECKPOINT_DIR, named by the plan's --run_name.
    checkpoints = f"{job.base_output}/checkpoints/fidelity-torch"
    assert done["checkpoint_dir"] == checkpoints
    # Rank 0 wrote them to the plan's checkpoint bucket, where AIP_CHECKPOINT_DIR points.
    assert _objects(gcs_emulator, checkpoints) == [
        "checkpoints/fidelity-torch/step-00000002/COMPLETE",
        "checkpoints/fidelity-torch/step-00000002/state.pt",
        "checkpoints/fidelity-torch/step-00000004/COMPLETE",
        "checkpoints/fidelity-torch/step-00000004/state.pt",
    ]


@pytest.mark.trainer
def test_tensorflow_runs_on_the_tensorflow_image_with_tf_keras_at_its_minor(
    tmp_path: Path, gcs_emulator: str, metadata: str
) -> None:
    trainer = {"framework": "tensorflow", "strategy": "multi_worker_mirrored", **TRAINER}
    job = planned_job(build_plan("fidelity-tf", stack_config(TWO_BY_TWO, trainer)))
    image = VERTEX_TRAINING_IMAGES[TF_MODULE]
    assert (image.uri, image.python_version) == ("tensorflow/tensorflow:2.17.0-gpu", "3.11")
    for pool in job.job_spec["workerPoolSpecs"]:
        spec = pool["containerSpec"]
        assert (spec["imageUri"], spec["command"]) == (_pulled(image, "fidelity-tf"), COMMAND)
        assert spec["args"][:4] == ["python3", "-m", "trainstack.trainers.node", TF_MODULE]
        assert spec["env"] == [
            GPUS_2,
            {"name": "TRAINSTACK_PACKAGE_URI", "value": job.package_uri},
            {"name": "TRAINSTACK_TF_KERAS", "value": "1"},
        ]
    # tf-keras is not a package requirement: the setup script installs it at the image's
    # TensorFlow minor, so a TF image of any version gets its matching Keras 2.
    assert sdist_requires(job.sdist) == RUNTIME_REQUIRES
    _stage(job, gcs_emulator)
    layer = [*image.packages, "tf-keras", "setuptools"]
    runs = run_container_replicas(
        job,
        Image(tmp_path / "image", job.sdist, layer),
        tmp_path,
        extra_env=_env(gcs_emulator, metadata),
        timeout_s=300,
    )
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    for node, run in enumerate(runs):
        assert "trainstack-pod: installing tf-keras==2.20.* without dependencies" in run.output
        # TensorFlow runs once per replica; MultiWorkerMirrored uses the replica's GPUs itself
        # (on CPU, one device per worker: TensorFlow cannot split a CPU into collective
        # devices, so the simulated world is 2 workers).
        assert f"trainstack-node: node {node} of 2, 2 accelerator(s), 1 process(es): " in run.output
    [done] = _events(runs, "done")
    assert (done["world_size"], done["workers"], done["step"]) == (2, 2, 4)
    assert done["checkpoint_dir"] == f"{job.base_output}/checkpoints/fidelity-tf"


def test_a_users_image_runs_the_bundled_trainer_through_the_same_setup_script() -> None:
    config = stack_config({**TWO_BY_TWO, "image_uri": "us-docker.pkg.dev/p/r/t:1"}, TRAINER)
    job = planned_job(build_plan("fidelity", config))
    for pool in job.job_spec["workerPoolSpecs"]:
        assert pool["containerSpec"] == {
            "imageUri": "us-docker.pkg.dev/p/r/t:1",
            "command": COMMAND,
            "args": [
                "python3",
                "-m",
                "trainstack.trainers.node",
                TORCH_MODULE,
                "--dataset=digits",
                "--steps=4",
                "--global_batch_size=32",
                "--run_name=fidelity",
            ],
            "env": [GPUS_2, {"name": "TRAINSTACK_PACKAGE_URI", "value": job.package_uri}],
        }


@pytest.mark.trainer
def test_tensorflow_with_reducers_trains_as_two_workers_with_the_reducers_outside(
    tmp_path: Path, gcs_emulator: str, metadata: str
) -> None:
    """Vertex lists the reducer pool (workerpool2) as `ps` in every replica's TF_CONFIG
    (gcp-facts 3.2); the reducers run Google's image, not the trainer, so the chief and the
    worker must train as one world of two with the reducers outside the TensorFlow cluster.
    Reduction Server supports TensorFlow multi-host data-parallel training with NCCL
    all-reduce (https://cloud.google.com/vertex-ai/docs/training/distributed-training
    #reduction-server); it needs a custom image with google-reduction-server, so the stack
    names one (`vertex.image_uri`), run here with the TF image's packages. The NCCL choice
    itself cannot show on CPU: tests/trainers/test_tf_reduction_server.py covers it."""
    vertex = {
        **TWO_BY_TWO,
        "image_uri": "us-central1-docker.pkg.dev/p/training/tf-reduction-server:2.17",
        "reduction_server": {"enabled": True, "replica_count": 2},
    }
    trainer = {"framework": "tensorflow", "strategy": "multi_worker_mirrored", **TRAINER}
    job = planned_job(build_plan("fidelity-tf-rs", stack_config(vertex, trainer)))
    pools = job.job_spec["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "1", "2"]
    assert pools[2]["containerSpec"] == {
        "imageUri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    }
    _stage(job, gcs_emulator)
    layer = [*VERTEX_TRAINING_IMAGES[TF_MODULE].packages, "tf-keras", "setuptools"]
    runs = run_container_replicas(
        job,
        Image(tmp_path / "image", job.sdist, layer),
        tmp_path,
        extra_env=_env(gcs_emulator, metadata),
        timeout_s=300,
    )
    # Only the chief and the worker start here: the reducer pool has no command of ours.
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    starts = _events(runs, "start")
    assert sorted((s["workers"], s["strategy"]) for s in starts) == [
        (2, "multi_worker_mirrored"),
        (2, "multi_worker_mirrored"),
    ]
    [done] = _events(runs, "done")
    assert (done["world_size"], done["workers"], done["step"]) == (2, 2, 4)


OWN_TRAINER = REPO / "examples" / "own-trainer"
OWN_ARGS = ["--steps=12", "--checkpoint-every=6", "--global-batch=32"]


def own_node_args(checkpoints: str, stack: str = "fidelity-own") -> list[str]:
    """The node launcher's arguments that GKE and GCE plan for examples/own-trainer cut to
    `OWN_ARGS`, with the run contract's folders in the stack's buckets."""
    return [
        "-m",
        "trainstack.trainers.node",
        "--launcher=torchrun",
        f"--env=TRAINSTACK_CHECKPOINT_DIR={checkpoints}/checkpoints/{stack}",
        f"--env=TRAINSTACK_DATA_DIR=gs://my-ml-project-{stack}-data",
        f"--env=TRAINSTACK_OUTPUT_DIR={checkpoints}/outputs/{stack}",
        f"--env=TRAINSTACK_RUN_NAME={stack}",
        "--",
        "python",
        "train.py",
        *OWN_ARGS,
    ]


def _own_trainer_config(tmp_path: Path) -> dict[str, Any]:
    """examples/own-trainer's vertex stack, with 2 replicas of 2 GPUs and a short run."""
    stack = yaml.safe_load((OWN_TRAINER / "Pulumi.vertex.yaml").read_text())["config"]
    trainer = {**stack["trainstack:trainer"], "source": str(OWN_TRAINER)}
    trainer["entrypoint"] = ["python", "train.py", *OWN_ARGS]
    vertex = {**stack["trainstack:vertex"], "machine_type": "a2-highgpu-2g"}
    return stack_config(vertex, trainer)


def _local_run_digest(tmp_path: Path, workers: int) -> dict[str, Any]:
    """The same code and steps through `trainstack local-run`, one machine of `workers`."""
    stack = yaml.safe_load((OWN_TRAINER / "Pulumi.local.yaml").read_text())
    config = stack["config"]
    config["trainstack:local"] = {"workers": workers, "root": str(tmp_path / "local")}
    config["trainstack:trainer"] = {
        **config["trainstack:trainer"],
        "source": str(OWN_TRAINER),
        "entrypoint": ["python", "train.py", *OWN_ARGS],
    }
    path = tmp_path / "Pulumi.local.yaml"
    path.write_text(yaml.safe_dump(stack))
    code, out, err = finish(local_run(path, "--json"))
    assert code == 0, err
    record: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return record


@pytest.mark.trainer
@pytest.mark.slow  # about 100 s here: install, 2 x 2 processes, then a 4-process local-run
def test_own_trainer_on_two_replicas_of_two_gpus_is_a_world_of_four_like_local_run(
    tmp_path: Path, gcs_emulator: str, metadata: str
) -> None:
    plan = build_plan("fidelity-own", _own_trainer_config(tmp_path))
    job = planned_job(plan)
    pools = job.job_spec["workerPoolSpecs"]
    node_args = [
        "--launcher=torchrun",
        "--env=TRAINSTACK_DATA_DIR=gs://fidelity-project-fidelity-own-data",
        "--env=TRAINSTACK_RUN_NAME=fidelity-own",
        "--",
        "python",
        "train.py",
        *OWN_ARGS,
    ]
    image = VERTEX_TRAINING_IMAGES[TORCH_MODULE]
    for pool in pools:
        assert pool["containerSpec"] == {
            "imageUri": _pulled(image, "fidelity-own"),
            "command": COMMAND,
            "args": ["python3", "-m", "trainstack.trainers.node", *node_args],
            "env": [GPUS_2, {"name": "TRAINSTACK_PACKAGE_URI", "value": job.package_uri}],
        }
    _stage(job, gcs_emulator)
    # The code package requires only torch; the script's digest needs numpy, which the
    # torch image has (`VertexTrainingImage.packages`).
    container = Image(tmp_path / "image", job.sdist, [*image.packages, "setuptools"])
    # The script writes checkpoints with local file APIs; on Vertex that is the bucket's
    # Cloud Storage FUSE path (/gcs/<bucket>/...), here a local folder stands in for it.
    checkpoints = tmp_path / "checkpoints"
    env = {**_env(gcs_emulator, metadata), "TRAINSTACK_CHECKPOINT_DIR": str(checkpoints)}
    runs = run_container_replicas(job, container, tmp_path / "run", extra_env=env, timeout_s=300)
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    for node, run in enumerate(runs):
        assert f"trainstack-node: node {node} of 2, 2 accelerator(s), 2 process(es): " in run.output
    worlds = [rec for run in runs for rec in run.records() if "world" in rec]
    assert worlds == [{"event": "start", "rank": 0, "step": 0, "world": 4}], _explain(runs)
    [done] = [rec for run in runs for rec in run.records() if "params_sha256" in rec]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-12", "step-6"]
    # The same code, steps and world (4 processes) through local-run: the same weights.
    assert _local_run_digest(tmp_path, workers=4) == done

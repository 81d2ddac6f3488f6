"""Vertex AI fidelity: a planned CustomJob, run here the way Vertex runs it.

Each test builds the plan of a Vertex stack with `infra.plan.build_plan`, takes the
CustomJob body's workerPoolSpecs and, for every replica, sets the environment Vertex
documents, installs the sdist the plan uploads into a fresh environment and runs the pool's
`python -m <pythonModule> <args>` (`tests.fidelity.vertex`, whose docstring lists what
differs from Vertex). GPUs are simulated with `TRAINSTACK_SIMULATED_ACCELERATORS`, as many
per replica as the pool's `machineSpec.acceleratorCount`.

The image is only what Google's prebuilt-containers page lists for it plus what the package
requires (with their dependencies): the torch run caught that the PyTorch image lists no
tensorboard, which the trainer imports on Vertex (AIP_TENSORBOARD_LOG_DIR is always set).

Limitation: the frameworks here are torch 2.13 (CPU) and TensorFlow 2.20 with tf-keras
2.20.1, not the prebuilt images' torch 2.4 and TensorFlow 2.17 (PyPI's Linux torch 2.4
wheels are the CUDA build, and this machine is offline). The image's TensorFlow pin
(tf-keras~=2.17.0) is therefore checked as text, and the TensorFlow package is installed with
`--no-deps` after every other requirement is shown to be met.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.catalog.images import VERTEX_TRAINING_IMAGES
from infra.plan import build_plan
from tests.fidelity.vertex import (
    PlannedJob,
    ReplicaRun,
    image_environment,
    pip_install,
    planned_job,
    run_replicas,
    stack_config,
)
from tests.trainers.conftest import REPO
from tests.trainers.local_cli import finish, local_run
from trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV
from trainers.common.contract import TF_MODULE, TORCH_MODULE

TWO_BY_TWO = {
    "machine_type": "a2-highgpu-2g",  # 2 x A100 per replica
    "replica_count": 2,
    "reduction_server": {"enabled": False},
}
TRAINER = {"model": "mlp", "dataset": "digits", "steps": 4, "global_batch_size": 32}
RUNTIME_REQUIRES = [
    "pydantic>=2.7,<3",
    "numpy>=1.26",
    "pyyaml>=6",
    "fsspec>=2024.6",
    "gcsfs>=2024.6",
    "cloudml-hypertune>=0.1.0.dev6",
]


def _requires(job: PlannedJob) -> list[str]:
    import tarfile

    with tarfile.open(job.sdist, mode="r:gz") as tar:
        name = next(n for n in tar.getnames() if n.endswith("/PKG-INFO"))
        extracted = tar.extractfile(name)
        assert extracted is not None
        lines = extracted.read().decode().splitlines()
    return [line.removeprefix("Requires-Dist: ") for line in lines if "Requires-Dist" in line]


def _emulator_env(gcs_emulator: str) -> dict[str, str]:
    return {"STORAGE_EMULATOR_HOST": gcs_emulator, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


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


def _prepare(
    tmp_path: Path,
    stack: str,
    config: dict[str, Any],
    make_bucket: Callable[[str], None],
    *,
    no_deps: bool,
) -> tuple[PlannedJob, Path]:
    """The plan's job, and a fresh image environment (the image's documented packages,
    what the package requires, and setuptools for pip's build) with the sdist installed."""
    job = planned_job(build_plan(stack, config))
    make_bucket(job.base_output.removeprefix("gs://"))
    module = job.job_spec["workerPoolSpecs"][0]["pythonPackageSpec"]["args"][0]
    image = VERTEX_TRAINING_IMAGES[module]
    python = image_environment(tmp_path / "image", [*image.packages, *_requires(job), "setuptools"])
    pip_install(python, job.sdist, no_deps=no_deps)
    # `trainers` is the installed sdist's, nothing else's.
    where = subprocess.run(
        [str(python), "-c", "import trainers; print(trainers.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": str(python.parent)},
    ).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "image")
    return job, python


@pytest.mark.trainer
def test_two_replicas_of_two_gpus_train_as_one_world_of_four(
    tmp_path: Path, gcs_emulator: str, make_bucket: Callable[[str], None]
) -> None:
    config = stack_config(TWO_BY_TWO, {"framework": "torch", **TRAINER, "checkpoint_every": 2})
    job, python = _prepare(tmp_path, "fidelity-torch", config, make_bucket, no_deps=False)
    pools = job.job_spec["workerPoolSpecs"]
    assert [(p["replicaCount"], p["machineSpec"]["acceleratorCount"]) for p in pools] == [
        ("1", 2),
        ("1", 2),
    ]
    for pool in pools:
        spec = pool["pythonPackageSpec"]
        assert spec["executorImageUri"] == VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri
        assert (spec["pythonModule"], spec["args"][0]) == ("trainers.node", TORCH_MODULE)
    # The torch image lists no tensorboard, which torch.utils.tensorboard imports when
    # AIP_TENSORBOARD_LOG_DIR is set: the package requires it (any version torch accepts).
    assert _requires(job) == [*RUNTIME_REQUIRES, "tensorboard>=1.15"]

    work = tmp_path / "work"
    work.mkdir()
    env = {SIMULATED_ACCELERATORS_ENV: "2", **_emulator_env(gcs_emulator)}
    runs = run_replicas(python, job, cwd=work, extra_env=env, timeout_s=300)
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    for node, run in enumerate(runs):
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
    tmp_path: Path, gcs_emulator: str, make_bucket: Callable[[str], None]
) -> None:
    trainer = {"framework": "tensorflow", "strategy": "multi_worker_mirrored", **TRAINER}
    config = stack_config(TWO_BY_TWO, trainer)
    job, python = _prepare(tmp_path, "fidelity-tf", config, make_bucket, no_deps=True)
    image = VERTEX_TRAINING_IMAGES[TF_MODULE]
    assert (image.framework, image.framework_version) == ("tensorflow", "2.17")
    for pool in job.job_spec["workerPoolSpecs"]:
        spec = pool["pythonPackageSpec"]
        assert spec["executorImageUri"] == (
            "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"
        )
        assert (spec["pythonModule"], spec["args"][0]) == ("trainers.node", TF_MODULE)
    assert _requires(job) == [*RUNTIME_REQUIRES, "tf-keras~=2.17.0"]
    # Every requirement but the image's tf-keras pin is met by the image layer here; the pin
    # admits exactly the image's TensorFlow minor (tf-keras 2.17.x requires TF 2.17.x).
    check = (
        "import importlib.metadata as m, json, sys\n"
        "from packaging.requirements import Requirement\n"
        "out = {}\n"
        "for text in json.loads(sys.argv[1]):\n"
        "    r = Requirement(text)\n"
        "    out[r.name] = r.specifier.contains(m.version(r.name), prereleases=True)\n"
        "pin = Requirement('tf-keras~=2.17.0').specifier\n"
        "out['pin'] = [pin.contains(v) for v in ('2.17.0', '2.17.3', '2.16.0', '2.18.0')]\n"
        "print(json.dumps(out))\n"
    )
    met = subprocess.run(
        [str(python), "-c", check, json.dumps(RUNTIME_REQUIRES)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": str(python.parent)},
    )
    assert json.loads(met.stdout) == {
        "pydantic": True,
        "numpy": True,
        "pyyaml": True,
        "fsspec": True,
        "gcsfs": True,
        "cloudml-hypertune": True,
        "pin": [True, True, False, False],
    }

    work = tmp_path / "work"
    work.mkdir()
    env = {SIMULATED_ACCELERATORS_ENV: "2", **_emulator_env(gcs_emulator)}
    runs = run_replicas(python, job, cwd=work, extra_env=env, timeout_s=300)
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    for node, run in enumerate(runs):
        # TensorFlow runs once per replica; MultiWorkerMirrored uses the replica's GPUs itself
        # (on CPU, one device per worker: TensorFlow cannot split a CPU into collective
        # devices, so the simulated world is 2 workers).
        assert f"trainstack-node: node {node} of 2, 2 accelerator(s), 1 process(es): " in run.output
    [done] = _events(runs, "done")
    assert (done["world_size"], done["workers"], done["step"]) == (2, 2, 4)
    assert done["checkpoint_dir"] == f"{job.base_output}/checkpoints/fidelity-tf"


def test_a_users_image_runs_the_node_launcher_too() -> None:
    config = stack_config({**TWO_BY_TWO, "image_uri": "us-docker.pkg.dev/p/r/t:1"}, TRAINER)
    pools = planned_job(build_plan("fidelity", config)).job_spec["workerPoolSpecs"]
    for pool in pools:
        assert pool["containerSpec"] == {
            "imageUri": "us-docker.pkg.dev/p/r/t:1",
            "command": ["python", "-m", "trainers.node", TORCH_MODULE],
            "args": [
                "--dataset=digits",
                "--steps=4",
                "--global_batch_size=32",
                "--run_name=fidelity",
            ],
        }


OWN_TRAINER = REPO / "examples" / "own-trainer"
OWN_ARGS = ["--steps=12", "--checkpoint-every=6", "--global-batch=32"]


def own_node_args(checkpoints: str, stack: str = "fidelity-own") -> list[str]:
    """The node launcher's arguments that GKE and GCE plan for examples/own-trainer cut to
    `OWN_ARGS`, with the run contract's folders in the stack's buckets."""
    return [
        "-m",
        "trainers.node",
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
    tmp_path: Path, gcs_emulator: str, make_bucket: Callable[[str], None]
) -> None:
    plan = build_plan("fidelity-own", _own_trainer_config(tmp_path))
    job = planned_job(plan)
    make_bucket(job.base_output.removeprefix("gs://"))
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
    for pool in pools:
        assert pool["pythonPackageSpec"] == {
            "executorImageUri": VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri,
            "packageUris": pool["pythonPackageSpec"]["packageUris"],
            "pythonModule": "trainers.node",
            "args": node_args,
        }
    image = VERTEX_TRAINING_IMAGES[TORCH_MODULE]
    # numpy: the prebuilt PyTorch image has it (the catalog lists only its headline
    # packages), and the script's digest needs it; the code package requires only torch.
    layer = [*image.packages, *_requires(job), "numpy", "setuptools"]
    python = image_environment(tmp_path / "image", layer)
    pip_install(python, job.sdist)
    work = tmp_path / "work"
    work.mkdir()
    # The script writes checkpoints with local file APIs; on Vertex that is the bucket's
    # Cloud Storage FUSE path (/gcs/<bucket>/...), here a local folder stands in for it.
    checkpoints = tmp_path / "checkpoints"
    env = {
        SIMULATED_ACCELERATORS_ENV: "2",
        "TRAINSTACK_CHECKPOINT_DIR": str(checkpoints),
        **_emulator_env(gcs_emulator),
    }
    runs = run_replicas(python, job, cwd=work, extra_env=env, timeout_s=300)
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], _explain(runs)
    for node, run in enumerate(runs):
        assert f"trainstack-node: node {node} of 2, 2 accelerator(s), 2 process(es): " in run.output
    worlds = [rec for run in runs for rec in run.records() if "world" in rec]
    assert worlds == [{"event": "start", "rank": 0, "step": 0, "world": 4}], _explain(runs)
    [done] = [rec for run in runs for rec in run.records() if "params_sha256" in rec]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-12", "step-6"]
    # The same code, steps and world (4 processes) through local-run: the same weights.
    assert _local_run_digest(tmp_path, workers=4) == done

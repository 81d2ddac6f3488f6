"""Your own code on the tpu, vertex and gpu_cluster targets, as `trainstack plan --json`
records it: what each machine runs, the code package, the secret grants and services, and
no "not wired" note (every target's launch starts your code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components._pod_setup import pod_command
from trainstack.components.catalog.images import kubernetes_image
from trainstack.infra.cli import app

runner = CliRunner()

VERTEX = {
    "gcp:project": "p",
    "gcp:region": "us-central1",
    "trainstack:vertex": {"machine_type": "a2-highgpu-8g", "replica_count": 2},
}
TPU = {
    "gcp:project": "p",
    "gcp:region": "us-central2",
    "trainstack:tpu": {
        "accelerator_type": "v4-32",
        "zone": "us-central2-b",
        "runtime_version": "tpu-ubuntu2204-base",
        "provisioning": "spot",
    },
}
GKE = {
    "gcp:project": "p",
    "gcp:region": "us-central1",
    "trainstack:gpu_cluster": {
        "backend": "gke",
        "machine_type": "a2-highgpu-8g",
        "node_count": 2,
        "zone": "us-central1-a",
    },
}
GCE = {
    **GKE,
    "trainstack:gpu_cluster": {**GKE["trainstack:gpu_cluster"], "backend": "gce"},
}
SECRETS = {
    "HF_TOKEN": "projects/p/secrets/hf/versions/3",
    "WANDB_API_KEY": "projects/other/secrets/wandb",
    "HF_TOKEN_2": "projects/p/secrets/hf",
}
SECRET_ARGS = [
    "--secret-env=HF_TOKEN=projects/p/secrets/hf/versions/3",
    "--secret-env=HF_TOKEN_2=projects/p/secrets/hf",
    "--secret-env=WANDB_API_KEY=projects/other/secrets/wandb",
]
NOT_WIRED = "trainer.entrypoint: this release packages and plans your own code but does not"
"""The note a plan carried while a target's launch did not start your code."""
SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
SERVICE = "gcp:projects/service:Service"
MEMBER = "serviceAccount:mine-train@p.iam.gserviceaccount.com"
# Every GPU replica is told how many GPUs it must find (trainstack.trainers.node exits 5 on fewer).
GPUS_8 = {"name": "TRAINSTACK_EXPECTED_ACCELERATORS", "value": "8"}


@pytest.fixture
def code(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def _plan(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "--config-file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def _named(plan: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [r for r in plan["resources"] if r["name"] == name]
    return found


def _of_type(plan: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"] == kind]


def _package_uri(plan: dict[str, Any]) -> str:
    uri: str = plan["outputs"]["trainer_package_uri"]
    assert uri.startswith("gs://p-mine-staging/code/trainstack_code-")
    return uri


def test_vertex_runs_your_code_from_the_package_on_the_pytorch_image(
    tmp_path: Path, code: Path
) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py", "--steps=5"]}
    plan = _plan(tmp_path, {**VERTEX, "trainstack:trainer": trainer})
    node_args = [
        "--launcher=torchrun",
        # Vertex names the checkpoint and model folders (AIP_*), per trial when tuning.
        "--env=TRAINSTACK_DATA_DIR=gs://p-mine-data",
        "--env=TRAINSTACK_RUN_NAME=mine",
        "--",
        "python",
        "train.py",
        "--steps=5",
    ]
    assert plan["outputs"]["node_args"] == node_args
    pools = _named(plan, "mine-job-job")["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [pool["replicaCount"] for pool in pools] == ["1", "1"]
    for pool in pools:
        # pytorch/pytorch's image (Google's prebuilt ones are past their end); the setup
        # script installs the code package into its python3, as for trainer.image.
        assert pool["containerSpec"] == {
            # Through the stack's Docker Hub mirror, by the catalog's digest.
            "imageUri": "us-central1-docker.pkg.dev/p/mine-dockerhub/pytorch/pytorch@"
            "sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4",
            "command": pod_command(),
            "args": ["python3", "-m", "trainstack.trainers.node", *node_args],
            "env": [GPUS_8, {"name": "TRAINSTACK_PACKAGE_URI", "value": _package_uri(plan)}],
        }
    assert not any(NOT_WIRED in note for note in plan["notes"])
    assert _of_type(plan, SECRET_MEMBER) == []
    assert "mine-apis-secretmanager" not in {r["name"] for r in plan["resources"]}


def test_vertex_node_launcher_gets_the_tensorflow_image(tmp_path: Path, code: Path) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"], "launcher": "node"}
    plan = _plan(tmp_path, {**VERTEX, "trainstack:trainer": trainer})
    pool = _named(plan, "mine-job-job")["inputs"]["body"]["jobSpec"]["workerPoolSpecs"][0]
    spec = pool["containerSpec"]
    assert spec["imageUri"] == (
        "us-central1-docker.pkg.dev/p/mine-dockerhub/tensorflow/tensorflow:2.17.0-gpu"
    )
    assert spec["args"][3] == "--launcher=node"


def test_vertex_image_runs_the_launcher_in_your_container(tmp_path: Path, code: Path) -> None:
    # Like a GKE pod: the pod setup script installs the code package (trainstack's launcher
    # and your source) into the image's python3, so the image needs nothing from trainstack
    # and a change to the source changes the job.
    image = "us-docker.pkg.dev/p/r/train:1"
    trainer = {"image": image, "source": str(code), "entrypoint": ["python", "train.py"]}
    plan = _plan(tmp_path, {**VERTEX, "trainstack:trainer": trainer})
    pool = _named(plan, "mine-job-job")["inputs"]["body"]["jobSpec"]["workerPoolSpecs"][0]
    assert "pythonPackageSpec" not in pool
    assert pool["containerSpec"] == {
        "imageUri": image,
        "command": pod_command(),
        "args": [
            "python3",
            "-m",
            "trainstack.trainers.node",
            "--launcher=torchrun",
            "--env=TRAINSTACK_DATA_DIR=gs://p-mine-data",
            "--env=TRAINSTACK_RUN_NAME=mine",
            "--",
            "python",
            "train.py",
        ],
        "env": [GPUS_8, {"name": "TRAINSTACK_PACKAGE_URI", "value": _package_uri(plan)}],
    }
    (code / "train.py").write_text("print('changed')\n")
    changed = _plan(tmp_path, {**VERTEX, "trainstack:trainer": trainer})
    assert _package_uri(changed) != _package_uri(plan)
    job = _named(changed, "mine-job-job")["inputs"]["body"]["jobSpec"]["workerPoolSpecs"][0]
    assert job["containerSpec"]["env"] == [
        GPUS_8,
        {"name": "TRAINSTACK_PACKAGE_URI", "value": _package_uri(changed)},
    ]


def test_vertex_tuning_searches_your_codes_flags(tmp_path: Path, code: Path) -> None:
    tuning = {
        "metric_id": "loss",
        "goal": "MINIMIZE",
        "max_trial_count": 4,
        "parallel_trial_count": 2,
        "parameters": [
            {"parameter_id": "lr", "type": "double", "min_value": 0.001, "max_value": 0.1}
        ],
    }
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"]}
    vertex = {**VERTEX["trainstack:vertex"], "hyperparameter_tuning": tuning}  # type: ignore[dict-item]
    plan = _plan(tmp_path, {**VERTEX, "trainstack:vertex": vertex, "trainstack:trainer": trainer})
    body = _named(plan, "mine-job-job")["inputs"]["body"]
    assert body["studySpec"]["parameters"] == [
        {"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.1}}
    ]
    spec = body["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    # Vertex appends `--lr=<value>` to these args: after `--`, so your code receives it.
    assert spec["args"][-3:] == ["--", "python", "train.py"]


def test_tpu_runs_your_code_on_every_host_of_a_base_runtime(tmp_path: Path, code: Path) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"]}
    plan = _plan(tmp_path, {**TPU, "trainstack:trainer": trainer})
    script = _named(plan, "mine-tpu-vm")["inputs"]["metadata"]["startup-script"]
    assert "readonly TS_USER_CODE=1\n" in script
    assert f"readonly TS_PACKAGE_URI={_package_uri(plan)}\n" in script
    assert "readonly TS_RUNTIME_VERSION=tpu-ubuntu2204-base\n" in script
    assert (
        "readonly TS_TRAINER_ARGS=(--launcher=node "
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://p-mine-checkpoints/checkpoints/mine "
        "--env=TRAINSTACK_DATA_DIR=gs://p-mine-data "
        "--env=TRAINSTACK_OUTPUT_DIR=gs://p-mine-checkpoints/outputs/mine "
        "--env=TRAINSTACK_RUN_NAME=mine -- python train.py)\n"
    ) in script
    assert plan["outputs"]["checkpoint_dir"] == "gs://p-mine-checkpoints/checkpoints/mine"
    assert not any(NOT_WIRED in note for note in plan["notes"])


@pytest.mark.parametrize("target", [VERTEX, TPU, GKE, GCE])
def test_secret_env_grants_accessor_on_exactly_those_secrets(
    tmp_path: Path, code: Path, target: dict[str, Any]
) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"], "secret_env": SECRETS}
    plan = _plan(tmp_path, {**target, "trainstack:trainer": trainer})
    grants = sorted((r["name"], r["parent"], r["inputs"]) for r in _of_type(plan, SECRET_MEMBER))
    role = "roles/secretmanager.secretAccessor"
    assert grants == [
        (
            "mine-identity-secret-other-wandb",
            "mine-identity",
            {"project": "other", "secretId": "wandb", "role": role, "member": MEMBER},
        ),
        (
            "mine-identity-secret-p-hf",
            "mine-identity",
            {"project": "p", "secretId": "hf", "role": role, "member": MEMBER},
        ),
    ]
    assert _named(plan, "mine-apis-secretmanager")["inputs"]["service"] == (
        "secretmanager.googleapis.com"
    )
    assert [a for a in plan["outputs"]["node_args"] if a.startswith("--secret-env")] == (
        SECRET_ARGS
    )


GPU_NODE_ARGS = [
    "--launcher=torchrun",
    "--env=TRAINSTACK_CHECKPOINT_DIR=gs://p-mine-checkpoints/checkpoints/mine",
    "--env=TRAINSTACK_DATA_DIR=gs://p-mine-data",
    "--env=TRAINSTACK_OUTPUT_DIR=gs://p-mine-checkpoints/outputs/mine",
    "--env=TRAINSTACK_RUN_NAME=mine",
    "--",
    "python",
    "train.py",
]


def test_gke_pods_run_your_code_in_your_image(tmp_path: Path, code: Path) -> None:
    image = "us-docker.pkg.dev/p/r/mine:1"
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"], "image": image}
    plan = _plan(tmp_path, {**GKE, "trainstack:trainer": trainer})
    assert plan["outputs"]["node_args"] == GPU_NODE_ARGS
    spec = _named(plan, "mine-gpu-training-job")["inputs"]["spec"]
    [container] = spec["template"]["spec"]["containers"]
    assert container["args"] == ["python3", "-m", "trainstack.trainers.node", *GPU_NODE_ARGS]
    assert container["image"] == image
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert "TRAINSTACK_TF_KERAS" not in env
    assert env["TRAINSTACK_PACKAGE_URI"] == _package_uri(plan)
    assert spec["completions"] == 2
    assert not any(NOT_WIRED in note for note in plan["notes"])


def test_gke_pods_default_to_the_torch_image(tmp_path: Path, code: Path) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"], "launcher": "node"}
    plan = _plan(tmp_path, {**GKE, "trainstack:trainer": trainer})
    spec = _named(plan, "mine-gpu-training-job")["inputs"]["spec"]
    [container] = spec["template"]["spec"]["containers"]
    assert container["image"] == kubernetes_image("trainstack.trainers.torch_ddp")
    assert container["args"] == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "--launcher=node",
        *GPU_NODE_ARGS[1:],
    ]


def test_gce_vms_run_your_code(tmp_path: Path, code: Path) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"]}
    plan = _plan(tmp_path, {**GCE, "trainstack:trainer": trainer})
    assert plan["outputs"]["node_args"] == GPU_NODE_ARGS
    script = _named(plan, "mine-gpu-template")["inputs"]["metadataStartupScript"]
    assert (
        "NODE_ARGV=(-m trainstack.trainers.node --launcher=torchrun "
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://p-mine-checkpoints/checkpoints/mine "
        "--env=TRAINSTACK_DATA_DIR=gs://p-mine-data "
        "--env=TRAINSTACK_OUTPUT_DIR=gs://p-mine-checkpoints/outputs/mine "
        "--env=TRAINSTACK_RUN_NAME=mine -- python train.py)\n"
    ) in script
    assert "\nTRAINER_ARGS=()\nNODE_ARGV=" in script
    assert "\nUSE_TORCHRUN=1\nUSER_CODE=1\n" in script
    assert not any(NOT_WIRED in note for note in plan["notes"])


def test_gce_refuses_a_container_image(tmp_path: Path, code: Path) -> None:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"], "image": "img:1"}
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump({"config": {**GCE, "trainstack:trainer": trainer}}))
    result = runner.invoke(app, ["plan", "--config-file", str(path), "--json"])
    assert result.exit_code == 2
    assert (
        "trainer.image: not supported on gpu_cluster backend 'gce' (its VMs boot the Deep "
        "Learning VM image and run no container); valid: trainer.source, or "
        "gpu_cluster.backend gke"
    ) in " ".join(result.output.split())

"""Vertex audit findings 3, 4/2, 5 and 7: the default image comes through the stack's Artifact
Registry mirror of Docker Hub (by digest where known), the torch image's Python is 3.12, a
GPU job without a run limit gets a plan note, the bundled prod stack has a run limit, and
integer/discrete tuning parameters carry UNIT_LINEAR_SCALE as Google's SDK sends them."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components._vertex_body import _parameter_spec
from trainstack.components.catalog.images import (
    TORCH_IMAGE_DIGEST,
    VERTEX_TRAINING_IMAGES,
    mirror_registry,
    mirrored_image_uri,
)
from trainstack.components.image_mirror import ImageMirror, repository_id
from trainstack.components.training_identity import TrainingIdentity
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import run_program
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.contract import TF_MODULE, TORCH_MODULE

REPO = "gcp:artifactregistry/repository:Repository"
REPO_READER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
DIGEST = "sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
HPT_REGISTRY = "us-central1-docker.pkg.dev/my-ml-project/dev-vertex-hpt-dockerhub"
NO_TIMEOUT = (
    "vertex: this GPU job has no scheduling.timeout, so Vertex's default of 7 days caps a "
    "hung or stalled run; set limits.max_run_hours or vertex.timeout_s"
)


def _config(stack: str, **vertex: Any) -> dict[str, Any]:
    config = load_stack(stack, None)[1]
    if vertex:
        config = {**config, "trainstack:vertex": {**config["trainstack:vertex"], **vertex}}
    return config


def _of_type(plan: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"] == kind]


def _pools(plan: dict[str, Any]) -> list[dict[str, Any]]:
    [job] = [r for r in plan["resources"] if r["type"].startswith("pulumi-python:dynamic/vertex")]
    body = job["inputs"]["body"]
    return (body.get("jobSpec") or body["trialJobSpec"])["workerPoolSpecs"]


def test_the_catalog_pins_the_torch_image_by_digest_with_python_312() -> None:
    torch, tf = VERTEX_TRAINING_IMAGES[TORCH_MODULE], VERTEX_TRAINING_IMAGES[TF_MODULE]
    assert (torch.digest, torch.python_version, TORCH_IMAGE_DIGEST) == (DIGEST, "3.12", DIGEST)
    assert "67330557494" in torch.source and "59678380490" in torch.source
    # No TF digest found in two independent sources: the tag is pulled, marked unverified.
    assert (tf.digest, tf.python_version, tf.verified) == (None, "3.11", False)
    assert "so the tag is pulled, unverified" in tf.source
    registry = mirror_registry("europe-west4", "p", "s-dockerhub")
    assert registry == "europe-west4-docker.pkg.dev/p/s-dockerhub"
    assert mirrored_image_uri(torch, registry) == f"{registry}/pytorch/pytorch@{DIGEST}"
    assert mirrored_image_uri(tf, registry) == f"{registry}/tensorflow/tensorflow:2.17.0-gpu"


def test_a_default_image_stack_mirrors_docker_hub_and_pulls_by_digest() -> None:
    plan = build_plan("dev-vertex-hpt", _config("dev-vertex-hpt"))
    [repo] = _of_type(plan, REPO)
    assert (repo["name"], repo["parent"]) == (
        "dev-vertex-hpt-images-dockerhub",
        "dev-vertex-hpt-images",
    )
    assert repo["inputs"] == {
        "project": "my-ml-project",
        "location": "us-central1",
        "repositoryId": "dev-vertex-hpt-dockerhub",
        "format": "DOCKER",
        "mode": "REMOTE_REPOSITORY",
        "description": "Docker Hub mirror for trainstack's framework images; managed by "
        "trainstack.",
        "remoteRepositoryConfig": {
            "description": "Docker Hub",
            "dockerRepository": {"publicRepository": "DOCKER_HUB"},
        },
        "labels": {
            "component": "image-mirror",
            "environment": "dev",
            "managed-by": "trainstack",
            "stack": "dev-vertex-hpt",
            "team": "ml",
        },
    }
    [reader] = _of_type(plan, REPO_READER)
    assert (reader["name"], reader["parent"]) == (
        "dev-vertex-hpt-identity-image-reader",
        "dev-vertex-hpt-identity",
    )
    assert reader["inputs"] == {
        "project": "my-ml-project",
        "location": "us-central1",
        "repository": "dev-vertex-hpt-dockerhub",
        "role": "roles/artifactregistry.reader",
        "member": "serviceAccount:dev-vertex-hpt-train@my-ml-project.iam.gserviceaccount.com",
    }
    services = [r["inputs"]["service"] for r in _of_type(plan, "gcp:projects/service:Service")]
    assert "artifactregistry.googleapis.com" in services
    images = {p["containerSpec"]["imageUri"] for p in _pools(plan) if p}
    assert images == {f"{HPT_REGISTRY}/pytorch/pytorch@{DIGEST}"}


def test_the_job_waits_for_the_reader_grant_which_waits_for_the_repository() -> None:
    name, config = load_stack("dev-vertex-hpt", None)
    run = run_program(main_program, config=config, stack=name)
    [repo] = [r for r in run.resources if r.type == REPO]
    [reader] = [r for r in run.resources if r.type == REPO_READER]
    [job] = [r for r in run.resources if r.type.startswith("pulumi-python:dynamic/vertex")]
    assert repo.urn in reader.dependencies
    assert reader.urn in job.dependencies


def test_a_named_image_gets_no_mirror() -> None:
    named = "us-central1-docker.pkg.dev/my-ml-project/training/pytorch-reduction-server:2.13"
    plan = build_plan("prod-vertex-rs", _config("prod-vertex-rs", image_uri=named))
    assert _of_type(plan, REPO) == [] and _of_type(plan, REPO_READER) == []
    services = [r["inputs"]["service"] for r in _of_type(plan, "gcp:projects/service:Service")]
    assert "artifactregistry.googleapis.com" not in services
    assert not any("remote repository" in note for note in plan["notes"])


def test_the_tensorflow_default_is_mirrored_by_tag() -> None:
    config = _config("dev-vertex-hpt", region="europe-west4")
    config["trainstack:trainer"] = {
        "framework": "tensorflow",
        "strategy": "multi_worker_mirrored",
        "model": "mlp",
    }
    del config["trainstack:vertex"]["hyperparameter_tuning"]
    plan = build_plan("tf-mirror", config)
    registry = "europe-west4-docker.pkg.dev/my-ml-project/tf-mirror-dockerhub"
    assert {p["containerSpec"]["imageUri"] for p in _pools(plan) if p} == {
        f"{registry}/tensorflow/tensorflow:2.17.0-gpu"
    }
    [repo] = _of_type(plan, REPO)
    assert repo["inputs"]["location"] == "europe-west4"
    assert any("pulled by tag (digest unverified)" in note for note in plan["notes"])


def test_the_mirror_component_names_its_child_and_registry() -> None:
    def program() -> dict[str, Any]:
        mirror = ImageMirror(
            "m", {"project": "p", "location": "us-east1", "deployment_name": "exp-42"}
        )
        return {"registry": mirror.registry, "id": mirror.repository_id}

    run = run_program(program)
    assert [(r.type, r.name, r.parent) for r in run.resources] == [
        ("trainstack:registry:ImageMirror", "m", None),
        (REPO, "m-dockerhub", "m"),
    ]
    assert run.outputs == {
        "registry": "us-east1-docker.pkg.dev/p/exp-42-dockerhub",
        "id": "exp-42-dockerhub",
    }
    # Artifact Registry ids: at most 63 characters; a long deployment keeps a hash suffix.
    assert repository_id("x" * 70) == "x" * 54 + "-21a976ba"


def test_a_gpu_job_without_a_run_limit_gets_a_note_and_the_prod_stack_has_one() -> None:
    untimed = _config("dev-vertex-hpt")
    untimed["trainstack:vertex"] = {
        k: v for k, v in untimed["trainstack:vertex"].items() if k != "timeout_s"
    }
    assert NO_TIMEOUT in build_plan("dev-vertex-hpt", untimed)["notes"]
    prod = build_plan("prod-vertex-rs", _config("prod-vertex-rs"))
    assert NO_TIMEOUT not in prod["notes"]
    assert prod["limits"]["max_run_hours"] == 4
    [job] = _of_type(prod, "pulumi-python:dynamic/vertex:CustomJob")
    assert job["inputs"]["body"]["jobSpec"]["scheduling"]["timeout"] == "14400s"
    # The bundled tuning stack caps each trial.
    timed = build_plan("dev-vertex-hpt", _config("dev-vertex-hpt"))
    assert NO_TIMEOUT not in timed["notes"]
    [tuning] = _of_type(timed, "pulumi-python:dynamic/vertex:HyperparameterTuningJob")
    assert tuning["inputs"]["body"]["trialJobSpec"]["scheduling"]["timeout"] == "3600s"


def test_a_cpu_job_without_a_run_limit_gets_no_note() -> None:
    config = _config("dev-vertex-hpt")
    config["trainstack:vertex"] = {"machine_type": "n1-standard-8", "replica_count": 1}
    assert NO_TIMEOUT not in build_plan("cpu", config)["notes"]


@pytest.mark.parametrize(
    ("param", "scale"),
    [
        ({"type": "discrete", "values": [1, 2]}, "UNIT_LINEAR_SCALE"),
        ({"type": "integer", "min_value": 1, "max_value": 4}, "UNIT_LINEAR_SCALE"),
        (
            {"type": "integer", "min_value": 1, "max_value": 4, "scale_type": "UNIT_LOG_SCALE"},
            "UNIT_LOG_SCALE",
        ),
        ({"type": "double", "min_value": 0.1, "max_value": 1}, None),
        ({"type": "categorical", "values": ["a"]}, None),
    ],
)
def test_integer_and_discrete_parameters_default_to_a_linear_scale(
    param: dict[str, Any], scale: str | None
) -> None:
    assert _parameter_spec({"parameter_id": "x", **param}).get("scaleType") == scale


def test_the_identity_grants_reader_on_the_one_repository_it_is_given() -> None:
    def program() -> dict[str, Any]:
        args: dict[str, Any] = {
            "project": "p",
            "deployment_name": "exp-42",
            "data_bucket": "d",
            "checkpoint_bucket": "c",
            "staging_bucket": "s",
            "image_repository": {"location": "us-east1", "repository_id": "exp-42-dockerhub"},
        }
        identity = TrainingIdentity("id", args)  # type: ignore[arg-type]
        return {"grants": len(identity.grants), "images": len(identity.image_members)}

    run = run_program(program)
    [reader] = [r for r in run.resources if r.type == REPO_READER]
    assert (reader.name, reader.parent) == ("id-image-reader", "id")
    assert reader.inputs == {
        "project": "p",
        "location": "us-east1",
        "repository": "exp-42-dockerhub",
        "role": "roles/artifactregistry.reader",
        "member": "serviceAccount:exp-42-train@p.iam.gserviceaccount.com",
    }
    assert run.outputs == {"grants": 6, "images": 1}

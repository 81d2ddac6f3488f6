"""Issue 31 (trial H1): GKE nodes pull `trainer.image` as the stack's training account, which
holds no Editor role, so an image in Artifact Registry needs `roles/artifactregistry.reader`
on its repository (`trainstack.components.catalog.image_pull`). The plan grants it there and
nowhere else, on the TPU slices on GKE and the GPU GKE backend alike; an image elsewhere
gets no grant, nor does one in another project: a grant there needs setIamPolicy on a
repository the deployer may not administer (Google's public ones among them) and would fail
`pulumi up`; the plan says what to grant there instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainstack.components.catalog.image_pull import ImageRepository, image_repository
from trainstack.infra.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
AR_IMAGE = "us-docker.pkg.dev/my-ml-project/jax/tpu-trainer:1"
OTHER_PROJECT_IMAGE = "us-docker.pkg.dev/images-project/jax/tpu-trainer:1"
GOOGLE_IMAGE = "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.2-rev1"
GRANT_TYPE = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"


def _code(image: str) -> dict[str, Any]:
    return {
        "image": image,
        "source": str(REPO / "examples" / "own-jax"),
        "entrypoint": ["python", "train.py"],
        "launcher": "node",
    }


def _tpu_gke(image: str) -> dict[str, Any]:
    return {
        "gcp:project": "my-ml-project",
        "gcp:region": "us-east5",
        "trainstack:tpu": {
            "backend": "gke",
            "accelerator_type": "v6e-16",
            "zone": "us-east5-b",
            "slices": 2,
            "provisioning": "spot",
        },
        "trainstack:trainer": _code(image),
    }


def _gpu_gke(image: str) -> dict[str, Any]:
    return {
        "gcp:project": "my-ml-project",
        "gcp:region": "us-central1",
        "trainstack:gpu_cluster": {
            "backend": "gke",
            "machine_type": "a2-highgpu-8g",
            "node_count": 2,
            "zone": "us-central1-a",
        },
        "trainstack:trainer": _code(image),
    }


def _grants(stack: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    plan = build_plan(stack, config)
    return [
        {"name": r["name"], "parent": r["parent"], "inputs": r["inputs"]}
        for r in plan["resources"]
        if r["type"] == GRANT_TYPE
    ]


@pytest.mark.parametrize(("stack", "config"), [("tpu2", _tpu_gke), ("gpu2", _gpu_gke)])
def test_an_artifact_registry_image_gets_reader_on_its_repository(stack: str, config: Any) -> None:
    assert _grants(stack, config(AR_IMAGE)) == [
        {
            "name": f"{stack}-identity-image-reader",
            "parent": f"{stack}-identity",
            "inputs": {
                "project": "my-ml-project",
                "location": "us",
                "repository": "jax",
                "role": "roles/artifactregistry.reader",
                "member": f"serviceAccount:{stack}-train@my-ml-project.iam.gserviceaccount.com",
            },
        }
    ]


@pytest.mark.parametrize(("stack", "config"), [("tpu2", _tpu_gke), ("gpu2", _gpu_gke)])
def test_a_public_image_gets_no_grant(stack: str, config: Any) -> None:
    assert _grants(stack, config("docker.io/myorg/jax-tpu:1")) == []


@pytest.mark.parametrize(("stack", "config"), [("tpu2", _tpu_gke), ("gpu2", _gpu_gke)])
@pytest.mark.parametrize(
    ("image", "project", "repository"),
    [
        (OTHER_PROJECT_IMAGE, "images-project", "jax"),
        (GOOGLE_IMAGE, "cloud-tpu-images", "jax-ai-image"),
    ],
)
def test_an_image_in_another_projects_registry_gets_no_grant_but_a_note(
    stack: str, config: Any, image: str, project: str, repository: str
) -> None:
    plan = build_plan(stack, config(image))
    assert [r for r in plan["resources"] if r["type"] == GRANT_TYPE] == []
    assert [n for n in plan["notes"] if n.startswith("trainer.image: ")] == [
        f"trainer.image: {image} is in project {project}'s Artifact Registry, not this stack's "
        "project my-ml-project: trainstack grants nothing there. A public repository needs "
        f"nothing; otherwise grant serviceAccount:{stack}-train@my-ml-project.iam."
        f"gserviceaccount.com roles/artifactregistry.reader on repository {repository} (us) "
        f"in {project}, or the nodes cannot pull it"
    ]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (OTHER_PROJECT_IMAGE, ImageRepository("images-project", "us", "jax")),
        (
            "europe-west4-docker.pkg.dev/my-ml-project/train/t@sha256:" + "0" * 64,
            ImageRepository("my-ml-project", "europe-west4", "train"),
        ),
        ("us-docker.pkg.dev/my-ml-project/jax", None),  # a repository, not an image
        ("docker.io/library/python:3.12", None),
        ("gcr.io/my-ml-project/t:1", None),
        ("python:3.12", None),
        (None, None),
    ],
)
def test_the_repository_is_read_from_the_image_name(
    image: str | None, expected: ImageRepository | None
) -> None:
    assert image_repository(image) == expected

"""An Artifact Registry remote repository that mirrors Docker Hub for a stack's images.

    from trainstack.components.image_mirror import ImageMirror

    mirror = ImageMirror(
        "exp-42-images",
        {
            "project": "my-project",
            "location": "us-central1",  # the Vertex region: pulls stay in one location
            "deployment_name": "exp-42",
            "labels": {"team": "ml"},
        },
        opts=pulumi.ResourceOptions(depends_on=[apis]),  # artifactregistry.googleapis.com
    )
    # mirror.registry == "us-central1-docker.pkg.dev/my-project/exp-42-dockerhub"
    # image: mirrored_image_uri(VERTEX_TRAINING_IMAGES["trainstack.trainers.torch_ddp"], mirror.registry)

Why: Vertex pulls a Docker Hub image anonymously (its containerSpec has no registry
credential), and Docker Hub allows anonymous clients 10 pulls per hour per IPv4 address
(`trainstack.components.catalog.images.DOCKER_HUB_LIMIT_SOURCE`); a multi-replica job or a tuning
study's trials can exceed that. A remote repository fetches an image from Docker Hub once
and serves the cached copy after that (`DOCKER_HUB_MIRROR_SOURCE`). Its storage is billed
like any Artifact Registry storage (`REGISTRY_STORAGE_PRICE_SOURCE`: $0.10 per GB per
month above 0.5 GB free), negligible next to the job's hourly cost (the images' sizes were
not read here).

Naming: the repository id is `<deployment_name>-dockerhub` (`trainstack.components.naming.gcp_name`:
lowercase letters, digits and hyphens, starting with a letter, at most 63 characters, which
Artifact Registry's repository ids accept), so `registry` is known while the program runs
and a job's image URI is a plain string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NotRequired, TypedDict

import pulumi
from pulumi_gcp import artifactregistry

from trainstack.components._args import check_args, component_check
from trainstack.components.catalog.images import DOCKER_HUB_MIRROR, mirror_registry
from trainstack.components.naming import gcp_name, labels_input

TOKEN: Final = "trainstack:registry:ImageMirror"
COMPONENT_LABEL: Final = "image-mirror"
ROLE: Final = "dockerhub"
"""Role part of the repository id: `<deployment_name>-dockerhub`."""


class ImageMirrorArgs(TypedDict):
    """Arguments for `ImageMirror`."""

    project: str
    """Project the repository lives in: the job's. Vertex pulls images as its service agent,
    not the job's account (`IMAGE_PULL_ACCOUNT_SOURCE`); that agent reading Artifact
    Registry in its own project without a grant is inferred (U): Google says so for AI
    Platform's agent, and the Vertex custom-container guide pushes to a same-project
    repository with no grant step (cloud.google.com/vertex-ai/docs/training/
    create-custom-container)."""
    location: str
    """Artifact Registry region, e.g. `us-central1`: the Vertex job's region, so pulls stay
    in one location."""
    deployment_name: str
    """Deployment prefix of the repository id."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """User labels, merged with `component=image-mirror`."""


def repository_id(deployment_name: str) -> str:
    """The repository id for a deployment: `<deployment_name>-dockerhub`, at most 63 chars."""
    return gcp_name(deployment_name, ROLE)


class ImageMirror(pulumi.ComponentResource):
    """A Docker-format remote repository with Docker Hub upstream."""

    repository: artifactregistry.Repository
    """The remote repository."""
    repository_id: str
    """Its id (`<deployment_name>-dockerhub`)."""
    location: str
    """Its region."""
    registry: str
    """`LOCATION-docker.pkg.dev/PROJECT/REPOSITORY`: prefix of an image pulled through it."""

    def __init__(
        self, name: str, args: ImageMirrorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("ImageMirror", ImageMirrorArgs, args)
        labels = component_check("ImageMirror", labels_input, args.get("labels"), COMPONENT_LABEL)
        repo_id = repository_id(args["deployment_name"])
        super().__init__(TOKEN, name, None, opts)

        self.repository = artifactregistry.Repository(
            f"{name}-dockerhub",
            project=args["project"],
            location=args["location"],
            repository_id=repo_id,
            format="DOCKER",
            mode="REMOTE_REPOSITORY",
            description="Docker Hub mirror for trainstack's framework images; managed by "
            "trainstack.",
            remote_repository_config=artifactregistry.RepositoryRemoteRepositoryConfigArgs(
                description="Docker Hub",
                docker_repository=artifactregistry.RepositoryRemoteRepositoryConfigDockerRepositoryArgs(
                    public_repository=DOCKER_HUB_MIRROR
                ),
            ),
            labels=labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.repository_id = repo_id
        self.location = args["location"]
        self.registry = mirror_registry(args["location"], args["project"], repo_id)
        self.register_outputs(
            {
                "repository": self.repository,
                "repository_id": self.repository_id,
                "location": self.location,
                "registry": self.registry,
            }
        )

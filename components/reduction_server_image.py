"""A framework image with Google's Reduction Server NCCL plugin, built by Cloud Build into
the stack's own Artifact Registry repository and known by its digest.

    from trainstack.components.reduction_server_image import ReductionServerImage

    image = ReductionServerImage(
        "exp-42-rs-image",
        {
            "project": "my-project",
            "location": "us-central1",  # the Vertex region: the repository and the build
            "deployment_name": "exp-42",
            # the framework image by digest, through the stack's Docker Hub mirror
            "base_image": "us-central1-docker.pkg.dev/my-project/exp-42-dockerhub/pytorch/pytorch@sha256:...",
            "base_repository": {"location": "us-central1", "repository_id": "exp-42-dockerhub"},
        },
        opts=pulumi.ResourceOptions(depends_on=[apis]),  # cloudbuild, artifactregistry, iam
    )
    # VertexTrainingJob(..., {"plugin_image_uri": image.image_uri, ...})

Why: the chief and workers of a Reduction Server job need NCCL >= 2.7 and the
`google-reduction-server` package in their container, and Google's one documented way to
get it there is a Dockerfile line (`trainstack.components.catalog.reduction_server`). Google
publishes no package version to pin, so the pin is the built image's digest: the tag is a
hash of the Dockerfile (which names the base by digest), a new base or build text is a new
build, and an unchanged one is no build at all (the provider's diff).

What it creates (children named `<name>-...`):
- `repo`: a standard Docker repository `<deployment_name>-built` for what the stack builds.
- `builder`: the account the build runs as, `<deployment_name>-build`, with exactly
  `roles/artifactregistry.writer` on that repository (push), `roles/artifactregistry.reader`
  on `base_repository` (pull the base) and `roles/logging.logWriter` on the project (a build
  with its own account logs to Cloud Logging: `trainstack.components._cloud_build_provider`),
  and no storage role: the build reads no source from Cloud Storage (the Dockerfile goes on
  stdin) and writes no log there. That is what this build uses of the default account's
  role, whose permissions the account "uses ... only as required" (storage for a source or
  the logs bucket among them, https://cloud.google.com/build/docs/cloud-build-service-account).
  The default Cloud Build account is never used: Google warns it "may have permissions that
  are unnecessarily broad" (https://cloud.google.com/build/docs/securing-builds/
  configure-user-specified-service-accounts). Whoever runs `pulumi up` needs
  `iam.serviceAccounts.actAs` on it, as for the training account.
- `build`: the Cloud Build build (`ImageBuild`), after the grants.

Vertex pulls the image with its own service agent, as it pulls through the Docker Hub
mirror (`trainstack.components.catalog.images.IMAGE_PULL_ACCOUNT_SOURCE`); that this needs no
grant in the job's own project is inferred, as for the mirror (U).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NotRequired, TypedDict

import pulumi
from pulumi_gcp import artifactregistry, projects, serviceaccount

from trainstack.components._args import check_args, component_check
from trainstack.components._cloud_build_provider import ImageBuild, ImageBuildProvider
from trainstack.components.catalog.images import mirror_registry
from trainstack.components.catalog.reduction_server import (
    plugin_dockerfile,
    plugin_image_name,
    plugin_image_tag,
)
from trainstack.components.naming import account_id, gcp_name, labels_input

TOKEN: Final = "trainstack:registry:ReductionServerImage"
COMPONENT_LABEL: Final = "reduction-server-image"
REPOSITORY_ROLE: Final = "built"
ACCOUNT_ROLE: Final = "build"
WRITER_ROLE: Final = "roles/artifactregistry.writer"
READER_ROLE: Final = "roles/artifactregistry.reader"
LOG_WRITER_ROLE: Final = "roles/logging.logWriter"
SERVICES: Final = ("cloudbuild.googleapis.com", "artifactregistry.googleapis.com")
"""The APIs the image needs enabled (the account's IAM API is every stack's)."""


class RepositoryRef(TypedDict):
    """An Artifact Registry repository by region and id."""

    location: pulumi.Input[str]
    repository_id: pulumi.Input[str]


class ReductionServerImageArgs(TypedDict):
    """Arguments for `ReductionServerImage`."""

    project: str
    """Project of the repository, the build and its account: the job's."""
    location: str
    """Region of the repository and the build, e.g. `us-central1`: the Vertex job's."""
    deployment_name: str
    """Deployment prefix of the repository id and the account id."""
    base_image: str
    """The framework image to build on, by digest (`HOST/PATH@sha256:...`)."""
    base_repository: NotRequired[RepositoryRef]
    """The Artifact Registry repository `base_image` is pulled from (the stack's Docker Hub
    mirror): the build account gets read on it, on it alone."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """User labels, merged with `component=reduction-server-image` (the repository's)."""
    api_endpoint: NotRequired[str]
    """Override the Cloud Build endpoint (tests point it at a local server)."""


def repository_id(deployment_name: str) -> str:
    """The built images' repository id: `<deployment_name>-built`, at most 63 characters."""
    return gcp_name(deployment_name, REPOSITORY_ROLE)


def _image_problems(base_image: str) -> None:
    if "@sha256:" not in base_image:
        raise ValueError(
            f"base_image: {base_image!r} is not pinned by digest; valid: HOST/PATH@sha256:<hex>"
        )


class ReductionServerImage(pulumi.ComponentResource):
    """`base_image` plus Google's Reduction Server NCCL plugin, built and pinned."""

    repository: artifactregistry.Repository
    builder: serviceaccount.Account
    grants: list[pulumi.Resource]
    build: ImageBuild
    dockerfile: str
    """The Dockerfile the build runs (`plugin_dockerfile(base_image)`)."""
    image: str
    """`<registry>/<name>:<tag>`: where the build pushes, known while the program runs."""
    image_uri: pulumi.Output[str]
    """`<registry>/<name>@sha256:...`: the pushed image, what the job runs."""

    def __init__(
        self,
        name: str,
        args: ReductionServerImageArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        check_args("ReductionServerImage", ReductionServerImageArgs, args)
        component_check("ReductionServerImage", _image_problems, args["base_image"])
        labels = component_check(
            "ReductionServerImage", labels_input, args.get("labels"), COMPONENT_LABEL
        )
        super().__init__(TOKEN, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project, location = args["project"], args["location"]
        repo_id = repository_id(args["deployment_name"])

        self.repository = artifactregistry.Repository(
            f"{name}-repo",
            project=project,
            location=location,
            repository_id=repo_id,
            format="DOCKER",
            description="Images trainstack builds for this stack (Reduction Server plugin); "
            "managed by trainstack.",
            labels=labels,
            opts=child,
        )
        self.builder = serviceaccount.Account(
            f"{name}-builder",
            project=project,
            account_id=account_id(args["deployment_name"], ACCOUNT_ROLE),
            display_name=f"trainstack image builds for {args['deployment_name']}",
            opts=child,
        )
        member = self.builder.member
        self.grants = [
            artifactregistry.RepositoryIamMember(
                f"{name}-push",
                project=project,
                location=location,
                repository=self.repository.repository_id,
                role=WRITER_ROLE,
                member=member,
                opts=child,
            ),
            projects.IAMMember(
                f"{name}-log-writer",
                project=project,
                role=LOG_WRITER_ROLE,
                member=member,
                opts=child,
            ),
        ]
        base = args.get("base_repository")
        if base is not None:
            self.grants.append(
                artifactregistry.RepositoryIamMember(
                    f"{name}-pull",
                    project=project,
                    location=base["location"],
                    repository=base["repository_id"],
                    role=READER_ROLE,
                    member=member,
                    opts=child,
                )
            )
        self.dockerfile = plugin_dockerfile(args["base_image"])
        registry = mirror_registry(location, project, repo_id)
        self.image = (
            f"{registry}/{plugin_image_name(args['base_image'])}:"
            f"{plugin_image_tag(self.dockerfile)}"
        )
        self.build = ImageBuild(
            f"{name}-build",
            project=project,
            location=location,
            image=self.image,
            dockerfile=self.dockerfile,
            service_account=self.builder.email,
            api_endpoint=args.get("api_endpoint"),
            provider=ImageBuildProvider(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.repository, *self.grants]),
        )
        self.image_uri = self.build.image_uri
        self.register_outputs(
            {
                "repository": self.repository,
                "builder": self.builder,
                "image": self.image,
                "image_uri": self.image_uri,
            }
        )

"""Which Artifact Registry repository a container image is pulled from, so that the
account a GKE node pulls it as may read that repository and nothing more.

GKE nodes pull a pod's image as the node's own service account ("Your Google Kubernetes
Engine (GKE) nodes use Identity and Access Management (IAM) service accounts for tasks like
logging and pulling container images for workloads",
https://cloud.google.com/kubernetes-engine/security/configure-node-service-accounts), and
without the Editor role the default grants give it, it needs Artifact Registry's reader role
on the repository: "grant the Artifact Registry Reader role (roles/artifactregistry.reader)
to the Compute Engine default service account" where the automatic Editor grant is off
(https://cloud.google.com/artifact-registry/docs/integrate-gke, Permissions). trainstack's
nodes run as the stack's own training account, which holds no Editor role, so a private
image needs the grant; a public image (Docker Hub, a public repository) needs none.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

IMAGE_READER_ROLE: Final = "roles/artifactregistry.reader"
"""Pull images of one repository (ARTIFACT_REGISTRY_SOURCE)."""
ARTIFACT_REGISTRY_SOURCE: Final = (
    "https://cloud.google.com/artifact-registry/docs/docker/names: 'The full name for a "
    "container image is one of the following formats: LOCATION-docker.pkg.dev/PROJECT-ID/"
    "REPOSITORY/IMAGE' (or IMAGE:TAG, IMAGE@IMAGE-DIGEST), 'LOCATION is the regional or "
    "multi-regional location of the repository'; "
    "https://cloud.google.com/artifact-registry/docs/integrate-gke (Permissions): the GKE "
    "node service account needs roles/artifactregistry.reader to pull"
)
_AR_IMAGE: Final = re.compile(
    r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/"
    r"(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9])/"
    r"(?P<repository>[a-z0-9][a-z0-9._-]*)/[^\s]+$"
)
"""LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE (ARTIFACT_REGISTRY_SOURCE; project ids:
6-30 lowercase letters, digits and hyphens, starting with a letter). A domain-scoped
project's image (its id has a colon, which Google spells another way, not read here) does
not match: no grant is made for it."""


class ImageRepository(NamedTuple):
    """The Artifact Registry repository an image lives in."""

    project: str
    """Its project id."""
    location: str
    """Its region or multi-region, e.g. `us`, `us-central1`."""
    repository: str
    """Its repository id."""


def image_repository(image: str | None) -> ImageRepository | None:
    """The Artifact Registry repository `image` is pulled from, read from its name
    (ARTIFACT_REGISTRY_SOURCE); None for any other registry (Docker Hub, a public image
    elsewhere) or no image."""
    match = _AR_IMAGE.match(image or "")
    if match is None:
        return None
    return ImageRepository(match["project"], match["location"], match["repository"])


def image_pull_note(image: str | None, project: str | None, account: str) -> str | None:
    """The plan's note on an Artifact Registry image in another project than the stack's:
    trainstack grants the reader role in the stack's project only (a grant elsewhere needs
    setIamPolicy on a repository the stack's deployer may not administer, Google's public
    repositories among them, and would fail `pulumi up` with the nodes waiting on it), so it
    says what to grant there if that repository is not public; None where nothing is to say."""
    repo = image_repository(image)
    if repo is None or repo.project == project:
        return None
    return (
        f"trainer.image: {image} is in project {repo.project}'s Artifact Registry, not this "
        f"stack's project {project}: trainstack grants nothing there. A public repository "
        f"needs nothing; otherwise grant {account} {IMAGE_READER_ROLE} on repository "
        f"{repo.repository} ({repo.location}) in {repo.project}, or the nodes cannot pull it"
    )

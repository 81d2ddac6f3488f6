"""A dedicated, least-privilege service account for training workloads.

    from trainstack.components.training_identity import TrainingIdentity

    identity = TrainingIdentity(
        "exp-42-identity",
        {
            "project": "my-project",
            "deployment_name": "exp-42",
            "data_bucket": buckets.data_bucket,
            "checkpoint_bucket": buckets.checkpoint_bucket,
            "staging_bucket": buckets.staging_bucket,
        },
    )
    # compute components take identity.service_account_email, and
    # opts=pulumi.ResourceOptions(depends_on=identity.grants)

Grants, and nothing more unless asked for: read objects in the data and staging buckets,
read/write objects in the checkpoint bucket (bucket-level bindings, not project-wide), and
write logs and metrics in the project. The staging bucket holds the trainer package every
node installs and runs, so the account may only read it: a compromised or buggy worker
cannot replace the code the other nodes (and the next run) execute. The default compute service account (project
Editor) is never used. `extra_project_roles` adds project roles, but owner/editor and
roles that let the account administer IAM or impersonate others are refused. `secrets`
grants `roles/secretmanager.secretAccessor` on exactly the listed Secret Manager secrets
(your code's `trainer.secret_env`, read on the node), one binding per secret, never on the
project. `image_repository` grants `roles/artifactregistry.reader` on that one Artifact
Registry repository (the stack's Docker Hub mirror, `trainstack.components.image_mirror`, or
the repository of the image GKE nodes running as the account pull), never on the project.

Naming: the account id is `<deployment_name>-train` (6-30 chars, see `trainstack.components.naming`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, NotRequired, TypedDict

import pulumi
from pulumi_gcp import artifactregistry, projects, secretmanager, serviceaccount, storage

from trainstack.components._args import check_args, component_check
from trainstack.components.naming import account_id, labels_input, name_input

TOKEN = "trainstack:iam:TrainingIdentity"
COMPONENT_LABEL = "training-identity"

BASE_PROJECT_ROLES: tuple[tuple[str, str], ...] = (
    ("log-writer", "roles/logging.logWriter"),
    ("metric-writer", "roles/monitoring.metricWriter"),
)
"""(role suffix of the logical name, project role) granted to every training account."""

DENIED_PROJECT_ROLES: frozenset[str] = frozenset(
    {
        # Basic roles: project-wide read or write on everything.
        "roles/owner",
        "roles/editor",
        "roles/viewer",
        # Impersonation: acting as, or minting tokens for, other service accounts.
        "roles/iam.serviceAccountUser",
        "roles/iam.serviceAccountTokenCreator",
        "roles/iam.serviceAccountKeyAdmin",
        "roles/iam.serviceAccountAdmin",
        "roles/iam.workloadIdentityUser",
        # IAM administration: could grant itself anything.
        "roles/resourcemanager.projectIamAdmin",
        "roles/iam.securityAdmin",
        "roles/iam.roleAdmin",
        # Project-wide storage admin would bypass the per-bucket grants.
        "roles/storage.admin",
    }
)
"""Project roles a training account must never hold."""

SUPERVISOR_WRITES: Final = (
    "it could write the run supervisor's state bucket (its spend count, clock and recovery "
    "marker) and switch the supervisor off"
)
SUPERVISOR_STOPS: Final = "it could delete or pause the run supervisor's function or schedule"
SUPERVISOR_DENIED_ROLES: Final[dict[str, str]] = {
    # https://cloud.google.com/storage/docs/access-control/iam-roles: objectCreator
    # "storage.objects.create"; objectUser "create, view, list, update, and delete objects";
    # objectAdmin "Grants full control over objects"; legacyBucketWriter/Owner (google-cloud-
    # storage StorageRoles) storage.objects.create and .delete; folderAdmin storage.objects.*
    # (in its folders). Granted on the project, on every bucket, the state bucket included.
    "roles/storage.objectCreator": SUPERVISOR_WRITES,
    "roles/storage.objectUser": SUPERVISOR_WRITES,
    "roles/storage.objectAdmin": SUPERVISOR_WRITES,
    "roles/storage.legacyBucketWriter": SUPERVISOR_WRITES,
    "roles/storage.legacyBucketOwner": SUPERVISOR_WRITES,
    "roles/storage.folderAdmin": SUPERVISOR_WRITES,
    # https://cloud.google.com/functions/docs/reference/iam/roles: admin "Full access to
    # functions", developer "Read and write access to all functions-related resources"
    # (cloudfunctions.functions.delete, .update).
    "roles/cloudfunctions.admin": SUPERVISOR_STOPS,
    "roles/cloudfunctions.developer": SUPERVISOR_STOPS,
    # https://docs.cloud.google.com/run/docs/securing/managing-access: run.admin and
    # run.developer "Can create, update, and delete services" (a gen2 function is one).
    "roles/run.admin": SUPERVISOR_STOPS,
    "roles/run.developer": SUPERVISOR_STOPS,
    # https://docs.cloud.google.com/iam/docs/roles-permissions/cloudscheduler: admin "Full
    # access to jobs and executions" (cloudscheduler.jobs.delete, .pause, .update).
    "roles/cloudscheduler.admin": SUPERVISOR_STOPS,
}
"""Project roles that would let code running as the training account (a compromised
requirement, say) switch its run supervisor off (issue 29, item 4), with why: refused as
`DENIED_PROJECT_ROLES` are. Compute roles (tpu.admin, compute.instanceAdmin) are not here:
they reach the compute, not the supervisor, which stops what it supervises all the same."""

IMAGE_READER_ROLE = "roles/artifactregistry.reader"
"""Read (pull) images of one repository: the one grant `image_repository` gives."""
SECRET_ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"
"""Read a secret's versions: the one grant `secrets` gives, per secret."""
_SECRET = re.compile(r"^projects/([A-Za-z0-9][A-Za-z0-9._:-]*)/secrets/([A-Za-z0-9_-]{1,255})$")

_ROLE = re.compile(
    r"^(roles/[A-Za-z0-9_.]+|(projects|organizations)/[A-Za-z0-9_.:-]+/roles/[A-Za-z0-9_.]+)$"
)


class RepositoryRef(TypedDict):
    """An Artifact Registry repository."""

    project: NotRequired[pulumi.Input[str]]
    """Its project; default the account's (`TrainingIdentityArgs.project`)."""
    location: pulumi.Input[str]
    """Its region, e.g. `us-central1`."""
    repository_id: pulumi.Input[str]
    """Its id, e.g. `exp-42-dockerhub`."""


class TrainingIdentityArgs(TypedDict):
    """Arguments for `TrainingIdentity`."""

    project: pulumi.Input[str]
    """Project id the service account lives in and gets its project roles in."""
    deployment_name: pulumi.Input[str]
    """Deployment prefix of the account id."""
    data_bucket: pulumi.Input[str]
    """Name of the data bucket (read-only access)."""
    checkpoint_bucket: pulumi.Input[str]
    """Name of the checkpoint bucket (object read/write)."""
    staging_bucket: pulumi.Input[str]
    """Name of the staging bucket (read-only: the trainer package every node installs; the
    deployer, not the training account, uploads it)."""
    extra_project_roles: NotRequired[Sequence[str]]
    """Further project-level roles, e.g. `roles/aiplatform.user`. Plain strings: each is
    checked against a denylist and becomes its own binding."""
    secrets: NotRequired[Sequence[str]]
    """Secret Manager secrets (`projects/P/secrets/NAME`, no version) the account may read:
    `roles/secretmanager.secretAccessor` on each of them, nothing project-wide."""
    image_repository: NotRequired[RepositoryRef]
    """The repository the training images are pulled through (the stack's Docker Hub mirror,
    or the Artifact Registry repository of your `trainer.image` that GKE nodes running as
    this account pull: `trainstack.components.catalog.image_pull`):
    `roles/artifactregistry.reader` on it alone."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Accepted for the shared vocabulary; service accounts and IAM bindings carry no labels."""


def _validate_extra_roles(roles: Sequence[str]) -> list[str]:
    if isinstance(roles, str):
        roles = [roles]
    base = {role for _, role in BASE_PROJECT_ROLES}
    seen: list[str] = []
    for role in roles:
        if not isinstance(role, str) or not _ROLE.match(role):
            raise ValueError(
                f"extra_project_roles: {role!r} is not a role name; valid: roles/<id>, "
                "projects/<project>/roles/<id> or organizations/<org>/roles/<id>"
            )
        if role in SUPERVISOR_DENIED_ROLES:
            raise ValueError(
                f"extra_project_roles: {role!r} is not allowed for the training service "
                f"account ({SUPERVISOR_DENIED_ROLES[role]}); valid: a narrower predefined or "
                "custom role, or a grant on the one resource outside the component"
            )
        if role in DENIED_PROJECT_ROLES:
            raise ValueError(
                f"extra_project_roles: {role!r} is not allowed for the training service "
                "account (basic, IAM-admin, impersonation and project-wide storage-admin "
                "roles are denied); valid: a narrower predefined or custom role"
            )
        if role in base:
            raise ValueError(
                f"extra_project_roles: {role!r} is already granted by default; valid: a role "
                "not granted by default"
            )
        if role in seen:
            raise ValueError(f"extra_project_roles: {role!r} is listed twice; valid: once")
        seen.append(role)
    return seen


def _validate_secrets(secrets: Sequence[str]) -> list[tuple[str, str]]:
    """(project, secret id) of each secret, in the order given."""
    if isinstance(secrets, str):
        secrets = [secrets]
    seen: list[tuple[str, str]] = []
    for secret in secrets:
        match = _SECRET.match(secret) if isinstance(secret, str) else None
        if match is None:
            raise ValueError(
                f"secrets: {secret!r} is not a Secret Manager secret name; valid: "
                "projects/P/secrets/NAME"
            )
        if (match[1], match[2]) in seen:
            raise ValueError(f"secrets: {secret!r} is listed twice; valid: once")
        seen.append((match[1], match[2]))
    return seen


def _secret_suffix(project: str, secret: str) -> str:
    # Named after the secret, not its position, so reordering the list renames nothing.
    return "secret-" + re.sub(r"[^a-z0-9]+", "-", f"{project}-{secret}".lower()).strip("-")


def _role_suffix(role: str) -> str:
    # Derived from the role itself, not its position, so reordering the list renames nothing.
    role_id = role.rsplit("/", 1)[-1]
    kind = "role" if role.startswith("roles/") else "custom-role"
    return f"{kind}-" + re.sub(r"[^a-z0-9]+", "-", role_id.lower()).strip("-")


class TrainingIdentity(pulumi.ComponentResource):
    """A training service account with bucket-scoped storage access and log/metric writing."""

    service_account_email: pulumi.Output[str]
    """Email of the training service account; pass it to compute components."""
    service_account_member: pulumi.Output[str]
    """IAM member string `serviceAccount:<email>`, for further bindings."""
    service_account: serviceaccount.Account
    """The dedicated training service account."""
    bucket_members: list[storage.BucketIAMMember]
    """Bucket-level grants: data and staging object viewer, checkpoint object admin."""
    project_members: list[projects.IAMMember]
    """Project-level grants: log writer, metric writer and any extra roles."""
    secret_members: list[secretmanager.SecretIamMember]
    """Secret accessor on each of `secrets`, in their order."""
    image_members: list[artifactregistry.RepositoryIamMember]
    """Reader on `image_repository` (none without it)."""
    grants: list[pulumi.Resource]
    """Every binding above: compute that runs as this account passes them as its
    `depends_on`, so it starts only once its permissions exist (IAM changes then still take
    up to about 7 minutes to reach every check: https://cloud.google.com/iam/docs/access-change-propagation)."""

    def __init__(
        self, name: str, args: TrainingIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("TrainingIdentity", TrainingIdentityArgs, args)
        extra_roles = component_check(
            "TrainingIdentity", _validate_extra_roles, args.get("extra_project_roles", [])
        )
        secrets = component_check("TrainingIdentity", _validate_secrets, args.get("secrets", []))
        component_check(
            "TrainingIdentity", labels_input, args.get("labels"), COMPONENT_LABEL
        )  # validation only
        account = name_input(account_id, args["deployment_name"], "train")
        super().__init__(TOKEN, name, None, opts)

        child = pulumi.ResourceOptions(parent=self)
        self.service_account = serviceaccount.Account(
            f"{name}-sa",
            project=args["project"],
            account_id=account,
            display_name=pulumi.Output.concat(
                "trainstack training (", args["deployment_name"], ")"
            ),
            description="Runs trainstack training jobs; managed by trainstack.",
            opts=child,
        )
        member = self.service_account.member

        bucket_grants = (
            ("data-viewer", args["data_bucket"], "roles/storage.objectViewer"),
            ("checkpoints-admin", args["checkpoint_bucket"], "roles/storage.objectAdmin"),
            ("staging-viewer", args["staging_bucket"], "roles/storage.objectViewer"),
        )
        self.bucket_members = [
            storage.BucketIAMMember(
                f"{name}-{suffix}", bucket=bucket, role=role, member=member, opts=child
            )
            for suffix, bucket, role in bucket_grants
        ]
        project_grants = [*BASE_PROJECT_ROLES, *((_role_suffix(r), r) for r in extra_roles)]
        self.project_members = [
            projects.IAMMember(
                f"{name}-{suffix}", project=args["project"], role=role, member=member, opts=child
            )
            for suffix, role in project_grants
        ]
        self.secret_members = [
            secretmanager.SecretIamMember(
                f"{name}-{_secret_suffix(project, secret)}",
                project=project,
                secret_id=secret,
                role=SECRET_ACCESSOR_ROLE,
                member=member,
                opts=child,
            )
            for project, secret in secrets
        ]

        repo = args.get("image_repository")
        # Vertex pulls the image as its own service agent, not as this account
        # (trainstack.components.catalog.images.IMAGE_PULL_ACCOUNT_SOURCE); the grant covers what runs
        # as the account and reads the repository, on that repository alone. Being in
        # `grants`, it makes the job wait for the repository too.
        self.image_members = (
            []
            if repo is None
            else [
                artifactregistry.RepositoryIamMember(
                    f"{name}-image-reader",
                    project=repo.get("project", args["project"]),
                    location=repo["location"],
                    repository=repo["repository_id"],
                    role=IMAGE_READER_ROLE,
                    member=member,
                    opts=child,
                )
            ]
        )
        self.grants = [
            *self.bucket_members,
            *self.project_members,
            *self.secret_members,
            *self.image_members,
        ]
        self.service_account_email = self.service_account.email
        self.service_account_member = member
        self.register_outputs(
            {
                "service_account_email": self.service_account_email,
                "service_account_member": self.service_account_member,
                "service_account": self.service_account,
            }
        )

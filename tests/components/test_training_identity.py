"""TrainingIdentity under Pulumi mocks: a dedicated account with exactly the intended grants."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainstack.components._args import ArgsError
from trainstack.components.training_identity import TOKEN, TrainingIdentity
from trainstack.infra.mocks import ProgramRun, run_program

ACCOUNT = "gcp:serviceaccount/account:Account"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
EMAIL = "exp-42-train@my-project.iam.gserviceaccount.com"
MEMBER = f"serviceAccount:{EMAIL}"


def _run(**overrides: Any) -> ProgramRun:
    args: dict[str, Any] = {
        "project": "my-project",
        "deployment_name": "exp-42",
        "data_bucket": "b-data",
        "checkpoint_bucket": "b-ckpt",
        "staging_bucket": "b-staging",
        **overrides,
    }

    def program() -> dict[str, Any]:
        identity = TrainingIdentity("id", args)  # type: ignore[arg-type]
        return {
            "email": identity.service_account_email,
            "member": identity.service_account_member,
        }

    return run_program(program)


def test_children_and_outputs() -> None:
    run = _run()
    assert {(r.type, r.name, r.parent) for r in run.resources} == {
        (TOKEN, "id", None),
        (ACCOUNT, "id-sa", "id"),
        (BUCKET_MEMBER, "id-data-viewer", "id"),
        (BUCKET_MEMBER, "id-checkpoints-admin", "id"),
        (BUCKET_MEMBER, "id-staging-viewer", "id"),
        (PROJECT_MEMBER, "id-log-writer", "id"),
        (PROJECT_MEMBER, "id-metric-writer", "id"),
    }
    assert len(run.resources) == 7
    assert run.outputs == {"email": EMAIL, "member": MEMBER}


def test_dedicated_account() -> None:
    account = _run().named("id-sa").inputs
    assert account["accountId"] == "exp-42-train"
    assert account["project"] == "my-project"
    assert account["displayName"] == "trainstack training (exp-42)"


def test_bucket_grants_are_scoped_per_bucket() -> None:
    run = _run()
    grants = {
        (r.inputs["bucket"], r.inputs["role"], r.inputs["member"])
        for r in run.of_type(BUCKET_MEMBER)
    }
    assert grants == {
        ("b-data", "roles/storage.objectViewer", MEMBER),
        ("b-ckpt", "roles/storage.objectAdmin", MEMBER),
        ("b-staging", "roles/storage.objectViewer", MEMBER),
    }


def test_project_grants_are_only_logs_and_metrics() -> None:
    run = _run()
    grants = {
        (r.inputs["project"], r.inputs["role"], r.inputs["member"])
        for r in run.of_type(PROJECT_MEMBER)
    }
    assert grants == {
        ("my-project", "roles/logging.logWriter", MEMBER),
        ("my-project", "roles/monitoring.metricWriter", MEMBER),
    }


def test_extra_project_roles() -> None:
    run = _run(extra_project_roles=["roles/aiplatform.user", "projects/p/roles/trainRunner"])
    assert run.named("id-role-aiplatform-user").inputs == {
        "project": "my-project",
        "role": "roles/aiplatform.user",
        "member": MEMBER,
    }
    assert run.named("id-custom-role-trainrunner").inputs["role"] == "projects/p/roles/trainRunner"
    assert len(run.of_type(PROJECT_MEMBER)) == 4


@pytest.mark.parametrize(
    "role",
    [
        "roles/owner",
        "roles/editor",
        "roles/viewer",
        "roles/iam.serviceAccountUser",
        "roles/iam.serviceAccountTokenCreator",
        "roles/resourcemanager.projectIamAdmin",
        "roles/storage.admin",
    ],
)
def test_denied_roles(role: str) -> None:
    message = (
        f"extra_project_roles: {role!r} is not allowed for the training service account "
        "(basic, IAM-admin, impersonation and project-wide storage-admin roles are denied)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        _run(extra_project_roles=[role])


WRITES = (
    "it could write the run supervisor's state bucket (its spend count, clock and recovery "
    "marker) and switch the supervisor off"
)
STOPS = "it could delete or pause the run supervisor's function or schedule"


@pytest.mark.parametrize(
    ("role", "why"),
    [
        ("roles/storage.objectCreator", WRITES),
        ("roles/storage.objectUser", WRITES),
        ("roles/storage.objectAdmin", WRITES),
        ("roles/storage.legacyBucketWriter", WRITES),
        ("roles/storage.legacyBucketOwner", WRITES),
        ("roles/storage.folderAdmin", WRITES),
        ("roles/cloudfunctions.admin", STOPS),
        ("roles/cloudfunctions.developer", STOPS),
        ("roles/run.admin", STOPS),
        ("roles/run.developer", STOPS),
        ("roles/cloudscheduler.admin", STOPS),
    ],
)
def test_roles_that_could_switch_the_supervisor_off_are_denied(role: str, why: str) -> None:
    # Project-wide, each reaches the supervisor's own bucket, function or schedule: code
    # running as the training account could reset its spend count or stop its checks.
    with pytest.raises(ArgsError) as raised:
        _run(extra_project_roles=[role])
    assert str(raised.value) == (
        f"TrainingIdentity.extra_project_roles: {role!r} is not allowed for the training "
        f"service account ({why}); valid: a narrower predefined or custom role, or a grant on "
        "the one resource outside the component"
    )


def test_compute_roles_are_still_accepted() -> None:
    run = _run(extra_project_roles=["roles/tpu.admin", "roles/aiplatform.user"])
    roles = sorted(r.inputs["role"] for r in run.of_type(PROJECT_MEMBER))
    assert roles == [
        "roles/aiplatform.user",
        "roles/logging.logWriter",
        "roles/monitoring.metricWriter",
        "roles/tpu.admin",
    ]


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        (
            ["owner"],
            (
                "extra_project_roles: 'owner' is not a role name; valid: roles/<id>, "
                "projects/<project>/roles/<id> or organizations/<org>/roles/<id>"
            ),
        ),
        (
            ["roles/logging.logWriter"],
            "extra_project_roles: 'roles/logging.logWriter' is already granted by default",
        ),
        (
            ["roles/aiplatform.user", "roles/aiplatform.user"],
            "extra_project_roles: 'roles/aiplatform.user' is listed twice; valid: once",
        ),
    ],
)
def test_role_validation_errors(roles: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _run(extra_project_roles=roles)


def test_same_program_registers_identical_inputs() -> None:
    first, second = _run(), _run()
    assert {r.name: (r.type, r.inputs) for r in first.resources} == {
        r.name: (r.type, r.inputs) for r in second.resources
    }


SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"


def test_secret_accessor_on_exactly_the_given_secrets() -> None:
    run = _run(secrets=["projects/my-project/secrets/hf-token", "projects/other/secrets/WANDB_KEY"])
    assert {(r.type, r.name, r.parent) for r in run.of_type(SECRET_MEMBER)} == {
        (SECRET_MEMBER, "id-secret-my-project-hf-token", "id"),
        (SECRET_MEMBER, "id-secret-other-wandb-key", "id"),
    }
    assert run.named("id-secret-my-project-hf-token").inputs == {
        "project": "my-project",
        "secretId": "hf-token",
        "role": "roles/secretmanager.secretAccessor",
        "member": MEMBER,
    }
    assert run.named("id-secret-other-wandb-key").inputs == {
        "project": "other",
        "secretId": "WANDB_KEY",
        "role": "roles/secretmanager.secretAccessor",
        "member": MEMBER,
    }
    # Never a project-wide secret grant.
    assert len(run.of_type(PROJECT_MEMBER)) == 2
    assert len(run.resources) == 9


def test_no_secrets_no_secret_grants() -> None:
    assert _run(secrets=[]).of_type(SECRET_MEMBER) == []


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        (
            ["projects/p/secrets/s/versions/3"],
            "secrets: 'projects/p/secrets/s/versions/3' is not a Secret Manager secret name; "
            "valid: projects/P/secrets/NAME",
        ),
        (
            ["hf-token"],
            "secrets: 'hf-token' is not a Secret Manager secret name; valid: "
            "projects/P/secrets/NAME",
        ),
        (
            ["projects/p/secrets/s", "projects/p/secrets/s"],
            "secrets: 'projects/p/secrets/s' is listed twice; valid: once",
        ),
    ],
)
def test_secret_validation_errors(secrets: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _run(secrets=secrets)

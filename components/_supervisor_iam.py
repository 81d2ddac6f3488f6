"""The run supervisor's IAM resources (`trainstack.components.run_supervisor`): its custom
roles with their grants, the condition that holds its checkpoint-bucket grant to the run's
records, and the Cloud Build service account that builds its Cloud Functions function,
holding only the roles Google lists for it
(`trainstack.components.catalog.supervisor_iam.BUILD_SOURCE`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_gcp import projects, serviceaccount, storage

from trainstack.components._supervisor_bundle import OBJECT_PREFIX
from trainstack.components.catalog.supervisor_iam import (
    BUILD_COPY_CONDITION,
    BUILD_PROJECT_ROLES,
    BUILD_SOURCE_ROLE,
    STORAGE_OBJECT_NAME,
)
from trainstack.components.gpu_startup import RUN_CLOCK_PREFIX
from trainstack.components.naming import account_id

BUILD_ROLE_NAMES = {
    "roles/logging.logWriter": "logs",
    "roles/artifactregistry.writer": "images",
}
"""Resource name suffix of each project grant (`<name>-build-<suffix>`)."""


@dataclass(frozen=True)
class BuildAccount:
    """The account (`build_config.service_account` takes `account.name`) and its grants,
    which the function must wait for."""

    account: serviceaccount.Account
    grants: list[pulumi.Resource]


def build_account(
    name: str,
    project: str,
    deployment: str,
    staging_bucket: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> BuildAccount:
    """`<deployment>-sup-build` with logging and Artifact Registry writes on the project, and
    object reads of the source zips in the staging bucket (`supervisor/*`) and of Cloud
    Functions' own copies of function sources (`gcf-v2-sources-*`), each by a condition,
    only."""
    account = serviceaccount.Account(
        f"{name}-build-sa",
        project=project,
        account_id=account_id(deployment, "sup-build"),
        display_name=f"trainstack supervisor build ({deployment})",
        description="Builds this stack's run supervisor function; managed by trainstack.",
        opts=opts,
    )
    grants: list[pulumi.Resource] = [
        projects.IAMMember(
            f"{name}-build-{BUILD_ROLE_NAMES[role]}",
            project=project,
            role=role,
            member=account.member,
            opts=opts,
        )
        for role in BUILD_PROJECT_ROLES
    ]
    # Held to the supervisor's zips (`supervisor/`) by their object names, a form Google
    # documents for conditions (STORAGE_CONDITIONS_SOURCE): the staging bucket also holds the
    # trainer packages, which the build has no use for.
    grants.append(
        storage.BucketIAMMember(
            f"{name}-build-source",
            bucket=staging_bucket,
            role=BUILD_SOURCE_ROLE,
            member=account.member,
            condition=pulumi.Output.from_input(staging_bucket).apply(
                lambda bucket: storage.BucketIAMMemberConditionArgs(**source_condition(bucket))
            ),
            opts=opts,
        )
    )
    # The build reads Cloud Functions' own copy of the zip (FUNCTION_SOURCES_SOURCE).
    grants.append(
        projects.IAMMember(
            f"{name}-build-copies",
            project=project,
            role=BUILD_SOURCE_ROLE,
            member=account.member,
            condition=projects.IAMMemberConditionArgs(**BUILD_COPY_CONDITION),
            opts=opts,
        )
    )
    return BuildAccount(account=account, grants=grants)


def source_condition(bucket: str) -> dict[str, str]:
    """The IAM condition that holds the build account's read of the staging bucket `bucket`
    to the supervisor's source zips (`_supervisor_bundle.OBJECT_PREFIX`)."""
    objects = STORAGE_OBJECT_NAME.format(bucket=bucket, object=OBJECT_PREFIX)
    return {
        "title": "only the supervisor's source",
        "description": "The run supervisor's source zips; no trainer package.",
        "expression": f'resource.name.startsWith("{objects}")',
    }


def records_folder(bucket: str, end_uri: str | None) -> str:
    """The object-name folder of the run's records in `bucket` ("" at its root, else ending
    in "/") from the run's end record `end_uri` (`gs://<bucket>/<folder>trainstack-run-<key>
    .ended`, `gpu_startup.run_record_uri` of the training's checkpoint_url); "" without one.
    ValueError where `end_uri` is in another bucket or not a run record."""
    if not end_uri:
        return ""
    path = end_uri.removeprefix("gs://")
    found, _, name = path.partition("/")
    folder, _, record = name.rpartition("/")
    if (
        not end_uri.startswith("gs://")
        or found != bucket
        or not record.startswith(RUN_CLOCK_PREFIX)
    ):
        raise ValueError(
            f"run.end_uri: {end_uri!r} is not a run record in checkpoint_bucket {bucket!r}; "
            f"valid: gs://{bucket}/[FOLDER/]{RUN_CLOCK_PREFIX}KEY.ended (the run record of the "
            "training's checkpoint_url, in that bucket)"
        )
    return f"{folder}/" if folder else ""


def run_end_uri(run: Any) -> pulumi.Input[str | None]:
    """The run's end record (`run.end_uri` of a supervisor's `run`, a dict or an Output of
    one), whose folder the records grant names."""
    if run is None or isinstance(run, Mapping):
        return (run or {}).get("end_uri")
    return pulumi.Output.from_input(run).apply(lambda r: (r or {}).get("end_uri"))


def records_problem(bucket: object, end_uri: object) -> str | None:
    """Why the run's records (`end_uri`) are out of the records grant's reach on `bucket`,
    or None (known values only: a stack's bucket is named at deploy, and its records are in
    it by construction). A run whose records are elsewhere would get a 403 on every read."""
    if not isinstance(bucket, str) or not isinstance(end_uri, str):
        return None
    try:
        records_folder(bucket, end_uri)
    except ValueError as error:
        return str(error)
    return None


def records_condition(bucket: str, folder: str = "") -> dict[str, str]:
    """The IAM condition that holds a grant on the checkpoint bucket `bucket` to the runs'
    records under `folder` (`records_folder`: the checkpoint_url's path in the bucket, where
    `run_record_uri` puts them; `trainstack-run-<key>.ended`, `.alive/<rank>`, `.stop`,
    `.started`; never a checkpoint, model, log or output) by their object names, which Google
    documents (`catalog.supervisor_iam.STORAGE_CONDITIONS_SOURCE`). It grants no list: the
    supervisor reads each heartbeat by name."""
    objects = STORAGE_OBJECT_NAME.format(bucket=bucket, object=folder + RUN_CLOCK_PREFIX)
    return {
        "title": "only the run records",
        "description": "The runs' end records, heartbeats and stop requests; no checkpoint.",
        "expression": f'resource.name.startsWith("{objects}")',
    }


def role_and_grant(
    names: tuple[str, str],
    project: str,
    role: pulumi.Input[str],
    title: str,
    description: str,
    permissions: tuple[str, ...],
    member: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    condition: pulumi.Input[projects.IAMMemberConditionArgs] | None = None,
    grant_was: str | None = None,
) -> tuple[projects.IAMCustomRole, projects.IAMMember, pulumi.Output[str]]:
    """A custom role of the project (`names[0]`, id `role`) and its grant to `member`
    (`names[1]`, under `condition`; `grant_was`: the grant's earlier name, an alias, so a
    stack deployed under it keeps the grant), registered once the role exists; and the
    role's name, `projects/P/roles/ID`."""
    custom = projects.IAMCustomRole(
        names[0],
        project=project,
        role_id=role,
        title=title[:100],
        description=description,
        permissions=list(permissions),
        opts=opts,
    )
    # The custom role's name, known before it exists.
    full = pulumi.Output.concat("projects/", project, "/roles/", role)
    grant = projects.IAMMember(
        names[1],
        project=project,
        role=full,
        member=member,
        condition=condition,
        opts=opts.merge(
            pulumi.ResourceOptions(
                depends_on=[custom],
                aliases=[pulumi.Alias(name=grant_was)] if grant_was else None,
            )
        ),
    )
    return custom, grant, full

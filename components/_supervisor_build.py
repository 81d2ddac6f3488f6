"""The run supervisor's Cloud Build service account (`trainstack.components.run_supervisor`):
the identity that builds its Cloud Functions function, holding only the roles Google lists
for it (`trainstack.components.catalog.supervisor_iam.BUILD_SOURCE`)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import projects, serviceaccount, storage

from trainstack.components._naming import account_id
from trainstack.components.catalog.supervisor_iam import (
    BUILD_COPY_CONDITION,
    BUILD_PROJECT_ROLES,
    BUILD_SOURCE_ROLE,
)

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
    object reads on the staging bucket (the source zip) and on Cloud Functions' own copies of
    function sources (`gcf-v2-sources-*`, by a condition) only."""
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
    grants.append(
        storage.BucketIAMMember(
            f"{name}-build-source",
            bucket=staging_bucket,
            role=BUILD_SOURCE_ROLE,
            member=account.member,
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

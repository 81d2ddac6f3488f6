"""The run supervisor's grants on the compute it stops (`trainstack.components.run_supervisor`,
whose module docstring says what each holds and why): its custom role(s) on the project,
held to the one GKE cluster by `cluster_condition`, and actAs on the slice's account where
it recreates a slice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
from pulumi_gcp import projects, serviceaccount

from trainstack.components._supervisor_bundle import TPU_KINDS
from trainstack.components._supervisor_iam import role_and_grant
from trainstack.components.catalog.supervisor_iam import (
    PERMISSIONS,
    READ_DESCRIPTIONS,
    READ_PERMISSIONS,
    STOP_ONLY_PERMISSIONS,
    cluster_condition,
    read_permissions,
    role_id,
)


def compute_grants(
    name: str,
    args: Mapping[str, Any],
    recover: bool,
    what: str,
    member: pulumi.Output[str],
    uid: pulumi.Output[str],
    child: pulumi.ResourceOptions,
) -> tuple[projects.IAMCustomRole, pulumi.Output[list[str]], list[pulumi.Resource]]:
    """The custom role(s) on the compute and their grants to `member` (the supervisor's
    account, whose unique id is `uid`; `args`: its `RunSupervisorArgs`); actAs on the slice's
    account where it recreates a slice. Returns the role granted on the compute, every role's
    name (`RunSupervisor.roles`) and the grants."""
    kind, deployment, project = args["kind"], args["deployment_name"], args["project"]
    autoscaled = bool(args.get("autoscaled", False))
    condition = (
        pulumi.Output.from_input(args["resource_name"]).apply(
            lambda pool: projects.IAMMemberConditionArgs(**cluster_condition(pool))
        )
        if kind in ("node_pool", "node_pools")
        else None
    )
    custom, grant, role = role_and_grant(
        (f"{name}-role", f"{name}-grant"),
        project,
        uid.apply(lambda u: role_id(deployment, u)),
        f"trainstack {what} supervisor ({deployment})",
        (
            "Get, delete and create one stack's TPU slice."
            if recover
            else "Get and stop one stack's compute."
        ),
        PERMISSIONS[kind] if recover or kind not in TPU_KINDS else STOP_ONLY_PERMISSIONS[kind],
        member,
        child,
        condition,
        # It was `<name>-tpu` when only TPU slices were supervised; the alias keeps a
        # stack deployed then from replacing it (a delete and create of the grant).
        grant_was=f"{name}-tpu",
    )
    grants: list[pulumi.Resource] = [grant]
    roles = [role]
    if kind in READ_PERMISSIONS:
        _, read, read_role = role_and_grant(
            (f"{name}-read-role", f"{name}-read"),
            project,
            uid.apply(lambda u: role_id(deployment, u, "Read")),
            f"trainstack {what} supervisor reads ({deployment})",
            READ_DESCRIPTIONS[autoscaled],
            read_permissions(kind, autoscaled),
            member,
            child,
        )
        grants.append(read)
        roles.append(read_role)
    if recover:
        # To recreate the slice from its bundle's body, which runs as the training
        # account (see run_supervisor's module docstring on the default Compute Engine
        # account).
        grants.append(
            serviceaccount.IAMMember(
                f"{name}-act-as",
                service_account_id=args["node_service_account"],
                role="roles/iam.serviceAccountUser",
                member=member,
                opts=child,
            )
        )
    return custom, pulumi.Output.all(*roles).apply(list), grants

"""`no-default-service-account` and `no-project-owner-editor`: every machine and job runs
as a dedicated service account, and nothing holds a basic role on the project."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._inputs import (
    _cluster_node_configs,
    _get,
    _hidden,
    _list,
    _queued_nodes,
    _vertex_job_spec,
)
from .model import (
    DYNAMIC_PREFIX,
    GKE_CLUSTER,
    GKE_NODE_POOL,
    PRIVILEGED_PROJECT_ROLES,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    TPU_QUEUED,
    TPU_VM,
    VM_TYPES,
    Context,
    Resource,
)

_DEFAULT_COMPUTE_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")


def _default_account(email: Any) -> str | None:
    """Why `email` is (or falls back to) the default compute service account, or None."""
    if _hidden(email):
        return None
    if email is None or email == "":
        return "unset"
    if email == "default" or (isinstance(email, str) and _DEFAULT_COMPUTE_SA.match(email)):
        return f"{json.dumps(email)}, the default compute service account"
    return None


_USE_TRAINING_SA = (
    "use the stack's dedicated training service account (the default one holds project Editor)"
)


def _vm_accounts(resource: Resource) -> Iterator[str]:
    account = resource.inputs.get("serviceAccount")
    if not isinstance(account, Mapping):
        yield (
            "has no serviceAccount: attach the stack's dedicated training service "
            "account so the VM has a least-privilege identity"
        )
    elif why := _default_account(account.get("email")):
        yield (
            f"serviceAccount.email is {why}: an unset email means the default compute "
            f"service account; {_USE_TRAINING_SA}"
        )


def _tpu_vm_accounts(resource: Resource) -> Iterator[str]:
    if why := _default_account(_get(resource.inputs, "serviceAccount", "email")):
        yield (
            f"serviceAccount.email is {why}: TPU VMs then run as the default compute "
            f"service account; {_USE_TRAINING_SA}"
        )


def _static_queued_accounts(_: Resource) -> Iterator[str]:
    yield (
        "gcp.tpu.V2QueuedResource cannot set the node's service account, so its TPU VMs "
        "run as the default compute service account; create queued TPUs with "
        "trainstack's queued-resource provider (node.serviceAccount.email)"
    )


def _node_pool_accounts(resource: Resource) -> Iterator[str]:
    if why := _default_account(_get(resource.inputs, "nodeConfig", "serviceAccount")):
        yield f"nodeConfig.serviceAccount is {why}: {_USE_TRAINING_SA}"


def _dynamic_accounts(resource: Resource) -> Iterator[str]:
    for path, node in _queued_nodes(resource):
        if why := _default_account(_get(node, "serviceAccount", "email")):
            yield f"{path}.serviceAccount.email is {why}: {_USE_TRAINING_SA}"
    job = _vertex_job_spec(resource)
    if job is not None:
        path, spec = job
        account = spec.get("serviceAccount")
        if account is None or account == "":
            yield (
                f"{path}.serviceAccount is unset: Vertex AI then runs the job as its Custom "
                "Code Service Agent; set it to the stack's training service account"
            )
        elif why := _default_account(account):
            yield f"{path}.serviceAccount is {why}: {_USE_TRAINING_SA}"


def check_service_accounts(resource: Resource, _: Context) -> Iterator[str]:
    """Every machine and job runs as a dedicated service account."""
    if resource.type.startswith(DYNAMIC_PREFIX):
        yield from _dynamic_accounts(resource)
        return
    check = _ACCOUNT_CHECKS.get(resource.type)
    if check is not None:
        yield from check(resource)


def _cluster_accounts(resource: Resource) -> Iterator[str]:
    inputs = resource.inputs
    for path, config in _cluster_node_configs(inputs):
        if why := _default_account(config.get("serviceAccount")):
            yield f"{path}.serviceAccount is {why}: {_USE_TRAINING_SA}"
    # Autopilot and node auto-provisioning create pools from these defaults.
    if inputs.get("enableAutopilot") is True or _get(inputs, "clusterAutoscaling", "enabled"):
        path = "clusterAutoscaling.autoProvisioningDefaults.serviceAccount"
        account = _get(inputs, "clusterAutoscaling", "autoProvisioningDefaults", "serviceAccount")
        if why := _default_account(account):
            yield f"{path} is {why}: {_USE_TRAINING_SA}"


_ACCOUNT_CHECKS: dict[str, Callable[[Resource], Iterator[str]]] = {
    **dict.fromkeys(VM_TYPES, _vm_accounts),
    TPU_VM: _tpu_vm_accounts,
    TPU_QUEUED: _static_queued_accounts,
    GKE_NODE_POOL: _node_pool_accounts,
    GKE_CLUSTER: _cluster_accounts,
}


# --------------------------------------------------------------------------- IAM


def check_project_roles(resource: Resource, _: Context) -> Iterator[str]:
    """No project-wide roles/owner or roles/editor grants."""
    inputs = resource.inputs
    project = inputs.get("project", "(provider default)")
    if resource.type in (PROJECT_IAM_MEMBER, PROJECT_IAM_BINDING):
        role = inputs.get("role")
        if role in PRIVILEGED_PROJECT_ROLES:
            who = inputs.get("member") or ", ".join(map(str, _list(inputs.get("members"))))
            yield (
                f"grants {role} on project {project} to {who}: basic roles can change "
                "everything in the project; grant the narrow roles the workload needs"
            )
    elif resource.type == PROJECT_IAM_POLICY:
        data = inputs.get("policyData")
        if _hidden(data):
            return
        try:
            policy = json.loads(data) if isinstance(data, str) else None
        except json.JSONDecodeError:
            policy = None
        if not isinstance(policy, Mapping):
            yield "policyData is not a JSON IAM policy, so its grants cannot be checked"
            return
        for i, binding in enumerate(_list(policy.get("bindings"))):
            role = _get(binding, "role")
            if role in PRIVILEGED_PROJECT_ROLES:
                members = ", ".join(map(str, _list(_get(binding, "members"))))
                yield (
                    f"policyData.bindings[{i}] grants {role} on project {project} to "
                    f"{members}: basic roles can change everything in the project"
                )

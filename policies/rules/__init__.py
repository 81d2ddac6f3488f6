"""trainstack's security rules over planned resources, in plain Python.

One package, two users: the CrossGuard pack in `policies/__main__.py` (run by `pulumi preview
--policy-pack policies/`) and `trainstack policy` (`trainstack.infra.policy`, offline over the plan
that Pulumi mocks record). It imports nothing but the standard library, so the pack's own
virtualenv (`policies/requirements.txt`) runs it unchanged, and its modules import each
other relatively, so it loads both as `trainstack.policies.rules` and as the top-level `rules` the
pack's directory provides.

Every rule reads a resource's inputs exactly as Pulumi sends them (camelCase, e.g.
`networkConfig.enableExternalIps`); secret values appear as `SECRET` and values not known
until deploy as `UNKNOWN`. A rule never fails on a value it cannot see: CrossGuard checks
again during `pulumi up`, when the value is known.

    resources = [Resource("gcp:storage/bucket:Bucket", "exp-data", {...}, protect=True)]
    for violation in evaluate(resources, Context(environment="prod")):
        print(violation)   # [bucket-uniform-access-public-prevention] exp-data (...): ...

The rules (all mandatory):

| rule | checks | module |
|---|---|---|
| no-public-ips | TPU VMs, queued TPUs, GCE VMs and templates, GKE clusters, node pools | network |
| bucket-uniform-access-public-prevention | every bucket | storage |
| no-default-service-account | VMs, templates, TPU VMs, queued TPUs, GKE, Vertex jobs | identity |
| no-project-owner-editor | project IAMMember, IAMBinding and IAMPolicy | identity |
| accelerators-labelled | every GPU/TPU machine, node pool, Vertex job and Kubernetes Job | labels |
| prod-data-protected | prod buckets except the staging and supervisor state buckets (no training data; stack scope) | storage |
| secrets-as-secrets | every string input of every resource | plaintext (credentials) |
| supervisor-least-privilege | every grant to the run supervisor's account (stack scope) | supervisor |

`credentials` is the one scanner of credentials in text (the stack config's checks of
`trainer.env` and `trainer.entrypoint` use it too). `model` holds the vocabulary (`Resource`, `Context`, `Violation`, `Rule`, type tokens,
`SECRET`, `UNKNOWN`) and `_inputs` the readers of nested inputs the checks share; every
public name of those modules is importable from `trainstack.policies.rules` itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .credentials import Credential, find_credential, secret_like
from .identity import check_project_roles, check_service_accounts
from .labels import LabelSet, check_accelerator_labels
from .model import (
    BUCKET,
    DYNAMIC_PREFIX,
    GKE_CLUSTER,
    GKE_NODE_POOL,
    INSTANCE,
    INSTANCE_TEMPLATE,
    K8S_JOB,
    K8S_SECRET,
    PRIVILEGED_PROJECT_ROLES,
    PROD,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    REBUILDABLE_BUCKET_SUFFIXES,
    REGION_INSTANCE_TEMPLATE,
    REQUIRED_MACHINE_LABELS,
    SECRET,
    TPU_QUEUED,
    TPU_VM,
    UNKNOWN,
    VM_TYPES,
    Context,
    Resource,
    ResourceCheck,
    Rule,
    StackCheck,
    Violation,
)
from .network import check_public_ips
from .plaintext import FIX_SECRET, check_plaintext_secrets
from .storage import check_bucket_access, check_prod_data, stack_environment
from .supervisor import check_supervisor_scope

__all__ = [
    "BUCKET",
    "DYNAMIC_PREFIX",
    "FIX_SECRET",
    "GKE_CLUSTER",
    "GKE_NODE_POOL",
    "INSTANCE",
    "INSTANCE_TEMPLATE",
    "K8S_JOB",
    "K8S_SECRET",
    "PRIVILEGED_PROJECT_ROLES",
    "PROD",
    "PROJECT_IAM_BINDING",
    "PROJECT_IAM_MEMBER",
    "PROJECT_IAM_POLICY",
    "REBUILDABLE_BUCKET_SUFFIXES",
    "REGION_INSTANCE_TEMPLATE",
    "REQUIRED_MACHINE_LABELS",
    "RULES",
    "SECRET",
    "TPU_QUEUED",
    "TPU_VM",
    "UNKNOWN",
    "VM_TYPES",
    "Context",
    "Credential",
    "LabelSet",
    "Resource",
    "ResourceCheck",
    "Rule",
    "StackCheck",
    "Violation",
    "check_accelerator_labels",
    "check_bucket_access",
    "check_plaintext_secrets",
    "check_prod_data",
    "check_project_roles",
    "check_public_ips",
    "check_service_accounts",
    "check_supervisor_scope",
    "context_from_config",
    "evaluate",
    "find_credential",
    "secret_like",
    "stack_environment",
]


RULES: tuple[Rule, ...] = (
    Rule(
        "no-public-ips",
        "Training machines (TPU VMs and queued TPUs, GCE VMs and templates, GKE nodes) have "
        "no external IP addresses.",
        resource_check=check_public_ips,
    ),
    Rule(
        "bucket-uniform-access-public-prevention",
        "Buckets enforce uniform bucket-level access and public access prevention.",
        resource_check=check_bucket_access,
    ),
    Rule(
        "no-default-service-account",
        "VMs, TPU VMs, GKE nodes and Vertex AI jobs run as a dedicated service account, "
        "never the default compute service account.",
        resource_check=check_service_accounts,
    ),
    Rule(
        "no-project-owner-editor",
        "No project-wide roles/owner or roles/editor grants.",
        resource_check=check_project_roles,
    ),
    Rule(
        "accelerators-labelled",
        "GPU and TPU machines carry the labels accelerator spend is attributed by.",
        resource_check=check_accelerator_labels,
        config={
            "required_labels": {
                "type": "array",
                "items": {"type": "string"},
                "default": list(REQUIRED_MACHINE_LABELS),
            }
        },
    ),
    Rule(
        "prod-data-protected",
        "In prod, data buckets are protected from destroy and never force-destroyed.",
        stack_check=check_prod_data,
        config={"environment": {"type": "string", "enum": ["dev", "staging", "prod"]}},
    ),
    Rule(
        "secrets-as-secrets",
        "Credentials in metadata, startup scripts, environment variables and arguments are "
        "Pulumi secrets, never plaintext.",
        resource_check=check_plaintext_secrets,
    ),
    Rule(
        "supervisor-least-privilege",
        "The run supervisor's service account reaches only its own stack's kind of compute "
        "(TPU slice, instance group or GKE node pool), buckets, service accounts and function.",
        stack_check=check_supervisor_scope,
    ),
)
"""Every rule, in report order."""


def context_from_config(config: Mapping[str, Any], base: Context | None = None) -> Context:
    """A Context with a rule's CrossGuard config (`environment`, `required_labels`) applied."""
    context = base or Context()
    environment = config.get("environment", context.environment)
    labels = config.get("required_labels", context.required_labels)
    return Context(environment=environment, required_labels=tuple(labels))


def evaluate(resources: Sequence[Resource], context: Context | None = None) -> list[Violation]:
    """Every violation of every rule, in rule order then resource order."""
    context = context or Context()
    return [v for rule in RULES for v in rule.check(resources, context)]

"""The rules' vocabulary: what a planned resource is, what a rule knows and reports, and
the type tokens and markers the rules read."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

SECRET = "[secret]"
"""How a Pulumi secret input appears in a plan (and how the pack passes one to a rule)."""
UNKNOWN = "(known after deploy)"
"""A value computed by the provider at deploy time, unknown during a preview."""

PROD = "prod"
REQUIRED_MACHINE_LABELS: tuple[str, ...] = ("environment", "stack")
"""Labels every GPU/TPU machine carries: accelerator spend is attributed by them."""
REBUILDABLE_BUCKET_SUFFIXES: tuple[str, ...] = ("-staging", "-supervisor-state")
"""Logical-name suffixes of buckets that hold no training data, exempt from
`prod-data-protected`: trainstack's staging bucket (content-hashed trainer packages built
from source) and its run supervisor's state bucket (its own counts and events, which end
with it)."""

# Type tokens the rules know.
TPU_VM = "gcp:tpu/v2Vm:V2Vm"
TPU_QUEUED = "gcp:tpu/v2QueuedResource:V2QueuedResource"
INSTANCE = "gcp:compute/instance:Instance"
INSTANCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
REGION_INSTANCE_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
BUCKET = "gcp:storage/bucket:Bucket"
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY = "gcp:projects/iAMPolicy:IAMPolicy"
K8S_JOB = "kubernetes:batch/v1:Job"
K8S_SECRET = "kubernetes:core/v1:Secret"
DYNAMIC_PREFIX = "pulumi-python:dynamic"
"""Dynamic resources (trainstack's Vertex jobs and TPU queued resources) are recognised by
the shape of their REST `body`, not by token, so any provider sending those bodies is
checked."""
VM_TYPES: tuple[str, ...] = (INSTANCE, INSTANCE_TEMPLATE, REGION_INSTANCE_TEMPLATE)

PRIVILEGED_PROJECT_ROLES: tuple[str, ...] = ("roles/owner", "roles/editor")


@dataclass(frozen=True)
class Resource:
    """One planned resource: its type token, logical name, inputs and `protect` option."""

    type: str
    name: str
    inputs: Mapping[str, Any]
    protect: bool = False
    urn: str = ""
    """The engine's URN where there is one (the pack reports stack violations by it)."""


@dataclass(frozen=True)
class Context:
    """What a rule knows beyond the resources themselves."""

    environment: str | None = None
    """The stack's environment (dev | staging | prod) when known; otherwise the rules read
    the resources' `environment` labels."""
    required_labels: tuple[str, ...] = REQUIRED_MACHINE_LABELS
    """Labels `accelerators-labelled` requires on GPU/TPU machines."""


@dataclass(frozen=True)
class Violation:
    """One rule broken by one resource."""

    rule: str
    resource_type: str
    resource_name: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.resource_name} ({self.resource_type}): {self.message}"


ResourceCheck = Callable[[Resource, Context], Iterable[str]]
StackCheck = Callable[[Sequence[Resource], Context], Iterable[tuple[Resource, str]]]


@dataclass(frozen=True)
class Rule:
    """A named check: per resource (`resource_check`) or over the whole stack."""

    name: str
    description: str
    resource_check: ResourceCheck | None = None
    stack_check: StackCheck | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    """JSON schema properties of the rule's CrossGuard config (`--policy-pack-config`)."""

    def __post_init__(self) -> None:
        if (self.resource_check is None) == (self.stack_check is None):
            raise ValueError(
                f"rule {self.name!r}: give exactly one of resource_check or stack_check"
            )

    @property
    def scope(self) -> Literal["resource", "stack"]:
        return "resource" if self.resource_check is not None else "stack"

    def check(self, resources: Sequence[Resource], context: Context) -> list[Violation]:
        if self.resource_check is not None:
            found = [(r, m) for r in resources for m in self.resource_check(r, context)]
        elif self.stack_check is not None:
            found = list(self.stack_check(resources, context))
        return [Violation(self.name, r.type, r.name, message) for r, message in found]

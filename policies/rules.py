"""trainstack's security rules over planned resources, in plain Python.

One module, two users: the CrossGuard pack in `policies/__main__.py` (run by `pulumi preview
--policy-pack policies/`) and `trainstack policy` (`infra.policy`, offline over the plan
that Pulumi mocks record). It imports nothing but the standard library, so the pack's own
virtualenv (`policies/requirements.txt`) runs it unchanged.

Every rule reads a resource's inputs exactly as Pulumi sends them (camelCase, e.g.
`networkConfig.enableExternalIps`); secret values appear as `SECRET` and values not known
until deploy as `UNKNOWN`. A rule never fails on a value it cannot see: CrossGuard checks
again during `pulumi up`, when the value is known.

    resources = [Resource("gcp:storage/bucket:Bucket", "exp-data", {...}, protect=True)]
    for violation in evaluate(resources, Context(environment="prod")):
        print(violation)   # [bucket-uniform-access-public-prevention] exp-data (...): ...

The rules (all mandatory):

| rule | checks |
|---|---|
| no-public-ips | TPU VMs, queued TPUs, GCE VMs and templates, GKE clusters and node pools |
| bucket-uniform-access-public-prevention | every bucket |
| no-default-service-account | VMs, templates, TPU VMs, queued TPUs, GKE, Vertex jobs |
| no-project-owner-editor | project IAMMember, IAMBinding and IAMPolicy |
| accelerators-labelled | every GPU/TPU machine, node pool, Vertex job and Kubernetes Job |
| prod-data-protected | prod buckets except the rebuildable staging bucket (stack scope) |
| secrets-as-secrets | every string input of every resource |
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

SECRET = "[secret]"
"""How a Pulumi secret input appears in a plan (and how the pack passes one to a rule)."""
UNKNOWN = "(known after deploy)"
"""A value computed by the provider at deploy time, unknown during a preview."""

PROD = "prod"
REQUIRED_MACHINE_LABELS: tuple[str, ...] = ("environment", "stack")
"""Labels every GPU/TPU machine carries: accelerator spend is attributed by them."""
REBUILDABLE_BUCKET_SUFFIXES: tuple[str, ...] = ("-staging",)
"""Logical-name suffixes of buckets that hold only rebuildable artifacts (trainstack's
staging bucket holds content-hashed trainer packages built from source), exempt from
`prod-data-protected`."""

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
_DEFAULT_COMPUTE_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")
# GPU families (A2, A3, A4, G2, G4) and the GKE TPU machine types (ct4p-, ct5lp-, ct6e-...).
_ACCELERATOR_MACHINE = re.compile(r"^(?:(?:a2|a3|a4|a4x|g2|g4)-|ct\d)")
_TPU_MACHINE = re.compile(r"^ct\d|^cloud-tpu$")
_K8S_ACCELERATOR_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu", "google.com/tpu")


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


# --------------------------------------------------------------------------- helpers


def _get(value: Any, *path: str | int) -> Any:
    """`value[path0][path1]...`, or None where the path does not exist."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, Sequence) or isinstance(value, str) or key >= len(value):
                return None
        elif not isinstance(value, Mapping):
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
    return value


def _list(value: Any) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _hidden(value: Any) -> bool:
    """A value a rule cannot read: computed at deploy time or secret."""
    return value in (UNKNOWN, SECRET)


def _show(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def _dynamic_body(resource: Resource) -> Mapping[str, Any]:
    if not resource.type.startswith(DYNAMIC_PREFIX):
        return {}
    return _mapping(resource.inputs.get("body"))


def _vertex_job_spec(resource: Resource) -> tuple[str, Mapping[str, Any]] | None:
    """(path, spec) of a Vertex CustomJob (`jobSpec`) or tuning job (`trialJobSpec`) body."""
    body = _dynamic_body(resource)
    for key in ("jobSpec", "trialJobSpec"):
        if isinstance(body.get(key), Mapping):
            return f"body.{key}", body[key]
    return None


def _queued_nodes(resource: Resource) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, node) of every TPU node a queued resource creates: pulumi-gcp's
    (`tpu.nodeSpecs`) or a dynamic provider's REST body (`body.tpu.nodeSpec`)."""
    if resource.type == TPU_QUEUED:
        specs, path = _get(resource.inputs, "tpu", "nodeSpecs"), "tpu.nodeSpecs"
    else:
        specs, path = _get(_dynamic_body(resource), "tpu", "nodeSpec"), "body.tpu.nodeSpec"
    return [
        (f"{path}[{i}].node", _mapping(spec.get("node")))
        for i, spec in enumerate(_list(specs))
        if isinstance(spec, Mapping)
    ]


def _cluster_node_configs(inputs: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, nodeConfig) of the node pools a GKE cluster keeps itself: its inline pools, or
    else its default pool unless removed (a removed default pool lives only while the
    cluster is created) or managed by Autopilot."""
    pools = _list(inputs.get("nodePools"))
    configs = []
    if (
        not pools
        and inputs.get("removeDefaultNodePool") is not True
        and not (inputs.get("enableAutopilot") is True)
    ):
        configs.append(("nodeConfig", _mapping(inputs.get("nodeConfig"))))
    for i, pool in enumerate(pools):
        configs.append((f"nodePools[{i}].nodeConfig", _mapping(_get(pool, "nodeConfig"))))
    return configs


def _machine_type(value: Any) -> str:
    # GCE accepts both `a2-highgpu-8g` and `zones/<zone>/machineTypes/a2-highgpu-8g`.
    return value.rsplit("/", 1)[-1] if isinstance(value, str) else ""


def _accelerator_kind(machine_type: Any, guest_accelerators: Any = None) -> str | None:
    """The accelerator of a machine type ("TPU" or "GPU"), or None for a plain VM."""
    name = _machine_type(machine_type)
    if _TPU_MACHINE.match(name):
        return "TPU"
    if _list(guest_accelerators) or _ACCELERATOR_MACHINE.match(name):
        return "GPU"
    return None


def _labels(resource: Resource) -> Mapping[str, Any]:
    """The resource's own labels, wherever its type keeps them."""
    inputs = resource.inputs
    for found in (
        inputs.get("labels"),
        inputs.get("resourceLabels"),
        _get(inputs, "metadata", "labels"),
        _dynamic_body(resource).get("labels"),
    ):
        if isinstance(found, Mapping):
            return found
    return {}


# --------------------------------------------------------------------------- no-public-ips


def _external_ip_flags(path: str, node: Mapping[str, Any]) -> Iterator[str]:
    configs = [(f"{path}networkConfig", node.get("networkConfig"))]
    configs += [
        (f"{path}networkConfigs[{i}]", c) for i, c in enumerate(_list(node.get("networkConfigs")))
    ]
    for where, config in configs:
        if _get(config, "enableExternalIps") is True:
            yield (
                f"{where}.enableExternalIps is true: every TPU worker gets an external IP; "
                "set it to false (the subnet's Private Google Access and Cloud NAT reach "
                "Google APIs and the internet)"
            )


def check_public_ips(resource: Resource, _: Context) -> Iterator[str]:
    """No external IPs on training machines."""
    inputs = resource.inputs
    if resource.type in VM_TYPES:
        for i, nic in enumerate(_list(inputs.get("networkInterfaces"))):
            if _list(_get(nic, "accessConfigs")):
                yield (
                    f"networkInterfaces[{i}].accessConfigs gives the machine an external IPv4 "
                    "address; remove it and reach the internet through Cloud NAT"
                )
            if _list(_get(nic, "ipv6AccessConfigs")):
                yield (
                    f"networkInterfaces[{i}].ipv6AccessConfigs gives the machine an external "
                    "IPv6 address; remove it"
                )
    elif resource.type == TPU_VM:
        yield from _external_ip_flags("", inputs)
    elif resource.type == GKE_CLUSTER:
        private = _get(inputs, "privateClusterConfig", "enablePrivateNodes")
        if private is not True and not _hidden(private):
            yield (
                f"privateClusterConfig.enablePrivateNodes is {_show(private)}: GKE gives every "
                "node an external IP; set it to true"
            )
        for i, pool in enumerate(_list(inputs.get("nodePools"))):
            if _get(pool, "networkConfig", "enablePrivateNodes") is False:
                yield (
                    f"nodePools[{i}].networkConfig.enablePrivateNodes is false: the pool's "
                    "nodes get external IPs; remove the override or set it to true"
                )
    elif (
        resource.type == GKE_NODE_POOL
        and _get(inputs, "networkConfig", "enablePrivateNodes") is False
    ):
        yield (
            "networkConfig.enablePrivateNodes is false: the pool's nodes get external "
            "IPs; remove the override or set it to true"
        )
    for path, node in _queued_nodes(resource):
        yield from _external_ip_flags(f"{path}.", node)


# --------------------------------------------------------------------------- buckets


def check_bucket_access(resource: Resource, _: Context) -> Iterator[str]:
    """Uniform bucket-level access on, public access prevention enforced."""
    if resource.type != BUCKET:
        return
    ubla = resource.inputs.get("uniformBucketLevelAccess")
    if ubla is not True and not _hidden(ubla):
        yield (
            f"uniformBucketLevelAccess is {_show(ubla)}, not true: object ACLs could grant "
            "access around the bucket's IAM policy"
        )
    pap = resource.inputs.get("publicAccessPrevention")
    if pap != "enforced" and not _hidden(pap):
        yield (
            f'publicAccessPrevention is {_show(pap)}, not "enforced": an IAM grant to '
            "allUsers could make the bucket public"
        )


# --------------------------------------------------------------------------- service accounts


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


# --------------------------------------------------------------------------- labels


LabelSet = tuple[str, str, Mapping[str, Any]]
"""(what the machines are, where their labels live, the labels)."""


def _tpu_vm_labels(resource: Resource) -> Iterator[LabelSet]:
    yield "TPU VM", "labels", _mapping(resource.inputs.get("labels"))


def _static_queued_labels(resource: Resource) -> Iterator[LabelSet]:
    for path, _ in _queued_nodes(resource):
        # pulumi-gcp's queued resource has no node labels at all.
        yield "TPU queued resource (which cannot label its nodes)", f"{path}.labels", {}


def _vm_labels(resource: Resource) -> Iterator[LabelSet]:
    inputs = resource.inputs
    kind = _accelerator_kind(inputs.get("machineType"), inputs.get("guestAccelerators"))
    if kind:
        yield f"{kind} VM", "labels", _mapping(inputs.get("labels"))


def _node_pool_labels(resource: Resource) -> Iterator[LabelSet]:
    config = _mapping(resource.inputs.get("nodeConfig"))
    kind = _accelerator_kind(config.get("machineType"), config.get("guestAccelerators"))
    if kind:
        labels = _mapping(config.get("resourceLabels"))
        yield f"{kind} node pool", "nodeConfig.resourceLabels", labels


def _cluster_labels(resource: Resource) -> Iterator[LabelSet]:
    cluster_labels = _mapping(resource.inputs.get("resourceLabels"))
    for path, config in _cluster_node_configs(resource.inputs):
        kind = _accelerator_kind(config.get("machineType"), config.get("guestAccelerators"))
        if kind:
            merged = {**cluster_labels, **_mapping(config.get("resourceLabels"))}
            yield f"{kind} nodes", f"resourceLabels / {path}.resourceLabels", merged


def _k8s_job_labels(resource: Resource) -> Iterator[LabelSet]:
    pod = _mapping(_get(resource.inputs, "spec", "template", "spec"))
    containers = _list(pod.get("containers")) + _list(pod.get("initContainers"))
    wants = {
        key
        for c in containers
        for section in ("limits", "requests")
        for key in _mapping(_get(c, "resources", section))
        if key in _K8S_ACCELERATOR_RESOURCES
    }
    if wants:
        what = f"Kubernetes Job requesting {', '.join(sorted(wants))}"
        yield what, "metadata.labels", _mapping(_get(resource.inputs, "metadata", "labels"))


def _dynamic_labels(resource: Resource) -> Iterator[LabelSet]:
    for path, node in _queued_nodes(resource):
        yield "TPU queued resource", f"{path}.labels", _mapping(node.get("labels"))
    job = _vertex_job_spec(resource)
    if job is None:
        return
    kinds = set()
    for pool in _list(job[1].get("workerPoolSpecs")):
        spec = _mapping(_get(pool, "machineSpec"))
        accelerator = spec.get("acceleratorType")
        if accelerator and accelerator != "ACCELERATOR_TYPE_UNSPECIFIED":
            kinds.add("TPU" if str(accelerator).startswith("TPU") else "GPU")
        elif kind := _accelerator_kind(spec.get("machineType")):
            kinds.add(kind)
    if kinds:
        what = f"Vertex AI job on {'/'.join(sorted(kinds))}s"
        yield what, "body.labels", _mapping(_dynamic_body(resource).get("labels"))


_LABEL_SETS: dict[str, Callable[[Resource], Iterator[LabelSet]]] = {
    **dict.fromkeys(VM_TYPES, _vm_labels),
    TPU_VM: _tpu_vm_labels,
    TPU_QUEUED: _static_queued_labels,
    GKE_NODE_POOL: _node_pool_labels,
    GKE_CLUSTER: _cluster_labels,
    K8S_JOB: _k8s_job_labels,
}


def _accelerator_label_sets(resource: Resource) -> Iterator[LabelSet]:
    """Every set of accelerator machines the resource creates, with its labels."""
    if resource.type.startswith(DYNAMIC_PREFIX):
        return _dynamic_labels(resource)
    found = _LABEL_SETS.get(resource.type)
    return found(resource) if found is not None else iter(())


def check_accelerator_labels(resource: Resource, context: Context) -> Iterator[str]:
    """GPU/TPU machines carry the labels cost reports group by."""
    for what, where, labels in _accelerator_label_sets(resource):
        missing = [
            key
            for key in context.required_labels
            if not (isinstance(labels.get(key), str) and labels[key])
        ]
        if missing:
            yield (
                f"{what} without the label(s) {', '.join(missing)} in {where}: accelerator "
                f"spend is attributed by {', '.join(context.required_labels)}"
            )


# --------------------------------------------------------------------------- prod data


def stack_environment(resources: Sequence[Resource], context: Context) -> str | None:
    """The stack's environment: the declared one, else "prod" when any resource says so."""
    if context.environment is not None:
        return context.environment
    labelled = {_labels(r).get("environment") for r in resources}
    return PROD if PROD in labelled else None


def check_prod_data(
    resources: Sequence[Resource], context: Context
) -> Iterator[tuple[Resource, str]]:
    """In prod, data buckets are protected from `pulumi destroy` and never force-destroyed."""
    prod_stack = stack_environment(resources, context) == PROD
    for resource in resources:
        if resource.type != BUCKET or resource.name.endswith(REBUILDABLE_BUCKET_SUFFIXES):
            continue
        if not (prod_stack or _labels(resource).get("environment") == PROD):
            continue
        inputs = resource.inputs
        if not (resource.protect or inputs.get("deletionPolicy") == "PREVENT"):
            yield (
                resource,
                (
                    "prod data bucket is not protected from destroy: register it with "
                    'protect=True (or deletionPolicy "PREVENT") so `pulumi destroy` cannot '
                    "delete it"
                ),
            )
        if inputs.get("forceDestroy") is True:
            yield (
                resource,
                (
                    "prod data bucket has forceDestroy=true: deleting the bucket would "
                    "delete every object in it"
                ),
            )


# --------------------------------------------------------------------------- secrets


_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "token", "apikey", "accesskey", "privatekey"}
)
_SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("signing", "key"),
    }
)
# A key ending in one of these names or points at a secret rather than holding it
# (`secretName`, `tokenFile`, `passwordSecretRef`, `token_count`).
_REFERENCE_WORDS = frozenset(
    {
        "name", "names", "ref", "id", "ids", "path", "file", "dir", "version", "uri", "url",
        "mount", "env", "type", "ttl", "expiry", "expiration", "count", "length", "len",
        "size", "limit", "max", "min", "scope", "scopes", "header", "prefix", "suffix",
        "field", "source",
    }
)  # fmt: skip
# In a training stack "token" is as often a text token (`pad_token`, `max_tokens`,
# `per_token_loss`) or a Pulumi type token (`TYPE_TOKEN`) as a credential.
_TEXT_TOKEN_WORDS = frozenset(
    {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "per", "num", "special", "start",
     "end", "vocab", "type"}
)  # fmt: skip
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no"})
_CREDENTIALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("a service account key", re.compile(r"\"private_key(?:_id)?\"\s*:")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("a Google OAuth access token", re.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,})")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
)
# `NAME=value`, `NAME: value`, `--name=value` and `"name": "value"` in scripts and args.
# The value must end the word: `token = os.environ["T"]` reads a secret, it does not hold one.
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])-{0,2}([A-Za-z_][\w.-]*)[\"']?\s*[=:]\s*([\"']?)"
    r"([^\s\"'`;&|()\[\]{}]+)(?=[\s\"'`;&|)]|$)"
)
_SECRET_HOLDING_TYPES: tuple[str, ...] = (K8S_SECRET,)
"""Resources whose purpose is to hold a secret (the Kubernetes provider marks a Secret's
`data` and `stringData` secret itself)."""
_FIX_SECRET = (
    "pass it as a Pulumi secret (pulumi.Output.secret / `pulumi config set --secret`) or "
    "read it from Secret Manager at run time"
)


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def secret_like(key: str) -> bool:
    """Whether a key or variable name names a credential (`HF_TOKEN`, `apiKey`...)."""
    words = _words(key)
    if not words or words[-1] in _REFERENCE_WORDS:
        return False
    if any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words)):
        return True
    found = _SECRET_WORDS.intersection(words)
    if found == {"token"} and _TEXT_TOKEN_WORDS.intersection(words):
        return False
    return bool(found)


def _plaintext(value: str) -> bool:
    """A literal value, not a secret marker, a reference or a flag."""
    value = value.strip()
    return not (
        value in ("", SECRET, UNKNOWN)
        or value.startswith(("$", "projects/", "sm://"))
        or value.lower() in _NOT_SECRET_VALUES
        or value.isdigit()  # ports, counts, ids
    )


def _scan_text(path: str, text: str) -> str | None:
    for kind, pattern in _CREDENTIALS:
        if pattern.search(text):
            return f"{path} contains {kind} in plaintext; {_FIX_SECRET}"
    for match in _ASSIGNMENT.finditer(text):
        name, value = match.group(1), match.group(3)
        if secret_like(name) and _plaintext(value):
            return f"{path} sets {name} in plaintext; {_FIX_SECRET}"
    return None


def _scan(value: Any, path: str, found: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        name, literal = value.get("name"), value.get("value")
        # Environment variables: [{"name": "HF_TOKEN", "value": "..."}] (Vertex, Kubernetes).
        if (
            isinstance(name, str)
            and isinstance(literal, str)
            and secret_like(name)
            and _plaintext(literal)
        ):
            found.setdefault(f"{path}.value", f"{path}.value sets {name} in plaintext")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "__provider":  # a dynamic provider's pickled code, always secret
                continue
            if isinstance(item, str) and secret_like(str(key)) and _plaintext(item):
                found.setdefault(where, f"{where} holds a plaintext credential")
            else:
                _scan(item, where, found)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for i, item in enumerate(value):
            _scan(item, f"{path}[{i}]", found)
    elif isinstance(value, str) and value not in (SECRET, UNKNOWN):
        message = _scan_text(path, value)
        if message:
            found.setdefault(path, message)


def check_plaintext_secrets(resource: Resource, _: Context) -> Iterator[str]:
    """Credentials reach resources only as Pulumi secrets (shown as "[secret]")."""
    if resource.type in _SECRET_HOLDING_TYPES:
        return
    found: dict[str, str] = {}
    _scan(resource.inputs, "", found)
    for message in found.values():
        yield message if _FIX_SECRET in message else f"{message}; {_FIX_SECRET}"


# --------------------------------------------------------------------------- the rules


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

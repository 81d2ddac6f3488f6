"""`supervisor-least-privilege`: the run supervisor's service account reaches only its own
stack's resources.

The supervisor (components/run_supervisor.py) is the Cloud Functions function's
`serviceConfig.serviceAccountEmail`. Each grant to that account must be one of:

- a project grant of a custom role of this stack whose permissions all serve the stack's
  own compute: on a TPU stack `tpu.nodes.create`, `.delete` and `.get` (the calls it makes;
  Cloud TPU authorises its queued resources with the node permissions and has no
  `tpu.queuedResources.*` permission); on a stack with a managed instance group (gce) only
  reading, listing and resizing it (`compute.instanceGroupManagers.get`, `.list`, `.update`);
  on a stack with
  a GKE node pool `container.clusters.get` and `.update` under a condition that names this
  stack's cluster and nothing else (`resource.name == "projects/P/locations/L/clusters/C"` or
  its `zones/` form, or `.startsWith("<cluster>/nodePools/")`, joined by `||`), and reading
  the pools' instance groups (`compute.instanceGroupManagers.get`, `.list`); `.update` too
  only where a node pool of the stack is autoscaled (flex-start: the cluster autoscaler
  leaves its nodes that still run pods, so the supervisor deletes them through the groups;
  `.update` also creates and resizes VMs in every group of the project, so a stack of
  fixed-size pools, which stop by `nodePools.setSize`, must not hold it). Google honours
  resource names in conditions for GKE clusters (for its node-pool calls: inferred) but not
  for Cloud TPU, and for instance group managers it is unverified
  (https://cloud.google.com/iam/docs/conditions-resource-attributes), so those grants do not
  name the one resource and a permission of another kind of compute is a violation even
  where it looks harmless;
- a bucket grant on the supervisor's own state bucket (labelled `component: run-supervisor`),
  or on another bucket of this stack (the checkpoint bucket) under a condition that holds it to
  the runs' records: `resource.name.startsWith("projects/_/buckets/<that bucket>/objects/
  [<folder>/]trainstack-run-...")` (the folder: the checkpoint_url's path in the bucket)
  and nothing else (no list: it reads each record by name); Cloud
  Storage honours object names in conditions, so checkpoints and final models stay out of its
  reach;
- a service-account grant on an account this stack creates (the training account, which the
  node body in its bundle runs as; whether creating a node without `serviceAccount.email`,
  which runs as the default Compute Engine account, needs actAs is unverified);
- a Cloud Run service grant on a function of this stack (its own invoker binding).

Anything else (a predefined project role, a bucket or account of another stack, a custom
role with other permissions) is a violation. The custom roles' ids carry the supervisor
account's unique id, so before its first deploy a grant's role is not known: then every
custom role of the stack whose id is not known is held to the permissions above, and on a
GKE stack as many of those grants carry the cluster condition as such roles hold
`container.clusters.*`.

The function's build account (`buildConfig.serviceAccount`) holds what Google lists for it
 (https://cloud.google.com/run/docs/configuring/services/build-service-account):
`roles/logging.logWriter` and `roles/artifactregistry.writer` on the project, and
`roles/storage.objectViewer` on the bucket of the function's source (its `supervisor/`
objects, by a condition) and, by a condition, on Cloud Functions' own copies of function
sources (`resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")`: the build reads
its copy there). That is narrower
than Google's list, which names `roles/storage.objectAdmin`. Any other grant to it is a
violation, and so is one of these missing. Values not known until deploy are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from ._inputs import _get, _hidden, _labels
from .model import Context, Resource

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
ACCOUNT = "gcp:serviceaccount/account:Account"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
RUN_MEMBER = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
BUCKET = "gcp:storage/bucket:Bucket"
GROUP = "gcp:compute/instanceGroupManager:InstanceGroupManager"
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
TPU_PERMISSIONS = ("tpu.nodes.create", "tpu.nodes.delete", "tpu.nodes.get")
BUILD_PROJECT_ROLES = ("roles/logging.logWriter", "roles/artifactregistry.writer")
BUILD_SOURCE_ROLE = "roles/storage.objectViewer"
BUILD_COPIES = 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")'
"""The condition of the build account's read of Cloud Functions' source copies."""
COPIES = "gcf-v2-sources-*"
GROUP_PERMISSIONS = (
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.list",
    "compute.instanceGroupManagers.update",
)
CLUSTER_PERMISSIONS = ("container.clusters.get", "container.clusters.update")
"""Held only under a condition naming the stack's cluster."""
NODE_POOL_PERMISSIONS = (*GROUP_PERMISSIONS[:2], *CLUSTER_PERMISSIONS)
"""A GKE stack whose pools are all of a fixed size: their groups are only read (a pool
stops by `nodePools.setSize`)."""
AUTOSCALED_POOL_PERMISSIONS = (*GROUP_PERMISSIONS, *CLUSTER_PERMISSIONS)
"""A GKE stack with an autoscaled (flex-start) pool: its VMs are deleted through its groups
(`compute.instanceGroupManagers.update`, which also creates and resizes, on every group of
the project)."""
_CLAUSE = re.compile(
    r'^resource\.name == "(?P<name>[^"]+)"$'
    r'|^resource\.name\.startsWith\("(?P<prefix>[^"]+)/nodePools/"\)$'
)
RECORDS = "trainstack-run-"
"""The prefix of the runs' records beside the checkpoints (components/gpu_startup
`RUN_CLOCK_PREFIX`; a test holds the two equal)."""
SUPERVISOR_LABEL = "run-supervisor"
"""The `component` label of the supervisor's own resources (its state bucket)."""
_RECORD_CLAUSE = re.compile(
    r'^resource\.name\.startsWith\("projects/_/buckets/(?P<bucket>[^/"]+)/objects/'
    + r'(?:[^"]*/)?'  # the checkpoint_url's folder in the bucket, where the records are
    + RECORDS
    + r'[^"]*"\)$'
)


def _allowed(resources: Sequence[Resource]) -> tuple[tuple[str, ...], str]:
    """(Permissions the stack's supervisor may hold, the same in words)."""
    types = {r.type for r in resources}
    if NODE_POOL in types:
        cluster = "container.clusters.get and .update under a condition naming this stack's cluster"
        if any(r.type == NODE_POOL and r.inputs.get("autoscaling") for r in resources):
            return AUTOSCALED_POOL_PERMISSIONS, (
                "compute.instanceGroupManagers.get, .list and .update (an autoscaled pool's "
                f"VMs are deleted through its groups), and {cluster}"
            )
        return NODE_POOL_PERMISSIONS, (
            "compute.instanceGroupManagers.get and .list (no pool is autoscaled: none has its "
            f"VMs deleted through its groups), and {cluster}"
        )
    if GROUP in types:
        return GROUP_PERMISSIONS, ", ".join(GROUP_PERMISSIONS)
    # A TPU stack (its slice a V2Vm, or a queued resource, which is a dynamic resource).
    return TPU_PERMISSIONS, ", ".join(TPU_PERMISSIONS)


def _clusters(resources: Sequence[Resource]) -> set[str]:
    """The stack's GKE clusters in both of IAM's name forms (zonal and regional)."""
    names = set()
    for r in resources:
        if r.type == CLUSTER:
            project, location, name = (r.inputs.get(k) for k in ("project", "location", "name"))
            for form in ("locations", "zones"):
                names.add(f"projects/{project}/{form}/{location}/clusters/{name}")
    return names


def _condition_problem(condition: object, clusters: set[str]) -> str | None:
    """Why `condition` does not hold a grant to the stack's own clusters, or None."""
    if not isinstance(condition, dict) or not condition.get("expression"):
        return "has no condition: it reaches every cluster of the project"
    expression = condition["expression"]
    if _hidden(expression):
        return None
    for clause in str(expression).split(" || "):
        match = _CLAUSE.match(clause.strip())
        if match is None:
            return f"has a condition clause {clause.strip()!r} that does not name one cluster"
        name = match["name"] or match["prefix"]
        if name not in clusters:
            return f"has a condition naming {name}, not a cluster of this stack"
    return None


def _records_problem(condition: object, bucket: str) -> str | None:
    """Why `condition` does not hold a grant on `bucket` to the runs' records, or None."""
    if not isinstance(condition, dict) or not condition.get("expression"):
        return "has no condition: it reaches every object there, checkpoints and models too"
    expression = condition["expression"]
    if _hidden(expression):
        return None
    for clause in str(expression).split(" || "):
        match = _RECORD_CLAUSE.match(clause.strip())
        if match is None:
            return f"has a condition clause {clause.strip()!r} beyond the run records"
        if match["bucket"] != bucket:
            return f"has a condition naming bucket {match['bucket']}, not {bucket}"
    return None


def _supervisors(resources: Sequence[Resource]) -> set[str]:
    members = set()
    for resource in resources:
        if resource.type == FUNCTION:
            email = _get(resource.inputs, "serviceConfig", "serviceAccountEmail")
            if isinstance(email, str) and not _hidden(email):
                members.add(f"serviceAccount:{email}")
    return members


def _builders(resources: Sequence[Resource]) -> dict[str, tuple[Resource, object]]:
    """The functions' build accounts as IAM members: (the function, its source bucket)."""
    builders = {}
    for r in resources:
        if r.type != FUNCTION:
            continue
        name = _get(r.inputs, "buildConfig", "serviceAccount")
        if isinstance(name, str) and not _hidden(name) and "/serviceAccounts/" in name:
            bucket = _get(r.inputs, "buildConfig", "source", "storageSource", "bucket")
            builders[f"serviceAccount:{name.split('/serviceAccounts/')[-1]}"] = (r, bucket)
    return builders


def _builder_grants(
    resources: Sequence[Resource], builders: dict[str, tuple[Resource, object]]
) -> Iterator[tuple[Resource, str]]:
    """Each grant to a build account beyond its three, and each of the three it lacks."""
    held: dict[str, set[tuple[str, object]]] = {member: set() for member in builders}
    for r in resources:
        member = r.inputs.get("member")
        if member not in builders:
            continue
        role, bucket = r.inputs.get("role"), builders[str(member)][1]
        condition = r.inputs.get("condition")
        if r.type == PROJECT_MEMBER and role in BUILD_PROJECT_ROLES and not condition:
            held[str(member)].add((str(role), None))
        elif (
            r.type == PROJECT_MEMBER
            and role == BUILD_SOURCE_ROLE
            and (_get(r.inputs, "condition", "expression") == BUILD_COPIES)
        ):
            held[str(member)].add((BUILD_SOURCE_ROLE, COPIES))
        elif r.type == BUCKET_MEMBER and role == BUILD_SOURCE_ROLE:
            granted = r.inputs.get("bucket")
            if _hidden(granted) or _hidden(bucket) or granted == bucket:
                held[str(member)].add((BUILD_SOURCE_ROLE, bucket))
            else:
                yield (
                    r,
                    (
                        f"grants the supervisor's build account {role} on bucket "
                        f"{granted}; valid: only the function's source bucket {bucket}"
                    ),
                )
        else:
            where = f"bucket {r.inputs.get('bucket')}" if r.type == BUCKET_MEMBER else r.type
            yield (
                r,
                (
                    f"grants the supervisor's build account {role} on {where}; valid: "
                    f"{' and '.join(BUILD_PROJECT_ROLES)} on the project, {BUILD_SOURCE_ROLE} on "
                    f"the function's source bucket {bucket} and on the project under the "
                    f"condition {BUILD_COPIES}"
                ),
            )
    for member, (function, bucket) in builders.items():
        wanted: list[tuple[str, object]] = [(role, None) for role in BUILD_PROJECT_ROLES]
        wanted += [(BUILD_SOURCE_ROLE, bucket), (BUILD_SOURCE_ROLE, COPIES)]
        for role, on in wanted:
            if (role, on) not in held[member]:
                where = (
                    "the project"
                    if on is None
                    else "Cloud Functions' source copies (a condition: " + BUILD_COPIES + ")"
                    if on == COPIES
                    else f"bucket {on}"
                )
                yield (
                    function,
                    (
                        f"the supervisor's build account ({member}) lacks {role} on {where}, "
                        "which the build needs"
                    ),
                )


def _of_type(resources: Sequence[Resource], kind: str, key: str) -> set[str]:
    return {str(r.inputs.get(key)) for r in resources if r.type == kind}


def _custom_roles(resources: Sequence[Resource]) -> dict[str, list[str]]:
    roles = {}
    for r in resources:
        if r.type == CUSTOM_ROLE and not _hidden(r.inputs.get("roleId")):
            name = f"projects/{r.inputs.get('project')}/roles/{r.inputs.get('roleId')}"
            roles[name] = [str(p) for p in r.inputs.get("permissions") or []]
    return roles


def _unpaired(
    resources: Sequence[Resource],
    grants: list[Resource],
    allowed: tuple[tuple[str, ...], str],
    clusters: set[str],
) -> Iterator[tuple[Resource, str]]:
    """Project grants to the supervisor whose role is not known before deploy (`grants`),
    judged by the stack's custom roles whose id is not known either (module docstring)."""
    unknown = [r for r in resources if r.type == CUSTOM_ROLE and _hidden(r.inputs.get("roleId"))]
    wide = []
    for role in unknown:
        permissions = [str(p) for p in role.inputs.get("permissions") or []]
        extra = [p for p in permissions if p not in allowed[0]]
        if extra:
            yield (
                role,
                (
                    f"custom role {role.name} (its id known after deploy) of the supervisor "
                    f"holds {', '.join(extra)}; valid: {allowed[1]}"
                ),
            )
        if any(p in CLUSTER_PERMISSIONS for p in permissions):
            wide.append(role)
    if not clusters:
        return
    held = 0
    for grant in grants:
        condition = grant.inputs.get("condition")
        problem = _condition_problem(condition, clusters)
        held += problem is None
        if problem is not None and condition:  # a condition, but not the cluster's
            yield (
                grant,
                (
                    f"the grant of a role known after deploy to the supervisor {problem}; "
                    "valid: a condition on resource.name naming this stack's cluster"
                ),
            )
    for role in wide[held:]:
        yield (
            role,
            (
                f"custom role {role.name} (its id known after deploy) holds "
                "container.clusters.*, and no grant to the supervisor left carries a condition "
                "naming this stack's cluster; valid: its grant under a condition on "
                "resource.name naming this stack's cluster"
            ),
        )


def check_supervisor_scope(
    resources: Sequence[Resource], _: Context
) -> Iterator[tuple[Resource, str]]:
    """The supervisor's grants reach only this stack's compute, buckets, accounts and
    function."""
    yield from _builder_grants(resources, _builders(resources))
    supervisors = _supervisors(resources)
    if not supervisors:
        return
    roles = _custom_roles(resources)
    buckets = _of_type(resources, BUCKET, "name")
    own = {
        str(r.inputs.get("name"))
        for r in resources
        if r.type == BUCKET and _labels(r).get("component") == SUPERVISOR_LABEL
    }
    accounts = {
        f"projects/{r.inputs.get('project')}/serviceAccounts/{r.inputs.get('accountId')}@"
        f"{r.inputs.get('project')}.iam.gserviceaccount.com"
        for r in resources
        if r.type == ACCOUNT
    }
    functions = _of_type(resources, FUNCTION, "name")
    allowed = _allowed(resources)
    clusters = _clusters(resources)
    unpaired = []
    for r in resources:
        member = r.inputs.get("member")
        if member not in supervisors:
            continue
        if r.type == PROJECT_MEMBER and _hidden(r.inputs.get("role")):
            unpaired.append(r)
            continue
        stack = (roles, buckets, own, accounts, functions)
        yield from ((r, why) for why in _grant_problems(r, stack, allowed, clusters))
    if unpaired:
        yield from _unpaired(resources, unpaired, allowed, clusters)


Stack = tuple[dict[str, list[str]], set[str], set[str], set[str], set[str]]
"""The stack's custom roles (name: permissions), buckets, the supervisor's own buckets,
service accounts and functions."""


def _grant_problems(
    r: Resource, stack: Stack, allowed: tuple[tuple[str, ...], str], clusters: set[str]
) -> Iterator[str]:
    roles, buckets, own, accounts, functions = stack
    inputs = r.inputs
    if r.type == PROJECT_MEMBER:
        role = inputs.get("role")
        if role not in roles:
            yield (
                f"grants {role} on the project to the supervisor: only a custom role of "
                f"this stack limited to {allowed[1]} is allowed"
            )
            return
        permissions = roles[str(role)]
        extra = [p for p in permissions if p not in allowed[0]]
        if extra:
            yield (
                f"custom role {role} of the supervisor holds {', '.join(extra)}; valid: "
                f"{allowed[1]}"
            )
        if clusters and any(p in CLUSTER_PERMISSIONS for p in permissions):
            problem = _condition_problem(inputs.get("condition"), clusters)
            if problem:
                yield (
                    f"the grant of {role} (container.clusters.*) to the supervisor {problem}; "
                    "valid: a condition on resource.name naming this stack's cluster"
                )
    elif r.type == BUCKET_MEMBER:
        bucket = inputs.get("bucket")
        if _hidden(bucket) or bucket in own:
            return
        if bucket not in buckets:
            yield f"grants the supervisor access to bucket {bucket}, not one of this stack"
            return
        problem = _records_problem(inputs.get("condition"), str(bucket))
        if problem:
            yield (
                f"the supervisor's grant on bucket {bucket} {problem}; valid: a condition "
                f'holding it to the run records, resource.name.startsWith("projects/_/buckets/'
                f'{bucket}/objects/{RECORDS}")'
            )
    elif r.type == ACCOUNT_MEMBER:
        account = inputs.get("serviceAccountId")
        if not _hidden(account) and account not in accounts:
            yield f"lets the supervisor act on {account}, not an account of this stack"
    elif r.type == RUN_MEMBER:
        service = inputs.get("name")
        if not _hidden(service) and service not in functions:
            yield f"grants the supervisor a role on Cloud Run service {service}, not its own"
    else:
        yield f"grants the supervisor access through {r.type}, which it never needs"

"""The run supervisor's permissions (`trainstack.components.run_supervisor`): which IAM
permissions each call of `components/supervisor/main.py` needs, which of its grants an IAM
condition can hold to the stack's own resource, and the names of what it supervises, each
with its source. `*_VERIFIED` is True only where the cited source states the fact itself.
"""

from __future__ import annotations

import re
from typing import Final

RESOURCE_NAMES: Final = {
    "node": re.compile(r"^projects/[^/]+/locations/[^/]+/nodes/[a-z][-a-z0-9]*$"),
    "queued": re.compile(r"^projects/[^/]+/locations/[^/]+/queuedResources/[a-z][-a-z0-9]*$"),
    "mig": re.compile(r"^projects/[^/]+/zones/[^/]+/instanceGroupManagers/[a-z][-a-z0-9]*$"),
    "node_pool": re.compile(
        r"^projects/[^/]+/locations/[^/]+/clusters/[a-z][-a-z0-9]*/nodePools/[a-z][-a-z0-9]*$"
    ),
    "node_pools": re.compile(r"^projects/[^/]+/locations/[^/]+/clusters/[a-z][-a-z0-9]*$"),
}
NAME_FORMS: Final = {
    "node": "projects/P/locations/Z/nodes/NAME",
    "queued": "projects/P/locations/Z/queuedResources/NAME",
    "mig": "projects/P/zones/Z/instanceGroupManagers/NAME",
    "node_pool": "projects/P/locations/L/clusters/C/nodePools/NAME",
    "node_pools": "projects/P/locations/L/clusters/C",
}


ROLE_ID_SOURCE: Final = (
    "iam.v1 discovery: projects.roles.delete 'You have 7 days to undelete the custom role. "
    "After 7 days ... The custom role is permanently deleted'; CreateRoleRequest.roleId "
    "'may contain alphanumeric characters, underscores (_), and periods (.). It must contain "
    "a minimum of 3 characters and a maximum of 64 characters'; ServiceAccount.uniqueId 'if "
    "you delete a service account, then create a new service account with the same name, "
    "the new service account has a different unique ID'; hashicorp/terraform-provider-google "
    "resource_google_project_iam_custom_role.go resourceGoogleProjectIamCustomRoleCreate: a "
    "role the get still answers as deleted is undeleted, any other is created (refused while "
    "its id is being deleted for good: 'You can't create a role_id ... which has been marked "
    "for deletion', issue 29)"
)
"""Why the role ids carry the supervisor account's unique id: a stack destroyed and deployed
again gets a new account, hence new role ids, instead of ids Google holds for up to 37
days."""
ROLE_LIMIT_SOURCE: Final = (
    "iam.v1 discovery, projects.roles.delete: 'A deleted custom role still counts toward the "
    "[custom role limit](https://cloud.google.com/iam/help/limits) until it is permanently "
    "deleted. You have 7 days to undelete the custom role. After 7 days ... The custom role no "
    "longer counts toward your custom role limit'; https://cloud.google.com/iam/quotas "
    "(Limits, custom roles: 300 in a project)"
)
CUSTOM_ROLE_LIMIT: Final = 300
"""Custom roles a project may hold, deleted ones for their first 7 days included
(`ROLE_LIMIT_SOURCE`): each deploy of a supervised stack after a destroy makes new roles
(`role_id`), so a project that cycles stacks often can reach it."""
DELETED_ROLE_DAYS: Final = 7


def role_count(kind: str) -> int:
    """The custom roles a supervisor of `kind` holds: a GKE one reads its pools' groups under
    a second (`READ_PERMISSIONS`)."""
    return 2 if kind in ("node_pool", "node_pools") else 1


def role_id(deployment: str, unique_id: str, part: str = "") -> str:
    """A custom role id (`[a-zA-Z0-9_.]{3,64}`) for the deployment, unique per creation of
    its supervisor account (`unique_id`, ROLE_ID_SOURCE); `part`: its second role
    (`READ_PERMISSIONS`). The deployment is cut to fit, the unique id never."""
    prefix = f"trainstackSupervisor{part}_"
    room = 64 - len(prefix) - len(unique_id) - 1
    return f"{prefix}{re.sub(r'[^a-zA-Z0-9_]', '_', deployment)[:room]}_{unique_id}"


def earlier_role_id(deployment: str, part: str = "") -> str:
    """The role id of a supervisor deployed before role ids carried the unique id (`status`
    names it for a stack that has no `supervisor_roles` output)."""
    return (f"trainstackSupervisor{part}_" + re.sub(r"[^a-zA-Z0-9_]", "_", deployment))[:64]


TPU_PERMISSIONS_SOURCE: Final = (
    "https://cloud.google.com/iam/docs/roles-permissions/tpu (roles/tpu.admin lists tpu.nodes.*, "
    "tpu.operations.*, ... and no tpu.queuedResources.* permission); iann0036/iam-dataset "
    "gcp/map.json, crawled from the REST pages' IAM sections: queuedResources.create/.delete/"
    ".get require tpu.nodes.create/.delete/.get"
)
"""Why a queued resource's calls need `tpu.nodes.*`: Cloud TPU has no `tpu.queuedResources.*`
permission, and a custom role naming a permission that does not exist is refused ("Error 400:
Permission ... is not valid", hashicorp/terraform-provider-google#14033)."""
PERMISSIONS: Final[dict[str, tuple[str, ...]]] = {
    # TPU_PERMISSIONS_SOURCE: a queued resource's create, delete and get are authorised by
    # the node permissions.
    # `supervisor/main.py` never waits on an operation, so no `tpu.operations.get`.
    "node": ("tpu.nodes.create", "tpu.nodes.delete", "tpu.nodes.get"),
    "queued": ("tpu.nodes.create", "tpu.nodes.delete", "tpu.nodes.get"),
    # instanceGroupManagers.get and .deleteInstances: "Authorization requires the following
    # IAM permission on the specified resource instanceGroupManager:
    # compute.instanceGroupManagers.update" (https://cloud.google.com/compute/docs/reference/
    # rest/v1/instanceGroupManagers/deleteInstances, as its mirror documentation.s3ns.fr/
    # compute/docs/reference/rest/v1/instanceGroupManagers/deleteInstances shows it; the
    # stored copy of Google's page cuts the permission's name short); iann0036/iam-dataset
    # gcp/map.json, crawled from the REST pages: compute.instanceGroupManagers.deleteInstances
    # requires compute.instanceGroupManagers.update, .get compute.instanceGroupManagers.get.
    # The group deletes the VMs itself: no compute.instances.* permission is listed. Not
    # checked on a live project. listManagedInstances (which VMs run, and any the stack does
    # not name): "The required permission to execute this command is
    # compute.instanceGroupManagers.list" (https://cloud.google.com/sdk/gcloud/reference/
    # compute/instance-groups/managed/list-instances, the gcloud command that calls it).
    "mig": (
        "compute.instanceGroupManagers.get",
        "compute.instanceGroupManagers.list",
        "compute.instanceGroupManagers.update",
    ),
    # nodePools.get and .setSize: "nodePools.get | container.clusters.get on the requested
    # cluster" (https://cloud.google.com/kubernetes-engine/docs/reference/api-permissions);
    # setSize: "Authorization requires the following IAM permission on the specified
    # resource name: container.clusters.update" (its REST page). Granted on the one cluster
    # only (`cluster_condition`); the pool's instance groups are read (and a flex-start pool's
    # VMs deleted through them) under `READ_PERMISSIONS`.
    "node_pool": ("container.clusters.get", "container.clusters.update"),
    # The TPU slices' pools: the same calls, and nodePools.setAutoscaling for a flex-start
    # pool, which "Authorization requires the following IAM permission on the specified
    # resource name: container.clusters.update" as setSize does (container.v1 REST pages,
    # https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.
    # clusters.nodePools/setAutoscaling; not checked on a live project).
    "node_pools": ("container.clusters.get", "container.clusters.update"),
}
"""The custom role's permissions: the calls `supervisor/main.py` makes. A TPU slice that is
not recovered (on-demand, reserved) only needs `STOP_ONLY_PERMISSIONS`."""
STOP_ONLY_PERMISSIONS: Final[dict[str, tuple[str, ...]]] = {
    "node": ("tpu.nodes.delete", "tpu.nodes.get"),
    "queued": ("tpu.nodes.delete", "tpu.nodes.get"),
}
GROUP_READ_PERMISSIONS: Final = (
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.list",
)
"""A GKE pool's instance groups, read as the `mig` kind's are (its sources there): the pool
reports no size of its own, so its groups' and their VMs' are read. A fixed-size pool stops
by `nodePools.setSize` (GKE deletes the VMs), so this is all it needs of them."""
GROUP_UPDATE_SOURCE: Final = (
    "https://docs.cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/"
    "resize and .../beta/instanceGroupManagers/createInstances: 'Authorization requires the "
    "following IAM permission on the specified resource instanceGroupManager: "
    "compute.instanceGroupManagers.update', as deleteInstances ('PERMISSIONS' above)"
)
"""Why `.update` is more than a delete: the same permission resizes a group up and creates
VMs in it, so an account holding it project-wide can create, resize or delete the VMs of
every managed instance group in the project."""
GROUP_PERMISSIONS: Final = (*GROUP_READ_PERMISSIONS, "compute.instanceGroupManagers.update")
"""An autoscaled (flex-start) pool's instance groups: read, and `.update` for
`deleteInstances`, by which the supervisor deletes the pool's VMs that the cluster autoscaler
leaves while pods run on them (`supervisor_targets.stop_autoscaled`); the group deletes the
VMs itself, so no compute.instances.* permission."""
READ_PERMISSIONS: Final[dict[str, tuple[str, ...]]] = {
    "node_pool": GROUP_READ_PERMISSIONS,
    "node_pools": GROUP_READ_PERMISSIONS,
}
"""A second role, granted without a condition: the GKE pool's instance groups, which IAM
conditions are not known to name (`CONDITIONS_SOURCE`), so project-wide as the `mig` kind's
grant is. `GROUP_PERMISSIONS` instead where a pool is autoscaled (`read_permissions`)."""


READ_DESCRIPTIONS: Final = {
    False: "Read the instance groups of one stack's GKE node pool.",
    True: "Read the instance groups of one stack's GKE node pool and delete their VMs.",
}
"""The second role's description, by whether a pool is autoscaled."""


def autoscaled_problem(kind: str, autoscaled: object) -> str | None:
    """The one rule of a supervisor's `autoscaled`: for the GKE kinds only."""
    if autoscaled is None or kind in READ_PERMISSIONS:
        return None
    return (
        f"autoscaled: {autoscaled!r} is not allowed for kind {kind!r}; valid: true or false "
        f"for {' and '.join(READ_PERMISSIONS)}, unset otherwise"
    )


def read_permissions(kind: str, autoscaled: bool) -> tuple[str, ...]:
    """The second role's permissions for a GKE supervisor (`READ_PERMISSIONS`): `.update`
    only where some pool it stops is autoscaled (flex-start), whose VMs it deletes."""
    return GROUP_PERMISSIONS if autoscaled else READ_PERMISSIONS[kind]


CONDITIONS_SOURCE: Final = (
    "https://cloud.google.com/iam/docs/conditions-resource-attributes ('Resource attributes "
    "are available for the Google Cloud services and resource types that are listed on this "
    "page. Other services and resource types do not recognize resource attributes'; services "
    "listed: compute.googleapis.com and container.googleapis.com among them, "
    "tpu.googleapis.com not; resource types: container.googleapis.com/Cluster with "
    "'projects/project-id/zones/zone/clusters/cluster-id' and 'projects/project-id/locations/"
    "location/clusters/cluster-id'; the stored copies of the compute types end at "
    "compute.googleapis.com/Instance and InstanceTempla[te], before any instance group "
    "manager); https://cloud.google.com/iam/docs/configuring-resource-based-access ('If part "
    "of a condition uses an attribute that isn't available for a resource, then that part of "
    "the condition is never interpreted as granting access'); read with the search tool on "
    "2026-11-29"
)
"""Which compute grants a condition can narrow, as far as Google's pages say: not Cloud TPU's
(not a listed service: its grant stays project-wide). Instance group managers: unverified
(Compute Engine is listed, whether its instance group managers are was not readable), so
that grant stays project-wide too; a name condition Compute Engine did not evaluate would
never grant, and the supervisor could not stop the group. The GKE cluster is listed, but
that GKE evaluates the cluster's name for `nodePools.get`/`setSize` is inferred (their
permissions are cluster permissions, "on the requested cluster"), not stated; the condition
also accepts the pool's own name under the cluster. Where it was not evaluated the grant
would never apply (the quote above: not "allow everything", but the supervisor could not
read or stop the pool, and each check records a 403). The policy pack's
`supervisor-least-privilege` holds the project-wide grants to these permissions."""
CONDITIONS_VERIFIED: Final = False
GROUP_REACH: Final = (
    "read any managed instance group in project {project} and create, resize or delete its VMs"
)
REACH: Final = {
    "node": "{verbs} any TPU node in project {project} (tpu.nodes.*)",
    "queued": "{verbs} any TPU node or queued resource in project {project} (tpu.nodes.*)",
    "mig": GROUP_REACH,
    "node_pool": "read any managed instance group in project {project}",
    "node_pools": "read any managed instance group in project {project}",
}
"""What a project-wide compute grant of each kind lets the supervisor's account do beyond the
stack (`CONDITIONS_SOURCE`); `{verbs}`: get, delete and create for a slice it recovers, get
and delete for one it only stops. A GKE supervisor of an autoscaled pool: `GROUP_REACH`
(`GROUP_UPDATE_SOURCE`)."""
CONDITION_NOTES: Final = {
    "node": "Cloud TPU is not among the services whose resource names IAM conditions can use, "
    "so that grant cannot be held to the stack's slice",
    "queued": "Cloud TPU is not among the services whose resource names IAM conditions can "
    "use, so that grant cannot be held to the stack's slice",
    "mig": "whether IAM conditions can name an instance group manager is unverified, so that "
    "grant is project-wide (a name condition Compute Engine did not evaluate would never "
    "grant, and the supervisor could not stop the group)",
    "node_pool": "its resize grant is held to the stack's cluster by an IAM condition on the "
    "cluster's name, which GKE evaluating for node-pool calls is unverified: if it does not, "
    "the grant never applies and the supervisor cannot stop the pool (each check records a "
    "403)",
    "node_pools": "its resize grant is held to the stack's cluster by an IAM condition on the "
    "cluster's name, which GKE evaluating for node-pool calls is unverified: if it does not, "
    "the grant never applies and the supervisor cannot stop the slices' pools (each check "
    "records a 403)",
}
"""What the plan says of IAM conditions on each kind's compute grant (`CONDITIONS_SOURCE`)."""
STORAGE_OBJECT_NAME: Final = "projects/_/buckets/{bucket}/objects/{object}"
STORAGE_CONDITIONS_SOURCE: Final = (
    "https://cloud.google.com/iam/docs/conditions-resource-attributes (Cloud Storage objects: "
    "'projects/_/buckets/BUCKET/objects/OBJECT', resource names honoured; a bucket's own name "
    "is 'projects/_/buckets/BUCKET'): an object-name condition matches a request on an object "
    "(get, insert, delete) and not a list, which is a request on the bucket"
)
"""How the supervisor's checkpoint-bucket grant is held to the runs' records: object names
only. So the supervisor lists nothing there: it reads each node's heartbeat by name
(`supervisor_store.Store.newest_heartbeat`, one get per node rank)."""


BUILD_SOURCE: Final = (
    "https://cloud.google.com/functions/docs/securing/build-custom-sa ('Starting in July "
    "2024, Cloud Build has changed the default behavior for how Cloud Build uses service "
    "accounts in new projects ... new projects deploying functions for the first time may "
    "be using a default Cloud Build service account with insufficient permissions for "
    "building a function'; remedy: 'Create a custom Cloud Build service account for function "
    "deployments'); https://cloud.google.com/run/docs/configuring/services/build-service-account "
    "(the build account's roles: 'Logs Writer (roles/logging.logWriter) — for storing build "
    "logs in Cloud Logging', 'Artifact Registry Writer (roles/artifactregistry.writer) — for "
    "storing build images in Artifact Registry', 'Storage Object Admin "
    "(roles/storage.objectAdmin) — for retrieving the function source from the Cloud Storage "
    "bucket'); cloudfunctions.v2 discovery BuildConfig.serviceAccount: 'The format of this "
    "field is projects/{projectId}/serviceAccounts/{serviceAccountEmail}'"
)
BUILD_PROJECT_ROLES: Final = ("roles/logging.logWriter", "roles/artifactregistry.writer")
"""Granted on the project: the image repository (`gcf-artifacts`) is created by the first
deploy, so it cannot be named before it exists."""
BUILD_SOURCE_ROLE: Final = "roles/storage.objectViewer"
"""Granted on the staging bucket only (where the source zip is): reading is what the build
does with it; Google's page names `roles/storage.objectAdmin`, which also writes and
deletes. That read alone is enough is inferred, not checked on a live project."""
BUILD_SOURCE_ROLE_VERIFIED: Final = False
FUNCTION_SOURCES_PREFIX: Final = "projects/_/buckets/gcf-v2-sources-"
FUNCTION_SOURCES_SOURCE: Final = (
    "https://cloud.google.com/functions/docs/building ('function code is stored in a separate "
    "source bucket ... gcf-v2-sources-PROJECT_NUMBER-REGION'); the build's refusal when its "
    "account cannot read there: 'Access to bucket gcf-v2-sources-... denied. You must grant "
    "Storage Object Viewer permission to <build service account>' "
    "(hashicorp/terraform-provider-google#20571); Cloud Storage names in IAM conditions: "
    "'projects/_/buckets/BUCKET/objects/OBJECT' "
    "(https://cloud.google.com/iam/docs/conditions-resource-attributes)"
)
"""The build reads the function's own copy of the source, in a bucket Cloud Functions makes
per project number and region (neither known to the plan before deploy), so the read is a
project grant held by a condition to those buckets' objects (`BUILD_COPY_CONDITION`)."""
BUILD_COPY_CONDITION: Final = {
    "title": "only Cloud Functions source copies",
    "description": "Read the function sources Cloud Functions copies for its builds.",
    "expression": f'resource.name.startsWith("{FUNCTION_SOURCES_PREFIX}")',
}


def cluster_condition(node_pool: str) -> dict[str, str]:
    """The IAM condition that holds a grant to the cluster of `node_pool`
    (`projects/P/locations/L/clusters/C/nodePools/N`, or the cluster's own name for the
    `node_pools` kind), in both of GKE's name forms (`CONDITIONS_SOURCE`)."""
    kind = "node_pools" if RESOURCE_NAMES["node_pools"].match(node_pool) else "node_pool"
    if not RESOURCE_NAMES[kind].match(node_pool):
        raise ValueError(
            f"resource_name: {node_pool!r} is not a node_pool name; valid: {NAME_FORMS['node_pool']}"
        )
    project, _, location, _, cluster = node_pool.split("/")[1:6]
    names = (
        f"projects/{project}/locations/{location}/clusters/{cluster}",
        f"projects/{project}/zones/{location}/clusters/{cluster}",
    )
    clauses = [f'resource.name == "{n}"' for n in names]
    clauses += [f'resource.name.startsWith("{n}/nodePools/")' for n in names]
    return {
        "title": f"only cluster {cluster}"[:100],
        "description": (
            "The supervisor resizes this cluster's TPU node pools and no other."
            if kind == "node_pools"
            else "The supervisor resizes this cluster's GPU node pool and no other."
        ),
        "expression": " || ".join(clauses),
    }

"""`supervisor-least-privilege` on a GKE stack: the supervisor's container.clusters grant must
carry a condition naming this stack's cluster and nothing else (Google honours resource
names in conditions for GKE clusters, not for Cloud TPU or instance group managers); its
grant on the checkpoint bucket holds for the run records only (Cloud Storage honours object
names in conditions), its own state bucket excepted; and the function's build account holds
exactly the grants Google lists for it."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components._supervisor_iam import records_condition
from trainstack.components.catalog.supervisor_iam import cluster_condition
from trainstack.components.gpu_startup import RUN_CLOCK_PREFIX
from trainstack.policies.rules.model import UNKNOWN, Context, Resource
from trainstack.policies.rules.supervisor import RECORDS, check_supervisor_scope

EMAIL = "exp-sup@p.iam.gserviceaccount.com"
MEMBER = f"serviceAccount:{EMAIL}"
ROLE = "projects/p/roles/trainstackSupervisor_exp"
POOL = "projects/p/locations/us-central1-a/clusters/exp-gke/nodePools/gpu-pool"


def _stack(
    grant: dict[str, Any], permissions: list[str], pool: dict[str, Any] | None = None
) -> list[Resource]:
    return [
        Resource(
            "gcp:container/cluster:Cluster",
            "exp-gke",
            {"project": "p", "location": "us-central1-a", "name": "exp-gke"},
        ),
        Resource("gcp:container/nodePool:NodePool", "exp-gpu-pool", pool or {"name": "gpu-pool"}),
        Resource(
            "gcp:cloudfunctionsv2/function:Function",
            "exp-supervisor-function",
            {"name": "exp-supervisor", "serviceConfig": {"serviceAccountEmail": EMAIL}},
        ),
        Resource(
            "gcp:projects/iAMCustomRole:IAMCustomRole",
            "exp-supervisor-role",
            {"project": "p", "roleId": "trainstackSupervisor_exp", "permissions": permissions},
        ),
        Resource(
            "gcp:projects/iAMMember:IAMMember",
            "exp-supervisor-tpu",
            {"project": "p", "role": ROLE, "member": MEMBER, **grant},
        ),
    ]


def _problems(grant: dict[str, Any], permissions: list[str] | None = None) -> list[str]:
    perms = permissions or ["container.clusters.get", "container.clusters.update"]
    return [why for _, why in check_supervisor_scope(_stack(grant, perms), Context())]


def test_the_components_own_condition_passes() -> None:
    assert _problems({"condition": cluster_condition(POOL)}) == []


UPDATE = "compute.instanceGroupManagers.update"
GROUP_READ = ["compute.instanceGroupManagers.get", "compute.instanceGroupManagers.list"]
AUTOSCALED = {"name": "gpu-pool", "autoscaling": {"minNodeCount": 0, "maxNodeCount": 2}}


def test_only_an_autoscaled_pools_supervisor_may_update_instance_groups() -> None:
    # `.update` (deleteInstances, but also createInstances and resize on every group of the
    # project) serves only a flex-start pool, whose VMs the supervisor deletes.
    stack = _stack({}, [*GROUP_READ, UPDATE], AUTOSCALED)
    assert [why for _, why in check_supervisor_scope(stack, Context())] == []
    fixed = _stack({}, [*GROUP_READ, UPDATE])
    assert [why for _, why in check_supervisor_scope(fixed, Context())] == [
        f"custom role {ROLE} of the supervisor holds {UPDATE}; valid: "
        "compute.instanceGroupManagers.get and .list (no pool is autoscaled: none has its VMs "
        "deleted through its groups), and container.clusters.get and .update under a "
        "condition naming this stack's cluster"
    ]
    assert [why for _, why in check_supervisor_scope(_stack({}, GROUP_READ), Context())] == []


@pytest.mark.parametrize(
    ("grant", "why"),
    [
        ({}, "has no condition: it reaches every cluster of the project"),
        (
            {"condition": {"title": "t", "expression": "true"}},
            "has a condition clause 'true' that does not name one cluster",
        ),
        (
            {
                "condition": {
                    "title": "t",
                    "expression": 'resource.name == "projects/p/zones/us-central1-a/clusters/prod"',
                }
            },
            "has a condition naming projects/p/zones/us-central1-a/clusters/prod, not a "
            "cluster of this stack",
        ),
        (
            {
                "condition": {
                    "title": "t",
                    "expression": (
                        'resource.name.startsWith("projects/p/locations/us-central1-a/'
                        'clusters/exp-gke/nodePools/") || resource.name.startsWith("projects/")'
                    ),
                }
            },
            "has a condition clause 'resource.name.startsWith(\"projects/\")' that does not "
            "name one cluster",
        ),
    ],
)
def test_a_grant_not_held_to_the_stacks_cluster_is_a_violation(
    grant: dict[str, Any], why: str
) -> None:
    assert _problems(grant) == [
        f"the grant of {ROLE} (container.clusters.*) to the supervisor {why}; valid: a "
        "condition on resource.name naming this stack's cluster"
    ]


def test_a_queued_resource_permission_is_refused_on_a_tpu_stack() -> None:
    tpu_stack = [r for r in _stack({}, ["tpu.nodes.get", "tpu.queuedResources.get"])]
    tpu_stack = [r for r in tpu_stack if "container" not in r.type]
    assert [why for _, why in check_supervisor_scope(tpu_stack, Context())] == [
        f"custom role {ROLE} of the supervisor holds tpu.queuedResources.get; valid: "
        "tpu.nodes.create, tpu.nodes.delete, tpu.nodes.get"
    ]


BUILD = "serviceAccount:exp-sup-build@p.iam.gserviceaccount.com"
PROJECT_GRANT = "gcp:projects/iAMMember:IAMMember"
BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"


def _build_stack(*grants: tuple[str, str, dict[str, object]]) -> list[Resource]:
    """A supervisor function built from `p-exp-staging` by its build account, and `grants`
    (type, role, where) to that account."""
    function = Resource(
        "gcp:cloudfunctionsv2/function:Function",
        "exp-supervisor-function",
        {
            "name": "exp-supervisor",
            "serviceConfig": {"serviceAccountEmail": EMAIL},
            "buildConfig": {
                "serviceAccount": "projects/p/serviceAccounts/exp-sup-build@p.iam.gserviceaccount.com",
                "source": {"storageSource": {"bucket": "p-exp-staging", "object": "s.zip"}},
            },
        },
    )
    members = [
        Resource(kind, f"g{i}", {"role": role, "member": BUILD, **where})
        for i, (kind, role, where) in enumerate(grants)
    ]
    return [function, *members]


COPIES = 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")'
GOOD = [
    (PROJECT_GRANT, "roles/logging.logWriter", {"project": "p"}),
    (PROJECT_GRANT, "roles/artifactregistry.writer", {"project": "p"}),
    (BUCKET_GRANT, "roles/storage.objectViewer", {"bucket": "p-exp-staging"}),
    (
        PROJECT_GRANT,
        "roles/storage.objectViewer",
        {"project": "p", "condition": {"title": "t", "expression": COPIES}},
    ),
]
VALID = (
    "valid: roles/logging.logWriter and roles/artifactregistry.writer on the project, "
    "roles/storage.objectViewer on the function's source bucket p-exp-staging and on the "
    f"project under the condition {COPIES}"
)


def test_the_build_account_with_its_four_grants_passes_also_before_deploy() -> None:
    assert list(check_supervisor_scope(_build_stack(*GOOD), Context())) == []
    # A bucket named only at deploy time is not judged.
    unknown = [*GOOD[:2], (BUCKET_GRANT, "roles/storage.objectViewer", {"bucket": UNKNOWN})]
    unknown.append(GOOD[3])
    assert list(check_supervisor_scope(_build_stack(*unknown), Context())) == []


def test_a_project_wide_storage_grant_to_the_build_account_is_a_violation() -> None:
    wide = {"project": "p", "condition": {"title": "t", "expression": 'resource.name != ""'}}
    stack = _build_stack(
        *GOOD,
        (PROJECT_GRANT, "roles/storage.objectViewer", {"project": "p"}),
        (PROJECT_GRANT, "roles/storage.objectViewer", wide),
    )
    assert [(r.name, why) for r, why in check_supervisor_scope(stack, Context())] == [
        (
            name,
            "grants the supervisor's build account roles/storage.objectViewer on "
            f"gcp:projects/iAMMember:IAMMember; {VALID}",
        )
        for name in ("g4", "g5")
    ]


def test_the_build_account_without_its_read_of_the_source_copies_is_a_violation() -> None:
    stack = _build_stack(*GOOD[:3])
    assert [(r.name, why) for r, why in check_supervisor_scope(stack, Context())] == [
        (
            "exp-supervisor-function",
            f"the supervisor's build account ({BUILD}) lacks roles/storage.objectViewer on "
            f"Cloud Functions' source copies (a condition: {COPIES}), which the build needs",
        )
    ]


CHECKPOINTS = "p-exp-checkpoints"
STATE = "p-exp-supervisor"


def _bucket_stack(grant: dict[str, Any], bucket: str = CHECKPOINTS) -> list[Resource]:
    """A TPU stack's supervisor, its checkpoint bucket and its own state bucket, and `grant`
    on `bucket` to it."""
    return [
        Resource(
            "gcp:cloudfunctionsv2/function:Function",
            "exp-supervisor-function",
            {"name": "exp-supervisor", "serviceConfig": {"serviceAccountEmail": EMAIL}},
        ),
        Resource("gcp:storage/bucket:Bucket", "exp-buckets-checkpoints", {"name": CHECKPOINTS}),
        Resource(
            "gcp:storage/bucket:Bucket",
            "exp-supervisor-state",
            {"name": STATE, "labels": {"component": "run-supervisor"}},
        ),
        Resource(
            "gcp:storage/bucketIAMMember:BucketIAMMember",
            "exp-supervisor-records",
            {"bucket": bucket, "role": "roles/storage.objectAdmin", "member": MEMBER, **grant},
        ),
    ]


def _bucket_problems(grant: dict[str, Any], bucket: str = CHECKPOINTS) -> list[str]:
    return [why for _, why in check_supervisor_scope(_bucket_stack(grant, bucket), Context())]


def test_the_components_run_record_condition_and_its_own_bucket_pass() -> None:
    assert _bucket_problems({"condition": records_condition(CHECKPOINTS)}) == []
    # The records of a checkpoint_url with a path, `gs://<bucket>/team/exp`, are there.
    assert _bucket_problems({"condition": records_condition(CHECKPOINTS, "team/exp/")}) == []
    assert _bucket_problems({}, STATE) == []  # its state bucket: only it writes there
    assert RECORDS == RUN_CLOCK_PREFIX == "trainstack-run-"


ONLY = (
    "valid: a condition holding it to the run records, resource.name.startsWith("
    f'"projects/_/buckets/{CHECKPOINTS}/objects/trainstack-run-")'
)


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        (None, "has no condition: it reaches every object there, checkpoints and models too"),
        (
            f'resource.name.startsWith("projects/_/buckets/{CHECKPOINTS}/objects/")',
            "has a condition clause 'resource.name.startsWith(\"projects/_/buckets/"
            f"{CHECKPOINTS}/objects/\")' beyond the run records",
        ),
        (
            'resource.name.startsWith("projects/_/buckets/other/objects/trainstack-run-")',
            f"has a condition naming bucket other, not {CHECKPOINTS}",
        ),
        (
            records_condition(CHECKPOINTS)["expression"]
            + ' || api.getAttribute("storage.googleapis.com/objectListPrefix", "")'
            '.startsWith("")',
            "has a condition clause 'api.getAttribute(\"storage.googleapis.com/"
            'objectListPrefix", "").startsWith("")\' beyond the run records',
        ),
        # Lists of the records' prefix: the supervisor makes none (it gets each heartbeat by
        # name), and whether an allow policy honours the attribute is unverified.
        (
            records_condition(CHECKPOINTS)["expression"]
            + ' || api.getAttribute("storage.googleapis.com/objectListPrefix", "")'
            '.startsWith("trainstack-run-")',
            "has a condition clause 'api.getAttribute(\"storage.googleapis.com/"
            'objectListPrefix", "").startsWith("trainstack-run-")\' beyond the run records',
        ),
    ],
)
def test_a_checkpoint_bucket_grant_beyond_the_run_records_is_a_violation(
    expression: str | None, why: str
) -> None:
    grant = {} if expression is None else {"condition": {"title": "t", "expression": expression}}
    assert _bucket_problems(grant) == [
        f"the supervisor's grant on bucket {CHECKPOINTS} {why}; {ONLY}"
    ]

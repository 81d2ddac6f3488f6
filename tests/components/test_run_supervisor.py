"""RunSupervisor under Pulumi mocks: its account, narrow grants, source zip, function and
schedule, with exact inputs; and the bundle's reproducibility."""

from __future__ import annotations

import importlib.metadata
import json
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests import REPO_ROOT
from trainstack.components._args import ArgsError
from trainstack.components.run_supervisor import (
    PERMISSIONS,
    REQUIREMENTS,
    TOKEN,
    RunSupervisor,
    build_source,
    role_id,
    source_zip,
    spot_node_body,
    supervisor_config,
)
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import DEFAULT_OUTPUTS, ProgramRun, run_program
from trainstack.infra.plan import load_stack

NODE = "projects/my-project/locations/us-west4-a/nodes/exp-42-tpu"
QUEUED = "projects/my-project/locations/us-west4-a/queuedResources/exp-42-tpu-qr"
MIG = "projects/my-project/zones/us-central1-a/instanceGroupManagers/exp-42-a100"
VMS = ["exp-42-a100-0", "exp-42-a100-1"]
POOL = "projects/my-project/locations/us-central1-a/clusters/exp-42-gke/nodePools/gpu-pool"
RUN = {
    "end_uri": "gs://b-ckpt/trainstack-run-0123456789abcdef.ended",
    "alive_uri": "gs://b-ckpt/trainstack-run-0123456789abcdef.alive/",
    "node_count": 2,
    "stop_uri": "gs://b-ckpt/trainstack-run-0123456789abcdef.stop",
    "max_run_seconds": 7200,
    "hourly_usd": 29.39,
    "max_total_usd": 50.0,
}
EMAIL = "exp-42-sup@my-project.iam.gserviceaccount.com"
MEMBER = f"serviceAccount:{EMAIL}"
TRAIN_SA = "projects/my-project/serviceAccounts/exp-42-train@my-project.iam.gserviceaccount.com"
URL = "https://us-central1-my-project.cloudfunctions.net/exp-42-supervisor"
BUILD_EMAIL = "exp-42-sup-build@my-project.iam.gserviceaccount.com"
BUILD_MEMBER = f"serviceAccount:{BUILD_EMAIL}"
UID = "104857600000000000001"
"""The supervisor account's unique id, as IAM assigns it at creation (21 digits)."""
STATE = "my-project-exp-42-supervisor"
BODY = {
    "runtimeVersion": "v2-alpha-tpuv5-lite",
    "acceleratorConfig": {"type": "V5LITE_POD", "topology": "2x2"},
    "metadata": {"startup-script": "#!/bin/bash\necho hi\n"},
}


def _args(**overrides: Any) -> dict[str, Any]:
    return {
        "project": "my-project",
        "region": "us-central1",
        "deployment_name": "exp-42",
        "kind": "node",
        "resource_name": NODE,
        "body": BODY,
        "staging_bucket": "b-staging",
        "checkpoint_bucket": "b-ckpt",
        "node_service_account": TRAIN_SA,
        **overrides,
    }


def _with_unique_id(uid: str) -> Any:
    """The mocked account's outputs plus the `uniqueId` IAM gives it at creation."""

    def outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        return {
            **DEFAULT_OUTPUTS["gcp:serviceaccount/account:Account"](name, inputs),
            "uniqueId": uid,
        }

    return {"gcp:serviceaccount/account:Account": outputs}


def _run(uid: str = UID, **overrides: Any) -> ProgramRun:
    def program() -> dict[str, Any]:
        sup = RunSupervisor("sup", _args(**overrides))  # type: ignore[arg-type]
        return {
            "events": sup.events_uri,
            "url": sup.function_url,
            "email": sup.service_account_email,
            "roles": sup.roles,
        }

    return run_program(program, outputs=_with_unique_id(uid))


def test_children_named_from_the_component_and_parented() -> None:
    run = _run()
    assert sorted((r.type, r.name, r.parent) for r in run.resources) == sorted(
        [
            (TOKEN, "sup", None),
            ("gcp:serviceaccount/account:Account", "sup-sa", "sup"),
            ("gcp:projects/iAMCustomRole:IAMCustomRole", "sup-role", "sup"),
            ("gcp:projects/iAMMember:IAMMember", "sup-grant", "sup"),
            ("gcp:serviceaccount/iAMMember:IAMMember", "sup-act-as", "sup"),
            ("gcp:storage/bucket:Bucket", "sup-state", "sup"),
            ("gcp:storage/bucketIAMMember:BucketIAMMember", "sup-state-admin", "sup"),
            ("gcp:storage/bucketIAMMember:BucketIAMMember", "sup-records", "sup"),
            ("gcp:storage/bucketObject:BucketObject", "sup-source", "sup"),
            ("gcp:cloudfunctionsv2/function:Function", "sup-function", "sup"),
            ("gcp:cloudrunv2/serviceIamMember:ServiceIamMember", "sup-invoker", "sup"),
            ("gcp:cloudscheduler/job:Job", "sup-schedule", "sup"),
            ("gcp:serviceaccount/account:Account", "sup-build-sa", "sup"),
            ("gcp:projects/iAMMember:IAMMember", "sup-build-logs", "sup"),
            ("gcp:projects/iAMMember:IAMMember", "sup-build-images", "sup"),
            ("gcp:storage/bucketIAMMember:BucketIAMMember", "sup-build-source", "sup"),
            ("gcp:projects/iAMMember:IAMMember", "sup-build-copies", "sup"),
        ]
    )
    assert run.outputs == {
        "events": f"gs://{STATE}/events.jsonl",
        "url": URL,
        "email": EMAIL,
        "roles": [f"projects/my-project/roles/trainstackSupervisor_exp_42_{UID}"],
    }


def test_grants_are_narrow_and_exact() -> None:
    run = _run()
    assert run.named("sup-role").inputs == {
        "project": "my-project",
        "roleId": f"trainstackSupervisor_exp_42_{UID}",
        "title": "trainstack TPU supervisor (exp-42)",
        "description": "Get, delete and create one stack's TPU slice.",
        "permissions": [
            "tpu.nodes.create",
            "tpu.nodes.delete",
            "tpu.nodes.get",
        ],
    }
    assert run.named("sup-grant").inputs == {
        "project": "my-project",
        "role": f"projects/my-project/roles/trainstackSupervisor_exp_42_{UID}",
        "member": MEMBER,
    }
    assert run.named("sup-act-as").inputs == {
        "serviceAccountId": TRAIN_SA,
        "role": "roles/iam.serviceAccountUser",
        "member": MEMBER,
    }
    # Its own bucket, which only it writes; on the checkpoint bucket, the run records only.
    assert run.named("sup-state-admin").inputs == {
        "bucket": STATE,
        "role": "roles/storage.objectAdmin",
        "member": MEMBER,
    }
    assert run.named("sup-records").inputs == {
        "bucket": "b-ckpt",
        "role": "roles/storage.objectAdmin",
        "member": MEMBER,
        "condition": {
            "title": "only the run records",
            "description": "The runs' end records, heartbeats and stop requests; no checkpoint.",
            # Object names only (Google documents them in conditions): no list is granted.
            "expression": (
                'resource.name.startsWith("projects/_/buckets/b-ckpt/objects/trainstack-run-")'
            ),
        },
    }
    assert run.named("sup-invoker").inputs == {
        "project": "my-project",
        "location": "us-central1",
        "name": "exp-42-supervisor",
        "role": "roles/run.invoker",
        "member": MEMBER,
    }


def test_the_build_account_holds_only_what_google_lists_for_it() -> None:
    run = _run()
    assert run.named("sup-build-sa").inputs == {
        "project": "my-project",
        "accountId": "exp-42-sup-build",
        "displayName": "trainstack supervisor build (exp-42)",
        "description": "Builds this stack's run supervisor function; managed by trainstack.",
    }
    assert run.named("sup-build-logs").inputs == {
        "project": "my-project",
        "role": "roles/logging.logWriter",
        "member": BUILD_MEMBER,
    }
    assert run.named("sup-build-images").inputs == {
        "project": "my-project",
        "role": "roles/artifactregistry.writer",
        "member": BUILD_MEMBER,
    }
    # Only the supervisor's zips of the staging bucket (it holds the trainer packages too).
    assert run.named("sup-build-source").inputs == {
        "bucket": "b-staging",
        "role": "roles/storage.objectViewer",
        "member": BUILD_MEMBER,
        "condition": {
            "title": "only the supervisor's source",
            "description": "The run supervisor's source zips; no trainer package.",
            "expression": 'resource.name.startsWith("projects/_/buckets/b-staging/objects/supervisor/")',
        },
    }
    assert run.named("sup-source").inputs["name"].startswith("supervisor/trainstack_supervisor-")
    # The build reads Cloud Functions' own copy of the zip, in a bucket named by project
    # number and region: a project grant held to those buckets by a condition.
    assert run.named("sup-build-copies").inputs == {
        "project": "my-project",
        "role": "roles/storage.objectViewer",
        "member": BUILD_MEMBER,
        "condition": {
            "title": "only Cloud Functions source copies",
            "description": "Read the function sources Cloud Functions copies for its builds.",
            "expression": 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")',
        },
    }
    # The build waits for its grants.
    function = run.named("sup-function")
    for grant in ("sup-build-logs", "sup-build-images", "sup-build-source", "sup-build-copies"):
        assert run.named(grant).urn in function.dependencies


@pytest.mark.parametrize(
    ("region", "problem"),
    [
        ("us-central2", "'us-central2' is not a region listed"),
        ("us-west4", "'us-west4' is not a region listed"),
    ],
)
def test_the_function_goes_only_where_both_services_are_listed(region: str, problem: str) -> None:
    with pytest.raises(ArgsError, match=rf"^RunSupervisor.region: {problem} for both Cloud Run "):
        _run(region=region)


def test_a_queued_resource_is_managed_with_the_node_permissions() -> None:
    # Cloud TPU has no tpu.queuedResources.* permission: a role naming one is refused.
    role = _run(kind="queued", resource_name=QUEUED).named("sup-role").inputs
    assert (
        role["permissions"]
        == list(PERMISSIONS["queued"])
        == [
            "tpu.nodes.create",
            "tpu.nodes.delete",
            "tpu.nodes.get",
        ]
    )


def test_the_gke_grant_holds_for_the_stacks_cluster_only() -> None:
    run = _run(kind="node_pool", resource_name=POOL, body={}, run=RUN)
    cluster = "my-project/{}/us-central1-a/clusters/exp-42-gke"
    zonal, regional = (
        f"projects/{cluster.format('zones')}",
        f"projects/{cluster.format('locations')}",
    )
    assert run.named("sup-grant").inputs == {
        "project": "my-project",
        "role": f"projects/my-project/roles/trainstackSupervisor_exp_42_{UID}",
        "member": MEMBER,
        "condition": {
            "title": "only cluster exp-42-gke",
            "description": "The supervisor resizes this cluster's GPU node pool and no other.",
            "expression": (
                f'resource.name == "{regional}" || resource.name == "{zonal}" || '
                f'resource.name.startsWith("{regional}/nodePools/") || '
                f'resource.name.startsWith("{zonal}/nodePools/")'
            ),
        },
    }
    assert run.named("sup-read-role").inputs == {
        "project": "my-project",
        "roleId": f"trainstackSupervisorRead_exp_42_{UID}",
        "title": "trainstack run supervisor reads (exp-42)",
        "description": "Read the instance groups of one stack's GKE node pool.",
        # `.list`: which of the pool's VMs run (`listManagedInstances`). A fixed-size pool
        # stops by `nodePools.setSize`: no `.update`, which would create, resize or delete
        # the VMs of every group of the project.
        "permissions": [
            "compute.instanceGroupManagers.get",
            "compute.instanceGroupManagers.list",
        ],
    }
    assert run.named("sup-read").inputs == {
        "project": "my-project",
        "role": f"projects/my-project/roles/trainstackSupervisorRead_exp_42_{UID}",
        "member": MEMBER,
    }


@pytest.mark.parametrize("kind", ["node_pool", "node_pools"])
def test_an_autoscaled_pools_supervisor_may_also_delete_vms_through_its_groups(kind: str) -> None:
    # A flex-start pool: the cluster autoscaler leaves its nodes that still run pods, so the
    # supervisor deletes them through the groups (`deleteInstances`: `.update`).
    name = POOL if kind == "node_pool" else POOL.rsplit("/nodePools/", 1)[0]
    pools = {"node_pools": ["tpu-0"]} if kind == "node_pools" else {}
    run = _run(kind=kind, resource_name=name, body={}, run=RUN, autoscaled=True, **pools)
    role = run.named("sup-read-role").inputs
    assert (role["description"], role["permissions"]) == (
        "Read the instance groups of one stack's GKE node pool and delete their VMs.",
        [
            "compute.instanceGroupManagers.get",
            "compute.instanceGroupManagers.list",
            "compute.instanceGroupManagers.update",
        ],
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"kind": "mig", "resource_name": MIG, "instances": VMS, "autoscaled": True},
            "RunSupervisor.autoscaled: True is not allowed for kind 'mig'; valid: true or "
            "false for node_pool and node_pools, unset otherwise",
        ),
        (
            {"kind": "node_pool", "resource_name": POOL, "autoscaled": "yes"},
            "RunSupervisor.autoscaled: 'yes' is not a boolean; valid: true, false",
        ),
    ],
)
def test_autoscaled_is_for_gke_pools_only(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgsError) as raised:
        _run(body={}, run=RUN, **overrides)
    assert str(raised.value) == message


def test_the_records_grant_names_the_folder_the_run_records_are_in() -> None:
    # `run_record_uri` of a checkpoint_url with a path puts the records under it.
    folder = {
        k: v.replace("gs://b-ckpt/", "gs://b-ckpt/team/exp/")
        for k, v in RUN.items()
        if k.endswith("_uri")
    }
    run = _run(kind="mig", resource_name=MIG, instances=VMS, body={}, run={**RUN, **folder})
    assert run.named("sup-records").inputs["condition"]["expression"] == (
        'resource.name.startsWith("projects/_/buckets/b-ckpt/objects/team/exp/trainstack-run-")'
    )


@pytest.mark.parametrize(
    "end_uri",
    [
        "gs://other-bucket/trainstack-run-0123456789abcdef.ended",
        "gs://b-ckpt/team/exp/checkpoint.ended",
    ],
)
def test_run_records_outside_the_checkpoint_bucket_are_refused(end_uri: str) -> None:
    # The grant could never reach them: every read a 403, so neither the run's end nor its
    # heartbeats would ever be seen.
    with pytest.raises(ArgsError) as raised:
        _run(kind="mig", resource_name=MIG, instances=VMS, body={}, run={**RUN, "end_uri": end_uri})
    assert str(raised.value) == (
        f"RunSupervisor.run.end_uri: {end_uri!r} is not a run record in checkpoint_bucket "
        "'b-ckpt'; valid: gs://b-ckpt/[FOLDER/]trainstack-run-KEY.ended (the run record of "
        "the training's checkpoint_url, in that bucket)"
    )


def test_function_and_schedule() -> None:
    run = _run()
    source = run.named("sup-source").inputs
    sha = source["metadata"]["sha256"]
    assert source["name"] == f"supervisor/trainstack_supervisor-{sha[:16]}.zip"
    assert source["bucket"] == "b-staging"
    assert source["contentType"] == "application/zip"
    function = run.named("sup-function").inputs
    assert function["name"] == "exp-42-supervisor"
    assert function["location"] == "us-central1"
    assert function["buildConfig"] == {
        "runtime": "python312",
        "entryPoint": "supervise",
        "serviceAccount": f"projects/my-project/serviceAccounts/{BUILD_EMAIL}",
        "source": {"storageSource": {"bucket": "b-staging", "object": source["name"]}},
    }
    assert function["serviceConfig"] == {
        "serviceAccountEmail": EMAIL,
        "maxInstanceCount": 1,
        "maxInstanceRequestConcurrency": 1,
        "availableMemory": "256M",
        "timeoutSeconds": 120,
        "allTrafficOnLatestRevision": True,
    }
    assert function["labels"]["component"] == "run-supervisor"
    job = run.named("sup-schedule").inputs
    assert job["schedule"] == "*/2 * * * *"
    assert job["timeZone"] == "Etc/UTC"
    assert job["retryConfig"] == {"retryCount": 0}
    assert job["httpTarget"] == {
        "uri": URL,
        "httpMethod": "POST",
        "oidcToken": {"serviceAccountEmail": EMAIL, "audience": URL},
    }


def test_the_uploaded_zip_carries_the_body_and_state_folder() -> None:
    source = _run().named("sup-source").inputs
    with zipfile.ZipFile(REPO_ROOT / source["source"]["fileAsset"]) as bundle:
        config = json.loads(bundle.read("config.json"))
        assert (
            bundle.read("main.py")
            == (REPO_ROOT / "components" / "supervisor" / "main.py").read_bytes()
        )
    assert config == {
        "kind": "node",
        "name": NODE,
        "body": BODY,
        "recover": True,
        "run": {},
        "state_uri": f"gs://{STATE}",
    }


def test_the_bundle_is_reproducible_and_named_by_its_digest(tmp_path: Path) -> None:
    config = supervisor_config("node", NODE, BODY, "b-state")
    assert source_zip(config) == source_zip(json.loads(json.dumps(config)))
    first = build_source(config, tmp_path)
    again = build_source(config, tmp_path)
    assert first == again
    assert first.path.name == f"trainstack_supervisor-{first.sha256[:16]}.zip"
    other = build_source({**config, "body": {**BODY, "description": "x"}}, tmp_path)
    assert other.sha256 != first.sha256


def test_bad_input_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"^resource_name: 'projects/p/nodes/x' is not a TPU"):
        supervisor_config("node", "projects/p/nodes/x", BODY, "b")
    with pytest.raises(ValueError, match="is not a TPU queued name"):
        supervisor_config("queued", NODE, BODY, "b")
    with pytest.raises(
        ValueError, match=r"^RunSupervisor.schedule: 'hourly' is not a cron schedule"
    ):
        _run(schedule="hourly")
    with pytest.raises(
        ValueError,
        match=r"^RunSupervisor.kind: 'gke' is not allowed; valid: node, queued, mig, node_pool, node_pools$",
    ):
        _run(kind="gke")
    with pytest.raises(ValueError, match=r"^resource_name: 'x' is not a mig name; valid: proj"):
        supervisor_config("mig", "x", None, "b", instances=VMS)
    with pytest.raises(ValueError, match=r"^recover: only a TPU slice with its body is recre"):
        supervisor_config("mig", MIG, None, "b", recover=True, instances=VMS)
    with pytest.raises(ValueError, match=r"^run.max_total: unknown key; valid: alive_uri, end_"):
        supervisor_config("mig", MIG, None, "b", run={"max_total": 5}, instances=VMS)
    # Heartbeats are read one per node: the count goes with them.
    alive = {"alive_uri": RUN["alive_uri"]}
    for count in (None, 0, True, 2.0):
        with pytest.raises(ValueError) as raised:
            supervisor_config(
                "mig", MIG, None, "b", run={**alive, "node_count": count}, instances=VMS
            )
        assert str(raised.value) == (
            f"run.node_count: {count!r} is not allowed; valid: the number of nodes (1 or more), "
            "each writing its heartbeat under run.alive_uri"
        )
    with pytest.raises(ArgsError, match=r"RunSupervisor.schedul: unknown key"):
        _run(schedul="*/5 * * * *")


@pytest.mark.parametrize(
    ("kind", "instances", "why"),
    [
        (
            "mig",
            None,
            "instances: None names no instance; valid: the group's instance names, each once "
            "(none: the VMs the group lists)",
        ),
        (
            "mig",
            ["exp-42-a100-0", "Exp_1"],
            "instances: 'Exp_1' is not an instance name; valid: the group's instance names, "
            "each once (none: the VMs the group lists)",
        ),
        (
            "mig",
            ["exp-42-a100-0", "exp-42-a100-0"],
            "instances: ['exp-42-a100-0', 'exp-42-a100-0'] names an instance twice; valid: "
            "the group's instance names, each once (none: the VMs the group lists)",
        ),
        ("node_pool", VMS, "instances: only a mig has instances; kind 'node_pool'"),
    ],
)
def test_a_supervisor_deletes_exactly_the_groups_named_vms(
    kind: str, instances: list[str] | None, why: str
) -> None:
    name = MIG if kind == "mig" else POOL
    with pytest.raises(ValueError) as raised:
        supervisor_config(kind, name, None, "b", instances=instances)
    assert str(raised.value) == why
    overrides: dict[str, Any] = {"kind": kind, "resource_name": name, "body": {}, "run": RUN}
    with pytest.raises(ArgsError) as refused:
        _run(**overrides, **({} if instances is None else {"instances": instances}))
    assert str(refused.value) == f"RunSupervisor.{why}"


def test_spot_node_body_is_checked_against_the_discovery_document() -> None:
    assert spot_node_body(BODY)["schedulingConfig"] == {"spot": True}
    with pytest.raises(ValueError, match="Node body is invalid"):
        spot_node_body({**BODY, "acceleratorConfig": {"kind": "v5"}})


def test_role_id_fits_iam_and_keeps_the_whole_unique_id() -> None:
    assert role_id("exp-42", UID) == f"trainstackSupervisor_exp_42_{UID}"
    long = role_id("x" * 80, UID, "Read")
    assert (len(long), long) == (64, f"trainstackSupervisorRead_{'x' * 17}_{UID}")


def test_a_stack_deployed_again_gets_role_ids_google_has_not_held() -> None:
    # Google holds a deleted role's id for up to 37 days (7 to undelete, then 30 until it
    # is gone), and the provider only undeletes within the 7: a destroyed stack deployed
    # again failed ("You can't create a role_id ... which has been marked for deletion").
    # A re-created account gets a new unique id (iam.v1 ServiceAccount.uniqueId), so new
    # role ids; the grant names the same role.
    again = "104857600000000000002"
    first, second = _run(), _run(uid=again)
    ids = [r.named("sup-role").inputs["roleId"] for r in (first, second)]
    assert ids == [f"trainstackSupervisor_exp_42_{UID}", f"trainstackSupervisor_exp_42_{again}"]
    assert second.named("sup-grant").inputs["role"] == f"projects/my-project/roles/{ids[1]}"


def test_its_state_is_in_a_bucket_of_its_own_deleted_with_it() -> None:
    run = _run(labels={"team": "ml"})
    assert run.named("sup-state").inputs == {
        "project": "my-project",
        "name": STATE,
        "location": "US-CENTRAL1",
        "uniformBucketLevelAccess": True,
        "publicAccessPrevention": "enforced",
        "versioning": {"enabled": False},
        "softDeletePolicy": {"retentionDurationSeconds": 0},
        "forceDestroy": True,
        "labels": {"component": "run-supervisor", "managed-by": "trainstack", "team": "ml"},
    }
    # The function's state and events go there (its config), not beside the checkpoints.
    source = run.named("sup-source").inputs
    with zipfile.ZipFile(REPO_ROOT / source["source"]["fileAsset"]) as bundle:
        assert json.loads(bundle.read("config.json"))["state_uri"] == f"gs://{STATE}"
    function = run.named("sup-function")
    for grant in ("sup-state-admin", "sup-records", "sup-grant", "sup-act-as"):
        assert run.named(grant).urn in function.dependencies


@pytest.mark.parametrize("provisioning", ["spot", "queued"])
def test_the_slice_waits_for_its_supervisor_and_goes_first_on_destroy(provisioning: str) -> None:
    # The slice never runs unsupervised: it depends on the function and its schedule, so
    # `pulumi destroy` deletes it before them. The marker the supervisor recovers under
    # depends on the slice: created after it, deleted before it.
    name, config = load_stack("dev-tpu-v5e", None)
    config = {
        **config,
        "trainstack:tpu": {**config["trainstack:tpu"], "provisioning": provisioning},
    }
    run = run_program(main_program, config=config, stack=name)
    slice_type = {
        "spot": "gcp:tpu/v2Vm:V2Vm",
        "queued": "pulumi-python:dynamic/tpu:QueuedResource",
    }[provisioning]
    [tpu] = [r for r in run.resources if r.type == slice_type]
    services = {r.urn for r in run.resources if r.type == "gcp:projects/service:Service"}
    supervisor = {run.named(f"dev-tpu-v5e-supervisor-{c}").urn for c in ("function", "schedule")}
    assert supervisor <= set(tpu.dependencies)
    assert services <= set(tpu.dependencies)
    for child in ("dev-tpu-v5e-supervisor-function", "dev-tpu-v5e-supervisor-schedule"):
        assert tpu.urn not in run.named(child).dependencies
    marker = run.named("dev-tpu-v5e-supervisor-armed")
    assert marker.inputs == {
        "bucket": "my-ml-project-dev-tpu-v5e-supervisor",
        "name": "armed",
        "source": {"stringAsset": "Pulumi holds the stack's compute: it may be recovered.\n"},
        "contentType": "text/plain",
    }
    assert set(marker.dependencies) == {tpu.urn, run.named("dev-tpu-v5e-supervisor-state").urn}


def test_the_bundle_pins_what_main_imports(tmp_path: Path) -> None:
    bundle = build_source(supervisor_config("node", NODE, BODY, "b-state"), tmp_path)
    with zipfile.ZipFile(bundle.path) as archive:
        assert archive.read("requirements.txt").decode().splitlines() == [
            "functions-framework==3.10.2",
            "google-api-python-client==2.202.0",
            "google-auth==2.63.0",
            "google-auth-httplib2==0.4.4",
            "gcsfs==2026.10.1",
        ]
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in archive.infolist())
    # The dev extra installs the same versions, so tests/components/
    # test_tpu_supervisor_function.py runs main.py with what the function is built with.
    dev = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["dev"]
    assert set(REQUIREMENTS) <= set(dev)
    for requirement in REQUIREMENTS:
        name, version = requirement.split("==")
        assert importlib.metadata.version(name) == version, name


@pytest.mark.parametrize(
    ("kind", "name", "permissions"),
    [
        (
            "mig",
            MIG,
            [
                "compute.instanceGroupManagers.get",
                "compute.instanceGroupManagers.list",
                "compute.instanceGroupManagers.update",
            ],
        ),
        ("node_pool", POOL, ["container.clusters.get", "container.clusters.update"]),
    ],
)
def test_a_gpu_stack_supervisor_may_only_read_and_stop_its_compute(
    kind: str, name: str, permissions: list[str]
) -> None:
    overrides: dict[str, Any] = {"kind": kind, "resource_name": name, "body": {}, "run": RUN}
    named = {"instances": VMS} if kind == "mig" else {}
    run = _run(**overrides, **named)
    assert run.named("sup-role").inputs["permissions"] == permissions
    assert run.named("sup-role").inputs["description"] == "Get and stop one stack's compute."
    # It creates nothing, so it may act as no account.
    assert not [r for r in run.resources if r.name == "sup-act-as"]
    source = run.named("sup-source").inputs
    with zipfile.ZipFile(REPO_ROOT / source["source"]["fileAsset"]) as bundle:
        assert json.loads(bundle.read("config.json")) == {
            "kind": kind,
            "name": name,
            "body": {},
            "recover": False,
            "run": RUN,
            "state_uri": f"gs://{STATE}",
            **named,
        }


def test_an_on_demand_slice_supervisor_only_stops_it() -> None:
    run = _run(recover=False, run=RUN)
    assert run.named("sup-role").inputs["permissions"] == [
        "tpu.nodes.delete",
        "tpu.nodes.get",
    ]
    assert not [r for r in run.resources if r.name == "sup-act-as"]


def test_a_stack_deployed_as_tpu_supervisor_keeps_its_resources() -> None:
    # The component was `trainstack:tpu:TpuSupervisor`: an alias of that type (same name,
    # same parent) maps the old URN to the new one, and the engine derives its children's old
    # URNs from it. Under mocks the SDK collapses the alias to a URN itself.
    def program() -> dict[str, Any]:
        sup = RunSupervisor("sup", _args())  # type: ignore[arg-type]
        return {"aliases": pulumi.Output.all(*sup._aliases)}

    assert TOKEN == "trainstack:supervision:RunSupervisor"
    assert run_program(program).outputs["aliases"] == [
        "urn:pulumi:plan::trainstack::trainstack:tpu:TpuSupervisor::sup"
    ]


def test_the_compute_grant_has_a_neutral_name_and_keeps_its_tpu_one_as_an_alias() -> None:
    # It was `<name>-tpu` on every target (gce and gke too); renamed, the alias maps the old
    # URN (same type, same parent) to the new one, so a deployed stack keeps its grant.
    def program() -> dict[str, Any]:
        sup = RunSupervisor("sup", _args())  # type: ignore[arg-type]
        return {"aliases": pulumi.Output.all(*sup.grants[0]._aliases)}

    run = _run()
    assert run.named("sup-grant").type == "gcp:projects/iAMMember:IAMMember"
    assert not [r for r in run.resources if r.name == "sup-tpu"]
    assert run_program(program).outputs["aliases"] == [
        "urn:pulumi:plan::trainstack::pulumi:pulumi:Stack$trainstack:supervision:RunSupervisor$"
        "gcp:projects/iAMMember:IAMMember::sup-tpu"
    ]

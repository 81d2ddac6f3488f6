"""Every tpu and gpu_cluster stack gets a run supervisor whose bundle names exactly the
objects its compute writes: the end record, heartbeats and stop request under the prefix the
GCE launcher, the GKE pods and the TPU startup script were given, the limits, and the list
price of what it stops (its clock and counts are its own, in its own bucket); its role is
narrow and the policy pack holds it to the stack's own kind of compute; the compute depends
on it."""

from __future__ import annotations

import copy
import json
import re
import zipfile
from typing import Any

import pytest

from tests import REPO_ROOT
from tests.bundled import bundled_plan
from trainstack.components.gpu_startup import NODE_RANK_ATTRIBUTE
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import run_program
from trainstack.infra.plan import build_plan, load_stack
from trainstack.infra.plan_diff import plan_diff
from trainstack.infra.policy import check_resources

P = "my-ml-project"


def _bundle(plan: dict[str, Any]) -> dict[str, Any]:
    (source,) = [
        r["inputs"]["source"]["fileAsset"]
        for r in plan["resources"]
        if r["name"] == f"{plan['stack']}-supervisor-source"
    ]
    with zipfile.ZipFile(REPO_ROOT / source) as bundle:
        config: dict[str, Any] = json.loads(bundle.read("config.json"))
        return config


def _named(plan: dict[str, Any], name: str) -> dict[str, Any]:
    (inputs,) = [r["inputs"] for r in plan["resources"] if r["name"] == name]
    return inputs


def _shell_value(script: str, name: str) -> str:
    (value,) = re.findall(rf"^(?:readonly )?{name}=(.+)$", script, re.MULTILINE)
    return value.strip("'")


def test_the_gce_supervisor_deletes_its_groups_vms_and_reads_the_launchers_records() -> None:
    plan = bundled_plan("prod-a100-gce")
    config = _bundle(plan)
    group = _named(plan, "prod-a100-gce-gpu-group")
    # The VMs its per-instance configs create, by node rank.
    configs = [
        r["inputs"]
        for r in plan["resources"]
        if r["type"] == "gcp:compute/perInstanceConfig:PerInstanceConfig"
    ]
    ranks = {c["name"]: int(c["preservedState"]["metadata"][NODE_RANK_ATTRIBUTE]) for c in configs}
    launcher = _named(plan, "prod-a100-gce-gpu-template")["metadataStartupScript"]
    prefix = _shell_value(launcher, "RUN_RECORD")
    assert prefix.startswith(f"gs://{P}-prod-a100-gce-checkpoints/trainstack-run-")
    assert _shell_value(launcher, "RUN_FINAL_CODES") == "1 2 5"
    assert config == {
        "kind": "mig",
        "name": f"projects/{P}/zones/{group['zone']}/instanceGroupManagers/{group['name']}",
        "body": {},
        "recover": False,
        "run": {
            "end_uri": f"{prefix}.ended",
            "alive_uri": f"{prefix}.alive/",
            "node_count": 4,  # one heartbeat per VM, by node rank
            "stop_uri": f"{prefix}.stop",
            "max_run_seconds": 14400,
            "hourly_usd": 117.55,
        },
        "state_uri": f"gs://{P}-prod-a100-gce-supervisor",
        "instances": sorted(ranks, key=ranks.__getitem__),
    }
    assert config["instances"] == [f"prod-a100-gce-a100-{rank}" for rank in range(4)]


def test_the_gke_supervisor_empties_the_gpu_pool_and_reads_the_pods_records() -> None:
    plan = bundled_plan("dev-a100-gke")
    config = _bundle(plan)
    pool = _named(plan, "dev-a100-gke-gpu-gpu-pool")
    cluster = _named(plan, "dev-a100-gke-gpu-cluster")
    (job,) = [r["inputs"] for r in plan["resources"] if r["type"] == "kubernetes:batch/v1:Job"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    prefix = env["TRAINSTACK_RUN_RECORD"]
    assert prefix.startswith(f"gs://{P}-dev-a100-gke-checkpoints/trainstack-run-")
    assert env["TRAINSTACK_RUN_FINAL_CODES"] == "1 2 5"
    assert config["kind"] == "node_pool"
    assert config["name"] == (
        f"projects/{P}/locations/{pool['location']}/clusters/{cluster['name']}"
        f"/nodePools/{pool['name']}"
    )
    assert config["recover"] is False
    assert config["run"] == {
        "end_uri": f"{prefix}.ended",
        "alive_uri": f"{prefix}.alive/",
        "node_count": 2,  # one heartbeat per pod, by completion index
        "stop_uri": f"{prefix}.stop",
        "max_run_seconds": 14400,
        "hourly_usd": 23.51,
    }


def test_a_limited_spot_slice_supervisor_recovers_and_carries_both_limits() -> None:
    _, stack = load_stack("dev-tpu-v5e", None)
    stack = copy.deepcopy(stack)
    stack["trainstack:limits"] = {"max_run_hours": 2, "max_total_usd": 40}
    plan = build_plan("dev-tpu-v5e", stack)
    config = _bundle(plan)
    (vm,) = [r["inputs"] for r in plan["resources"] if r["type"] == "gcp:tpu/v2Vm:V2Vm"]
    script = vm["metadata"]["startup-script"]
    prefix = _shell_value(script, "TS_RUN_RECORD")
    assert _shell_value(script, "TS_RUN_CLOCK_URI") == f"{prefix}.started"
    assert (config["kind"], config["recover"]) == ("node", True)
    assert config["body"]["metadata"]["startup-script"] == script
    assert config["run"] == {
        "end_uri": f"{prefix}.ended",
        "alive_uri": f"{prefix}.alive/",
        "node_count": 4,  # one heartbeat per host of the v5litepod-16, by worker index
        "stop_uri": f"{prefix}.stop",
        "max_run_seconds": 7200,
        "hourly_usd": 7.68,
        "max_total_usd": 40,
    }


def test_an_on_demand_slice_supervisor_only_stops_it() -> None:
    plan = bundled_plan("prod-tpu-v4-32")
    config = _bundle(plan)
    assert (config["kind"], config["recover"], config["body"]) == ("node", False, {})
    role = _named(plan, "prod-tpu-v4-32-supervisor-role")
    assert role["permissions"] == ["tpu.nodes.delete", "tpu.nodes.get"]
    assert not [r for r in plan["resources"] if r["name"] == "prod-tpu-v4-32-supervisor-act-as"]


@pytest.mark.parametrize(
    ("stack", "extra", "valid"),
    [
        (
            "prod-a100-gce",
            "compute.instances.delete",
            "compute.instanceGroupManagers.get, compute.instanceGroupManagers.list, "
            "compute.instanceGroupManagers.update",
        ),
        (
            "dev-a100-gke",
            "tpu.nodes.delete",
            "compute.instanceGroupManagers.get and .list (no pool is autoscaled: none has its "
            "VMs deleted through its groups), and container.clusters.get and .update under a "
            "condition naming this stack's cluster",
        ),
        # A fixed-size pool stops by nodePools.setSize: `.update` would let the account
        # create, resize or delete the VMs of every group of the project.
        (
            "dev-a100-gke",
            "compute.instanceGroupManagers.update",
            "compute.instanceGroupManagers.get and .list (no pool is autoscaled: none has its "
            "VMs deleted through its groups), and container.clusters.get and .update under a "
            "condition naming this stack's cluster",
        ),
    ],
)
def test_the_policy_holds_a_gpu_supervisor_to_its_own_kind_of_compute(
    stack: str, extra: str, valid: str
) -> None:
    plan = bundled_plan(stack)
    assert check_resources(stack, plan["resources"]).violations == []
    role = _named(plan, f"{stack}-supervisor-role")
    role["permissions"] = [*role["permissions"], extra]
    # Before the first deploy the role's id (it carries the account's unique id) and so the
    # grant's role are not known: the stack's custom roles are judged as the grant's.
    assert role["roleId"] == "(known after deploy)"
    [violation] = check_resources(stack, plan["resources"]).violations
    assert (violation.rule, violation.resource_name) == (
        "supervisor-least-privilege",
        f"{stack}-supervisor-role",
    )
    assert violation.message == (
        f"custom role {stack}-supervisor-role (its id known after deploy) of the supervisor "
        f"holds {extra}; valid: {valid}"
    )


def test_the_policy_refuses_the_gke_supervisors_grant_without_its_cluster_condition() -> None:
    plan = bundled_plan("dev-a100-gke")
    grant = _named(plan, "dev-a100-gke-supervisor-grant")
    assert grant["condition"]["title"] == "only cluster dev-a100-gke-a100"
    del grant["condition"]
    [violation] = check_resources("dev-a100-gke", plan["resources"]).violations
    # Before the first deploy the grant's role is not known: the role holding
    # container.clusters.* is the one without a conditioned grant.
    assert (violation.rule, violation.resource_name, violation.message) == (
        "supervisor-least-privilege",
        "dev-a100-gke-supervisor-role",
        "custom role dev-a100-gke-supervisor-role (its id known after deploy) holds "
        "container.clusters.*, and no grant to the supervisor left carries a condition naming "
        "this stack's cluster; valid: its grant under a condition on resource.name naming "
        "this stack's cluster",
    )


@pytest.mark.parametrize("stack", ["prod-a100-gce", "dev-a100-gke", "dev-tpu-v5e"])
def test_the_compute_waits_for_its_supervisor(stack: str) -> None:
    # Issue 29 item 3: the supervisor was registered after the compute, so the GPUs or the
    # slice came up unsupervised (and stayed so when its deploy failed). Now every
    # resource that bills depends on the function and its schedule.
    run = run_program(main_program, config=load_stack(stack, None)[1], stack=stack)
    ready = {run.named(f"{stack}-supervisor-{c}").urn for c in ("function", "schedule")}
    billing = {
        "prod-a100-gce": ["prod-a100-gce-gpu-group"],
        "dev-a100-gke": ["dev-a100-gke-gpu-gpu-pool", "dev-a100-gke-gpu-training-job"],
        "dev-tpu-v5e": ["dev-tpu-v5e-tpu-vm"],
    }[stack]
    for name in billing:
        assert ready <= set(run.named(name).dependencies), name


def test_plan_diff_shows_a_cap_set_changed_or_removed() -> None:
    base = bundled_plan("prod-a100-gce")
    _, stack = load_stack("prod-a100-gce", None)
    stack = copy.deepcopy(stack)
    stack["trainstack:limits"] = {"max_total_usd": 2500, "max_run_hours": 24}
    head = build_plan("prod-a100-gce", stack)
    text = plan_diff(base, head)
    assert (
        "| total | base | head | delta |\n|---|---|---|---|\n"
        "| limits.max_total_usd | none | $2,500.00 | |\n"
        "| limits.max_run_hours | 4 h | 24 h | |\n"
    ) in text
    back = plan_diff(head, base)
    assert "| limits.max_total_usd | $2,500.00 | none | |\n" in back


BUILD = "serviceAccount:{}-sup-build@my-ml-project.iam.gserviceaccount.com"


@pytest.mark.parametrize(
    ("stack", "region", "note"),
    [
        # us-central2 (TPU v4) has no Cloud Run functions; Cloud Scheduler in us-west4 is
        # not confirmed by the stored locations page: both fall back to us-central1.
        (
            "prod-tpu-v4-32",
            "us-central1",
            "run supervisor: runs in us-central1, not the stack's us-central2, where Cloud "
            "Run functions and Cloud Scheduler are not both listed (the APIs it calls are "
            "global); supervisor_usd_per_month is at Cloud Run Tier 1 prices and leaves out "
            "Artifact Registry storage of its built images and Cloud Build minutes",
        ),
        (
            "dev-tpu-v5e",
            "us-central1",
            "run supervisor: runs in us-central1, not the stack's us-west4, where Cloud Run "
            "functions and Cloud Scheduler are not both listed (the APIs it calls are "
            "global); supervisor_usd_per_month is at Cloud Run Tier 1 prices and leaves out "
            "Artifact Registry storage of its built images and Cloud Build minutes",
        ),
        (
            "prod-a100-gce",
            "us-central1",
            "run supervisor: runs in us-central1; supervisor_usd_per_month is at Cloud Run "
            "Tier 1 prices and leaves out Artifact Registry storage of its built images and "
            "Cloud Build minutes",
        ),
    ],
)
def test_the_supervisor_runs_where_functions_and_scheduler_are_listed(
    stack: str, region: str, note: str
) -> None:
    plan = bundled_plan(stack)
    assert _named(plan, f"{stack}-supervisor-function")["location"] == region
    assert _named(plan, f"{stack}-supervisor-invoker")["location"] == region
    job = _named(plan, f"{stack}-supervisor-schedule")
    assert job["region"] == region
    url = f"https://{region}-{P}.cloudfunctions.net/{stack}-supervisor"
    assert (job["httpTarget"]["uri"], job["httpTarget"]["oidcToken"]["audience"]) == (url, url)
    assert [n for n in plan["notes"] if n.startswith("run supervisor:")] == [note]


@pytest.mark.parametrize(
    "stack", ["prod-tpu-v4-32", "dev-tpu-v5e", "prod-a100-gce", "dev-a100-gke"]
)
def test_the_function_is_built_by_its_own_account_with_only_googles_roles(stack: str) -> None:
    plan = bundled_plan(stack)
    build = BUILD.format(stack)
    function = _named(plan, f"{stack}-supervisor-function")
    assert function["buildConfig"]["serviceAccount"] == (
        f"projects/{P}/serviceAccounts/{build.removeprefix('serviceAccount:')}"
    )
    grants = sorted(
        (r["type"], r["inputs"]["role"], r["inputs"].get("bucket", r["inputs"].get("project")))
        for r in plan["resources"]
        if r["inputs"].get("member") == build
    )
    assert grants == [
        ("gcp:projects/iAMMember:IAMMember", "roles/artifactregistry.writer", P),
        ("gcp:projects/iAMMember:IAMMember", "roles/logging.logWriter", P),
        # Under the condition on Cloud Functions' source copies (gcf-v2-sources-*).
        ("gcp:projects/iAMMember:IAMMember", "roles/storage.objectViewer", P),
        (
            "gcp:storage/bucketIAMMember:BucketIAMMember",
            "roles/storage.objectViewer",
            f"{P}-{stack}-staging",
        ),
    ]
    assert check_resources(stack, plan["resources"]).violations == []


COPIES = 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")'


def _build_violations(plan: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (v.resource_name, v.message)
        for v in check_resources(plan["stack"], plan["resources"]).violations
        if v.rule == "supervisor-least-privilege"
    ]


def test_the_policy_refuses_a_wider_grant_to_the_build_account() -> None:
    plan = bundled_plan("dev-tpu-v5e")
    build = BUILD.format("dev-tpu-v5e")
    staging = f"{P}-dev-tpu-v5e-staging"
    source = _named(plan, "dev-tpu-v5e-supervisor-build-source")
    source["role"] = "roles/storage.objectAdmin"
    plan["resources"].append(
        {
            "type": "gcp:projects/iAMMember:IAMMember",
            "name": "extra",
            "parent": None,
            "inputs": {"project": P, "role": "roles/cloudbuild.builds.builder", "member": build},
        }
    )
    assert _build_violations(plan) == [
        (
            "dev-tpu-v5e-supervisor-build-source",
            "grants the supervisor's build account roles/storage.objectAdmin on bucket "
            f"{staging}; valid: roles/logging.logWriter and roles/artifactregistry.writer on "
            f"the project, roles/storage.objectViewer on the function's source bucket {staging} "
            f"and on the project under the condition {COPIES}",
        ),
        (
            "extra",
            "grants the supervisor's build account roles/cloudbuild.builds.builder on "
            "gcp:projects/iAMMember:IAMMember; valid: roles/logging.logWriter and "
            "roles/artifactregistry.writer on the project, roles/storage.objectViewer on the "
            f"function's source bucket {staging} and on the project under the condition "
            f"{COPIES}",
        ),
        (
            "dev-tpu-v5e-supervisor-function",
            f"the supervisor's build account ({build}) lacks roles/storage.objectViewer on "
            f"bucket {staging}, which the build needs",
        ),
    ]


def test_the_policy_refuses_the_build_accounts_read_of_another_bucket() -> None:
    plan = bundled_plan("prod-tpu-v4-32")
    staging = f"{P}-prod-tpu-v4-32-staging"
    _named(plan, "prod-tpu-v4-32-supervisor-build-source")["bucket"] = f"{P}-prod-tpu-v4-32-data"
    assert _build_violations(plan) == [
        (
            "prod-tpu-v4-32-supervisor-build-source",
            "grants the supervisor's build account roles/storage.objectViewer on bucket "
            f"{P}-prod-tpu-v4-32-data; valid: only the function's source bucket {staging}",
        ),
        (
            "prod-tpu-v4-32-supervisor-function",
            f"the supervisor's build account ({BUILD.format('prod-tpu-v4-32')}) lacks "
            f"roles/storage.objectViewer on bucket {staging}, which the build needs",
        ),
    ]


TAIL = (
    "its grant on the checkpoint bucket holds for the run records (trainstack-run-*) only, and "
    "it alone writes its state bucket. Run each stack in a project of its own to keep the "
    "supervisor to this stack's compute. "
)
# iam.v1 roles.delete: "A deleted custom role still counts toward the custom role limit until
# it is permanently deleted" (7 days later); 300 custom roles in a project (IAM quotas page).
ONE_ROLE = (
    "Its custom role, once deleted with the stack, still counts toward the project's limit of "
    "300 custom roles for 7 days after, and each deploy after a destroy makes new ones"
)
TWO_ROLES = (
    "Its 2 custom roles, once deleted with the stack, still count toward the project's limit "
    "of 300 custom roles for 7 days after, and each deploy after a destroy makes new ones"
)
TPU_CONDITIONS = (
    "Cloud TPU is not among the services whose resource names IAM conditions can use, so that "
    "grant cannot be held to the stack's slice; "
)


@pytest.mark.parametrize(
    ("stack", "reach"),
    [
        (
            "prod-a100-gce",
            "read any managed instance group in project my-ml-project and create, resize or "
            "delete its VMs: whether IAM conditions can name an instance group manager is unverified, so that "
            "grant is project-wide (a name condition Compute Engine did not evaluate would never "
            "grant, and the supervisor could not stop the group); ",
        ),
        (
            "dev-a100-gke",
            # A fixed-size pool: its groups are only read (no `.update`).
            "read any managed instance group in project my-ml-project: its resize grant is held "
            "to the stack's cluster by an IAM condition on the cluster's name, which GKE "
            "evaluating for node-pool calls is unverified: if it does not, the grant never "
            "applies and the supervisor cannot stop the pool (each check records a 403); ",
        ),
        (
            "dev-tpu-v5e",
            "get, delete and create any TPU node in project my-ml-project (tpu.nodes.*): "
            + TPU_CONDITIONS,
        ),
        (
            "prod-tpu-v4-32",
            "get and delete any TPU node in project my-ml-project (tpu.nodes.*): " + TPU_CONDITIONS,
        ),
    ],
)
def test_the_plan_says_which_iam_conditions_on_the_compute_are_unverified(
    stack: str, reach: str
) -> None:
    # The audit's M5: it said instance group managers honour no names in conditions, which no
    # Google page read here states, and that the GKE grant holds for the cluster, which is
    # inferred (`catalog.supervisor_iam.CONDITIONS_SOURCE`).
    [note] = [n for n in bundled_plan(stack)["notes"] if n.startswith("run supervisor reach:")]
    roles = TWO_ROLES if stack == "dev-a100-gke" else ONE_ROLE
    assert note == f"run supervisor reach: its account can {reach}{TAIL}{roles}"


@pytest.mark.parametrize("flex_start", [False, True])
def test_only_a_flex_start_gke_pools_supervisor_may_update_instance_groups(
    flex_start: bool,
) -> None:
    # compute.instanceGroupManagers.update lets the account create, resize or delete the VMs
    # of every group of the project ("Authorization requires the following IAM permission on
    # the specified resource instanceGroupManager: compute.instanceGroupManagers.update",
    # the REST pages of resize and createInstances): only a flex-start pool's stop deletes
    # VMs through its groups; a fixed pool's is nodePools.setSize.
    name, config = load_stack("dev-a100-gke", None)
    gpu = {**config["trainstack:gpu_cluster"], "flex_start": flex_start, "spot": False}
    config["trainstack:gpu_cluster"] = gpu
    plan = build_plan(name, config)
    read = ["compute.instanceGroupManagers.get", "compute.instanceGroupManagers.list"]
    update = ["compute.instanceGroupManagers.update"] if flex_start else []
    assert _named(plan, f"{name}-supervisor-read-role")["permissions"] == read + update
    assert check_resources(name, plan["resources"]).violations == []
    [note] = [n for n in plan["notes"] if n.startswith("run supervisor reach:")]
    reach = " and create, resize or delete its VMs" if flex_start else ""
    assert note == (
        f"run supervisor reach: its account can read any managed instance group in project "
        f"my-ml-project{reach}: its resize grant is held to the stack's cluster by an IAM "
        "condition on the cluster's name, which GKE evaluating for node-pool calls is "
        "unverified: if it does not, the grant never applies and the supervisor cannot stop "
        f"the pool (each check records a 403); {TAIL}{TWO_ROLES}"
    )


@pytest.mark.parametrize("stack", ["prod-a100-gce", "dev-a100-gke", "dev-tpu-v5e"])
def test_a_stacks_records_grant_names_where_its_nodes_write_the_run_records(stack: str) -> None:
    # The records grant is built from the run's end record (`records_folder`): a stack's
    # checkpoint_url is its bucket's root, so the records and the grant are there.
    plan = bundled_plan(stack)
    end_uri = _bundle(plan)["run"]["end_uri"]
    bucket = f"my-ml-project-{stack}-checkpoints"
    assert re.fullmatch(rf"gs://{bucket}/trainstack-run-[0-9a-f]{{16}}\.ended", end_uri)
    assert _named(plan, f"{stack}-supervisor-records")["condition"]["expression"] == (
        f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/trainstack-run-")'
    )

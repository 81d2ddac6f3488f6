"""`trainstack plan-diff` says which changes replace a resource, deleting first or not, and
what a relaunched run starts from; and the smaller output rules (money signs, named list
entries, the quota delta column, a removed stack's totals)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.bundled import bundled_plan
from trainstack.components.catalog.replace_on_change import (
    GCP_DOCSTRING_REPLACES,
    GCP_TYPES,
    KUBERNETES_REPLACES,
    derive_docstring_replaces,
)
from trainstack.infra.plan_diff import plan_diff
from trainstack.infra.plan_replace import Verdict, classify

PLANS = Path(__file__).resolve().parents[1] / "plans"


def _pinned(stack: str) -> dict[str, Any]:
    return dict(json.loads((PLANS / f"{stack}.json").read_text()))


def _resource(plan: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(r for r in plan["resources"] if r["type"] == type_)


QUEUED_KINDS = {
    "kubernetes:core/v1:PodTemplate",
    "kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest",
}


def _types(prefix: str) -> set[str]:
    return {
        r["type"]
        for path in PLANS.glob("*.json")
        for r in json.loads(path.read_text())["resources"]
        if r["type"].startswith(prefix)
    }


def test_replace_table_is_what_the_installed_pulumi_gcp_docs_say() -> None:
    assert derive_docstring_replaces(GCP_TYPES) == GCP_DOCSTRING_REPLACES


def test_every_pinned_pulumi_gcp_and_kubernetes_type_is_listed() -> None:
    # A new type must be added to GCP_TYPES (and the table re-derived) or to the Kubernetes
    # table, else its changes all read "change (may replace)".
    assert _types("gcp:") == set(GCP_TYPES)
    # No bundled stack is a multi-node GKE flex-start cluster, the one that registers a
    # queued pool's PodTemplate and ProvisioningRequest (components/a100_cluster/gke_queued.py).
    assert _types("kubernetes:") | QUEUED_KINDS == set(KUBERNETES_REPLACES)


def test_vertex_job_change_is_a_replace_that_resumes_from_the_job_checkpoints() -> None:
    base = _pinned("prod-vertex-rs")
    head = copy.deepcopy(base)
    spec = _resource(head, "pulumi-python:dynamic/vertex:CustomJob")["inputs"]["body"]["jobSpec"]
    env = spec["workerPoolSpecs"][0]["containerSpec"]["env"]
    env.insert(0, {"name": "A", "value": "1"})
    env[1]["value"] = "WARN"
    head["summary"]["hourly_usd"] = base["summary"]["hourly_usd"] - 71.5
    assert plan_diff(base, head) == (
        "## trainstack plan diff\n\n"
        "### Stack `prod-vertex-rs`: 0 to add, 0 to change, 1 to replace, 0 to delete\n\n"
        "| total | base | head | delta |\n|---|---|---|---|\n"
        "| hourly_usd | $143.65 | $72.15 | -$71.50 |\n\n"
        "- **replace** `prod-vertex-rs-job-job` (pulumi-python:dynamic/vertex:CustomJob): "
        "`body` changed, which forces a new resource (its provider's diff, "
        "components/_vertex_provider.py); deletes the old one first\n"
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-prod-vertex-rs-checkpoints/checkpoints/prod-vertex-rs`**\n"
        # Entries named by `name`: the inserted variable does not shift NCCL_DEBUG.
        "  - `body.jobSpec.workerPoolSpecs[0].containerSpec.env[A].name`: `null` -> `A`\n"
        "  - `body.jobSpec.workerPoolSpecs[0].containerSpec.env[A].value`: `null` -> `1`\n"
        "  - `body.jobSpec.workerPoolSpecs[0].containerSpec.env[NCCL_DEBUG].value`: "
        "`INFO` -> `WARN`\n"
    )


def test_tuning_job_replace_names_the_per_trial_checkpoint_folder() -> None:
    base = _pinned("dev-vertex-hpt")
    head = copy.deepcopy(base)
    job = _resource(head, "pulumi-python:dynamic/vertex:HyperparameterTuningJob")
    job["inputs"]["body"]["maxTrialCount"] = 16.0
    assert plan_diff(base, head).splitlines()[4:] == [
        "- **replace** `dev-vertex-hpt-job-job` "
        "(pulumi-python:dynamic/vertex:HyperparameterTuningJob): `body` changed, which forces "
        "a new resource (its provider's diff, components/_vertex_provider.py); deletes the old "
        "one first",
        "  - **relaunches tuning; each trial resumes from "
        "`gs://my-ml-project-dev-vertex-hpt-checkpoints/<trial id>/checkpoints/dev-vertex-hpt"
        "-<settings>` only what the old job's trial of the same id wrote under the same "
        "settings**",
        "  - `body.maxTrialCount`: `8` -> `16`",
    ]


@pytest.mark.parametrize(
    ("change", "lines"),
    [
        (
            {"trainer": {"learning_rate": 0.001}},
            [
                "### Stack `local`: 0 to add, 0 to change, 1 to replace, 0 to delete",
                "- **replace** `local-job-run` (pulumi-python:dynamic/local:TrainingRun): "
                "`trainer` changed, which forces a new resource (its provider's diff, "
                "components/_local_provider.py); deletes the old one first",
                # A fingerprinted setting: the trainer refuses the folder's checkpoints.
                "  - **relaunches training, but the new run refuses the checkpoints in "
                "`.trainstack/local/local/checkpoints/local` (exit 2): learning_rate 0.003 -> 0.001 "
                "changed; set a new `trainer.run_name` (a new folder) or delete "
                "`.trainstack/local/local/checkpoints/local` to start fresh**",
                "  - `trainer.learning_rate`: `0.003` -> `0.001`",
            ],
        ),
        (
            {"trainer": {"steps": 400.0}},
            [
                "### Stack `local`: 0 to add, 0 to change, 1 to replace, 0 to delete",
                "- **replace** `local-job-run` (pulumi-python:dynamic/local:TrainingRun): "
                "`trainer` changed, which forces a new resource (its provider's diff, "
                "components/_local_provider.py); deletes the old one first",
                "  - **relaunches training; resumes from the newest checkpoint in "
                "`.trainstack/local/local/checkpoints/local`**",
                "  - `trainer.steps`: `300` -> `400`",
            ],
        ),
        (
            {"root": "/tmp/other", "stop_grace_s": 60.0},
            [
                "### Stack `local`: 0 to add, 0 to change, 1 to replace, 0 to delete",
                "- **replace** `local-job-run` (pulumi-python:dynamic/local:TrainingRun): "
                "`root` changed, which forces a new resource (its provider's diff, "
                "components/_local_provider.py); deletes the old one first",
                "  - **relaunches training; starts at step 0 unless "
                "`/tmp/other/checkpoints/local` already holds a checkpoint (the old run's are "
                "in `.trainstack/local/local/checkpoints/local`)**",
                "  - `root`: `.trainstack/local/local` -> `/tmp/other`",
                "  - `stop_grace_s`: `45` -> `60`",
            ],
        ),
        (
            {"stop_grace_s": 60.0},
            [
                "### Stack `local`: 0 to add, 1 to change, 0 to replace, 0 to delete",
                "- **change** `local-job-run` (pulumi-python:dynamic/local:TrainingRun): "
                "updated in place (its provider's diff, components/_local_provider.py)",
                "  - `stop_grace_s`: `45` -> `60`",
            ],
        ),
    ],
)
def test_local_run_verdict_comes_from_its_provider(
    change: dict[str, Any], lines: list[str]
) -> None:
    base = _pinned("local")
    head = copy.deepcopy(base)
    inputs = _resource(head, "pulumi-python:dynamic/local:TrainingRun")["inputs"]
    for key, value in change.items():
        if isinstance(value, dict):
            inputs[key].update(value)
        else:
            inputs[key] = value
    assert [line for line in plan_diff(base, head).splitlines() if line][1:] == lines


def test_tpu_vm_runtime_change_replaces_and_a_label_change_does_not() -> None:
    base = _pinned("dev-tpu-v5e")
    head = copy.deepcopy(base)
    _resource(head, "gcp:tpu/v2Vm:V2Vm")["inputs"]["runtimeVersion"] = "v2-alpha-tpuv5-lite"
    assert plan_diff(base, head).splitlines()[2:] == [
        "### Stack `dev-tpu-v5e`: 0 to add, 0 to change, 1 to replace, 0 to delete",
        "",
        "- **replace** `dev-tpu-v5e-tpu-vm` (gcp:tpu/v2Vm:V2Vm): `runtimeVersion` changed, "
        "which forces a new resource (the Terraform provider schema); deletes the old one first",
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-dev-tpu-v5e-checkpoints/checkpoints/dev-tpu-v5e`**",
        "  - `runtimeVersion`: `tpu-vm-tf-2.16.0-pod-pjrt` -> `v2-alpha-tpuv5-lite`",
    ]
    head = copy.deepcopy(base)
    _resource(head, "gcp:tpu/v2Vm:V2Vm")["inputs"]["labels"]["team"] = "x"
    assert plan_diff(base, head).splitlines()[4:] == [
        "- **change** `dev-tpu-v5e-tpu-vm` (gcp:tpu/v2Vm:V2Vm): updated in place (the "
        "Terraform provider schema)",
        "  - `labels.team`: `ml` -> `x`",
    ]


def test_a_tpu_vm_startup_script_change_replaces_it_by_its_replace_on_changes() -> None:
    base = bundled_plan("dev-tpu-v5e")
    vm = _resource(base, "gcp:tpu/v2Vm:V2Vm")
    # TpuPodSlice's option: the script runs only at boot, so a new one replaces the node.
    assert vm["replaceOnChanges"] == ["metadata"]
    head = copy.deepcopy(base)
    script = _resource(head, "gcp:tpu/v2Vm:V2Vm")["inputs"]["metadata"]
    script["startup-script"] = script["startup-script"].replace(
        "readonly TS_TRAINER_ATTEMPTS=3", "readonly TS_TRAINER_ATTEMPTS=4"
    )
    # The script embeds the node helper, so its length moves with it: counted, not pinned.
    lines = len(script["startup-script"].splitlines())
    # Before: "updated in place (the Terraform provider schema)", the schema's word for
    # `metadata`, and no relaunch note.
    assert plan_diff(base, head).splitlines()[2:7] == [
        "### Stack `dev-tpu-v5e`: 0 to add, 0 to change, 1 to replace, 0 to delete",
        "",
        "- **replace** `dev-tpu-v5e-tpu-vm` (gcp:tpu/v2Vm:V2Vm): `metadata.startup-script` "
        "changed, which forces a new resource (its replaceOnChanges option); deletes the old "
        "one first",
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-dev-tpu-v5e-checkpoints/checkpoints/dev-tpu-v5e`**",
        f"  - `metadata.startup-script` ({lines} -> {lines} lines):",
    ]


def test_gke_job_template_change_replaces_and_a_service_label_may_replace() -> None:
    base = _pinned("dev-a100-gke")
    head = copy.deepcopy(base)
    job = _resource(head, "kubernetes:batch/v1:Job")["inputs"]
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "pytorch/pytorch:other"
    _resource(head, "kubernetes:core/v1:Service")["inputs"]["metadata"]["labels"]["team"] = "x"
    assert plan_diff(base, head).splitlines()[2:] == [
        "### Stack `dev-a100-gke`: 0 to add, 1 to change, 1 to replace, 0 to delete",
        "",
        "- **replace** `dev-a100-gke-gpu-training-job` (kubernetes:batch/v1:Job): "
        "`spec.template.spec.containers[trainer].image` changed, which forces a new resource "
        "(pulumi-kubernetes' force-new table); deletes the old one first",
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-dev-a100-gke-checkpoints/checkpoints/dev-a100-gke`**",
        "  - `spec.template.spec.containers[trainer].image`: "
        "`pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4` -> `pytorch/pytorch:other`",
        "",
        "- **change (may replace)** `dev-a100-gke-gpu-training-service` "
        "(kubernetes:core/v1:Service): no replace-on-change table covers `metadata.labels.team`",
        "  - `metadata.labels.team`: `ml` -> `x`",
    ]


JOBSET_TYPE = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def test_a_code_change_replaces_the_tpu_jobset_and_relaunches_training() -> None:
    # JobSet's webhook refuses any change to spec.replicatedJobs of a running JobSet
    # (kubernetes-sigs/jobset@v0.12.0 pkg/webhooks/jobset_webhook.go ValidateUpdate), and
    # the package URI in its pods' env moves with every code edit: TpuGkeSlices' option.
    base = bundled_plan("dev-tpu-v6e-gke")
    jobset = _resource(base, JOBSET_TYPE)
    assert (jobset["replaceOnChanges"], jobset["deleteBeforeReplace"]) == (["spec"], True)
    head = copy.deepcopy(base)
    pod = _resource(head, JOBSET_TYPE)["inputs"]["spec"]["replicatedJobs"][0]["template"]
    [env] = [
        e
        for e in pod["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "TRAINSTACK_PACKAGE_URI"
    ]
    old_uri = env["value"]
    env["value"] = old_uri.rsplit("-", 1)[0] + "-0123456789abcdef.tar.gz"
    path = "spec.replicatedJobs[slice].template.spec.template.spec.containers[trainer]"
    assert plan_diff(base, head).splitlines()[2:] == [
        "### Stack `dev-tpu-v6e-gke`: 0 to add, 0 to change, 1 to replace, 0 to delete",
        "",
        f"- **replace** `dev-tpu-v6e-gke-tpu-jobset` ({JOBSET_TYPE}): "
        f"`{path}.env[TRAINSTACK_PACKAGE_URI].value` changed, which forces a new resource "
        "(its replaceOnChanges option); deletes the old one first",
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-dev-tpu-v6e-gke-checkpoints/checkpoints/dev-tpu-v6e-gke`**",
        f"  - `{path}.env[TRAINSTACK_PACKAGE_URI].value`: `{old_uri}` -> `{env['value']}`",
    ]


def test_queued_tpu_verdict_comes_from_its_provider() -> None:
    old = {
        "project": "p",
        "zone": "us-central2-b",
        "queued_resource_id": "q",
        "node_id": "n",
        "body": {"tpu": {}},
        "wait_timeout_s": 3600.0,
        "__provider": "[secret]",
    }
    type_ = "pulumi-python:dynamic/tpu:QueuedResource"
    new = {**old, "body": {"tpu": {"nodeSpec": []}}}
    replace = classify(type_, old, new, ["body.tpu.nodeSpec"])
    assert (replace.action, replace.replaces, replace.delete_first) == ("replace", ("body",), True)
    update = classify(type_, old, {**old, "wait_timeout_s": 60.0}, ["wait_timeout_s"])
    assert (update.action, update.replaces) == ("change", ())


def test_a_removed_stack_shows_the_cost_and_quota_it_frees() -> None:
    assert plan_diff(_pinned("prod-a100-gce"), []) == (
        "## trainstack plan diff\n\n"
        "### Stack `prod-a100-gce` (removed)\n\n"
        "69 resources removed; frees $117.55/hour and the quota below.\n\n"
        "| total | base | head | delta |\n|---|---|---|---|\n"
        "| gpus | 32 | 0 | -32 |\n| machines | 4 | 0 | -4 |\n"
        "| hourly_usd | $117.55 | $0.00 | -$117.55 |\n"
        "| limits.max_run_hours | 4 h | none | |\n\n"
        "| quota | dimensions | base | head | delta |\n|---|---|---|---|---|\n"
        "| A2-CPUS-per-project-region | region=us-central1 | 384 | 0 | -384 |\n"
        "| GPUS-ALL-REGIONS-per-project | global | 32 | 0 | -32 |\n"
        "| NVIDIA-A100-GPUS-per-project-region | region=us-central1 | 32 | 0 | -32 |\n"
    )


def _job_args(plan: dict[str, Any], pool: int) -> list[str]:
    body = _resource(plan, "pulumi-python:dynamic/vertex:CustomJob")["inputs"]["body"]
    args: list[str] = body["jobSpec"]["workerPoolSpecs"][pool]["containerSpec"]["args"]
    return args


def test_a_changed_learning_rate_flag_says_the_vertex_run_refuses_its_checkpoints() -> None:
    base = _pinned("prod-vertex-rs")
    head = copy.deepcopy(base)
    for pool in (0, 1):
        _job_args(head, pool).insert(-1, "--learning_rate=0.002")
    folder = "gs://my-ml-project-prod-vertex-rs-checkpoints/checkpoints/prod-vertex-rs"
    # 0.001 is TrainConfig's default: the base job passes no --learning_rate.
    assert plan_diff(base, head).splitlines()[5] == (
        f"  - **relaunches training, but the new run refuses the checkpoints in `{folder}` "
        "(exit 2): learning_rate 0.001 -> 0.002 changed; set a new `trainer.run_name` (a new "
        f"folder) or delete `{folder}` to start fresh**"
    )


def test_a_tuning_job_with_other_fixed_settings_starts_every_trial_afresh() -> None:
    base = _pinned("dev-vertex-hpt")
    head = copy.deepcopy(base)
    job = _resource(head, "pulumi-python:dynamic/vertex:HyperparameterTuningJob")
    args = job["inputs"]["body"]["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    args[args.index("--model=cnn")] = "--model=mlp"
    assert plan_diff(base, head).splitlines()[5:7] == [
        "  - **relaunches tuning; model cnn -> mlp changed, so every trial starts at step 0 in "
        "a new `gs://my-ml-project-dev-vertex-hpt-checkpoints/<trial id>/checkpoints/"
        "dev-vertex-hpt-<settings>` folder**",
        "  - `body.trialJobSpec.workerPoolSpecs[0].containerSpec.args[4]`: `--model=cnn` -> "
        "`--model=mlp`",
    ]


GCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
GCE_GROUP = "gcp:compute/instanceGroupManager:InstanceGroupManager"
GCE_FOLDER = "gs://my-ml-project-prod-a100-gce-checkpoints/checkpoints/prod-a100-gce"


def test_a_new_gce_template_relaunches_training_through_the_proactive_group() -> None:
    base = _pinned("prod-a100-gce")
    head = copy.deepcopy(base)
    _resource(head, GCE_TEMPLATE)["inputs"]["machineType"] = "a2-highgpu-4g"
    assert plan_diff(base, head).splitlines()[4:] == [
        "- **replace** `prod-a100-gce-gpu-template` (gcp:compute/instanceTemplate:"
        "InstanceTemplate): `machineType` changed, which forces a new resource (the Terraform "
        "provider schema); creates the new one first",
        "  - **group `prod-a100-gce-gpu-group` (PROACTIVE update policy) recreates every VM, "
        f"which relaunches training; resumes from the newest checkpoint in `{GCE_FOLDER}`**",
        "  - `machineType`: `a2-highgpu-8g` -> `a2-highgpu-4g`",
    ]
    # Another global batch in the trainer's command line: the new VMs refuse the folder.
    script = _resource(head, GCE_TEMPLATE)["inputs"]["metadataStartupScript"]
    _resource(head, GCE_TEMPLATE)["inputs"]["metadataStartupScript"] = script.replace(
        "--global_batch_size=1024", "--global_batch_size=512"
    )
    assert plan_diff(base, head).splitlines()[5] == (
        "  - **group `prod-a100-gce-gpu-group` (PROACTIVE update policy) recreates every VM, "
        f"which relaunches training, but the new run refuses the checkpoints in `{GCE_FOLDER}` "
        "(exit 2): global_batch_size 1024 -> 512 changed; set a new `trainer.run_name` (a new "
        f"folder) or delete `{GCE_FOLDER}` to start fresh**"
    )
    # An OPPORTUNISTIC group leaves running VMs alone; its own changes are in place.
    group = _resource(head, GCE_GROUP)["inputs"]
    group["updatePolicy"]["type"] = "OPPORTUNISTIC"
    group["updatePolicy"]["maxUnavailableFixed"] = 2.0
    assert plan_diff(base, head).splitlines()[4:8] == [
        "- **change** `prod-a100-gce-gpu-group` (gcp:compute/instanceGroupManager:"
        "InstanceGroupManager): updated in place (the Terraform provider schema)",
        "  - `updatePolicy.maxUnavailableFixed`: `4` -> `2`",
        "  - `updatePolicy.type`: `PROACTIVE` -> `OPPORTUNISTIC`",
        "",
    ]
    assert "relaunches" not in plan_diff(base, head)


GCE_NODE = "gcp:compute/perInstanceConfig:PerInstanceConfig"


def test_a_replaced_gce_node_or_group_deletes_its_vms_first_and_relaunches_training() -> None:
    base = _pinned("prod-a100-gce")
    head = copy.deepcopy(base)
    [node] = [r for r in head["resources"] if r["name"] == "prod-a100-gce-gpu-1"]
    node["inputs"]["zone"] = "us-central1-a"
    assert plan_diff(base, head).splitlines()[4:] == [
        "- **replace** `prod-a100-gce-gpu-1` (gcp:compute/perInstanceConfig:PerInstanceConfig): "
        "`zone` changed, which forces a new resource (the Terraform provider schema); deletes "
        "the old one first",
        "  - **VM `prod-a100-gce-a100-1` is deleted and created again with its rank, which "
        f"relaunches training; resumes from the newest checkpoint in `{GCE_FOLDER}`**",
        "  - `zone`: `us-central1-c` -> `us-central1-a`",
    ]
    head = copy.deepcopy(base)
    _resource(head, GCE_GROUP)["inputs"]["baseInstanceName"] = "prod-a100-gce-b"
    assert plan_diff(base, head).splitlines()[4:6] == [
        "- **replace** `prod-a100-gce-gpu-group` (gcp:compute/instanceGroupManager:"
        "InstanceGroupManager): `baseInstanceName` changed, which forces a new resource (the "
        "Terraform provider schema); deletes the old one first",
        "  - **every VM goes with the group and its per-instance configs create them again, "
        f"which relaunches training; resumes from the newest checkpoint in `{GCE_FOLDER}`**",
    ]


def test_a_bucket_location_replaces_and_its_labels_and_placement_size_do_not() -> None:
    base = _pinned("dev-tpu-v5e")
    head = copy.deepcopy(base)
    buckets = [r for r in head["resources"] if r["type"] == "gcp:storage/bucket:Bucket"]
    buckets[0]["inputs"]["location"] = "US"
    buckets[1]["inputs"]["labels"]["team"] = "x"
    assert plan_diff(base, head).splitlines()[2:] == [
        "### Stack `dev-tpu-v5e`: 0 to add, 1 to change, 1 to replace, 0 to delete",
        "",
        "- **replace** `dev-tpu-v5e-buckets-checkpoints` (gcp:storage/bucket:Bucket): "
        "`location` changed, which forces a new resource (the Terraform provider schema); "
        "deletes the old one first",
        "  - `location`: `US-WEST4` -> `US`",
        "",
        "- **change** `dev-tpu-v5e-buckets-data` (gcp:storage/bucket:Bucket): updated in "
        "place (the Terraform provider schema)",
        "  - `labels.team`: `ml` -> `x`",
    ]
    policy = "gcp:compute/resourcePolicy:ResourcePolicy"
    old = _resource(_pinned("prod-a100-gce"), policy)["inputs"]
    new = copy.deepcopy(old)
    new["groupPlacementPolicy"]["vmCount"] = 2.0
    assert classify(policy, old, new, ["groupPlacementPolicy.vmCount"]).action == "change"
    assert classify(policy, old, {**old, "region": "us-east1"}, ["region"]) == Verdict(
        "replace", ("region",), True, "the Terraform provider schema"
    )


@pytest.mark.parametrize(
    ("type_", "path", "action"),
    [
        ("gcp:monitoring/dashboard:Dashboard", "dashboardJson", "change"),
        ("gcp:monitoring/alertPolicy:AlertPolicy", "userLabels.team", "change"),
        ("gcp:storage/bucketObject:BucketObject", "metadata.sha", "replace"),
        ("gcp:storage/bucket:Bucket", "retentionPolicy.isLocked", "change (may replace)"),
        ("gcp:compute/router:Router", "description", "change (may replace)"),
    ],
)
def test_schema_tables_mark_read_fields_and_leave_the_rest_may_replace(
    type_: str, path: str, action: str
) -> None:
    assert classify(type_, {"name": "a"}, {"name": "a"}, [path]).action == action


def test_env_arguments_are_named_and_list_indexes_sort_as_numbers() -> None:
    base = _pinned("prod-vertex-rs")
    _job_args(base, 0)[4:4] = ["--env=FOO=1", "--env=ZED=z"]
    head = copy.deepcopy(base)
    args = _job_args(head, 0)
    args[4], args[7], args[11] = "--env=FOO=2", "--steps=100", "--precision=fp32"
    prefix = "  - `body.jobSpec.workerPoolSpecs[0].containerSpec.args"
    assert plan_diff(base, head).splitlines()[6:] == [
        f"{prefix}[7]`: `--steps=20000` -> `--steps=100`",
        f"{prefix}[11]`: `--precision=bf16` -> `--precision=fp32`",
        f"{prefix}[--env=FOO]`: `--env=FOO=1` -> `--env=FOO=2`",
    ]


def test_a_fabric_installer_selector_change_replaces_the_daemonset() -> None:
    # pulumi-kubernetes provider/pkg/provider/diff.go `daemonset`: .spec.selector and its
    # matchLabels force a new DaemonSet.
    base = _pinned("dev-h100-gke")
    head = copy.deepcopy(base)
    installer = next(
        r["inputs"]
        for r in head["resources"]
        if r["name"] == "dev-h100-gke-gpu-nccl-tcpxo-installer"
    )
    installer["spec"]["selector"]["matchLabels"]["k8s-app"] = "other"
    assert plan_diff(base, head).splitlines()[2:5] == [
        "### Stack `dev-h100-gke`: 0 to add, 0 to change, 1 to replace, 0 to delete",
        "",
        "- **replace** `dev-h100-gke-gpu-nccl-tcpxo-installer` (kubernetes:apps/v1:DaemonSet): "
        "`spec.selector.matchLabels.k8s-app` changed, which forces a new resource "
        "(pulumi-kubernetes' force-new table); deletes the old one first",
    ]

"""A program of your own gets from its components' `facts` the totals, quota and notes a stack
plan of the same resources gets (`trainstack plan|quota|plan-diff --program`).

The programs below compose, through the components' public API as a user would, the compute
and the run supervisor of the bundled stacks `dev-tpu-v5e` (a spot v5litepod-16 in
us-west4-a) and `dev-a100-gke` (2 spot a2-highgpu-8g on GKE in us-central1-a, the trainer's
grace 12 s); network, account, buckets and package are plain names, as they would be when a
program brings its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.bundled import bundled_plan
from trainstack.infra.cli import app
from trainstack.infra.config import load_stack_config
from trainstack.infra.plan import build_plan, load_stack
from trainstack.infra.program_plan import build_program_plan

runner = CliRunner()

COMMON = """\
import pulumi

from trainstack.components.quota_guard import QuotaGuard

project = pulumi.Config("gcp").require("project")
# First, as a stack registers it: its facts bring the plan's note on the quota check.
QuotaGuard("acme-quota", {"project": project, "deployment_name": "acme", "needs": []})
shared = {
    "project": project,
    "deployment_name": "acme",
    "network_self_link": "projects/acme-ml/global/networks/acme",
    "subnetwork_self_link": "projects/acme-ml/regions/REGION/subnetworks/acme",
    "service_account_email": "acme-train@acme-ml.iam.gserviceaccount.com",
}
supervised = {
    "project": project,
    "region": "us-central1",
    "deployment_name": "acme",
    "staging_bucket": "acme-staging",
    "checkpoint_bucket": "acme-checkpoints",
}
"""

TPU_MAIN = (
    COMMON.replace("REGION", "us-west4")
    + """
from trainstack.components.run_supervisor import RunSupervisor, slice_target, supervisor_run
from trainstack.components.tpu_pod_slice import TpuPodSlice

args = {
    **shared,
    "zone": "us-west4-a",
    "accelerator_type": "v5litepod-16",
    "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    "provisioning": "spot",
    "network_tags": ["acme-node"],
    "package_uri": "gs://acme-staging/trainer.tar.gz",
    "checkpoint_dir": "gs://acme-checkpoints/checkpoints/run",
    "trainer_args": ["--framework=tensorflow", "--strategy=tpu"],
    "max_run_seconds": 14400,
}
target = slice_target(args)
supervisor = RunSupervisor(
    "acme-supervisor",
    {
        **supervised,
        "kind": target.kind,
        "resource_name": target.resource_name,
        "body": target.body,
        # Its end record, the 4 hosts' heartbeats and the run limit, as a stack's supervisor.
        "run": supervisor_run(target.run_record, 4, max_run_seconds=14400),
        "node_service_account": "projects/acme-ml/serviceAccounts/acme-train@acme-ml.iam.gserviceaccount.com",
    },
)
tpu = TpuPodSlice("acme-tpu", args)
pulumi.export("tpu", tpu.facts)
"""
)

GKE_MAIN = (
    COMMON.replace("REGION", "us-central1")
    + """
from trainstack.components.a100_cluster import A100Cluster, supervised_compute
from trainstack.components.run_supervisor import RunSupervisor, supervisor_run

args = {
    **shared,
    "zone": "us-central1-a",
    "backend": "gke",
    "machine_type": "a2-highgpu-8g",
    "node_count": 2,
    "spot": True,
    "node_tag": "acme-node",
    "training": {
        "package_uri": "gs://acme-staging/trainer.tar.gz",
        "checkpoint_url": "gs://acme-checkpoints",
        "trainer_args": ["--preemption_grace_s=12.0"],
    },
    "max_run_seconds": 14400,
}
target = supervised_compute(args)
supervisor = RunSupervisor(
    "acme-supervisor",
    {
        **supervised,
        "kind": target.kind,
        "resource_name": target.resource_name,
        "run": supervisor_run(target.run_record, target.node_count, max_run_seconds=14400),
    },
)
gpu = A100Cluster("acme-gpu", args)
pulumi.export("gpu", gpu.facts)
"""
)


SPOT_HEAD = (
    "GKE gives the pods of a preempted Spot node 15 s to stop (the rest of the 30 s notice is "
    "for system pods), whatever their terminationGracePeriodSeconds says "
    "(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); "
)
SPOT_FITS = (
    "(12 s) fits: the trainer saves within 12 s and exits before then, if its checkpoint "
    "writes in time (see write_s of its checkpoint_written records)"
)
STACK_SPOT_NOTE = f"gpu_cluster.spot: {SPOT_HEAD}trainer.preemption_grace_s {SPOT_FITS}"
PROGRAM_SPOT_NOTE = (
    f"A100Cluster.spot: {SPOT_HEAD}A100Cluster.training.trainer_args --preemption_grace_s "
    f"{SPOT_FITS}"
)
"""The one note of `dev-a100-gke` a program says in its own words: what sets the grace there
is the cluster's `trainer_args` flag, not the stack's `trainer.preemption_grace_s`."""


def in_program_words(stack_notes: list[str]) -> list[str]:
    """A spot GKE stack's notes as the program of the same cluster says them."""
    assert stack_notes.count(STACK_SPOT_NOTE) == 1
    return [PROGRAM_SPOT_NOTE if n == STACK_SPOT_NOTE else n for n in stack_notes]


def write_program(folder: Path, main: str, stack: str = "dev") -> Path:
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (folder / f"Pulumi.{stack}.yaml").write_text("config:\n  gcp:project: my-ml-project\n")
    (folder / "__main__.py").write_text(main)
    return folder


@pytest.mark.parametrize(("main", "stack"), [(TPU_MAIN, "dev-tpu-v5e"), (GKE_MAIN, "dev-a100-gke")])
def test_a_program_plans_the_totals_quota_and_notes_of_the_same_stack(
    tmp_path: Path, main: str, stack: str
) -> None:
    # The stack's name is the program's, as `pulumi destroy -s NAME` in a note names it.
    plan = build_program_plan(write_program(tmp_path / "acme", main, stack), stack)
    stack_plan = bundled_plan(stack)
    assert plan["summary"] == stack_plan["summary"]
    assert plan["quota"] == stack_plan["quota"]
    # Before: no run limit's note (limits.max_run_hours; the compute's max_run_seconds) and,
    # on GKE, no note of what bills after the supervisor's stop.
    notes = stack_plan["notes"] if stack == "dev-tpu-v5e" else in_program_words(stack_plan["notes"])
    assert plan["notes"] == notes


def test_a_supervisor_with_a_spend_cap_notes_it_as_the_stack_does(tmp_path: Path) -> None:
    name, config = load_stack("dev-a100-gke", None)
    config["trainstack:limits"]["max_total_usd"] = 50
    stack_plan = build_plan(name, config)
    # The run the stack gives its supervisor: the compute's stoppable $/hour, the limits.
    main = GKE_MAIN.replace(
        "max_run_seconds=14400)",
        "hourly_usd=target.hourly_usd, max_run_seconds=14400, max_total_usd=50)",
    )
    assert main != GKE_MAIN
    plan = build_program_plan(write_program(tmp_path / "acme", main, name), name)
    cap = [n for n in stack_plan["notes"] if n.startswith("limits.max_total_usd: ")]
    assert len(cap) == 1
    assert plan["notes"] == in_program_words(stack_plan["notes"])


def test_the_tpu_slice_facts_say_where_its_status_and_logs_are(tmp_path: Path) -> None:
    plan = build_program_plan(write_program(tmp_path / "acme", TPU_MAIN), "dev")
    facts = plan["outputs"]["tpu"]
    assert {k: facts[k] for k in ("trainstack_facts", "component", "target", "status", "logs")} == {
        "trainstack_facts": 1,
        "component": "TpuPodSlice",
        "target": "tpu",
        "status": {
            "project": "my-ml-project",
            "zone": "us-west4-a",
            "node": "acme-tpu",
            "queued_resource": None,
            "provisioning": "spot",
            "checkpoint_dir": "gs://acme-checkpoints/checkpoints/run",
            "own_code": False,
        },
        "logs": {
            "platform": "tpu",
            "scope": 'resource.labels.node_id="acme-tpu"',
            "workers": 4,
            "worker_label": "worker_id",
        },
    }


def test_plan_and_quota_print_the_tables(tmp_path: Path) -> None:
    folder = write_program(tmp_path / "acme", GKE_MAIN)
    result = runner.invoke(app, ["plan", "--program", str(folder), "--stack", "dev"])
    assert result.exit_code == 0, result.output
    assert "est. $/hour" in result.output
    totals = next(line for line in result.output.splitlines() if "23.74" in line)
    assert [cell.strip() for cell in totals.split("│")[2:6]] == ["0", "16", "3", "23.74"]
    quota = runner.invoke(app, ["quota", "--program", str(folder), "--stack", "dev", "--json"])
    assert quota.exit_code == 0, quota.output
    assert json.loads(quota.output) == bundled_plan("dev-a100-gke")["quota"]


def test_plan_diff_of_a_program_has_the_cost_and_quota_deltas(tmp_path: Path) -> None:
    folder = write_program(tmp_path / "acme", GKE_MAIN)
    base = tmp_path / "base.json"
    base.write_text(json.dumps(build_program_plan(folder, "dev")))
    main = folder / "__main__.py"
    main.write_text(main.read_text().replace('"node_count": 2', '"node_count": 3'))
    result = runner.invoke(
        app, ["plan-diff", "--program", str(folder), "--stack", "dev", str(base)]
    )
    assert result.exit_code == 0, result.output
    tables = [line for line in result.output.splitlines() if line.startswith("| ")]
    assert tables == [
        "| total | base | head | delta |",
        "| gpus | 16 | 24 | +8 |",
        "| machines | 3 | 4 | +1 |",
        "| hourly_usd | $23.74 | $35.50 | +$11.76 |",
        "| quota | dimensions | base | head | delta |",
        "| A2-CPUS-per-project-region | region=us-central1 | 192 | 288 | +96 |",
        "| GPUS-ALL-REGIONS-per-project | global | 16 | 24 | +8 |",
        "| PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region | region=us-central1 | 16 | 24 | +8 |",
    ]


def vertex_main(stack: str) -> str:
    """A program with the bundled stack's Vertex job: its section's job arguments as the stack
    gives them (`VertexConfig.job_args`, the run limit as `timeout_s`), its own image (with
    Reduction Server's package), package and account."""
    name, config = load_stack(stack, None)
    vx = load_stack_config(config).compute
    args = {
        **vx.job_args(),
        "project": "my-ml-project",
        "region": "us-central1",
        "display_name": name,
        "container_image_uri": "us-docker.pkg.dev/acme/train/torch-rs:1",
        "package_uri": "gs://acme-staging/trainer.tar.gz",
        "service_account": "acme-train@acme-ml.iam.gserviceaccount.com",
        "base_output_dir": "gs://acme-checkpoints",
    }
    seconds = load_stack_config(config).limits.max_run_seconds
    if seconds is not None:
        args["timeout_s"] = min(seconds, args.get("timeout_s", seconds))
    return (
        "import pulumi\n"
        "from trainstack.components.quota_guard import QuotaGuard\n"
        "from trainstack.components.vertex_training_job import VertexTrainingJob\n"
        "QuotaGuard('acme-quota', {'project': 'my-ml-project', 'deployment_name': 'acme', "
        "'needs': []})\n"
        f"job = VertexTrainingJob('acme-vertex', {args!r})\n"
        "pulumi.export('job', job.facts)\n"
    )


# The stack's own notes on what the program brings itself: the default image's mirror, the
# Reduction Server image it builds (the program names an image of its own), and its
# limits.max_run_hours (a component given timeout_s cannot tell it from vertex.timeout_s).
VERTEX_STACK_NOTES = ("vertex: the default image", "vertex: Reduction Server needs", "limits.")


@pytest.mark.parametrize("stack", ["dev-vertex-hpt", "prod-vertex-rs"])
def test_a_vertex_program_plans_the_totals_and_quota_of_the_same_stack(
    tmp_path: Path, stack: str
) -> None:
    plan = build_program_plan(write_program(tmp_path / "acme", vertex_main(stack), stack), stack)
    stack_plan = bundled_plan(stack)
    # Before: VertexTrainingJob had no facts, so no summary or quota at all.
    assert plan["summary"] == stack_plan["summary"]
    assert plan["quota"] == stack_plan["quota"]
    assert plan["notes"] == [n for n in stack_plan["notes"] if not n.startswith(VERTEX_STACK_NOTES)]


LOCAL_MAIN = """\
import pulumi
from trainstack.components.local_training_job import LocalTrainingJob

trainer = {"framework": "torch", "strategy": "ddp", "model": "cnn", "dataset": "digits",
           "steps": 300, "global_batch_size": 64}
job = LocalTrainingJob("acme-local", {"trainer": trainer, "workers": 2, "root": ".trainstack/acme"})
"""


def test_a_local_program_plans_what_the_local_stack_plans(tmp_path: Path) -> None:
    plan = build_program_plan(write_program(tmp_path / "acme", LOCAL_MAIN, "local"), "local")
    stack_plan = bundled_plan("local")
    # Before: no facts, so the program's note that it registers no compute, and no totals.
    assert (plan["summary"], plan["quota"], plan["notes"]) == (
        stack_plan["summary"],
        stack_plan["quota"],
        stack_plan["notes"],
    )


def test_a_program_without_supervisor_or_quota_guard_is_promised_neither(tmp_path: Path) -> None:
    main = GKE_MAIN.replace(
        'QuotaGuard("acme-quota", {"project": project, "deployment_name": "acme", "needs": []})',
        "",
    )
    main = main[: main.index("target = supervised_compute")] + main[main.index("gpu = A100") :]
    plan = build_program_plan(
        write_program(tmp_path / "acme", main, "dev-a100-gke"), "dev-a100-gke"
    )
    stack_notes = bundled_plan("dev-a100-gke")["notes"]
    # Before: the stack's notes that QuotaGuard stops the deployment before anything is
    # created and that the supervisor sets the GPU node pool to 0 nodes, with neither there.
    assert plan["notes"] == [
        stack_notes[0],
        "quota: no QuotaGuard in this program, so nothing checks the quota before `pulumi up` "
        "creates the compute; a shortfall shows as a failed create. Add one "
        "(trainstack.components.quota_guard.QuotaGuard, registered first, with the quota this "
        "plan lists as its needs): docs/own-program.md",
        "A100Cluster.spot: GKE gives the pods of a preempted Spot node 15 s to stop (the rest "
        "of the 30 s notice is for system pods), whatever their terminationGracePeriodSeconds "
        "says (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); "
        "A100Cluster.training.trainer_args --preemption_grace_s (12 s) fits: the trainer "
        "saves within 12 s and exits before then, if its checkpoint writes in time (see "
        "write_s of its checkpoint_written records)",
        "unverified quota ids (confirm with gcp.cloudquota.get_s_quota_infos before "
        "requesting): A2-CPUS-per-project-region, CPUS-per-project-region",
        "limits.max_run_hours: GKE Job activeDeadlineSeconds 14400",
        "run supervisor: none in this program stops its A100Cluster (gke): nothing stops the "
        "machines at the run's end or at its limits (max_run_seconds stops the trainer, not "
        "the machines), so they bill until `pulumi destroy`. Add a RunSupervisor "
        "(trainstack.components.run_supervisor) for it: docs/own-program.md",
    ]


OWN_CODE_TPU_MAIN = (
    COMMON.replace("REGION", "us-central2")
    + """
from trainstack.components import TpuPodSlice, UserCode

code = UserCode(source="train", entrypoint=["python", "train.py"], requirements="requirements.txt")
tpu = TpuPodSlice(
    "acme-tpu",
    {
        **shared,
        "zone": "us-central2-b",
        "accelerator_type": "v4-16",
        "runtime_version": "tpu-ubuntu2204-base",
        "provisioning": "spot",
        "network_tags": ["acme-node"],
        "package_uri": "gs://acme-staging/trainer.tar.gz",
        "code": code,
        "checkpoint_url": "gs://acme-checkpoints",
        "data_url": "gs://acme-data",
    },
)
pulumi.export("tpu", tpu.facts)
"""
)


def own_code_program(folder: Path, main: str = OWN_CODE_TPU_MAIN) -> Path:
    write_program(folder, main)
    (folder / "train").mkdir()
    (folder / "train" / "train.py").write_text("import jax\n")
    (folder / "train" / "requirements.txt").write_text("jax[tpu]\n")
    return folder


def test_own_code_slice_facts_give_the_folder_its_code_is_given(tmp_path: Path) -> None:
    plan = build_program_plan(own_code_program(tmp_path / "acme"), "dev")
    [vm] = [r for r in plan["resources"] if r["type"] == "gcp:tpu/v2Vm:V2Vm"]
    script = vm["inputs"]["metadata"]["startup-script"]
    # The node launcher's options, as the slice's startup script passes them to every worker.
    [line] = [x for x in script.splitlines() if x.startswith("readonly TS_TRAINER_ARGS=(")]
    [env] = [a for a in line.split() if a.startswith("--env=TRAINSTACK_CHECKPOINT_DIR=")]
    assert env == "--env=TRAINSTACK_CHECKPOINT_DIR=gs://acme-checkpoints/checkpoints/acme"
    # Before: gs://acme-checkpoints/checkpoints, the parent of the folder the code writes.
    assert plan["outputs"]["tpu"]["status"]["checkpoint_dir"] == env.partition("_DIR=")[2]


def test_an_autonamed_bucket_leaves_the_totals_quota_and_notes_known(tmp_path: Path) -> None:
    # The checkpoint bucket is created by this deploy: its `url` is Computed
    # (terraform-provider-google google/services/storage/resource_storage_bucket.go, "url":
    # Computed: true), so a `pulumi preview` of a new bucket knows it only after deploy. The
    # mocks answer a bucket's url from its name; this Output is unknown, as the preview's is.
    unknown = (
        "import asyncio\n"
        "def known_after_deploy():\n"
        "    value, known = asyncio.Future(), asyncio.Future()\n"
        "    value.set_result(None)\n"
        "    known.set_result(False)\n"
        "    return pulumi.Output(set(), value, known)\n"
        "args = {"
    )
    main = GKE_MAIN.replace("args = {", unknown).replace(
        '"checkpoint_url": "gs://acme-checkpoints"', '"checkpoint_url": known_after_deploy()'
    )
    plan = build_program_plan(
        write_program(tmp_path / "acme", main, "dev-a100-gke"), "dev-a100-gke"
    )
    stack_plan = bundled_plan("dev-a100-gke")
    # Before: the whole facts were unknown, so no summary, quota or notes of the cluster.
    assert plan["summary"] == stack_plan["summary"]
    assert plan["quota"] == stack_plan["quota"]
    assert plan["notes"] == in_program_words(stack_plan["notes"])


def test_the_trainers_grace_on_gke_spot_names_the_clusters_argument(tmp_path: Path) -> None:
    # The trainer's default grace (30 s): no `--preemption_grace_s` in `trainer_args`.
    main = GKE_MAIN.replace('"trainer_args": ["--preemption_grace_s=12.0"],', "")
    plan = build_program_plan(write_program(tmp_path / "acme", main), "dev")
    [note] = [n for n in plan["notes"] if ".spot: " in n]
    # Before: "gpu_cluster.spot: ... trainer.preemption_grace_s (30 s) does NOT fit ... set
    # trainer.preemption_grace_s to at most 12", a stack's keys a program has not.
    assert note == (
        "A100Cluster.spot: GKE gives the pods of a preempted Spot node 15 s to stop (the rest "
        "of the 30 s notice is for system pods), whatever their terminationGracePeriodSeconds "
        "says (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); "
        "A100Cluster.training.trainer_args --preemption_grace_s (30 s) does NOT fit: a save "
        "after a preemption that takes longer than 12 s is cut off and the run resumes from "
        "the checkpoint before; set A100Cluster.training.trainer_args --preemption_grace_s to "
        "at most 12"
    )


GKE_OWN_CODE_MAIN = GKE_MAIN.replace(
    "args = {",
    'from trainstack.components import UserCode\ncode = UserCode(image="us-docker.pkg.dev/acme/train/t:1", entrypoint=["python", "train.py"])\nargs = {',
).replace(
    '"package_uri": "gs://acme-staging/trainer.tar.gz",\n        "checkpoint_url": "gs://acme-checkpoints",\n        "trainer_args": ["--preemption_grace_s=12.0"],',
    '"package_uri": "gs://acme-staging/trainer.tar.gz",\n        "code": code,\n        "checkpoint_url": "gs://acme-checkpoints",\n        "data_url": "gs://acme-data",',
)


def test_own_code_on_gke_spot_is_told_its_grace_in_a_programs_words(tmp_path: Path) -> None:
    plan = build_program_plan(write_program(tmp_path / "acme", GKE_OWN_CODE_MAIN), "dev")
    [note] = [n for n in plan["notes"] if ".spot: " in n]
    # Before: "trainer.preemption_grace_s (30 s) does NOT fit ... set
    # trainer.preemption_grace_s to at most 12", a stack key the program has not, whose value
    # never reaches your code on GKE.
    assert note == (
        "A100Cluster.spot: GKE gives the pods of a preempted Spot node 15 s to stop (the rest "
        "of the 30 s notice is for system pods), whatever their terminationGracePeriodSeconds "
        "says (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); your "
        "code gets SIGTERM from the node launcher then: it must save its checkpoint and exit "
        "within about 12 s, or the run resumes from the checkpoint before"
    )


def test_own_code_on_gke_spot_is_told_its_grace_in_the_stacks_words() -> None:
    name, config = load_stack("dev-a100-gke", None)
    config["trainstack:trainer"] = {
        "image": "us-docker.pkg.dev/acme/train/t:1",
        "entrypoint": ["python", "train.py"],
    }
    [note] = [n for n in build_plan(name, config)["notes"] if ".spot: " in n]
    # Before: "trainer.preemption_grace_s (30 s) does NOT fit ... set
    # trainer.preemption_grace_s to at most 12", a key that reaches your code in local-run
    # only: on GKE the node launcher passes SIGTERM on to it.
    assert note == (
        "gpu_cluster.spot: GKE gives the pods of a preempted Spot node 15 s to stop (the rest "
        "of the 30 s notice is for system pods), whatever their terminationGracePeriodSeconds "
        "says (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); your "
        "code gets SIGTERM from the node launcher then: it must save its checkpoint and exit "
        "within about 12 s, or the run resumes from the checkpoint before"
    )

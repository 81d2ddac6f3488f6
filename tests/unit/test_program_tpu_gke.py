"""A program composing `TpuGkeSlices` with your code gets from the component's `facts` the
totals, quota and notes the bundled stack of the same slices (`dev-tpu-v6e-gke`: two spot
v6e-16 slices in us-east5-b, your JAX code in its image) gets, and the "Your code" section a
stack plan prints (`trainstack plan|quota --program`)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.fakes.logging_server import LoggingFakeServer
from tests.unit.test_logs import entry, gke_resource, train
from tests.unit.test_program_facts import write_program
from trainstack.infra.cli import app
from trainstack.infra.plan import build_plan, load_stack
from trainstack.infra.program_plan import build_program_plan, load_program, run_own_program

runner = CliRunner()

IMAGE = "us-docker.pkg.dev/my-ml-project/jax/tpu-trainer:1"
TPU_GKE_MAIN = f"""\
import pulumi

from trainstack.components import UserCode
from trainstack.components.quota_guard import QuotaGuard
from trainstack.components.run_supervisor import RunSupervisor, supervisor_run
from trainstack.components.tpu_gke_slices import TpuGkeSlices, supervised_slices

project = pulumi.Config("gcp").require("project")
QuotaGuard("acme-quota", {{"project": project, "deployment_name": "acme", "needs": []}})
code = UserCode(source="train", image="{IMAGE}", entrypoint=["python", "train.py"])
args = {{
    "project": project,
    "zone": "us-east5-b",
    "deployment_name": "acme",
    "accelerator_type": "v6e-16",
    "slices": 2,
    "provisioning": "spot",
    "environment": "dev",
    "code": code,
    "package_uri": "gs://acme-staging/trainer.tar.gz",
    "checkpoint_url": "gs://acme-checkpoints",
    "data_url": "gs://acme-data",
    "network_self_link": "projects/acme-ml/global/networks/acme",
    "subnetwork_self_link": "projects/acme-ml/regions/us-east5/subnetworks/acme",
    "node_tag": "acme-node",
    "service_account_email": "acme-train@acme-ml.iam.gserviceaccount.com",
    "max_run_seconds": 14400,
}}
target = supervised_slices(args)
RunSupervisor(
    "acme-supervisor",
    {{
        "project": project,
        "region": "us-central1",
        "deployment_name": "acme",
        "kind": "node_pools",
        "resource_name": target.cluster,
        "node_pools": target.pools,
        "run": supervisor_run(target.run_record, target.hosts, max_run_seconds=14400),
        "staging_bucket": "acme-staging",
        "checkpoint_bucket": "acme-checkpoints",
    }},
)
tpu = TpuGkeSlices("acme-tpu", args)
pulumi.export("tpu", tpu.facts)
"""


def tpu_gke_program(folder: Path, stack: str = "dev-tpu-v6e-gke") -> Path:
    write_program(folder, TPU_GKE_MAIN, stack)
    (folder / "train").mkdir()
    (folder / "train" / "train.py").write_text("import jax\n")
    return folder


def test_a_tpu_gke_program_plans_the_totals_quota_and_notes_of_the_same_stack(
    tmp_path: Path,
) -> None:
    name, config = load_stack("dev-tpu-v6e-gke", None)
    # The program's max_run_seconds, as the stack's limit.
    config["trainstack:limits"] = {"max_run_hours": 4}
    stack_plan = build_plan(name, config)
    plan = build_program_plan(tpu_gke_program(tmp_path / "acme"), name)
    # Before: TpuGkeSlices had no facts, so the program's note that it registers no compute,
    # and no summary or quota.
    assert plan["summary"] == stack_plan["summary"]
    assert plan["quota"] == stack_plan["quota"]
    assert plan["notes"] == stack_plan["notes"]


STACK = "dev-tpu-v6e-gke"


def test_a_tpu_gke_programs_logs_are_the_stacks(tmp_path: Path) -> None:
    main = TPU_GKE_MAIN.replace('"deployment_name": "acme"', f'"deployment_name": "{STACK}"')
    folder = write_program(tmp_path / "acme", main, STACK)
    (folder / "train").mkdir()
    (folder / "train" / "train.py").write_text("import jax\n")
    program, config = load_program(folder, STACK)
    run = run_own_program(program, STACK, config, folder)
    outputs = json.loads(json.dumps(run.shown_outputs))
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(outputs))
    where = outputs["tpu"]["status"]
    # The stack's outputs name the same cluster and JobSet: both are named from the
    # deployment (`gcp_name`).
    stack_outputs = tmp_path / "stack-outputs.json"
    stack_outputs.write_text(
        json.dumps({"target": "tpu", "cluster_name": where["cluster"], "job_name": where["jobset"]})
    )
    pod = f"{where['jobset']}-slice-1-1-x0k2p"
    with LoggingFakeServer() as server:
        server.add(entry(1, gke_resource(pod, where["cluster"]), train(20, 5, 5)))
        endpoint = ("--endpoint", f"logging={server.endpoint}")
        worker = ("--worker", "5")
        by_program = runner.invoke(
            app,
            ["logs", "--program", str(folder), "--stack", STACK, "--outputs", str(saved)]
            + [*worker, *endpoint],
        )
        program_query = server.requests[-1][2]["filter"]
        by_stack = runner.invoke(
            app,
            ["logs", "--stack", f"example:{STACK}", "--outputs", str(stack_outputs)]
            + [*worker, *endpoint],
        )
        stack_query = server.requests[-1][2]["filter"]
    # Before: "its compute is a TpuGkeSlices, which status and logs --program do not read" (no
    # facts at all: "has no trainstack compute").
    assert (by_program.exit_code, by_program.stdout) == (by_stack.exit_code, by_stack.stdout)
    assert by_program.stdout == "10:00:01 node 5 rank 5 train step 20 loss 2.3000 812.2 samples/s\n"
    # Worker 5 of two slices of 4 TPU VMs: slice 1, pod 1.
    assert (
        program_query
        == stack_query
        == (
            'resource.type="k8s_container" AND resource.labels.cluster_name="dev-tpu-v6e-gke-tpu" '
            'AND resource.labels.pod_name=~"^dev-tpu-v6e-gke-tpu-slice-1-1-"'
        )
    )

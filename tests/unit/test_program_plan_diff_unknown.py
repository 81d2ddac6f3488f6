"""A program's `plan-diff` where its resources' inputs are unknown in the preview (an
auto-named bucket of the program's own): the code entry still shows the change, and the
Job it relaunches is counted and said (issue 30's trial: "Stack dev: no changes" for an env
change that relaunches the GKE Job). Also: `--env=` values of node args hashed in any
program plan, and a code entry whose only change is the files it leaves out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.unit.test_program_facts import write_program
from trainstack.infra.cli import app
from trainstack.infra.plan_diff import plan_diff
from trainstack.infra.plan_env import env_hash
from trainstack.infra.program_plan import build_program_plan

runner = CliRunner()

# The trial's program, cut down: its own bucket, auto-named (no `name=`), so its name, and
# every input derived from it, is known only after deploy; an A100 GKE cluster runs its code
# with an env value taken from the environment.
AUTO_NAMED = """\
import os

import pulumi
import pulumi_gcp as gcp

from trainstack.components import A100Cluster, TrainerPackage, UserCode

bucket = gcp.storage.Bucket("acme-bucket", location="US-CENTRAL1")
url = bucket.name.apply(lambda n: f"gs://{n}")
code = UserCode(
    source="code", entrypoint=["python", "train.py"], env={"MY_FLAG": os.environ["MYFLAG"]}
)
package = TrainerPackage("acme-code", {"staging_bucket": bucket.name, "code": code})
gpu = A100Cluster("acme-gpu", {
    "project": "acme-ml",
    "zone": "us-central1-a",
    "deployment_name": "acme",
    "machine_type": "a2-highgpu-8g",
    "node_count": 2,
    "network_self_link": "projects/acme-ml/global/networks/acme",
    "subnetwork_self_link": "projects/acme-ml/regions/us-central1/subnetworks/acme",
    "node_tag": "acme-node",
    "service_account_email": "acme-train@acme-ml.iam.gserviceaccount.com",
    "training": {"package_uri": package.uri, "package": package, "code": code,
                 "checkpoint_url": url, "data_url": url.apply(lambda u: f"{u}/data")},
})
pulumi.export("gpu", gpu.facts)
"""


def test_a_code_change_under_unknown_inputs_says_the_relaunch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_program(tmp_path / "acme", AUTO_NAMED)
    (folder / "code").mkdir()
    (folder / "code" / "train.py").write_text("import torch\n")
    monkeypatch.setenv("MYFLAG", "1")
    plan = build_program_plan(folder, "dev")
    [job] = [r for r in plan["resources"] if r["type"] == "kubernetes:batch/v1:Job"]
    assert job["inputs"]["spec"] == "(known after deploy)"
    base = tmp_path / "base.json"
    base.write_text(json.dumps(plan))
    monkeypatch.setenv("MYFLAG", "2")
    result = runner.invoke(
        app, ["plan-diff", "--program", str(folder), "--stack", "dev", str(base)]
    )
    assert result.exit_code == 0, result.output
    # Before: "0 to replace" and no replace line: the Job's inputs are the same unknown.
    assert result.stdout.splitlines()[2:] == [
        "### Stack `dev`: 0 to add, 0 to change, 1 to replace, 0 to delete",
        "",
        "- **code** `acme-gpu`: env changed",
        "",
        "- **replace** `acme-gpu-training-job` (kubernetes:batch/v1:Job): the code of "
        "`acme-gpu` changed, and its `metadata`, `spec` are known only after deploy (they "
        "depend on a value the preview does not know, such as an auto-named resource's "
        "name), so the plan cannot show the change in them; a change there forces a new "
        "resource (pulumi-kubernetes' force-new table)",
        "  - **relaunches training; the plan does not say where its checkpoints are**",
        "",
    ]


def _program_plan(flag: str, metadata: object) -> dict[str, object]:
    """A program's plan (no `target`) whose Job passes `--env=` node args by hand: no code
    entry lists the value."""
    args = ["--env=TRAINSTACK_RUN_NAME=acme", f"--env=MY_FLAG={flag}", "--", "python"]
    spec = {"template": {"spec": {"containers": [{"name": "trainer", "args": args}]}}}
    job = {
        "type": "kubernetes:batch/v1:Job",
        "name": "acme-job",
        "inputs": {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec},
    }
    return {"stack": "dev", "project": "acme", "resources": [job], "summary": {}, "quota": []}


def test_a_programs_node_arg_env_values_show_hashed() -> None:
    meta = {"name": "acme-job", "namespace": "default"}
    text = plan_diff(_program_plan("1", meta), _program_plan("2", meta))
    # Before: `--env=MY_FLAG=1` -> `--env=MY_FLAG=2`, in clear.
    assert text.splitlines()[-1] == (
        f"  - `spec.template.spec.containers[trainer].args[--env=MY_FLAG]`: "
        f"`--env=MY_FLAG={env_hash('1')}` -> `--env=MY_FLAG={env_hash('2')}`"
    )
    assert env_hash("1") == "sha256:6b86b273"


def test_a_job_whose_old_metadata_was_unknown_diffs() -> None:
    meta = {"name": "acme-job", "namespace": "default"}
    # Before: AttributeError ('str' object has no attribute 'get') from the replace check.
    text = plan_diff(_program_plan("1", "(known after deploy)"), _program_plan("1", meta))
    assert text.splitlines()[4] == (
        "- **replace** `acme-job` (kubernetes:batch/v1:Job): `metadata`, `metadata.name`, "
        "`metadata.namespace` changed, which forces a new resource (pulumi-kubernetes' force-new table); creates the new one first"
    )


def _code_plan(excluded: list[str]) -> dict[str, object]:
    files = {"excluded": [{"path": p, "why": "dotenv file"} for p in excluded], "count": 1}
    entry = {"source": "code", "source_sha256": "ab" * 32, "env": {}, "files": files}
    return {**_program_plan("1", {"name": "j"}), "code_by_component": {"acme-gpu": entry}}


def test_only_the_files_left_out_changed() -> None:
    text = plan_diff(_code_plan([]), _code_plan([".env"]))
    # Before: "- **code** `acme-gpu`: " and nothing after it.
    assert text.splitlines()[4] == (
        "- **code** `acme-gpu`: files left out `-` -> `.env` (its source sha256 is the same: "
        "the job runs the same code)"
    )

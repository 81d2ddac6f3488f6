"""The `trainstack` CLI contract: commands, JSON output and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from tests import REPO_ROOT
from tests.bundled import bundled_plan
from trainstack.infra.cli import app
from trainstack.infra.plan import bundled_stacks, quota_table

runner = CliRunner()
# `plan --stack NAME` of a bundled stack reads the session's run of it (tests/bundled.py).
pytestmark = pytest.mark.usefixtures("shared_bundled_runs")


def test_plan_json_for_the_local_stack() -> None:
    result = runner.invoke(app, ["plan", "--stack", "local", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["stack"] == "local"
    assert plan["summary"]["hourly_usd"] == 0


def test_plan_renders_tree_and_tables() -> None:
    result = runner.invoke(app, ["plan", "--stack", "local"])
    assert result.exit_code == 0, result.output
    assert "stack local" in result.stdout
    assert "Quota needed" in result.stdout


def test_unknown_stack_exits_2_and_lists_stacks() -> None:
    result = runner.invoke(app, ["plan", "--stack", "nope"])
    assert result.exit_code == 2
    assert "--stack: no stack named 'nope'" in result.stderr
    assert ", ".join(bundled_stacks()) in result.stderr.replace("\n", "")


def test_invalid_config_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(
        yaml.safe_dump(
            {"config": {"trainstack:environment": "qa", "trainstack:local": {"workers": 2}}}
        )
    )
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: stack 'broken': environment: 'qa' is not allowed; valid: dev, staging, prod\n"
    )


def test_stack_and_config_file_are_exclusive(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "--stack", "local", "--config-file", "x.yaml"])
    assert result.exit_code == 2
    assert "give exactly one of --stack NAME or --config-file PATH" in result.stderr


def test_plan_diff_command(tmp_path: Path) -> None:
    out = runner.invoke(app, ["plan", "--stack", "local", "--json"])
    base = tmp_path / "base.json"
    base.write_text(out.stdout)
    result = runner.invoke(app, ["plan-diff", str(base), str(base)])
    assert result.exit_code == 0
    assert "### Stack `local`: no changes" in result.stdout


def test_stacks_lists_bundled_stacks() -> None:
    result = runner.invoke(app, ["stacks"])
    assert result.exit_code == 0
    assert result.stdout.split() == bundled_stacks()


def test_status_reads_the_live_job(tmp_path: Path) -> None:
    from tests.fakes.vertex_server import VertexFakeServer

    with VertexFakeServer() as fake:
        parent = "projects/my-ml-project/locations/us-central1"
        status, job = fake.handle("POST", f"/v1/{parent}/customJobs", {"displayName": "x"}) or (
            0,
            {},
        )
        assert status == 200
        result = runner.invoke(
            app,
            [
                "status",
                "--stack",
                "prod-vertex-rs",
                "--job",
                job["name"],
                "--json",
                "--api-endpoint",
                fake.endpoint,
            ],
        )
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["job_name"] == job["name"]
    assert info["state"] == "JOB_STATE_PENDING"
    assert info["display_name"] == "x"


def test_status_rejects_a_non_vertex_stack() -> None:
    result = runner.invoke(app, ["status", "--stack", "local", "--job", "j"])
    assert result.exit_code == 2
    assert "status reads Vertex AI jobs; stack 'local' has target 'local'" in result.stderr


def test_quota_json_for_a_gpu_stack() -> None:
    result = runner.invoke(app, ["quota", "--stack", "dev-a100-gke", "--json"])
    assert result.exit_code == 0, result.output
    needs = json.loads(result.stdout)
    assert [(q["quota_id"], q["dimensions"], q["needed"]) for q in needs] == [
        ("PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region", {"region": "us-central1"}, 16),
        ("GPUS-ALL-REGIONS-per-project", {}, 16),
        ("A2-CPUS-per-project-region", {"region": "us-central1"}, 192),
        # The GKE system node (e2-standard-4) for kube-dns and the other add-ons.
        ("CPUS-per-project-region", {"region": "us-central1"}, 4),
    ]


def test_quota_table_marks_unverified_ids() -> None:
    result = runner.invoke(app, ["quota", "--stack", "prod-tpu-v4-32"])
    assert result.exit_code == 0, result.output
    assert "TPUV4sPodPerProjectPerZoneForTPUAPI" in result.stdout
    assert "unverified quota ids" in result.stdout


def test_plan_from_a_config_file_takes_its_name_from_stack_name(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text((REPO_ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    named = runner.invoke(
        app, ["plan", "--config-file", str(config), "--stack-name", "my-run", "--json"]
    )
    assert named.exit_code == 0, named.output
    plan = json.loads(named.stdout)
    assert plan["stack"] == "my-run"
    assert [r["name"] for r in plan["resources"]] == ["my-run-job", "my-run-job-run"]
    unnamed = runner.invoke(app, ["plan", "--config-file", str(config), "--json"])
    assert json.loads(unnamed.stdout)["stack"] == "config"


def test_plan_diff_full_shows_long_values_whole(tmp_path: Path) -> None:
    plan = json.loads(runner.invoke(app, ["plan", "--stack", "local", "--json"]).stdout)
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    base.write_text(json.dumps(plan))
    long_value = "gs://bucket/" + "d" * 300
    plan["resources"][0]["inputs"]["checkpointDir"] = long_value
    head.write_text(json.dumps(plan))
    trimmed = runner.invoke(app, ["plan-diff", str(base), str(head)])
    assert trimmed.exit_code == 0, trimmed.output
    assert long_value not in trimmed.stdout
    assert f"  - `checkpointDir`: `null` -> `{long_value[:160]}...`\n" in trimmed.stdout
    full = runner.invoke(app, ["plan-diff", "--full", str(base), str(head)])
    assert full.exit_code == 0, full.output
    assert f"  - `checkpointDir`: `null` -> `{long_value}`\n" in full.stdout


# Output that is not a terminal (CI logs, pipes) keeps every value whole, however narrow
# COLUMNS says the screen is; rich would otherwise cut cells to fit 60 columns with "…".
NARROW = {"COLUMNS": "60"}


def test_quota_table_never_cuts_a_quota_id_when_piped() -> None:
    result = runner.invoke(app, ["quota", "--stack", "dev-a100-gke"], env=NARROW)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for quota_id in (
        "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region",
        "GPUS-ALL-REGIONS-per-project",
        "A2-CPUS-per-project-region",
    ):
        assert f"│ {quota_id} " in result.stdout
    assert "│ compute.googleapis.com │" in result.stdout


def test_plan_output_keeps_resource_names_and_quota_ids_whole_when_piped() -> None:
    result = runner.invoke(app, ["plan", "--stack", "prod-vertex-rs"], env=NARROW)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    plan = bundled_plan("prod-vertex-rs")
    for resource in plan["resources"]:
        assert f"{resource['name']} {resource['type']}" in result.stdout
    for need in plan["quota"]:
        assert f"│ {need['quota_id']} " in result.stdout
    # Inline inputs are shown whole too (a service account member is 75 characters).
    assert 'member="serviceAccount:prod-vertex-rs-train@my-ml-project.iam.gserviceaccount.com"' in (
        result.stdout
    )


def test_live_quota_table_never_cuts_a_value_when_piped() -> None:
    from tests.fakes.quota_server import QuotaFakeServer

    limits = {"GPUS-ALL-REGIONS-per-project": [({}, "100")]}
    with QuotaFakeServer(limits, {}) as fake:
        result = runner.invoke(
            app,
            ["quota", "--stack", "dev-a100-gke", "--live", "--endpoint", fake.endpoint],
            env=NARROW,
        )
    # The fake knows only the global cap: the other ids are answered 404, which fails.
    assert result.exit_code == 1, result.output
    assert "…" not in result.stdout
    assert "│ PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region │ region=us-central1 │" in (
        result.stdout
    )
    assert (
        "│ NOT_FOUND (HTTP 404: quota PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region not found) │"
        in result.stdout
    )


def test_a_narrow_terminal_folds_table_values_instead_of_cutting_them() -> None:
    needs = bundled_plan("dev-a100-gke")["quota"]
    out = io.StringIO()
    Console(file=out, width=50, force_terminal=True, color_system=None).print(quota_table(needs))
    text = out.getvalue()
    assert "…" not in text
    # Reading the quota id column top to bottom gives back every id, whole and in order.
    body = [line.split("│") for line in text.splitlines() if line.startswith("│")]
    assert "".join(cells[2].strip() for cells in body) == "".join(q["quota_id"] for q in needs)

"""The `trainstack` CLI contract: commands, JSON output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from infra.cli import app
from infra.plan import bundled_stacks

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
    assert "invalid stack config for 'broken'" in result.stderr
    assert "environment: 'qa' is not allowed; valid: dev, staging, prod" in result.stderr


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

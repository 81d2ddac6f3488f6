"""`trainstack quota --live` over real HTTP against a local Cloud Quotas / Compute fake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.fakes.quota_server import QuotaFakeServer
from trainstack.infra.cli import app
from trainstack.infra.quota_live import compute_metric

runner = CliRunner()
PREEMPTIBLE = "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region"


def _live(limit: str, used: float) -> tuple[int, dict[str, dict[str, object]], list[str]]:
    """`quota --live --json` for dev-a100-gke (16 spot A100s) with `used` of them in use."""
    limits = {
        PREEMPTIBLE: [({}, "0"), ({"region": "us-central1"}, limit)],
        "GPUS-ALL-REGIONS-per-project": [({}, "64")],
        "A2-CPUS-per-project-region": [({}, "1000")],
        "CPUS-per-project-region": [({}, "1000")],
    }
    usage = {
        "us-central1": [("PREEMPTIBLE_NVIDIA_A100_GPUS", float(limit), used)],
        "global": [("GPUS_ALL_REGIONS", 64.0, 10.0)],
    }
    with QuotaFakeServer(limits, usage) as fake:
        result = runner.invoke(
            app,
            ["quota", "--stack", "dev-a100-gke", "--live", "--json", "--endpoint", fake.endpoint],
        )
    rows = {r["quota_id"]: r for r in json.loads(result.stdout)}
    return result.exit_code, rows, fake.requests


def test_a_deployed_stack_filling_its_quota_is_tight_not_short() -> None:
    """Need 16, limit 16, 16 in use (maybe the stack's own GPUs): a note, exit 0."""
    code, rows, requests = _live("16", 16.0)
    assert code == 0
    assert rows[PREEMPTIBLE] == {
        "service": "compute.googleapis.com",
        "quota_id": PREEMPTIBLE,
        "dimensions": {"region": "us-central1"},
        "needed": 16,
        "limit": 16,
        "usage": 16,
        "headroom": -16,
        "status": "TIGHT",
        "detail": "0 left; the usage may include this stack's own machines; if not, the "
        "limit must be 32",
        "request": None,
    }
    assert (
        rows["GPUS-ALL-REGIONS-per-project"]["usage"],
        rows["GPUS-ALL-REGIONS-per-project"]["headroom"],
    ) == (10, 38)
    assert "/compute/v1/projects/my-ml-project/regions/us-central1" in requests


def test_a_need_above_the_limit_is_short_and_asks_for_the_need() -> None:
    code, rows, _ = _live("8", 4.0)
    assert code == 1
    row = rows[PREEMPTIBLE]
    assert (row["status"], row["headroom"], row["detail"], row["request"]) == (
        "SHORT",
        -12,
        "",
        # The need: the 4 in use may be this stack's own (QuotaCheck.preferred_value).
        16,
    )


def test_an_unknown_id_is_not_found() -> None:
    limits = {
        PREEMPTIBLE: [({}, "0"), ({"region": "us-central1"}, "32")],
        "GPUS-ALL-REGIONS-per-project": [({}, "64")],
    }
    with QuotaFakeServer(limits, {}) as fake:
        result = runner.invoke(
            app,
            ["quota", "--stack", "dev-a100-gke", "--live", "--json", "--endpoint", fake.endpoint],
        )
    assert result.exit_code == 1, result.output
    unknown = {r["quota_id"]: r for r in json.loads(result.stdout)}["A2-CPUS-per-project-region"]
    assert unknown["status"] == "NOT_FOUND"
    assert unknown["detail"] == "HTTP 404: quota A2-CPUS-per-project-region not found"


def test_an_unknown_id_fails_and_a_refused_read_does_not() -> None:
    everything = {
        PREEMPTIBLE: [({}, "-1")],
        "GPUS-ALL-REGIONS-per-project": [({}, "100")],
        "A2-CPUS-per-project-region": [({}, "1000")],
        "CPUS-per-project-region": [({}, "24")],
    }
    args = ["quota", "--stack", "dev-a100-gke", "--live", "--json", "--endpoint"]
    refused = frozenset({"A2-CPUS-per-project-region"})
    with QuotaFakeServer(everything, {}, forbidden=refused) as fake:
        result = runner.invoke(app, [*args, fake.endpoint])
    assert result.exit_code == 0, result.output
    row = {r["quota_id"]: r for r in json.loads(result.stdout)}["A2-CPUS-per-project-region"]
    assert (row["status"], row["detail"]) == (
        "unknown",
        "HTTP 403: Permission 'cloudquotas.quotas.get' denied on A2-CPUS-per-project-region",
    )
    known = {k: v for k, v in everything.items() if not k.endswith("CPUS-per-project-region")}
    with QuotaFakeServer(known, {}) as fake:
        result = runner.invoke(app, [*args, fake.endpoint])
    assert result.exit_code == 1, result.output
    statuses = {r["quota_id"]: r["status"] for r in json.loads(result.stdout)}
    assert statuses == {
        PREEMPTIBLE: "ok",
        "GPUS-ALL-REGIONS-per-project": "ok",
        "A2-CPUS-per-project-region": "NOT_FOUND",
        "CPUS-per-project-region": "NOT_FOUND",
    }


def test_table_output_when_everything_fits() -> None:
    limits = {
        PREEMPTIBLE: [({}, "-1")],
        "GPUS-ALL-REGIONS-per-project": [({}, "100")],
        "A2-CPUS-per-project-region": [({}, "1000")],
        "CPUS-per-project-region": [({}, "24")],
    }
    with QuotaFakeServer(limits, {}) as fake:
        result = runner.invoke(
            app, ["quota", "--stack", "dev-a100-gke", "--live", "--endpoint", fake.endpoint]
        )
    assert result.exit_code == 0, result.output
    assert "Quota headroom (live)" in result.stdout
    assert "SHORT" not in result.stdout


def test_missing_credentials_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    result = runner.invoke(app, ["quota", "--stack", "dev-a100-gke", "--live"])
    assert result.exit_code == 2
    assert "--live needs Application Default Credentials" in result.stderr


def test_local_stack_has_no_project_to_read() -> None:
    result = runner.invoke(app, ["quota", "--stack", "local", "--live"])
    assert result.exit_code == 2
    assert "this stack has no gcp:project" in result.stderr


@pytest.mark.parametrize(
    ("quota_id", "metric"),
    [
        ("NVIDIA-A100-80GB-GPUS-per-project-region", "NVIDIA_A100_80GB_GPUS"),
        ("GPUS-ALL-REGIONS-per-project", "GPUS_ALL_REGIONS"),
        ("TPUV4sPodPerProjectPerZoneForTPUAPI", None),
    ],
)
def test_compute_metric_names(quota_id: str, metric: str | None) -> None:
    assert compute_metric(quota_id) == metric

"""Every section's bool, int and float keys take only their own kind
(`trainstack.trainers.common.scalars.StrictScalars`): pydantic's lax mode read YAML's `true`
as 1 (`gpu_cluster.node_count: true` planned one machine, `limits.max_run_hours: true` an
hour), `'0.1'` as a rate and `1`, `'yes'` and `'false'` as switches. Only `trainer.*` counts
were strict before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, LimitsConfig, load_stack_config
from trainstack.infra.plan import read_stack_file

runner = CliRunner()


def _example(name: str) -> dict[str, Any]:
    return read_stack_file(REPO_ROOT / f"examples/own-trainer/Pulumi.{name}.yaml")[1]


def _problems(config: dict[str, Any], section: str, key: str, value: Any) -> list[str]:
    full = f"trainstack:{section}"
    with pytest.raises(ConfigError) as info:
        load_stack_config({**config, full: {**config.get(full, {}), key: value}})
    return info.value.errors


LOCAL = {"trainstack:local": {"workers": 2}}
CASES = [
    ("gce", "gpu_cluster", "node_count", True, "gpu_cluster.node_count: true is not an integer; valid: a whole number"),
    ("gce", "gpu_cluster", "spot", "false", "gpu_cluster.spot: 'false' is not a boolean; valid: true, false"),
    ("gce", "gpu_cluster", "compact_placement", 1, "gpu_cluster.compact_placement: 1 is not a boolean; valid: true, false"),
    ("vertex", "vertex", "replica_count", True, "vertex.replica_count: true is not an integer; valid: a whole number"),
    ("vertex", "vertex", "accelerator_count", True, "vertex.accelerator_count: true is not an integer; valid: a whole number"),
    ("vertex", "vertex", "spot", "no", "vertex.spot: 'no' is not a boolean; valid: true, false"),
    (None, "local", "workers", True, "local.workers: true is not an integer; valid: a whole number"),
    (None, "buckets", "checkpoint_retention_days", True, "buckets.checkpoint_retention_days: true is not an integer; valid: a whole number"),
    (None, "buckets", "checkpoint_retention_days", 1e300, "buckets.checkpoint_retention_days: 1e+300 is too large; valid: <= 3650"),
    (None, "limits", "max_run_hours", True, "limits.max_run_hours: true is not a number; valid: a number"),
    (None, "limits", "max_hourly_usd", "10", "limits.max_hourly_usd: '10' is not a number; valid: a number"),
    (None, "limits", "max_total_usd", 1e300, "limits.max_total_usd: 1e+300 is too large; valid: <= 1000000000 (US dollars)"),
    (None, "quotas", "skip_preflight", "yes", "quotas.skip_preflight: 'yes' is not a boolean; valid: true, false"),
    (None, "trainer", "learning_rate", True, "trainer.learning_rate: true is not a number; valid: a number"),
    (None, "trainer", "learning_rate", "0.1", "trainer.learning_rate: '0.1' is not a number; valid: a number"),
    (None, "trainer", "compile", 1, "trainer.compile: 1 is not a boolean; valid: true, false"),
    (None, "trainer", "compile", "yes", "trainer.compile: 'yes' is not a boolean; valid: true, false"),
    (None, "trainer", "steps", True, "trainer.steps: true is not an integer; valid: a whole number"),
]  # fmt: skip


@pytest.mark.parametrize(("example", "section", "key", "value", "expected"), CASES)
def test_a_scalar_of_another_kind_is_refused_with_its_key(
    example: str | None, section: str, key: str, value: Any, expected: str
) -> None:
    config = _example(example) if example else LOCAL
    assert _problems(config, section, key, value) == [expected]


def test_what_the_engine_and_pyyaml_hand_over_still_counts() -> None:
    """The engine's doubles (`node_count: 2.0`) and PyYAML's text for an unquoted `1e-3`
    (YAML 1.1 floats need a dot) are the numbers they were written as."""
    gce = _example("gce")
    section = {**gce["trainstack:gpu_cluster"], "node_count": 2.0}
    assert load_stack_config({**gce, "trainstack:gpu_cluster": section}).compute.node_count == 2
    cfg = load_stack_config({**LOCAL, "trainstack:trainer": {"learning_rate": "1e-3"}})
    assert cfg.trainer.learning_rate == 0.001
    assert LimitsConfig(max_total_usd=1e9).max_total_usd == 1e9


def test_plan_refuses_a_boolean_node_count_in_one_line(tmp_path: Path) -> None:
    """prod-a100-gce with `node_count: true` planned "8 GPUs, 1 machine" before."""
    text = (REPO_ROOT / "stacks/Pulumi.prod-a100-gce.yaml").read_text()
    assert text.count("node_count: 4") == 1
    path = tmp_path / "Pulumi.one.yaml"
    path.write_text(text.replace("node_count: 4", "node_count: true"))
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: stack 'one': gpu_cluster.node_count: true is not an integer; valid: a whole "
        "number\n",
    )

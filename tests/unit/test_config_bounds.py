"""Every numeric key of the stack config has a ceiling and floats are finite
(`trainstack.trainers.common.bounds`): `limits.max_run_hours: 1e300` used to pass the plan
and wrap around in the startup scripts' bash arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, LimitsConfig, load_stack_config

runner = CliRunner()


def _problems(**sections: Any) -> list[str]:
    config = {"trainstack:local": {"workers": 2}}
    config.update({f"trainstack:{key}": value for key, value in sections.items()})
    with pytest.raises(ConfigError) as info:
        load_stack_config(config)
    return info.value.errors


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        (
            {"limits": {"max_run_hours": 1e300}},
            "limits.max_run_hours: 1e+300 is too large; valid: <= 8760.0",
        ),
        (
            {"limits": {"max_run_hours": float("nan")}},
            "limits.max_run_hours: NaN is not a finite number; valid: a finite number",
        ),
        (
            {"limits": {"max_hourly_usd": float("inf")}},
            "limits.max_hourly_usd: Infinity is not a finite number; valid: a finite number",
        ),
        (
            {"trainer": {"steps": 1e300}},
            "trainer.steps: 1e+300 is too large; valid: <= 9007199254740992",
        ),
        (
            {"trainer": {"global_batch_size": 2**53 + 1}},
            "trainer.global_batch_size: 9007199254740993 is too large; valid: <= 9007199254740992",
        ),
        (
            {"trainer": {"learning_rate": float("inf")}},
            "trainer.learning_rate: Infinity is not a finite number; valid: a finite number",
        ),
        (
            {"trainer": {"learning_rate": float("nan")}},
            "trainer.learning_rate: NaN is not a finite number; valid: a finite number",
        ),
        ({"trainer": {"seed": -1}}, "trainer.seed: -1 is too small; valid: >= 0"),
        (
            {"trainer": {"seed": 2**32}},
            "trainer.seed: 4294967296 is too large; valid: <= 4294967295",
        ),
        (
            {"trainer": {"preemption_grace_s": 1e9}},
            "trainer.preemption_grace_s: 1000000000.0 is too large; valid: <= 3600.0",
        ),
        ({"local": {"workers": 513}}, "local.workers: 513 is too large; valid: <= 512"),
    ],
)
def test_numbers_past_their_ceiling_are_refused(sections: dict[str, Any], expected: str) -> None:
    assert _problems(**sections) == [expected]


def test_the_largest_values_pass_and_the_run_limit_fits_int64() -> None:
    cfg = load_stack_config(
        {
            "trainstack:local": {"workers": 512},
            "trainstack:limits": {"max_run_hours": 8760},
            "trainstack:trainer": {
                "seed": 2**32 - 1,
                "steps": 2**53,
                "preemption_grace_s": 3600,
                "global_batch_size": 512,
            },
        }
    )
    assert cfg.limits.max_run_seconds == 31_536_000
    assert LimitsConfig(max_run_hours=8760).max_run_seconds == 31_536_000


def test_plan_refuses_a_run_limit_bash_cannot_hold(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.forever.yaml"
    path.write_text(
        "config:\n  trainstack:local: {workers: 2}\n  trainstack:limits: {max_run_hours: 1e300}\n"
    )
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: invalid stack config for 'forever':\n"
        # PyYAML reads `1e300` (no dot) as a string, which pydantic reads as the number.
        "limits.max_run_hours: '1e300' is too large; valid: <= 8760.0\n",
    )

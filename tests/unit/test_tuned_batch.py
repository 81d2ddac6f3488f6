"""Each tuned global_batch_size / grad_accum_steps value runs in a trial of its own, so each is
checked against the world size the way the fixed value is; a range of them is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config

AT = "vertex.hyperparameter_tuning.parameters"
WORLD = "the world size 8 (1 machine x 8 GPUs)"


def _stack(*parameters: dict[str, Any], **trainer: Any) -> dict[str, Any]:
    tuning = {
        "metric_id": "accuracy",
        "goal": "MAXIMIZE",
        "max_trial_count": 4,
        "parallel_trial_count": 2,
        "parameters": [
            {
                "parameter_id": "learning_rate",
                "type": "double",
                "min_value": 0.001,
                "max_value": 0.1,
            },
            *parameters,
        ],
    }
    return {
        "gcp:project": "p",
        "gcp:region": "us-central1",
        "trainstack:vertex": {"machine_type": "a2-highgpu-8g", "hyperparameter_tuning": tuning},
        "trainstack:trainer": {"global_batch_size": 256, **trainer},
    }


def _errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    return info.value.errors


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("discrete batch", _stack({"parameter_id": "global_batch_size", "type": "discrete", "values": [64, 100, 256]}), [
        f"{AT}[1].values: a trial would fail: trainer.global_batch_size: 100 is not divisible by {WORLD}; valid: 96 or 104",
    ]),
    ("categorical batch", _stack({"parameter_id": "global_batch_size", "type": "categorical", "values": ["128", "12", "x"]}), [
        f"{AT}[1].values: 'x' is not a whole number >= 1; valid: whole numbers for trainer.global_batch_size",
        f"{AT}[1].values: a trial would fail: trainer.global_batch_size: 12 is not divisible by {WORLD}; valid: 8 or 16",
    ]),
    ("discrete accum", _stack({"parameter_id": "grad_accum_steps", "type": "discrete", "values": [1, 2, 3]}), [
        f"{AT}[1].values: a trial would fail: trainer.global_batch_size: 256 is not divisible by {WORLD} x trainer.grad_accum_steps 3 = 24; valid: 240 or 264",
    ]),
    ("both tuned", _stack(
        {"parameter_id": "global_batch_size", "type": "discrete", "values": [64, 128]},
        {"parameter_id": "grad_accum_steps", "type": "discrete", "values": [1, 16]},
    ), [
        f"{AT}[1].values: a trial would fail: trainer.global_batch_size: 64 is not divisible by {WORLD} x trainer.grad_accum_steps 16 = 128; valid: 128",
    ]),
    ("integer range", _stack({"parameter_id": "global_batch_size", "type": "integer", "min_value": 64, "max_value": 512}), [
        f"{AT}[1].type: 'integer' searches a range of trainer.global_batch_size, whose every value must split over the world size 8 (1 machine x 8 GPUs); valid: discrete or categorical, listing the values",
    ]),
    ("zero accum", _stack({"parameter_id": "grad_accum_steps", "type": "discrete", "values": [0, 1]}), [
        f"{AT}[1].values: 0 is not a whole number >= 1; valid: whole numbers for trainer.grad_accum_steps",
    ]),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tuned_batch_values_are_checked_against_the_world_size(
    raw: dict[str, Any], expected: list[str]
) -> None:
    assert _errors(raw) == expected


def test_tuned_values_that_split_pass() -> None:
    load_stack_config(
        _stack({"parameter_id": "global_batch_size", "type": "discrete", "values": [128, 256, 512]})
    )


def test_plan_exits_2_naming_the_tuned_key(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.hpt.yaml"
    raw = _stack({"parameter_id": "global_batch_size", "type": "discrete", "values": [100, 256]})
    path.write_text(yaml.safe_dump({"config": raw}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: stack 'hpt': {AT}[1].values: a trial would fail: trainer.global_batch_size: 100 is not "
        f"divisible by {WORLD}; valid: 96 or 104",
    ]

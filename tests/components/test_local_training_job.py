"""LocalTrainingJob under Pulumi mocks: exact registrations, validation before registering."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components.local_training_job import TOKEN, LocalTrainingJob
from trainstack.infra.mocks import UNKNOWN, run_program
from trainstack.trainers.common.config import TrainConfig

RUN = "pulumi-python:dynamic/local:TrainingRun"
TRAINER = TrainConfig(model="cnn", dataset="digits", steps=300, global_batch_size=64)
ARGS: dict[str, Any] = {
    "trainer": TRAINER,
    "workers": 2,
    "root": ".trainstack/local",
    "labels": {"team": "ml"},
}


def _inputs(run: Any, name: str) -> dict[str, Any]:
    return {k: v for k, v in run.named(name).inputs.items() if k != "__provider"}


def _program(args: dict[str, Any]) -> Any:
    def program() -> dict[str, Any]:
        job = LocalTrainingJob("local-job", args)  # type: ignore[arg-type]
        return {
            "pids": job.pids,
            "log_path": job.log_path,
            "checkpoint_dir": job.checkpoint_dir,
            "state": job.state,
            "run_name": job.run_name,
        }

    return program


def test_registers_component_and_run_with_exact_inputs() -> None:
    run = run_program(_program(ARGS))
    assert sorted((r.type, r.name, r.parent or "") for r in run.resources) == [
        (RUN, "local-job-run", "local-job"),
        (TOKEN, "local-job", ""),
    ]
    assert _inputs(run, "local-job-run") == {
        "trainer": TRAINER.model_dump(mode="json", exclude_none=True),
        "workers": 2,
        "root": ".trainstack/local",
        "env": {},
        "stop_grace_s": 45.0,
        "labels": {"component": "local-training-job", "managed-by": "trainstack", "team": "ml"},
    }
    trainer = _inputs(run, "local-job-run")["trainer"]
    assert (trainer["model"], trainer["dataset"], trainer["steps"]) == ("cnn", "digits", 300)
    assert "checkpoint_dir" not in trainer  # None fields are left out, not sent as null
    assert run.named("local-job-run").custom
    # The process outputs exist only after a real create; a preview shows them unknown.
    assert run.outputs == {
        "pids": UNKNOWN,
        "log_path": UNKNOWN,
        "checkpoint_dir": UNKNOWN,
        "state": UNKNOWN,
        "run_name": "run",
    }


def test_trainer_fields_env_and_grace_are_registered() -> None:
    args = {
        **ARGS,
        "trainer": {"steps": 50, "run_name": "exp-1", "preemption_grace_s": 10},
        "env": {"OMP_NUM_THREADS": "2"},
        "stop_grace_s": 12,
    }
    run = run_program(_program(args))
    inputs = _inputs(run, "local-job-run")
    assert inputs["trainer"] == TrainConfig(
        steps=50, run_name="exp-1", preemption_grace_s=10
    ).model_dump(mode="json", exclude_none=True)
    assert inputs["env"] == {"OMP_NUM_THREADS": "2"}
    assert inputs["stop_grace_s"] == 12.0
    assert run.outputs["run_name"] == "exp-1"


def test_deterministic_across_runs() -> None:
    def snapshot() -> list[tuple[str, str, dict[str, Any]]]:
        run = run_program(_program(ARGS))
        return sorted((r.type, r.name, _inputs(run, r.name)) for r in run.resources)

    assert snapshot() == snapshot()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"workers": 0}, "workers: got 0; valid: an integer 1-512"),
        ({"workers": 513}, "workers: got 513; valid: an integer 1-512"),
        ({"workers": True}, "LocalTrainingJob.workers: true is not an integer; valid: an integer"),
        ({"root": ""}, "root: got ''; valid: a non-empty path"),
        (
            {"trainer": {"steps": 0}},
            "trainer: steps: Input should be greater than 0",
        ),
        (
            {"trainer": {"stepz": 5}},
            "trainer: stepz: Extra inputs are not permitted",
        ),
        (
            {"trainer": "mlp"},
            "LocalTrainingJob.trainer: 'mlp' is not a TrainConfig or a mapping; valid: a TrainConfig or "
            "a mapping",
        ),
        (
            {"env": {"A=B": "1"}},
            "env: got {'A=B': '1'}; valid: variable names (non-empty, no '=') mapped to strings",
        ),
        ({"env": {"N": 1}}, "LocalTrainingJob.env.N: 1 is not a string; valid: a string"),
        (
            {"stop_grace_s": 30},
            "stop_grace_s: got 30; valid: seconds > trainer.preemption_grace_s (30.0), the "
            "time the trainer may take to checkpoint after SIGTERM",
        ),
        (
            {"stop_grace_s": "60"},
            "LocalTrainingJob.stop_grace_s: '60' is not a number; valid: a number",
        ),
        (
            {"labels": {"component": "x"}},
            "labels: 'component' is reserved by trainstack; valid: a key other than component, "
            "managed-by",
        ),
    ],
)
def test_invalid_args_raise_before_registering(override: dict[str, Any], message: str) -> None:
    errors: list[str] = []

    def program() -> dict[str, Any]:
        try:
            LocalTrainingJob("local-job", {**ARGS, **override})  # type: ignore[typeddict-item]
        except ValueError as exc:
            errors.append(str(exc))
        return {}

    run = run_program(program)
    prefixed = message if message.startswith("LocalTrainingJob.") else f"LocalTrainingJob.{message}"
    assert errors == [prefixed]
    assert run.resources == []

"""VertexTrainingJob under Pulumi mocks: exact registrations, deterministic across runs."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components._discovery import normalize_numbers, validate_body
from trainstack.components.trainer_package import TrainerPackage
from trainstack.components.vertex_training_job import VertexTrainingJob
from trainstack.infra.mocks import run_program

ARGS: dict[str, Any] = {
    "project": "p",
    "region": "europe-west4",
    "display_name": "exp-42",
    "machine_type": "a2-highgpu-8g",
    "accelerator_type": "NVIDIA_TESLA_A100",
    "accelerator_count": 8,
    "replica_count": 4,
    "reduction_server": {"replica_count": "auto"},
    # Reduction Server needs google-reduction-server in the image: yours, not the default.
    "container_image_uri": "europe-docker.pkg.dev/p/training/torch-rs:1",
    "trainer_args": ["--steps=1000"],
    "service_account": "sa@p.iam.gserviceaccount.com",
    "base_output_dir": "gs://p-exp-42-checkpoints",
    "labels": {"team": "ml"},
}


def _program(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    package = TrainerPackage("exp-42-trainer", {"staging_bucket": "p-exp-42-staging"})
    job = VertexTrainingJob("exp-42-vertex", {**ARGS, "package_uri": package.uri, **(extra or {})})
    return {"job_name": job.job_name, "body": job.body}


def test_registers_package_and_job_with_exact_inputs() -> None:
    run = run_program(_program)
    assert sorted((r.type, r.name, r.parent or "") for r in run.resources) == [
        ("gcp:storage/bucketObject:BucketObject", "exp-42-trainer-sdist", "exp-42-trainer"),
        ("pulumi-python:dynamic/vertex:CustomJob", "exp-42-vertex-job", "exp-42-vertex"),
        ("trainstack:storage:TrainerPackage", "exp-42-trainer", ""),
        ("trainstack:vertex:VertexTrainingJob", "exp-42-vertex", ""),
    ]
    job = run.named("exp-42-vertex-job")
    # A replacement cancels the old job first: never two jobs on one quota and folder.
    assert job.delete_before_replace is True
    inputs = {k: v for k, v in job.inputs.items() if k != "__provider"}
    # None-valued inputs (api_endpoint and the output placeholders) are not sent.
    assert sorted(inputs) == ["body", "kind", "project", "region"]
    assert inputs["project"] == "p" and inputs["region"] == "europe-west4"
    assert inputs["kind"] == "customJobs"
    # Numbers reach the provider as doubles (protobuf Struct); it normalizes them.
    assert inputs["body"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorCount"] == 8.0
    body = normalize_numbers("aiplatform.v1", "CustomJob", inputs["body"])
    assert validate_body("aiplatform.v1", "CustomJob", body) == []
    pools = body["jobSpec"]["workerPoolSpecs"]
    obj = run.named("exp-42-trainer-sdist").inputs["name"]
    # The setup script installs this package into the image's python3 on every replica.
    assert {"name": "TRAINSTACK_PACKAGE_URI", "value": f"gs://p-exp-42-staging/{obj}"} in pools[0][
        "containerSpec"
    ]["env"]
    assert [p["replicaCount"] for p in pools] == ["1", "3", "13"]
    assert pools[2]["containerSpec"]["imageUri"].startswith("europe-docker.pkg.dev/")
    assert body["jobSpec"]["serviceAccount"] == "sa@p.iam.gserviceaccount.com"
    assert body["jobSpec"]["baseOutputDirectory"] == {
        "outputUriPrefix": "gs://p-exp-42-checkpoints"
    }
    assert {k: v for k, v in body["labels"].items() if k != "trainstack_request_id"} == {
        "component": "vertex-training-job",
        "managed-by": "trainstack",
        "team": "ml",
    }


def test_deterministic_across_runs() -> None:
    def snapshot() -> list[tuple[str, str, Any]]:
        # Registration order is async and may differ; the registrations themselves may not.
        return sorted(
            [
                (r.type, r.name, {k: v for k, v in r.inputs.items() if k != "__provider"})
                for r in run_program(_program).resources
            ],
            key=lambda t: t[1],
        )

    assert snapshot() == snapshot()


def test_hyperparameter_tuning_registers_tuning_job() -> None:
    tuning = {
        "metric_id": "loss",
        "goal": "MINIMIZE",
        "max_trial_count": 4,
        "parallel_trial_count": 2,
        "parameters": [
            {
                "parameter_id": "learning_rate",
                "type": "double",
                "min_value": 1e-4,
                "max_value": 1e-2,
                "scale_type": "UNIT_LOG_SCALE",
            }
        ],
    }
    run = run_program(lambda: _program({"hyperparameter_tuning": tuning}))
    job = run.named("exp-42-vertex-job")
    assert job.type == "pulumi-python:dynamic/vertex:HyperparameterTuningJob"
    assert job.inputs["kind"] == "hyperparameterTuningJobs"
    assert (
        validate_body(
            "aiplatform.v1",
            "HyperparameterTuningJob",
            normalize_numbers("aiplatform.v1", "HyperparameterTuningJob", job.inputs["body"]),
        )
        == []
    )


def test_invalid_args_register_nothing_of_the_job() -> None:
    with pytest.raises(ValueError, match="^replica_count: 0 is too small; valid: >= 1$"):
        run_program(lambda: _program({"replica_count": 0}))

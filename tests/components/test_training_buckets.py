"""TrainingBuckets under Pulumi mocks: bucket settings and teardown options per environment."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components._args import ArgsError
from trainstack.components.training_buckets import TOKEN, TrainingBuckets, TrainingBucketsArgs
from trainstack.infra.mocks import ProgramRun, run_program

BUCKET = "gcp:storage/bucket:Bucket"
# `environment` from the component's argument (the label the policy pack reads).
LABELS = {
    "component": "training-buckets",
    "environment": "dev",
    "managed-by": "trainstack",
    "team": "ml",
}


def _run(**overrides: Any) -> ProgramRun:
    args: dict[str, Any] = {
        "project": "my-project",
        "location": "US-CENTRAL1",
        "deployment_name": "exp-42",
        "environment": "dev",
        "checkpoint_retention_days": 14,
        "labels": {"team": "ml"},
        **overrides,
    }

    def program() -> dict[str, Any]:
        buckets = TrainingBuckets("exp", TrainingBucketsArgs(**args))  # type: ignore[typeddict-item]
        return {
            "data_bucket": buckets.data_bucket,
            "checkpoint_bucket": buckets.checkpoint_bucket,
            "staging_bucket": buckets.staging_bucket,
            "data_url": buckets.data_url,
            "checkpoint_url": buckets.checkpoint_url,
            "staging_url": buckets.staging_url,
        }

    return run_program(program)


def test_children_types_names_parents() -> None:
    run = _run()
    # Registration order depends on Output resolution, so compare as sets.
    assert {(r.type, r.name, r.parent) for r in run.resources} == {
        (TOKEN, "exp", None),
        (BUCKET, "exp-data", "exp"),
        (BUCKET, "exp-checkpoints", "exp"),
        (BUCKET, "exp-staging", "exp"),
    }
    assert len(run.resources) == 4


def test_common_security_settings_on_every_bucket() -> None:
    run = _run()
    for bucket in run.of_type(BUCKET):
        assert bucket.inputs["uniformBucketLevelAccess"] is True
        assert bucket.inputs["publicAccessPrevention"] == "enforced"
        assert bucket.inputs["storageClass"] == "STANDARD"
        assert bucket.inputs["location"] == "US-CENTRAL1"
        assert bucket.inputs["project"] == "my-project"
        assert bucket.inputs["labels"] == LABELS


def test_data_bucket() -> None:
    data = _run().named("exp-data").inputs
    assert data["name"] == "my-project-exp-42-data"
    assert data["versioning"] == {"enabled": True}
    assert data["softDeletePolicy"] == {"retentionDurationSeconds": 604800}
    assert data["lifecycleRules"] == [
        {
            "action": {"type": "Delete"},
            "condition": {
                "daysSinceNoncurrentTime": 30,
                "withState": "ARCHIVED",
                "sendAgeIfZero": False,
            },
        }
    ]
    assert data["forceDestroy"] is False


def test_checkpoint_bucket() -> None:
    ckpt = _run().named("exp-checkpoints").inputs
    assert ckpt["name"] == "my-project-exp-42-checkpoints"
    assert ckpt["versioning"] == {"enabled": False}
    assert ckpt["softDeletePolicy"] == {"retentionDurationSeconds": 0}
    assert ckpt["lifecycleRules"] == [
        {
            "action": {"type": "Delete"},
            "condition": {"age": 14, "matchesPrefixes": ["checkpoints/"], "sendAgeIfZero": False},
        }
    ]
    assert ckpt["forceDestroy"] is False


def _expires(rules: list[dict[str, Any]], name: str, age_days: int) -> bool:
    """Whether a Delete rule acts on object `name` at `age_days`: every condition of a rule
    must hold, `age` from creation, `matchesPrefixes` on the start of the name
    (https://cloud.google.com/storage/docs/lifecycle)."""
    for rule in rules:
        condition = rule["condition"]
        assert set(condition) <= {"age", "matchesPrefixes", "sendAgeIfZero"}, condition
        prefixes = condition.get("matchesPrefixes")
        if age_days >= condition["age"] and (
            prefixes is None or any(name.startswith(p) for p in prefixes)
        ):
            return True
    return False


def test_checkpoint_bucket_expires_step_folders_only() -> None:
    """What each target writes into the checkpoint bucket, a year after it was written."""
    rules = _run().named("exp-checkpoints").inputs["lifecycleRules"]
    kept = [
        "model/model.pt",  # Vertex AIP_MODEL_DIR
        "model/saved_model.pb",
        "logs/events.out.tfevents.1",  # Vertex AIP_TENSORBOARD_LOG_DIR
        "3/model/model.pt",  # an HP-tuning trial's AIP_MODEL_DIR
        "outputs/exp-42/result.json",  # your code's TRAINSTACK_OUTPUT_DIR
        "trainstack-run-0123abcd.started",  # the run-limit clock
    ]
    expired = [
        "checkpoints/exp-42/step-00000100/state.pt",
        "checkpoints/exp-42/step-00000100/COMPLETE",
    ]
    assert [name for name in kept + expired if _expires(rules, name, 365)] == expired
    assert [name for name in expired if _expires(rules, name, 13)] == []


def test_staging_bucket() -> None:
    staging = _run().named("exp-staging").inputs
    assert staging["name"] == "my-project-exp-42-staging"
    assert staging["versioning"] == {"enabled": False}
    assert staging["softDeletePolicy"] == {"retentionDurationSeconds": 0}
    assert staging["lifecycleRules"] == [
        {"action": {"type": "Delete"}, "condition": {"age": 365, "sendAgeIfZero": False}}
    ]
    assert staging["forceDestroy"] is True


@pytest.mark.parametrize(
    ("environment", "delete_data", "protect", "retain"),
    [
        ("dev", False, False, True),
        ("dev", True, False, False),
        ("staging", False, False, True),
        ("staging", True, False, False),
        ("prod", False, True, True),
    ],
)
def test_teardown_options(environment: str, delete_data: bool, protect: bool, retain: bool) -> None:
    run = _run(environment=environment, delete_data_on_destroy=delete_data)
    for name in ("exp-data", "exp-checkpoints"):
        bucket = run.named(name)
        assert (bucket.protect, bucket.retain_on_delete) == (protect, retain), name
    staging = run.named("exp-staging")
    assert (staging.protect, staging.retain_on_delete) == (False, False)


def test_outputs() -> None:
    assert _run().outputs == {
        "data_bucket": "my-project-exp-42-data",
        "checkpoint_bucket": "my-project-exp-42-checkpoints",
        "staging_bucket": "my-project-exp-42-staging",
        "data_url": "gs://my-project-exp-42-data",
        "checkpoint_url": "gs://my-project-exp-42-checkpoints",
        "staging_url": "gs://my-project-exp-42-staging",
    }


def test_name_suffix_and_defaults() -> None:
    run = _run(name_suffix="b7")
    assert run.named("exp-data").inputs["name"] == "my-project-exp-42-data-b7"

    def minimal() -> None:
        TrainingBuckets(
            "exp", {"project": "p", "location": "EU", "deployment_name": "d", "environment": "dev"}
        )

    run = run_program(minimal)
    assert run.named("exp-data").inputs["labels"] == {
        "component": "training-buckets",
        "environment": "dev",
        "managed-by": "trainstack",
    }
    assert run.named("exp-checkpoints").inputs["lifecycleRules"][0]["condition"]["age"] == 30
    assert run.named("exp-data").retain_on_delete is True


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"environment": "qa"}, "environment: 'qa' is not allowed; valid: dev, staging, prod"),
        (
            {"environment": "prod", "delete_data_on_destroy": True},
            "delete_data_on_destroy: true is not allowed in prod; valid: false",
        ),
        (
            {"delete_data_on_destroy": "yes"},
            "TrainingBuckets.delete_data_on_destroy: 'yes' is not a boolean; valid: true, false",
        ),
        (
            {"checkpoint_retention_days": 0},
            "checkpoint_retention_days: 0 is too small; valid: >= 1",
        ),
        (
            {"checkpoint_retention_days": 7.5},
            "TrainingBuckets.checkpoint_retention_days: 7.5 is not an integer; valid: an integer 1-3650",
        ),
        (
            {"checkpoint_retention_days": 3651},
            "checkpoint_retention_days: 3651 is too large; valid: <= 3650",
        ),
        (
            {"name_suffix": "B7"},
            "name_suffix: 'B7' is not a valid bucket name suffix; valid: 1-16 of a-z, 0-9 and "
            "'-', not starting or ending with '-'",
        ),
        (
            {"labels": {"managed-by": "me"}},
            "labels: 'managed-by' is reserved by trainstack; valid: a key other than component, "
            "managed-by",
        ),
    ],
)
def test_validation_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgsError) as info:
        _run(**overrides)
    # The shared validator's lines (the stack config's words) under the component's name.
    prefixed = message if message.startswith("TrainingBuckets.") else f"TrainingBuckets.{message}"
    assert str(info.value) == prefixed


def test_same_program_registers_identical_inputs() -> None:
    first, second = _run(), _run()
    assert {r.name: (r.type, r.inputs) for r in first.resources} == {
        r.name: (r.type, r.inputs) for r in second.resources
    }

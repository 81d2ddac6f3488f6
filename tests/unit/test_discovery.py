"""The discovery-schema validator: exact error strings for each rule."""

from __future__ import annotations

import pytest
from pulumi.output import Unknown

from trainstack.components._discovery import assert_valid, load_document, schema_name, validate_body

API = "aiplatform.v1"
MS = "GoogleCloudAiplatformV1MachineSpec"


def _job(**spec: object) -> dict[str, object]:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/i"},
    }
    return {"displayName": "x", "jobSpec": {"workerPoolSpecs": [pool], **spec}}


def test_valid_body_has_no_errors() -> None:
    assert validate_body(API, "CustomJob", _job()) == []
    assert_valid(API, "CustomJob", _job())


def test_schema_names_resolve() -> None:
    assert schema_name(API, "CustomJob") == "GoogleCloudAiplatformV1CustomJob"
    assert (
        schema_name(API, "GoogleCloudAiplatformV1CustomJob") == "GoogleCloudAiplatformV1CustomJob"
    )
    assert schema_name("tpu.v2", "QueuedResource") == "QueuedResource"
    assert load_document("tpu.v2")["name"] == "tpu"


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"displayName": "x"},
            ["jobSpec: required field missing (GoogleCloudAiplatformV1CustomJob)"],
        ),
        ({**_job(), "bogus": 1}, ["bogus: unknown field (GoogleCloudAiplatformV1CustomJob)"]),
        (
            {**_job(), "state": "JOB_STATE_RUNNING"},
            ["state: output-only field (GoogleCloudAiplatformV1CustomJob)"],
        ),
        ({**_job(), "labels": {"a": 1}}, ["labels[a]: expected string, got integer 1"]),
        ({**_job(), "labels": []}, ["labels: expected object, got array"]),
        (
            {"displayName": 3, "jobSpec": {"workerPoolSpecs": {}}},
            [
                "displayName: expected string, got integer 3",
                "jobSpec.workerPoolSpecs: expected array, got object",
            ],
        ),
        (
            _job(scheduling={"timeout": "1h", "restartJobOnWorkerRestart": "yes"}),
            [
                "jobSpec.scheduling.timeout: expected a duration like '3600s', got '1h'",
                "jobSpec.scheduling.restartJobOnWorkerRestart: expected boolean, got string 'yes'",
            ],
        ),
        (
            _job(scheduling={"strategy": "CHEAP"}),
            [
                "jobSpec.scheduling.strategy: 'CHEAP' is not one of STRATEGY_UNSPECIFIED, ON_DEMAND, "
                "LOW_COST, STANDARD, SPOT, FLEX_START"
            ],
        ),
    ],
)
def test_errors_are_exact(body: dict[str, object], errors: list[str]) -> None:
    assert validate_body(API, "CustomJob", body) == errors


def test_int64_must_be_a_string_and_int32_a_number() -> None:
    body = _job()
    pool = body["jobSpec"]["workerPoolSpecs"][0]  # type: ignore[index]
    pool["replicaCount"] = 2
    pool["machineSpec"] = {
        "machineType": "a2-highgpu-8g",
        "acceleratorCount": "8",
        "acceleratorType": "NVIDIA_TESLA_A101",
    }
    pool["diskSpec"] = {"bootDiskSizeGb": 2**31}
    prefix = "jobSpec.workerPoolSpecs[0]"
    assert validate_body(API, "CustomJob", body) == [
        f"{prefix}.machineSpec.acceleratorCount: expected integer (int32), got string '8'",
        f"{prefix}.machineSpec.acceleratorType: 'NVIDIA_TESLA_A101' is not one of "
        + ", ".join(load_document(API)["schemas"][MS]["properties"]["acceleratorType"]["enum"]),
        f"{prefix}.replicaCount: expected int64 as a decimal JSON string, got integer 2",
        f"{prefix}.diskSpec.bootDiskSizeGb: 2147483648 is out of range for int32 "
        "[-2147483648, 2147483647]",
    ]
    pool["replicaCount"] = "two"
    assert f"{prefix}.replicaCount: expected int64 as a decimal JSON string, got 'two'" in (
        validate_body(API, "CustomJob", body)
    )


def test_required_inside_nested_ref_and_unknown_sentinel() -> None:
    body = _job(baseOutputDirectory={})
    assert validate_body(API, "CustomJob", body) == [
        "jobSpec.baseOutputDirectory.outputUriPrefix: required field missing "
        "(GoogleCloudAiplatformV1GcsDestination)"
    ]
    sentinel = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    for unknown in (sentinel, Unknown()):
        job = _job(scheduling={"timeout": unknown})
        assert validate_body(API, "CustomJob", job, allow_unknowns=True) == []
    assert validate_body(API, "CustomJob", Unknown(), allow_unknowns=True) == []
    # Without allow_unknowns an unknown is an ordinary wrong value.
    assert validate_body(API, "CustomJob", Unknown()) == ["<body>: expected object, got Unknown"]


def test_assert_valid_lists_every_error() -> None:
    with pytest.raises(ValueError) as info:
        assert_valid(API, "CustomJob", {"bogus": True})
    assert str(info.value) == (
        "aiplatform.v1 CustomJob body is invalid (3 errors):\n"
        "  - bogus: unknown field (GoogleCloudAiplatformV1CustomJob)\n"
        "  - displayName: required field missing (GoogleCloudAiplatformV1CustomJob)\n"
        "  - jobSpec: required field missing (GoogleCloudAiplatformV1CustomJob)"
    )


@pytest.mark.parametrize(
    ("api", "schema", "message"),
    [
        ("aiplatform", "CustomJob", "api: 'aiplatform' is not of the form"),
        ("nope.v1", "X", "api: no bundled discovery document 'nope.v1.json'"),
        (API, "NoSuchThing", "schema: 'NoSuchThing' is not a schema of aiplatform.v1"),
    ],
)
def test_bad_names(api: str, schema: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        validate_body(api, schema, {})

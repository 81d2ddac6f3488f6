"""Physical names and labels from trainstack.components.naming."""

from __future__ import annotations

import re

import pytest

from trainstack.components.naming import (
    account_id,
    bucket_name,
    gcp_name,
    labels_input,
    merge_labels,
    validate_labels,
)

RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ACCOUNT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


@pytest.mark.parametrize(
    ("deployment", "role", "expected"),
    [
        ("exp-42", "net", "exp-42-net"),
        ("Exp_42", "Net", "exp-42-net"),
        ("exp..42--", "net", "exp-42-net"),
        ("42exp", "net", "ts-42exp-net"),
        ("-x-", "router", "x-router"),
    ],
)
def test_gcp_name_sanitizes(deployment: str, role: str, expected: str) -> None:
    assert gcp_name(deployment, role) == expected


def test_gcp_name_truncates_with_stable_distinct_hash() -> None:
    long_a = "a" * 80
    long_b = "a" * 79 + "b"
    name_a = gcp_name(long_a, "subnet")
    assert len(name_a) == 63
    assert RFC1035.match(name_a)
    assert name_a == gcp_name(long_a, "subnet")
    assert name_a != gcp_name(long_b, "subnet")
    assert name_a.startswith("a" * 54 + "-")


def test_gcp_name_respects_max_len() -> None:
    name = gcp_name("deployment-with-a-long-name", "role", max_len=20)
    assert len(name) <= 20
    assert RFC1035.match(name)


def test_gcp_name_rejects_unusable_input() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "deployment '...' and role '!!' contain no characters usable in a GCP name "
            "(a-z, 0-9, -)"
        ),
    ):
        gcp_name("...", "!!")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("my-project", "exp-42", "checkpoints"), "my-project-exp-42-checkpoints"),
        (("my-project", "exp-42", "data", "v2"), "my-project-exp-42-data-v2"),
        (("My_Project", "EXP", "staging"), "my-project-exp-staging"),
    ],
)
def test_bucket_name(args: tuple[str, ...], expected: str) -> None:
    assert bucket_name(*args) == expected


def test_bucket_name_long_is_63_and_valid() -> None:
    name = bucket_name("a-very-long-project-id-30chars", "an-even-longer-deployment-name", "data")
    assert len(name) == 63
    assert BUCKET.match(name)
    assert name == bucket_name(
        "a-very-long-project-id-30chars", "an-even-longer-deployment-name", "data"
    )


def test_bucket_name_rejects_google() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "bucket name 'google-x-data' must not start with 'goog' or contain 'google'"
        ),
    ):
        bucket_name("google", "x", "data")


@pytest.mark.parametrize(
    ("deployment", "role"),
    [("exp-42", "train"), ("a", "b"), ("x" * 40, "train"), ("Team.Exp_1", "sa")],
)
def test_account_id_rules(deployment: str, role: str) -> None:
    value = account_id(deployment, role)
    assert ACCOUNT_ID.match(value), value
    assert value == account_id(deployment, role)


def test_account_id_plain() -> None:
    assert account_id("exp-42", "train") == "exp-42-train"


def test_merge_labels_adds_identity() -> None:
    assert merge_labels({"team": "ml"}, "training-buckets") == {
        "component": "training-buckets",
        "managed-by": "trainstack",
        "team": "ml",
    }
    assert merge_labels(None, "x") == {"component": "x", "managed-by": "trainstack"}


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (
            {"component": "x"},
            "labels: 'component' is reserved by trainstack; valid: a key other than component, "
            "managed-by",
        ),
        (
            {"Team": "ml"},
            (
                "labels: 'Team' is not a valid label key; valid: a lowercase letter then up to "
                "62 of a-z, 0-9, '_', '-'"
            ),
        ),
        (
            {"team": "ML"},
            ("labels.team: 'ML' is not a valid label value; valid: up to 63 of a-z, 0-9, '_', '-'"),
        ),
    ],
)
def test_validate_labels_errors(labels: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_labels(labels)
    assert str(info.value) == message


def test_labels_input_plain_is_merged_now() -> None:
    assert labels_input({"team": "ml"}, "c") == {
        "component": "c",
        "managed-by": "trainstack",
        "team": "ml",
    }


def test_a_component_takes_labels_that_fit_with_its_own() -> None:
    # A component adds component, managed-by and at most one label of its own (a Vertex job's
    # request id, a queued TPU's spec digest) to Google's 64 ("No more than 64 labels can be
    # associated with a given resource", cloudresourcemanager.v3 discovery document).
    validate_labels({f"k{i}": "v" for i in range(61)})
    with pytest.raises(ValueError) as info:
        validate_labels({f"k{i}": "v" for i in range(62)})
    assert str(info.value) == (
        "labels: 62 labels plus the 3 trainstack sets on a resource (component, managed-by, and "
        "a Vertex job's or queued TPU's own) make 65, over the 64 Google Cloud allows on one "
        "resource; valid: at most 61 labels"
    )

"""ImageBuild's provider against a fake Cloud Build (tests/fakes/cloudbuild_server.py): the
build it submits, the pinned image it reports, its retries and its diff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.cloudbuild_server import CloudBuildFakeServer, Failure
from trainstack.components._cloud_build_provider import (
    ImageBuildError,
    ImageBuildProvider,
    build_script,
)
from trainstack.components._google_api import RetryPolicy
from trainstack.components.catalog.reduction_server import plugin_dockerfile

BASE = "us-central1-docker.pkg.dev/p/dep-dockerhub/pytorch/pytorch@sha256:" + "a" * 64
IMAGE = "us-central1-docker.pkg.dev/p/dep-built/pytorch-reduction-server:rs-0123456789abcdef"
DOCKERFILE = plugin_dockerfile(BASE)


@pytest.fixture
def server() -> Iterator[CloudBuildFakeServer]:
    with CloudBuildFakeServer() as fake:
        yield fake


def _props(server: CloudBuildFakeServer) -> dict[str, Any]:
    return {
        "project": "p",
        "location": "us-central1",
        "image": IMAGE,
        "dockerfile": DOCKERFILE,
        "service_account": "dep-build@p.iam.gserviceaccount.com",
        "api_endpoint": server.endpoint,
    }


def _provider(sleeps: list[float]) -> ImageBuildProvider:
    return ImageBuildProvider(
        retry=RetryPolicy(max_attempts=2, initial_delay_s=0.0, deadline_s=5.0),
        poll_interval_s=7.0,
        retry_delay_s=120.0,
        sleep=sleeps.append,
    )


def test_create_submits_one_docker_build_and_reports_the_pushed_digest(
    server: CloudBuildFakeServer,
) -> None:
    sleeps: list[float] = []
    result = _provider(sleeps).create(_props(server))
    [(_, path, body)] = server.calls("POST")
    assert path == "/v1/projects/p/locations/us-central1/builds"
    assert body == {
        "steps": [
            # The base image's pull first, a step of its own: its failure is the reader
            # grant's, which may be on its way, never the Dockerfile's.
            {"name": "gcr.io/cloud-builders/docker", "args": ["pull", BASE]},
            {
                "name": "gcr.io/cloud-builders/docker",
                "entrypoint": "bash",
                "args": [
                    "-c",
                    f"docker build --tag {IMAGE} - <<'TRAINSTACK_DOCKERFILE'\n{DOCKERFILE}"
                    "TRAINSTACK_DOCKERFILE\n",
                ],
            },
        ],
        "images": [IMAGE],
        "serviceAccount": "projects/p/serviceAccounts/dep-build@p.iam.gserviceaccount.com",
        "options": {"logging": "CLOUD_LOGGING_ONLY"},
        "timeout": "3600s",
        "tags": ["trainstack"],
    }
    digest = server.get_build("b0001")["results"]["images"][0]["digest"]
    assert result.id == "projects/p/locations/us-central1/builds/b0001"
    assert result.outs["digest"] == digest
    assert result.outs["image_uri"] == (
        f"us-central1-docker.pkg.dev/p/dep-built/pytorch-reduction-server@{digest}"
    )
    # Created QUEUED; read WORKING, one poll interval, read SUCCESS.
    assert [m for m, *_ in server.requests] == ["POST", "GET", "GET"]
    assert sleeps == [7.0]


def test_the_build_script_has_no_dollar_for_cloud_build_to_substitute() -> None:
    assert "$" not in build_script(IMAGE, DOCKERFILE)


@pytest.mark.parametrize(
    "failed",
    [
        Failure("PUSH_NOT_AUTHORIZED"),
        Failure("PUSH_FAILED"),
        Failure("LOGGING_FAILURE"),
        Failure("USER_BUILD_STEP", step=0),
        "INTERNAL_ERROR",
    ],
)
def test_a_build_a_late_grant_explains_is_built_again_then_succeeds(
    server: CloudBuildFakeServer, failed: str | Failure
) -> None:
    # The push (writer grant), the base image's pull (reader grant), logging (its grant;
    # "Should retry."), or Cloud Build itself: each may pass once the grant has arrived.
    server.outcomes = [failed]
    sleeps: list[float] = []
    result = _provider(sleeps).create(_props(server))
    assert [path for _, path, _ in server.calls("POST")] == [
        "/v1/projects/p/locations/us-central1/builds"
    ] * 2
    assert result.id == "projects/p/locations/us-central1/builds/b0002"
    assert sleeps == [7.0, 120.0, 7.0]


@pytest.mark.parametrize(
    ("failed", "ended"),
    [
        (
            Failure("USER_BUILD_STEP", step=1),
            "FAILURE (USER_BUILD_STEP): Build step 1 ended FAILURE (injected)",
        ),
        (
            Failure("PUSH_IMAGE_NOT_FOUND"),
            "FAILURE (PUSH_IMAGE_NOT_FOUND): the push ended FAILURE (injected)",
        ),
        ("FAILURE", "FAILURE: Build step 0 ended FAILURE (injected)"),
        ("TIMEOUT", "TIMEOUT: Build step 0 ended TIMEOUT (injected)"),
        ("CANCELLED", "CANCELLED: Build step 0 ended CANCELLED (injected)"),
        ("EXPIRED", "EXPIRED: Build step 0 ended EXPIRED (injected)"),
    ],
)
def test_a_build_no_grant_explains_fails_at_once(
    server: CloudBuildFakeServer, failed: str | Failure, ended: str
) -> None:
    # The Dockerfile's own build failing, a final image missing, a failure Cloud Build gave
    # no type, an hour's timeout, a cancel and an expired queue would only end so again.
    server.outcomes = [failed, "SUCCESS"]
    sleeps: list[float] = []
    with pytest.raises(ImageBuildError) as info:
        _provider(sleeps).create(_props(server))
    assert str(info.value) == (
        f"Cloud Build b0001 ended {ended} (logs: https://console.cloud.google.com/cloud-build/"
        "builds/b0001); not retried: no late grant explains it"
    )
    assert (len(server.calls("POST")), sleeps) == (1, [7.0])


def test_three_failed_builds_end_in_one_error_naming_the_last(
    server: CloudBuildFakeServer,
) -> None:
    server.outcomes = [
        Failure("PUSH_NOT_AUTHORIZED"),
        "INTERNAL_ERROR",
        Failure("USER_BUILD_STEP", 0),
    ]
    with pytest.raises(ImageBuildError) as info:
        _provider([]).create(_props(server))
    assert str(info.value) == (
        "Cloud Build b0003 ended FAILURE (USER_BUILD_STEP): Build step 0 ended FAILURE "
        "(injected) (logs: https://console.cloud.google.com/cloud-build/builds/b0003); gave "
        "up after 3 attempts"
    )


def test_diff_rebuilds_only_when_an_input_of_the_image_changes(
    server: CloudBuildFakeServer,
) -> None:
    provider = _provider([])
    olds = _provider([]).create(_props(server)).outs
    same = provider.diff("id", olds, _props(server))
    assert (same.changes, same.replaces) == (False, [])
    newer = {**_props(server), "dockerfile": plugin_dockerfile(BASE.replace("a" * 64, "b" * 64))}
    assert provider.diff("id", olds, newer).replaces == ["dockerfile"]
    moved = {**_props(server), "api_endpoint": server.endpoint.replace("127.0.0.1", "localhost")}
    diff = provider.diff("id", olds, moved)
    assert (diff.changes, diff.replaces) == (True, [])
    assert provider.update("id", olds, moved).outs["image_uri"] == olds["image_uri"]


def test_read_returns_the_build_and_a_gone_build_reads_as_gone(
    server: CloudBuildFakeServer,
) -> None:
    provider = _provider([])
    created = provider.create(_props(server))
    assert provider.read(created.id, created.outs).outs["image_uri"] == created.outs["image_uri"]
    gone = {**created.outs, "build_name": "projects/p/locations/us-central1/builds/nope"}
    assert provider.read("nope", gone).id is None


def test_check_refuses_an_untagged_image_and_a_dollar() -> None:
    news = {
        "project": "p",
        "location": "us-central1",
        "image": IMAGE.rsplit(":", 1)[0],
        "dockerfile": "FROM x\nRUN echo $HOME\n",
        "service_account": "a@p.iam.gserviceaccount.com",
    }
    failures = ImageBuildProvider().check({}, news).failures or []
    assert [(f.property, f.reason) for f in failures] == [
        ("image", f"{IMAGE.rsplit(':', 1)[0]!r} has no tag; valid: HOST/PATH:TAG"),
        ("dockerfile", "contains '$', which Cloud Build substitutes"),
    ]

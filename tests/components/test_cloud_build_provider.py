"""ImageBuild's provider against a fake Cloud Build (tests/fakes/cloudbuild_server.py): the
build it submits, the pinned image it reports, its retries and its diff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.cloudbuild_server import CloudBuildFakeServer
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
            {
                "name": "gcr.io/cloud-builders/docker",
                "entrypoint": "bash",
                "args": [
                    "-c",
                    f"docker build --tag {IMAGE} - <<'TRAINSTACK_DOCKERFILE'\n{DOCKERFILE}"
                    "TRAINSTACK_DOCKERFILE\n",
                ],
            }
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


def test_a_failed_build_is_built_again_then_succeeds(server: CloudBuildFakeServer) -> None:
    server.outcomes = ["FAILURE"]
    sleeps: list[float] = []
    result = _provider(sleeps).create(_props(server))
    assert [path for _, path, _ in server.calls("POST")] == [
        "/v1/projects/p/locations/us-central1/builds"
    ] * 2
    assert result.id == "projects/p/locations/us-central1/builds/b0002"
    assert sleeps == [7.0, 120.0, 7.0]


def test_three_failed_builds_end_in_one_error_naming_the_last(
    server: CloudBuildFakeServer,
) -> None:
    server.outcomes = ["FAILURE", "INTERNAL_ERROR", "TIMEOUT"]
    with pytest.raises(ImageBuildError) as info:
        _provider([]).create(_props(server))
    assert str(info.value) == (
        "Cloud Build b0003 ended TIMEOUT: Build step 0 ended TIMEOUT (injected) (logs: "
        "https://console.cloud.google.com/cloud-build/builds/b0003); gave up after 3 attempts"
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

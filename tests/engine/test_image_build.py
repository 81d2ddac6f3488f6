"""The Reduction Server plugin image's Cloud Build build (`ImageBuild`) through a stack's
whole life, driven the way the engine drives it (tests/engine/__init__.py), its HTTP calls
answered by tests/fakes/cloudbuild_server.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pulumi.runtime.proto import provider_pb2

from tests.engine.cases import DYNAMIC_RESOURCES, IMAGE_BUILD, IMAGE_BUILD_CASE
from tests.engine.double import EngineStack, Goal, PluginLaunch, plain, with_input
from tests.engine.programs import capture, sources
from tests.fakes.cloudbuild_server import CloudBuildFakeServer
from trainstack.components.catalog.reduction_server import plugin_dockerfile, plugin_image_tag

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE
DIFF_SOME = provider_pb2.DiffResponse.DIFF_SOME


@pytest.fixture
def fake() -> Iterator[CloudBuildFakeServer]:
    with CloudBuildFakeServer() as server:
        server.working_reads = 0  # a build ends at its first read: no poll interval here
        yield server


def _builds(goals: list[Goal], endpoint: str) -> list[Goal]:
    return [with_input(g, "api_endpoint", endpoint) for g in goals if g.type == IMAGE_BUILD]


def test_preview_up_refresh_update_rebuild_destroy(
    launch: PluginLaunch, fake: CloudBuildFakeServer
) -> None:
    stack, config = sources()[IMAGE_BUILD_CASE]
    first = _builds(capture(config, stack, first_preview=True), fake.endpoint)
    known = _builds(capture(config, stack, first_preview=False), fake.endpoint)
    assert [(g.type, g.name) for g in known] == DYNAMIC_RESOURCES[IMAGE_BUILD_CASE][:1]
    (goal,) = known
    engine = EngineStack(launch)

    # First preview: the build account's email is not known yet; Check passes, a create.
    preview = engine.preview(first)
    assert [m for m, _ in preview.calls] == ["Check"]
    assert [r.op for r in preview.results] == ["create"]
    assert fake.requests == [] and engine.state == {}

    # up: Check + Create; one build of the registered Dockerfile, pushed and pinned.
    up = engine.up(known)
    assert [m for m, _ in up.calls] == ["Check", "Create"]
    inputs = plain(goal.inputs)
    [(_, path, body)] = fake.calls("POST")
    assert path == "/v1/projects/my-ml-project/locations/us-central1/builds"
    assert body["images"] == [inputs["image"]]
    # The base image's pull, then the build of the Dockerfile.
    base = inputs["dockerfile"].split("\n", 1)[0].removeprefix("FROM ")
    assert body["steps"][0]["args"] == ["pull", base]
    assert body["steps"][1]["args"][1].split("\n", 1)[1] == (
        f"{inputs['dockerfile']}TRAINSTACK_DOCKERFILE\n"
    )
    outputs = plain(engine.state[goal.urn].outputs)
    digest = fake.get_build("b0001")["results"]["images"][0]["digest"]
    assert outputs["image_uri"] == f"{inputs['image'].rsplit(':', 1)[0]}@{digest}"
    assert engine.state[goal.urn].id == "projects/my-ml-project/locations/us-central1/builds/b0001"

    # No-op preview and up: the same inputs build nothing.
    for deployment in (engine.preview(known), engine.up(known)):
        assert [m for m, _ in deployment.calls] == ["Check", "Diff"]
        assert deployment.results[0].diff.changes == DIFF_NONE
    assert len(fake.calls("POST")) == 1

    # refresh: Read answers the same pinned image.
    refresh = engine.refresh()
    assert [m for m, _ in refresh.calls] == ["Read"]
    assert plain(engine.state[goal.urn].outputs)["image_uri"] == outputs["image_uri"]

    # In-place update: only the endpoint moves; no build.
    moved = [with_input(goal, "api_endpoint", fake.endpoint.replace("127.0.0.1", "localhost"))]
    update = engine.up(moved)
    assert [m for m, _ in update.calls] == ["Check", "Diff", "Update"]
    assert (update.results[0].diff.changes, list(update.results[0].diff.replaces)) == (
        DIFF_SOME,
        [],
    )
    assert len(fake.calls("POST")) == 1

    # A new base image digest: a new Dockerfile and tag, so a new build (created, then the
    # old one dropped: there is nothing to delete).
    base = "us-central1-docker.pkg.dev/my-ml-project/prod-vertex-rs-dockerhub/pytorch/pytorch"
    dockerfile = plugin_dockerfile(f"{base}@sha256:{'b' * 64}")
    image = f"{inputs['image'].rsplit(':', 1)[0]}:{plugin_image_tag(dockerfile)}"
    rebuilt = [with_input(with_input(goal, "dockerfile", dockerfile), "image", image)]
    replace = engine.up(rebuilt)
    assert [m for m, _ in replace.calls] == ["Check", "Diff", "Create", "Delete"]
    assert sorted(replace.results[0].diff.replaces) == ["dockerfile", "image"]
    assert fake.calls("POST")[-1][-1]["images"] == [image]
    assert plain(engine.state[goal.urn].outputs)["image_uri"].startswith(
        f"{image.rsplit(':', 1)[0]}@sha256:"
    )

    # destroy: Delete, no API call; nothing left in the state.
    before = len(fake.requests)
    destroy = engine.destroy()
    assert [m for m, _ in destroy.calls] == ["Delete"] and engine.state == {}
    assert len(fake.requests) == before

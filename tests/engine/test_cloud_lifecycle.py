"""Vertex jobs and the TPU queued resource through a stack's whole life, driven the way the
engine drives them (tests/engine/__init__.py), their HTTP calls answered by the fakes in
tests/fakes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pulumi.runtime.proto import provider_pb2

from tests.engine.cases import (
    DYNAMIC_RESOURCES,
    IMAGE_BUILD,
    QUEUED_RESOURCE,
    QUEUED_TPU,
    VERTEX_CASES,
    queued_variant,
    replaced,
)
from tests.engine.double import EngineStack, Goal, PluginLaunch, plain, with_input
from tests.engine.programs import capture, sources
from tests.fakes.tpu_server import TpuFakeServer
from tests.fakes.vertex_server import VertexFakeServer

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE
DIFF_SOME = provider_pb2.DiffResponse.DIFF_SOME


def _calls(deployment: Any) -> list[str]:
    return [method for method, _ in deployment.calls]


def _pointed(goals: list[Goal], endpoint: str) -> list[Goal]:
    return [with_input(goal, "api_endpoint", endpoint) for goal in goals]


def _jobs(goals: list[Goal]) -> list[Goal]:
    return [goal for goal in goals if goal.type != IMAGE_BUILD]


def _config(label: str) -> tuple[str, dict[str, Any]]:
    stack, config = sources()[label]
    return stack, queued_variant(config) if label == QUEUED_TPU else config


@pytest.fixture
def fake(label: str) -> Iterator[Any]:
    server = TpuFakeServer() if label == QUEUED_TPU else VertexFakeServer()
    with server:
        if isinstance(server, TpuFakeServer):
            server.plan_next(["ACTIVE"])  # capacity at once: create need not poll
        yield server


def _job_paths(fake: Any) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in fake.requests]


@pytest.mark.parametrize("label", [*VERTEX_CASES, QUEUED_TPU])
def test_preview_up_refresh_update_replace_destroy(
    launch: PluginLaunch, label: str, fake: Any
) -> None:
    stack, config = _config(label)
    first = _pointed(_jobs(capture(config, stack, first_preview=True)), fake.endpoint)
    captured = capture(config, stack, first_preview=False)
    expected = DYNAMIC_RESOURCES.get(label) or [(QUEUED_RESOURCE, f"{stack}-tpu-queued")]
    assert [(g.type, g.name) for g in captured] == expected
    # The plugin image's build has its own case (test_image_build.py).
    known = _pointed(_jobs(captured), fake.endpoint)
    (goal,) = known
    engine = EngineStack(launch)

    # First preview: every computed input unknown (the whole body); Check passes, the
    # engine plans a create and calls nothing else (no provider preview from this host).
    body = plain(first[0].inputs)["body"]
    assert body == "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    preview = engine.preview(first)
    assert (_calls(preview), [r.op for r in preview.results]) == (["Check"], ["create"])
    assert fake.requests == [] and engine.state == {}

    # up: Check + Create; the REST body is the one the program registered, integers intact.
    up = engine.up(known)
    assert (_calls(up), [r.op for r in up.results]) == (["Check", "Create"], ["create"])
    registered = plain(goal.inputs)["body"]
    sent = fake.calls("POST")[0][-1]
    assert sent == registered
    state = engine.state[goal.urn]
    outputs = plain(state.outputs)
    assert state.id == outputs.get("job_name", outputs.get("queued_resource_name"))

    # No-op preview and up: Diff answers DIFF_NONE after the float64 round trip.
    before = len(fake.requests)
    for deployment in (engine.preview(known), engine.up(known)):
        assert _calls(deployment) == ["Check", "Diff"]
        assert deployment.results[0].diff.changes == DIFF_NONE
    assert len(fake.requests) == before

    # refresh: Read, the live state comes back.
    refresh = engine.refresh()
    assert _calls(refresh) == ["Read"] and engine.state[goal.urn].id == state.id
    assert _job_paths(fake)[before][0] == "GET"

    # In-place update: only api_endpoint may change without a new job; no API call.
    moved = _pointed(known, fake.endpoint.replace("127.0.0.1", "localhost"))
    before = len(fake.requests)
    update = engine.up(moved)
    assert (_calls(update), update.results[0].op) == (["Check", "Diff", "Update"], "update")
    assert (update.results[0].diff.changes, list(update.results[0].diff.replaces)) == (
        DIFF_SOME,
        [],
    )
    assert len(fake.requests) == before
    assert engine.state[goal.urn].id == state.id

    # Replace: a trainer change changes the body; delete before replace, so the old job is
    # cancelled / deleted before the new one is submitted.
    changed = _pointed(_jobs(capture(replaced(config), stack, first_preview=False)), fake.endpoint)
    if isinstance(fake, TpuFakeServer):
        fake.plan_next(["ACTIVE"])
    before = len(fake.requests)
    replace = engine.up(changed)
    assert _calls(replace) == ["Check", "Diff", "Delete", "Create"]
    diff = replace.results[0].diff
    assert (list(diff.replaces), diff.deleteBeforeReplace) == (["body"], True)
    trail = _job_paths(fake)[before:]
    old, new = state.id, engine.state[goal.urn].id
    assert old != new or label == QUEUED_TPU  # a queued resource keeps its ID
    stopped = trail.index(
        ("POST", f"/v1/{old}:cancel") if label != QUEUED_TPU else ("DELETE", f"/v2/{old}")
    )
    submitted = max(i for i, (method, _) in enumerate(trail) if method == "POST")
    assert stopped < submitted
    assert fake.calls("POST")[-1][-1] == plain(changed[0].inputs)["body"]

    # destroy: Delete, nothing left.
    destroy = engine.destroy()
    assert _calls(destroy) == ["Delete"] and engine.state == {}
    remaining = fake.queued if label == QUEUED_TPU else fake.jobs
    assert remaining == {}

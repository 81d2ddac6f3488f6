"""A queued TPU resource that its supervisor requeued after a preemption, with `pulumi refresh`,
`preview` and `up` driven the way the engine drives the dynamic provider
(tests/engine/__init__.py):

- after the recovery, refresh reads back what `up` recorded and preview plans nothing;
- a refresh in the middle of it (the supervisor has deleted the suspended request) drops the
  resource from the state, preview plans exactly its create, and `pulumi up` then adopts the
  request the supervisor queued again (same id, same spec label) instead of a second one.

The supervisor runs as Cloud Functions runs it (Google's functions-framework serving the zip
the same stack's plan uploads, tests/components/test_tpu_supervisor_function.py), against the
TPU API fake the provider talks to, the metadata server fake and the GCS emulator (35 s for
both tests here: one emulator, then per test a functions-framework and 5 or 6 provider hosts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from pulumi.runtime.proto import provider_pb2

from tests.components.test_tpu_supervisor_function import Function, _planned_source, state_bucket
from tests.engine.cases import QUEUED_RESOURCE, QUEUED_TPU, queued_variant
from tests.engine.double import EngineStack, Goal, PluginLaunch, plain, with_input
from tests.engine.programs import capture, sources
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.metadata_fake import MetadataFake
from tests.fakes.tpu_server import TpuFakeServer
from trainstack.infra.plan import build_plan

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE
LOCATION = "projects/my-ml-project/locations/us-west4-a"
Bundle = tuple[str, dict[str, Any], Path, dict[str, Any]]
"""(stack, config, the supervisor's source folder, its config.json)."""


def _calls(deployment: Any) -> list[str]:
    return [method for method, _ in deployment.calls]


def _checkpoints(stack: str) -> str:
    return f"my-ml-project-{stack}-checkpoints"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """The queued variant of the stack and the supervisor zip its plan uploads."""
    stack, config = sources()[QUEUED_TPU]
    config = queued_variant(config)
    folder = tmp_path_factory.mktemp("queued")
    source, bundled = _planned_source(folder, build_plan(stack, config))
    return stack, config, source, bundled


@pytest.fixture(scope="module")
def gcs(bundle: Bundle) -> Iterator[str]:
    with running_gcs_emulator(_checkpoints(bundle[0])) as url:
        yield url


@pytest.fixture
def supervisor(gcs: str, bundle: Bundle) -> Iterator[tuple[Function, TpuFakeServer]]:
    """The function serving the bundle against a fresh TPU fake, no supervisor state yet."""
    stack = bundle[0]
    fs = fsspec.filesystem("gcs", endpoint_url=gcs, token="anon")
    # Its own bucket as `pulumi up` leaves it: the marker written after the slice.
    state_bucket(fs, bundle[3]["state_uri"].removeprefix("gs://"))
    account = json.dumps({"email": f"{stack}-sup@my-ml-project.iam.gserviceaccount.com"})
    with (
        TpuFakeServer() as tpu,
        MetadataFake({"instance/service-accounts/default/": account}) as metadata,
    ):
        function = Function(
            bundle[2],
            {
                "GCE_METADATA_HOST": metadata.host,
                "GCE_METADATA_IP": metadata.host,
                "STORAGE_EMULATOR_HOST": gcs,
                "TRAINSTACK_TPU_API_ENDPOINT": tpu.endpoint,
            },
        )
        try:
            yield function, tpu
        finally:
            function.stop()


def _up(launch: PluginLaunch, bundle: Bundle, tpu: TpuFakeServer) -> tuple[EngineStack, Goal]:
    """`pulumi up` of the stack against `tpu` (capacity at once), then a preemption."""
    stack, config, _, bundled = bundle
    (goal,) = [
        with_input(g, "api_endpoint", tpu.endpoint)
        for g in capture(config, stack, first_preview=False)
    ]
    assert (goal.type, goal.name) == (QUEUED_RESOURCE, f"{stack}-tpu-queued")
    # The supervisor recreates it with the id and body the provider creates it with.
    queued = f"{LOCATION}/queuedResources/{stack}-tpu-qr"
    assert (bundled["kind"], bundled["name"]) == ("queued", queued)
    assert bundled["body"] == plain(goal.inputs)["body"]
    engine = EngineStack(launch)
    tpu.plan_next(["ACTIVE"])
    engine.up([goal])
    tpu.preempt(f"{LOCATION}/nodes/{stack}-tpu")
    return engine, goal


def _requeue_call(tpu: TpuFakeServer, stack: str, goal: Goal) -> None:
    """The one create the supervisor sent: the same id and body as the program's."""
    [(_, path, query, created)] = tpu.calls("POST")
    assert (path, query["queuedResourceId"]) == (
        f"/v2/{LOCATION}/queuedResources",
        [f"{stack}-tpu-qr"],
    )
    assert created == plain(goal.inputs)["body"]


def test_after_the_supervisor_requeued_refresh_and_preview_show_no_change(
    launch: PluginLaunch, bundle: Bundle, supervisor: tuple[Function, TpuFakeServer]
) -> None:
    function, tpu = supervisor
    engine, goal = _up(launch, bundle, tpu)
    after_up = plain(engine.state[goal.urn].outputs)
    assert after_up["state"] == "ACTIVE"
    assert after_up["worker_ips"] == [f"10.130.0.{2 + i}" for i in range(4)]

    # Suspended: a refresh records exactly that; the program's inputs are unchanged, so
    # preview plans nothing (the supervisor, not `pulumi up`, brings the slice back).
    assert _calls(engine.refresh()) == ["Read"]
    suspended = plain(engine.state[goal.urn].outputs)
    assert (suspended["state"], suspended["worker_ips"]) == ("SUSPENDED", [])
    preview = engine.preview([goal])
    assert _calls(preview) == ["Check", "Diff"]
    assert preview.results[0].diff.changes == DIFF_NONE

    tpu.requests.clear()
    seen = [function.call() for _ in range(6)]
    assert [(e["seen"], e["action"], e["result"]) for e in seen] == [
        ("SUSPENDED", "delete", "ok"),
        ("NOT_FOUND", "create", "ok"),
        ("ACCEPTED", "none", "ok"),
        ("WAITING_FOR_RESOURCES", "none", "ok"),
        ("PROVISIONING", "none", "ok"),
        ("ACTIVE", "none", "recovered"),
    ]
    _requeue_call(tpu, bundle[0], goal)

    # Requeued: refresh reads back what `up` recorded; preview and up plan nothing and make
    # no call but reads.
    tpu.requests.clear()
    assert _calls(engine.refresh()) == ["Read"]
    assert plain(engine.state[goal.urn].outputs) == after_up
    for deployment in (engine.preview([goal]), engine.up([goal])):
        assert _calls(deployment) == ["Check", "Diff"]
        assert deployment.results[0].diff.changes == DIFF_NONE
    assert {r[0] for r in tpu.requests} == {"GET"}


def test_a_refresh_mid_recovery_plans_the_create_and_up_adopts_the_requeued_request(
    launch: PluginLaunch, bundle: Bundle, supervisor: tuple[Function, TpuFakeServer]
) -> None:
    function, tpu = supervisor
    engine, goal = _up(launch, bundle, tpu)
    after_up = plain(engine.state[goal.urn].outputs)
    tpu.requests.clear()
    deleted = function.call()
    assert (deleted["seen"], deleted["action"], deleted["result"]) == ("SUSPENDED", "delete", "ok")

    # Deleted, not yet queued again: refresh finds it gone; preview plans exactly a create.
    refresh = engine.refresh()
    assert (_calls(refresh), refresh.results[0].op) == (["Read"], "deleted")
    assert engine.state == {}
    preview = engine.preview([goal])
    assert (_calls(preview), [r.op for r in preview.results]) == (["Check"], ["create"])

    tpu.plan_next(["ACTIVE"])  # the supervisor's request finds capacity at once
    created = function.call()
    assert (created["seen"], created["action"], created["result"]) == ("NOT_FOUND", "create", "ok")
    _requeue_call(tpu, bundle[0], goal)

    # `pulumi up`: its create meets the supervisor's request (409) with the same spec label
    # and adopts it; one request, and the state is what the first `up` recorded.
    up = engine.up([goal])
    assert (_calls(up), [r.op for r in up.results]) == (["Check", "Create"], ["create"])
    posts = tpu.calls("POST")
    assert len(posts) == 2 and posts[1][-1] == posts[0][-1]
    assert len(tpu.queued) == 1
    assert plain(engine.state[goal.urn].outputs) == after_up
    recovered = function.call()
    assert (recovered["seen"], recovered["result"]) == ("ACTIVE", "recovered")

"""A queued TPU resource that its supervisor requeued after a preemption, then `pulumi refresh`
and `pulumi preview` driven the way the engine drives the dynamic provider
(tests/engine/__init__.py): the stack's state and the program agree with what the supervisor
made, so preview plans nothing.

The supervisor runs as Cloud Functions runs it (Google's functions-framework serving the zip
the same stack's plan uploads, tests/components/test_tpu_supervisor_function.py), against the
same TPU API fake the provider talks to, the metadata server fake and the GCS emulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pulumi.runtime.proto import provider_pb2

from tests.components.test_tpu_supervisor_function import Function, _planned_source
from tests.engine.cases import QUEUED_RESOURCE, QUEUED_TPU, queued_variant
from tests.engine.double import EngineStack, PluginLaunch, plain, with_input
from tests.engine.programs import capture, sources
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.metadata_fake import MetadataFake
from tests.fakes.tpu_server import TpuFakeServer
from trainstack.infra.plan import build_plan

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE


def _calls(deployment: Any) -> list[str]:
    return [method for method, _ in deployment.calls]


def test_refresh_and_preview_after_the_supervisor_requeued_show_no_change(
    launch: PluginLaunch, tmp_path: Path
) -> None:
    stack, config = sources()[QUEUED_TPU]
    config = queued_variant(config)
    location = "projects/my-ml-project/locations/us-west4-a"
    queued = f"{location}/queuedResources/{stack}-tpu-qr"
    node = f"{location}/nodes/{stack}-tpu"
    bucket = f"my-ml-project-{stack}-checkpoints"
    source, bundle = _planned_source(tmp_path, build_plan(stack, config))
    with (
        TpuFakeServer() as tpu,
        running_gcs_emulator(bucket) as gcs,
        MetadataFake(
            {"instance/service-accounts/default/": json.dumps({"email": "sup@p", "scopes": []})}
        ) as metadata,
    ):
        (goal,) = [
            with_input(g, "api_endpoint", tpu.endpoint)
            for g in capture(config, stack, first_preview=False)
        ]
        assert (goal.type, goal.name) == (QUEUED_RESOURCE, f"{stack}-tpu-queued")
        # The supervisor recreates it with the body the provider creates it with.
        assert (bundle["kind"], bundle["name"]) == ("queued", queued)
        assert bundle["body"] == plain(goal.inputs)["body"]

        engine = EngineStack(launch)
        tpu.plan_next(["ACTIVE"])  # capacity at once
        engine.up([goal])
        after_up = plain(engine.state[goal.urn].outputs)
        assert (after_up["state"], after_up["queued_resource_name"]) == ("ACTIVE", queued)
        assert after_up["worker_ips"] == [f"10.130.0.{2 + i}" for i in range(4)]

        # Preempted: Google suspends the queued resource and its node is gone. A refresh now
        # records exactly that; the program's inputs are unchanged, so preview plans nothing
        # (the supervisor, not `pulumi up`, brings the slice back).
        tpu.preempt(node)
        assert _calls(engine.refresh()) == ["Read"]
        suspended = plain(engine.state[goal.urn].outputs)
        assert (suspended["state"], suspended["worker_ips"]) == ("SUSPENDED", [])
        preview = engine.preview([goal])
        assert _calls(preview) == ["Check", "Diff"]
        assert preview.results[0].diff.changes == DIFF_NONE

        function = Function(
            source,
            {
                "GCE_METADATA_HOST": metadata.host,
                "GCE_METADATA_IP": metadata.host,
                "STORAGE_EMULATOR_HOST": gcs,
                "TRAINSTACK_TPU_API_ENDPOINT": tpu.endpoint,
            },
        )
        try:
            tpu.requests.clear()
            seen = [function.call() for _ in range(6)]
        finally:
            function.stop()
        assert [(e["seen"], e["action"], e["result"]) for e in seen] == [
            ("SUSPENDED", "delete", "ok"),
            ("NOT_FOUND", "create", "ok"),
            ("ACCEPTED", "none", "ok"),
            ("WAITING_FOR_RESOURCES", "none", "ok"),
            ("PROVISIONING", "none", "ok"),
            ("ACTIVE", "none", "recovered"),
        ]
        [(_, path, query, created)] = tpu.calls("POST")
        assert (path, query["queuedResourceId"]) == (
            f"/v2/{location}/queuedResources",
            [f"{stack}-tpu-qr"],
        )
        assert created == plain(goal.inputs)["body"]

        # Requeued: refresh reads back what `up` recorded, and preview and up plan nothing
        # and call nothing but the reads.
        tpu.requests.clear()
        assert _calls(engine.refresh()) == ["Read"]
        assert plain(engine.state[goal.urn].outputs) == after_up
        for deployment in (engine.preview([goal]), engine.up([goal])):
            assert _calls(deployment) == ["Check", "Diff"]
            assert deployment.results[0].diff.changes == DIFF_NONE
        assert {r[0] for r in tpu.requests} == {"GET"}

"""The TPU queued-resource dynamic provider over real HTTP against the local fake TPU API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import trainstack.components._tpu_queued_provider as qrp
from tests.fakes.tpu_server import TpuFakeServer
from trainstack.components._discovery import validate_body
from trainstack.components._google_api import RetryPolicy
from trainstack.components._tpu_queued_provider import (
    QueuedResourceConflictError,
    QueuedResourceFailedError,
    QueuedResourceProvider,
    QueuedResourceTimeoutError,
)
from trainstack.components.naming import merge_labels
from trainstack.components.tpu_pod_slice import node_body, queued_resource_body, validate_args

FAST = RetryPolicy(max_attempts=4, initial_delay_s=0.01, max_delay_s=0.02, deadline_s=5)
PARENT = "projects/p/locations/us-central2-b"
NAME = f"{PARENT}/queuedResources/exp-42-tpu-qr"
NODE = f"{PARENT}/nodes/exp-42-tpu"
IPS = ["10.130.0.2", "10.130.0.3", "10.130.0.4", "10.130.0.5"]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture
def server() -> Iterator[TpuFakeServer]:
    with TpuFakeServer() as fake:
        yield fake


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    messages: list[str] = []
    monkeypatch.setattr(qrp, "_log", messages.append)
    return messages


def _provider(**kw: Any) -> QueuedResourceProvider:
    settings: dict[str, Any] = {
        "retry": FAST,
        "poll_interval_s": 0.0,
        "progress_every_s": 3600.0,
        "delete_timeout_s": 5,
        **kw,
    }
    return QueuedResourceProvider(**settings)


def _props(
    server: TpuFakeServer, steps: int = 1000, tier: str = "spot", **extra: Any
) -> dict[str, Any]:
    plan = validate_args(
        {
            "zone": "us-central2-b",
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
            "provisioning": "queued",
            "queued": {"tier": tier},
        }
    )
    node = node_body(
        plan=plan,
        runtime_version="tpu-vm-tf-2.16.0-pod-pjrt",
        description="trainstack TPU slice v4-32",
        network="https://www.googleapis.com/compute/v1/projects/p/global/networks/exp-42-net",
        subnetwork="projects/p/regions/us-central2/subnetworks/exp-42-subnet",
        service_account_email="exp-42-train@p.iam.gserviceaccount.com",
        startup_script=f"#!/bin/bash\necho --steps={steps}\n",
        labels=merge_labels({"team": "ml"}, "tpu-pod-slice"),
        network_tags=["exp-42-train-node"],
        data_disks=[],
    )
    body = queued_resource_body(
        project="p", zone="us-central2-b", node_id="exp-42-tpu", node=node, tier=tier,
        valid_until_s=7200,
    )  # fmt: skip
    return {
        "project": "p",
        "zone": "us-central2-b",
        "queued_resource_id": "exp-42-tpu-qr",
        "node_id": "exp-42-tpu",
        "body": body,
        "wait_timeout_s": 60,
        "api_endpoint": server.endpoint,
        **extra,
    }


def _create(
    props: dict[str, Any], provider: QueuedResourceProvider | None = None
) -> dict[str, Any]:
    """Create and return the outputs (what the engine records as the resource's state)."""
    result = (provider or _provider()).create(props)
    assert result.id == NAME and result.outs is not None
    return result.outs


def _outs(props: dict[str, Any]) -> dict[str, Any]:
    return {
        **props,
        "queued_resource_name": NAME,
        "state": "ACTIVE",
        "worker_ips": IPS,
        "console_url": "https://console.cloud.google.com/compute/tpus/details/us-central2-b/"
        "exp-42-tpu?project=p",
    }


def _trail(server: TpuFakeServer) -> list[tuple[str, str]]:
    return [(method, path.removeprefix("/v2/")) for method, path, _, _ in server.requests]


def test_create_queues_waits_for_active_and_reads_worker_ips(
    server: TpuFakeServer, logs: list[str]
) -> None:
    props = _props(server)
    result = _provider().create(props)
    assert result.id == NAME
    assert result.outs == _outs(props)
    assert _trail(server) == [
        ("POST", f"{PARENT}/queuedResources"),
        *[("GET", NAME)] * 4,
        ("GET", NODE),
    ]
    _, _, query, body = server.requests[0]
    assert query["queuedResourceId"] == ["exp-42-tpu-qr"]
    assert UUID.match(query["requestId"][0])
    assert body == props["body"]  # the exact body goes on the wire
    assert validate_body("tpu.v2", "QueuedResource", body) == []
    assert body["spot"] == {} and body["queueingPolicy"] == {"validUntilDuration": "7200s"}
    assert [re.sub(r"after \d+s", "after Ns", m) for m in logs] == [
        f"queued {NAME}",
        f"{NAME}: ACCEPTED after Ns",
        f"{NAME}: WAITING_FOR_RESOURCES after Ns",
        f"{NAME}: PROVISIONING after Ns",
        f"{NAME} is ACTIVE; workers {', '.join(IPS)}",
    ]


def test_waiting_reports_progress_then_times_out_and_deletes(
    server: TpuFakeServer, logs: list[str]
) -> None:
    server.plan_next(["ACCEPTED", "WAITING_FOR_RESOURCES"])
    props = _props(server, wait_timeout_s=0.3)
    provider = _provider(poll_interval_s=0.02, progress_every_s=0.1)
    with pytest.raises(QueuedResourceTimeoutError) as info:
        provider.create(props)
    assert str(info.value) == (
        f"{NAME} was still WAITING_FOR_RESOURCES after 0s (wait_timeout_s). It was deleted, "
        "so nothing is left queued; raise wait_timeout_s (or set a queueing deadline with "
        "valid_until_s) and run `pulumi up` again"
    )
    assert any(m.startswith(f"{NAME}: still WAITING_FOR_RESOURCES after") for m in logs)
    deletes = server.calls("DELETE")
    assert len(deletes) == 1 and deletes[0][2]["force"] == ["true"]
    assert server.queued == {}


def test_failed_surfaces_the_api_reason_and_leaves_nothing_queued(
    server: TpuFakeServer, logs: list[str]
) -> None:
    reason = 'There is no more capacity in the zone "us-central2-b"'
    server.plan_next(["ACCEPTED", "PROVISIONING", "FAILED"], error=(8, reason))
    with pytest.raises(QueuedResourceFailedError) as info:
        _provider().create(_props(server))
    assert str(info.value) == (
        f"{NAME} is FAILED: {reason} (code 8). It was deleted, so nothing is left queued; "
        "fix the cause (quota, capacity, reservation) and run `pulumi up` again"
    )
    assert server.calls("DELETE")[0][2]["force"] == ["true"]
    assert server.queued == {} and server.nodes == {}
    assert logs[-1] == f"{NAME} deleted"


def test_transient_429_and_503_are_retried_with_one_request_id(server: TpuFakeServer) -> None:
    server.fail_next(1, 429, "POST")
    server.fail_next(1, 503, "POST")
    server.fail_next(1, 503, "GET")
    assert _create(_props(server))["state"] == "ACTIVE"
    posts = server.calls("POST")
    assert len(posts) == 3
    assert len({tuple(q["requestId"]) for _, _, q, _ in posts}) == 1
    assert list(server.queued) == [NAME]


def test_lost_create_response_is_resent_with_the_same_request_id(server: TpuFakeServer) -> None:
    server.drop_after_create()
    assert _create(_props(server))["worker_ips"] == IPS
    posts = server.calls("POST")
    assert len(posts) == 2 and posts[0][2]["requestId"] == posts[1][2]["requestId"]
    assert list(server.queued) == [NAME]  # the API deduplicated the resent request


def test_interrupted_up_adopts_its_own_request(server: TpuFakeServer, logs: list[str]) -> None:
    server.plan_next(["ACCEPTED", "WAITING_FOR_RESOURCES", "ACTIVE"])
    props = _props(server)
    # An earlier `pulumi up` queued the request and was killed before it recorded anything.
    provider = _provider()
    provider._submit(provider._client(props), props, PARENT)
    assert _create(props, provider) == _outs(props)
    assert len(server.calls("POST")) == 2 and list(server.queued) == [NAME]
    assert f"adopting {NAME} (ACCEPTED), queued by an earlier run with the same spec" in logs


def test_a_dead_leftover_with_the_same_spec_is_replaced(
    server: TpuFakeServer, logs: list[str]
) -> None:
    props = _props(server)
    _create(props)
    server.hold(NAME, "FAILED")
    assert _create(props)["state"] == "ACTIVE"
    assert f"{NAME} exists from an earlier attempt but is FAILED; replacing it" in logs
    assert [m for m, _ in _trail(server)].count("DELETE") == 1


def test_a_foreign_request_with_the_same_id_is_a_conflict(server: TpuFakeServer) -> None:
    _provider().create(_props(server, steps=1000))
    with pytest.raises(QueuedResourceConflictError) as info:
        _provider().create(_props(server, steps=2000))
    mine = _props(server, steps=2000)["body"]["tpu"]["nodeSpec"][0]["node"]["labels"]
    theirs = _props(server)["body"]["tpu"]["nodeSpec"][0]["node"]["labels"]
    assert str(info.value) == (
        f"{NAME} already exists (ACTIVE) with a different spec (label trainstack_spec "
        f"{theirs['trainstack_spec']!r}, this program's {mine['trainstack_spec']!r}); it was "
        "not created by this stack's current config. Delete it (gcloud compute tpus "
        "queued-resources delete exp-42-tpu-qr --zone us-central2-b --force) or choose "
        "another deployment name"
    )


def test_delete_forces_waits_until_gone_and_404_means_gone(
    server: TpuFakeServer, logs: list[str]
) -> None:
    created = _create(_props(server))
    server.requests.clear()
    server.fail_next(1, 503, "DELETE")
    _provider().delete(NAME, created)
    assert _trail(server) == [("DELETE", NAME), ("DELETE", NAME), ("GET", NAME)]
    assert server.requests[1][2]["force"] == ["true"]
    assert server.queued == {} and server.nodes == {}
    _provider().delete(NAME, created)  # already gone: 404 is success
    assert logs[-1] == f"{NAME} is already gone"


def test_diff_replaces_on_spec_changes_and_updates_the_rest(server: TpuFakeServer) -> None:
    provider = _provider()
    old = _create(_props(server), provider)
    new = _props(server, steps=2000)
    diff = provider.diff(NAME, old, new)
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["body"], True)
    longer = {**_props(server), "wait_timeout_s": 7200}
    diff = provider.diff(NAME, old, longer)
    assert (diff.changes, diff.replaces) == (True, [])
    assert provider.diff(NAME, old, _props(server)).changes is False
    assert provider.update(NAME, old, longer).outs == {**_outs(longer)}
    # Replace: the engine deletes first (delete_before_replace), then creates.
    provider.delete(NAME, old)
    _create(new, provider)
    sent = server.calls("POST")[-1][3]
    assert sent == new["body"] and sent != old["body"]


def test_check_validates_the_body_against_the_discovery_schema(server: TpuFakeServer) -> None:
    provider = _provider()
    good = _props(server)
    assert provider.check({}, good).failures == []
    bad = _props(server)
    node = bad["body"]["tpu"]["nodeSpec"][0]["node"]
    node["acceleratorConfig"]["type"] = "V9"
    node["networkConfig"]["queueCount"] = 2.0  # a double, as Pulumi delivers numbers
    failures = [(f.property, f.reason) for f in provider.check({}, bad).failures]
    assert failures == [
        (
            "body",
            "tpu.nodeSpec[0].node.acceleratorConfig.type: 'V9' is not one of "
            "TYPE_UNSPECIFIED, V2, V3, V4, V5LITE_POD, V5P, V6E",
        )
    ]
    assert bad["body"]["tpu"]["nodeSpec"][0]["node"]["networkConfig"]["queueCount"] == 2
    unlabeled = _props(server)
    del unlabeled["body"]["tpu"]["nodeSpec"][0]["node"]["labels"]["trainstack_spec"]
    wrong_node = {**_props(server), "node_id": "other-tpu"}
    assert [f.reason for f in provider.check({}, unlabeled).failures] == [
        "tpu.nodeSpec[0].node.labels.trainstack_spec is required"
    ]
    assert [f.reason for f in provider.check({}, wrong_node).failures] == [
        "tpu.nodeSpec[0].nodeId: expected 'other-tpu' (node_id), got 'exp-42-tpu'"
    ]
    assert [
        (f.property, f.reason) for f in provider.check({}, {**good, "node_id": "Bad_"}).failures
    ] == [
        (
            "node_id",
            "'Bad_' is not a valid ID (a lowercase letter, then up to 62 of a-z, 0-9 and '-', "
            "not ending with '-')",
        )
    ]


def test_read_reports_live_state_and_gone(server: TpuFakeServer) -> None:
    created = _create(_props(server))
    read = _provider().read(NAME, created)
    assert read.id == NAME and read.outs == created
    server.hold(NAME, "SUSPENDED")
    suspended = _provider().read(NAME, created).outs
    assert suspended is not None and suspended["state"] == "SUSPENDED"
    server.queued.clear()
    assert _provider().read(NAME, created).id is None


def test_retries_are_bounded(server: TpuFakeServer) -> None:
    server.fail_next(10, 503)
    with pytest.raises(Exception, match=r"HTTP 503: UNAVAILABLE injected fault \(gave up after 4"):
        _provider().create(_props(server))
    assert len(server.requests) == 4 and server.queued == {}

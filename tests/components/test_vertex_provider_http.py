"""The Vertex dynamic provider over real HTTP against the local fake Vertex server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.vertex_server import VertexFakeServer
from trainstack.components._google_api import RetryPolicy
from trainstack.components._vertex_provider import (
    JobDeleteTimeoutError,
    VertexJobProvider,
    job_status,
)
from trainstack.components.vertex_training_job import custom_job_body

FAST = RetryPolicy(max_attempts=4, initial_delay_s=0.01, max_delay_s=0.02, deadline_s=5)
PARENT = "/v1/projects/p/locations/us-central1/customJobs"


@pytest.fixture
def server() -> Iterator[VertexFakeServer]:
    with VertexFakeServer() as fake:
        yield fake


def _provider(**kw: Any) -> VertexJobProvider:
    return VertexJobProvider(retry=FAST, poll_interval_s=0.0, **{"delete_timeout_s": 5, **kw})


def _props(server: VertexFakeServer, steps: int = 10) -> dict[str, Any]:
    body = custom_job_body(
        display_name="exp",
        region="us-central1",
        machine_type="n1-standard-4",
        replica_count=1,
        container_image_uri="gcr.io/p/t:1",
        trainer_args=[f"--steps={steps}"],
    )
    return {
        "project": "p",
        "region": "us-central1",
        "kind": "customJobs",
        "body": body,
        "api_endpoint": server.endpoint,
    }


def test_create_returns_at_once_with_outputs(server: VertexFakeServer) -> None:
    props = _props(server)
    result = _provider().create(props)
    name = "projects/p/locations/us-central1/customJobs/1000"
    assert result.id == name
    assert result.outs == {
        **props,
        "job_name": name,
        "state": "JOB_STATE_QUEUED",
        "console_url": "https://console.cloud.google.com/ai/platform/locations/"
        "us-central1/training/1000?project=p",
    }
    assert [(m, p) for m, p, _ in server.requests] == [("GET", PARENT), ("POST", PARENT)]
    assert server.calls("POST")[0][2] == props["body"]  # the exact body goes on the wire


def test_create_retries_429_and_503(server: VertexFakeServer) -> None:
    server.fail_next(1, 429, "GET")  # the pre-create lookup
    server.fail_next(1, 503, "GET")  # ...its retry; the third lookup succeeds
    server.fail_next(1, 503, "POST")  # a 5xx POST may have created a job
    result = _provider().create(_props(server))
    assert result.outs["state"] == "JOB_STATE_QUEUED"
    # A failed POST is resent only after a lookup by request id found nothing.
    assert [m for m, _, _ in server.requests] == ["GET", "GET", "GET", "POST", "GET", "POST"]
    assert len(server.jobs) == 1


def test_lost_create_response_adopts_the_job_instead_of_resubmitting(
    server: VertexFakeServer,
) -> None:
    server.drop_after_create()
    result = _provider().create(_props(server))
    assert len(server.jobs) == 1 and result.id in server.jobs
    assert [m for m, _, _ in server.requests] == ["GET", "POST", "GET"]


def test_rerun_create_adopts_a_live_job_but_not_a_finished_one(server: VertexFakeServer) -> None:
    first = _provider().create(_props(server))
    assert _provider().create(_props(server)).id == first.id  # e.g. a killed `pulumi up`
    server.set_state(first.id, "JOB_STATE_SUCCEEDED")
    assert _provider().create(_props(server)).id != first.id
    assert len(server.jobs) == 2


def test_delete_cancels_waits_then_deletes(server: VertexFakeServer) -> None:
    created = _provider().create(_props(server))
    _provider().delete(created.id, created.outs)
    assert server.jobs == {}
    name = f"/v1/{created.id}"
    assert [(m, p) for m, p, _ in server.requests[2:]] == [
        ("POST", f"{name}:cancel"),
        ("GET", name),
        ("DELETE", name),
    ]


def test_delete_of_finished_job_and_404s(server: VertexFakeServer) -> None:
    created = _provider().create(_props(server))
    server.set_state(created.id, "JOB_STATE_FAILED")
    server.fail_next(1, 503)
    _provider().delete(created.id, created.outs)  # cancel: 503 retried, then 400 ignored
    assert server.jobs == {}
    _provider().delete(created.id, created.outs)  # 404 on cancel: already gone
    assert server.requests[-1][1] == f"/v1/{created.id}:cancel"


def test_delete_times_out_when_the_job_will_not_stop(server: VertexFakeServer) -> None:
    created = _provider().create(_props(server))
    server.set_state(created.id, "JOB_STATE_RUNNING")
    # The job sticks in CANCELLING: every GET answers 200 CANCELLING.
    original = server.handle

    def sticky(method: str, path: str, body: Any) -> Any:
        answer = original(method, path, body)
        if created.id in server.jobs:
            server.jobs[created.id]["state"] = "JOB_STATE_CANCELLING"
        return answer

    server.handle = sticky  # type: ignore[method-assign]
    with pytest.raises(JobDeleteTimeoutError, match="still JOB_STATE_CANCELLING after 0s"):
        _provider(delete_timeout_s=0).delete(created.id, created.outs)
    assert created.id in server.jobs


def test_replace_diff_and_check(server: VertexFakeServer) -> None:
    provider = _provider()
    old = provider.create(_props(server)).outs
    new = _props(server, steps=20)
    diff = provider.diff(old["job_name"], old, new)
    # Delete before replace: a new job beside the old one needs twice the quota at submit
    # time (429) and both would write one checkpoint folder.
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["body"], True)
    assert provider.diff("x", old, {**old, "api_endpoint": "http://x/"}).replaces == []
    assert provider.diff("x", old, dict(old)).changes is False
    # Replace = the engine cancels and deletes the old job, then submits the new one.
    server.requests.clear()
    provider.delete(old["job_name"], old)
    replacement = provider.create(new)
    assert list(server.jobs) == [replacement.id]
    old_path, jobs_path = f"/v1/{old['job_name']}", PARENT
    assert [(m, p) for m, p, _ in server.requests] == [
        ("POST", f"{old_path}:cancel"),
        ("GET", old_path),
        ("DELETE", old_path),
        ("GET", jobs_path),
        ("POST", jobs_path),
    ]
    assert provider.check({}, new).failures == []
    bad = {**new, "body": {**new["body"], "displayName": 1}}
    assert [(f.property, f.reason) for f in provider.check({}, bad).failures] == [
        ("body", "displayName: expected string, got integer 1")
    ]


def test_read_and_job_status(server: VertexFakeServer) -> None:
    created = _provider().create(_props(server))
    read = _provider().read(created.id, created.outs)
    assert read.outs is not None and read.outs["state"] == "JOB_STATE_PENDING"
    status = job_status("p", "us-central1", created.id, api_endpoint=server.endpoint)
    assert status["state"] == "JOB_STATE_RUNNING" and status["display_name"] == "exp"
    server.jobs.clear()
    assert _provider().read(created.id, created.outs).id is None
    assert job_status("p", "us-central1", created.id, server.endpoint)["state"] == "NOT_FOUND"


def test_retries_are_bounded(server: VertexFakeServer) -> None:
    server.fail_next(10, 503)
    with pytest.raises(Exception, match=r"HTTP 503: UNAVAILABLE injected fault \(gave up after 4"):
        _provider().read(
            "projects/p/locations/us-central1/customJobs/1",
            {**_props(server), "job_name": "projects/p/locations/us-central1/customJobs/1"},
        )
    assert len(server.requests) == 4


def test_numbers_that_arrive_as_doubles_are_sent_as_integers(server: VertexFakeServer) -> None:
    props = _props(server)
    pool = props["body"]["jobSpec"]["workerPoolSpecs"][0]
    pool["diskSpec"]["bootDiskSizeGb"] = 100.0  # how Pulumi's Struct hands it over
    checked = _provider().check({}, props)
    assert checked.failures == []
    _provider().create(checked.inputs)
    sent = server.calls("POST")[0][2]["jobSpec"]["workerPoolSpecs"][0]["diskSpec"]
    assert sent == {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}
    assert type(sent["bootDiskSizeGb"]) is int

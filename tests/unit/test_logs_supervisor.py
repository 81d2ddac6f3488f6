"""`trainstack logs` of a stack with a run supervisor: the supervisor's actions come in the
same time-ordered stream as the trainers' lines, over real HTTP against the Cloud Logging
fake. The supervisor's entries have the shape Cloud Run gives a function's structured stdout
line (tests/components/test_tpu_supervisor_function.py asserts the line it prints): the
resource is its Cloud Run revision, the JSON object is the `jsonPayload`, and `severity`
becomes the entry's own field (https://cloud.google.com/logging/docs/structured-logging,
"Special JSON fields")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import REPO_ROOT
from tests.fakes.logging_server import LoggingFakeServer, stdout_entry
from tests.unit.test_logs import PROJECT, entry, runner, tpu_resource, train
from trainstack.infra.cli import app
from trainstack.infra.log_source import supervisor_function
from trainstack.infra.logs import render, supervisor_event_text

STACK = "dev-tpu-v5e"
NODE = f"projects/{PROJECT}/locations/us-west4-a/nodes/{STACK}-tpu"
OUTPUTS = {
    "target": "tpu",
    "slice_name": f"{STACK}-tpu",
    "tpu_hosts": 4,
    "supervisor_events_uri": f"gs://{PROJECT}-{STACK}-checkpoints/supervisor/{STACK}/events.jsonl",
}
TRAINERS = (
    'resource.type="tpu_worker" AND resource.labels.node_id="dev-tpu-v5e-tpu"'
)  # fmt: skip


def run_resource(service: str = f"{STACK}-supervisor") -> dict[str, Any]:
    labels = {
        "service_name": service,
        "revision_name": f"{service}-00001-xiz",
        "configuration_name": service,
        "location": "us-west4",
        "project_id": PROJECT,
    }
    return {"type": "cloud_run_revision", "labels": labels}


def event(n: int, seen: str, action: str, result: str, **extra: Any) -> dict[str, Any]:
    return {
        "time": f"2026-11-23T10:00:{n:02d}Z",
        "resource": NODE,
        "seen": seen,
        "action": action,
        "result": result,
        "attempt": 0,
        "next_allowed": None,
        **extra,
    }


def logged(n: int, record: dict[str, Any], severity: str, **resource: str) -> dict[str, Any]:
    """The entry Cloud Logging keeps of the line the supervisor prints for `record`."""
    message = f"supervisor: {record['seen']} -> {record['action']}: {record['result']}"
    line = json.dumps({**record, "severity": severity, "message": message}, sort_keys=True)
    stamp = f"2026-11-23T10:00:{n:02d}.123456789Z"
    return stdout_entry(PROJECT, run_resource(**resource), line, stamp)


def request_log(n: int) -> dict[str, Any]:
    """The request log Cloud Run keeps of a scheduler call: no payload."""
    logged = entry(n, run_resource(), "", log="run.googleapis.com%2Frequests")
    del logged["textPayload"]
    return {**logged, "httpRequest": {"requestMethod": "POST", "status": 200}}


PREEMPTED = event(3, "PREEMPTED", "delete", "ok")
REFUSED = event(
    7,
    "NOT_FOUND",
    "create",
    "error: HTTP 429: no more capacity in the zone",
    attempt=1,
    next_allowed="2026-11-23T10:02:07Z",
)


def run_logs(outputs_file: Path, server: LoggingFakeServer, *args: str) -> tuple[int, str, str]:
    outputs_file.write_text(json.dumps(OUTPUTS))
    argv = ["logs", "--stack", STACK, "--outputs", str(outputs_file)]
    result = runner.invoke(app, [*argv, "--endpoint", f"logging={server.endpoint}", *args])
    return result.exit_code, result.stdout, result.stderr


def test_trainer_and_supervisor_lines_in_one_stream_and_one_machine_alone(tmp_path: Path) -> None:
    outputs_file = tmp_path / "outputs.json"
    with LoggingFakeServer() as server:
        server.add(
            entry(1, tpu_resource(0), train(20, 0, 0)),
            logged(3, PREEMPTED, "NOTICE"),
            # Another stack's supervisor, and this one's request log (no payload).
            logged(4, PREEMPTED, "NOTICE", service="prod-tpu-v4-32-supervisor"),
            request_log(5),
            entry(6, tpu_resource(1), train(20, 1, 1)),
            logged(7, REFUSED, "WARNING"),
            entry(8, tpu_resource(0, node="other-tpu"), train(20, 0, 0)),
        )
        code, out, err = run_logs(outputs_file, server)
        assert server.requests[-1][2]["filter"] == (
            f'(({TRAINERS}) OR (resource.type="cloud_run_revision" AND '
            f'resource.labels.service_name="{STACK}-supervisor" AND jsonPayload.action:*))'
        )
        assert (code, err) == (0, "")
        assert out.splitlines() == [
            "10:00:01 node 0 rank 0 train step 20 loss 2.3000 812.2 samples/s",
            "10:00:03 supervisor: node PREEMPTED -> delete: ok",
            "10:00:06 node 1 rank 1 train step 20 loss 2.3000 812.2 samples/s",
            "10:00:07 supervisor: node NOT_FOUND -> create: failed (HTTP 429: no more capacity "
            "in the zone): next try after 2026-11-23T10:02:07Z",
        ]
        code, out, err = run_logs(outputs_file, server, "--worker", "1")
        assert server.requests[-1][2]["filter"] == f'{TRAINERS} AND resource.labels.worker_id="1"'
        assert (code, out, err) == (
            0,
            "10:00:06 node 1 rank 1 train step 20 loss 2.3000 812.2 samples/s\n",
            "",
        )


def test_json_prints_the_supervisor_record(tmp_path: Path) -> None:
    with LoggingFakeServer() as server:
        server.add(logged(3, PREEMPTED, "NOTICE"))
        code, out, err = run_logs(tmp_path / "outputs.json", server, "--json")
    assert (code, err) == (0, "")
    assert [json.loads(line) for line in out.splitlines()] == [
        {**PREEMPTED, "message": "supervisor: PREEMPTED -> delete: ok"}
    ]


@pytest.mark.parametrize(
    ("record", "text"),
    [
        (event(1, "PREEMPTED", "delete", "ok"), "node PREEMPTED -> delete: ok"),
        (
            event(1, "PREEMPTED", "delete", "error: HTTP 403: Permission denied"),
            "node PREEMPTED -> delete: failed (HTTP 403: Permission denied)",
        ),
        (
            event(1, "NOT_FOUND", "create", "ok", attempt=1, next_allowed="2026-11-23T10:02:01Z"),
            "node NOT_FOUND -> create: ok",
        ),
        (event(1, "READY", "none", "recovered"), "node READY: recovered"),
        (
            event(
                1, "NOT_FOUND", "none", "missing, and not deleted by this supervisor: left alone"
            ),
            "node NOT_FOUND: missing, and not deleted by this supervisor: left alone",
        ),
        (
            event(1, "READY", "stop", "ok", reason="done", spend_usd=3.25),
            "node READY run ended (done) -> stop: ok",
        ),
        (
            {
                **event(1, "ACTIVE", "request_stop", "ok", reason="max_total_usd", spend_usd=50.0),
                "resource": "projects/p/locations/us-central2-b/queuedResources/exp-tpu-qr",
            },
            "queued resource ACTIVE run ended (max_total_usd) -> request_stop: ok",
        ),
        (
            {
                **event(1, "SIZE_2", "stop", "error: HTTP 403: denied", reason="max_run_hours"),
                "resource": "projects/p/zones/us-central1-a/instanceGroupManagers/exp-a100",
            },
            "instance group SIZE_2 run ended (max_run_hours) -> stop: failed (HTTP 403: denied)",
        ),
        (
            {
                **event(1, "STOPPED", "none", "run ended; compute already stopped", reason="done"),
                "resource": "projects/p/locations/us-central1-a/clusters/c/nodePools/gpu",
            },
            "node pool STOPPED run ended (done): compute already stopped",
        ),
        (
            event(1, "READY", "none", "compute back after a stop"),
            "node READY: compute back after a stop",
        ),
        (
            {
                **event(1, "UNKNOWN", "none", "error: HTTP 403: Required 'compute.x' permission"),
                "resource": "projects/p/zones/us-central1-a/instanceGroupManagers/exp-a100",
            },
            "instance group cannot be read (HTTP 403: Required 'compute.x' permission): the "
            "supervisor can neither recover nor stop it",
        ),
        (
            event(1, "UNKNOWN", "none", "error: HTTP 403: denied", reason="done", spend_usd=1.0),
            "node cannot be read (HTTP 403: denied) after the run ended (done): it may still be "
            "billing",
        ),
        (event(1, "READY", "none", "read again"), "node READY: read again"),
    ],
)
def test_supervisor_event_text(record: dict[str, Any], text: str) -> None:
    assert supervisor_event_text(record) == text


def test_a_supervisor_record_without_an_entry_time_uses_its_own() -> None:
    assert render(PREEMPTED) == "10:00:03 supervisor: node PREEMPTED -> delete: ok"


@pytest.mark.parametrize(
    "stack", ["dev-tpu-v5e", "prod-tpu-v4-32", "dev-a100-gke", "prod-a100-gce"]
)
def test_the_function_name_is_the_planned_one(stack: str) -> None:
    plan = json.loads((REPO_ROOT / "tests" / "plans" / f"{stack}.json").read_text())
    (function,) = [
        r["inputs"]["name"]
        for r in plan["resources"]
        if r["type"] == "gcp:cloudfunctionsv2/function:Function"
    ]
    assert supervisor_function(stack) == function == f"{stack}-supervisor"

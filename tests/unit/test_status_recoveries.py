"""`trainstack status` of a spot TPU stack lists its supervisor's recovery actions, read from
the events file the supervisor writes (tests/components/test_tpu_supervisor_function.py
shows the function writing it), over the storage emulator's JSON API."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.tpu_server import TpuFakeServer
from tests.unit.test_status import P, checkpoints, put, run_status

STACK = "dev-tpu-v5e"
NODE = f"projects/{P}/locations/us-west4-a/nodes/{STACK}-tpu"
EVENTS = [
    {
        "time": "2026-11-23T11:40:00Z",
        "resource": NODE,
        "seen": "PREEMPTED",
        "action": "delete",
        "result": "ok",
        "attempt": 0,
        "next_allowed": None,
    },
    {
        "time": "2026-11-23T11:44:00Z",
        "resource": NODE,
        "seen": "NOT_FOUND",
        "action": "create",
        "result": "ok",
        "attempt": 1,
        "next_allowed": "2026-11-23T11:46:00Z",
    },
    {
        "time": "2026-11-23T11:50:00Z",
        "resource": NODE,
        "seen": "READY",
        "action": "none",
        "result": "recovered",
        "attempt": 1,
        "next_allowed": "2026-11-23T11:46:00Z",
    },
]


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator() as url:
        yield url


def _upload(gcs: str, bucket: str, name: str, data: bytes) -> None:
    request = urllib.request.Request(
        f"{gcs}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    urllib.request.urlopen(request).close()


def _status(
    tmp_path: Path, gcs: str, events_uri: str, roles: list[str] | None = None
) -> tuple[int, str, str]:
    url = checkpoints(gcs, STACK, [100], [])
    outputs = {"checkpoint_dir": f"{url}/checkpoints/{STACK}", "supervisor_events_uri": events_uri}
    if roles is not None:
        outputs["supervisor_roles"] = roles
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        tpu = stack.enter_context(TpuFakeServer())
        tpu.nodes[NODE] = {"name": NODE, "state": "READY", "createTime": "2026-11-23T11:50:00Z"}
        return run_status(
            STACK,
            tmp_path,
            outputs,
            f"logging={logs.endpoint}",
            f"tpu={tpu.endpoint}",
            f"storage={gcs}/storage/v1/",
        )


def test_status_lists_the_supervisor_actions(tmp_path: Path, gcs: str) -> None:
    bucket = f"{P}-{STACK}-checkpoints"
    checkpoints(gcs, STACK, [100], [])  # makes the bucket
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in EVENTS)
    _upload(gcs, bucket, f"supervisor/{STACK}/events.jsonl", lines)
    code, out, err = _status(tmp_path, gcs, f"gs://{bucket}/supervisor/{STACK}/events.jsonl")
    assert (code, err) == (0, "")
    assert out.splitlines()[-6:] == [
        "supervisor: 3 action(s) recorded (recoveries, stops, what it saw)",
        "  2026-11-23T11:40:00Z node PREEMPTED -> delete: ok",
        "  2026-11-23T11:44:00Z node NOT_FOUND -> create: ok",
        "  2026-11-23T11:50:00Z node READY: recovered",
        "spend counted by the supervisor: $0.00",
        # The recreated node's own age, not the run's spend (that is the count above).
        "this compute: $1.28 at list price ($7.68/hour x 0.17 h since 2026-11-23T11:50:00Z); "
        "the run's spend is the supervisor's count above",
    ]


def test_no_events_yet_reads_as_none_recorded(tmp_path: Path, gcs: str) -> None:
    bucket = f"{P}-{STACK}-checkpoints"
    code, out, err = _status(tmp_path, gcs, f"gs://{bucket}/supervisor/{STACK}/none.jsonl")
    assert (code, err) == (0, "")
    assert "supervisor: 0 action(s) recorded (recoveries, stops, what it saw)" in out.splitlines()


def _stop_event(result: str) -> dict[str, object]:
    return {
        "time": "2026-11-23T12:10:00Z",
        "resource": NODE,
        "seen": "READY",
        "action": "stop",
        "result": result,
        "attempt": 0,
        "next_allowed": None,
        "reason": "done",
        "spend_usd": 9.5,
    }


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("ok", "finished (done); compute stopped at 2026-11-23T12:10:00Z"),
        (
            "error: HTTP 403: Permission denied",
            "finished (done) but still billing $7.68/hour: the supervisor could not stop it; "
            f"run: gcloud compute tpus tpu-vm delete {STACK}-tpu --zone=us-west4-a --project={P}",
        ),
    ],
)
def test_status_says_whether_the_compute_was_stopped_and_the_spend(
    tmp_path: Path, gcs: str, result: str, expected: str
) -> None:
    bucket = f"{P}-{STACK}-checkpoints"
    checkpoints(gcs, STACK, [100], [])
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in [*EVENTS, _stop_event(result)])
    _upload(gcs, bucket, f"supervisor/{STACK}/events.jsonl", lines)
    state = {"attempts": 0, "run": {"spend_usd": 12.5, "stopped": 1.0}}
    _upload(gcs, bucket, f"supervisor/{STACK}/state.json", json.dumps(state).encode())
    code, out, err = _status(tmp_path, gcs, f"gs://{bucket}/supervisor/{STACK}/events.jsonl")
    assert (code, err) == (0, "")
    assert out.splitlines()[-3:-1] == [expected, "spend counted by the supervisor: $12.50"]


def test_status_says_the_compute_may_still_bill_when_the_supervisor_cannot_read_it(
    tmp_path: Path, gcs: str
) -> None:
    # The supervisor's own bucket (its events and state), and the role ids its stack
    # outputs name (they carry its account's unique id).
    bucket = f"{P}-{STACK}-supervisor"
    put(gcs, bucket)
    role = f"projects/{P}/roles/trainstackSupervisor_dev_tpu_v5e_104857600000000000001"
    denied = f"Permission 'tpu.nodes.get' denied on '{NODE}'"
    unread = {**_stop_event(f"error: HTTP 403: {denied}"), "seen": "UNKNOWN", "action": "none"}
    first = {**unread, "time": "2026-11-23T12:00:00Z"}
    del first["reason"], first["spend_usd"]
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in [*EVENTS, first, unread])
    _upload(gcs, bucket, "events.jsonl", lines)
    state = {"attempts": 0, "run": {"spend_usd": 12.5}}
    _upload(gcs, bucket, "state.json", json.dumps(state).encode())
    code, out, err = _status(tmp_path, gcs, f"gs://{bucket}/events.jsonl", [role])
    assert (code, err) == (0, "")
    delete = f"gcloud compute tpus tpu-vm delete {STACK}-tpu --zone=us-west4-a --project={P}"
    assert out.splitlines()[-6:-1] == [
        f"  2026-11-23T12:00:00Z node cannot be read (HTTP 403: {denied}): the supervisor can "
        "neither recover nor stop it",
        f"  2026-11-23T12:10:00Z node cannot be read (HTTP 403: {denied}) after the run ended "
        "(done): it may still be billing",
        f"the supervisor cannot read {NODE}: HTTP 403: {denied} since 2026-11-23T12:00:00Z; it "
        f"can neither recover nor stop it; check its role ({role})",
        "finished (done) but the compute may still be billing $7.68/hour: the supervisor "
        f"cannot read it; run: {delete}",
        "spend counted by the supervisor: $12.50; the time it could not read the compute "
        "counted as last seen",
    ]

"""The audit's HIGH item: nothing the training account writes beside the checkpoints may keep
the supervisor from counting and acting. An end record no launcher writes (over
`RECORD_MAX_BYTES`, or stored gzip content-encoded, which Cloud Storage serves decompressed)
is refused from its metadata, never downloaded, and ends the run as `unreadable`; a stop
request the bucket refuses to take (a 403, as a held object or a narrower grant answers) stops
the compute at once, and one it refuses to remove is reported, not an HTTP 500. Google's
functions-framework serving the bundle against the Compute Engine fake and the GCS emulator
behind `tests.fakes.storage_grant` (Cloud Storage's grant checks and transcoding)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.components.test_run_supervisor_function import (
    BUCKET,
    DELETE_VMS,
    MIG,
    RUN,
    STATE,
    VMS,
    _world,
)
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.storage_grant import ObjectNameGrant
from trainstack.components.gpu_startup import RUN_CLOCK_PREFIX, node_helper
from trainstack.components.run_supervisor import supervisor_config
from trainstack.components.supervisor import supervisor_store

GROUP = "p/us-central1-a/exp-42-a100"
ENDED = RUN["end_uri"].removeprefix(f"gs://{BUCKET}/")
STOP = RUN["stop_uri"].removeprefix(f"gs://{BUCKET}/")
FORBIDDEN = "error: OSError: Forbidden: "


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator(bucket=BUCKET) as url:
        yield url


@pytest.fixture
def granted(gcs: str) -> Iterator[ObjectNameGrant]:
    """Cloud Storage as the supervisor's account sees it (`records_condition`)."""
    with ObjectNameGrant(gcs, BUCKET, RUN_CLOCK_PREFIX) as front:
        yield front


def _unread(world: Any) -> list[str]:
    lines = [json.loads(line) for line in world.function.printed()]
    return [line["message"] for line in lines if "end record unread" in line["message"]]


def _refused_end(tmp_path: Path, gcs: str, granted: ObjectNameGrant, **kept: Any) -> str:
    """The check after `kept` (pipe_file's arguments) was stored as the end record: it
    stops the group as `unreadable` without downloading the record; the warning it logged."""
    config = supervisor_config("mig", MIG, None, STATE, run=RUN, instances=VMS)
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        world.fs.pipe_file(f"{BUCKET}/{ENDED}", **kept)
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["result"]) == (
            "stop",
            "unreadable",
            "stopping",
        )
        assert world.compute.deletions == [(GROUP, DELETE_VMS)]
        # Was the whole object, decoded, in the function's memory.
        assert granted.delivered == {}
        [unread] = _unread(world)
        return unread


def test_an_end_record_larger_than_any_launcher_writes_is_not_downloaded(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    huge = b'{"outcome": "done", "pad": "' + b" " * (16 << 20) + b'"}'
    unread = _refused_end(tmp_path, gcs, granted, data=huge)
    assert unread == (
        "supervisor: the run's end record unread: error: NotARecord: "
        f"{RUN['end_uri']} is {len(huge)} bytes: no launcher writes that "
        "(at most 8192 bytes, not encoded)"
    )


def test_a_gzip_encoded_end_record_is_not_downloaded(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    # 4 MiB served (decompressive transcoding), under 8 KiB stored.
    bomb = gzip.compress(b'{"outcome": "done", "pad": "' + b" " * (4 << 20) + b'"}')
    assert len(bomb) < 8192
    unread = _refused_end(
        tmp_path, gcs, granted, data=bomb, fixed_key_metadata={"content_encoding": "gzip"}
    )
    assert unread == (
        "supervisor: the run's end record unread: error: NotARecord: "
        f"{RUN['end_uri']} is {len(bomb)} bytes, gzip-encoded: no launcher writes that "
        "(at most 8192 bytes, not encoded)"
    )


def test_a_launcher_end_record_is_read_whole_and_its_largest_fits_the_bound(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node launcher's largest record: a 500-character reason of characters that JSON
    # writes as 12 bytes each (a surrogate pair), as `node_helper.record_end` sends it.
    sent: list[bytes] = []

    def send(url: str, data: bytes, headers: dict[str, str]) -> int:
        sent.append(data)
        return 200

    monkeypatch.setattr(node_helper, "_send", send)
    monkeypatch.setattr(node_helper, "access_token", lambda: "token")
    prefix = RUN["end_uri"].removesuffix(".ended")
    node_helper.record_end(prefix, "package_install", "1", "\U0001f600" * 600)
    [record] = sent
    assert len(record) == 6111
    assert len(record) <= supervisor_store.RECORD_MAX_BYTES
    config = supervisor_config("mig", MIG, None, STATE, run=RUN, instances=VMS)
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        world.fs.pipe_file(f"{BUCKET}/{ENDED}", record)
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["stage"], stop["node"]) == (
            "stop",
            "failed",
            "package_install",
            1,
        )
        assert stop["detail"] == "\U0001f600" * 500
        assert granted.delivered == {ENDED: len(record)}
        assert _unread(world) == []


def test_a_stop_request_the_bucket_refuses_stops_the_compute_at_once(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    config = supervisor_config(
        "mig", MIG, None, STATE, run={**RUN, "max_run_seconds": 3600}, instances=VMS
    )
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        world.seed(started=time.time() - 3601)
        granted.refused = STOP  # a temporary hold on it, say: 403
        # Was an uncaught 403: HTTP 500, every check, and the compute never stopped.
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["result"]) == (
            "stop",
            "max_run_hours",
            "stopping",
        )
        assert stop["stop_request"].startswith(FORBIDDEN)
        assert world.compute.deletions == [(GROUP, DELETE_VMS)]
        assert granted.denied == [("POST", f"/upload/storage/v1/b/{BUCKET}/o")]


def test_a_stop_request_the_bucket_refuses_to_remove_is_reported(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    # Stopped after the grace, then `pulumi up` raised the cap: the request is withdrawn.
    run = {**RUN, "hourly_usd": 10.0, "max_total_usd": 1000.0}
    config = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.seed(
            spend_usd=60.0,
            started=1.0,
            stop_requested=1.0,
            requested_for="max_total_usd",
            stopped=400.0,
            end={"reason": "max_total_usd"},
        )
        world.put(RUN["stop_uri"], {"reason": "max_total_usd"})
        world.compute.create_instances(GROUP, VMS)
        granted.refused = STOP
        # Was an uncaught 403: HTTP 500, every check.
        assert world.function.call()["action"] == "none"
        result = world.events()[-1]["result"]
        withdrawn = "compute back after a stop; the limits no longer hold: stop request withdrawn"
        assert result.startswith(f"{withdrawn}; {RUN['stop_uri']} not removed ({FORBIDDEN}")
        assert world.read(RUN["stop_uri"]) == {"reason": "max_total_usd"}
        assert world.compute.deletions == []

"""The node launcher's Cloud Logging shipper over real HTTP: the Cloud Logging fake
(tests/fakes/logging_server.py, which evaluates filters) and a metadata server fake
(tests/fakes/metadata_fake.py).

The shipped entries are matched with the log-based metric filters of the pinned plans of the
bundled GCE and TPU stacks, exactly as the dashboard would deploy them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.metadata_fake import PROJECT, ZONE, MetadataFake, vm_values
from trainstack.trainers.common.cloud_logging import LogShipper, from_env, make_entry

REPO = Path(__file__).resolve().parents[2]
METRIC = "gcp:logging/metric:Metric"
GCE_NAME = "prod-a100-gce-a100-1"
GCE_ID = "4815162342"
TPU_NODE = "prod-tpu-v4-32-tpu"

TRAIN = {
    "event": "train",
    "step": 10,
    "loss": 2.5,
    "step_time_s": 0.25,
    "samples_per_s": 512.0,
    "data_wait_s": 0.01,
    "gpu_util_pct": 97.0,
    "node": 1,
    "rank": 3,
}
CHECKPOINT = {"event": "checkpoint", "step": 10, "stall_s": 1.5, "node": 1, "rank": 3}
LINES = [
    b"trainstack trainer: starting\n",
    (json.dumps(TRAIN) + "\n").encode(),
    (json.dumps(CHECKPOINT) + "\n").encode(),
    b"\n",
]


def _metric_filters(stack: str) -> dict[str, str]:
    """Role -> filter of every logs-based metric in the pinned plan of `stack`."""
    plan = json.loads((REPO / "tests" / "plans" / f"{stack}.json").read_text())
    return {
        r["name"].split("-monitoring-", 1)[1]: r["inputs"]["filter"]
        for r in plan["resources"]
        if r["type"] == METRIC
    }


def _wait(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


@pytest.fixture
def logging_api() -> Iterator[LoggingFakeServer]:
    with LoggingFakeServer() as server:
        yield server


@pytest.fixture
def gce_metadata() -> Iterator[MetadataFake]:
    with MetadataFake(vm_values(GCE_ID, GCE_NAME)) as server:
        yield server


def _env(metadata: MetadataFake, logging_api: LoggingFakeServer, kind: str) -> dict[str, str]:
    return {
        "TRAINSTACK_CLOUD_LOGGING": kind,
        "GCE_METADATA_HOST": metadata.host,
        "TRAINSTACK_LOGGING_ENDPOINT": logging_api.endpoint,
    }


def _payloads(entries: list[dict[str, Any]]) -> list[Any]:
    return [e.get("jsonPayload", e.get("textPayload")) for e in entries]


def test_json_lines_are_json_payload_and_other_lines_text() -> None:
    now = 1_700_000_000.25
    assert make_entry((json.dumps(TRAIN) + "\n").encode(), now, "a-1") == {
        "timestamp": "2023-11-14T22:13:20.250000Z",
        "insertId": "a-1",
        "jsonPayload": TRAIN,
        "severity": "INFO",
    }
    assert make_entry(b"plain text\r\n", now, "a-2") == {
        "timestamp": "2023-11-14T22:13:20.250000Z",
        "insertId": "a-2",
        "textPayload": "plain text",
        "severity": "DEFAULT",
    }
    warning = make_entry(b'{"event": "idle", "severity": "warning"}\n', now, "a-3")
    assert warning is not None and warning["severity"] == "WARNING"
    odd = make_entry(b'{"event": "x", "severity": "LOUD"}\n', now, "a-4")
    assert odd is not None and odd["severity"] == "INFO"
    # Not JSON the API takes (NaN) or not an object: kept verbatim as text.
    nan = make_entry(b'{"loss": NaN}\n', now, "a-5")
    assert nan is not None and nan["textPayload"] == '{"loss": NaN}'
    assert make_entry(b"[1, 2]\n", now, "a-6")["textPayload"] == "[1, 2]"  # type: ignore[index]
    assert make_entry(b"  \n", now, "a-7") is None


def test_gce_entries_match_the_pinned_dashboard_metrics(
    logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    shipper = from_env(_env(gce_metadata, logging_api, "gce_instance"), print)
    assert isinstance(shipper, LogShipper)
    for line in LINES:
        shipper.add(line)
    shipper.close()
    entries = logging_api.entries
    assert _payloads(entries) == ["trainstack trainer: starting", TRAIN, CHECKPOINT]
    for entry in entries:
        assert entry["logName"] == f"projects/{PROJECT}/logs/trainstack"
        assert entry["resource"] == {
            "type": "gce_instance",
            "labels": {"project_id": PROJECT, "instance_id": GCE_ID, "zone": ZONE},
        }
        assert entry["labels"] == {"compute.googleapis.com/resource_name": GCE_NAME}
    filters = _metric_filters("prod-a100-gce")
    matched = {name: _payloads(logging_api.matching(f)) for name, f in filters.items()}
    assert matched == {
        "step-time": [TRAIN],
        "samples-per-s": [TRAIN],
        "tokens-per-s": [],  # these lines carry no tokens
        "mfu": [],
        "data-wait": [TRAIN],
        "gpu-util": [TRAIN],
        "checkpoint-stall": [CHECKPOINT],
        "train-lines": [TRAIN],
    }
    assert gce_metadata.tokens_served == 1
    assert {flavor for _, flavor in gce_metadata.requests} == {"Google"}
    assert (shipper.sent, shipper.failed, shipper.dropped) == (3, 0, 0)


def test_tpu_entries_match_the_pinned_dashboard_metrics(logging_api: LoggingFakeServer) -> None:
    with MetadataFake(vm_values("777", "t1v-n-0a1b2c3d-w-0")) as metadata:
        env = {
            **_env(metadata, logging_api, "tpu_worker"),
            "TRAINSTACK_TPU_NODE_ID": TPU_NODE,
            "TPU_WORKER_ID": "0",
        }
        shipper = from_env(env, print)
        assert shipper is not None
        for line in LINES:
            shipper.add(line)
        shipper.close()
    assert [e["resource"] for e in logging_api.entries] == [
        {
            "type": "tpu_worker",
            "labels": {"project_id": PROJECT, "zone": ZONE, "node_id": TPU_NODE, "worker_id": "0"},
        }
    ] * 3
    assert all("labels" not in e for e in logging_api.entries)
    filters = _metric_filters("prod-tpu-v4-32")
    matched = {name: _payloads(logging_api.matching(f)) for name, f in filters.items()}
    assert matched == {
        "step-time": [TRAIN],
        "samples-per-s": [TRAIN],
        "tokens-per-s": [],
        "mfu": [],
        "data-wait": [TRAIN],
        "checkpoint-stall": [CHECKPOINT],
        "train-lines": [TRAIN],
    }


def test_logging_down_then_back_retries_every_line_once_without_blocking(
    logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    messages: list[str] = []
    env = _env(gce_metadata, logging_api, "gce_instance")
    shipper = LogShipper("gce_instance", env, messages.append, batch_lines=10, backoff_s=0.05)
    logging_api.fail_next(2, 503)
    logging_api.fail_next(1, 429)
    logging_api.fail_next(1, 500)
    start = time.monotonic()
    for i in range(25):
        shipper.add(f'{{"event": "train", "step": {i}}}\n'.encode())
    assert time.monotonic() - start < 0.5  # queued, not sent, in the caller's thread
    _wait(lambda: len(logging_api.entries) == 25)
    shipper.close()
    assert [e["jsonPayload"]["step"] for e in logging_api.entries] == list(range(25))
    assert len({e["insertId"] for e in logging_api.entries}) == 25
    writes = [r for r in logging_api.requests if r[1] == "/v2/entries:write"]
    assert len(writes) == 3 + 4  # three batches, four refused attempts
    assert messages[0].startswith("cloud logging: attempt 1 failed, retrying: HTTP 503 from ")
    assert any(
        m.startswith("cloud logging: attempt 4 failed, retrying: HTTP 500 ") for m in messages
    )
    assert (shipper.sent, shipper.failed, shipper.dropped) == (25, 0, 0)


def test_metadata_down_at_start_is_retried(
    logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    gce_metadata.fail_next(2, 503)
    env = _env(gce_metadata, logging_api, "gce_instance")
    shipper = LogShipper("gce_instance", env, lambda m: None, backoff_s=0.05)
    shipper.add(b"hello\n")
    shipper.close(10.0)
    assert _payloads(logging_api.entries) == ["hello"]


def test_a_refused_batch_is_dropped_and_shipping_goes_on(
    logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    messages: list[str] = []
    env = _env(gce_metadata, logging_api, "gce_instance")
    shipper = LogShipper("gce_instance", env, messages.append, flush_interval_s=0.05)
    logging_api.fail_next(1, 400)
    shipper.add(b"first\n")
    _wait(lambda: shipper.failed == 1)
    shipper.add(b"second\n")
    shipper.close()
    assert _payloads(logging_api.entries) == ["second"]
    assert messages[0].startswith("cloud logging: dropping 1 line(s): HTTP 400 from ")
    assert messages[-1] == (
        "cloud logging: 1 line(s) written; 1 not written (0 still queued at exit), "
        "0 dropped from a full buffer"
    )


def test_a_full_buffer_drops_the_oldest_lines_and_says_so(
    logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    messages: list[str] = []
    env = _env(gce_metadata, logging_api, "gce_instance")
    logging_api.fail_next(10_000, 503)
    shipper = LogShipper(
        "gce_instance", env, messages.append, batch_lines=2, max_lines=5, backoff_s=0.05
    )
    for i in range(8):
        shipper.add(f"line {i}\n".encode())
    start = time.monotonic()
    shipper.close(0.5)
    assert time.monotonic() - start < 2.0  # a dead Logging API cannot hold the exit
    assert logging_api.entries == []
    assert shipper.dropped == 3
    assert "cloud logging: WARNING: buffer full (5 lines): dropped 3 oldest line(s), 3 in all" in (
        messages
    )
    assert messages[-1] == (
        "cloud logging: 0 line(s) written; 5 not written (5 still queued at exit), "
        "3 dropped from a full buffer"
    )


def test_unknown_or_incomplete_settings_never_stop_training(
    logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    messages: list[str] = []
    assert from_env({}, messages.append) is None
    assert from_env({"TRAINSTACK_CLOUD_LOGGING": "0"}, messages.append) is None
    assert from_env({"TRAINSTACK_CLOUD_LOGGING": "k8s_container"}, messages.append) is None
    assert messages == [
        "TRAINSTACK_CLOUD_LOGGING: 'k8s_container' is not a resource type this launcher "
        "writes; valid: gce_instance, tpu_worker; lines go to stdout only"
    ]
    messages.clear()
    shipper = from_env(_env(gce_metadata, logging_api, "tpu_worker"), messages.append)
    assert shipper is not None
    shipper.add(b"kept on stdout only\n")
    shipper.close()
    assert logging_api.entries == []
    assert messages[0] == (
        "cloud logging: disabled: TRAINSTACK_TPU_NODE_ID: not set; the tpu_worker resource needs it"
    )


# -- the node launcher, shipping a real target's lines ------------------------------------------

TARGET = textwrap.dedent(
    """
    import json, signal, sys, time
    def stop(signum, frame):
        print(json.dumps({"event": "preempted", "step": 2, "node": 0, "rank": 0}), flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("target: up", flush=True)
    for step in (1, 2):
        print(json.dumps({"event": "train", "step": step, "step_time_s": 0.1,
                          "samples_per_s": 10.0, "node": 0, "rank": 0}), flush=True)
    if sys.argv[1] == "wait":
        time.sleep(60)
    print(json.dumps({"event": "done", "step": 2, "node": 0, "rank": 0}), flush=True)
    """
)


def _launch(tmp_path: Path, env: dict[str, str], mode: str) -> subprocess.Popen[str]:
    target = tmp_path / "target.py"
    target.write_text(TARGET)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainstack.trainers.node",
            "--launcher=node",
            "--",
            sys.executable,
            str(target),
            mode,
        ],
        # One simulated accelerator: no torch probe (seconds of import) before the target.
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(REPO),
            "TRAINSTACK_SIMULATED_ACCELERATORS": "1",
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_node_launcher_ships_its_targets_lines(
    tmp_path: Path, logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    node = _launch(tmp_path, _env(gce_metadata, logging_api, "gce_instance"), "finish")
    target = tmp_path / "target.py"
    out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    printed = out.splitlines()
    # stdout is still passed through, after the user-code wrapper's launch record
    argv = [Path(sys.executable).name, str(target), "finish"]
    launch = {"event": "launch", "rank": 0, "argv": argv}
    assert [json.loads(printed[0]), printed[1]] == [launch, "target: up"]
    assert len(printed) == 5
    assert _payloads(logging_api.entries) == [
        launch,
        "target: up",
        *[json.loads(x) for x in printed[2:]],
    ]
    step_time = _metric_filters("prod-a100-gce")["step-time"]
    assert [e["jsonPayload"]["step"] for e in logging_api.matching(step_time)] == [1, 2]


def test_sigterm_flushes_the_last_lines(
    tmp_path: Path, logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    node = _launch(tmp_path, _env(gce_metadata, logging_api, "gce_instance"), "wait")
    assert node.stdout is not None
    seen = [node.stdout.readline() for _ in range(4)]
    assert json.loads(seen[-1])["step"] == 2
    node.send_signal(signal.SIGTERM)
    _, err = node.communicate(timeout=60)
    assert node.returncode == 143, err
    events = [e["jsonPayload"]["event"] for e in logging_api.entries if "jsonPayload" in e]
    # The target's own preempted line, sent while exiting; the user-code wrapper adds none,
    # since the code said where it stopped.
    assert events == ["launch", "train", "train", "preempted"]


def test_logging_down_does_not_hold_training(
    tmp_path: Path, logging_api: LoggingFakeServer, gce_metadata: MetadataFake
) -> None:
    logging_api.fail_next(10_000, 503)
    start = time.monotonic()
    node = _launch(tmp_path, _env(gce_metadata, logging_api, "gce_instance"), "finish")
    out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    assert time.monotonic() - start < 10.0  # the 5 s flush deadline, not a retry loop
    assert len(out.splitlines()) == 5
    assert logging_api.entries == []
    assert err.splitlines()[-1] == (
        "trainstack-node: cloud logging: 0 line(s) written; 5 not written (5 still queued at "
        "exit), 0 dropped from a full buffer"
    )

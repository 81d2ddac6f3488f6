"""A bundled trainer's crash: the `failed` record it prints (`trainstack.trainers.crash`)
and what the node launcher makes of it."""

from __future__ import annotations

import io
import json

import pytest

from trainstack.trainers.crash import failed_record, reported_crash
from trainstack.trainers.node import _Watch


def _raise(message: str) -> None:
    raise ValueError(message)


def test_failed_record_holds_the_rank_and_the_tracebacks_last_lines() -> None:
    try:
        _raise("data_path 'x' holds no .npz shards")
    except ValueError as exc:
        record = failed_record(exc, {"RANK": "3"})
    assert {k: v for k, v in record.items() if k != "last_lines"} == {
        "event": "failed",
        "rank": 3,
        "exit_code": 1,
    }
    assert record["last_lines"][0] == "Traceback (most recent call last):"
    assert record["last_lines"][-2:] == [
        "    raise ValueError(message)",
        "ValueError: data_path 'x' holds no .npz shards",
    ]


def test_failed_record_keeps_the_last_20_lines_and_the_node_rank_without_rank() -> None:
    try:
        _raise("\n".join(f"line {i}" for i in range(30)))
    except ValueError as exc:
        record = failed_record(exc, {"TRAINSTACK_NODE_RANK": "2"})
    assert record["rank"] == 2
    assert record["last_lines"] == [f"line {i}" for i in range(10, 30)]


def test_reported_crash_prints_the_record_then_raises(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="boom"), reported_crash():
        _raise("boom")
    record = json.loads(capsys.readouterr().out)
    assert (record["event"], record["exit_code"], record["last_lines"][-1]) == (
        "failed",
        1,
        "ValueError: boom",
    )


def test_a_lost_peer_is_no_failure_of_this_rank(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), reported_crash():
        raise RuntimeError("[gloo] Connection reset by peer")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("records", "started"),
    [
        ([{"event": "failed", "rank": 0, "exit_code": 1, "last_lines": ["E"]}], False),
        ([{"event": "start", "rank": 0}, {"event": "failed", "rank": 0}], True),
    ],
)
def test_a_failed_record_alone_does_not_mean_training_started(
    records: list[dict[str, object]], started: bool
) -> None:
    # A crash before the first record stays a setup failure (exit 3), as before.
    watch = _Watch()
    source = io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    watch.pump(source, io.BytesIO())
    assert watch.started is started

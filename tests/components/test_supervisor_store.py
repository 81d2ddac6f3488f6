"""The supervisor's state.json and events.jsonl under overlapping calls (Cloud Functions may
briefly run more instances than `maxInstanceCount`; Cloud Scheduler delivers at least once):
`components/supervisor/supervisor_store.py`'s `Store` against the GCS emulator, which honours
`ifGenerationMatch` as Cloud Storage does (tests/fakes/gcs_emulator.py). Without the
precondition, the second writer of a read-modify-write loses the first one's update."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from trainstack.components.supervisor import main, supervisor_store

BUCKET = "race-checkpoints"
STATE_URI = f"gs://{BUCKET}/supervisor/race"


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[main.Store, main.Store]]:
    """Two calls' stores on one emulator (each call of the function makes its own)."""
    with running_gcs_emulator(bucket=BUCKET) as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        first, second = main.Store(STATE_URI, "anon"), main.Store(STATE_URI, "anon")
        first.fs.invalidate_cache()
        yield first, second


def _lines(store: main.Store) -> list[dict[str, Any]]:
    data, _ = store._get("supervisor/race/events.jsonl")
    return [json.loads(line) for line in data.decode().splitlines()]


def _event(n: int) -> dict[str, Any]:
    return {"time": f"2026-11-26T10:0{n}:00Z", "seen": "READY", "action": "none", "result": n}


def test_an_event_appended_between_anothers_read_and_write_is_kept(
    stores: tuple[main.Store, main.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = stores
    first.append_event(_event(1))
    reads = 0
    plain_get = first._get

    def get_then_overlap(name: str) -> tuple[bytes, str]:
        # The second call appends after the first read events.jsonl, before it writes.
        nonlocal reads
        found = plain_get(name)
        reads += 1
        if reads == 1:
            second.append_event(_event(2))
        return found

    monkeypatch.setattr(first, "_get", get_then_overlap)
    first.append_event(_event(3))
    assert reads == 2  # its first write was refused (412), so it read again
    assert [e["result"] for e in _lines(second)] == [1, 2, 3]


def test_a_state_written_since_this_call_read_it_is_not_overwritten(
    stores: tuple[main.Store, main.Store],
) -> None:
    first, second = stores
    assert (
        first.read_state() == supervisor_store.FRESH_STATE
    )  # none yet: written only if still absent
    assert second.read_state() == supervisor_store.FRESH_STATE
    second.write_state({"attempts": 1, "next_allowed": 120.0, "recreate": True})
    with pytest.raises(FileExistsError):  # `supervise` checks again from the state now
        first.write_state({"attempts": 0, "next_allowed": None, "recreate": True})
    assert first.read_state() == {"attempts": 1, "next_allowed": 120.0, "recreate": True}
    first.write_state({"attempts": 2, "next_allowed": 240.0, "recreate": True})
    assert second.read_state()["attempts"] == 2

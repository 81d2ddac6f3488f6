"""The local run's log records: what `local-run` adds to a record your code printed, and the
`done` record a finished run left in its log."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trainstack.trainers.common.contract import (
    EVENT_DONE,
    FIELD_EVENT,
    FIELD_RANK,
    FIELD_STEP,
    FIELD_TIME,
    FIELD_WORKER,
)


def stamped(record: dict[str, Any], line: str, index: int) -> str:
    """The log line of `record` (printed as `line` by process `index`): unchanged when it has
    its `time` and `worker`; else with the time it arrived and its worker (its `rank`, else
    the process's index) added, so `trainstack logs --worker N` finds your code's records and
    shows their time as it does the bundled trainers'."""
    if FIELD_TIME in record and FIELD_WORKER in record:
        return line if line.endswith("\n") else line + "\n"
    rank = record.get(FIELD_RANK)
    added = {
        FIELD_TIME: round(time.time(), 3),
        FIELD_WORKER: rank if isinstance(rank, int) else index,
    }
    return json.dumps({**added, **record}) + "\n"


def previous_done(log_path: Path, step: int, checkpoint_dir: str) -> dict[str, Any]:
    """The `done` record a finished run left in its log at `step`, marked `already_complete`
    (a minimal one naming the step and checkpoint dir when the log no longer has it)."""
    found: dict[str, Any] = {FIELD_EVENT: EVENT_DONE, FIELD_STEP: step}
    if log_path.exists():
        # Bytes that are no UTF-8 (a torn write) are no record; the others still count.
        for line in log_path.read_bytes().decode(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (
                isinstance(record, dict)
                and record.get(FIELD_EVENT) == EVENT_DONE
                and record.get(FIELD_RANK) == 0
                and record.get(FIELD_STEP) == step
            ):
                found = record
    return {
        **found,
        "checkpoint_dir": found.get("checkpoint_dir", checkpoint_dir),
        "already_complete": True,
    }

"""The run supervisor's storage (`main.py` beside it): its own `state.json` and `events.jsonl`
in its state bucket, which only its account may write, and the run's records beside the
checkpoints, which the training account writes too (`trainstack.trainers.common.run_records`).

Of what the training account can write, the supervisor reads only two things: the end record
(forging one can only stop the compute earlier) and the heartbeats' server-side `updated`
times (forging them can only keep the compute up until the limits, which it counts itself).
Its clock, spend count and recovery flags are in its own state.

Nothing that account writes may keep a check from counting and acting, so every call on those
objects is bounded (`Store.read`, `write`, `remove`, `newest_heartbeat`): at most
`RECORD_MAX_BYTES` of a record are read, an object no launcher writes (larger, or stored
content-encoded) is refused unread (`NotARecord`), and all such calls of one check share
`RECORDS_BUDGET_S`. Their failures are the caller's to survive (`main.py`)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

# The buckets are standard buckets: gcsfs's probe for zonal and hierarchical buckets (on by
# default in gcsfs 2026) only adds a gRPC round trip to every call.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import aiohttp
import gcsfs
import gcsfs.retry
import google.auth.exceptions
import httplib2
from googleapiclient.errors import HttpError

Json = dict[str, Any]
WRITE_TRIES = 5
"""How often a call reads and writes again after losing a race (`Store`)."""
READ_ERRORS = (
    HttpError,
    gcsfs.retry.HttpError,  # a Cloud Storage error gcsfs maps to no OSError (a 5xx, say)
    OSError,  # gcsfs's 403 ("Forbidden") and 404, and transport errors
    httplib2.HttpLib2Error,
    google.auth.exceptions.GoogleAuthError,
)
RECORD_ERRORS = (*READ_ERRORS, aiohttp.ClientError, ValueError, KeyError)
"""What a call on an object the training account writes may raise, past `READ_ERRORS`: a
transport error gcsfs passes on, `NotARecord`, an answer without the fields asked for; a
`RECORDS_BUDGET_S` timeout is an OSError (`TimeoutError`)."""
FRESH_STATE = {"attempts": 0, "next_allowed": None, "recreate": False}
RECORD_MAX_BYTES = 8192
"""The most of a run record read: the node launcher's largest (a stage's 500-character reason,
each character at most 12 bytes as JSON escapes, `components/gpu_startup/node_helper.py`) is
under 7 KiB; a test holds it under this."""
RECORDS_BUDGET_S = 30.0
"""The most one call of the function spends on objects the training account can write
(all its tries of the check together: `main.supervise`). Each call gets what
is left as fsspec's `timeout`, which cancels it there (`fsspec.asyn.sync` runs it under
`asyncio.wait_for`): a slow answer, or gcsfs's retries of a 429 (6 tries, backoff up to
32 s, `gcsfs.retry.retry_request`) on the stop request while the trainer rewrites it faster
than Cloud Storage allows ("Maximum rate of writes to the same object name: One write per
second", https://cloud.google.com/storage/quotas), cannot use up the function's 120 s before
state.json is written."""


class NotARecord(ValueError):
    """An object at a run record's name that no launcher writes: over `RECORD_MAX_BYTES`, or
    stored content-encoded, whose size says nothing of what a read holds in memory: "When an
    object meets these two criteria [gzip-compressed, `Content-Encoding: gzip`], it undergoes
    decompressive transcoding when served" (https://cloud.google.com/storage/docs/transcoding),
    and aiohttp under gcsfs decompresses what is served encoded (`ClientSession`
    `auto_decompress`, on by default)."""


def _path(uri: str) -> str:
    return uri.removeprefix("gs://")


def _epoch(stamp: str) -> float:
    """Unix seconds of an RFC 3339 time as Cloud Storage writes it (`2026-11-26T10:00:00.123Z`)."""
    return datetime.fromisoformat(stamp).timestamp()


class Store:
    """state.json and events.jsonl under `state_uri` (gs://bucket[/folder]), and the run's
    objects beside the checkpoints. Calls can overlap (Cloud Functions "may, for a short
    period of time, create more instances than the specified max instances limit",
    cloudfunctions.v2 discovery `maxInstanceCount`; Cloud Scheduler is "at least once",
    https://cloud.google.com/scheduler/docs/overview), so state.json and events.jsonl are
    written only if unchanged since read (`ifGenerationMatch`, "0": absent; else HTTP 412,
    which gcsfs raises as FileExistsError; https://cloud.google.com/storage/docs/
    request-preconditions)."""

    def __init__(
        self, state_uri: str, credentials: Any, records_until: float | None = None
    ) -> None:
        """`records_until`: the `time.monotonic()` past which calls on the run's records fail
        (one function call's `RECORDS_BUDGET_S`, shared by its tries of the check; from now
        where not given)."""
        self.fs = gcsfs.GCSFileSystem(token=credentials)
        self.bucket, _, folder = _path(state_uri).rstrip("/").partition("/")
        self.folder = folder.strip("/")
        self.generation = "0"  # state.json's, as read_state found it
        self.records_until = records_until or time.monotonic() + RECORDS_BUDGET_S

    def name(self, leaf: str) -> str:
        """The object name of `leaf` (state.json, events.jsonl, armed) in the state folder."""
        return f"{self.folder}/{leaf}" if self.folder else leaf

    def _get(self, name: str) -> tuple[bytes, str]:
        """The object's bytes and generation ("0" where there is none). The generation is
        read first: bytes newer than it only make the conditional write fail."""
        try:
            found = self.fs.call("GET", "b/{}/o/{}", self.bucket, name, json_out=True)
        except FileNotFoundError:
            return b"", "0"
        _, data = self.fs.call("GET", "b/{}/o/{}", self.bucket, name, alt="media")
        return bytes(data), str(found["generation"])

    def _put(self, name: str, data: bytes, generation: str) -> None:
        # JSON API `objects.insert` (uploadType=media): gcsfs's writes take no generation but 0.
        upload = self.fs.base.removesuffix("storage/v1/") + "upload/storage/v1/b/{}/o"
        self.fs.call(
            "POST", upload, self.bucket, uploadType="media", name=name, data=data,
            ifGenerationMatch=generation, headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip

    def read_state(self) -> Json:
        data, self.generation = self._get(self.name("state.json"))
        return dict(json.loads(data)) if data else dict(FRESH_STATE)

    def write_state(self, state: Json) -> None:
        # FileExistsError where another call wrote it meanwhile: `supervise` checks again.
        data = json.dumps(state, sort_keys=True).encode()
        self._put(self.name("state.json"), data, self.generation)

    def armed(self) -> bool:
        """Whether the stack's marker exists (`trainstack.components.run_supervisor`: Pulumi
        writes it after the compute and deletes it before the compute on `pulumi destroy`)."""
        return bool(self._get(self.name("armed"))[0])

    def append_event(self, event: Json) -> None:
        # Objects cannot be appended to: read, add the line, write back unless another
        # call did meanwhile (then again).
        added = json.dumps(event, sort_keys=True).encode() + b"\n"
        for _ in range(WRITE_TRIES):
            old, generation = self._get(self.name("events.jsonl"))
            with contextlib.suppress(FileExistsError):
                self._put(self.name("events.jsonl"), old + added, generation)
                break
        else:
            raise FileExistsError("events.jsonl changed on every try")
        # Also one structured log line for `trainstack logs`: stdout goes to Cloud Logging, a
        # one-line JSON object as `jsonPayload`, `severity` and `message` recognised
        # (https://cloud.google.com/logging/docs/structured-logging, "Special JSON fields";
        # https://cloud.google.com/functions/docs/monitoring/logging).
        failed = str(event.get("result", "")).startswith("error")
        severity = "WARNING" if failed else "NOTICE" if event["action"] != "none" else "INFO"
        message = f"supervisor: {event['seen']} -> {event['action']}: {event['result']}"
        line = {**event, "severity": severity, "message": message}
        print(json.dumps(line, sort_keys=True), flush=True)

    def _bounded(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`call` (an fsspec sync method) on an object the training account can write, in
        what is left of this check's `RECORDS_BUDGET_S` (TimeoutError past it)."""
        left = self.records_until - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the {RECORDS_BUDGET_S:.0f} s for the run's records are spent")
        return call(*args, timeout=left, **kwargs)

    def read(self, uri: str | None) -> bytes | None:
        """The run record at `uri`, or None where there is none (or no URI). Its metadata
        first: an object over `RECORD_MAX_BYTES` or content-encoded raises `NotARecord`
        unread. Then at most `RECORD_MAX_BYTES` of that generation as that metageneration
        (a Range request pinned by `generation` and `ifMetagenerationMatch`, storage.v1
        discovery `objects.get`), so an object replaced or re-encoded between the two reads
        answers 404 (None: read next check) or 412, never more bytes."""
        if not uri:
            return None
        bucket, _, name = _path(uri).partition("/")
        try:
            found = self._bounded(
                self.fs.call, "GET", "b/{}/o/{}", bucket, name, json_out=True,
                fields="size,contentEncoding,generation,metageneration",
            )  # fmt: skip
            size = int(found.get("size") or 0)
            if size > RECORD_MAX_BYTES or found.get("contentEncoding"):
                encoding = found.get("contentEncoding")
                raise NotARecord(
                    f"{uri} is {size} bytes" + (f", {encoding}-encoded" if encoding else "")
                    + f": no launcher writes that (at most {RECORD_MAX_BYTES} bytes, not encoded)"
                )  # fmt: skip
            _, data = self._bounded(
                self.fs.call, "GET", "b/{}/o/{}", bucket, name, alt="media",
                generation=found["generation"], ifMetagenerationMatch=found["metageneration"],
                headers={"Range": f"bytes=0-{RECORD_MAX_BYTES - 1}"},
            )  # fmt: skip
        except FileNotFoundError:
            return None
        return bytes(data[:RECORD_MAX_BYTES])

    def write(self, uri: str, data: bytes) -> None:
        self._bounded(self.fs.pipe_file, _path(uri), data)

    def remove(self, uri: str | None) -> None:
        if uri:
            with contextlib.suppress(FileNotFoundError):
                self._bounded(self.fs.rm_file, _path(uri))

    def newest_heartbeat(self, prefix_uri: str, node_count: int) -> float | None:
        """The newest server-side `updated` time (Unix seconds) of the heartbeats
        `<prefix_uri><rank>`, rank 0 to `node_count - 1`, or None where there is none: one JSON
        API `objects.get` of each object's metadata (its `updated`: "The modification time of
        the object metadata", storage.v1 discovery `Object`), never its content, which the
        nodes write. Gets, not a list: the grant's condition names objects, and a list is a
        request on the bucket (`catalog.supervisor_iam.STORAGE_CONDITIONS_SOURCE`). Any get
        that fails but for a 404 raises (the caller then counts no silence)."""
        bucket, _, prefix = _path(prefix_uri).partition("/")
        times = []
        for rank in range(node_count):
            try:
                found = self._bounded(
                    self.fs.call, "GET", "b/{}/o/{}", bucket, f"{prefix}{rank}",
                    fields="updated", json_out=True,
                )  # fmt: skip
            except FileNotFoundError:
                continue  # this node has written none yet
            times.append(_epoch(str(found["updated"])))
        return max(times) if times else None

"""Ship the node launcher's target lines to the Cloud Logging API, for VMs nothing else ships.

On Compute Engine and TPU VMs the trainer's stdout lands in a systemd journal or a startup
script's output, which no agent turns into the structured entries the dashboard's log-based
metrics read. With `TRAINSTACK_CLOUD_LOGGING=<resource type>` (`contract.CLOUD_LOGGING_ENV`,
set by those startup scripts) `trainstack.trainers.node` hands every line to a `LogShipper`, which
writes them with `entries:write`
(https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/write):

- log `projects/<project>/logs/trainstack` (`contract.LOG_ID`); a JSON object line becomes
  `jsonPayload` (its `severity`, when valid, the entry's), any other line `textPayload`;
- resource `gce_instance` {project_id, instance_id, zone} with the entry label
  `compute.googleapis.com/resource_name` = the instance name (what the dashboard's
  `gce_filters` match), or `tpu_worker` {project_id, zone, node_id, worker_id} (`node_id`
  from `TRAINSTACK_TPU_NODE_ID`, `worker_id` from `TPU_WORKER_ID`; `tpu_filters` match
  `node_id`); project, zone and instance from the metadata server (`RESOURCE_LABELS_SOURCE`);
- the access token of the VM's service account from the metadata server
  (`instance/service-accounts/default/token`; the identity holds roles/logging.logWriter).

Never in training's way: `add` only appends to a bounded buffer (the oldest lines are dropped
past `max_lines`, counted and reported on stderr); one background thread sends batches of up
to `batch_lines` every `flush_interval_s`, retries 429, 5xx and connection errors with
exponential backoff (each entry keeps its `insertId` and `timestamp`, so a retried write the
API had already stored is not duplicated), and gives up on other errors for that batch;
`close` flushes what is left within a deadline (the launcher calls it when its target exits,
SIGTERM included).

On Compute Engine the launcher's own lines (download, pip, the node launcher's exit) come
before this package is installed: `components/gpu_startup/node_helper.py log` writes them as
the same entries (tests/unit/test_launcher_logging.py holds the two together).

`TRAINSTACK_LOGGING_ENDPOINT` (`contract.LOGGING_ENDPOINT_ENV`) replaces
`https://logging.googleapis.com/`, `GCE_METADATA_HOST` (as in google-auth) the metadata
server's host: tests point both at local fakes. Standard library only (the launcher imports
it before the package's dependencies are guaranteed).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from trainstack.trainers.common.contract import (
    CLOUD_LOGGING_ENV,
    CLOUD_LOGGING_RESOURCES,
    FIELD_SEVERITY,
    LOG_ID,
    LOGGING_ENDPOINT_ENV,
    TPU_NODE_ID_ENV,
)

DEFAULT_ENDPOINT: Final = "https://logging.googleapis.com/"
METADATA_HOST_ENV: Final = "GCE_METADATA_HOST"
DEFAULT_METADATA_HOST: Final = "metadata.google.internal"
GCE_NAME_LABEL: Final = "compute.googleapis.com/resource_name"
SEVERITIES: Final = frozenset(
    ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")
)
"""LogSeverity names (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry)."""
RETRYABLE: Final = frozenset((408, 429, 500, 502, 503, 504))
RESOURCE_LABELS_VERIFIED: Final = {"gce_instance": True, "tpu_worker": False}
RESOURCE_LABELS_SOURCE: Final = {
    "gce_instance": (
        "Google's MonitoredResource reference: gce_instance has labels project_id, "
        "instance_id and zone (https://cloud.google.com/logging/docs/reference/v2/rest/v2/"
        "MonitoredResource)"
    ),
    "tpu_worker": (
        "Google's own TPU log metric reads resource.labels zone, node_id and worker_id of "
        'resource.type="tpu_worker" entries (AI-Hypercomputer/cloud-tpu-monitoring-debugging '
        "gcp_resources/gce/resources/dashboard/logging_dashboard/log_metrics/"
        "stack_trace_counter.tf); project_id as on every resource. Not read on the monitored "
        "resource list page: TO VERIFY"
    ),
}

Fetch = Callable[[str], str]
"""Reads one metadata path (relative to computeMetadata/v1/); raises OSError."""
Log = Callable[[str], None]


class ShipError(Exception):
    """A request failed; `retryable` says whether the same batch may succeed later."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def metadata_base(env: Mapping[str, str]) -> str:
    host = env.get(METADATA_HOST_ENV) or DEFAULT_METADATA_HOST
    return f"http://{host}/computeMetadata/v1/"


def logging_endpoint(env: Mapping[str, str]) -> str:
    endpoint = env.get(LOGGING_ENDPOINT_ENV) or DEFAULT_ENDPOINT
    return endpoint if endpoint.endswith("/") else endpoint + "/"


def _http(request: urllib.request.Request, timeout: float) -> bytes:
    """The response body; raises ShipError (retryable for 429, 5xx and network errors)."""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise ShipError(
            f"HTTP {exc.code} from {request.full_url}: {detail}", retryable=exc.code in RETRYABLE
        ) from None
    except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a malformed URL
        raise ShipError(f"{request.full_url}: {exc}", retryable=True) from None


def metadata_fetcher(env: Mapping[str, str], timeout: float = 5.0) -> Fetch:
    base = metadata_base(env)

    def fetch(path: str) -> str:
        request = urllib.request.Request(base + path, headers={"Metadata-Flavor": "Google"})
        return _http(request, timeout).decode("utf-8").strip()

    return fetch


@dataclass(frozen=True)
class Target:
    """Where the entries go: the log name, the monitored resource and per-entry labels."""

    log_name: str
    resource: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)


def detect_target(resource_type: str, env: Mapping[str, str], fetch: Fetch) -> Target:
    """The log name and resource of this VM; raises ShipError (retryable: metadata down) or
    ValueError (the environment cannot name the resource)."""
    project = fetch("project/project-id")
    zone = fetch("instance/zone").rsplit("/", 1)[-1]
    log_name = f"projects/{project}/logs/{LOG_ID}"
    if resource_type == "gce_instance":
        labels = {"project_id": project, "instance_id": fetch("instance/id"), "zone": zone}
        name = fetch("instance/name")
        return Target(log_name, {"type": resource_type, "labels": labels}, {GCE_NAME_LABEL: name})
    if resource_type == "tpu_worker":
        node_id = env.get(TPU_NODE_ID_ENV, "")
        if not node_id:
            raise ValueError(f"{TPU_NODE_ID_ENV}: not set; the tpu_worker resource needs it")
        worker = env.get("TPU_WORKER_ID") or fetch("instance/attributes/agent-worker-number")
        labels = {"project_id": project, "zone": zone, "node_id": node_id, "worker_id": worker}
        return Target(log_name, {"type": resource_type, "labels": labels})
    raise ValueError(
        f"{CLOUD_LOGGING_ENV}: {resource_type!r} is not supported; "
        f"valid: {', '.join(CLOUD_LOGGING_RESOURCES)}"
    )


def _timestamp(now: float) -> str:
    """RFC 3339 UTC with microseconds (Python 3.10 has no `datetime.UTC`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def make_entry(line: bytes, now: float, insert_id: str) -> dict[str, Any] | None:
    """The LogEntry of one output line (None for a blank line): a JSON object as
    `jsonPayload`, anything else as `textPayload`."""
    text = line.decode("utf-8", "replace").rstrip("\r\n")
    if not text.strip():
        return None
    entry: dict[str, Any] = {"timestamp": _timestamp(now), "insertId": insert_id}
    record: Any = None
    if text.startswith("{"):
        try:
            record = json.loads(text)
            json.dumps(record, allow_nan=False)  # NaN/Infinity: not JSON the API accepts
        except ValueError:
            record = None
    if isinstance(record, dict):
        entry["jsonPayload"] = record
        severity = str(record.get(FIELD_SEVERITY, "INFO")).upper()
        entry["severity"] = severity if severity in SEVERITIES else "INFO"
    else:
        entry["textPayload"] = text
        entry["severity"] = "DEFAULT"
    return entry


class LogShipper:
    """Buffers lines and writes them to Cloud Logging from a background thread."""

    def __init__(
        self,
        resource_type: str,
        env: Mapping[str, str],
        log: Log,
        *,
        fetch: Fetch | None = None,
        batch_lines: int = 100,
        flush_interval_s: float = 1.0,
        max_lines: int = 10_000,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.resource_type = resource_type
        self._env = dict(env)
        self._log = log
        self._fetch = fetch or metadata_fetcher(env)
        self._endpoint = logging_endpoint(env) + "v2/entries:write"
        self.batch_lines = batch_lines
        self.flush_interval_s = flush_interval_s
        self.max_lines = max_lines
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.request_timeout_s = request_timeout_s
        self._buffer: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._target: Target | None = None
        self._token: tuple[str, float] | None = None
        self._prefix = f"{os.getpid():x}-{int(time.time() * 1000):x}"
        self._seq = 0
        self.dropped = 0
        """Lines dropped because the buffer was full."""
        self._dropped_reported = 0
        self.sent = 0
        """Entries Cloud Logging accepted."""
        self.failed = 0
        """Entries given up on (a non-retryable answer, or unsent at the close deadline)."""
        self._disabled = False
        self._thread = threading.Thread(target=self._run, name="trainstack-logship", daemon=True)
        self._thread.start()

    # -- the caller's side: never blocks on the network, never raises --------------------------

    def add(self, line: bytes) -> None:
        try:
            with self._cond:
                if self._disabled or self._closing:
                    return
                self._seq += 1
                entry = make_entry(line, time.time(), f"{self._prefix}-{self._seq}")
                if entry is None:
                    return
                self._buffer.append(entry)
                if len(self._buffer) > self.max_lines:
                    self._buffer.popleft()
                    self.dropped += 1
                if len(self._buffer) >= self.batch_lines:
                    self._cond.notify()
        except Exception as exc:  # noqa: BLE001 - shipping must never break the pump
            self._log(f"cloud logging: a line was not queued: {exc}")

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is buffered, waiting at most `timeout_s`; report what was not sent."""
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + timeout_s
            self._cond.notify()
        self._thread.join(timeout_s + 1.0)
        with self._cond:
            unsent = len(self._buffer)
            self._buffer.clear()
            self._disabled = True
        self.failed += unsent
        self._report_drops()
        if unsent or self.failed or self.dropped:
            self._log(
                f"cloud logging: {self.sent} line(s) written; {self.failed} not written "
                f"({unsent} still queued at exit), {self.dropped} dropped from a full buffer"
            )

    # -- the background thread ---------------------------------------------------------------

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def _report_drops(self) -> None:
        new = self.dropped - self._dropped_reported
        if new:
            self._dropped_reported = self.dropped
            self._log(
                f"cloud logging: WARNING: buffer full ({self.max_lines} lines): dropped {new} "
                f"oldest line(s), {self.dropped} in all"
            )

    def _next_batch(self) -> list[dict[str, Any]] | None:
        """Waits for a full batch, the flush interval or close; None when done."""
        with self._cond:
            if not self._closing and len(self._buffer) < self.batch_lines:
                self._cond.wait(self.flush_interval_s)
            if not self._buffer:
                return None if self._closing else []
            return [self._buffer[i] for i in range(min(self.batch_lines, len(self._buffer)))]

    def _commit(self, batch: list[dict[str, Any]]) -> None:
        """Remove `batch` from the buffer's head (minus what was dropped meanwhile)."""
        with self._cond:
            ids = {e["insertId"] for e in batch}
            while self._buffer and self._buffer[0]["insertId"] in ids:
                self._buffer.popleft()

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            if self._closing:
                seconds = min(seconds, max(self._remaining(), 0.0))
            self._cond.wait(seconds)

    def _run(self) -> None:
        attempt = 0
        batch: list[dict[str, Any]] = []
        while True:
            try:
                pending = self._next_batch()
                if pending is None:
                    return
                batch = pending
                self._report_drops()
                if not batch:
                    continue
                if self._closing and self._remaining() <= 0:
                    return
                self._write(batch)
                self.sent += len(batch)
                self._commit(batch)
                attempt = 0
            except ShipError as exc:
                if not exc.retryable:
                    self._log(f"cloud logging: dropping {len(batch)} line(s): {exc}")
                    self.failed += len(batch)
                    self._commit(batch)
                    continue
                attempt += 1
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
                if attempt in (1, 4) or attempt % 10 == 0:
                    self._log(f"cloud logging: attempt {attempt} failed, retrying: {exc}")
                self._sleep(delay * random.uniform(0.8, 1.2))
                if self._closing and self._remaining() <= 0:
                    return
            except ValueError as exc:
                self._log(f"cloud logging: disabled: {exc}")
                with self._cond:
                    self.failed += len(self._buffer)
                    self._buffer.clear()
                    self._disabled = True
                return
            except Exception as exc:  # noqa: BLE001 - a bug here must not end training
                self._log(f"cloud logging: disabled after an unexpected error: {exc!r}")
                with self._cond:
                    self._disabled = True
                return

    def _timeout(self) -> float:
        if self._closing:
            return max(0.5, min(self.request_timeout_s, self._remaining()))
        return self.request_timeout_s

    def _access_token(self) -> str:
        now = time.monotonic()
        if self._token is None or self._token[1] <= now:
            raw = self._fetch("instance/service-accounts/default/token")
            try:
                answer = json.loads(raw)
                token, lifetime = str(answer["access_token"]), float(answer["expires_in"])
            except (KeyError, TypeError, ValueError):
                raise ShipError(
                    f"the metadata server's token is malformed: {raw[:100]!r}", retryable=True
                ) from None
            # Refreshed a minute early: a token must not expire between queue and send.
            self._token = (token, now + lifetime - 60.0)
        return self._token[0]

    def _write(self, batch: list[dict[str, Any]]) -> None:
        if self._target is None:
            try:
                self._target = detect_target(self.resource_type, self._env, self._fetch)
            except ShipError as exc:
                if exc.retryable:
                    raise
                raise ValueError(f"cannot read this VM's resource labels: {exc}") from None
        body: dict[str, Any] = {
            "logName": self._target.log_name,
            "resource": self._target.resource,
            "entries": batch,
            "partialSuccess": True,
        }
        if self._target.labels:
            body["labels"] = self._target.labels
        request = urllib.request.Request(
            self._endpoint,
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._access_token()}",
                "Content-Type": "application/json",
            },
        )
        try:
            _http(request, self._timeout())
        except ShipError as exc:
            if "HTTP 401 " in str(exc):
                self._token = None  # revoked or rotated early: fetch a new one, then retry
                raise ShipError(str(exc), retryable=True) from None
            raise


def from_env(env: Mapping[str, str], log: Log) -> LogShipper | None:
    """A started shipper when `CLOUD_LOGGING_ENV` asks for one, else None (a value it does not
    know is reported and ignored: training goes on unshipped)."""
    value = env.get(CLOUD_LOGGING_ENV, "").strip()
    if value in ("", "0"):
        return None
    if value not in CLOUD_LOGGING_RESOURCES:
        log(
            f"{CLOUD_LOGGING_ENV}: {value!r} is not a resource type this launcher writes; "
            f"valid: {', '.join(CLOUD_LOGGING_RESOURCES)}; lines go to stdout only"
        )
        return None
    return LogShipper(value, env, log)


__all__ = [
    "DEFAULT_ENDPOINT",
    "RESOURCE_LABELS_SOURCE",
    "RESOURCE_LABELS_VERIFIED",
    "LogShipper",
    "ShipError",
    "Target",
    "detect_target",
    "from_env",
    "make_entry",
]

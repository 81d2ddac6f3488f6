"""`trainstack logs`: a deployed stack's training logs, from Cloud Logging or the local file.

Which entries belong to a stack (`trainstack.infra.log_source`, each target's `log_filter`)
is what its dashboard charts (`trainstack.components.training_dashboard.
targets`): the monitored resource type of the target (`LOG_RESOURCE_TYPES`) and the
dashboard's own filter of the deployment (`vertex_filter_text` on the Vertex job id,
`gke_filter_text` on the cluster plus the Job's pod names, `tpu_filter_text` on the slice,
`gce_filters` on the instance names). `--worker N` narrows that to one machine: Vertex
replica N (`resource.labels.task_name`: `workerpool0-0` is replica 0, the chief;
`workerpool1-<N-1>` the others), GKE pod of completion index N, TPU worker N
(`resource.labels.worker_id`), GCE instance N (`instance_names[N]`); on `local`, worker
process N (the records' `worker` field).

A stack with a run supervisor (a `supervisor_events_uri` output) also shows its actions: the
supervisor prints each event it records as one structured log line
(`trainstack.components.supervisor`), which Cloud Logging stores under its function's Cloud
Run service (`supervisor_query`). Without `--worker` one query reads both, oldest first;
`--worker N` reads machine N's trainer entries only. An action reads
`10:02:03 supervisor: node PREEMPTED -> delete: ok` (`supervisor_event_text`, the wording
`trainstack status` lists them with).

Entries are read with `entries.list` (Cloud Logging v2). `--follow` polls it every few
seconds (the API allows 60 reads a minute per project) from a timestamp cursor that starts
`OVERLAP_S` before the newest entry seen, so an entry that arrives late is still shown, and
skips the insert ids it has shown already, so nothing prints twice.

    source = log_source(cfg, stack, outputs, worker=None)  # trainstack.infra.log_source
    for line in read_lines(source, endpoints, follow=False):
        print(line)
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from trainstack.components.training_dashboard.targets import LOG_RESOURCE_TYPES
from trainstack.infra.stack_outputs import OutputsError
from trainstack.trainers.common.contract import EVENT_CAPACITY_ENDED as CAPACITY_ENDED
from trainstack.trainers.common.contract import (
    EVENT_CHECKPOINT,
    EVENT_DONE,
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_LOSS,
    FIELD_NODE,
    FIELD_PARAMS_SHA256,
    FIELD_RANK,
    FIELD_SAMPLES_PER_S,
    FIELD_STALL,
    FIELD_STEP,
    FIELD_TIME,
    FIELD_TOKENS_PER_S,
    FIELD_WORKER,
)
from trainstack.trainers.common.printable import printable

APIS = ("logging", "compute", "tpu", "aiplatform", "storage", "kubernetes")
"""Names `--endpoint API=URL` accepts (tests point each at a local fake)."""
OVERLAP_S = 60.0
PAGE_SIZE = 1000
LOG_API = "logging.v2"

Endpoints = dict[str, str]


class LogsError(Exception):
    """Logs cannot be read; the message is the whole error line."""


def parse_endpoints(values: list[str]) -> Endpoints:
    """`["logging=http://127.0.0.1:8080/"]` -> {"logging": "http://127.0.0.1:8080/"}."""
    out: Endpoints = {}
    for value in values:
        api, sep, url = value.partition("=")
        if not sep or api not in APIS or not url:
            raise LogsError(
                f"--endpoint: {value!r} is not API=URL; valid: API one of {', '.join(APIS)}"
            )
        out[api] = url
    return out


@dataclass(frozen=True)
class CloudLogs:
    """Entries of one deployment in Cloud Logging."""

    project: str
    filter: str


@dataclass(frozen=True)
class FileLogs:
    """The JSON-lines log a local run writes."""

    path: Path
    worker: int | None


def check_worker(worker: int | None, machines: int, stack: str) -> None:
    """`--worker N` must name one of the stack's `machines`."""
    if worker is not None and not 0 <= worker < machines:
        raise LogsError(
            f"--worker: {worker} is not a machine of stack {stack!r}; valid: 0..{machines - 1}"
        )


def log_query(platform: str, scope: str) -> str:
    """The Logging query of `scope` within the monitored resource type of `platform` (a
    platform key of `LOG_RESOURCE_TYPES`: tpu, gke, gce, vertex)."""
    return f'resource.type="{LOG_RESOURCE_TYPES[platform]}" AND {scope}'


SUPERVISOR_RESOURCE_TYPE = "cloud_run_revision"
"""The monitored resource of a Cloud Functions (gen2) function's logs: its Cloud Run service's
revisions, `resource.labels.service_name` the function's name lower-cased with `_` as `-`.
Sources: the Google Cloud SDK's source of `gcloud functions logs read`
(`_CreateGen2LogFilterBase`:
`resource.type="cloud_run_revision"`, "GCFv2 functions' service names are the function ID
lower-cased with '_' replaced with '-'"); https://cloud.google.com/run/docs/logging
(`gcloud logging read "resource.type=cloud_run_revision AND
resource.labels.service_name=SERVICE"`)."""
SUPERVISOR_FIELDS = ("seen", "action", "result")
"""Fields every supervisor event has (components/supervisor/main.py) and no trainer record."""


def supervisor_query(function_name: str) -> str:
    """The Logging query of the supervisor's event lines: its function's service, and only
    entries with an event's `action` (not the service's request and system logs)."""
    return (
        f'resource.type="{SUPERVISOR_RESOURCE_TYPE}" AND '
        f'resource.labels.service_name="{function_name}" AND jsonPayload.action:*'
    )


def any_of(*queries: str) -> str:
    """Entries matching any of `queries`, parenthesised whole: `--follow` appends `AND
    timestamp>=...`, and the Logging query language binds OR tighter than AND
    (https://cloud.google.com/logging/docs/view/logging-query-language, "Boolean operators")
    where most languages do the reverse."""
    return "(" + " OR ".join(f"({q})" for q in queries) + ")"


# ------------------------------------------------------------------------------ reading


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp (Cloud Logging writes up to nanoseconds) as an aware datetime."""
    match = re.fullmatch(r"(.+T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    fraction = (match[2] or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match[3] == "Z" else match[3]
    return datetime.fromisoformat(f"{match[1]}.{fraction}{zone}").astimezone(UTC)


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def list_entries(
    client: Any, project: str, query: str, *, order: str = "timestamp asc", limit: int = 0
) -> Iterator[dict[str, Any]]:
    """Every entry of `project` matching `query` (at most `limit` when > 0), page by page."""
    from trainstack.components._google_api import ApiError, RetryPolicy, execute

    token: str | None = None
    count = 0
    while True:
        body: dict[str, Any] = {
            "resourceNames": [f"projects/{project}"],
            "filter": query,
            "orderBy": order,
            "pageSize": min(limit, PAGE_SIZE) if limit else PAGE_SIZE,
        }
        if token:
            body["pageToken"] = token
        try:
            page = execute(client.entries().list(body=body), RetryPolicy(max_attempts=4))
        except ApiError as exc:
            raise LogsError(f"cannot read Cloud Logging of project {project!r}: {exc}") from None
        for entry in page.get("entries", []):
            yield entry
            count += 1
            if limit and count >= limit:
                return
        token = page.get("nextPageToken")
        if not token:
            return


def logging_client(endpoints: Endpoints) -> Any:
    from trainstack.components._google_api import build_client

    return build_client(LOG_API, api_endpoint=endpoints.get("logging"))


def _entry_key(entry: dict[str, Any]) -> str:
    return str(entry.get("insertId") or json.dumps(entry, sort_keys=True))


def cloud_entries(
    source: CloudLogs,
    endpoints: Endpoints,
    *,
    follow: bool,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """The source's entries, oldest first; with `follow`, then every new one as it comes."""
    client = logging_client(endpoints)
    seen: dict[str, datetime] = {}
    newest: datetime | None = None
    while True:
        query = source.filter
        if newest is not None:
            query += f' AND timestamp>="{format_time(newest - timedelta(seconds=OVERLAP_S))}"'
        for entry in list_entries(client, source.project, query):
            key = _entry_key(entry)
            if key in seen:
                continue
            stamp = parse_time(str(entry.get("timestamp") or entry.get("receiveTimestamp")))
            seen[key] = stamp
            newest = stamp if newest is None else max(newest, stamp)
            yield entry
        if not follow:
            return
        if newest is not None:
            horizon = newest - timedelta(seconds=2 * OVERLAP_S)
            seen = {k: t for k, t in seen.items() if t >= horizon}
        sleep(poll_s)


def file_lines(
    source: FileLogs,
    *,
    follow: bool,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """The local log's lines; with `follow`, then each line as it is completed."""
    if not follow and not source.path.is_file():
        blocker = next((p for p in source.path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise LogsError(
                f"no log file at {source.path}: {blocker} is a file, not a folder; valid: move "
                "that file away (local-run and `pulumi up` write the log there)"
            )
        if source.path.is_dir():
            raise LogsError(
                f"{source.path} is a folder where the run's log file is expected; valid: move "
                "that folder away (local-run and `pulumi up` write the log there)"
            )
        raise LogsError(
            f"no log file at {source.path}; valid: the log of a run started with "
            "`trainstack local-run` or `pulumi up` on a local stack"
        )
    offset = 0
    partial = b""
    while True:
        try:
            with source.path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        *complete, partial = (partial + chunk).split(b"\n")
        for raw in complete:
            yield raw.decode("utf-8", "replace")
        if not follow:
            if partial:
                yield partial.decode("utf-8", "replace")
            return
        sleep(poll_s)


# ------------------------------------------------------------------------------ rendering


def entry_record(entry: dict[str, Any]) -> dict[str, Any] | str:
    """A Cloud Logging entry's trainer record (its jsonPayload, or a JSON text line), else
    its text."""
    payload = entry.get("jsonPayload")
    if isinstance(payload, dict):
        return payload
    return line_record(str(entry.get("textPayload", "")))


def line_record(line: str) -> dict[str, Any] | str:
    """A JSON object line as a record; any other line as it is, and so is one Python's JSON
    reader refuses past its syntax: an integer of more than 4,300 digits (a ValueError,
    `sys.set_int_max_str_digits`) or values nested past the recursion limit."""
    text = line.strip()
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            return line
        if isinstance(record, dict):
            return record
    return line


def _is_number(value: Any) -> bool:
    """A JSON number a float holds (not a bool, not an integer past a float's range)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: float, digits: int) -> str:
    return f"{float(value):.{digits}f}"


def is_supervisor_event(record: dict[str, Any] | str) -> bool:
    """Whether `record` is a run supervisor's event rather than a trainer's record."""
    return (
        isinstance(record, dict)
        and FIELD_EVENT not in record
        and all(field in record for field in SUPERVISOR_FIELDS)
    )


SUPERVISED_KINDS = {
    "nodes": "node",
    "queuedResources": "queued resource",
    "instanceGroupManagers": "instance group",
    "nodePools": "node pool",
}
"""What the supervisor looks after, by the collection in its resource name."""
UNREADABLE = "UNKNOWN"
"""What a supervisor event saw where its check could not read the compute
(components/supervisor/main.py `UNREADABLE`: a 403 where a grant is wrong, a transport
error)."""


def ended_text(event: dict[str, Any]) -> str:
    """The run's end a supervisor event names: its `reason`, or where a stage failed for
    good, on which machine (its node rank, where the record named it) and why (`failed at
    package_install on node 1: pip exited 1`)."""
    if event.get("reason") == "failed" and event.get("stage"):
        node = f" on node {event['node']}" if event.get("node") is not None else ""
        return f"failed at {event['stage']}{node}: {event.get('detail') or 'no reason given'}"
    if event.get("reason") == CAPACITY_ENDED:
        # A flex-start machine's run duration (trainstack.trainers.common.deadline).
        step = event.get("step")
        saved = f"checkpoint at step {step}" if step is not None else "no checkpoint step known"
        return f"flex-start duration ended; {saved}"
    return str(event.get("reason"))


def supervisor_event_text(event: dict[str, Any]) -> str:
    """One supervisor event (components/supervisor/main.py) in words: what it looks after and
    the state it saw, the run's end if that was why, then what it did and how that went;
    `node PREEMPTED -> delete: ok`, `node NOT_FOUND -> create: failed (HTTP 429: ...): next
    try after <time>`, `node READY run ended (done) -> stop: ok`, `node READY: recovered`,
    `instance group cannot be read (HTTP 403: ...): the supervisor can neither recover nor
    stop it`."""
    parts = str(event.get("resource", "")).split("/")
    kind = SUPERVISED_KINDS.get(parts[-2], parts[-2]) if len(parts) > 1 else "compute"
    if event.get("seen") == UNREADABLE:
        error = str(event.get("result", "")).removeprefix("error: ")
        if event.get("reason"):
            return (
                f"{kind} cannot be read ({error}) after the run ended ({ended_text(event)}): "
                "it may still be billing"
            )
        return f"{kind} cannot be read ({error}): the supervisor can neither recover nor stop it"
    head = f"{kind} {event.get('seen')}"
    result = str(event.get("result", ""))
    if event.get("reason"):
        head += f" run ended ({ended_text(event)})"
        result = result.removeprefix("run ended; ")
    failed = result.startswith("error: ")
    if failed:
        result = f"failed ({result.removeprefix('error: ')})"
    action = event.get("action", "none")
    text = f"{head}: {result}" if action == "none" else f"{head} -> {action}: {result}"
    if failed and action == "create" and event.get("next_allowed"):
        text += f": next try after {event['next_allowed']}"
    return text


def render(record: dict[str, Any] | str, timestamp: datetime | None = None) -> str:
    """One readable line: time, node and rank, event, step, then the event's numbers
    (train: loss, samples/s or tokens/s; checkpoint: stall; done: params digest); a
    supervisor's event as time, `supervisor:` and `supervisor_event_text`. Text lines come
    back as they are."""
    if isinstance(record, str):
        return record
    if is_supervisor_event(record):
        if timestamp is None and isinstance(record.get("time"), str):
            timestamp = parse_time(record["time"])
        stamp = [timestamp.strftime("%H:%M:%S")] if timestamp is not None else []
        return " ".join([*stamp, "supervisor:", supervisor_event_text(record)])
    if timestamp is None and _is_number(record.get(FIELD_TIME)):
        # A time no clock gives (1e300, NaN) is no time: the line goes without one.
        with contextlib.suppress(OverflowError, ValueError, OSError):
            timestamp = datetime.fromtimestamp(float(record[FIELD_TIME]), UTC)
    parts = [timestamp.strftime("%H:%M:%S")] if timestamp is not None else []
    # Only fields of the type the trainers write are shown: a record is a line anyone's code
    # may print, and `step {'a': 1}` says nothing true.
    for field in (FIELD_NODE, FIELD_RANK):
        if _is_count(record.get(field)):
            parts.append(f"{field} {record[field]}")
    event = record.get(FIELD_EVENT)
    parts.append(event if isinstance(event, str) else "-")
    if _is_count(record.get(FIELD_STEP)):
        parts.append(f"step {record[FIELD_STEP]}")
    if event == EVENT_TRAIN:
        if _is_number(record.get(FIELD_LOSS)):
            parts.append(f"loss {_number(record[FIELD_LOSS], 4)}")
        for field, unit in ((FIELD_SAMPLES_PER_S, "samples/s"), (FIELD_TOKENS_PER_S, "tokens/s")):
            if _is_number(record.get(field)):
                parts.append(f"{_number(record[field], 1)} {unit}")
    elif event == EVENT_CHECKPOINT and _is_number(record.get(FIELD_STALL)):
        parts.append(f"stall {_number(record[FIELD_STALL], 2)}s")
    elif event == EVENT_DONE and isinstance(record.get(FIELD_PARAMS_SHA256), str):
        parts.append(f"params_sha256 {record[FIELD_PARAMS_SHA256]}")
    return " ".join(parts)


def read_lines(
    source: CloudLogs | FileLogs,
    endpoints: Endpoints,
    *,
    follow: bool,
    as_json: bool,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """The lines `trainstack logs` prints: rendered, or with `as_json` one JSON record per
    line (a text line as `{"text": ...}`)."""
    if isinstance(source, FileLogs):
        for line in file_lines(source, follow=follow, poll_s=poll_s, sleep=sleep):
            if not line.strip():
                continue
            record = line_record(line)
            if source.worker is not None and (
                isinstance(record, str) or record.get(FIELD_WORKER) != source.worker
            ):
                continue
            yield _output(record, None, as_json)
        return
    for entry in cloud_entries(source, endpoints, follow=follow, poll_s=poll_s, sleep=sleep):
        stamp = entry.get("timestamp")
        yield _output(entry_record(entry), parse_time(stamp) if stamp else None, as_json)


def _finite(value: Any) -> Any:
    """`value` with NaN and the infinities as None: JSON has no such numbers (RFC 8259
    section 6), though Python's json reads and writes them by default."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _output(record: dict[str, Any] | str, stamp: datetime | None, as_json: bool) -> str:
    if as_json:
        # json.dumps escapes every control character (and all non-ASCII) already.
        shown = _finite(record) if isinstance(record, dict) else {"text": record}
        return json.dumps(shown, allow_nan=False)
    return printable(render(record, stamp))


__all__ = [
    "APIS",
    "UNREADABLE",
    "CloudLogs",
    "FileLogs",
    "LogsError",
    "OutputsError",
    "any_of",
    "check_worker",
    "ended_text",
    "log_query",
    "parse_endpoints",
    "printable",
    "read_lines",
    "render",
    "supervisor_event_text",
    "supervisor_query",
]

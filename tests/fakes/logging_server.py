"""A local HTTP server implementing the two Cloud Logging v2 endpoints trainstack uses.

    with LoggingFakeServer() as server:
        writer(endpoint=server.endpoint)      # POST {endpoint}v2/entries:write
        reader(endpoint=server.endpoint)      # POST {endpoint}v2/entries:list
        server.entries                        # every stored LogEntry, in write order
        server.matching('jsonPayload.event="train"')   # what a query would select
        stdout_entry(project, resource, line, time)   # a Cloud Run container's stdout line

`entries:write` (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/write)
stores each entry with the request's `logName`, `resource` and `labels` as defaults, the way
the API does, and a `receiveTimestamp`; an entry without a log name or resource answers 400.
`entries:list` (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list)
answers the entries of `resourceNames` that match `filter`, ordered by `orderBy`
(`timestamp asc` default, or `timestamp desc`), paged with `pageSize`/`pageToken`.

Filters are evaluated, not ignored, for the part of the Logging query language trainstack
writes: comparisons `=`, `!=`, `=~` (RE2-like regular expression, Python `re.search`), `>`,
`>=`, `<`, `<=` (string order, right for RFC 3339 timestamps), `:*` (field present);
`AND`, `OR`, `NOT`, parentheses; field paths with quoted segments
(`labels."compute.googleapis.com/resource_name"`). Anything else answers 400, so a filter the
fake cannot evaluate fails the test instead of matching everything.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from tests.fakes import LocalServer, google_error, json_handler

Entry = dict[str, Any]
Predicate = Callable[[Entry], bool]

_TOKEN = re.compile(
    r"\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<op>=~|!=|>=|<=|:\*|=|>|<)"
    r'|(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?[0-9][0-9.]*)|(?P<word>[A-Za-z_][A-Za-z0-9_]*(?:\.(?:"[^"]*"|[A-Za-z0-9_]+))*))'
)


class FilterError(ValueError):
    """A filter outside the subset the fake evaluates."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise FilterError(f"cannot parse filter at {text[pos:]!r}")
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _path(word: str) -> list[str]:
    return [part.strip('"') for part in re.findall(r'"[^"]*"|[^.]+', word)]


def _lookup(entry: Entry, path: list[str]) -> Any:
    value: Any = entry
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _compare(path: list[str], op: str, literal: str) -> Predicate:
    def test(entry: Entry) -> bool:
        value = _lookup(entry, path)
        if op == ":*":
            return value is not None
        if value is None:
            return op == "!="
        text = _as_text(value)
        if op == "=":
            return text == literal
        if op == "!=":
            return text != literal
        if op == "=~":
            return re.search(literal, text) is not None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number, bound = float(value), float(literal)
            return {">": number > bound, ">=": number >= bound, "<": number < bound}.get(
                op, number <= bound
            )
        return {">": text > literal, ">=": text >= literal, "<": text < literal}.get(
            op, text <= literal
        )

    return test


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        token = self._peek()
        if token is None:
            raise FilterError("filter ends too early")
        self.pos += 1
        return token

    def parse(self) -> Predicate:
        if not self.tokens:
            return lambda entry: True
        predicate = self._or()
        if self._peek() is not None:
            raise FilterError(f"unexpected {self._peek()!r}")
        return predicate

    def _or(self) -> Predicate:
        parts = [self._and()]
        while self._peek() == ("word", "OR"):
            self._take()
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else (lambda e: any(p(e) for p in parts))

    def _and(self) -> Predicate:
        parts = [self._not()]
        while True:
            token = self._peek()
            if token == ("word", "AND"):
                self._take()
            elif token is None or token[0] == "rp" or token == ("word", "OR"):
                break
            parts.append(self._not())  # juxtaposition is AND in the query language
        return parts[0] if len(parts) == 1 else (lambda e: all(p(e) for p in parts))

    def _not(self) -> Predicate:
        if self._peek() == ("word", "NOT"):
            self._take()
            inner = self._not()
            return lambda e: not inner(e)
        return self._atom()

    def _atom(self) -> Predicate:
        kind, text = self._take()
        if kind == "lp":
            inner = self._or()
            if self._take()[0] != "rp":
                raise FilterError("missing )")
            return inner
        if kind != "word":
            raise FilterError(f"expected a field, got {text!r}")
        op_kind, op = self._take()
        if op_kind != "op":
            raise FilterError(f"expected a comparison after {text}, got {op!r}")
        if op == ":*":
            return _compare(_path(text), op, "")
        value_kind, value = self._take()
        if value_kind == "str":
            literal = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif value_kind in ("word", "num"):
            literal = value
        else:
            raise FilterError(f"expected a value after {text}{op}")
        return _compare(_path(text), op, literal)


def parse_filter(text: str) -> Predicate:
    """A predicate over LogEntry dicts; raises FilterError outside the supported subset."""
    return _Parser(text).parse()


_STDOUT_IDS = itertools.count(1)


def stdout_entry(project: str, resource: Entry, line: str, timestamp: str) -> Entry:
    """The entry Cloud Run's integrated logging agent makes of one line a function or service
    prints on stdout (https://cloud.google.com/logging/docs/structured-logging): a JSON object
    becomes the `jsonPayload`, its special field `severity` the entry's own `severity`; any
    other line the `textPayload`. `timestamp`: when the line was written (RFC 3339)."""
    entry: Entry = {
        "insertId": f"stdout-{next(_STDOUT_IDS)}",
        "logName": f"projects/{project}/logs/run.googleapis.com%2Fstdout",
        "resource": resource,
        "timestamp": timestamp,
    }
    try:
        payload = json.loads(line)
    except json.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        return {**entry, "textPayload": line}
    severity = payload.pop("severity", None)
    return {**entry, "jsonPayload": payload, **({"severity": severity} if severity else {})}


class LoggingFakeServer(LocalServer):
    """Fake Cloud Logging v2 (`entries:write`, `entries:list`) on 127.0.0.1."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.requests: list[tuple[str, str, Any]] = []
        self._faults: list[int] = []
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        return self.base_url + "/"

    def fail_next(self, count: int, status: int = 503) -> None:
        """The next `count` requests answer `status`."""
        with self._lock:
            self._faults.extend([status] * count)

    def add(self, *entries: Entry) -> None:
        """Store entries directly, as if another writer had sent them."""
        with self._lock:
            self.entries.extend(entries)

    def matching(self, text: str) -> list[Entry]:
        predicate = parse_filter(text)
        with self._lock:
            return [e for e in self.entries if predicate(e)]

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        path = urlsplit(raw_path).path
        with self._lock:
            self.requests.append((method, path, body))
            if self._faults:
                status = self._faults.pop(0)
                return status, google_error(status, "injected fault")
        if method == "POST" and path == "/v2/entries:write":
            return self._write(body or {})
        if method == "POST" and path == "/v2/entries:list":
            return self._list(body or {})
        return 404, google_error(404, f"no route {method} {path}")

    def _write(self, body: dict[str, Any]) -> tuple[int, Any]:
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        stored: list[Entry] = []
        for entry in body.get("entries") or []:
            merged = dict(entry)
            merged.setdefault("logName", body.get("logName"))
            merged.setdefault("resource", body.get("resource"))
            labels = {**(body.get("labels") or {}), **(entry.get("labels") or {})}
            if labels:
                merged["labels"] = labels
            if not merged.get("logName") or not merged.get("resource"):
                return 400, google_error(400, "every entry needs a logName and a resource")
            if "jsonPayload" in merged and "textPayload" in merged:
                return 400, google_error(400, "an entry has one payload")
            merged.setdefault("timestamp", now)
            merged["receiveTimestamp"] = now
            stored.append(merged)
        with self._lock:
            self.entries.extend(stored)
        return 200, {}

    def _list(self, body: dict[str, Any]) -> tuple[int, Any]:
        projects = [
            name.split("/", 1)[1]
            for name in body.get("resourceNames") or []
            if name.startswith("projects/")
        ]
        if not projects:
            return 400, google_error(400, "resourceNames must name at least one project")
        try:
            predicate = parse_filter(body.get("filter") or "")
        except FilterError as exc:
            return 400, google_error(400, f"unsupported filter: {exc}")
        with self._lock:
            selected = [
                e
                for e in self.entries
                if any(
                    str(e.get("logName", "")).startswith(f"projects/{p}/logs/") for p in projects
                )
            ]
        selected = [e for e in selected if predicate(e)]
        order = (body.get("orderBy") or "timestamp asc").strip()
        if order not in ("timestamp asc", "timestamp desc", "timestamp"):
            return 400, google_error(400, f"unsupported orderBy {order!r}")
        selected.sort(key=lambda e: str(e.get("timestamp", "")), reverse=order.endswith("desc"))
        start = int(body.get("pageToken") or 0)
        size = int(body.get("pageSize") or 50)
        page = selected[start : start + size]
        answer: dict[str, Any] = {"entries": page} if page else {}
        if start + size < len(selected):
            answer["nextPageToken"] = str(start + size)
        return 200, answer

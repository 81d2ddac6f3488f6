"""A local HTTP server implementing the Vertex AI job endpoints and job states.

    with VertexFakeServer() as server:
        provider.create({..., "api_endpoint": server.endpoint})
        server.fail_next(2, 503, "POST")  # the next two POSTs get 503
        server.drop_after_create()        # next create succeeds, connection is then dropped
        server.requests                   # [(method, path, json body or None), ...]

Endpoints (`v1/projects/{p}/locations/{r}/{customJobs|hyperparameterTuningJobs}`): POST
create, GET list (`filter=labels.k="v"`), GET job, POST `{name}:cancel`, DELETE job.
States: a new job is QUEUED; each GET advances QUEUED -> PENDING -> RUNNING, and
CANCELLING -> CANCELLED. Cancelling a terminal job and deleting a non-terminal job answer
400 FAILED_PRECONDITION; unknown jobs answer 404 NOT_FOUND, all in Google's error shape.
"""

from __future__ import annotations

import itertools
import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalServer, google_error, json_handler

KINDS = ("customJobs", "hyperparameterTuningJobs")
TERMINAL = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
}
_NEXT_ON_GET = {
    "JOB_STATE_QUEUED": "JOB_STATE_PENDING",
    "JOB_STATE_PENDING": "JOB_STATE_RUNNING",
    "JOB_STATE_CANCELLING": "JOB_STATE_CANCELLED",
}
_COLLECTION = re.compile(
    r"^/v1/(projects/[^/]+/locations/[^/]+)/(customJobs|hyperparameterTuningJobs)$"
)
_JOB = re.compile(
    r"^/v1/(projects/[^/]+/locations/[^/]+/(?:customJobs|hyperparameterTuningJobs)/[^/:]+)"
    r"(:cancel)?$"
)
_LABEL_FILTER = re.compile(r'^labels\.([A-Za-z0-9_-]+)="?([^"]*)"?$')


class VertexFakeServer(LocalServer):
    """Fake Vertex job API on 127.0.0.1 (free port) in a background thread."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self._faults: list[tuple[int, str | None]] = []
        self._drop_creates = 0
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        return self.base_url + "/"

    # -- fault injection -------------------------------------------------------------
    def fail_next(self, count: int, status: int = 503, method: str | None = None) -> None:
        """The next `count` requests (of `method`, or any) answer `status`."""
        with self._lock:
            self._faults.extend([(status, method)] * count)

    def drop_after_create(self, count: int = 1) -> None:
        """The next `count` creates store the job, then close the connection unanswered."""
        with self._lock:
            self._drop_creates += count

    def set_state(self, name: str, state: str) -> None:
        with self._lock:
            self.jobs[name]["state"] = state

    def calls(self, method: str, suffix: str = "") -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] == method and r[1].endswith(suffix)]

    # -- request handling ------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        """(status, json) to answer, or None to drop the connection."""
        url = urlsplit(raw_path)
        path = url.path
        with self._lock:
            self.requests.append((method, path, body))
            for i, (status, only) in enumerate(self._faults):
                if only is None or only == method:
                    del self._faults[i]
                    return status, google_error(status, "injected fault")
            collection = _COLLECTION.match(path)
            if collection and method == "POST":
                return self._create(collection.group(1), collection.group(2), body)
            if collection and method == "GET":
                return self._list(collection.group(1), collection.group(2), parse_qs(url.query))
            match = _JOB.match(path)
            if match is None:
                return 404, google_error(404, f"no route {method} {path}")
            name, cancel = match.group(1), match.group(2)
            job = self.jobs.get(name)
            if job is None:
                return 404, google_error(404, f"{name} not found")
            if cancel and method == "POST":
                if job["state"] in TERMINAL:
                    return 400, google_error(400, f"{name} is already {job['state']}")
                job["state"] = "JOB_STATE_CANCELLING"
                return 200, {}
            if method == "GET":
                job["state"] = _NEXT_ON_GET.get(job["state"], job["state"])
                return 200, job
            if method == "DELETE":
                if job["state"] not in TERMINAL:
                    return 400, google_error(400, f"{name} is {job['state']}; cancel it first")
                del self.jobs[name]
                return 200, {"name": f"{name}/operations/1", "done": True}
            return 404, google_error(404, f"no route {method} {path}")

    def _create(self, parent: str, kind: str, body: Any) -> tuple[int, Any] | None:
        if not isinstance(body, dict) or "displayName" not in body:
            return 400, google_error(400, "displayName is required")
        name = f"{parent}/{kind}/{next(self._ids)}"
        job = {
            **body,
            "name": name,
            "state": "JOB_STATE_QUEUED",
            "createTime": "2026-11-01T00:00:00Z",
        }
        self.jobs[name] = job
        if self._drop_creates:
            self._drop_creates -= 1
            return None
        return 200, job

    def _list(self, parent: str, kind: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        jobs = [j for n, j in self.jobs.items() if n.startswith(f"{parent}/{kind}/")]
        for text in query.get("filter", []):
            match = _LABEL_FILTER.match(text)
            if match is None:
                return 400, google_error(400, f"unsupported filter {text!r}")
            key, value = match.groups()
            jobs = [j for j in jobs if j.get("labels", {}).get(key) == value]
        return 200, {kind: jobs} if jobs else {}

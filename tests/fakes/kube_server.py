"""A local HTTP server implementing the two Kubernetes API reads `trainstack status` makes.

    with KubeFakeServer() as server:
        server.jobs["default/train"] = {"status": {"active": 2, "startTime": "..."}}
        server.pods["default"] = [{"metadata": {"name": "train-0-x", "labels": {...}}, ...}]

`GET /apis/batch/v1/namespaces/{ns}/jobs/{name}` answers the Job (404 `Status` otherwise);
`GET /api/v1/namespaces/{ns}/pods?labelSelector=k=v[,k=v]` answers a PodList of the pods
whose labels match every `k=v` (equality selectors only; anything else answers 400).
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalServer, json_handler


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "code": code}  # fmt: skip


class KubeFakeServer(LocalServer):
    """Fake Kubernetes API server (plain HTTP) on 127.0.0.1 in a background thread."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        """By `<namespace>/<name>`."""
        self.pods: dict[str, list[dict[str, Any]]] = {}
        """By namespace."""
        self.requests: list[str] = []
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        return self.base_url

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        url = urlsplit(raw_path)
        parts = url.path.strip("/").split("/")
        with self._lock:
            self.requests.append(raw_path)
            if method == "GET" and parts[:3] == ["apis", "batch", "v1"] and len(parts) == 7:
                job = self.jobs.get(f"{parts[4]}/{parts[6]}")
                if job is None:
                    return 404, _status(404, f'jobs.batch "{parts[6]}" not found')
                return 200, {"kind": "Job", "apiVersion": "batch/v1", **job}
            if method == "GET" and parts[:2] == ["api", "v1"] and len(parts) == 5:
                wanted: dict[str, str] = {}
                for term in ",".join(parse_qs(url.query).get("labelSelector", [])).split(","):
                    key, sep, value = term.partition("=")
                    if not sep or not key or "!" in key:
                        return 400, _status(400, f"unsupported labelSelector term {term!r}")
                    wanted[key] = value
                items = [
                    p
                    for p in self.pods.get(parts[3], [])
                    if all(p["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
                ]
                return 200, {"kind": "PodList", "apiVersion": "v1", "items": items}
            return 404, _status(404, f"no route {method} {url.path}")

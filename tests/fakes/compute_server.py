"""A local HTTP server implementing Compute Engine v1 `instances.get`, and
`instanceGroupManagers.get` and `.resize` (POST `.../resize?size=N`, no body; it answers an
Operation and sets `targetSize`, as the discovery document's method does).

    with ComputeFakeServer() as server:
        server.instances["p/us-central1-c/vm-0"] = {"status": "RUNNING", ...}
        server.endpoint   # the API's base URL, `http://127.0.0.1:<port>/compute/v1/`
        # GET {endpoint}projects/p/zones/us-central1-c/instances/vm-0

An instance the test did not add answers 404 in Google's error shape; the answer carries
`name` and `zone` as the API does.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalServer, google_error, json_handler

_INSTANCE = re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$")
_GROUP = re.compile(
    r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instanceGroupManagers/([^/]+?)(/resize)?$"
)


class ComputeFakeServer(LocalServer):
    """Fake Compute Engine instances on 127.0.0.1 (free port) in a background thread."""

    def __init__(self) -> None:
        self.instances: dict[str, dict[str, Any]] = {}
        """By `<project>/<zone>/<name>`."""
        self.groups: dict[str, dict[str, Any]] = {}
        """Managed instance groups by `<project>/<zone>/<name>` (`targetSize` at least)."""
        self.requests: list[tuple[str, str]] = []
        self.resizes: list[tuple[str, int]] = []
        """(`<project>/<zone>/<name>`, size) of every resize call."""
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        # What the discovery client takes as a base URL: root URL plus service path.
        return self.base_url + "/compute/v1/"

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        path = urlsplit(raw_path).path
        with self._lock:
            self.requests.append((method, path))
            group = _GROUP.match(path)
            if group is not None:
                return self._group(method, group.groups(), parse_qs(urlsplit(raw_path).query))
            match = _INSTANCE.match(path)
            if method != "GET" or match is None:
                return 404, google_error(404, f"no route {method} {path}")
            project, zone, name = match.groups()
            found = self.instances.get(f"{project}/{zone}/{name}")
            if found is None:
                return 404, google_error(404, f"instance {name} in {zone} not found")
            return 200, {"kind": "compute#instance", "name": name, "zone": zone, **found}

    def _group(
        self, method: str, parts: tuple[str, ...], query: dict[str, list[str]]
    ) -> tuple[int, Any]:
        project, zone, name, resize = parts
        key = f"{project}/{zone}/{name}"
        found = self.groups.get(key)
        if found is None:
            return 404, google_error(404, f"instance group manager {name} not found")
        if method == "GET" and not resize:
            return 200, {"kind": "compute#instanceGroupManager", "name": name, **found}
        if method == "POST" and resize and query.get("size"):
            size = int(query["size"][0])
            self.resizes.append((key, size))
            found["targetSize"] = size
            return 200, {"kind": "compute#operation", "name": f"operation-{len(self.resizes)}"}
        return 400, google_error(400, f"bad request {method} {name}{resize or ''}")

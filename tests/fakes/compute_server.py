"""A local HTTP server implementing Compute Engine v1 `instances.get`, and
`instanceGroupManagers.get` and `.resize` (POST `.../resize?size=N`, no body; it answers an
Operation and sets `targetSize`, as the discovery document's method does).

    with ComputeFakeServer(deletion_gets=2) as server:
        server.instances["p/us-central1-c/vm-0"] = {"status": "RUNNING", ...}
        server.groups["p/us-central1-a/g"] = {"targetSize": 2}
        server.endpoint   # the API's base URL, `http://127.0.0.1:<port>/compute/v1/`
        server.denied = "Required 'compute.instanceGroupManagers.get' permission"  # GETs: 403
        # GET {endpoint}projects/p/zones/us-central1-c/instances/vm-0

An instance the test did not add answers 404 in Google's error shape; the answer carries
`name` and `zone` as the API does.

A group holds `targetSize` instances (a test that sets `targetSize` itself has exactly that
many at once, as if the group had settled).
A resize down is asynchronous, as Google's is: "The resize operation is marked DONE when the
resize actions are scheduled even if the group has not yet added or deleted any instances"
(https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/resize). So
the group answers its new `targetSize` at once while the deleted instances stay, counted in
`currentActions.deleting` with `status.isStable` false, for the next `deletion_gets` GETs of
the group; the GET after those finds them gone (`deleting` 0, `isStable` true) and notes it in
`gone`. `currentActions` carries every count of the compute.v1 discovery document's
`InstanceGroupManagerActionsSummary` (zeros included).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalServer, google_error, json_handler
from trainstack.components._discovery import load_document

_INSTANCE = re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$")
_GROUP = re.compile(
    r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instanceGroupManagers/([^/]+?)(/resize)?$"
)
ACTIONS = tuple(
    load_document("compute.v1")["schemas"]["InstanceGroupManagerActionsSummary"]["properties"]
)
"""The counts of `InstanceGroupManager.currentActions` (`none`, `creating`, `deleting`, ...)."""


class ComputeFakeServer(LocalServer):
    """Fake Compute Engine instances on 127.0.0.1 (free port) in a background thread."""

    def __init__(self, deletion_gets: int = 1) -> None:
        self.instances: dict[str, dict[str, Any]] = {}
        """By `<project>/<zone>/<name>`."""
        self.groups: dict[str, dict[str, Any]] = {}
        """Managed instance groups by `<project>/<zone>/<name>` (`targetSize` at least)."""
        self.deletion_gets = deletion_gets
        """How many GETs of a group still find the instances a resize down deletes."""
        self.requests: list[tuple[str, str]] = []
        self.denied: str | None = None
        """When set, every GET answers 403 PERMISSION_DENIED with this message, as Google
        does to a caller without the permission (a grant missing or its condition false)."""
        self.resizes: list[tuple[str, int]] = []
        """(`<project>/<zone>/<name>`, size) of every resize call."""
        self.gone: dict[str, float] = {}
        """When (Unix seconds) the GET that first found a group's deleted instances gone ran."""
        self._deleting: dict[str, list[int]] = {}
        """By group: [instances still being deleted, GETs left that find them, the size the
        resize set]."""
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        # What the discovery client takes as a base URL: root URL plus service path.
        return self.base_url + "/compute/v1/"

    def scale(self, key: str, size: int) -> None:
        """Set the group's `targetSize` as a resize does; the instances over `size` are
        deleted over the next `deletion_gets` GETs (GKE's `nodePools.setSize` resizes its
        pool's groups the same way)."""
        found = self.groups[key]
        held = int(found["targetSize"]) + self._pending(key)[0]
        found["targetSize"] = size
        if held > size and self.deletion_gets > 0:
            self._deleting[key] = [held - size, self.deletion_gets, size]
        else:
            self._deleting.pop(key, None)

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        path = urlsplit(raw_path).path
        with self._lock:
            self.requests.append((method, path))
            if self.denied is not None and method == "GET":
                return 403, google_error(403, self.denied)
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
            return 200, {"kind": "compute#instanceGroupManager", "name": name, **self._view(key)}
        if method == "POST" and resize and query.get("size"):
            size = int(query["size"][0])
            self.resizes.append((key, size))
            self.scale(key, size)
            return 200, {"kind": "compute#operation", "name": f"operation-{len(self.resizes)}"}
        return 400, google_error(400, f"bad request {method} {name}{resize or ''}")

    def _pending(self, key: str) -> list[int]:
        """The group's deletion in progress ([0, 0, size] where none is): one the test
        overrode by setting `targetSize` itself is dropped."""
        deleting = self._deleting.get(key)
        if deleting is not None and deleting[2] != int(self.groups[key]["targetSize"]):
            del self._deleting[key]
            deleting = None
        return deleting or [0, 0, int(self.groups[key]["targetSize"])]

    def _view(self, key: str) -> dict[str, Any]:
        """The group as one GET finds it (counting that GET against a deletion)."""
        found = self.groups[key]
        deleting = self._deleting.get(key) if self._pending(key)[0] else None
        if deleting is not None and deleting[1] <= 0:
            del self._deleting[key]
            self.gone[key] = time.time()
            deleting = None
        elif deleting is not None:
            deleting[1] -= 1
        actions = dict.fromkeys(ACTIONS, 0)
        actions["none"] = int(found["targetSize"])
        actions["deleting"] = deleting[0] if deleting else 0
        status = {"isStable": deleting is None, **found.get("status", {})}
        return {**found, "currentActions": actions, "status": status}

"""A local HTTP server implementing GKE (container v1) `nodePools.get`, `.setSize` and
`.setAutoscaling`.

    with ContainerFakeServer() as server:
        server.pools["projects/p/locations/z/clusters/c/nodePools/gpu"] = {
            "instanceGroupUrls": ["https://.../zones/z/instanceGroupManagers/gke-c-gpu-1"],
        }
        server.endpoint   # the API's base URL, `http://127.0.0.1:<port>/`
        server.set_sizes  # [(name, request body), ...]
        server.denied = "Permission 'container.clusters.get' denied"  # every GET answers 403

`POST v1/{name}:setSize` with a `SetNodePoolSizeRequest` body answers an Operation and calls
`on_set_size(name, nodeCount)`: tests resize the pool's instance groups in the Compute Engine
fake with it (`ComputeFakeServer.scale`), as GKE resizes the pool's groups, so a pool set to 0
keeps its VMs until its groups have deleted them, as on Google Cloud. `POST
v1/{name}:setAutoscaling` with a `SetNodePoolAutoscalingRequest` body (container.v1
discovery: "Sets the autoscaling settings for the specified node pool") replaces the pool's
`autoscaling` (what a later get answers) and calls `on_set_autoscaling(name, autoscaling)`;
a body with both the per-location bounds (`minNodeCount`, `maxNodeCount`) and the pool's
(`totalMinNodeCount`, `totalMaxNodeCount`) answers 400 (NodePoolAutoscaling: "The
total_*_node_count fields are mutually exclusive with the *_node_count fields"). It changes
no node: the cluster autoscaler does not remove nodes that still run pods for a lowered
maximum (kubernetes/autoscaler#5691, "Update args to --nodes=0:0 ... Nothing. Nodes keep
running as they were"); a test whose pods are gone may scale the groups in
`on_set_autoscaling`, as the autoscaler would. Errors use Google's shape.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from tests.fakes import LocalServer, google_error, json_handler

_POOL = re.compile(
    r"^/v1/(projects/[^/]+/locations/[^/]+/clusters/[^/]+/nodePools/[^/:]+)(:setSize|:setAutoscaling)?$"
)


class ContainerFakeServer(LocalServer):
    """Fake GKE node pools on 127.0.0.1 (free port) in a background thread."""

    def __init__(self) -> None:
        self.pools: dict[str, dict[str, Any]] = {}
        self.set_sizes: list[tuple[str, Any]] = []
        self.on_set_size: Callable[[str, int], None] | None = None
        self.set_autoscalings: list[tuple[str, Any]] = []
        self.on_set_autoscaling: Callable[[str, dict[str, Any]], None] | None = None
        self.denied: str | None = None
        """When set, every GET answers 403 PERMISSION_DENIED with this message, as Google
        does to a caller without the permission (a grant missing or its condition false)."""
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        return self.base_url + "/"

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        path = urlsplit(raw_path).path
        with self._lock:
            if self.denied is not None and method == "GET":
                return 403, google_error(403, self.denied)
            match = _POOL.match(path)
            if match is None:
                return 404, google_error(404, f"no route {method} {path}")
            name, verb = match.groups()
            set_size = verb == ":setSize"
            pool = self.pools.get(name)
            if pool is None:
                return 404, google_error(404, f"node pool {name} not found")
            if method == "POST" and verb == ":setAutoscaling":
                return self._set_autoscaling(name, pool, body)
            if method == "GET" and not verb:
                return 200, {"name": name.rsplit("/", 1)[-1], "status": "RUNNING", **pool}
            if method == "POST" and set_size:
                self.set_sizes.append((name, body))
                count = (body or {}).get("nodeCount")
                if not isinstance(count, int):
                    return 400, google_error(400, "nodeCount: required")
                if self.on_set_size is not None:
                    self.on_set_size(name, count)
                return 200, {"name": f"operation-{len(self.set_sizes)}", "status": "RUNNING"}
            return 400, google_error(400, f"bad request {method} {path}")

    def _set_autoscaling(self, name: str, pool: dict[str, Any], body: Any) -> tuple[int, Any]:
        self.set_autoscalings.append((name, body))
        autoscaling = (body or {}).get("autoscaling")
        if not isinstance(autoscaling, dict):
            # SetNodePoolAutoscalingRequest.autoscaling: "Required."
            return 400, google_error(400, "autoscaling: required")
        zonal = {"minNodeCount", "maxNodeCount"} & autoscaling.keys()
        total = {"totalMinNodeCount", "totalMaxNodeCount"} & autoscaling.keys()
        if zonal and total:
            # NodePoolAutoscaling: "The total_*_node_count fields are mutually exclusive with
            # the *_node_count fields."
            return 400, google_error(400, "total_*_node_count and *_node_count both set")
        family = "total{}NodeCount" if total else "{}NodeCount"
        low = autoscaling.get(family.format("Min" if total else "min"), 0)
        high = autoscaling.get(family.format("Max" if total else "max"), 0)
        if autoscaling.get("enabled") and not 0 <= low <= high:
            # NodePoolAutoscaling.(total)MinNodeCount: "greater than or equal to 0 and less
            # than or equal to (total_)max_node_count".
            return 400, google_error(400, "min node count must be in [0, max node count]")
        pool["autoscaling"] = autoscaling
        if self.on_set_autoscaling is not None:
            self.on_set_autoscaling(name, autoscaling)
        n = len(self.set_sizes) + len(self.set_autoscalings)
        return 200, {"name": f"operation-{n}", "status": "RUNNING"}

"""A local HTTP server implementing the Cloud TPU v2 queued-resource and node endpoints.

    with TpuFakeServer() as server:
        provider.create({..., "api_endpoint": server.endpoint})
        server.plan_next(["ACCEPTED", "WAITING_FOR_RESOURCES", "FAILED"], error=(8, "no capacity"))
        server.fail_next(2, 503, "POST")  # the next two POSTs get 503
        server.drop_after_create()        # next create succeeds, then the connection drops
        server.requests                   # [(method, path, query, json body or None), ...]
        server.denied = "Permission 'tpu.nodes.get' denied"  # every GET answers 403

Endpoints (`v2/projects/{p}/locations/{zone}/...`), as `tpu.v2`'s discovery document and
https://cloud.google.com/tpu/docs/queued-resources describe them:

- `POST .../queuedResources?queuedResourceId=ID&requestId=R` answers a long-running
  Operation. A repeated `requestId` answers the original operation and creates nothing
  (the API's idempotency contract); an existing ID with another `requestId` answers 409
  ALREADY_EXISTS.
- `GET .../queuedResources/ID`: the resource with `state.state`. A new resource is
  CREATING; each GET advances it one state along its plan (default CREATING -> ACCEPTED
  -> WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE). Reaching ACTIVE creates the nodes
  of `tpu.nodeSpec` (READY, one network endpoint per host); reaching FAILED records
  `state.failedData.error`. DELETING advances to gone (404).
- `DELETE .../queuedResources/ID[?force=true]`: without `force` only ACCEPTED, FAILED and
  SUSPENDED resources may be deleted (400 FAILED_PRECONDITION otherwise); with it the
  nodes go too. The resource stays DELETING until the next GET.
- `GET .../nodes/ID`: a node (created by an ACTIVE queued resource, or directly). A node
  created directly is CREATING until the next GET, then READY; a DELETING one is gone (404)
  at the next GET.
- `POST .../nodes?nodeId=ID` (`projects.locations.nodes.create`) answers an Operation; 409
  if the node exists. `DELETE .../nodes/ID` answers an Operation and marks it DELETING.
- `preempt(name)` puts a node in PREEMPTED (and its queued resource, if any, in SUSPENDED
  with the node gone), as Google does to a Spot slice.

Hosts per node: chips / 4 (one host up to 4 chips), chips being the product of
`acceleratorConfig.topology`; `hosts_override` replaces that. Errors use Google's shape.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalServer, google_error, json_handler

DEFAULT_PLAN = ("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE")
DELETABLE_WITHOUT_FORCE = frozenset({"ACCEPTED", "FAILED", "SUSPENDED"})
_LOCATION = r"projects/[^/]+/locations/[^/]+"
_COLLECTION = re.compile(rf"^/v2/({_LOCATION})/queuedResources$")
_QUEUED = re.compile(rf"^/v2/({_LOCATION}/queuedResources/[^/:]+)$")
_NODE = re.compile(rf"^/v2/({_LOCATION}/nodes/[^/:]+)$")
_NODES = re.compile(rf"^/v2/({_LOCATION})/nodes$")
_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

Request = tuple[str, str, dict[str, list[str]], Any]


class TpuFakeServer(LocalServer):
    """Fake Cloud TPU v2 API on 127.0.0.1 (free port) in a background thread."""

    def __init__(self) -> None:
        self.queued: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[Request] = []
        self.hosts_override: int | None = None
        self.denied: str | None = None
        """When set, every GET answers 403 PERMISSION_DENIED with this message, as Google
        does to a caller without the permission (a grant missing or its condition false)."""
        self._plans: dict[str, list[str]] = {}
        self._errors: dict[str, dict[str, Any]] = {}
        self._next_plan: tuple[list[str], dict[str, Any] | None] | None = None
        self._operations: dict[str, dict[str, Any]] = {}
        self._faults: list[tuple[int, str | None]] = []
        self._drop_creates = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        return self.base_url + "/"

    # -- control ---------------------------------------------------------------------
    def plan_next(self, states: list[str], error: tuple[int, str] | None = None) -> None:
        """The next created resource walks `states` (one per GET) after CREATING; a FAILED
        state carries `error` as (google.rpc.Code, message)."""
        with self._lock:
            detail = {"code": error[0], "message": error[1]} if error else None
            self._next_plan = (list(states), detail)

    def hold(self, name: str, state: str) -> None:
        """Put resource `name` in `state` and keep it there."""
        with self._lock:
            self.queued[name]["state"] = {"state": state}
            self._plans[name] = []

    def preempt(self, name: str) -> None:
        """Node `name` is preempted: PREEMPTED, or for a queued resource's node, gone with
        its queued resource SUSPENDED."""
        with self._lock:
            node = self.nodes[name]
            queued = node.get("queuedResource")
            if queued:
                del self.nodes[name]
                self.queued[queued]["state"] = {"state": "SUSPENDED"}
                self._plans[queued] = []
            else:
                node["state"] = "PREEMPTED"

    def fail_next(self, count: int, status: int = 503, method: str | None = None) -> None:
        """The next `count` requests (of `method`, or any) answer `status`."""
        with self._lock:
            self._faults.extend([(status, method)] * count)

    def drop_after_create(self, count: int = 1) -> None:
        """The next `count` creates take effect, then close the connection unanswered."""
        with self._lock:
            self._drop_creates += count

    def calls(self, method: str, suffix: str = "") -> list[Request]:
        return [r for r in self.requests if r[0] == method and r[1].endswith(suffix)]

    # -- request handling ------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        """(status, json) to answer, or None to drop the connection."""
        url = urlsplit(raw_path)
        path, query = url.path, parse_qs(url.query)
        with self._lock:
            self.requests.append((method, path, query, body))
            if self.denied is not None and method == "GET":
                return 403, google_error(403, self.denied)
            for i, (status, only) in enumerate(self._faults):
                if only is None or only == method:
                    del self._faults[i]
                    return status, google_error(status, "injected fault")
            collection = _COLLECTION.match(path)
            if collection and method == "POST":
                return self._create(collection.group(1), query, body)
            queued = _QUEUED.match(path)
            if queued and method == "GET":
                return self._get(queued.group(1))
            if queued and method == "DELETE":
                return self._delete(queued.group(1), query)
            nodes = _NODES.match(path)
            if nodes and method == "POST":
                return self._create_direct_node(nodes.group(1), query, body)
            node = _NODE.match(path)
            if node and method == "GET":
                return self._get_node(node.group(1))
            if node and method == "DELETE":
                if node.group(1) not in self.nodes:
                    return 404, google_error(404, f"{node.group(1)} not found")
                self.nodes[node.group(1)]["state"] = "DELETING"
                parent = node.group(1).split("/nodes/")[0]
                return 200, self._operation(parent, node.group(1), "delete")
            return 404, google_error(404, f"no route {method} {path}")

    def _get_node(self, name: str) -> tuple[int, Any]:
        found = self.nodes.get(name)
        if found is None:
            return 404, google_error(404, f"{name} not found")
        answer = dict(found)
        if found["state"] == "DELETING":
            del self.nodes[name]
        elif found["state"] == "CREATING":
            found["state"] = "READY"
        return 200, answer

    def _create_direct_node(
        self, parent: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        node_id = (query.get("nodeId") or [""])[0]
        if not _ID.match(node_id):
            return 400, google_error(400, f"invalid nodeId {node_id!r}")
        if not isinstance(body, dict) or not body.get("runtimeVersion"):
            return 400, google_error(400, "runtimeVersion is required")
        name = f"{parent}/nodes/{node_id}"
        if name in self.nodes:
            return 409, google_error(409, f"{name} already exists")
        self._create_node("", {"parent": parent, "nodeId": node_id, "node": body})
        self.nodes[name]["state"] = "CREATING"
        return 200, self._operation(parent, name, "create")

    def _operation(self, parent: str, target: str, verb: str) -> dict[str, Any]:
        name = f"{parent}/operations/operation-{next(self._ids)}"
        return {
            "name": name,
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                "target": target,
                "verb": verb,
                "apiVersion": "v2",
            },
            "done": False,
        }

    def _create(
        self, parent: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any] | None:
        qr_id = (query.get("queuedResourceId") or [""])[0]
        request_id = (query.get("requestId") or [""])[0]
        if not _ID.match(qr_id):
            return 400, google_error(400, f"invalid queuedResourceId {qr_id!r}")
        if request_id and request_id in self._operations:
            return 200, self._operations[request_id]
        if not isinstance(body, dict) or not body.get("tpu", {}).get("nodeSpec"):
            return 400, google_error(400, "tpu.nodeSpec is required")
        name = f"{parent}/queuedResources/{qr_id}"
        if name in self.queued:
            return 409, google_error(409, f"{name} already exists")
        for spec in body["tpu"]["nodeSpec"]:
            if spec.get("parent") != parent:
                return 400, google_error(400, f"nodeSpec.parent must be {parent}")
        self.queued[name] = {
            **body,
            "name": name,
            "createTime": "2026-11-01T00:00:00Z",
            "state": {"state": "CREATING"},
        }
        plan, error = self._next_plan or (list(DEFAULT_PLAN), None)
        self._next_plan = None
        self._plans[name] = list(plan)
        if error is not None:
            self._errors[name] = error
        operation = self._operation(parent, name, "create")
        if request_id:
            self._operations[request_id] = operation
        if self._drop_creates:
            self._drop_creates -= 1
            return None
        return 200, operation

    def _get(self, name: str) -> tuple[int, Any]:
        qr = self.queued.get(name)
        if qr is None:
            return 404, google_error(404, f"{name} not found")
        state = qr["state"]["state"]
        if state == "DELETING":
            del self.queued[name]
            return 404, google_error(404, f"{name} not found")
        plan = self._plans.get(name) or []
        if plan:
            self._advance(name, plan.pop(0))
        return 200, qr

    def _advance(self, name: str, state: str) -> None:
        qr = self.queued[name]
        qr["state"] = {"state": state}
        if state == "FAILED":
            error = self._errors.get(name, {"code": 2, "message": "unknown error"})
            qr["state"]["failedData"] = {"error": error}
        if state == "ACTIVE":
            qr["state"]["activeData"] = {}
            for spec in qr["tpu"]["nodeSpec"]:
                self._create_node(name, spec)

    def _create_node(self, queued_name: str, spec: dict[str, Any]) -> None:
        node_name = f"{spec['parent']}/nodes/{spec['nodeId']}"
        node = dict(spec["node"])
        topology = node.get("acceleratorConfig", {}).get("topology", "1")
        chips = math.prod(int(x) for x in topology.split("x"))
        hosts = self.hosts_override or max(1, chips // 4)
        self.nodes[node_name] = {
            **node,
            "name": node_name,
            "state": "READY",
            "health": "HEALTHY",
            **({"queuedResource": queued_name} if queued_name else {}),
            "networkEndpoints": [
                {"ipAddress": f"10.130.0.{2 + i}", "port": 8470} for i in range(hosts)
            ],
        }

    def _delete(self, name: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        qr = self.queued.get(name)
        if qr is None:
            return 404, google_error(404, f"{name} not found")
        force = (query.get("force") or [""])[0] == "true"
        state = qr["state"]["state"]
        if not force and state not in DELETABLE_WITHOUT_FORCE:
            return 400, google_error(400, f"{name} is {state}; delete its nodes first or use force")
        for spec in qr["tpu"]["nodeSpec"]:
            self.nodes.pop(f"{spec['parent']}/nodes/{spec['nodeId']}", None)
        qr["state"] = {"state": "DELETING"}
        self._plans[name] = []
        parent = name.split("/queuedResources/")[0]
        return 200, self._operation(parent, name, "delete")

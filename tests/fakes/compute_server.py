"""A local HTTP server implementing Compute Engine v1 `instances.get` and the zonal
`instanceGroupManagers` methods a stateful group's life goes through: `insert`, `get`,
`patch`, `delete`, `resize` (POST `.../resize?size=N`, no body), `createInstances`,
`deleteInstances`, `listManagedInstances` and `listPerInstanceConfigs`, each answering as the
compute.v1 discovery document's method does (bodies checked against its request schemas).

    with ComputeFakeServer(deletion_gets=2) as server:
        server.instances["p/us-central1-c/vm-0"] = {"status": "RUNNING", ...}
        server.groups["p/us-central1-a/g"] = {"targetSize": 2}
        server.endpoint   # the API's base URL, `http://127.0.0.1:<port>/compute/v1/`
        server.denied = "Required 'compute.instanceGroupManagers.get' permission"  # GETs: 403
        server.create_instances("p/us-central1-a/h", ["h-0", "h-1"])  # as the provider does
        server.members("p/us-central1-a/g")  # its VMs: name -> Member (rank metadata, ...)
        # GET {endpoint}projects/p/zones/us-central1-c/instances/vm-0

An instance the test did not add answers 404 in Google's error shape; the answer carries
`name` and `zone` as the API does.

A group holds one VM (`Member`) per unit of `targetSize`. A test that sets `targetSize`
itself has exactly that many at once, as if the group had settled (auto-named ones added,
or the newest names dropped). What changes the group, and how:

- `insert` creates `targetSize` auto-named VMs from the current template (the base instance
  name, a hyphen and four characters: the provider's `base_instance_name` description).
- `createInstances` adds one VM per entry, named by it, with the entry's preserved metadata
  and a per-instance config, and grows `targetSize` by one each: "Creates instances with
  per-instance configurations in this managed instance group" (discovery), and the group
  then holds them on top of its target size (a group created with `target_size=1` and one
  config holds 2 VMs: hashicorp/terraform-provider-google#15911; "it will increase the
  `target_size` of the group manager", infracost/infracost#1644; #20662). A name the group
  still holds is refused (409): one VM per name.
- `deleteInstances` "reduces the targetSize of the managed instance group by the number of
  instances that you delete" (discovery) and deletes them; an instance not in the group, or
  already being deleted, fails the call unless `skipInstancesOnValidationError`, and "The
  operation always fails if the request contains a malformed instance URL or a reference to
  an instance that exists in a zone or region other than the group's" (discovery,
  `InstanceGroupManagersDeleteInstancesRequest`). Each call is noted in `deletions`.
- `resize` sets `targetSize`: "If you increase the size, the group creates new instances
  using the current instance template. If you decrease the size, the group deletes
  instances." (discovery) A resize up adds auto-named VMs with no per-instance config (no
  rank); a resize down deletes auto-named VMs first, then the highest names (Google's order
  is "arbitrary"). A resize down that would delete a VM with a per-instance config answers
  501: what it does to the config is in no source read here
  (`catalog.billing.MIG_DELETE_INSTANCES_DROPS_PER_INSTANCE_CONFIGS`), so no test may rest
  on it.
- `patch` with new `versions` under a PROACTIVE update policy recreates every VM from the
  new template, keeping its name and preserved metadata ("When you update an instance, the
  MIG maintains the instance's preserved state ... The MIG preserves stateful metadata,
  configured in a per-instance configuration, and sets it on the instance during the
  update", https://cloud.google.com/compute/docs/instance-groups/preserved-state).
- `delete` removes the group "and all of the instances in that group" (discovery).

Resize requests (`instanceGroupManagerResizeRequests`: `insert`, `get`, `cancel`,
`delete`), as the discovery document and Google's page describe them ("CREATING: Compute
Engine received the resize request, the MIG's target size increases by the number of VMs
specified in the request, and the MIG creates managed instances that are in a CREATING
state", then ACCEPTED while Dynamic Workload Scheduler looks for the capacity,
https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig):

- `insert` with `resizeBy` adds that many auto-named VMs, listed with `currentAction`
  CREATING and no `instanceStatus` ("The name always exists even if the instance has not yet
  been created", discovery `ManagedInstance.name`), no per-instance config, and leaves the
  request ACCEPTED; `fulfil` is Dynamic Workload Scheduler finding the capacity: the VMs
  run and the request is SUCCEEDED. `instances` (named VMs) is not modelled (501).
- `delete` "Deletes the specified, inactive resize request. Requests that are still active
  cannot be deleted. Deleting request does not delete instances that were provisioned
  previously" (discovery): an ACCEPTED one answers 400, the VMs of a SUCCEEDED one stay.
- `cancel` "is only possible for requests that are accepted in the queue" (discovery); what it
  does to the CREATING instances and the target size is in no source read here: 501.

A VM's per-instance config goes with the VM when `deleteInstances` deletes it: the provider
deletes a config with `remove_instance_on_destroy` by `deleteInstances` alone, and its
acceptance test then finds the config gone from `listPerInstanceConfigs`
(TestAccComputePerInstanceConfig_removeInstanceOnDestroy,
google/services/compute/resource_compute_per_instance_config_test.go). So does the group's
`delete` (its VMs with it).

Deleting is asynchronous, as Google's is: "The resize operation is marked DONE when the
resize actions are scheduled even if the group has not yet added or deleted any instances"
(https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/resize;
`deleteInstances` likewise). A deleted VM stays, counted in `currentActions.deleting` with
`status.isStable` false and listed with `currentAction` DELETING, for the next
`deletion_gets` reads of the group (`get`, `listManagedInstances`, `listPerInstanceConfigs`);
the read after those finds it gone (its config too) and notes it in `gone`.
`currentActions` carries every count of the discovery document's
`InstanceGroupManagerActionsSummary` (zeros included). `listManagedInstances` lists each
VM's `instanceStatus`: RUNNING, or TERMINATED once `preempt` stopped it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalServer, google_error, json_handler
from trainstack.components._discovery import load_document, validate_body
from trainstack.components.gpu_startup import NODE_RANK_ATTRIBUTE

_INSTANCE = re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$")
_INSTANCE_URL = re.compile(
    r"^(?:https://(?:www|compute)\.googleapis\.com/compute/v1/projects/[^/]+/)?"
    r"zones/[^/]+/instances/[a-z]([-a-z0-9]*[a-z0-9])?$"
)
"""An instance in a deleteInstances body: "a full URL or a partial URL, such as
zones/[ZONE]/instances/[INSTANCE_NAME]" (discovery)."""
_RESIZE = re.compile(
    r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instanceGroupManagers/([^/]+)/resizeRequests"
    r"(?:/([^/]+?)(?:/(cancel))?)?$"
)
_GROUP = re.compile(
    r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instanceGroupManagers(?:/([^/]+?)(?:/(\w+))?)?$"
)
ACTIONS = tuple(
    load_document("compute.v1")["schemas"]["InstanceGroupManagerActionsSummary"]["properties"]
)
"""The counts of `InstanceGroupManager.currentActions` (`none`, `creating`, `deleting`, ...)."""
REQUESTS = {
    "createInstances": "InstanceGroupManagersCreateInstancesRequest",
    "deleteInstances": "InstanceGroupManagersDeleteInstancesRequest",
}
"""The request schema of each group method that takes a body (besides the group itself)."""


@dataclass
class Member:
    """One VM of a group (a managed instance)."""

    name: str
    metadata: dict[str, str]
    """Its preserved metadata (from its per-instance config; {} for an auto-named VM)."""
    template: str
    """The instance template the group last created it from."""
    created: int = 1
    """How often the group created it (a PROACTIVE update recreates it)."""
    deleting: int | None = None
    """While being deleted: the reads of the group that still find it."""
    status: str = "RUNNING"
    """Its `instanceStatus` as `listManagedInstances` answers it (`preempt`: TERMINATED)."""
    creating: bool = False
    """A resize request's VM not created yet (`currentAction` CREATING, no `instanceStatus`)."""


@dataclass
class _Group:
    members: dict[str, Member] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    size: int | None = None
    """`targetSize` as the fake last set it (another value: the test set it itself)."""
    named: int = 0
    """Auto-named VMs so far (their four-character suffixes)."""
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Resize requests by name: the API's view plus `_members` (the VMs it asked for)."""


class ComputeFakeServer(LocalServer):
    """Fake Compute Engine instances on 127.0.0.1 (free port) in a background thread."""

    def __init__(self, deletion_gets: int = 1) -> None:
        self.instances: dict[str, dict[str, Any]] = {}
        """By `<project>/<zone>/<name>`."""
        self.groups: dict[str, dict[str, Any]] = {}
        """Managed instance groups by `<project>/<zone>/<name>` (`targetSize` at least)."""
        self.deletion_gets = deletion_gets
        """How many reads of a group still find a VM it deletes."""
        self.requests: list[tuple[str, str]] = []
        self.denied: str | None = None
        """When set, every GET answers 403 PERMISSION_DENIED with this message, as Google
        does to a caller without the permission (a grant missing or its condition false)."""
        self.resizes: list[tuple[str, int]] = []
        """(`<project>/<zone>/<name>`, size) of every resize call."""
        self.deletions: list[tuple[str, dict[str, Any]]] = []
        """(`<project>/<zone>/<name>`, request body) of every deleteInstances call."""
        self.gone: dict[str, float] = {}
        """When (Unix seconds) the read that first found a group's deleted VMs gone ran."""
        self._state: dict[str, _Group] = {}
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        # What the discovery client takes as a base URL: root URL plus service path.
        return self.base_url + "/compute/v1/"

    def members(self, key: str) -> dict[str, Member]:
        """The VMs group `key` holds now (those being deleted included), by name."""
        with self._lock:
            return dict(self._sync(key).members)

    def scale(self, key: str, size: int) -> None:
        """Resize group `key` as `resize` does (GKE's `nodePools.setSize` resizes its pool's
        groups the same way)."""
        with self._lock:
            problem = self._resize(key, size)
        assert problem is None, problem

    def preempt(self, key: str, names: list[str]) -> None:
        """Compute Engine preempts these Spot VMs of group `key`: stopped, TERMINATED
        (compute.v1 discovery: Scheduling.instanceTerminationAction STOP, "Stop the VM ...
        default action"; ManagedInstance.instanceStatus TERMINATED, "The instance has stopped
        (either by explicit action or underlying failure)"). They stay in the group, as the
        test leaves them: the group's repair (recreating them) is not modelled."""
        with self._lock:
            state = self._sync(key)
            for name in names:
                state.members[name].status = "TERMINATED"

    def create_instances(self, key: str, names: list[str]) -> None:
        """Group `key` (created at size 0 where there is none) gains these VMs as the
        provider's per-instance config creates add them: one `createInstances` each, with
        the rank metadata of its place in `names` (`A100Cluster`'s configs)."""
        with self._lock:
            if key not in self.groups:
                self.groups[key] = {"targetSize": 0}
                self._state[key] = _Group(size=0)
            for rank, name in enumerate(names):
                state = {"metadata": {NODE_RANK_ATTRIBUTE: str(rank)}}
                status, answer = self._create_instances(
                    key, {"instances": [{"name": name, "preservedState": state}]}
                )
                assert status == 200, answer

    def fulfil(self, key: str, request: str) -> None:
        """Dynamic Workload Scheduler found the capacity of group `key`'s resize request
        `request`: its VMs are created all at once and it is SUCCEEDED."""
        with self._lock:
            state = self._sync(key)
            found = state.requests[request]
            assert found["state"] == "ACCEPTED", found
            for name in found["_members"]:
                state.members[name].creating = False
            found["state"] = "SUCCEEDED"

    def resize_requests(self, key: str) -> dict[str, dict[str, Any]]:
        """Group `key`'s resize requests as `get` answers them, by name."""
        with self._lock:
            state = self._sync(key)
            return {n: _public(r) for n, r in state.requests.items()}

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        split = urlsplit(raw_path)
        path = split.path
        with self._lock:
            self.requests.append((method, path))
            if self.denied is not None and method == "GET":
                return 403, google_error(403, self.denied)
            resize = _RESIZE.match(path)
            if resize is not None:
                return self._resize_request(method, resize.groups(), body)
            group = _GROUP.match(path)
            if group is not None:
                return self._group(method, group.groups(), parse_qs(split.query), body)
            match = _INSTANCE.match(path)
            if method != "GET" or match is None:
                return 404, google_error(404, f"no route {method} {path}")
            project, zone, name = match.groups()
            found = self.instances.get(f"{project}/{zone}/{name}")
            if found is None:
                return 404, google_error(404, f"instance {name} in {zone} not found")
            return 200, {"kind": "compute#instance", "name": name, "zone": zone, **found}

    def _group(
        self,
        method: str,
        parts: tuple[str | None, ...],
        query: dict[str, list[str]],
        body: Any,
    ) -> tuple[int, Any]:
        project, zone, name, verb = parts
        if name is None:
            return self._insert(method, f"{project}/{zone}", body)
        key = f"{project}/{zone}/{name}"
        if key not in self.groups:
            return 404, google_error(404, f"instance group manager {name} not found")
        schema = REQUESTS.get(verb or "")
        if schema is not None:
            problems = validate_body("compute.v1", schema, body)
            if problems:
                return 400, google_error(400, "; ".join(problems))
        handler = {
            ("GET", None): lambda: self._view(key, name),
            ("PATCH", None): lambda: self._patch(key, body),
            ("DELETE", None): lambda: self._delete_group(key),
            ("POST", "resize"): lambda: self._resize_call(key, query),
            ("POST", "createInstances"): lambda: self._create_instances(key, body),
            ("POST", "deleteInstances"): lambda: self._delete_instances(key, body),
            ("POST", "listManagedInstances"): lambda: self._list_members(key, query),
            ("POST", "listPerInstanceConfigs"): lambda: self._list_configs(key),
        }.get((method, verb))
        if handler is None:
            return 400, google_error(400, f"bad request {method} {name}/{verb or ''}")
        return handler()

    def _resize_request(
        self, method: str, parts: tuple[str | None, ...], body: Any
    ) -> tuple[int, Any]:
        project, zone, group, name, verb = parts
        key = f"{project}/{zone}/{group}"
        if key not in self.groups:
            return 404, google_error(404, f"instance group manager {group} not found")
        state = self._sync(key)
        if name is None:
            if method != "POST":
                return 400, google_error(400, f"bad request {method} resizeRequests")
            return self._insert_request(key, state, body)
        found = state.requests.get(name)
        if found is None:
            return 404, google_error(404, f"resize request {name} not found")
        if method == "GET" and verb is None:
            return 200, _public(found)
        if method == "POST" and verb == "cancel":
            return 501, google_error(
                501, "not modelled: what a cancel does to the CREATING VMs and the target size"
            )
        if method == "DELETE" and verb is None:
            if found["state"] in ("CREATING", "ACCEPTED"):
                return 400, google_error(400, f"resize request {name} is still active")
            del state.requests[name]
            return 200, _operation("deleteResizeRequest", key)
        return 400, google_error(400, f"bad request {method} resizeRequests/{name}/{verb}")

    def _insert_request(self, key: str, state: _Group, body: Any) -> tuple[int, Any]:
        # The provider sends `zone` (output only in the schema) and its acceptance test
        # creates requests that way (TestAccComputeResizeRequest_computeMigResizeRequestExample,
        # resource_compute_resize_request_generated_test.go, `zone = "us-central1-a"`): the
        # API ignores it.
        body = {k: v for k, v in body.items() if k != "zone"}
        problems = validate_body("compute.v1", "InstanceGroupManagerResizeRequest", body)
        if problems:
            return 400, google_error(400, "; ".join(problems))
        name = body["name"]
        if name in state.requests:
            return 409, google_error(409, f"resize request {name} already exists")
        if "instances" in body:
            return 501, google_error(501, "not modelled: a resize request naming its instances")
        count = int(body.get("resizeBy") or 0)
        if count < 1:
            return 400, google_error(400, "resizeBy: must be at least 1")
        before = set(state.members)
        for _ in range(count):
            self._add_auto(key, state)
        created = sorted(set(state.members) - before)
        for member in created:
            state.members[member].creating = True
        self._set_size(key, state, int(self.groups[key].get("targetSize", 0)) + count)
        state.requests[name] = {
            **body,
            "kind": "compute#instanceGroupManagerResizeRequest",
            "state": "ACCEPTED",
            "_members": created,
        }
        return 200, _operation("insertResizeRequest", key)

    # The group as the API keeps it.

    def _sync(self, key: str) -> _Group:
        """The group's state; where the test set `targetSize` itself, settled at it."""
        state = self._state.setdefault(key, _Group())
        target = int(self.groups[key].get("targetSize", 0))
        if state.size != target:
            for name in [n for n, m in state.members.items() if m.deleting is not None]:
                self._drop(state, name)
            extra = max(0, len(state.members) - target)
            for name in sorted(state.members, reverse=True)[:extra]:
                self._drop(state, name)
            while len(state.members) < target:
                self._add_auto(key, state)
            state.size = target
        return state

    def _set_size(self, key: str, state: _Group, size: int) -> None:
        self.groups[key]["targetSize"] = size
        state.size = size

    def _template(self, key: str) -> str:
        versions = self.groups[key].get("versions") or [{}]
        return str(versions[0].get("instanceTemplate", ""))

    def _add_auto(self, key: str, state: _Group) -> None:
        state.named += 1
        base = self.groups[key].get("baseInstanceName") or key.rsplit("/", 1)[-1]
        name = f"{base}-{state.named:04x}"
        state.members[name] = Member(name, {}, self._template(key))

    @staticmethod
    def _drop(state: _Group, name: str) -> None:
        """The VM is gone, and its per-instance config with it (module docstring)."""
        del state.members[name]
        state.configs.pop(name, None)

    def _delete_member(self, state: _Group, name: str) -> None:
        if self.deletion_gets > 0:
            state.members[name].deleting = self.deletion_gets
        else:
            self._drop(state, name)

    def _read(self, key: str) -> _Group:
        """One read of the group: a VM being deleted for its last read is gone now."""
        state = self._sync(key)
        finished = False
        for member in [m for m in state.members.values() if m.deleting is not None]:
            if member.deleting is not None and member.deleting <= 0:
                self._drop(state, member.name)
                finished = True
            elif member.deleting is not None:
                member.deleting -= 1
        if finished and not any(m.deleting is not None for m in state.members.values()):
            self.gone[key] = time.time()
        return state

    def _resize(self, key: str, size: int) -> str | None:
        """None, or why this resize is not modelled (it would delete a VM with a config)."""
        state = self._sync(key)
        live = [m for m in state.members.values() if m.deleting is None]
        # Auto-named VMs first, then the highest names (Google's order is its own).
        doomed = sorted(live, key=lambda m: (not m.metadata, m.name), reverse=True)
        doomed = doomed[: max(0, len(live) - size)]
        configured = sorted(m.name for m in doomed if m.name in state.configs)
        if configured:
            return f"not modelled: a resize down deleting {configured}, which have configs"
        self._set_size(key, state, size)
        for member in doomed:
            self._delete_member(state, member.name)
        for _ in range(size - len(live)):
            self._add_auto(key, state)
        return None

    # The methods.

    def _insert(self, method: str, where: str, body: Any) -> tuple[int, Any]:
        if method != "POST":
            return 400, google_error(400, f"bad request {method} instanceGroupManagers")
        problems = validate_body("compute.v1", "InstanceGroupManager", body)
        if problems:
            return 400, google_error(400, "; ".join(problems))
        key = f"{where}/{body['name']}"
        if key in self.groups:
            return 409, google_error(409, f"The resource '{key}' already exists")
        self.groups[key] = {**body, "targetSize": 0}
        self._state[key] = _Group(size=0)
        self._resize(key, int(body.get("targetSize", 0)))  # a new group: nothing to delete
        return 200, _operation("insert", key)

    def _view(self, key: str, name: str) -> tuple[int, Any]:
        """The group as one GET finds it."""
        state = self._read(key)
        found = self.groups[key]
        deleting = sum(m.deleting is not None for m in state.members.values())
        actions = dict.fromkeys(ACTIONS, 0)
        actions["none"] = len(state.members) - deleting
        actions["deleting"] = deleting
        status = {"isStable": deleting == 0, **found.get("status", {})}
        view = {"kind": "compute#instanceGroupManager", "name": name, **found}
        return 200, {**view, "currentActions": actions, "status": status}

    def _patch(self, key: str, body: dict[str, Any]) -> tuple[int, Any]:
        state = self._sync(key)
        before = self._template(key)
        self.groups[key].update({k: v for k, v in body.items() if k != "fingerprint"})
        policy = self.groups[key].get("updatePolicy") or {}
        if self._template(key) != before and policy.get("type") == "PROACTIVE":
            for member in state.members.values():
                if member.deleting is None:
                    member.template = self._template(key)
                    member.created += 1
        return 200, _operation("patch", key)

    def _delete_group(self, key: str) -> tuple[int, Any]:
        del self.groups[key]
        del self._state[key]
        return 200, _operation("delete", key)

    def _resize_call(self, key: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if not query.get("size"):
            return 400, google_error(400, "resize: the size parameter is required")
        size = int(query["size"][0])
        self.resizes.append((key, size))
        problem = self._resize(key, size)
        if problem is not None:
            return 501, google_error(501, problem)
        return 200, _operation(f"resize-{len(self.resizes)}", key)

    def _create_instances(self, key: str, body: dict[str, Any]) -> tuple[int, Any]:
        state = self._sync(key)
        entries = body.get("instances") or []
        for entry in entries:
            if entry.get("name") in state.members:
                return 409, google_error(409, f"instance {entry.get('name')} already exists")
        for entry in entries:
            name = entry["name"]
            metadata = dict((entry.get("preservedState") or {}).get("metadata") or {})
            state.members[name] = Member(name, metadata, self._template(key))
            state.configs[name] = {
                "name": name,
                "preservedState": entry.get("preservedState") or {},
                "status": "EFFECTIVE",
            }
        self._set_size(key, state, int(self.groups[key].get("targetSize", 0)) + len(entries))
        return 200, _operation("createInstances", key)

    def _delete_instances(self, key: str, body: dict[str, Any]) -> tuple[int, Any]:
        state = self._sync(key)
        self.deletions.append((key, body))
        urls = [str(url) for url in body.get("instances") or []]
        zone = key.split("/")[1]
        wrong_urls = [u for u in urls if not _INSTANCE_URL.match(u) or u.split("/")[-3] != zone]
        if wrong_urls:  # whatever skipInstancesOnValidationError says (module docstring)
            return 400, google_error(400, f"malformed or not in zone {zone}: {wrong_urls}")
        names = [url.rsplit("/", 1)[-1] for url in urls]
        valid = [n for n in names if n in state.members and state.members[n].deleting is None]
        if len(valid) < len(names) and not body.get("skipInstancesOnValidationError"):
            wrong = sorted(set(names) - set(valid))
            return 400, google_error(400, f"not in the group or already being deleted: {wrong}")
        for name in valid:
            self._delete_member(state, name)
        self._set_size(key, state, int(self.groups[key].get("targetSize", 0)) - len(valid))
        return 200, _operation("deleteInstances", key)

    def _list_members(self, key: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        state = self._read(key)
        project, zone, _ = key.split("/")
        wanted = [f.split("=", 1)[1].strip('"') for f in query.get("filter", []) if "=" in f]
        listed = [
            {
                "instance": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/"
                f"{zone}/instances/{m.name}",
                "name": m.name,
                "currentAction": _action(m),
                **({} if m.creating else {"instanceStatus": m.status}),
                "version": {"instanceTemplate": m.template},
                "preservedStateFromConfig": {"metadata": m.metadata} if m.metadata else {},
            }
            for m in sorted(state.members.values(), key=lambda m: m.name)
            if not wanted or m.name in wanted
        ]
        # A list answer leaves out an empty list, as Google's do.
        return 200, {"managedInstances": listed} if listed else {}

    def _list_configs(self, key: str) -> tuple[int, Any]:
        state = self._read(key)
        items = [state.configs[n] for n in sorted(state.configs)]
        return 200, {"items": items} if items else {}


def _action(member: Member) -> str:
    if member.deleting is not None:
        return "DELETING"
    return "CREATING" if member.creating else "NONE"


def _public(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if not k.startswith("_")}


def _operation(verb: str, key: str) -> dict[str, Any]:
    """A DONE zonal Operation (the fake's changes are made when it answers)."""
    project, zone, name = key.split("/")
    return {
        "kind": "compute#operation",
        "name": f"operation-{verb}-{name}",
        "zone": zone,
        "status": "DONE",
        "targetLink": f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}",
    }

"""trainstack run supervisor: brings a preempted TPU slice back and stops a run's compute at
its end.

An HTTP Cloud Functions (gen2) function that Cloud Scheduler calls every few minutes
(`trainstack.components.run_supervisor` ships this file as the function's source, with
`config.json` beside it). Each call looks once and waits for nothing; the next call sees the
progress. `config.json`: `kind` (`node`, `queued`, `mig`, `node_pool`), `name` (the
resource's full name), `body` (TPU kinds: the REST body it is created again with), `recover`
(whether a preempted slice is recreated), `state_uri`, and `run` (below).

Recovery (`recover`, Spot and queued TPU slices):
- a node (`kind: node`, a Spot `gcp.tpu.V2Vm`) that is PREEMPTED or TERMINATED is deleted,
  and once it is gone it is created again with the same name and the same body (its
  startup script resumes training from the newest checkpoint). Node.State in the TPU v2
  discovery document: "PREEMPTED: TPU node has been preempted", "TERMINATED: ... has
  reached the end of its life cycle (for preemptible nodes)"; "If a TPU has been preempted,
  the status changes from READY to PREEMPTED" (https://cloud.google.com/tpu/docs/preemptible).
- a queued resource (`kind: queued`) that is SUSPENDED or FAILED is deleted and created
  again with the same id and body: "SUSPENDED: The resources specified in the request have
  been deleted. ... it's no longer eligible for further allocation"; "FAILED: ... The request
  remains in the queue until it is explicitly deleted"
  (https://cloud.google.com/tpu/docs/queued-resources).
Only a slice this supervisor deleted is created again: one that vanished otherwise (a person
deleted it) is reported and left alone. A create that fails (no capacity, quota) or whose
slice never comes up waits `BACKOFF_BASE_S * 2**(attempt-1)` seconds (at most
`BACKOFF_MAX_S`) before the next try, whatever the schedule.

The end of the run (`run`: every key optional) stops the compute:
- `end_uri`: the object the node launcher writes when the run ended for good
  (`trainstack.trainers.common.run_records`: rank 0's `done`, or a failure the target does
  not retry), JSON `{"outcome": "done" | "failed" | "stopped", ...}`;
- `clock_uri` + `max_run_seconds`: the run's first start (Unix seconds, written by the
  GCE and TPU startup scripts, or by this function at the first call that sees the compute
  billing without one) and `limits.max_run_hours`;
- `hourly_usd` + `max_total_usd`: the compute's list price, and `limits.max_total_usd`. The
  spend is this supervisor's own count: each call adds the time since the previous call at
  `hourly_usd` while the compute bills (trapezoid over the two calls' views), kept in
  `state.json` across recoveries and restarts of the same run (`end_uri` names the run).
The time limit and the spend cap first write the stop request `stop_uri` (the node launcher
polls it and stops the trainer with SIGTERM, which saves a checkpoint; it then writes
`end_uri` with outcome `stopped`) and stop the compute once `end_uri` says stopped, or
`STOP_GRACE_S` after the request. A `done` or `failed` end stops it at once. Stopping: a TPU
node or queued resource is deleted ("Charges for Cloud TPU accrue while your TPU node is in
a READY state", https://cloud.google.com/tpu/pricing); a managed instance group is resized
to 0, a GKE node pool set to 0 nodes, which deletes their VMs (the sources:
`trainstack.components.catalog.billing`).
A deleted slice stops billing at once (it leaves READY); a resize does not: "The resize
operation is marked DONE when the resize actions are scheduled even if the group has not yet
added or deleted any instances" (the resize page). A group or pool is "stopping" from then
until a check finds its instances gone (`Group.view`): its spend still counts and nothing is
called again; that check writes "compute stopped".

Every action is one JSON line appended to `<state_uri>/events.jsonl` (time, resource, state
seen, action, result, attempt, next allowed time; a stop adds `reason` and `spend_usd`, and
while a group empties `result: stopping` with `instances_left`; then `compute stopped`);
`<state_uri>/state.json` holds what the next call needs.

Credentials are the function's service account from the metadata server
(google.auth.compute_engine). `TRAINSTACK_TPU_API_ENDPOINT`,
`TRAINSTACK_COMPUTE_API_ENDPOINT` and `TRAINSTACK_CONTAINER_API_ENDPOINT` override the APIs'
endpoints (tests point them at local fakes; the deployed function never sets them).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The checkpoint bucket is a standard bucket: gcsfs's probe for zonal and hierarchical
# buckets (on by default in gcsfs 2026) only adds a gRPC round trip to every call.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import functions_framework
import gcsfs
import google.auth.compute_engine
from googleapiclient import discovery
from googleapiclient.errors import HttpError

CONFIG_FILE = Path(__file__).with_name("config.json")
ENDPOINT_ENV = "TRAINSTACK_TPU_API_ENDPOINT"
COMPUTE_ENDPOINT_ENV = "TRAINSTACK_COMPUTE_API_ENDPOINT"
CONTAINER_ENDPOINT_ENV = "TRAINSTACK_CONTAINER_API_ENDPOINT"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
NOT_FOUND = "NOT_FOUND"
STOPPED = "STOPPED"
"""What a group or node pool of size 0 with no instances left is seen as."""
DELETING_ = "DELETING_"
"""`DELETING_<n>`: a group or pool of size 0 whose `n` instances are still being deleted."""
RECOVER = {
    "node": frozenset({"PREEMPTED", "TERMINATED"}),
    "queued": frozenset({"SUSPENDED", "FAILED"}),
}
HEALTHY = {"node": "READY", "queued": "ACTIVE"}
BILLING = {
    # A TPU bills while READY (tpu/pricing); a queued resource's node while it is ACTIVE.
    "node": frozenset({"READY"}),
    "queued": frozenset({"ACTIVE"}),
}
BACKOFF_BASE_S = 120
BACKOFF_MAX_S = 3600
STOP_GRACE_S = 300
"""How long a stop request waits for the trainer's checkpoint before the compute stops."""
FRESH_RUN: dict[str, Any] = {
    "spend_usd": 0.0,
    "last_tick": None,
    "billing": False,
    "stop_requested": None,
    "stopping": None,
    "stop_reason": None,
    "stopping_seen": None,
    "stopped": None,
}


def load_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(CONFIG_FILE.read_text())
    return config


def _now() -> float:
    return time.time()


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _path(uri: str) -> str:
    return uri.removeprefix("gs://")


class Store:
    """state.json and events.jsonl under `state_uri` (gs://bucket/prefix), and the run's
    objects beside the checkpoints."""

    def __init__(self, state_uri: str, credentials: Any) -> None:
        self.fs = gcsfs.GCSFileSystem(token=credentials)
        self.prefix = _path(state_uri).rstrip("/")

    def read_state(self) -> dict[str, Any]:
        path = f"{self.prefix}/state.json"
        if not self.fs.exists(path):
            return {"attempts": 0, "next_allowed": None, "recreate": False}
        state: dict[str, Any] = json.loads(self.fs.cat_file(path))
        return state

    def write_state(self, state: dict[str, Any]) -> None:
        self.fs.pipe_file(f"{self.prefix}/state.json", json.dumps(state, sort_keys=True).encode())

    def append_event(self, event: dict[str, Any]) -> None:
        # Objects cannot be appended to: read, add the line, write back. One call at a time
        # (the function allows one instance and one request at once), so nothing interleaves.
        path = f"{self.prefix}/events.jsonl"
        old = self.fs.cat_file(path) if self.fs.exists(path) else b""
        self.fs.pipe_file(path, old + json.dumps(event, sort_keys=True).encode() + b"\n")
        # Also one structured log line: the runtime sends stdout to Cloud Logging, a one-line
        # JSON object as `jsonPayload` with `severity` and `message` recognised
        # (https://cloud.google.com/logging/docs/structured-logging, "Special JSON fields";
        # https://cloud.google.com/functions/docs/monitoring/logging), so `trainstack logs`
        # reads it beside the trainers' entries.
        failed = str(event.get("result", "")).startswith("error")
        severity = "WARNING" if failed else "NOTICE" if event["action"] != "none" else "INFO"
        message = f"supervisor: {event['seen']} -> {event['action']}: {event['result']}"
        line = {**event, "severity": severity, "message": message}
        print(json.dumps(line, sort_keys=True), flush=True)

    def read(self, uri: str | None) -> bytes | None:
        """The object's bytes, or None where there is none (or no URI)."""
        if not uri:
            return None
        try:
            return bytes(self.fs.cat_file(_path(uri)))
        except FileNotFoundError:
            return None

    def write(self, uri: str, data: bytes) -> None:
        self.fs.pipe_file(_path(uri), data)

    def remove(self, uri: str | None) -> None:
        if uri and self.fs.exists(_path(uri)):
            self.fs.rm_file(_path(uri))


def _api(name: str, version: str, endpoint_env: str, credentials: Any) -> Any:
    """The API's discovery client (at the endpoint `endpoint_env` names, where set)."""
    endpoint = {"api_endpoint": os.environ[endpoint_env]} if os.environ.get(endpoint_env) else None
    return discovery.build(
        name, version, credentials=credentials, client_options=endpoint, cache_discovery=False
    )


class Tpu:
    """The one node or queued resource this stack owns, through the TPU v2 REST API."""

    def __init__(self, config: dict[str, Any], credentials: Any) -> None:
        self.api = _api("tpu", "v2", ENDPOINT_ENV, credentials)
        self.kind: str = config["kind"]
        self.name: str = config["name"]
        self.body: dict[str, Any] = config["body"]
        self.parent, _, self.id = self.name.rpartition(
            "/nodes/" if self.kind == "node" else "/queuedResources/"
        )
        locations = self.api.projects().locations()
        self.collection = locations.nodes() if self.kind == "node" else locations.queuedResources()

    def state(self) -> str:
        try:
            found = self.collection.get(name=self.name).execute(num_retries=2)
        except HttpError as err:
            if err.resp.status == 404:
                return NOT_FOUND
            raise
        state = found.get("state")
        # A node's state is a string; a queued resource's is {"state": ...}.
        return str(
            (state.get("state") if isinstance(state, dict) else state) or "STATE_UNSPECIFIED"
        )

    def billing(self, seen: str) -> bool:
        return seen in BILLING[self.kind]

    def delete(self) -> None:
        if self.kind == "queued":
            # force: an ACTIVE queued resource is deleted with its nodes (without it the
            # API refuses one that still has nodes).
            self.collection.delete(name=self.name, force=True).execute(num_retries=2)
        else:
            self.collection.delete(name=self.name).execute(num_retries=2)

    stop = delete
    STOPS_AT_ONCE = True  # a node whose delete is accepted is no longer READY (what bills)

    def create(self) -> None:
        if self.kind == "node":
            self.collection.create(parent=self.parent, nodeId=self.id, body=self.body).execute()
        else:
            self.collection.create(
                parent=self.parent, queuedResourceId=self.id, body=self.body
            ).execute()


def _size_state(views: list[tuple[int, int, bool]]) -> str:
    """`SIZE_<target>` while the groups (`Group.view`) ask for instances, `DELETING_<left>`
    after a resize to 0 until none is left and every group is stable, then `STOPPED`."""
    target, left = sum(v[0] for v in views), sum(v[1] for v in views)
    if target:
        return f"SIZE_{target}"
    return f"{DELETING_}{left}" if left or not all(v[2] for v in views) else STOPPED


def _left(seen: str) -> int | None:
    """The instances still being deleted (`DELETING_<n>`), else None."""
    return int(seen.removeprefix(DELETING_)) if seen.startswith(DELETING_) else None


def _group_parts(url_or_name: str) -> tuple[str, str, str]:
    """(project, zone, name) of `.../projects/P/zones/Z/instanceGroupManagers/N` (a name or
    the URL GKE lists in `instanceGroupUrls`)."""
    parts = url_or_name.split("/")
    return parts[parts.index("projects") + 1], parts[parts.index("zones") + 1], parts[-1]


class Group:
    """A managed instance group (Compute Engine v1): billing while it holds instances;
    stopped by resizing it to 0, which is done once it holds none."""

    STOPS_AT_ONCE = False

    def __init__(self, config: dict[str, Any], credentials: Any) -> None:
        self.api = _api("compute", "v1", COMPUTE_ENDPOINT_ENV, credentials)
        self.name: str = config["name"]

    def view(self, name: str) -> tuple[int, int, bool] | None:
        """(target size, instances left, stable) of the group (one GET), or None where
        there is none."""
        project, zone, group = _group_parts(name)
        try:
            found = (
                self.api.instanceGroupManagers()
                .get(project=project, zone=zone, instanceGroupManager=group)
                .execute(num_retries=2)
            )
        except HttpError as err:
            if err.resp.status == 404:
                return None
            raise
        # targetSize is 0 once a resize to 0 is accepted, VMs or not (module docstring).
        # compute.v1 discovery document, InstanceGroupManager: `currentActions` counts the
        # instances by action (`none`, `creating`, `deleting`: "scheduled to be deleted or
        # are currently being deleted", ...); `status.isStable`: "none of the instances ...
        # is currently undergoing any type of change (for example, creation, restart, or
        # deletion); no future changes are scheduled". Empty: all counts 0 and stable.
        left = sum(int(n) for n in (found.get("currentActions") or {}).values())
        stable = (found.get("status") or {}).get("isStable") is True
        return int(found.get("targetSize", 0)), left, stable

    def state(self) -> str:
        view = self.view(self.name)
        return NOT_FOUND if view is None else _size_state([view])

    def billing(self, seen: str) -> bool:
        return seen.startswith(("SIZE_", DELETING_))

    def stop(self) -> None:
        project, zone, group = _group_parts(self.name)
        self.api.instanceGroupManagers().resize(
            project=project, zone=zone, instanceGroupManager=group, size=0
        ).execute(num_retries=2)


class NodePool:
    """A GKE node pool (container v1): billing while any of its instance groups has
    instances; stopped by setting its size to 0 (`nodePools.setSize`), which is done once
    its groups hold none (GKE deletes the VMs through them, as a resize does)."""

    STOPS_AT_ONCE = False

    def __init__(self, config: dict[str, Any], credentials: Any) -> None:
        self.api = _api("container", "v1", CONTAINER_ENDPOINT_ENV, credentials)
        self.groups = Group(config, credentials)
        self.name: str = config["name"]
        self.pools = self.api.projects().locations().clusters().nodePools()

    def state(self) -> str:
        try:
            pool = self.pools.get(name=self.name).execute(num_retries=2)
        except HttpError as err:
            if err.resp.status == 404:
                return NOT_FOUND
            raise
        # A node pool reports no node count of its own: its groups' instances are it.
        views = [self.groups.view(url) for url in pool.get("instanceGroupUrls", [])]
        return _size_state([v for v in views if v is not None])

    def billing(self, seen: str) -> bool:
        return seen.startswith(("SIZE_", DELETING_))

    def stop(self) -> None:
        self.pools.setSize(name=self.name, body={"nodeCount": 0}).execute(num_retries=2)


TARGETS: dict[str, type[Tpu | Group | NodePool]] = {
    "node": Tpu,
    "queued": Tpu,
    "mig": Group,
    "node_pool": NodePool,
}


def target_of(config: dict[str, Any], credentials: Any) -> Tpu | Group | NodePool:
    return TARGETS[config["kind"]](config, credentials)


def _error(err: Exception) -> str:
    if isinstance(err, HttpError):
        return f"error: HTTP {err.resp.status}: {err._get_reason()}"
    return f"error: {type(err).__name__}: {err}"


def _json(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return {"outcome": "unreadable"}
    return value if isinstance(value, dict) else {"outcome": "unreadable"}


def _count_spend(state: dict[str, Any], billing: bool, hourly_usd: float, now: float) -> None:
    """Add the time since the previous call at list price: the whole gap while both calls
    saw the compute billing, half of it where one did (it started or stopped in between)."""
    last = state["last_tick"]
    if last is not None and now > last:
        share = (float(state["billing"]) + float(billing)) / 2
        state["spend_usd"] = round(state["spend_usd"] + (now - last) / 3600 * hourly_usd * share, 6)
    state["last_tick"], state["billing"] = now, billing


def end_reason(
    run: dict[str, Any], store: Store, state: dict[str, Any], now: float, billing: bool
) -> str | None:
    """Why the run is over (`done`, `failed`, `stopped`, `max_run_hours`, `max_total_usd`),
    or None while it goes on."""
    ended = _json(store.read(run.get("end_uri")))
    if ended is not None:
        return str(ended.get("outcome", "unreadable"))
    return _limit_reason(run, store, state, now, billing)


def _limit_reason(
    run: dict[str, Any], store: Store, state: dict[str, Any], now: float, billing: bool
) -> str | None:
    """`max_run_hours` or `max_total_usd` when that limit is reached, else None."""
    limit = run.get("max_run_seconds")
    started = store.read(run.get("clock_uri")) if limit else None
    if limit and started is None and billing:
        # No node has recorded the run's start (a GKE pod keeps no clock; a VM still
        # booting): the compute bills from now, so the run's time counts from now.
        started = b"%d" % now
        store.write(run["clock_uri"], started)
    if limit and started and started.strip().isdigit() and now >= int(started) + limit:
        return "max_run_hours"
    cap = run.get("max_total_usd")
    if cap is not None and state["spend_usd"] >= cap:
        return "max_total_usd"
    return None


def _stop(
    target: Tpu | Group | NodePool,
    store: Store,
    run: dict[str, Any],
    run_config: dict[str, Any],
    event: dict[str, Any],
    reason: str,
    now: float,
) -> dict[str, Any] | None:
    """Stop the compute for `reason` (the event), or None while a stop request waits."""
    event["reason"], event["spend_usd"] = reason, round(run["spend_usd"], 2)
    stop_uri = run_config.get("stop_uri")
    # The limits ask the trainer to save first: a stop request, then the stop once it has
    # stopped (its end record says so) or the grace has passed.
    if reason in ("max_run_hours", "max_total_usd") and stop_uri and run["billing"]:
        if run["stop_requested"] is None:
            request = {"reason": reason, "time": _iso(now), "spend_usd": event["spend_usd"]}
            store.write(stop_uri, json.dumps(request, sort_keys=True).encode())
            run["stop_requested"] = now
            event["action"] = "request_stop"
            return event
        if now < run["stop_requested"] + STOP_GRACE_S:
            return None
    event["action"] = "stop"
    try:
        target.stop()
    except HttpError as err:
        event["result"] = _error(err)
        return event
    if target.STOPS_AT_ONCE:
        run["stopped"] = now
    else:  # accepted; the instances go later (`_stopping`)
        seen = str(event["seen"])
        run.update(stopping=now, stop_reason=reason, stopping_seen=seen)
        event["result"], event["instances_left"] = "stopping", int(seen.removeprefix("SIZE_"))
    return event


def _stopping(
    store: Store, state: dict[str, Any], event: dict[str, Any], left: int | None, now: float
) -> dict[str, Any]:
    """A check while a group or pool empties after its stop: `left` instances still being
    deleted (spend still counted, nothing called again), or None once they are gone."""
    run = state["run"]
    event.update(reason=run["stop_reason"], spend_usd=round(run["spend_usd"], 2))
    if left is None:
        run.update(stopping=None, stopped=now)
        event["result"] = "compute stopped"
        store.append_event(event)
    else:
        event["result"], event["instances_left"] = "stopping", left
        # One line per change in what is left, not one every check.
        if run["stopping_seen"] != event["seen"]:
            run["stopping_seen"] = event["seen"]
            store.append_event(event)
    store.write_state(state)
    return event


def supervise_once(
    target: Tpu | Group | NodePool, store: Store, now: float, config: dict[str, Any]
) -> dict[str, Any]:
    """Check the compute once, act at most once; the event (or the no-op answer)."""
    run_config: dict[str, Any] = config.get("run") or {}
    state = store.read_state()
    # Run-specific state belongs to one run (`end_uri` names it): a new run starts afresh.
    run = state.get("run")
    if not isinstance(run, dict) or run.get("id") != run_config.get("end_uri"):
        run = {"id": run_config.get("end_uri")}
    state["run"] = run = {**FRESH_RUN, **run}
    seen = target.state()
    billing, left = target.billing(seen), _left(seen)
    _count_spend(run, billing, float(run_config.get("hourly_usd") or 0), now)
    event: dict[str, Any] = {
        "time": _iso(now),
        "resource": target.name,
        "seen": seen,
        "action": "none",
        "result": "ok",
        "attempt": state["attempts"],
        "next_allowed": _iso(state["next_allowed"]),
    }
    if run["stopping"] is not None and (left is not None or not billing):
        return _stopping(store, state, event, left, now)
    if billing and (run["stopped"] is not None or run["stopping"] is not None):
        # Compute back after a stop (`pulumi up`): looked after again, and stopped again
        # while the run's end still holds.
        run["stopped"] = run["stopping"] = None
        back = {**event, "result": "compute back after a stop"}
        outcome = (_json(store.read(run_config.get("end_uri"))) or {}).get("outcome")
        requested = store.read(run_config.get("stop_uri")) is not None
        if (
            outcome in (None, "stopped")
            and (requested or outcome)
            and _limit_reason(run_config, store, run, now, billing) is None
        ):
            # Stopped by a limit that no longer holds (raised in the stack): the run goes on.
            store.remove(run_config.get("stop_uri"))
            store.remove(run_config.get("end_uri"))
            run["stop_requested"] = None
            back["result"] += "; the limits no longer hold: stop request withdrawn"
        store.append_event(back)
    if run["stopped"] is not None:
        store.write_state(state)
        return {**event, "result": "stopped"}
    reason = end_reason(run_config, store, run, now, billing)
    if reason is not None and left is not None:
        # Emptying already (someone resized it to 0): waited for, not resized again.
        run.update(stopping=now, stop_reason=reason, stopping_seen=None)
        return _stopping(store, state, event, left, now)
    if reason is not None and (billing or seen not in (NOT_FOUND, STOPPED, "DELETING")):
        acted = _stop(target, store, run, run_config, event, reason, now)
        if acted is not None:
            store.append_event(acted)
        store.write_state(state)
        return acted or {**event, "result": "waiting for the trainer's checkpoint"}
    if reason is not None and seen != "DELETING":
        # Ended with nothing billing (a slice being recovered, a group someone emptied).
        run["stopped"] = now
        state["recreate"] = False
        event.update(reason=reason, spend_usd=round(run["spend_usd"], 2))
        event["result"] = "run ended; compute already stopped"
        store.append_event(event)
        store.write_state(state)
        return event
    if not isinstance(target, Tpu) or not config.get("recover"):
        store.write_state(state)
        return event
    return _recover(target, store, state, event, seen, now)


def _recover(
    tpu: Tpu, store: Store, state: dict[str, Any], event: dict[str, Any], seen: str, now: float
) -> dict[str, Any]:
    if seen in RECOVER[tpu.kind]:
        event["action"] = "delete"
        try:
            tpu.delete()
            state["recreate"] = True
        except HttpError as err:
            event["result"] = _error(err)
    elif seen == NOT_FOUND and not state["recreate"]:
        if state.get("reported_missing"):
            store.write_state(state)
            return event
        event["result"] = "missing, and not deleted by this supervisor: left alone"
        state["reported_missing"] = True
    elif seen == NOT_FOUND:
        if state["next_allowed"] is not None and now < state["next_allowed"]:
            event["result"] = "backoff"
            store.write_state(state)
            return event
        attempt = state["attempts"] + 1
        event["action"], event["attempt"] = "create", attempt
        try:
            tpu.create()
        except HttpError as err:
            event["result"] = _error(err)
        # Also after a create that was accepted: if the slice never comes up (no capacity
        # found later), the next create waits as long as after a refused one.
        state["attempts"] = attempt
        state["next_allowed"] = now + min(BACKOFF_BASE_S * 2 ** (attempt - 1), BACKOFF_MAX_S)
        event["next_allowed"] = _iso(state["next_allowed"])
    elif seen == HEALTHY[tpu.kind] and (state["recreate"] or state.get("reported_missing")):
        event["action"], event["result"] = "none", "recovered"
        state.update(attempts=0, next_allowed=None, recreate=False, reported_missing=False)
    else:
        store.write_state(state)
        return event  # healthy, or on its way somewhere: the next call looks again
    store.append_event(event)
    store.write_state(state)
    return event


@functions_framework.http
def supervise(request: Any) -> tuple[str, int, dict[str, str]]:
    """The HTTP entry point (`entry_point: supervise`)."""
    config = load_config()
    credentials = google.auth.compute_engine.Credentials(scopes=list(SCOPES))
    event = supervise_once(
        target_of(config, credentials), Store(config["state_uri"], credentials), _now(), config
    )
    # Always 200 when the check ran: Cloud Scheduler retries failures, and retries are
    # exactly the tight loop the backoff avoids.
    return json.dumps(event, sort_keys=True), 200, {"Content-Type": "application/json"}

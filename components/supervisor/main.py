"""trainstack run supervisor: brings a preempted TPU slice back and stops a run's compute at
its end. An HTTP Cloud Functions (gen2) function that Cloud Scheduler calls every few minutes
(`trainstack.components.run_supervisor` ships this file with `config.json` beside it: `kind`
(`node`, `queued`, `mig`, `node_pool`), `name` (the resource's full name), `body` (TPU kinds:
the REST body it is created again with), `recover` (whether a preempted slice is
recreated), `state_uri`, `run` (below)). Each call looks once and waits for nothing.

Recovery (`recover`): a Spot node PREEMPTED or TERMINATED, or a queued resource SUSPENDED
or FAILED, is deleted and, once gone, created again with the same name and body (its
startup script resumes from the newest checkpoint). TPU v2 discovery, Node.State:
"PREEMPTED: TPU node has been preempted", "TERMINATED: ... has reached the end of its life
cycle (for preemptible nodes)"; https://cloud.google.com/tpu/docs/preemptible: "If a TPU
has been preempted, the status changes from READY to PREEMPTED";
https://cloud.google.com/tpu/docs/queued-resources: "SUSPENDED: The resources specified in
the request have been deleted. ... it's no longer eligible for further allocation",
"FAILED: ... The request remains in the queue until it is explicitly deleted". Only a slice
this supervisor deleted is created again (one a person deleted is reported and left alone).
A create that fails (capacity, quota) or whose slice never comes up waits
`BACKOFF_BASE_S * 2**(attempt-1)` s (at most `BACKOFF_MAX_S`) before the next try.

The end of the run (`run`, every key optional) stops the compute: `end_uri`, written by the
node launcher when the run ended for good (`trainstack.trainers.common.run_records`: rank
0's `done`, or a failure the target does not retry: `{"outcome": "done" | "failed" |
"stopped", ...}`); `clock_uri` + `max_run_seconds`: the run's first start (Unix seconds,
from the GCE and TPU startup scripts, or this function's first call that sees the compute
billing without one) and `limits.max_run_hours`; `hourly_usd` + `max_total_usd`: the
compute's list price and `limits.max_total_usd`, against this supervisor's own count (each
call adds the time since the previous one at `hourly_usd` while the compute bills,
trapezoid over the two views; in `state.json` across recoveries and restarts of the run
that `end_uri` names). The limits first write the stop request `stop_uri` (the launcher
stops the trainer with SIGTERM, which saves a checkpoint, and writes `end_uri` `stopped`)
and stop the compute once `end_uri` says so, or `STOP_GRACE_S` after the request; `done`
or `failed` stops it at once. A TPU node or queued resource is deleted ("Charges for Cloud
TPU accrue while your TPU node is in a READY state", https://cloud.google.com/tpu/pricing),
which stops its billing at once; a managed instance group is resized to 0 and a GKE node
pool set to 0 nodes, which deletes their VMs (`trainstack.components.catalog.billing`), but
"The resize operation is marked DONE when the resize actions are scheduled even if the group
has not yet added or deleted any instances" (the resize page): the group or pool is
"stopping", its spend still counted and nothing called again, until a check finds its
instances gone (`Group.view`) and writes "compute stopped".

Every action is one JSON line appended to `<state_uri>/events.jsonl` (time, resource, state
seen, action, result, attempt, next allowed time; a stop adds `reason` and `spend_usd`, and
while a group empties `result: stopping` with `instances_left`; then `compute stopped`);
`<state_uri>/state.json` holds what the next call needs. A call that cannot read the compute
(a 403 where a grant is wrong, a transport error) records seen `UNKNOWN` with the error, once
per change (`_unreadable`), and answers 502.

Credentials: its service account (metadata server); `*_ENDPOINT_ENV` point tests at fakes.
"""

from __future__ import annotations

import contextlib
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
import google.auth.exceptions
import httplib2
from googleapiclient import discovery
from googleapiclient.errors import HttpError

Json = dict[str, Any]
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
RECOVER = {"node": ("PREEMPTED", "TERMINATED"), "queued": ("SUSPENDED", "FAILED")}
HEALTHY = {"node": "READY", "queued": "ACTIVE"}
"""Also what bills: a TPU while READY (tpu/pricing), a queued resource's node while ACTIVE."""
BACKOFF_BASE_S = 120
BACKOFF_MAX_S = 3600
STOP_GRACE_S = 300
"""How long a stop request waits for the trainer's checkpoint before the compute stops."""
WRITE_TRIES = 5
"""How often a call reads and writes again after losing a race (`Store`)."""
UNREADABLE = "UNKNOWN"
"""What a check that could not read the compute saw (`_unreadable`)."""
READ_ERRORS = (HttpError, OSError, httplib2.HttpLib2Error, google.auth.exceptions.GoogleAuthError)
FRESH_STATE = {"attempts": 0, "next_allowed": None, "recreate": False}
FRESH_RUN: Json = {"spend_usd": 0.0, "billing": False} | dict.fromkeys(
    ("last_tick", "stop_requested", "stopping", "stop_reason", "stopping_seen", "stopped")
)


def load_config() -> Json:
    return dict(json.loads(CONFIG_FILE.read_text()))


def _now() -> float:
    return time.time()


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _path(uri: str) -> str:
    return uri.removeprefix("gs://")


def _found(request: Any) -> Any:
    """What a get answers, or None on 404; any other error is raised (`_unreadable`)."""
    try:
        return request.execute(num_retries=2)
    except HttpError as err:
        if err.resp.status == 404:
            return None
        raise


class Store:
    """state.json and events.jsonl under `state_uri` (gs://bucket/prefix), and the run's
    objects beside the checkpoints. Calls can overlap (Cloud Functions "may, for a short
    period of time, create more instances than the specified max instances limit",
    cloudfunctions.v2 discovery `maxInstanceCount`; Cloud Scheduler is "at least once",
    https://cloud.google.com/scheduler/docs/overview), so state.json and events.jsonl are
    written only if unchanged since read (`ifGenerationMatch`, "0": absent; else HTTP 412,
    which gcsfs raises as FileExistsError; https://cloud.google.com/storage/docs/
    request-preconditions)."""

    def __init__(self, state_uri: str, credentials: Any) -> None:
        self.fs = gcsfs.GCSFileSystem(token=credentials)
        self.bucket, _, self.folder = _path(state_uri).rstrip("/").partition("/")
        self.generation = "0"  # state.json's, as read_state found it

    def _get(self, name: str) -> tuple[bytes, str]:
        """The object's bytes and generation ("0" where there is none). The generation is
        read first: bytes newer than it only make the conditional write fail."""
        try:
            found = self.fs.call("GET", "b/{}/o/{}", self.bucket, name, json_out=True)
        except FileNotFoundError:
            return b"", "0"
        _, data = self.fs.call("GET", "b/{}/o/{}", self.bucket, name, alt="media")
        return bytes(data), str(found["generation"])

    def _put(self, name: str, data: bytes, generation: str) -> None:
        # JSON API `objects.insert` (uploadType=media): gcsfs's writes take no generation but 0.
        upload = self.fs.base.removesuffix("storage/v1/") + "upload/storage/v1/b/{}/o"
        self.fs.call(
            "POST", upload, self.bucket, uploadType="media", name=name, data=data,
            ifGenerationMatch=generation, headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip

    def read_state(self) -> Json:
        data, self.generation = self._get(f"{self.folder}/state.json")
        return dict(json.loads(data)) if data else dict(FRESH_STATE)

    def write_state(self, state: Json) -> None:
        # FileExistsError where another call wrote it meanwhile: `supervise` checks again.
        data = json.dumps(state, sort_keys=True).encode()
        self._put(f"{self.folder}/state.json", data, self.generation)

    def append_event(self, event: Json) -> None:
        # Objects cannot be appended to: read, add the line, write back unless another
        # call did meanwhile (then again).
        added = json.dumps(event, sort_keys=True).encode() + b"\n"
        for _ in range(WRITE_TRIES):
            old, generation = self._get(f"{self.folder}/events.jsonl")
            with contextlib.suppress(FileExistsError):
                self._put(f"{self.folder}/events.jsonl", old + added, generation)
                break
        else:
            raise FileExistsError("events.jsonl changed on every try")
        # Also one structured log line for `trainstack logs`: stdout goes to Cloud Logging, a
        # one-line JSON object as `jsonPayload`, `severity` and `message` recognised
        # (https://cloud.google.com/logging/docs/structured-logging, "Special JSON fields";
        # https://cloud.google.com/functions/docs/monitoring/logging).
        failed = str(event.get("result", "")).startswith("error")
        severity = "WARNING" if failed else "NOTICE" if event["action"] != "none" else "INFO"
        message = f"supervisor: {event['seen']} -> {event['action']}: {event['result']}"
        line = {**event, "severity": severity, "message": message}
        print(json.dumps(line, sort_keys=True), flush=True)

    def read(self, uri: str | None) -> bytes | None:
        """The object's bytes, or None where there is none (or no URI)."""
        with contextlib.suppress(FileNotFoundError):
            return bytes(self.fs.cat_file(_path(uri))) if uri else None
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

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("tpu", "v2", ENDPOINT_ENV, credentials)
        self.kind, self.name, self.body = config["kind"], str(config["name"]), config["body"]
        self.parent, _, self.id = self.name.rpartition(
            "/nodes/" if self.kind == "node" else "/queuedResources/"
        )
        locations = self.api.projects().locations()
        self.collection = locations.nodes() if self.kind == "node" else locations.queuedResources()

    def state(self) -> str:
        found = _found(self.collection.get(name=self.name))
        if found is None:
            return NOT_FOUND
        state = found.get("state")  # a node's is a string; a queued resource's {"state": ...}
        state = state.get("state") if isinstance(state, dict) else state
        return str(state or "STATE_UNSPECIFIED")

    def billing(self, seen: str) -> bool:
        return seen == HEALTHY[self.kind]

    def delete(self) -> None:
        # force: an ACTIVE queued resource is deleted with its nodes (without it the API
        # refuses one that still has nodes).
        force = {"force": True} if self.kind == "queued" else {}
        self.collection.delete(name=self.name, **force).execute(num_retries=2)

    stop = delete
    STOPS_AT_ONCE = True  # a node whose delete is accepted is no longer READY (what bills)

    def create(self) -> None:
        key = "nodeId" if self.kind == "node" else "queuedResourceId"
        self.collection.create(parent=self.parent, body=self.body, **{key: self.id}).execute()


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

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("compute", "v1", COMPUTE_ENDPOINT_ENV, credentials)
        self.name: str = config["name"]

    def view(self, name: str) -> tuple[int, int, bool] | None:
        """(target size, instances left, stable) of the group (one GET); None if there is none."""
        project, zone, group = _group_parts(name)
        igm = self.api.instanceGroupManagers()
        found = _found(igm.get(project=project, zone=zone, instanceGroupManager=group))
        if found is None:
            return None
        # targetSize is 0 once a resize to 0 is accepted, VMs or not (module docstring).
        # compute.v1 discovery, InstanceGroupManager: `currentActions` counts instances by
        # action (`deleting`: "scheduled to be deleted or are currently being deleted", ...);
        # `status.isStable`: "none of the instances ... is currently undergoing any type of
        # change (for example, creation, restart, or deletion); no future changes are
        # scheduled". Empty: all counts 0 and stable.
        left = sum(int(n) for n in (found.get("currentActions") or {}).values())
        stable = (found.get("status") or {}).get("isStable") is True
        return int(found.get("targetSize", 0)), left, stable

    def state(self) -> str:
        view = self.view(self.name)
        return NOT_FOUND if view is None else _size_state([view])

    @staticmethod
    def billing(seen: str) -> bool:
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

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("container", "v1", CONTAINER_ENDPOINT_ENV, credentials)
        self.groups = Group(config, credentials)
        self.name: str = config["name"]
        self.pools = self.api.projects().locations().clusters().nodePools()

    def state(self) -> str:
        pool = _found(self.pools.get(name=self.name))
        if pool is None:
            return NOT_FOUND
        # A node pool reports no node count of its own: its groups' instances are it.
        views = [self.groups.view(url) for url in pool.get("instanceGroupUrls", [])]
        return _size_state([v for v in views if v is not None])

    billing = staticmethod(Group.billing)

    def stop(self) -> None:
        self.pools.setSize(name=self.name, body={"nodeCount": 0}).execute(num_retries=2)


Target = Tpu | Group | NodePool
TARGETS: dict[str, type[Target]] = {"node": Tpu, "queued": Tpu, "mig": Group, "node_pool": NodePool}


def target_of(config: Json, credentials: Any) -> Target:
    return TARGETS[config["kind"]](config, credentials)


def _error(err: Exception) -> str:
    if isinstance(err, HttpError):
        return f"error: HTTP {err.resp.status}: {err._get_reason()}"
    return f"error: {type(err).__name__}: {err}"


def _json(data: bytes | None) -> Json | None:
    try:
        value = None if data is None else json.loads(data)
    except ValueError:
        value = "unreadable"
    return value if value is None or isinstance(value, dict) else {"outcome": "unreadable"}


def _count_spend(state: Json, billing: bool, hourly_usd: float, now: float) -> None:
    """Add the time since the previous call at list price: the whole gap while both calls
    saw the compute billing, half of it where one did (it started or stopped in between)."""
    last = state["last_tick"]
    if last is not None and now > last:
        share = (float(state["billing"]) + float(billing)) / 2
        state["spend_usd"] = round(state["spend_usd"] + (now - last) / 3600 * hourly_usd * share, 6)
    state["last_tick"], state["billing"] = now, billing


def end_reason(run: Json, store: Store, state: Json, now: float, billing: bool) -> str | None:
    """Why the run is over (`done`, `failed`, `stopped`, `max_run_hours`, `max_total_usd`),
    or None while it goes on."""
    ended = _json(store.read(run.get("end_uri")))
    if ended is not None:
        return str(ended.get("outcome", "unreadable"))
    return _limit_reason(run, store, state, now, billing)


def _limit_reason(run: Json, store: Store, state: Json, now: float, billing: bool) -> str | None:
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
    target: Target, store: Store, run: Json, run_config: Json, event: Json, reason: str, now: float
) -> Json | None:
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


def _stopping(store: Store, state: Json, event: Json, left: int | None, now: float) -> Json:
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


def supervise_once(target: Target, store: Store, now: float, config: Json) -> Json:
    """Check the compute once, act at most once; the event (or the no-op answer)."""
    run_config: Json = config.get("run") or {}
    state = store.read_state()
    # Run-specific state belongs to one run (`end_uri` names it): a new run starts afresh.
    run = state.get("run")
    if not isinstance(run, dict) or run.get("id") != run_config.get("end_uri"):
        run = {"id": run_config.get("end_uri")}
    state["run"] = run = {**FRESH_RUN, **run}
    try:
        seen = target.state()
    except READ_ERRORS as err:
        return _unreadable(target, store, state, run_config, _error(err), now)
    billing, left = target.billing(seen), _left(seen)
    _count_spend(run, billing, float(run_config.get("hourly_usd") or 0), now)
    event = _event(target, state, seen, "ok", now)
    if state.pop("unreadable", None):
        store.append_event({**event, "result": "read again"})
    if run["stopping"] is not None and (left is not None or not billing):
        return _stopping(store, state, event, left, now)
    if billing and (run["stopped"] is not None or run["stopping"] is not None):
        # Compute back after a stop (`pulumi up`): looked after again, and stopped again
        # while the run's end still holds.
        run["stopped"] = run["stopping"] = None
        back = {**event, "result": "compute back after a stop"}
        outcome = (_json(store.read(run_config.get("end_uri"))) or {}).get("outcome")
        requested = store.read(run_config.get("stop_uri")) is not None
        by_limit = outcome in (None, "stopped") and (requested or outcome)
        if by_limit and _limit_reason(run_config, store, run, now, billing) is None:
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


def _event(target: Target, state: Json, seen: str, result: str, now: float) -> Json:
    """What one check saw, before it acts."""
    attempt, next_allowed = state["attempts"], _iso(state["next_allowed"])
    return {"time": _iso(now), "resource": target.name, "seen": seen, "action": "none",
            "result": result, "attempt": attempt, "next_allowed": next_allowed}  # fmt: skip


def _unreadable(
    target: Target, store: Store, state: Json, run_config: Json, error: str, now: float
) -> Json:
    """A check that could not read the compute (`error`, a 403 where a grant is wrong): it
    can neither recover nor stop it. One event per change of the error or of the run's end
    (`reason`, which the run's own objects still tell), not one per call."""
    run = state["run"]  # counted as last seen: a cap had better count too much than too little
    _count_spend(run, bool(run["billing"]), float(run_config.get("hourly_usd") or 0), now)
    event = _event(target, state, UNREADABLE, error, now)
    reason = None if run["stopped"] else end_reason(run_config, store, run, now, False)
    if reason is not None:
        event.update(reason=reason, spend_usd=round(run["spend_usd"], 2))
    if state.get("unreadable") != [error, reason]:
        state["unreadable"] = [error, reason]
        store.append_event(event)
    store.write_state(state)
    return event


def _recover(tpu: Tpu, store: Store, state: Json, event: Json, seen: str, now: float) -> Json:
    record = True
    if seen in RECOVER[tpu.kind]:
        event["action"] = "delete"
        try:
            tpu.delete()
            state["recreate"] = True
        except HttpError as err:
            event["result"] = _error(err)
    elif seen == NOT_FOUND and not state["recreate"]:
        record = not state.get("reported_missing")  # reported once
        if record:
            event["result"] = "missing, and not deleted by this supervisor: left alone"
        state["reported_missing"] = True
    elif seen == NOT_FOUND and state["next_allowed"] is not None and now < state["next_allowed"]:
        record, event["result"] = False, "backoff"
    elif seen == NOT_FOUND:
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
        record = False  # healthy, or on its way somewhere: the next call looks again
    if record:
        store.append_event(event)
    store.write_state(state)
    return event


@functions_framework.http
def supervise(request: Any) -> tuple[str, int, dict[str, str]]:
    """The HTTP entry point (`entry_point: supervise`)."""
    config = load_config()
    credentials = google.auth.compute_engine.Credentials(scopes=list(SCOPES))
    target = target_of(config, credentials)
    for _ in range(WRITE_TRIES):
        # FileExistsError: an overlapping call wrote state.json first; check again from it.
        with contextlib.suppress(FileExistsError):
            event = supervise_once(target, Store(config["state_uri"], credentials), _now(), config)
            break
    else:
        raise FileExistsError("state.json changed on every try")
    # 200 when the check ran, even where an action failed (the event says so; the backoff
    # paces new tries). 502 where it could not read the compute, so Cloud Scheduler's log
    # shows a failed attempt ("The job is acknowledged by means of an HTTP response code in
    # the range [200 - 299]", cloudscheduler.v1 `HttpTarget`; retryCount 0: no retry): 502,
    # the call behind this one failed, unlike a crash here (500) or the platform's 503.
    status = 502 if event["seen"] == UNREADABLE else 200
    return json.dumps(event, sort_keys=True), status, {"Content-Type": "application/json"}

"""trainstack run supervisor: brings a preempted TPU slice back and stops a run's compute at
its end. An HTTP Cloud Functions (gen2) function that Cloud Scheduler calls every few minutes
(`trainstack.components.run_supervisor` ships it and `supervisor_store.py` with `config.json`:
`kind` (`node`, `queued`, `mig`, `node_pool`, `node_pools`), `name` (the resource's full name;
`node_pools`: the cluster's), `body` (TPU kinds: the REST body it is created again with),
`instances` (`mig`: its VMs' names), `pools` (`node_pools`: the pools' ids), `recover`,
`state_uri` (its own bucket), `run` (below)). Each call looks once and waits for nothing.

Recovery (`recover`): a Spot node PREEMPTED or TERMINATED, or a queued resource SUSPENDED
or FAILED, is deleted and, once gone, created again with the same name and body (its
startup script resumes from the newest checkpoint). TPU v2 discovery, Node.State:
"PREEMPTED: TPU node has been preempted", "TERMINATED: ... has reached the end of its life
cycle (for preemptible nodes)"; https://cloud.google.com/tpu/docs/preemptible: "If a TPU
has been preempted, the status changes from READY to PREEMPTED";
https://cloud.google.com/tpu/docs/queued-resources: "SUSPENDED: The resources specified in
the request have been deleted. ... it's no longer eligible for further allocation",
"FAILED: ... The request remains in the queue until it is explicitly deleted". Only a slice
this supervisor deleted is created again (one a person deleted is reported and left alone,
one not created yet is not reported), and only while the marker `<state_uri>/armed` exists:
Pulumi writes it after the compute and deletes it before the compute on `pulumi destroy`, so
nothing Pulumi is creating or destroying is deleted or created here. A create that fails
(capacity, quota) or whose slice never comes up waits `BACKOFF_BASE_S * 2**(attempt-1)` s
(at most `BACKOFF_MAX_S`) before the next try.

The end of the run (`run`, every key optional) stops the compute: `end_uri`, written when the
run ended for good (`trainstack.trainers.common.run_records`: `{"outcome": "done" | "failed"
| "stopped" | "capacity_ended", "stage", "reason", "step", ...}`; `capacity_ended`: a
flex-start machine's run duration ends, its trainer saved at `step` first, so the compute
stops at once and a machine that goes meanwhile is no failure); `alive_uri` + `node_count`, the nodes' heartbeats
`<alive_uri><rank>`: `no_heartbeat` once the compute has billed `NO_HEARTBEAT_S` since the
later of this supervisor's first sight of it billing and the newest heartbeat's server-side
time; `max_run_seconds` from that first
sight; `hourly_usd` + `max_total_usd`: the compute's list price and the cap, against its own
count (each call adds the time since the previous one at `hourly_usd` while the compute
bills: a slice READY, a group or pool with a VM running, `supervisor_targets.NOT_RUNNING`, trapezoid over the two views, across recoveries and restarts of the run `end_uri`
names). Clock, count and flags are in `state.json` in its own bucket, which the training
account cannot write; of what that account can write, only the end record and the
heartbeats' times are read (`supervisor_store.py`). The limits first write the stop request
`stop_uri` (the launcher stops the trainer with SIGTERM, which saves a checkpoint, and writes
`end_uri` `stopped`) and stop the compute once `end_uri` says so, or `STOP_GRACE_S` after the
request (at once where the request could not be written: nobody was asked to save); any
other end stops it at once. A TPU node or queued resource is deleted ("Charges
for Cloud TPU accrue while your TPU node is in a READY state", https://cloud.google.com/tpu/
pricing), which stops its billing at once; a managed instance group's VMs are deleted by name
and a GKE node pool is set to 0 nodes, which deletes their VMs
(`trainstack.components.catalog.billing`), but either is "marked as DONE when the action is
scheduled even if the instances are still being deleted" (compute.v1 discovery,
`deleteInstances`): the group or pool is "stopping", its spend still counted and nothing
called again, until a check finds its instances gone and writes "compute stopped". How each
kind is read and stopped: `supervisor_targets.py` (`Tpu`, `Group`, `NodePool`, `NodePools`).

Every action is one JSON line appended to `<state_uri>/events.jsonl` (time, resource, state
seen, action, result, attempt, next allowed time; a stop adds `reason`, `spend_usd` and, for
a stage's failure, `stage`, `detail` and the `node` rank that recorded it; while a group empties `result: stopping` with
`instances_left`, then `compute stopped`); `<state_uri>/state.json` holds what the next call
needs. A call that cannot read the compute (a 403 where a grant is wrong, a transport error)
records seen `UNKNOWN` with the error, once per change (`_unreadable`), and answers 502.

Credentials: its service account (metadata server); `*_ENDPOINT_ENV` point tests at fakes.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import functions_framework
import google.auth.compute_engine
from googleapiclient.errors import HttpError

if TYPE_CHECKING:
    from trainstack.components.supervisor.supervisor_store import (
        READ_ERRORS,
        RECORD_ERRORS,
        RECORDS_BUDGET_S,
        WRITE_TRIES,
        NotARecord,
        Store,
    )
    from trainstack.components.supervisor.supervisor_targets import (
        COMPUTE_ENDPOINT_ENV,
        CONTAINER_ENDPOINT_ENV,
        ENDPOINT_ENV,
        HEALTHY,
        NOT_FOUND,
        RECOVER,
        STOPPED,
        Target,
        Tpu,
        left_to_delete,
        target_of,
    )
else:
    try:  # the bundle: functions-framework puts main.py's folder on sys.path
        from supervisor_store import (
            READ_ERRORS,
            RECORD_ERRORS,
            RECORDS_BUDGET_S,
            WRITE_TRIES,
            NotARecord,
            Store,
        )
        from supervisor_targets import (
            COMPUTE_ENDPOINT_ENV,
            CONTAINER_ENDPOINT_ENV,
            ENDPOINT_ENV,
            HEALTHY,
            NOT_FOUND,
            RECOVER,
            STOPPED,
            Target,
            Tpu,
            left_to_delete,
            target_of,
        )
    except ImportError:  # imported as trainstack.components.supervisor.main (tests)
        from trainstack.components.supervisor.supervisor_store import (
            READ_ERRORS,
            RECORD_ERRORS,
            RECORDS_BUDGET_S,
            WRITE_TRIES,
            NotARecord,
            Store,
        )
        from trainstack.components.supervisor.supervisor_targets import (
            COMPUTE_ENDPOINT_ENV,
            CONTAINER_ENDPOINT_ENV,
            ENDPOINT_ENV,
            HEALTHY,
            NOT_FOUND,
            RECOVER,
            STOPPED,
            Target,
            Tpu,
            left_to_delete,
            target_of,
        )

__all__ = ["COMPUTE_ENDPOINT_ENV", "CONTAINER_ENDPOINT_ENV", "ENDPOINT_ENV", "supervise"]
"""The endpoint variables tests point at fakes are `supervisor_targets`'s, named here too."""

Json = dict[str, Any]
CONFIG_FILE = Path(__file__).with_name("config.json")
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
BACKOFF_BASE_S = 120
BACKOFF_MAX_S = 3600
STOP_GRACE_S = 300
"""How long a stop request waits for the trainer's checkpoint before the compute stops."""
NO_HEARTBEAT_S = 2700
"""`trainstack.trainers.common.run_records.NO_HEARTBEAT_S` (this file cannot import it; a
test holds the two equal)."""
LIMITS = ("max_run_hours", "max_total_usd")
"""The ends that ask the trainer to save first (a stop request)."""
CAPACITY_ENDED = "capacity_ended"
"""The end a flex-start machine's run duration makes (`trainstack.trainers.common.deadline`):
the trainer saved first; compute brought back (`pulumi up`, new capacity) goes on with the run."""
STAGES = ("package_download", "package_install", "launch", "startup", "trainer", "job")
"""The stages an end record may name as where the run failed (`run_records`)."""
DETAIL_MAX = 500
"""Characters of a failed stage's reason kept: all the node recorded
(`components/gpu_startup/node_helper.py` REASON_MAX; a test holds the two equal), so status
shows pip's error after a long package URI."""
UNREADABLE = "UNKNOWN"
"""What a check that could not read the compute saw (`_unreadable`)."""
FRESH_RUN: Json = {"spend_usd": 0.0, "billing": False, "silent_s": 0.0} | dict.fromkeys(
    ("last_tick", "started", "heard", "stop_requested", "requested_for", "stopping", "end")
    + ("stopping_seen", "stopped", "heartbeats_unread", "end_unread")
)


def load_config() -> Json:
    return dict(json.loads(CONFIG_FILE.read_text()))


def _now() -> float:
    return time.time()


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _error(err: Exception) -> str:
    if isinstance(err, HttpError):
        return f"error: HTTP {err.resp.status}: {err._get_reason()}"
    return f"error: {type(err).__name__}: {err}"


def _json(data: bytes | None) -> Json | None:
    try:
        value = None if data is None else json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: `[[[...` nested past Python's stack
        value = "unreadable"
    return value if value is None or isinstance(value, dict) else {"outcome": "unreadable"}


def _line(text: object, limit: int = DETAIL_MAX) -> str:
    """One line of at most `limit` characters (the end record's text is the trainer's)."""
    lines = str(text or "").strip().splitlines()
    return lines[0][:limit] if lines else ""


def _end_record(data: bytes | None) -> Json | None:
    """The end record as an end (`reason`: its outcome; a failure's `stage`, `detail` and
    `node`, the rank of the machine that recorded it)."""
    record = _json(data)
    if record is None:
        return None
    end: Json = {"reason": _line(record.get("outcome", "unreadable"), 40) or "unreadable"}
    step = record.get("step")
    if end["reason"] == CAPACITY_ENDED and isinstance(step, int) and not isinstance(step, bool):
        end["step"] = step  # the checkpoint it saved before the machine goes
    if end["reason"] == "failed" and record.get("stage") in STAGES:
        end |= {"stage": record["stage"], "detail": _line(record.get("reason"))}
        rank = record.get("node_rank")
        if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
            end["node"] = rank
    return end


def _tick(run: Json, run_config: Json, store: Store, billing: bool, now: float) -> None:
    """Count the time since the previous call: the spend at list price (the whole gap while
    both calls saw the compute billing, half of it where one did) and the billing time no
    node has reported in since the later of the first sight of it billing and the newest
    heartbeat (`NO_HEARTBEAT_S`)."""
    last, billed = run["last_tick"], 0.0
    if last is not None and now > last:
        billed = (now - last) * (float(run["billing"]) + float(billing)) / 2
    hourly = float(run_config.get("hourly_usd") or 0)
    run["spend_usd"] = round(run["spend_usd"] + billed / 3600 * hourly, 6)
    run["last_tick"], run["billing"] = now, billing
    if run["started"] is None:
        if billing:  # the run's clock and its heartbeat bound start at this first sight
            run.update(started=now, heard=now, silent_s=0.0)
        return
    run["silent_s"] = round(run["silent_s"] + billed, 3)
    if run_config.get("alive_uri"):
        _listen(run, store, run_config, now)


def _listen(run: Json, store: Store, run_config: Json, now: float) -> None:
    """Take a heartbeat newer than the last one heard: the billing time since it is at most
    the time since it. A read that fails (a 403, a transport error) never ends a run: the
    silence is not counted while it fails, and a log line says so once per change of the
    error."""
    try:
        newest = store.newest_heartbeat(run_config["alive_uri"], int(run_config["node_count"]))
    except RECORD_ERRORS as err:  # the trainer writes these objects
        run["silent_s"] = 0.0
        _unread(run, "heartbeats_unread", "heartbeats", _error(err))
        return
    run["heartbeats_unread"] = None
    if newest is not None and newest > run["heard"]:
        run["heard"] = newest
        run["silent_s"] = min(run["silent_s"], round(max(0.0, now - newest), 3))


def end_of_run(run_config: Json, store: Store, run: Json, now: float) -> Json | None:
    """Why the run is over (`reason`: `done`, `failed`, `stopped`, `no_heartbeat`,
    `max_run_hours`, `max_total_usd`; a failure's `stage`, `detail` and `node`), or None."""
    try:
        recorded = _end_record(store.read(run_config.get("end_uri")))
    except RECORD_ERRORS as err:  # the trainer writes this object
        # A 403 where the grant is wrong, a timeout, an object no launcher writes: logged, and
        # the limits, counted here, still end the run. An object no launcher writes ends it.
        _unread(run, "end_unread", "the run's end record", _error(err))
        recorded = {"reason": "unreadable"} if isinstance(err, NotARecord) else None
    else:
        run["end_unread"] = None
    return recorded or _limit(run_config, run, now)


def _unread(run: Json, key: str, what: str, error: str) -> None:
    """One warning log line per change of the error reading `what` (kept in `run[key]`)."""
    if run[key] != error:
        line = {"severity": "WARNING", "message": f"supervisor: {what} unread: {error}"}
        print(json.dumps(line, sort_keys=True), flush=True)
    run[key] = error


def _limit(run_config: Json, run: Json, now: float) -> Json | None:
    """`no_heartbeat`, `max_run_hours` or `max_total_usd` once reached, from the
    supervisor's own counts only; else None."""
    if run_config.get("alive_uri") and run["silent_s"] >= NO_HEARTBEAT_S:
        return {"reason": "no_heartbeat"}  # no node is up to save anything: stopped at once
    limit = run_config.get("max_run_seconds")
    if limit and run["started"] is not None and now >= run["started"] + limit:
        return {"reason": "max_run_hours"}
    cap = run_config.get("max_total_usd")
    if cap is not None and run["spend_usd"] >= cap:
        return {"reason": "max_total_usd"}
    return None


def _stop(
    target: Target, store: Store, run: Json, run_config: Json, event: Json, end: Json, now: float
) -> Json | None:
    """Stop the compute for `end` (the event), or None while a stop request waits."""
    event.update(end, spend_usd=round(run["spend_usd"], 2))
    stop_uri, reason = run_config.get("stop_uri"), end["reason"]
    # The limits ask the trainer to save first: a stop request, then the stop once it has
    # stopped (its end record says so) or the grace has passed.
    if reason in LIMITS and stop_uri and run["billing"]:
        if run["stop_requested"] is None:
            request = {"reason": reason, "time": _iso(now), "spend_usd": event["spend_usd"]}
            try:
                store.write(stop_uri, json.dumps(request, sort_keys=True).encode())
            except RECORD_ERRORS as err:  # the trainer writes this object too
                # A temporary hold refuses the overwrite (403), say: nobody was asked to save,
                # so there is no grace to wait for; the compute stops now.
                event["stop_request"] = _error(err)
                run.update(stop_requested=now - STOP_GRACE_S, requested_for=reason)
            else:
                run.update(stop_requested=now, requested_for=reason)
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
    run["end"] = end
    if target.STOPS_AT_ONCE:
        run["stopped"] = now
    else:  # accepted; the instances go later (`_stopping`)
        seen = str(event["seen"])
        run.update(stopping=now, stopping_seen=seen)
        event["result"], event["instances_left"] = "stopping", int(seen.removeprefix("SIZE_"))
    return event


def _stopping(store: Store, state: Json, event: Json, left: int | None, now: float) -> Json:
    """A check while a group or pool empties after its stop: `left` instances still being
    deleted (spend still counted, nothing called again), or None once they are gone."""
    run = state["run"]
    event.update(run["end"] or {}, spend_usd=round(run["spend_usd"], 2))
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


def _back(run: Json, run_config: Json, store: Store, event: Json, now: float) -> None:
    """Compute back after a stop (`pulumi up`): looked after again (its heartbeat bound
    afresh), and stopped again while the run's end still holds. A stop for a limit that no
    longer holds (raised in the stack) is withdrawn: decided from the supervisor's own record
    of why it stopped, never from an object the trainer can write."""
    run.update(stopped=None, stopping=None, heard=now, silent_s=0.0)
    back = {**event, "result": "compute back after a stop"}
    why = (run["end"] or {}).get("reason")
    by_limit = why in LIMITS or (why == "stopped" and run["requested_for"] is not None)
    # New capacity after a flex-start machine's end: the run resumes from its checkpoint.
    if (by_limit or why == CAPACITY_ENDED) and _limit(run_config, run, now) is None:
        kept = []
        for key in ("stop_uri", "end_uri"):
            try:
                store.remove(run_config.get(key))
            except RECORD_ERRORS as err:  # the trainer writes these objects too (a hold, say)
                kept.append(f"{run_config[key]} not removed ({_error(err)})")
        run.update(stop_requested=None, requested_for=None, end=None)
        back["result"] += (
            "; the run goes on from its checkpoint"
            if why == CAPACITY_ENDED
            else "; the limits no longer hold: stop request withdrawn"
        )
        back["result"] += "".join(f"; {line}" for line in kept)
    store.append_event(back)


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
    if seen != NOT_FOUND:
        state["found"] = True  # it has existed: missing from now on means deleted
    billing, left = target.billing(seen), left_to_delete(seen)
    _tick(run, run_config, store, billing, now)
    event = _event(target, state, seen, "ok", now)
    if state.pop("unreadable", None):
        store.append_event({**event, "result": "read again"})
    if run["stopping"] is not None and (left is not None or not billing):
        return _stopping(store, state, event, left, now)
    if billing and (run["stopped"] is not None or run["stopping"] is not None):
        _back(run, run_config, store, event, now)
    if run["stopped"] is not None:
        store.write_state(state)
        return {**event, "result": "stopped"}
    end = end_of_run(run_config, store, run, now)
    if end is not None:
        return _ended(target, store, state, run_config, event, end, now)
    if not isinstance(target, Tpu) or not config.get("recover"):
        store.write_state(state)
        return event
    return _recover(target, store, state, event, now)


def _ended(
    target: Target, store: Store, state: Json, run_config: Json, event: Json, end: Json, now: float
) -> Json:
    """A check after the run's end: stop what still bills, or record that nothing does."""
    run, seen = state["run"], str(event["seen"])
    left = left_to_delete(seen)
    if left is not None:
        # Emptying already (someone deleted its VMs or resized it): waited for, not stopped
        # again.
        run.update(stopping=now, end=end, stopping_seen=None)
        return _stopping(store, state, event, left, now)
    if run["billing"] or seen not in (NOT_FOUND, STOPPED, "DELETING"):
        acted = _stop(target, store, run, run_config, event, end, now)
        if acted is not None:
            store.append_event(acted)
        store.write_state(state)
        return acted or {**event, "result": "waiting for the trainer's checkpoint"}
    if seen != "DELETING":
        # Ended with nothing billing (a slice being recovered, a group someone emptied).
        run.update(stopped=now, end=end)
        state["recreate"] = False
        event.update(end, spend_usd=round(run["spend_usd"], 2))
        event["result"] = "run ended; compute already stopped"
        store.append_event(event)
    store.write_state(state)
    return event


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
    (`reason`, which the supervisor's counts and the end record still tell), not one per
    call."""
    run = state["run"]  # counted as last seen: a cap had better count too much than too little
    _tick(run, run_config, store, bool(run["billing"]), now)
    event = _event(target, state, UNREADABLE, error, now)
    end = None if run["stopped"] else end_of_run(run_config, store, run, now)
    if end is not None:
        event.update(end, spend_usd=round(run["spend_usd"], 2))
    reason = None if end is None else end["reason"]
    if state.get("unreadable") != [error, reason]:
        state["unreadable"] = [error, reason]
        store.append_event(event)
    store.write_state(state)
    return event


def _recover(tpu: Tpu, store: Store, state: Json, event: Json, now: float) -> Json:
    seen, record = str(event["seen"]), True
    missing = seen == NOT_FOUND
    acting = seen in RECOVER[tpu.kind] or (missing and state["recreate"])
    held = acting and not store.armed()
    if held:
        # No marker: Pulumi is creating or destroying the compute; it is left to Pulumi.
        record = not state.get("held")  # reported once
        event["result"] = "held: the stack's compute is being deployed or destroyed"
    elif seen in RECOVER[tpu.kind]:
        event["action"] = "delete"
        try:
            tpu.delete()
            state["recreate"] = True
        except HttpError as err:
            event["result"] = _error(err)
    elif missing and not state["recreate"] and not state.get("found"):
        record, event["result"] = False, "not created yet"
    elif missing and not state["recreate"]:
        record = not state.get("reported_missing")  # reported once
        if record:
            event["result"] = "missing, and not deleted by this supervisor: left alone"
        state["reported_missing"] = True
    elif missing and state["next_allowed"] is not None and now < state["next_allowed"]:
        record, event["result"] = False, "backoff"
    elif missing:
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
    state["held"] = held
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
    records_until = time.monotonic() + RECORDS_BUDGET_S
    for _ in range(WRITE_TRIES):
        # FileExistsError: an overlapping call wrote state.json first; check again from it.
        with contextlib.suppress(FileExistsError):
            store = Store(config["state_uri"], credentials, records_until)
            event = supervise_once(target, store, _now(), config)
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

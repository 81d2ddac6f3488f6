"""trainstack TPU supervisor: brings a preempted Spot or queued TPU slice back.

An HTTP Cloud Functions (gen2) function that Cloud Scheduler calls every few minutes
(`trainstack.components.tpu_supervisor` ships this file as the function's source, with `config.json`
beside it). Each call checks the slice once and waits for nothing; the next call sees the
progress:

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
`BACKOFF_MAX_S`) before the next try, whatever the schedule. Every action is one JSON line
appended to `<state_uri>/events.jsonl` (time, resource, state seen, action, result,
attempt, next allowed time); `<state_uri>/state.json` holds the attempt count and the next
allowed time between calls.

Credentials are the function's service account from the metadata server
(google.auth.compute_engine). `TRAINSTACK_TPU_API_ENDPOINT` overrides the TPU API's
endpoint (tests point it at a local fake; the deployed function never sets it).
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
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
NOT_FOUND = "NOT_FOUND"
RECOVER = {
    "node": frozenset({"PREEMPTED", "TERMINATED"}),
    "queued": frozenset({"SUSPENDED", "FAILED"}),
}
HEALTHY = {"node": "READY", "queued": "ACTIVE"}
BACKOFF_BASE_S = 120
BACKOFF_MAX_S = 3600


def load_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(CONFIG_FILE.read_text())
    return config


def _now() -> float:
    return time.time()


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Store:
    """state.json and events.jsonl under `state_uri` (gs://bucket/prefix)."""

    def __init__(self, state_uri: str, credentials: Any) -> None:
        self.fs = gcsfs.GCSFileSystem(token=credentials)
        self.prefix = state_uri.removeprefix("gs://").rstrip("/")

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


class Tpu:
    """The one node or queued resource this stack owns, through the TPU v2 REST API."""

    def __init__(self, config: dict[str, Any], credentials: Any) -> None:
        options = (
            {"api_endpoint": os.environ[ENDPOINT_ENV]} if os.environ.get(ENDPOINT_ENV) else None
        )
        self.api = discovery.build(
            "tpu", "v2", credentials=credentials, client_options=options, cache_discovery=False
        )
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

    def delete(self) -> None:
        self.collection.delete(name=self.name).execute(num_retries=2)

    def create(self) -> None:
        if self.kind == "node":
            self.collection.create(parent=self.parent, nodeId=self.id, body=self.body).execute()
        else:
            self.collection.create(
                parent=self.parent, queuedResourceId=self.id, body=self.body
            ).execute()


def _error(err: Exception) -> str:
    if isinstance(err, HttpError):
        return f"error: HTTP {err.resp.status}: {err._get_reason()}"
    return f"error: {type(err).__name__}: {err}"


def supervise_once(tpu: Tpu, store: Store, now: float) -> dict[str, Any]:
    """Check the slice once, act at most once; the event (or the no-op answer)."""
    state = store.read_state()
    seen = tpu.state()
    event: dict[str, Any] = {
        "time": _iso(now),
        "resource": tpu.name,
        "seen": seen,
        "action": "none",
        "result": "ok",
        "attempt": state["attempts"],
        "next_allowed": _iso(state["next_allowed"]),
    }
    if seen in RECOVER[tpu.kind]:
        event["action"] = "delete"
        try:
            tpu.delete()
            state["recreate"] = True
        except HttpError as err:
            event["result"] = _error(err)
    elif seen == NOT_FOUND and not state["recreate"]:
        if state.get("reported_missing"):
            return event
        event["result"] = "missing, and not deleted by this supervisor: left alone"
        state["reported_missing"] = True
    elif seen == NOT_FOUND:
        if state["next_allowed"] is not None and now < state["next_allowed"]:
            event["result"] = "backoff"
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
        state = {"attempts": 0, "next_allowed": None, "recreate": False}
    else:
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
        Tpu(config, credentials), Store(config["state_uri"], credentials), _now()
    )
    # Always 200 when the check ran: Cloud Scheduler retries failures, and retries are
    # exactly the tight loop the backoff avoids.
    return json.dumps(event, sort_keys=True), 200, {"Content-Type": "application/json"}

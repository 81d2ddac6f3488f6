"""Pulumi dynamic provider for Cloud TPU queued resources (`tpu.v2` REST).

pulumi-gcp's `gcp.tpu.V2QueuedResource` cannot express Spot or guaranteed tiers, queueing
deadlines, or the node's metadata (startup script), service account, labels, tags and data
disks, so trainstack drives `projects.locations.queuedResources` itself with the bundled
`tpu.v2` discovery document.

    from trainstack.components._tpu_queued_provider import QueuedResource, QueuedResourceProvider

    qr = QueuedResource("exp-42-tpu-qr", project="p", zone="us-central2-b",
                        queued_resource_id="exp-42-tpu-qr", node_id="exp-42-tpu",
                        body=body, wait_timeout_s=3600)
    # outputs: qr.state ("ACTIVE"), qr.worker_ips (worker 0 first), qr.console_url

Behaviour:
- check: `body` is validated against the discovery schema `QueuedResource` (after turning
  the doubles Pulumi delivers back into integers); every problem is a CheckFailure on
  `body`. The body must request exactly the node `node_id` under
  `projects/{project}/locations/{zone}` and carry the node label `trainstack_spec`, a hash
  of the rest of the body.
- create: POST with a fresh `requestId` (a UUID) that every retry of that POST reuses, so
  429/5xx and lost responses are retried without ever queueing twice. Then GET the
  resource until ACTIVE, logging progress (every state change, and every
  `progress_every_s` while it waits), read the node's worker IPs and return. FAILED
  surfaces the API's error (`state.failedData.error`); FAILED, SUSPENDED or a wait past
  `wait_timeout_s` first deletes the request (force), so nothing is left queued or billed
  that Pulumi does not know about. A 409 (the ID exists) adopts the existing request when
  its `trainstack_spec` label matches, e.g. after an interrupted `pulumi up`, replacing it
  if it had failed; a different spec is an error naming the conflict.
- diff: any change to body, project, zone, queued_resource_id or node_id replaces, deleting
  first (the new request reuses the node name and needs the same quota);
  `wait_timeout_s` and `api_endpoint` change in place.
- delete: DELETE with `force=true` (removes the nodes too), then GET until 404, bounded by
  `delete_timeout_s`. A 404 anywhere means already gone.
- read: the live state and worker IPs.

The provider holds only plain settings (it is pickled with dill into the state); API
clients are built inside each method.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import pulumi
import pulumi.dynamic as dyn

from trainstack.components._discovery import normalize_numbers, validate_body
from trainstack.components._google_api import (
    ApiError,
    NotFoundError,
    RetryPolicy,
    build_client,
    execute,
)
from trainstack.components._unknown import contains_unknown, is_unknown

API: Final = "tpu.v2"
SCHEMA: Final = "QueuedResource"
SPEC_LABEL: Final = "trainstack_spec"
"""Node label holding `spec_hash(body)`: how a create recognizes a request it made before."""
REPLACE_KEYS: Final = ("body", "project", "zone", "queued_resource_id", "node_id")
WAITING_STATES: Final = frozenset(
    {"CREATING", "ACCEPTED", "PROVISIONING", "WAITING_FOR_RESOURCES", "STATE_UNSPECIFIED"}
)
"""States on the way to ACTIVE."""
DEAD_STATES: Final = frozenset({"FAILED", "SUSPENDING", "SUSPENDED", "DELETING"})
"""States from which a request never becomes ACTIVE."""
DEFAULT_WAIT_TIMEOUT_S: Final = 3600.0
CONSOLE_URL_VERIFIED: Final = False
"""The console page pattern comes from public code, not a Google doc page."""
_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class QueuedResourceFailedError(Exception):
    """The queued resource can never become ACTIVE (FAILED, SUSPENDED or deleted)."""


class QueuedResourceTimeoutError(Exception):
    """The queued resource was not ACTIVE within `wait_timeout_s`."""


class QueuedResourceConflictError(Exception):
    """A queued resource with the same ID but another spec already exists."""


class QueuedResourceDeleteTimeoutError(Exception):
    """The queued resource was still being deleted after `delete_timeout_s`."""


def spec_hash(body: Mapping[str, Any]) -> str:
    """Hash of `body` without the `trainstack_spec` label: same spec, same hash."""
    canonical = json.loads(json.dumps(body))
    for spec in canonical.get("tpu", {}).get("nodeSpec", []):
        labels = spec.get("node", {}).get("labels")
        if isinstance(labels, dict):
            labels.pop(SPEC_LABEL, None)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def with_spec_label(
    body: dict[str, Any], hashed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`body` with the `trainstack_spec` label set on every node (labels kept sorted): the
    `spec_hash` of `hashed` where given (the body with secrets left out), else of `body`."""
    digest = spec_hash(hashed if hashed is not None else body)
    for spec in body["tpu"]["nodeSpec"]:
        node = spec["node"]
        node["labels"] = dict(sorted({**node.get("labels", {}), SPEC_LABEL: digest}.items()))
    return body


def console_url(project: str, zone: str, node_id: str) -> str:
    """Cloud console page of a TPU node."""
    return (
        f"https://console.cloud.google.com/compute/tpus/details/{zone}/{node_id}?project={project}"
    )


def _log(message: str) -> None:
    # With no engine attached (tests, the CLI) pulumi.log writes to stderr instead.
    pulumi.log.info(message)


def _labels_of(qr: Mapping[str, Any]) -> dict[str, Any]:
    specs = qr.get("tpu", {}).get("nodeSpec") or [{}]
    return dict(specs[0].get("node", {}).get("labels") or {})


def _failure_reason(qr: Mapping[str, Any]) -> str:
    state = qr.get("state") or {}
    error = (state.get("failedData") or {}).get("error") or {}
    if error:
        code = f" (code {error['code']})" if "code" in error else ""
        return f"{error.get('message', 'no message')}{code}"
    initiator = state.get("stateInitiator")
    return f"initiated by {initiator}" if initiator else "the API gave no reason"


class QueuedResourceProvider(dyn.ResourceProvider):
    """Create/wait/delete TPU queued resources; see the module docstring for the behaviour."""

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        poll_interval_s: float = 30.0,
        progress_every_s: float = 300.0,
        delete_timeout_s: float = 1800.0,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.poll_interval_s = poll_interval_s
        self.progress_every_s = progress_every_s
        self.delete_timeout_s = delete_timeout_s

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _client(props: Mapping[str, Any]) -> Any:
        return build_client(API, api_endpoint=props.get("api_endpoint")).projects().locations()

    @staticmethod
    def _names(props: Mapping[str, Any]) -> tuple[str, str, str]:
        parent = f"projects/{props['project']}/locations/{props['zone']}"
        return (
            parent,
            f"{parent}/queuedResources/{props['queued_resource_id']}",
            f"{parent}/nodes/{props['node_id']}",
        )

    def _get(self, client: Any, name: str) -> dict[str, Any]:
        return dict(execute(client.queuedResources().get(name=name), self.retry))

    def _worker_ips(self, client: Any, node_name: str) -> list[str]:
        node = execute(client.nodes().get(name=node_name), self.retry)
        return [str(e["ipAddress"]) for e in node.get("networkEndpoints") or []]

    def _outs(self, props: Mapping[str, Any], state: str, worker_ips: list[str]) -> dict[str, Any]:
        _, name, _ = self._names(props)
        return {
            **props,
            "queued_resource_name": name,
            "state": state,
            "worker_ips": worker_ips,
            "console_url": console_url(props["project"], props["zone"], props["node_id"]),
        }

    # -- provider methods ------------------------------------------------------------------

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        # In a preview any input may be unknown (trainstack.components._unknown): what is known is checked.
        failures: list[dyn.CheckFailure] = []
        for key in ("project", "zone"):
            value = news.get(key)
            if not is_unknown(value) and (not isinstance(value, str) or not value):
                failures.append(dyn.CheckFailure(key, "expected a non-empty string"))
        for key in ("queued_resource_id", "node_id"):
            value = news.get(key)
            if not is_unknown(value) and (not isinstance(value, str) or not _ID.match(value)):
                failures.append(
                    dyn.CheckFailure(
                        key,
                        f"{value!r} is not a valid ID (a lowercase letter, then up to 62 of "
                        "a-z, 0-9 and '-', not ending with '-')",
                    )
                )
        timeout = news.get("wait_timeout_s")
        if (
            timeout is not None
            and not is_unknown(timeout)
            and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0)
        ):
            failures.append(dyn.CheckFailure("wait_timeout_s", f"expected > 0, got {timeout!r}"))
        body = news.get("body")
        if not is_unknown(body):
            body = news["body"] = normalize_numbers(API, SCHEMA, body)
            failures += [
                dyn.CheckFailure("body", error)
                for error in validate_body(API, SCHEMA, body, allow_unknowns=True)
            ]
            if not failures:
                failures += self._check_node_spec(news)
        return dyn.CheckResult(news, failures)

    def _check_node_spec(self, news: Mapping[str, Any]) -> list[dyn.CheckFailure]:
        tpu = news["body"].get("tpu", {})
        specs = tpu if is_unknown(tpu) else tpu.get("nodeSpec") or []
        if is_unknown(specs):
            return []
        if len(specs) != 1:
            return [dyn.CheckFailure("body", f"tpu.nodeSpec: expected 1 node, got {len(specs)}")]
        spec = specs[0]
        if is_unknown(spec):
            return []
        failures: list[dyn.CheckFailure] = []
        parent = f"projects/{news['project']}/locations/{news['zone']}"
        known_parent = not contains_unknown([news["project"], news["zone"]])
        if known_parent and not is_unknown(spec.get("parent")) and spec.get("parent") != parent:
            failures.append(
                dyn.CheckFailure(
                    "body",
                    f"tpu.nodeSpec[0].parent: expected {parent!r}, got {spec.get('parent')!r}",
                )
            )
        node_ids = [spec.get("nodeId"), news.get("node_id")]
        if not contains_unknown(node_ids) and node_ids[0] != node_ids[1]:
            failures.append(
                dyn.CheckFailure(
                    "body",
                    f"tpu.nodeSpec[0].nodeId: expected {news.get('node_id')!r} (node_id), "
                    f"got {spec.get('nodeId')!r}",
                )
            )
        node = spec.get("node", {})
        labels = node if is_unknown(node) else node.get("labels")
        if not is_unknown(labels) and (not isinstance(labels, dict) or SPEC_LABEL not in labels):
            failures.append(
                dyn.CheckFailure("body", f"tpu.nodeSpec[0].node.labels.{SPEC_LABEL} is required")
            )
        return failures

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        # check() normalized already; again here because check's output is not guaranteed
        # to be what create receives across engine versions.
        props = {**props, "body": normalize_numbers(API, SCHEMA, props["body"])}
        client = self._client(props)
        parent, name, node_name = self._names(props)
        ours = _labels_of(props["body"]).get(SPEC_LABEL)
        qr = self._submit_or_adopt(client, props, parent, name, ours)
        state = self._wait_active(client, name, props, qr)
        outs = self._outs(props, state, self._worker_ips(client, node_name))
        _log(f"{name} is ACTIVE; workers {', '.join(outs['worker_ips'])}")
        return dyn.CreateResult(name, outs)

    def _submit(self, client: Any, props: Mapping[str, Any], parent: str) -> None:
        # One requestId for every retry of this POST: the API answers a repeated id with
        # the original operation, so a retried create never queues twice.
        request = client.queuedResources().create(
            parent=parent,
            queuedResourceId=props["queued_resource_id"],
            requestId=str(uuid.uuid4()),
            body=props["body"],
        )
        execute(request, self.retry)

    def _submit_or_adopt(
        self, client: Any, props: Mapping[str, Any], parent: str, name: str, ours: str | None
    ) -> dict[str, Any] | None:
        """Submit the request; on 409 adopt ours (or replace it if dead). Returns the
        adopted resource, or None when a new one was submitted."""
        try:
            self._submit(client, props, parent)
            _log(f"queued {name}")
            return None
        except ApiError as exc:
            if exc.status != 409:
                raise
        existing = self._get(client, name)
        state = (existing.get("state") or {}).get("state", "STATE_UNSPECIFIED")
        if _labels_of(existing).get(SPEC_LABEL) != ours:
            raise QueuedResourceConflictError(
                f"{name} already exists ({state}) with a different spec (label {SPEC_LABEL} "
                f"{_labels_of(existing).get(SPEC_LABEL)!r}, this program's {ours!r}); it was "
                "not created by this stack's current config. Delete it (gcloud compute tpus "
                f"queued-resources delete {props['queued_resource_id']} --zone "
                f"{props['zone']} --force) or choose another deployment name"
            )
        if state in DEAD_STATES:
            _log(f"{name} exists from an earlier attempt but is {state}; replacing it")
            self._delete_and_wait(client, name)
            self._submit(client, props, parent)
            return None
        _log(f"adopting {name} ({state}), queued by an earlier run with the same spec")
        return existing

    def _wait_active(
        self,
        client: Any,
        name: str,
        props: Mapping[str, Any],
        qr: dict[str, Any] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> str:
        timeout = float(props.get("wait_timeout_s") or DEFAULT_WAIT_TIMEOUT_S)
        started = clock()
        last_state, last_report = "", started
        while True:
            if qr is None:
                qr = self._get(client, name)
            state = str((qr.get("state") or {}).get("state", "STATE_UNSPECIFIED"))
            waited = clock() - started
            if state == "ACTIVE":
                return state
            if state in DEAD_STATES:
                reason = _failure_reason(qr)
                self._cleanup(client, name, state)
                raise QueuedResourceFailedError(
                    f"{name} is {state}: {reason}. It was deleted, so nothing is left "
                    "queued; fix the cause (quota, capacity, reservation) and run `pulumi up` "
                    "again"
                )
            if state != last_state:
                _log(f"{name}: {state} after {waited:.0f}s")
                last_state, last_report = state, clock()
            elif clock() - last_report >= self.progress_every_s:
                _log(f"{name}: still {state} after {waited:.0f}s (timeout {timeout:.0f}s)")
                last_report = clock()
            if waited >= timeout:
                self._cleanup(client, name, state)
                raise QueuedResourceTimeoutError(
                    f"{name} was still {state} after {timeout:.0f}s (wait_timeout_s). It was "
                    "deleted, so nothing is left queued; raise wait_timeout_s (or set a "
                    "queueing deadline with valid_until_s) and run `pulumi up` again"
                )
            qr = None
            time.sleep(self.poll_interval_s)

    def _cleanup(self, client: Any, name: str, state: str) -> None:
        try:
            self._delete_and_wait(client, name)
        except (ApiError, QueuedResourceDeleteTimeoutError) as exc:
            # The original failure is the news; the failed cleanup must not hide it.
            _log(f"could not delete {name} ({state}) after it failed: {exc}")

    def _delete_and_wait(
        self, client: Any, name: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        try:
            execute(
                client.queuedResources().delete(name=name, force=True, requestId=str(uuid.uuid4())),
                self.retry,
            )
        except NotFoundError:
            _log(f"{name} is already gone")
            return
        deadline = clock() + self.delete_timeout_s
        while True:
            try:
                qr = self._get(client, name)
            except NotFoundError:
                _log(f"{name} deleted")
                return
            state = (qr.get("state") or {}).get("state", "")
            if clock() >= deadline:
                raise QueuedResourceDeleteTimeoutError(
                    f"{name} still {state} after {self.delete_timeout_s:.0f}s; it was asked "
                    "to delete (force). Run `pulumi destroy` again to finish deleting it."
                )
            time.sleep(self.poll_interval_s)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [key for key in REPLACE_KEYS if olds.get(key) != news.get(key)]
        in_place = any(olds.get(k) != news.get(k) for k in ("wait_timeout_s", "api_endpoint"))
        return dyn.DiffResult(
            changes=bool(replaces) or in_place,
            replaces=replaces,
            stables=[],
            delete_before_replace=True,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only wait_timeout_s and api_endpoint reach here (all else replaces): no API call.
        keep: dict[str, Any] = {
            k: olds[k]
            for k in ("queued_resource_name", "state", "worker_ips", "console_url")
            if k in olds
        }
        return dyn.UpdateResult({**news, **keep})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        self._delete_and_wait(self._client(props), props.get("queued_resource_name") or id_)

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        client = self._client(props)
        _, name, node_name = self._names(props)
        try:
            qr = self._get(client, props.get("queued_resource_name") or id_ or name)
        except NotFoundError:
            return dyn.ReadResult(None, {})
        state = str((qr.get("state") or {}).get("state", "STATE_UNSPECIFIED"))
        try:
            ips = self._worker_ips(client, node_name) if state == "ACTIVE" else []
        except NotFoundError:
            ips = []
        return dyn.ReadResult(id_, self._outs(props, state, ips))


class QueuedResource(dyn.Resource, module="tpu", name="QueuedResource"):
    """A Cloud TPU queued resource (type `pulumi-python:dynamic/tpu:QueuedResource`)."""

    queued_resource_name: pulumi.Output[str]
    """`projects/{p}/locations/{zone}/queuedResources/{id}`."""
    state: pulumi.Output[str]
    """`ACTIVE` once created (create waits for it)."""
    worker_ips: pulumi.Output[list[str]]
    """Internal IPs of the node's workers, worker 0 first."""
    console_url: pulumi.Output[str]
    body: pulumi.Output[dict[str, Any]]

    def __init__(
        self,
        name: str,
        *,
        project: pulumi.Input[str],
        zone: pulumi.Input[str],
        queued_resource_id: pulumi.Input[str],
        node_id: pulumi.Input[str],
        body: pulumi.Input[Mapping[str, Any]],
        wait_timeout_s: pulumi.Input[float] | None = None,
        api_endpoint: pulumi.Input[str] | None = None,
        provider: QueuedResourceProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "project": project,
            "zone": zone,
            "queued_resource_id": queued_resource_id,
            "node_id": node_id,
            "body": body,
            "wait_timeout_s": wait_timeout_s,
            "api_endpoint": api_endpoint,
            "queued_resource_name": None,
            "state": None,
            "worker_ips": None,
            "console_url": None,
        }
        super().__init__(provider or QueuedResourceProvider(), name, props, opts)

"""Pulumi dynamic provider for Vertex AI customJobs and hyperparameterTuningJobs.

pulumi-gcp has no resource for either, so trainstack drives the REST API itself with the
bundled `aiplatform.v1` discovery document.

    from trainstack.components._vertex_provider import CustomJob, VertexJobProvider

    job = CustomJob("exp-42-job", project="p", region="us-central1", body=body,
                    provider=VertexJobProvider())
    # outputs: job.job_name, job.state, job.console_url

Behaviour:
- check: the body is validated against the discovery schema (`CustomJob` or
  `HyperparameterTuningJob`); every error is a CheckFailure on `body`.
- create: POST and return at once (training runs for days; `pulumi up` never waits). The
  body carries the label `trainstack_request_id`, a hash of the rest of the body. Before
  submitting, and before any resend after a lost response or a 5xx, the provider lists
  jobs with that label and adopts a live one, so a create that failed half-way (POST
  accepted, response lost; or a previous `up` killed after the POST) never leaks or
  duplicates a job. Finished or cancelling jobs are never adopted.
- diff: any change to body, project, region or kind replaces (jobs are immutable), deleting
  the old job first: a new job beside the old one would need twice the quota at submit time
  (429) and both would write one checkpoint folder. `api_endpoint` changes update in place.
- delete: `:cancel`, poll GET until a terminal state (bounded by `delete_timeout_s`,
  progress via `pulumi.log`), then DELETE. A 404 anywhere means already gone.
- read: the live job (what `trainstack status` shows via `job_status`).

The provider holds only plain settings (it is pickled with dill into the state); clients
are built inside each method.
"""

from __future__ import annotations

import time
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
from trainstack.components._unknown import is_unknown

API: Final = "aiplatform.v1"
REQUEST_ID_LABEL: Final = "trainstack_request_id"
KINDS: Final[dict[str, str]] = {
    "customJobs": "CustomJob",
    "hyperparameterTuningJobs": "HyperparameterTuningJob",
}
"""REST collection -> discovery schema."""
TERMINAL_STATES: Final = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)
ADOPTABLE_STATES: Final = frozenset(
    {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_PAUSED"}
)
"""States of a job a create may adopt: alive and not on its way out."""
REPLACE_KEYS: Final = ("body", "project", "region", "kind")


class JobDeleteTimeoutError(Exception):
    """The job did not reach a terminal state within the delete timeout."""


def console_url(job_name: str) -> str:
    """Cloud console page for a job resource name (python-aiplatform's dashboard URL)."""
    parts = job_name.split("/")
    project, region, job_id = parts[1], parts[3], parts[5]
    return (
        f"https://console.cloud.google.com/ai/platform/locations/{region}/training/{job_id}"
        f"?project={project}"
    )


def _log(message: str) -> None:
    # With no engine attached (tests, the CLI) pulumi.log writes to stderr instead.
    pulumi.log.info(message)


def _collection(client: Any, kind: str) -> Any:
    locations = client.projects().locations()
    return locations.customJobs() if kind == "customJobs" else locations.hyperparameterTuningJobs()


class VertexJobProvider(dyn.ResourceProvider):
    """Create/cancel/delete Vertex jobs; see the module docstring for the behaviour."""

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        poll_interval_s: float = 15.0,
        delete_timeout_s: float = 1800.0,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.poll_interval_s = poll_interval_s
        self.delete_timeout_s = delete_timeout_s

    # -- helpers -------------------------------------------------------------------------

    def _jobs(self, props: Mapping[str, Any]) -> Any:
        client = build_client(API, location=props["region"], api_endpoint=props.get("api_endpoint"))
        return _collection(client, props["kind"])

    def _find_submitted(self, jobs: Any, parent: str, request_id: str) -> dict[str, Any] | None:
        """A live job carrying our request id, if an earlier attempt created one."""
        response = execute(
            jobs.list(parent=parent, filter=f'labels.{REQUEST_ID_LABEL}="{request_id}"'),
            self.retry,
        )
        items = response.get("customJobs") or response.get("hyperparameterTuningJobs") or []
        for job in items:
            # Checked here too: the filter is the server's, the guarantee is ours.
            if job.get("labels", {}).get(REQUEST_ID_LABEL) == request_id and (
                job.get("state") in ADOPTABLE_STATES
            ):
                return dict(job)
        return None

    @staticmethod
    def _outs(props: Mapping[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
        name = str(job["name"])
        return {
            **props,
            "job_name": name,
            "state": job.get("state", "JOB_STATE_UNSPECIFIED"),
            "console_url": console_url(name),
        }

    # -- provider methods ------------------------------------------------------------------

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures: list[dyn.CheckFailure] = []
        # In a preview any input may be unknown (trainstack.components._unknown): what is known is checked.
        kind = news.get("kind")
        if not is_unknown(kind) and kind not in KINDS:
            failures.append(
                dyn.CheckFailure("kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
            )
        for key in ("project", "region"):
            value = news.get(key)
            if not is_unknown(value) and (not isinstance(value, str) or not value):
                failures.append(dyn.CheckFailure(key, "expected a non-empty string"))
        body = news.get("body")
        if kind in KINDS and not is_unknown(body):
            body = news["body"] = normalize_numbers(API, KINDS[kind], body)
            for error in validate_body(API, KINDS[kind], body, allow_unknowns=True):
                failures.append(dyn.CheckFailure("body", error))
            labels = body.get("labels", {}) if isinstance(body, dict) else {}
            if not is_unknown(labels) and REQUEST_ID_LABEL not in labels:
                failures.append(dyn.CheckFailure("body", f"labels.{REQUEST_ID_LABEL} is required"))
        return dyn.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        # check() normalized already; again here because check's output is not guaranteed
        # to be what create receives across engine versions.
        props = {**props, "body": normalize_numbers(API, KINDS[props["kind"]], props["body"])}
        jobs = self._jobs(props)
        parent = f"projects/{props['project']}/locations/{props['region']}"
        request_id = props["body"]["labels"][REQUEST_ID_LABEL]

        def lookup() -> dict[str, Any] | None:
            return self._find_submitted(jobs, parent, request_id)

        # A previous `up` may have been killed after its POST: adopt rather than duplicate.
        job = lookup()
        if job is not None:
            _log(f"adopting {job['name']} (already submitted with request id {request_id})")
        else:
            job = execute(
                jobs.create(parent=parent, body=props["body"]),
                self.retry,
                idempotent=False,
                before_retry=lookup,
            )
        outs = self._outs(props, job)
        return dyn.CreateResult(outs["job_name"], outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [key for key in REPLACE_KEYS if olds.get(key) != news.get(key)]
        changed = bool(replaces) or olds.get("api_endpoint") != news.get("api_endpoint")
        return dyn.DiffResult(
            changes=changed, replaces=replaces, stables=[], delete_before_replace=True
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only api_endpoint can reach here (everything else replaces): no API call needed.
        keep: dict[str, Any] = {
            k: olds[k] for k in ("job_name", "state", "console_url") if k in olds
        }
        return dyn.UpdateResult({**news, **keep})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        jobs = self._jobs(props)
        name = props.get("job_name") or id_
        try:
            try:
                execute(jobs.cancel(name=name, body={}), self.retry)
            except ApiError as exc:
                # 400 FAILED_PRECONDITION: already terminal, nothing to cancel.
                if exc.status != 400:
                    raise
            state = self._wait_terminal(jobs, name)
            _log(f"{name} is {state}; deleting")
            execute(jobs.delete(name=name), self.retry)
        except NotFoundError:
            _log(f"{name} is already gone")

    def _wait_terminal(
        self, jobs: Any, name: str, clock: Callable[[], float] = time.monotonic
    ) -> str:
        deadline = clock() + self.delete_timeout_s
        last = ""
        while True:
            state = str(execute(jobs.get(name=name), self.retry).get("state", ""))
            if state in TERMINAL_STATES:
                return state
            if state != last:
                _log(f"waiting for {name} to stop: {state}")
                last = state
            if clock() >= deadline:
                raise JobDeleteTimeoutError(
                    f"{name} still {state} after {self.delete_timeout_s:.0f}s; it was asked "
                    "to cancel. Run `pulumi destroy` again to finish deleting it."
                )
            time.sleep(self.poll_interval_s)

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        try:
            job = execute(self._jobs(props).get(name=props.get("job_name") or id_), self.retry)
        except NotFoundError:
            return dyn.ReadResult(None, {})
        return dyn.ReadResult(id_, self._outs(props, job))


class CustomJob(dyn.Resource, module="vertex", name="CustomJob"):
    """A Vertex AI customJob (type `pulumi-python:dynamic/vertex:CustomJob`)."""

    job_name: pulumi.Output[str]
    state: pulumi.Output[str]
    console_url: pulumi.Output[str]
    body: pulumi.Output[dict[str, Any]]

    _KIND = "customJobs"

    def __init__(
        self,
        name: str,
        *,
        project: pulumi.Input[str],
        region: pulumi.Input[str],
        body: pulumi.Input[Mapping[str, Any]],
        api_endpoint: pulumi.Input[str] | None = None,
        provider: VertexJobProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "project": project,
            "region": region,
            "kind": self._KIND,
            "body": body,
            "api_endpoint": api_endpoint,
            "job_name": None,
            "state": None,
            "console_url": None,
        }
        super().__init__(provider or VertexJobProvider(), name, props, opts)


class HyperparameterTuningJob(CustomJob, module="vertex", name="HyperparameterTuningJob"):
    """A Vertex AI hyperparameterTuningJob (`pulumi-python:dynamic/vertex:HyperparameterTuningJob`)."""

    _KIND = "hyperparameterTuningJobs"


def job_status(
    project: str, region: str, job_name: str, api_endpoint: str | None = None
) -> dict[str, Any]:
    """Live state of a job for `trainstack status`: name, state, times, error, console URL."""
    kind = "hyperparameterTuningJobs" if "/hyperparameterTuningJobs/" in job_name else "customJobs"
    client = build_client(API, location=region, api_endpoint=api_endpoint)
    try:
        job = execute(_collection(client, kind).get(name=job_name), RetryPolicy(max_attempts=3))
    except NotFoundError:
        return {"job_name": job_name, "state": "NOT_FOUND", "project": project, "region": region}
    status: dict[str, Any] = {
        "job_name": job["name"],
        "display_name": job.get("displayName"),
        "state": job.get("state"),
        "create_time": job.get("createTime"),
        "start_time": job.get("startTime"),
        "end_time": job.get("endTime"),
        "console_url": console_url(job["name"]),
    }
    if job.get("error"):
        status["error"] = job["error"]
    return status

"""Google REST clients built from the bundled discovery documents, with bounded retries.

Dynamic providers are pickled (dill) into the Pulumi state and run in another process,
so nothing here is cached across calls: build a client inside each provider method.

    from trainstack.components._google_api import RetryPolicy, build_client, execute

    jobs = build_client("aiplatform.v1", location="us-central1").projects().locations()
    job = execute(jobs.customJobs().get(name=name), RetryPolicy())

`api_endpoint` overrides the endpoint (tests point it at a local fake server). A plain
`http://` endpoint gets anonymous credentials, because an OAuth token must never travel
unencrypted; anything else uses Application Default Credentials.

Retries: 429, 500, 502, 503 and 504 responses and connection errors are retried with
exponential backoff and jitter, bounded by `RetryPolicy.max_attempts` and
`RetryPolicy.deadline_s`. A non-idempotent request (a create `POST`) is retried only when
the caller supplies `before_retry`, a lookup that returns the resource if an earlier attempt
did reach the server after all; that is how a create never submits the same job twice.

httplib2 silently re-sends a request when the connection drops before the response (its
stale keep-alive heuristic), POSTs included. Clients built here refuse that for POST and
raise instead, so the caller, not the transport, decides whether resending is safe.
"""

from __future__ import annotations

import http.client
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import google.auth
import google_auth_httplib2
import httplib2
from google.auth.credentials import AnonymousCredentials, Credentials
from googleapiclient import discovery, errors

from trainstack.components._discovery import document_text, load_document

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
RETRY_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})
HTTP_TIMEOUT_S = 60.0

T = TypeVar("T")


class ApiError(Exception):
    """A Google API call failed for good (non-retryable status or retries exhausted)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class NotFoundError(ApiError):
    """The API answered 404: the resource does not exist (any more)."""


class AmbiguousRequestError(ApiError):
    """The connection failed after the request may have reached the server.

    Whether the request took effect is unknown; the caller must look before resending.
    """


class ResponseLostError(Exception):
    """Raised by the transport instead of re-sending a POST whose response was lost.

    Deliberately not an OSError or HTTPException: httplib2 retries those.
    """


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds for `execute`'s retries (plain data: safe to pickle into provider state)."""

    max_attempts: int = 6
    """Total attempts including the first."""
    initial_delay_s: float = 1.0
    max_delay_s: float = 32.0
    multiplier: float = 2.0
    deadline_s: float = 300.0
    """No retry starts after this many seconds since the first attempt."""

    def delay(self, retry: int) -> float:
        """Sleep before retry number `retry` (1-based): full jitter over the exponential."""
        ceiling = min(self.max_delay_s, self.initial_delay_s * self.multiplier ** (retry - 1))
        # Jitter in [ceiling/2, ceiling]: spreads retries of many clients without ever
        # collapsing to zero, which would turn backoff into a hot loop.
        return ceiling / 2 + random.random() * ceiling / 2


class _NoResendConnection:
    """Wraps an httplib2 connection so a lost POST response surfaces as ResponseLostError."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._conn.request(*args, **kwargs)
        except http.client.HTTPException as exc:
            self._conn.close()
            raise ResponseLostError(f"connection failed while sending: {exc!r}") from exc

    def getresponse(self) -> Any:
        try:
            return self._conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()
            raise ResponseLostError(f"connection failed before the response: {exc!r}") from exc


class _NoResendHttp(httplib2.Http):
    def _conn_request(
        self, conn: Any, request_uri: str, method: str, body: Any, headers: Any
    ) -> Any:
        if method == "POST":
            conn = _NoResendConnection(conn)
        return super()._conn_request(conn, request_uri, method, body, headers)


def default_endpoint(api: str, location: str | None) -> str:
    """The API's locational endpoint for `location` if it has one, else its root URL."""
    document = load_document(api)
    for endpoint in document.get("endpoints", []):
        if location is not None and endpoint.get("location") == location:
            return str(endpoint["endpointUrl"])
    return str(document["rootUrl"])


def build_client(api: str, *, location: str | None = None, api_endpoint: str | None = None) -> Any:
    """A discovery client for `api` from the bundled document (no network fetch)."""
    endpoint = api_endpoint or default_endpoint(api, location)
    if not endpoint.endswith("/"):
        endpoint += "/"
    credentials: Credentials
    if endpoint.startswith("http://"):
        credentials = AnonymousCredentials()
    else:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    transport = _NoResendHttp(timeout=HTTP_TIMEOUT_S)
    authorized = google_auth_httplib2.AuthorizedHttp(credentials, http=transport)
    return discovery.build_from_document(
        document_text(api),
        http=authorized,
        client_options={"api_endpoint": endpoint},
    )


def _status_message(exc: errors.HttpError) -> str:
    # Google errors are {"error": {"code", "message", "status"}}; keep the raw text otherwise.
    text = exc.content.decode("utf-8", "replace") if isinstance(exc.content, bytes) else ""
    try:
        error = json.loads(text)["error"]
        detail = f"{error.get('status', '')} {error.get('message', '')}".strip()
    except (ValueError, KeyError, TypeError, AttributeError):
        detail = text[:500]
    return f"HTTP {exc.resp.status}: {detail}" if detail else f"HTTP {exc.resp.status}"


def execute(
    request: Any,
    policy: RetryPolicy | None = None,
    *,
    idempotent: bool = True,
    before_retry: Callable[[], T | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Run a googleapiclient `HttpRequest` with retries; return its parsed JSON response.

    Raises NotFoundError on 404, AmbiguousRequestError when a non-idempotent request lost
    its connection and no `before_retry` lookup was given, and ApiError otherwise.
    `before_retry`, when given, runs before every retry; a non-None result is returned as
    the outcome instead of resending (the earlier attempt did take effect).
    """
    policy = policy or RetryPolicy()
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return request.execute(num_retries=0)
        except errors.HttpError as exc:
            status = int(exc.resp.status)
            message = _status_message(exc)
            if status == 404:
                raise NotFoundError(status, message) from exc
            if status not in RETRY_STATUSES:
                raise ApiError(status, message) from exc
            # Only a 429 proves a non-idempotent request was not acted on; a 5xx may
            # follow a write that happened, so resending needs the caller's lookup.
            if not idempotent and before_retry is None and status != 429:
                raise ApiError(status, message) from exc
            failure: ApiError = ApiError(status, message)
        except (
            ResponseLostError,
            OSError,
            http.client.HTTPException,
            httplib2.HttpLib2Error,
        ) as exc:
            failure = AmbiguousRequestError(None, f"{request.method} {request.uri}: {exc!r}")
            if not idempotent and before_retry is None:
                raise failure from exc
        elapsed = time.monotonic() - started
        if attempt >= policy.max_attempts or elapsed >= policy.deadline_s:
            raise ApiError(
                failure.status,
                f"{failure.message} (gave up after {attempt} attempts in {elapsed:.1f}s)",
            )
        sleep(min(policy.delay(attempt), max(0.0, policy.deadline_s - elapsed)))
        if before_retry is not None:
            found = before_retry()
            if found is not None:
                return found

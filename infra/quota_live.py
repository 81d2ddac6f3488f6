"""Live quota headroom for `trainstack quota --live`: limits, usage and what is left.

Limits come from the Cloud Quotas API (`quotaInfos.get`), the same data the QuotaGuard
invoke reads during `pulumi up`. An id the API answers 404 for is `NOT_FOUND` (a failure,
like a shortfall); a refused read (403) is `unknown`. Current usage is only published for Compute Engine quotas
(`regions.get` / `projects.get` list `{metric, limit, usage}`); for TPU API and Vertex
quotas usage is reported as unknown rather than guessed.

Credentials are Application Default Credentials (`gcloud auth application-default login`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from components.quota_guard import match_limit

CLOUDQUOTAS_ENDPOINT = "https://cloudquotas.googleapis.com"
COMPUTE_ENDPOINT = "https://compute.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT_S = 30


FAILED_STATUSES = ("SHORT", "NOT_FOUND")
"""Statuses that make `trainstack quota --live` exit 1."""


class LiveQuotaError(RuntimeError):
    """Live quota could not be read at all (no credentials, no access)."""


@dataclass(frozen=True)
class LiveQuota:
    """One need with what the project has now."""

    service: str
    quota_id: str
    dimensions: dict[str, str]
    needed: int
    limit: int | None
    usage: int | None
    headroom: int | None
    status: str
    """`ok`, `SHORT` (need exceeds what is left), `NOT_FOUND` (the API does not know the
    quota id: HTTP 404), or `unknown` (limit unreadable, e.g. HTTP 403)."""
    detail: str


def _session(endpoint_override: str | None) -> requests.Session:
    if endpoint_override is not None:
        # A local test server: no Google credentials involved.
        return requests.Session()
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
    except DefaultCredentialsError as exc:
        raise LiveQuotaError(
            "--live needs Application Default Credentials: run "
            "`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
        ) from exc
    return AuthorizedSession(credentials)


def compute_metric(quota_id: str) -> str | None:
    """The Compute Engine usage metric behind a Cloud Quotas id
    (`NVIDIA-A100-GPUS-per-project-region` -> `NVIDIA_A100_GPUS`)."""
    for suffix in ("-per-project-region", "-per-project"):
        if quota_id.endswith(suffix):
            return quota_id[: -len(suffix)].replace("-", "_")
    return None


def _get(session: requests.Session, url: str) -> dict[str, Any] | str:
    """JSON body, or an error string naming the status."""
    try:
        response = session.get(url, timeout=TIMEOUT_S)
    except requests.RequestException as exc:
        return f"request failed: {exc}"
    if response.status_code != 200:
        try:
            message = response.json().get("error", {}).get("message", response.text)
        except ValueError:
            message = response.text
        return f"HTTP {response.status_code}: {message.strip()[:200]}"
    body = response.json()
    return body if isinstance(body, dict) else f"unexpected response: {body!r}"[:200]


def _usage_table(
    session: requests.Session, compute: str, project: str, needs: Sequence[Mapping[str, Any]]
) -> dict[tuple[str, str], tuple[int, int]]:
    """{(scope, metric): (limit, usage)} for the Compute scopes the needs touch."""
    scopes = {
        need["dimensions"].get("region", "global")
        for need in needs
        if need["service"] == "compute.googleapis.com"
    }
    table: dict[tuple[str, str], tuple[int, int]] = {}
    for scope in sorted(scopes):
        path = f"regions/{scope}" if scope != "global" else ""
        body = _get(session, f"{compute}/compute/v1/projects/{project}/{path}".rstrip("/"))
        if isinstance(body, str):
            continue  # usage stays unknown; the limit still comes from Cloud Quotas
        for q in body.get("quotas", []):
            table[scope, q["metric"]] = (int(q["limit"]), int(q["usage"]))
    return table


def read_live_quota(
    project: str, needs: Sequence[Mapping[str, Any]], *, endpoint: str | None = None
) -> list[LiveQuota]:
    """Limits, usage and headroom for each need. `endpoint` replaces both Google endpoints
    (tests point it at a local server)."""
    session = _session(endpoint)
    quotas = endpoint or CLOUDQUOTAS_ENDPOINT
    usage = _usage_table(session, endpoint or COMPUTE_ENDPOINT, project, needs)
    results = []
    for need in needs:
        dims = dict(need["dimensions"])
        url = (
            f"{quotas}/v1/projects/{project}/locations/global/services/{need['service']}"
            f"/quotaInfos/{need['quota_id']}"
        )
        body = _get(session, url)
        limit = used = headroom = None
        if isinstance(body, str):
            # 404: the id is wrong, which no permission fixes; anything else (403) may pass
            # for another caller.
            status = "NOT_FOUND" if body.startswith("HTTP 404") else "unknown"
            detail = body
        else:
            entries = [
                (dict(e.get("dimensions") or {}), (e.get("details") or {}).get("value"))
                for e in body.get("dimensionsInfos", [])
            ]
            limit = match_limit(entries, dims)
            metric = compute_metric(need["quota_id"])
            scope = dims.get("region", "global")
            if need["service"] == "compute.googleapis.com" and metric is not None:
                used = usage.get((scope, metric), (0, None))[1]
            if limit is None:
                status, detail = "unknown", "no limit is reported for these dimensions"
            elif limit == -1:
                status, detail = "ok", "unlimited"
            else:
                headroom = limit - (used or 0) - need["needed"]
                status = "ok" if headroom >= 0 else "SHORT"
                detail = "usage unknown for this service" if used is None else ""
        results.append(
            LiveQuota(
                service=need["service"],
                quota_id=need["quota_id"],
                dimensions=dims,
                needed=need["needed"],
                limit=limit,
                usage=used,
                headroom=headroom,
                status=status,
                detail=detail,
            )
        )
    return results

"""Live quota headroom for `trainstack quota --live`: limits, usage and what is left.

Limits come from the Cloud Quotas API (`quotaInfos.get`), the same data the QuotaGuard
invoke reads during `pulumi up`. An id the API answers 404 for is `NOT_FOUND` (a failure,
like a shortfall); a refused read (403) is `unknown`. Current usage is only published for Compute Engine quotas
(`regions.get` / `projects.get` list `{metric, limit, usage}`, read by
`trainstack.components.quota_guard.compute_usage`, which QuotaGuard uses too); for TPU API and Vertex
quotas usage is reported as unknown rather than guessed.

The statuses follow QuotaGuard's rule (`trainstack.components.quota_guard`, module docstring): usage is
the whole project's and includes a deployed stack's own machines, so only a need above the
limit is `SHORT` (exit 1, with `request`: the need, the total limit a quota preference
asks for); a need above what is left but within the limit is `TIGHT`, which says the usage
may be the stack's own and does not fail.

Credentials are Application Default Credentials (`gcloud auth application-default login`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from trainstack.components.quota_guard import (
    COMPUTE_ENDPOINT,
    compute_metric,
    compute_usage,
    http_get,
    match_limit,
    usage_of,
)

CLOUDQUOTAS_ENDPOINT = "https://cloudquotas.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT_S = 30


FAILED_STATUSES = ("SHORT", "NOT_FOUND")
"""Statuses that make `trainstack quota --live` exit 1 (`TIGHT` does not: QuotaGuard deploys
it, with a warning)."""


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
    """`ok`, `SHORT` (need exceeds the limit), `TIGHT` (need within the limit but above what
    the project's usage leaves, which may be this stack's own machines), `NOT_FOUND` (the
    API does not know the quota id: HTTP 404), or `unknown` (limit unreadable, e.g. 403)."""
    detail: str
    request: int | None = None
    """For SHORT: the total limit to ask for, the need (`QuotaCheck.preferred_value`; a quota
    preference's `preferredValue` is the new limit, not an increment)."""


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


def read_live_quota(
    project: str, needs: Sequence[Mapping[str, Any]], *, endpoint: str | None = None
) -> list[LiveQuota]:
    """Limits, usage and headroom for each need. `endpoint` replaces both Google endpoints
    (tests point it at a local server)."""
    session = _session(endpoint)
    quotas = endpoint or CLOUDQUOTAS_ENDPOINT
    get = http_get(session)
    usage = compute_usage(get, endpoint or COMPUTE_ENDPOINT, project, needs)  # type: ignore[arg-type]
    results = []
    for need in needs:
        dims = dict(need["dimensions"])
        url = (
            f"{quotas}/v1/projects/{project}/locations/global/services/{need['service']}"
            f"/quotaInfos/{need['quota_id']}"
        )
        body = get(url)
        limit = used = headroom = request = None
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
            if compute_metric(need["quota_id"]) is not None:
                used = usage_of(need, usage)  # type: ignore[arg-type]
            if limit is None:
                status, detail = "unknown", "no limit is reported for these dimensions"
            elif limit == -1:
                status, detail = "ok", "unlimited"
            else:
                needed = need["needed"]
                headroom = limit - (used or 0) - needed
                # The same rule as QuotaGuard's `_compare`: usage may be the stack's own.
                status = "SHORT" if needed > limit else "ok" if headroom >= 0 else "TIGHT"
                detail = "usage unknown for this service" if used is None else ""
                if status == "TIGHT":
                    detail = (
                        f"{limit - (used or 0)} left; the usage may include this stack's own "
                        f"machines; if not, the limit must be {(used or 0) + needed}"
                    )
                if status == "SHORT":
                    request = needed
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
                request=request,
            )
        )
    return results

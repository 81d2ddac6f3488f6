"""One GET through Google's API client for `trainstack status`, shared by the target modules:
404 is None, any other failure one `LogsError` line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from trainstack.components._google_api import (
    ApiError,
    NotFoundError,
    RetryPolicy,
    build_client,
    execute,
)
from trainstack.infra.logs import LogsError

POLICY = RetryPolicy(max_attempts=3)


def get_or_none(request: Any) -> dict[str, Any] | None:
    """The resource, or None when the API answers 404."""
    try:
        answer: dict[str, Any] = execute(request, POLICY)
    except NotFoundError:
        return None
    except ApiError as exc:
        raise LogsError(f"cannot read {request.uri.split('?')[0]}: {exc.message}") from None
    return answer


def gcs_json_lines(uri: str, endpoints: Mapping[str, str]) -> list[dict[str, Any]]:
    """The JSON lines of object `uri` (GCS JSON API `objects.get`, media), oldest first; none
    when it does not exist yet (the run supervisor's `events.jsonl` and `state.json`,
    components/supervisor/main.py)."""
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    objects = build_client("storage.v1", api_endpoint=endpoints.get("storage")).objects()
    try:
        raw = execute(objects.get_media(bucket=bucket, object=name), POLICY)
    except NotFoundError:
        return []
    except ApiError as exc:
        raise LogsError(f"cannot read {uri}: {exc.message}") from None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return [json.loads(line) for line in text.splitlines() if line.strip()]

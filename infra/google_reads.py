"""One GET through Google's API client for `trainstack status`, shared by the target modules:
404 is None, any other failure one `LogsError` line."""

from __future__ import annotations

from typing import Any

from trainstack.components._google_api import ApiError, NotFoundError, RetryPolicy, execute
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

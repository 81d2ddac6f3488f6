"""The Cloud Logging fake evaluates the filters trainstack writes (a fake that matched
everything would let a wrong dashboard or `trainstack logs` filter pass)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from tests.fakes.logging_server import FilterError, LoggingFakeServer, parse_filter

GCE_ENTRY = {
    "logName": "projects/p/logs/trainstack",
    "resource": {"type": "gce_instance", "labels": {"instance_id": "1", "zone": "us-central1-a"}},
    "labels": {"compute.googleapis.com/resource_name": "prod-a100-gce-a100-0"},
    "jsonPayload": {"event": "train", "step": 10, "mfu": 0.5},
    "timestamp": "2026-11-23T10:00:00Z",
}
DASHBOARD_FILTER = (
    'resource.type="gce_instance" AND (labels."compute.googleapis.com/resource_name"=~'
    '"^prod-a100-gce-a100-") AND jsonPayload.event="train" AND jsonPayload.mfu:*'
)


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DASHBOARD_FILTER, True),
        (DASHBOARD_FILTER.replace("^prod-a100-gce-a100-", "^dev-"), False),
        ("jsonPayload.step>=10 AND jsonPayload.step<11", True),
        ("jsonPayload.step>10", False),
        ('timestamp>="2026-11-23T09:59:59Z"', True),
        ('jsonPayload.event="checkpoint" OR resource.labels.zone="us-central1-a"', True),
        ('NOT jsonPayload.event="train"', False),
        ("jsonPayload.loss:*", False),
        ('resource.type!="k8s_container" jsonPayload.event="train"', True),
        ("", True),
    ],
)
def test_filters_are_evaluated(text: str, expected: bool) -> None:
    assert parse_filter(text)(GCE_ENTRY) is expected


@pytest.mark.parametrize("text", ['jsonPayload.event:"tr"', "jsonPayload.step>", "(a=1"])
def test_unsupported_filters_are_errors(text: str) -> None:
    with pytest.raises(FilterError):
        parse_filter(text)


def test_write_then_list_over_http() -> None:
    with LoggingFakeServer() as server:
        body = {
            "logName": GCE_ENTRY["logName"],
            "resource": GCE_ENTRY["resource"],
            "entries": [
                {
                    "jsonPayload": {"event": "train", "step": s},
                    "timestamp": f"2026-11-23T10:00:0{s}Z",
                }
                for s in range(3)
            ],
        }
        assert _post(server.endpoint + "v2/entries:write", body) == (200, {})
        status, page = _post(
            server.endpoint + "v2/entries:list",
            {
                "resourceNames": ["projects/p"],
                "filter": "jsonPayload.step>=1",
                "orderBy": "timestamp desc",
                "pageSize": 1,
            },
        )
        assert status == 200
        assert [e["jsonPayload"]["step"] for e in page["entries"]] == [2]
        assert page["nextPageToken"] == "1"
        status, other = _post(
            server.endpoint + "v2/entries:list", {"resourceNames": ["projects/q"]}
        )
        assert (status, other) == (200, {})
        status, error = _post(
            server.endpoint + "v2/entries:list",
            {"resourceNames": ["projects/p"], "filter": 'jsonPayload.event:"tr"'},
        )
        assert status == 400
        assert error["error"]["message"].startswith("unsupported filter: ")
        status, _ = _post(server.endpoint + "v2/entries:write", {"entries": [{"textPayload": "x"}]})
        assert status == 400

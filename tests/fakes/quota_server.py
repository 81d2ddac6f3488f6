"""A local HTTP server speaking the Cloud Quotas `quotaInfos.get` and Compute Engine
`regions.get` / `projects.get` shapes, for `trainstack quota --live` tests."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes import LocalServer


class QuotaFakeServer(LocalServer):
    """limits: {quota_id: [(dimensions, value)]}; usage: {scope: [(metric, limit, usage)]}."""

    def __init__(
        self,
        limits: dict[str, list[tuple[dict[str, str], str]]],
        usage: dict[str, list[tuple[str, float, float]]],
    ) -> None:
        self.limits = limits
        self.usage = usage
        self.requests: list[str] = []
        super().__init__(self._handler())

    @property
    def endpoint(self) -> str:
        return self.base_url

    def answer(self, path: str) -> tuple[int, Any]:
        self.requests.append(path)
        parts = path.strip("/").split("/")
        if parts[:1] == ["v1"] and "quotaInfos" in parts:
            quota_id = parts[-1]
            if quota_id not in self.limits:
                return 404, {"error": {"code": 404, "message": f"quota {quota_id} not found"}}
            return 200, {
                "quotaId": quota_id,
                "dimensionsInfos": [
                    {"dimensions": dims, "details": {"value": value}}
                    for dims, value in self.limits[quota_id]
                ],
            }
        if parts[:2] == ["compute", "v1"]:
            scope = parts[5] if len(parts) > 5 and parts[4] == "regions" else "global"
            quotas = [
                {"metric": m, "limit": limit, "usage": used}
                for m, limit, used in self.usage.get(scope, [])
            ]
            return 200, {"name": scope, "quotas": quotas}
        return 404, {"error": {"code": 404, "message": "no such path"}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                status, body = fake.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

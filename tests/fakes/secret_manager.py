"""A local HTTP server speaking the two Google APIs `secret_env` needs on a node: the metadata
server's token endpoint (`GET /computeMetadata/v1/instance/service-accounts/default/token`,
header `Metadata-Flavor: Google` required) and Secret Manager's
`GET /v1/projects/*/secrets/*/versions/*:access` (bearer token required; the answer's
`payload.data` is base64, https://cloud.google.com/secret-manager/docs/reference/rest/v1/
projects.secrets.versions/access). Point a node at it with `GCE_METADATA_HOST=<host:port>` and
`TRAINSTACK_SECRETMANAGER_ENDPOINT=<base_url>`."""

from __future__ import annotations

import base64
import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes import LocalServer, google_error

TOKEN = "ya29.fake-token"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"


class SecretManagerFake(LocalServer):
    """`secrets`: version resource name -> value; `forbidden`: names answered 403."""

    def __init__(
        self, secrets: dict[str, str | bytes], forbidden: frozenset[str] = frozenset()
    ) -> None:
        self.secrets = secrets
        self.forbidden = forbidden
        self.requests: list[tuple[str, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                fake.requests.append((self.path, dict(self.headers)))
                status, payload = fake.answer(self.path, dict(self.headers))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)

    @property
    def host(self) -> str:
        return self.base_url.removeprefix("http://")

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, Any]:
        if path == TOKEN_PATH:
            if headers.get("Metadata-Flavor") != "Google":
                return 403, google_error(403, "Missing Metadata-Flavor header")
            return 200, {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, google_error(401, "Request had invalid authentication credentials.")
        name = path.removeprefix("/v1/").removesuffix(":access")
        if not path.startswith("/v1/") or not path.endswith(":access"):
            return 404, google_error(404, f"no such method {path}")
        if name in self.forbidden:
            return 403, google_error(403, f"Permission denied on {name}")
        if name not in self.secrets:
            return 404, google_error(404, f"Secret Version [{name}] not found.")
        value = self.secrets[name]
        data = base64.b64encode(value if isinstance(value, bytes) else value.encode()).decode()
        return 200, {"name": name, "payload": {"data": data}}

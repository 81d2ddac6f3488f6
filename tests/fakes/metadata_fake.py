"""A local Compute Engine metadata server: the `computeMetadata/v1/` paths a VM reads.

    with MetadataFake(gce_values(...)) as metadata:
        env["GCE_METADATA_HOST"] = metadata.host      # google-auth's override, host:port
        metadata.requests                             # (path, Metadata-Flavor) per GET

Like the real server it answers 403 without `Metadata-Flavor: Google`, 404 for a path it does
not hold, and the default service account's token as JSON
(`{"access_token", "expires_in", "token_type"}`) at
`instance/service-accounts/default/token`
(https://cloud.google.com/compute/docs/access/authenticate-workloads#applications).
Named metadata_fake (not metadata_server) so it cannot clash with another fake of the same
server.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Final

from tests.fakes import LocalServer

TOKEN_PATH: Final = "instance/service-accounts/default/token"
PROJECT: Final = "p-exp-42"
ZONE: Final = "us-central2-b"


def vm_values(
    instance_id: str, name: str, zone: str = ZONE, project: str = PROJECT
) -> dict[str, str]:
    """What every VM's metadata holds that the log shipper reads."""
    return {
        "project/project-id": project,
        "instance/zone": f"projects/123456789012/zones/{zone}",
        "instance/id": instance_id,
        "instance/name": name,
    }


class MetadataFake(LocalServer):
    """The metadata server on 127.0.0.1 with `values` (path under computeMetadata/v1/)."""

    def __init__(self, values: dict[str, str], token: str = "ya29.fake-token") -> None:
        self.values = dict(values)
        self.token = token
        self.tokens_served = 0
        self.requests: list[tuple[str, str | None]] = []
        self._faults: list[int] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                flavor = self.headers.get("Metadata-Flavor")
                path = self.path.split("?", 1)[0].removeprefix("/computeMetadata/v1/")
                with fake._lock:
                    fake.requests.append((path, flavor))
                    fault = fake._faults.pop(0) if fake._faults else None
                    if fault is None and flavor == "Google" and path == TOKEN_PATH:
                        fake.tokens_served += 1
                if fault is not None:
                    status, text = fault, "injected fault"
                elif flavor != "Google":
                    status, text = 403, "Missing Metadata-Flavor:Google header"
                elif path == TOKEN_PATH:
                    answer = {
                        "access_token": fake.token,
                        "expires_in": 3599,
                        "token_type": "Bearer",
                    }
                    status, text = 200, json.dumps(answer)
                elif path in fake.values:
                    status, text = 200, fake.values[path]
                else:
                    status, text = 404, "not found"
                data = text.encode()
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                # Like the real server: JSON answers (a token, `?recursive=true` listings)
                # as application/json, which google-auth needs to parse them.
                is_json = status == 200 and text.startswith("{")
                self.send_header(
                    "Content-Type", "application/json" if is_json else "application/text"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)

    @property
    def host(self) -> str:
        """`host:port`, the form `GCE_METADATA_HOST` takes."""
        return self.base_url.removeprefix("http://")

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._faults.extend([status] * count)

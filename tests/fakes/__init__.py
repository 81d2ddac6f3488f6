"""In-process fakes of Google APIs that tests talk to over real HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self

STATUS_NAMES = {
    400: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}
"""google.rpc status names of the HTTP codes the fakes answer with."""


def google_error(status: int, message: str) -> dict[str, Any]:
    """A Google API error body, as googleapiclient parses it."""
    return {
        "error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}
    }


class JsonApi(Protocol):
    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        """(status, JSON payload), or None to drop the connection without an answer."""


class LocalServer:
    """An HTTP server on 127.0.0.1 (a free port) in a background thread, as a context
    manager; subclasses supply the request handler class."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def json_handler(api: JsonApi) -> type[BaseHTTPRequestHandler]:
    """A request handler that hands GET/POST/PATCH/DELETE with JSON bodies to `api.handle`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            answer = api.handle(method, self.path, body)
            if answer is None:
                self.close_connection = True
                return
            status, payload = answer
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

    return Handler

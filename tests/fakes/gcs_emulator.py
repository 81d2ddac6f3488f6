"""One way to run `gcp-storage-emulator` for tests and benchmarks: a free localhost port,
in memory, optionally with a bucket made at start; yields its URL (STORAGE_EMULATOR_HOST).

The emulator ignores `ifGenerationMatch`; this runs it with that precondition honoured on
single-request uploads (`uploadType=media` and `multipart`): a write whose
`ifGenerationMatch` is not the live object's generation ("0": no live object) is refused
with 412 and writes nothing, as Cloud Storage does
(https://cloud.google.com/storage/docs/request-preconditions). The emulator's server
handles one request at a time (`http.server.HTTPServer`), so the check and the write do not
interleave.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_gcs_emulator(bucket: str | None = None, timeout_s: float = 30) -> Iterator[str]:
    """The emulator's URL while it runs; `bucket` is created at start when given."""
    port = free_port()
    argv = [sys.executable, str(Path(__file__)), "start", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--in-memory", "-q"]
    if bucket is not None:
        argv += ["--default-bucket", bucket]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


Upload = Callable[[Any, Any, Any], None]


def _preconditioned(upload: Upload) -> Upload:
    """`upload` (one of the emulator's upload handlers) refusing a failed
    `ifGenerationMatch` with Cloud Storage's 412."""
    from http import HTTPStatus

    from gcp_storage_emulator.exceptions import NotFound

    def checked(request: Any, response: Any, storage: Any) -> None:
        wanted = request.query.get("ifGenerationMatch")
        if wanted:
            named = request.query.get("name")
            name = named[0] if named else request.data["meta"].get("name")
            try:
                live = str(storage.get_file_obj(request.params["bucket_name"], name)["generation"])
            except NotFound:
                live = "0"
            if live != wanted[0]:
                response.status = HTTPStatus.PRECONDITION_FAILED
                message = "At least one of the pre-conditions you specified did not hold."
                response.json({"error": {"code": 412, "message": message}})
                return
        upload(request, response, storage)

    return checked


def main() -> None:
    """The emulator's command line with the precondition honoured."""
    from gcp_storage_emulator import __main__ as emulator
    from gcp_storage_emulator.handlers import objects

    # `objects.insert` calls these by their module names at each request.
    objects._media_upload = _preconditioned(objects._media_upload)
    objects._multipart_upload = _preconditioned(objects._multipart_upload)
    emulator.main(sys.argv[1:])


if __name__ == "__main__":
    main()

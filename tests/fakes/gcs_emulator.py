"""One way to run `gcp-storage-emulator` for tests and benchmarks: a free localhost port,
in memory, optionally with a bucket made at start; yields its URL (STORAGE_EMULATOR_HOST)."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_gcs_emulator(bucket: str | None = None, timeout_s: float = 30) -> Iterator[str]:
    """The emulator's URL while it runs; `bucket` is created at start when given."""
    port = free_port()
    argv = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1"]
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

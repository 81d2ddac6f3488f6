"""A GCS emulator for the fidelity tests: the plan's own buckets, on localhost."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from tests.fidelity.vertex import free_ports


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A gcp-storage-emulator on a free local port; its URL (STORAGE_EMULATOR_HOST)."""
    [port] = free_ports(1)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
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


@pytest.fixture
def make_bucket(gcs_emulator: str) -> Callable[[str], None]:
    """Create a bucket (by the name the plan gives it) in the emulator."""

    def create(name: str) -> None:
        request = urllib.request.Request(
            f"{gcs_emulator}/storage/v1/b?project=fidelity-project",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    return create

"""The pod setup script (`components/kubernetes_pod.sh`: every GKE pod, every default Vertex
replica) waits out a refused download while a new grant propagates, as the TPU startup
script does, instead of failing the pod at the first HTTP 403.

Run with bash against a local metadata server and Cloud Storage; `date` and `sleep` are
fakes first on PATH that keep a clock in a file (a sleep adds to it and returns at once), so
the 15-minute window runs in a second and the server refuses by that clock."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainstack.components._pod_setup import pod_command

PACKAGE_URI = "gs://acme-ml-exp-42-staging/trainers/trainstack_trainers-0123456789abcdef.tar.gz"
SDIST = b"the trainer sdist"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
OBJECT_PATH = (
    "/storage/v1/b/acme-ml-exp-42-staging/o/"
    "trainers%2Ftrainstack_trainers-0123456789abcdef.tar.gz?alt=media"
)
HINT = "a new grant of the training account can take up to 7 minutes to reach Cloud Storage"
WAITS = [10, 20, 40, *[60] * 14]
"""Doubling from 10 s up to 60 s, until 900 s have passed since the first failure: failures
at 0, 10, 30, 70, 130, ..., 850 and 910 s (the TPU script's waits)."""

FAKES = """#!{python}
import os, sys
prog, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
clock = os.environ["FAKE_CLOCK"]
slept = int(open(clock).read()) if os.path.exists(clock) else 0
if prog == "date":
    print(1_800_000_000 + slept)
elif prog == "sleep":
    open(clock, "w").write(str(slept + int(argv[0])))
    open(clock + ".sleeps", "a").write(argv[0] + "\\n")
elif prog == "python3" and argv[:2] == ["-m", "pip"]:
    pass
else:
    os.execv({python!r}, [{python!r}, *argv])
"""


LAUNCHER = "print('launcher ran')"


def _run(
    tmp_path: Path, refuse: Callable[[str, int], int | None]
) -> tuple[int, list[int], list[str], list[str]]:
    """Run the pod script; `refuse(path, clock)` is the status the server answers instead
    of the token or the object (None: serve it). Returns the exit code, the sleeps, the
    `trainstack-pod:` lines and the paths the server saw."""
    done, sleeps, lines, seen = run_pod(tmp_path, refuse)
    if done.returncode == 0:
        assert done.stdout == "launcher ran\n"
    return done.returncode, sleeps, lines, seen


def run_pod(
    tmp_path: Path,
    refuse: Callable[[str, int], int | None] = lambda path, now: None,
    extra_env: Mapping[str, str] | None = None,
    launcher: str = LAUNCHER,
) -> tuple[subprocess.CompletedProcess[str], list[int], list[str], list[str]]:
    """`_run` with `extra_env` in the pod's environment and `launcher` the Python code the
    script execs last; returns the finished process in place of its exit code."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("date", "sleep", "python3"):
        (bin_dir / prog).write_text(FAKES.format(python=sys.executable))
        (bin_dir / prog).chmod(0o755)
    clock = tmp_path / "clock"
    seen: list[str] = []

    class Server(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            now = int(clock.read_text()) if clock.exists() else 0
            status, body = 404, b"not found"
            if self.path in (TOKEN_PATH, OBJECT_PATH):
                refused = refuse(self.path, now)
                if refused is not None:
                    status, body = refused, b"refused"
                elif self.path == TOKEN_PATH:
                    status, body = 200, json.dumps({"access_token": "t0k"}).encode()
                elif self.headers.get("Authorization") == "Bearer t0k":
                    status, body = 200, SDIST
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TMPDIR": str(tmp_path),
        "FAKE_CLOCK": str(clock),
        "GCE_METADATA_HOST": host,
        "STORAGE_EMULATOR_HOST": f"http://{host}",
        "TRAINSTACK_PACKAGE_URI": PACKAGE_URI,
        **(extra_env or {}),
    }
    python = str(bin_dir / "python3")
    try:
        done = subprocess.run(
            [*pod_command(), python, "-c", launcher],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    sleeps_file = tmp_path / "clock.sleeps"
    sleeps = [int(s) for s in sleeps_file.read_text().split()] if sleeps_file.exists() else []
    lines = [line for line in done.stderr.splitlines() if line.startswith("trainstack-pod: ")]
    return done, sleeps, lines, seen


def test_a_403_while_the_grant_propagates_is_waited_out(tmp_path: Path) -> None:
    def refuse(path: str, now: int) -> int | None:
        return 403 if path == OBJECT_PATH and now < 7 * 60 else None

    code, sleeps, lines, seen = _run(tmp_path, refuse)
    assert code == 0, lines
    # Failures at 0, 10, 30, 70, 130, 190, 250, 310 and 370 s; the 10th attempt, at 430 s.
    assert sleeps == WAITS[:9]
    assert seen == [TOKEN_PATH, OBJECT_PATH] * 10
    assert (tmp_path / "trainstack" / PACKAGE_URI.rsplit("/", 1)[1]).read_bytes() == SDIST
    assert lines[:3] == [
        f"trainstack-pod: installing {PACKAGE_URI}",
        f"trainstack-pod: {PACKAGE_URI}: HTTP 403 Forbidden",
        f"trainstack-pod: package download attempt 1 failed (0s of 900s); retrying in 10s: {HINT}",
    ]
    progress = [line for line in lines if "package download attempt" in line]
    assert [line.split("(")[1].split(")")[0] for line in progress] == [
        f"{t}s of 900s" for t in (0, 10, 30, 70, 130, 190, 250, 310, 370)
    ]
    assert lines[-1] == "trainstack-pod: package downloaded on attempt 10"


def test_a_token_the_metadata_server_refuses_or_lacks_is_waited_out(tmp_path: Path) -> None:
    # GKE's metadata server before the Workload Identity binding reached it, then a 503.
    answers = {0: 404, 10: 403, 30: 503}

    def refuse(path: str, now: int) -> int | None:
        return answers.get(now) if path == TOKEN_PATH else None

    code, sleeps, lines, seen = _run(tmp_path, refuse)
    assert code == 0, lines
    assert sleeps == [10, 20, 40]
    assert seen == [TOKEN_PATH] * 3 + [TOKEN_PATH, OBJECT_PATH]
    assert [line for line in lines if ": HTTP " in line] == [
        "trainstack-pod: access token: HTTP 404 Not Found",
        "trainstack-pod: access token: HTTP 403 Forbidden",
        "trainstack-pod: access token: HTTP 503 Service Unavailable",
    ]
    assert lines[-1] == "trainstack-pod: package downloaded on attempt 4"


def test_refusals_are_retried_for_15_minutes_then_setup_fails_with_3(tmp_path: Path) -> None:
    code, sleeps, lines, _ = _run(tmp_path, lambda path, now: 403 if path == OBJECT_PATH else None)
    assert code == 3
    assert sleeps == WAITS
    assert sum(WAITS) == 910
    assert lines[-2:] == [
        f"trainstack-pod: {PACKAGE_URI}: HTTP 403 Forbidden",
        "trainstack-pod: giving up on the package download after 18 attempts over 910s",
    ]
    assert lines[-3] == (
        f"trainstack-pod: package download attempt 17 failed (850s of 900s); retrying in 60s: "
        f"{HINT}"
    )


def test_a_missing_package_fails_at_once(tmp_path: Path) -> None:
    code, sleeps, lines, _ = _run(tmp_path, lambda path, now: 404 if path == OBJECT_PATH else None)
    assert code == 3
    assert sleeps == []
    assert lines[1:] == [
        f"trainstack-pod: {PACKAGE_URI}: HTTP 404 Not Found",
        f"trainstack-pod: cannot download {PACKAGE_URI}",
    ]

"""The node launch scripts, run for real with bash against a fake metadata server and Cloud
Storage (one local HTTP server) and fake torchrun/pip/systemd executables that record their
argv: the Compute Engine startup script and its launcher, for node 0 and node 3 of 4, then
exit-code mapping, signal forwarding, idempotency and the run limit."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import LocalServer
from trainstack.components.gpu_startup import (
    METADATA_HOST_ENV,
    NODE_RANK_ATTRIBUTE,
    STORAGE_HOST_ENV,
    gce_startup_script,
    render_launcher,
    run_clock_uri,
    with_checkpoint_dir,
)
from trainstack.trainers.common.cluster import resolve_cluster

BUCKET = "acme-ml-exp-42-staging"
OBJECT = "trainers/trainstack_trainers-0123456789abcdef.tar.gz"
PACKAGE_URI = f"gs://{BUCKET}/{OBJECT}"
PACKAGE_FILE = "trainstack_trainers-0123456789abcdef.tar.gz"
SDIST = b"\x1f\x8b fake sdist bytes"
CHECKPOINTS = "gs://acme-ml-exp-42-checkpoints"
TOKEN = "ya29.fake-token"
COORDINATOR_GCE = "exp-42-a100-0"
GCE_HOSTS = [f"exp-42-a100-{i}" for i in range(4)]
TRAINER_ARGS = ["--steps=100", "--global_batch_size=256"]
# No --run_name among the flags: the trainer's default run name names the folder.
FLAGS = [*TRAINER_ARGS, f"--checkpoint_dir={CHECKPOINTS}/checkpoints/run"]
STARTED = json.dumps({"event": "start", "step": 0, "rank": 0})
PREEMPTED = json.dumps({"event": "preempted", "step": 40, "rank": 0})
RUN_TIMEOUT_S = 60


# --------------------------------------------------------------------------------------
# Fake metadata server + Cloud Storage
# --------------------------------------------------------------------------------------


class FakeGoogle(LocalServer):
    """Metadata server (node rank, access token) and the Cloud Storage media download."""

    def __init__(self, node_rank: str) -> None:
        self.node_rank = node_rank
        self.objects: dict[tuple[str, str], bytes] = {(BUCKET, OBJECT): SDIST}
        self.requests: list[tuple[str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                server.requests.append((self.path, dict(self.headers.items())))
                path, _, query = self.path.partition("?")
                if path.startswith("/computeMetadata/v1/"):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403, b"missing Metadata-Flavor")
                    key = path.removeprefix("/computeMetadata/v1/")
                    if key == f"instance/attributes/{NODE_RANK_ATTRIBUTE}":
                        return self._send(200, server.node_rank.encode())
                    if key == "instance/service-accounts/default/token":
                        token = {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
                        return self._send(200, json.dumps(token).encode(), "application/json")
                    return self._send(404, b"no such metadata")
                if path.startswith("/storage/v1/b/") and query == "alt=media":
                    if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                        return self._send(401, b"unauthenticated")
                    bucket, _, obj = path.removeprefix("/storage/v1/b/").partition("/o/")
                    data = server.objects.get((bucket, urllib.parse.unquote(obj)))
                    if data is None:
                        return self._send(404, b"no such object")
                    return self._send(200, data, "application/octet-stream")
                return self._send(404, b"unknown path")

            def do_POST(self) -> None:
                server.requests.append((self.path, dict(self.headers.items())))
                path, _, query = self.path.partition("?")
                params = urllib.parse.parse_qs(query)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not path.startswith("/upload/storage/v1/b/") or "name" not in params:
                    return self._send(404, b"unknown path")
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, b"unauthenticated")
                key = (
                    path.removeprefix("/upload/storage/v1/b/").removesuffix("/o"),
                    params["name"][0],
                )
                if params.get("ifGenerationMatch") == ["0"] and key in server.objects:
                    return self._send(412, b"precondition failed")
                server.objects[key] = body
                return self._send(200, b"{}", "application/json")

        super().__init__(Handler)

    @property
    def metadata_host(self) -> str:
        return self.base_url.removeprefix("http://")


# --------------------------------------------------------------------------------------
# Fake executables
# --------------------------------------------------------------------------------------

FAKE = r"""
import json, os, signal, subprocess, sys, time

prog, args = sys.argv[1], sys.argv[2:]
keep = ("PYTHONUNBUFFERED", "HOME", "TRAINSTACK_PROGRESS", "TF_CONFIG")
env = {k: v for k, v in os.environ.items() if k.startswith(("TRAINSTACK_", "JOB_")) or k in keep}
with open(os.environ["FAKE_RECORD"], "a") as record:
    record.write(json.dumps({"prog": prog, "argv": args, "env": env}) + "\n")

if prog in ("torchrun", "python3"):
    if os.environ.get("FAKE_TRAINER_BLOCK"):
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        print(json.dumps({"event": "start", "step": 0, "rank": 0}), flush=True)
        open(os.environ["FAKE_STARTED"], "w").close()
        while not stop:
            time.sleep(0.01)
        with open(os.environ["FAKE_RECORD"], "a") as record:
            record.write(json.dumps({"prog": prog, "signal": "SIGTERM"}) + "\n")
        print(json.dumps({"event": "preempted", "step": 40, "rank": 0}), flush=True)
        sys.exit(1)  # what torchrun reports for any failed worker
    for line in json.loads(os.environ.get("FAKE_TRAINER_STDOUT", "[]")):
        print(line, flush=True)
    sys.exit(int(os.environ.get("FAKE_TRAINER_EXIT", "0")))
if prog == "pip":
    sys.exit(int(os.environ.get("FAKE_PIP_EXIT", "0")))
if prog == "systemctl":
    if args[:1] == ["is-active"]:
        state = os.environ.get("FAKE_UNIT_STATE", "inactive")
        print(state)
        sys.exit(0 if state == "active" else 3)
    sys.exit(0)
if prog == "systemd-run":
    # Runs the unit's command in the foreground with the unit's --setenv values.
    child_env, i = dict(os.environ), 0
    while args[i].startswith("--"):
        if args[i].startswith("--setenv="):
            key, _, value = args[i].removeprefix("--setenv=").partition("=")
            child_env[key] = value
        i += 1
    sys.exit(subprocess.call(args[i:], env=child_env))
sys.exit(f"fake: unknown program {prog}")
"""


@pytest.fixture
def fakebin(tmp_path: Path) -> Path:
    """A PATH directory with torchrun, pip, systemctl, systemd-run and a python3 that runs
    the real interpreter except for `python3 -m <trainer>`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    python = shlex.quote(sys.executable)
    for prog in ("torchrun", "pip", "systemctl", "systemd-run"):
        path = bin_dir / prog
        path.write_text(f'#!/bin/sh\nexec {python} {shlex.quote(str(fake))} {prog} "$@"\n')
        path.chmod(0o755)
    wrapper = bin_dir / "python3"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "${{1:-}}" = -m ]; then exec {python} {shlex.quote(str(fake))} python3 "$@"; fi\n'
        f'exec {python} "$@"\n'
    )
    wrapper.chmod(0o755)
    return bin_dir


@pytest.fixture
def google() -> Iterator[FakeGoogle]:
    with FakeGoogle(node_rank="3") as server:
        yield server


def _env(tmp_path: Path, fakebin: Path, google: FakeGoogle, **extra: str) -> dict[str, str]:
    # Only what a node provides: no inherited TRAINSTACK_* or JOB_* from the test process.
    return {
        "PATH": f"{fakebin}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path / "tmp"),
        METADATA_HOST_ENV: google.metadata_host,
        STORAGE_HOST_ENV: google.base_url,
        "FAKE_RECORD": str(tmp_path / "calls.jsonl"),
        "FAKE_STARTED": str(tmp_path / "started"),
        **extra,
    }


def _calls(tmp_path: Path, prog: str | None = None) -> list[dict[str, Any]]:
    path = tmp_path / "calls.jsonl"
    if not path.exists():
        return []
    calls = [json.loads(line) for line in path.read_text().splitlines()]
    return [c for c in calls if prog is None or c["prog"] == prog]


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )


def _gce_script(tmp_path: Path, module: str = "trainstack.trainers.torch_ddp") -> str:
    return gce_startup_script(
        package_uri=PACKAGE_URI,
        module=module,
        trainer_args=with_checkpoint_dir(TRAINER_ARGS, CHECKPOINTS),
        num_nodes=4,
        procs_per_node=8 if module == "trainstack.trainers.torch_ddp" else 1,
        coordinator=COORDINATOR_GCE,
        state_dir=str(tmp_path / "state"),
        worker_hosts=GCE_HOSTS,
    )


def _launcher(tmp_path: Path, **overrides: Any) -> list[str]:
    """The rendered launcher as the unit runs it (`bash <file>`; here `bash -c`)."""
    values: dict[str, Any] = {
        "package_uri": PACKAGE_URI,
        "module": "trainstack.trainers.torch_ddp",
        "trainer_args": FLAGS,
        "num_nodes": 4,
        "procs_per_node": 8,
        "coordinator": COORDINATOR_GCE,
        "work_dir": str(tmp_path / "work"),
        **overrides,
    }
    return ["bash", "-c", render_launcher(**values), "trainstack-launch"]


NODE_ARGV = ["-m", "trainstack.trainers.node", "trainstack.trainers.torch_ddp", *FLAGS]
"""Every target runs the node launcher, which counts the accelerators and starts torchrun."""


def _assert_fetched(google: FakeGoogle, work: Path) -> None:
    assert (work / PACKAGE_FILE).read_bytes() == SDIST
    storage = [h for p, h in google.requests if p.startswith("/storage/")]
    assert [p for p, _ in google.requests if p.startswith("/storage/")] == [
        f"/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(OBJECT, safe='')}?alt=media"
    ]
    assert storage[0]["Authorization"] == f"Bearer {TOKEN}"
    assert all(
        h["Metadata-Flavor"] == "Google" for p, h in google.requests if p.startswith("/compute")
    )


# --------------------------------------------------------------------------------------
# Compute Engine: the startup script
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 3])
def test_gce_startup_script_starts_the_trainer_with_the_metadata_rank(
    rank: int, tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    google.node_rank = str(rank)
    state = tmp_path / "state"
    result = _run(["bash", "-c", _gce_script(tmp_path)], _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr

    (is_active, reset, start) = [
        c["argv"] for c in _calls(tmp_path) if c["prog"] in ("systemctl", "systemd-run")
    ]
    assert is_active == ["is-active", "trainstack-trainer"]
    assert reset == ["reset-failed", "trainstack-trainer"]
    (launcher,) = state.glob("launch-*.sh")
    key = launcher.name.removeprefix("launch-").removesuffix(".sh")
    assert start == [
        "--unit=trainstack-trainer",
        "--description=trainstack trainer",
        "--collect",
        "--property=KillMode=mixed",
        "--property=TimeoutStopSec=90",
        "--property=Restart=on-failure",
        "--property=RestartSec=30",
        "--property=RestartPreventExitStatus=0 1 2 5",
        "--property=StartLimitIntervalSec=3600",
        "--property=StartLimitBurst=20",
        "--setenv=HOME=/root",
        "/bin/bash",
        str(launcher),
    ]
    assert [c["argv"] for c in _calls(tmp_path, "pip")] == [
        ["install", "--disable-pip-version-check", "--no-input", str(state / PACKAGE_FILE)]
    ]
    (node,) = _calls(tmp_path, "python3")
    assert node["argv"] == NODE_ARGV
    assert node["env"] == {
        "HOME": "/root",
        "PYTHONUNBUFFERED": "1",
        "TRAINSTACK_CLOUD_LOGGING": "gce_instance",
        "TRAINSTACK_COORDINATOR": f"{COORDINATOR_GCE}:29500",
        "TRAINSTACK_COORDINATOR_PORT": "29500",
        "TRAINSTACK_EXPECTED_ACCELERATORS": "8",
        "TRAINSTACK_NODE_RANK": str(rank),
        "TRAINSTACK_NUM_NODES": "4",
        "TRAINSTACK_PROGRESS": "0",
    }
    assert (state / f"done-{key}").exists()
    _assert_fetched(google, state)
    # Each launcher line also tries Cloud Logging; this fake serves no project id, so each
    # try stops there (tests/unit/test_launcher_logging.py ships them).
    project = "/computeMetadata/v1/project/project-id"
    assert [p for p, _ in google.requests if p.startswith("/compute") and p != project] == [
        f"/computeMetadata/v1/instance/attributes/{NODE_RANK_ATTRIBUTE}",
        "/computeMetadata/v1/instance/service-accounts/default/token",
    ]
    assert [p for p, _ in google.requests].count(project) == 3  # installing, node, finished


def test_gce_startup_script_is_idempotent(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    script = _gce_script(tmp_path)
    env = _env(tmp_path, fakebin, google)
    assert _run(["bash", "-c", script], env).returncode == 0
    calls = len(_calls(tmp_path))

    # Finished on this machine (a reboot, or the script run by hand): nothing starts.
    again = _run(["bash", "-c", script], env)
    assert again.returncode == 0
    assert "already finished on this machine; nothing to start" in again.stderr
    assert len(_calls(tmp_path)) == calls

    # Still running (a second run while the service is up): nothing starts either.
    for done in (tmp_path / "state").glob("done-*"):
        done.unlink()
    running = _run(["bash", "-c", script], {**env, "FAKE_UNIT_STATE": "active"})
    assert running.returncode == 0
    assert "trainstack-trainer is already active" in running.stderr
    assert [c["prog"] for c in _calls(tmp_path)][calls:] == ["systemctl"]


def test_gce_non_torch_trainer_gets_the_node_environment(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    script = _gce_script(tmp_path, "trainstack.trainers.tf_multiworker")
    assert _run(["bash", "-c", script], _env(tmp_path, fakebin, google)).returncode == 0
    (trainer,) = _calls(tmp_path, "python3")
    assert trainer["argv"] == [
        "-m",
        "trainstack.trainers.node",
        "trainstack.trainers.tf_multiworker",
        *FLAGS,
    ]
    # TensorFlow needs every worker's address, which the node-level variables do not carry.
    assert json.loads(trainer["env"].pop("TF_CONFIG")) == {
        "cluster": {"worker": [f"{host}:29500" for host in GCE_HOSTS]},
        "task": {"type": "worker", "index": 3},
    }
    cluster = resolve_cluster(trainer["env"])
    assert (cluster.platform, cluster.node_rank, cluster.num_nodes) == ("gce", 3, 4)
    assert (cluster.coordinator_address, cluster.coordinator_port) == (COORDINATOR_GCE, 29500)


# --------------------------------------------------------------------------------------
# Exit codes, signals, reinstall
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "trainer_exit", "expected", "message"),
    [
        # The node launcher maps the trainer's outcome (trainstack.trainers.node.exit_code); the script
        # passes its code on.
        ([STARTED, PREEMPTED], 143, 143, "the node launcher exited 143"),
        ([STARTED], 1, 1, "the node launcher exited 1"),
        ([], 3, 3, "the node launcher exited 3"),
        ([], 2, 2, "the node launcher exited 2"),
        ([STARTED], 137, 137, "the node launcher exited 137"),
        ([STARTED, json.dumps({"event": "done", "step": 100})], 0, 0, "training finished"),
    ],
)
def test_launcher_exit_codes(
    stdout: list[str],
    trainer_exit: int,
    expected: int,
    message: str,
    tmp_path: Path,
    fakebin: Path,
    google: FakeGoogle,
) -> None:
    env = _env(
        tmp_path,
        fakebin,
        google,
        FAKE_TRAINER_STDOUT=json.dumps(stdout),
        FAKE_TRAINER_EXIT=str(trainer_exit),
    )
    result = _run(_launcher(tmp_path), env)
    assert result.returncode == expected, result.stderr
    assert f"trainstack-launch: {message}" in result.stderr
    # The trainer's stdout still reaches the container log.
    assert result.stdout.splitlines() == stdout


def test_sigterm_is_forwarded_and_reported_as_preemption(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    google.node_rank = "1"
    env = _env(tmp_path, fakebin, google, FAKE_TRAINER_BLOCK="1")
    proc = subprocess.Popen(
        _launcher(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not (tmp_path / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the fake trainer never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert {"prog": "python3", "signal": "SIGTERM"} in _calls(tmp_path)
    assert "trainstack-launch: preempted (launcher exit 1)" in err
    assert out.splitlines() == [STARTED, PREEMPTED]


@pytest.mark.parametrize(
    ("rank", "env_extra", "work_dir", "expected", "message"),
    [
        ("", {}, "work", 2, "node rank '' is not a non-negative integer"),
        ("0", {"FAKE_PIP_EXIT": "1"}, "work", 3, "pip could not install"),
        # Any other failure (here: no work directory) is a node problem: retryable.
        ("0", {}, "/dev/null/work", 3, "unexpected failure at line"),
    ],
)
def test_launcher_setup_failures(
    rank: str,
    env_extra: dict[str, str],
    work_dir: str,
    expected: int,
    message: str,
    tmp_path: Path,
    fakebin: Path,
    google: FakeGoogle,
) -> None:
    google.node_rank = rank
    launcher = _launcher(tmp_path, work_dir=str(tmp_path / work_dir))
    result = _run(launcher, _env(tmp_path, fakebin, google, **env_extra))
    assert result.returncode == expected
    assert message in result.stderr
    assert _calls(tmp_path, "python3") == []


def test_missing_package_is_a_retryable_setup_failure(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    google.objects.clear()
    google.node_rank = "0"
    result = _run(_launcher(tmp_path), _env(tmp_path, fakebin, google))
    assert result.returncode == 3
    assert f"trainstack-launch: could not download {PACKAGE_URI}" in result.stderr
    assert _calls(tmp_path, "pip") == []


def test_invalid_trainer_flags_fail_before_the_node_launcher(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    launcher = _launcher(tmp_path, trainer_args=["--steps=0"])
    result = _run(launcher, _env(tmp_path, fakebin, google))
    assert result.returncode == 2
    assert "trainstack-launch: invalid trainer arguments: --steps=0" in result.stderr
    assert "steps" in result.stderr  # the trainer parser's own message comes first
    assert _calls(tmp_path, "python3") == []


def test_installed_package_is_not_fetched_again(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    env = _env(tmp_path, fakebin, google)
    for _ in range(2):
        assert _run(_launcher(tmp_path), env).returncode == 0
    assert len(_calls(tmp_path, "pip")) == 1
    assert len([p for p, _ in google.requests if p.startswith("/storage/")]) == 1
    assert len(_calls(tmp_path, "python3")) == 2


def test_arguments_reach_the_node_launcher_verbatim(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    # Free-form string flags: valid for the trainer, hostile for a shell.
    tricky = ["--data_path=a b;c'$(id)\"`x`", "--tensorboard_dir=$HOME/*"]
    env = _env(tmp_path, fakebin, google)
    result = _run(_launcher(tmp_path, trainer_args=tricky), env)
    assert result.returncode == 0, result.stderr
    (node,) = _calls(tmp_path, "python3")
    assert node["argv"] == [
        "-m",
        "trainstack.trainers.node",
        "trainstack.trainers.torch_ddp",
        *tricky,
    ]


# --------------------------------------------------------------------------------------
# Run limit (max_run_seconds): a clock per run in the checkpoint bucket
# --------------------------------------------------------------------------------------

CLOCK_BUCKET = "acme-ml-exp-42-checkpoints"
CLOCK_OBJECT = "trainstack-run-0123456789abcdef.started"
CLOCK_URI = f"gs://{CLOCK_BUCKET}/{CLOCK_OBJECT}"


def test_run_clock_lives_beside_the_checkpoints() -> None:
    assert run_clock_uri(CHECKPOINTS + "/", "0123456789abcdef") == CLOCK_URI


def test_the_run_limit_stops_the_trainer_and_exits_0(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    launcher = _launcher(tmp_path, max_run_seconds=2, run_clock=CLOCK_URI)
    env = _env(tmp_path, fakebin, google, FAKE_TRAINER_BLOCK="1")
    started = time.time()
    result = _run(launcher, env)
    assert result.returncode == 0, result.stderr
    assert time.time() - started >= 2
    assert {"prog": "python3", "signal": "SIGTERM"} in _calls(tmp_path)
    assert (
        "trainstack-launch: max_run_hours reached: stopped the trainer after 2s of the run "
        "(launcher exit 1); the newest checkpoint holds its state\n"
    ) in result.stderr
    recorded = int(google.objects[(CLOCK_BUCKET, CLOCK_OBJECT)].decode())
    assert started - 5 <= recorded <= started + 5
    posts = [p for p, h in google.requests if p.startswith("/upload/")]
    assert posts == [
        f"/upload/storage/v1/b/{CLOCK_BUCKET}/o?uploadType=media"
        f"&name={CLOCK_OBJECT}&ifGenerationMatch=0"
    ]


def test_a_start_after_the_deadline_exits_0_at_once(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    google.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] = str(int(time.time()) - 100).encode()
    launcher = _launcher(tmp_path, max_run_seconds=60, run_clock=CLOCK_URI)
    result = _run(launcher, _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "max_run_hours" in line]
    assert lines in (
        [
            f"trainstack-launch: max_run_hours reached: {s}s since the run started "
            "(limit 60s); not starting"
        ]
        for s in (100, 101, 102)
    )
    assert _calls(tmp_path) == []  # nothing installed, nothing started
    assert not [p for p, _ in google.requests if p.startswith("/upload/")]


def test_every_node_and_restart_reads_the_first_recorded_start(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    first = str(int(time.time()) - 30).encode()
    google.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] = first
    launcher = _launcher(tmp_path, max_run_seconds=3600, run_clock=CLOCK_URI)
    for rank in ("0", "3"):
        google.node_rank = rank
        result = _run(launcher, _env(tmp_path, fakebin, google))
        assert result.returncode == 0, result.stderr
        assert "trainstack-launch: training finished" in result.stderr
    assert google.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] == first
    assert not [p for p, _ in google.requests if p.startswith("/upload/")]


def test_the_startup_script_carries_the_run_limit(tmp_path: Path) -> None:
    script = gce_startup_script(
        package_uri=PACKAGE_URI,
        module="trainstack.trainers.torch_ddp",
        trainer_args=FLAGS,
        num_nodes=4,
        procs_per_node=8,
        coordinator=COORDINATOR_GCE,
        worker_hosts=GCE_HOSTS,
        max_run_seconds=7200,
        checkpoint_url=CHECKPOINTS,
    )
    [key] = {line.split("=", 1)[1] for line in script.splitlines() if line.startswith("RUN_KEY=")}
    assert "\nMAX_RUN_SECONDS=7200\n" in script
    assert f"\nRUN_CLOCK_URI={CHECKPOINTS}/trainstack-run-{key}.started\n" in script
    with pytest.raises(ValueError) as error:
        gce_startup_script(
            package_uri=PACKAGE_URI,
            module="trainstack.trainers.torch_ddp",
            trainer_args=FLAGS,
            num_nodes=4,
            procs_per_node=8,
            coordinator=COORDINATOR_GCE,
            max_run_seconds=7200,
        )
    assert str(error.value) == (
        "max_run_seconds: needs a checkpoint bucket to record the run's start in; "
        "valid: a stack with a checkpoint bucket, or no limits.max_run_hours"
    )


# --------------------------------------------------------------------------------------
# Your own code (node_args): the node launcher's whole command line, no flag check
# --------------------------------------------------------------------------------------

USER_NODE_ARGS = [
    "--launcher=torchrun",
    f"--env=TRAINSTACK_CHECKPOINT_DIR={CHECKPOINTS}/checkpoints",
    "--",
    "python",
    "train.py",
    "--steps=0",
]
"""`--steps=0` is invalid for the bundled trainer: your code's flags are its own."""


def _user_gce_script(tmp_path: Path, node_args: list[str]) -> str:
    return gce_startup_script(
        package_uri=PACKAGE_URI,
        module=None,
        trainer_args=[],
        num_nodes=4,
        procs_per_node=8,
        coordinator=COORDINATOR_GCE,
        state_dir=str(tmp_path / "state"),
        worker_hosts=GCE_HOSTS,
        node_args=node_args,
    )


def test_gce_runs_your_code_with_its_node_args(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    script = _user_gce_script(tmp_path, USER_NODE_ARGS)
    assert "\nTRAINER_ARGS=()\n" in script
    assert "\nUSE_TORCHRUN=1\nUSER_CODE=1\n" in script
    result = _run(["bash", "-c", script], _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr
    (node,) = _calls(tmp_path, "python3")
    assert node["argv"] == [
        "-m",
        "trainstack.trainers.node",
        "--launcher=torchrun",
        f"--env=TRAINSTACK_CHECKPOINT_DIR={CHECKPOINTS}/checkpoints",
        "--",
        "python",
        "train.py",
        "--steps=0",
    ]
    assert node["env"] == {
        "HOME": "/root",
        "PYTHONUNBUFFERED": "1",
        "TRAINSTACK_CLOUD_LOGGING": "gce_instance",
        "TRAINSTACK_COORDINATOR": f"{COORDINATOR_GCE}:29500",
        "TRAINSTACK_COORDINATOR_PORT": "29500",
        "TRAINSTACK_EXPECTED_ACCELERATORS": "8",
        "TRAINSTACK_NODE_RANK": "3",
        "TRAINSTACK_NUM_NODES": "4",
        "TRAINSTACK_PROGRESS": "0",
    }
    assert "invalid trainer arguments" not in result.stderr


def test_gce_node_launcher_for_your_code_gets_tf_config(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    node_args = ["--launcher=node", "--", "python", "train.py"]
    script = _user_gce_script(tmp_path, node_args)
    assert "\nUSE_TORCHRUN=0\nUSER_CODE=1\n" in script
    assert _run(["bash", "-c", script], _env(tmp_path, fakebin, google)).returncode == 0
    (node,) = _calls(tmp_path, "python3")
    assert node["argv"] == ["-m", "trainstack.trainers.node", *node_args]
    assert json.loads(node["env"]["TF_CONFIG"]) == {
        "cluster": {"worker": [f"{host}:29500" for host in GCE_HOSTS]},
        "task": {"type": "worker", "index": 3},
    }


def test_bundled_launcher_says_it_is_not_your_code(tmp_path: Path) -> None:
    assert "\nUSE_TORCHRUN=1\nUSER_CODE=0\n" in _gce_script(tmp_path)


def test_your_code_gets_its_own_run_key(tmp_path: Path) -> None:
    def key(script: str) -> str:
        [found] = [line for line in script.splitlines() if line.startswith("RUN_KEY=")]
        return found

    user = key(_user_gce_script(tmp_path, USER_NODE_ARGS))
    other = key(_user_gce_script(tmp_path, [*USER_NODE_ARGS[:-1], "--steps=1"]))
    assert user != other
    assert user != key(_gce_script(tmp_path))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"module": "trainstack.trainers.torch_ddp"}, "node_args: runs your own code, which takes no module or trainer_args; valid: remove them"),
        ({"trainer_args": ["--steps=1"]}, "node_args: runs your own code, which takes no module or trainer_args; valid: remove them"),
        ({"node_args": ["--launcher=torchrun", "--"]}, "node_args: ['--launcher=torchrun', '--'] has no '-- ARGV' (your entrypoint)"),
        ({"node_args": "--launcher=torchrun -- python"}, "node_args: got '--launcher=torchrun -- python'; valid: a list of strings"),
    ],
)  # fmt: skip
def test_invalid_node_args_are_refused(overrides: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {
        "package_uri": PACKAGE_URI,
        "module": None,
        "trainer_args": [],
        "num_nodes": 4,
        "procs_per_node": 8,
        "coordinator": COORDINATOR_GCE,
        "work_dir": "/var/lib/trainstack",
        "node_args": USER_NODE_ARGS,
        **overrides,
    }
    with pytest.raises(ValueError) as error:
        render_launcher(**values)
    assert str(error.value) == message

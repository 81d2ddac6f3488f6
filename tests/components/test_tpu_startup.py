"""The TPU worker startup script, rendered and run for real with bash.

The metadata server is a local HTTP server (the script's base URL comes from
TRAINSTACK_METADATA_URL, which only tests set); gcloud, gsutil, python3 and sleep are fake
executables first on PATH that record their argv and the TPU environment. `python3 -c CODE`
(the script's TensorFlow and libtpu probes) runs CODE with this interpreter over stub
`tensorflow` (version FAKE_TF_VERSION) and `libtpu` packages. The slice is a v4-32
(4 workers) on tpu-vm-tf-2.16.0-pod-pjrt; the tests run worker 0 (the trainer) and worker 3
(serves only). tests/fidelity/test_tpu.py runs the same script against real TensorFlow.
The run limit's clock goes through the real node helper (the fake python3 runs it) against
the same local server, which also serves the access token and Cloud Storage; `date` is fake
too (FAKE_NOW), so the limit's arithmetic is exact.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import LocalServer
from trainstack.components.startup.tpu_worker import (
    METADATA_URL_ENV,
    STATE_DIR_ENV,
    effective_checkpoint_dir,
    render_tpu_worker_script,
    run_clock,
    slice_run_record,
    trainer_command,
    user_code_command,
)

SLICE = "exp-42-tpu"
PACKAGE = "gs://p-exp-42-staging/trainers/trainstack_trainers-0123456789abcdef.tar.gz"
CKPT = "gs://p-exp-42-checkpoints/checkpoints"
FLAGS = ["--framework=tensorflow", "--strategy=tpu", "--model=cnn", "--steps=2000"]
RUNTIME = "tpu-vm-tf-2.16.0-pod-pjrt"
TF_PROBE = ["-c", "import tensorflow as tf; print(tf.__version__)"]
LIBTPU_PROBE = [
    "-c",
    'import importlib.util as u, os; s = u.find_spec("libtpu"); print(os.path.join(list('
    's.submodule_search_locations)[0], "libtpu.so") if s and s.submodule_search_locations '
    'else "")',
]
IPS = ["10.130.0.2", "10.130.0.3", "10.130.0.4", "10.130.0.5"]
ENDPOINTS = ",".join(f"unknown:unknown:{ip}" for ip in IPS)
TRAINER_ARGV = [
    "-m",
    "trainstack.trainers.node",
    "--launcher=node",
    "trainstack.trainers.tf_multiworker",
    f"--checkpoint_dir={CKPT}",
    *FLAGS,
]
RECORD = slice_run_record(
    slice_name=SLICE,
    package_uri=PACKAGE,
    trainer_module="trainstack.trainers.tf_multiworker",
    trainer_args=FLAGS,
    checkpoint_dir=CKPT,
)
"""The run's record prefix the script exports to the node launcher."""
TRAINER_ENV = {
    "TPU_WORKER_ID": "0",
    "TPU_WORKER_HOSTNAMES": ",".join(IPS),
    "TPU_LOAD_LIBRARY": "0",
    "PYTHONUNBUFFERED": "1",
    "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
    "TRAINSTACK_TPU_NODE_ID": SLICE,
    "TRAINSTACK_RUN_RECORD": RECORD,
}
RECORDED_ENV = (
    "TPU_NAME",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "TPU_LOAD_LIBRARY",
    "PYTHONUNBUFFERED",
    "PIP_BREAK_SYSTEM_PACKAGES",
    "NEXT_PLUGGABLE_DEVICE_USE_C_API",
    "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
    "TF_CPP_MIN_LOG_LEVEL",
    "TRAINSTACK_CLOUD_LOGGING",
    "TRAINSTACK_TPU_NODE_ID",
    "TRAINSTACK_RUN_RECORD",
    "TRAINSTACK_RUN_FINAL_CODES",
)

# One recorder for every fake: argv and the TPU environment as one JSON line per call.
# gcloud/gsutil `cp` write the destination; python3 `-m pip` succeeds (FAKE_PIP_FAILS
# names a requirement whose install fails); python3 `-c CODE` runs CODE over the stubs
# (the libtpu stub is left out with FAKE_NO_LIBTPU); the trainer prints a metrics line and
# exits with the next code of FAKE_TRAINER_EXITS (default 0).
# The run limit: python3 runs the embedded node helper for real; `date` prints FAKE_NOW;
# `sleep` returns at once, or once the file FAKE_SLEEP_UNTIL exists; with FAKE_TRAINER_BLOCK
# the trainer creates that file and waits for SIGTERM, which it records (FAKE_LOG.signals)
# before it exits 143 as the node launcher does after its checkpoint.
FAKE = """#!{python}
import json, os, signal, sys, time
prog = os.path.basename(sys.argv[0])
argv = sys.argv[1:]
env = {{k: os.environ[k] for k in {recorded!r} if k in os.environ}}
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"prog": prog, "argv": argv, "env": env}}) + "\\n")
if prog == "python3" and argv[:1] and argv[0].endswith("trainstack_node_helper.py"):
    os.execv(sys.executable, [sys.executable, *argv])
clock = os.environ["FAKE_LOG"] + ".clock"
if prog == "date":
    slept = int(open(clock).read()) if os.path.exists(clock) else 0
    print(int(os.environ.get("FAKE_NOW") or time.time()) + slept)
    sys.exit(0)
if prog == "sleep" and os.environ.get("FAKE_CLOCK_SLEEPS"):
    slept = int(open(clock).read()) if os.path.exists(clock) else 0
    open(clock, "w").write(str(slept + int(argv[0])))
    sys.exit(0)
if prog == "sleep":
    until = os.environ.get("FAKE_SLEEP_UNTIL")
    for _ in range(3000):
        if not until or os.path.exists(until):
            break
        time.sleep(0.01)
    sys.exit(0)
stubs = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "..", "stubs")
if prog == "python3" and argv[:1] == ["-c"]:
    paths = [os.path.join(stubs, "tf")]
    if not os.environ.get("FAKE_NO_LIBTPU"):
        paths.append(os.path.join(stubs, "libtpu"))
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.execv(sys.executable, [sys.executable, *argv])
if prog == "python3" and argv[:3] == ["-m", "pip", "freeze"]:
    print(os.environ.get("FAKE_FREEZE", "numpy==1.26.4\\ntensorflow==2.16.1"))
    sys.exit(0)
if prog == "python3" and argv[:2] == ["-m", "pip"]:
    sys.exit(1 if os.environ.get("FAKE_PIP_FAILS", "-") in argv else 0)
if prog in ("gcloud", "gsutil"):
    if prog in os.environ.get("FAKE_FAILING", "").split(","):
        sys.exit(1)
    if os.environ.get("FAKE_GCS_URL"):
        import urllib.error, urllib.parse, urllib.request
        bucket, _, name = argv[-2].removeprefix("gs://").partition("/")
        request = urllib.request.Request(
            os.environ["FAKE_GCS_URL"] + "/storage/v1/b/" + bucket + "/o/"
            + urllib.parse.quote(name, safe="") + "?alt=media",
            headers={{"Authorization": "Bearer " + os.environ["FAKE_GCS_TOKEN"]}},
        )
        try:
            data = urllib.request.urlopen(request, timeout=10).read()
        except urllib.error.HTTPError as e:
            print(f"ERROR: ({{prog}}) HTTPError {{e.code}}: {{e.read().decode()}}", file=sys.stderr)
            sys.exit(1)
        with open(argv[-1], "wb") as out:
            out.write(data)
        sys.exit(0)
    with open(argv[-1], "w") as out:
        out.write("sdist")
elif prog == "python3":
    counter = os.environ["FAKE_LOG"] + ".trainer"
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
    codes = [int(c) for c in os.environ.get("FAKE_TRAINER_EXITS", "0").split(",")]
    if os.environ.get("FAKE_TRAINER_BLOCK"):
        def stop(*_):
            open(os.environ["FAKE_LOG"] + ".signals", "a").write("SIGTERM\\n")
            print(json.dumps({{"event": "preempted", "step": 40}}), flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print(json.dumps({{"event": "start", "step": 0}}), flush=True)
        open(os.environ["FAKE_SLEEP_UNTIL"], "w").close()
        time.sleep(30)
    print(json.dumps({{"event": "done", "step": 2000}}))
    sys.exit(codes[min(n, len(codes) - 1)])
"""


TOKEN = "ya29.fake-token"


class MetadataServer(LocalServer):
    """The GCE metadata server's `computeMetadata/v1/` paths this script reads, and the
    Cloud Storage object read and create-if-absent upload of the run clock (`objects`,
    requests in `storage`) and of the run's records for the supervisor (heartbeats and the
    end record, `trainstack.trainers.common.run_records`: their uploads in `records`)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = {
            **values,
            "instance/service-accounts/default/token": json.dumps(
                {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
            ),
        }
        self.requests: list[tuple[str, str | None]] = []
        self.objects: dict[tuple[str, str], bytes] = {}
        self.storage: list[tuple[str, str]] = []
        self.records: list[tuple[str, str]] = []
        self.denied_while: Any = None
        """With a callable, object reads answer 403 while it returns True (IAM not yet
        propagated to Cloud Storage)."""
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _object(self, path: str, prefix: str) -> tuple[str, str] | None:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return None
                bucket, _, rest = path.removeprefix(prefix).partition("/o")
                return bucket, urllib.parse.unquote(rest.removeprefix("/"))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                path, _, query = self.path.partition("?")
                params = urllib.parse.parse_qs(query)
                with fake._lock:
                    name = params.get("name", [""])[0]
                    record = ".alive/" in name or name.endswith(".ended")
                    (fake.records if record else fake.storage).append(("POST", self.path))
                    key = self._object(path, "/upload/storage/v1/b/")
                    if key is None or "name" not in params:
                        return self._reply(401, b"unauthenticated")
                    key = (key[0], name)
                    if params.get("ifGenerationMatch") == ["0"] and key in fake.objects:
                        return self._reply(412, b"precondition failed")
                    fake.objects[key] = body
                return self._reply(200, b"{}")

            def do_GET(self) -> None:
                if self.path.startswith("/storage/v1/b/"):
                    with fake._lock:
                        fake.storage.append(("GET", self.path))
                    key = self._object(self.path.partition("?")[0], "/storage/v1/b/")
                    if key is None:
                        return self._reply(401, b"unauthenticated")
                    if fake.denied_while is not None and fake.denied_while():
                        return self._reply(
                            403, b"does not have storage.objects.get access to the object"
                        )
                    data = fake.objects.get(key)
                    if data is None:
                        return self._reply(404, b"no such object")
                    return self._reply(200, data)
                flavor = self.headers.get("Metadata-Flavor")
                with fake._lock:
                    fake.requests.append((self.path, flavor))
                path = self.path.removeprefix("/computeMetadata/v1/")
                if flavor != "Google":
                    status, text = 403, "Missing Metadata-Flavor:Google header"
                elif path in fake.values:
                    status, text = 200, fake.values[path]
                else:
                    status, text = 404, "not found"
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def _metadata(worker: int, endpoints: str | None = ENDPOINTS) -> dict[str, str]:
    values = {
        "instance/attributes/agent-worker-number": str(worker),
        "instance/attributes/accelerator-type": "v4-32",
        "instance/network-interfaces/0/ip": IPS[worker],
    }
    if endpoints is not None:
        values["instance/attributes/worker-network-endpoints"] = endpoints
    return values


class Worker:
    """One TPU worker VM: a state dir, fake executables and a metadata server."""

    def __init__(self, root: Path, script: str) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state = root / "state"
        self.log = root / "calls.jsonl"
        self.script = root / "startup.sh"
        self.bin.mkdir()
        self.script.write_text(script)
        fake = FAKE.format(python=sys.executable, recorded=RECORDED_ENV)
        for prog in ("gcloud", "gsutil", "python3", "sleep", "date"):
            path = self.bin / prog
            path.write_text(fake)
            path.chmod(0o755)
        tf = root / "stubs" / "tf" / "tensorflow"
        tf.mkdir(parents=True)
        (tf / "__init__.py").write_text(
            "import os\n"
            "__version__ = os.environ.get('FAKE_TF_VERSION', '2.16.1')\n"
            "if not __version__:\n"
            "    raise ImportError(\"No module named 'tensorflow'\")\n"
        )
        self.libtpu = root / "stubs" / "libtpu" / "libtpu"
        self.libtpu.mkdir(parents=True)
        (self.libtpu / "__init__.py").write_text("")
        (self.libtpu / "libtpu.so").write_text("")

    def run(self, metadata: MetadataServer, **env: str) -> subprocess.CompletedProcess[str]:
        full_env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOME": str(self.root),
            METADATA_URL_ENV: metadata.base_url + "/computeMetadata/v1",
            STATE_DIR_ENV: str(self.state),
            "FAKE_LOG": str(self.log),
            **_google(metadata),
            **env,
        }
        return subprocess.run(
            ["bash", str(self.script)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def calls(self, records: bool = False) -> list[dict[str, Any]]:
        """The recorded calls; the node helper's writes of the run's records (`alive`,
        `end`) only with `records` (`record_calls`), which the tests of them look at."""
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [c for c in calls if records or not _record_call(c)]

    def record_calls(self) -> list[list[str]]:
        """The node helper's `alive` and `end` calls, argv after the helper's path."""
        return [c["argv"][1:] for c in self.calls(records=True) if _record_call(c)]

    def argvs(self) -> list[list[str]]:
        return [[c["prog"], *c["argv"]] for c in self.calls()]


def _record_call(call: dict[str, Any]) -> bool:
    argv = call["argv"]
    helper = bool(argv) and argv[0].endswith("trainstack_node_helper.py")
    return helper and argv[1:2] in (["alive"], ["end"])


def _script(**overrides: Any) -> str:
    kwargs: dict[str, Any] = {
        "slice_name": SLICE,
        "package_uri": PACKAGE,
        "trainer_module": "trainstack.trainers.tf_multiworker",
        "trainer_args": FLAGS,
        "checkpoint_dir": CKPT,
        "expected_hosts": 4,
        "runtime_version": RUNTIME,
        **overrides,
    }
    return render_tpu_worker_script(**kwargs)


@pytest.fixture
def worker(tmp_path: Path) -> Worker:
    return Worker(tmp_path, _script())


@pytest.fixture
def worker0() -> Iterator[MetadataServer]:
    with MetadataServer(_metadata(0)) as server:
        yield server


@pytest.fixture
def worker3() -> Iterator[MetadataServer]:
    with MetadataServer(_metadata(3)) as server:
        yield server


def _downloaded(worker: Worker) -> str:
    return str(worker.state / "packages" / "trainstack_trainers-0123456789abcdef.tar.gz")


def _install_calls(worker: Worker) -> list[list[str]]:
    sdist = _downloaded(worker)
    return [
        ["gcloud", "storage", "cp", PACKAGE, sdist],
        ["python3", "-m", "pip", "freeze", "--disable-pip-version-check"],
        [
            "python3",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--constraint",
            str(worker.state / "runtime-constraints.txt"),
            sdist,
        ],
    ]


def _keras_calls(pin: str | None = "tf-keras==2.16.*") -> list[list[str]]:
    """The TensorFlow probe, then (from TF 2.16) the pinned tf-keras install without deps."""
    install = [
        "python3",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--upgrade",
        "--force-reinstall",
        "--no-deps",
        pin,
    ]
    return [["python3", *TF_PROBE], *([install] if pin else [])]


def test_worker0_installs_then_launches_the_trainer(
    worker: Worker, worker0: MetadataServer
) -> None:
    result = worker.run(worker0)
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.argvs() == [
        *_install_calls(worker),
        *_keras_calls(),
        ["python3", *TRAINER_ARGV],
    ]
    _freeze, pip, probe, keras, trainer = worker.calls()[1:]
    assert pip["env"] == {"PIP_BREAK_SYSTEM_PACKAGES": "1"}
    # The probe keeps off the chips; tf-keras goes in like the sdist (system Python).
    assert probe["env"] == {"TPU_LOAD_LIBRARY": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}
    assert keras["env"] == {"PIP_BREAK_SYSTEM_PACKAGES": "1"}
    assert trainer["env"] == TRAINER_ENV
    lines = result.stdout.splitlines()
    tag = f"[trainstack slice={SLICE} worker=0]"
    assert lines[0] == f"{tag} worker 0 of 4; coordinator (worker 0) is 10.130.0.2"
    assert (
        f"{tag} TensorFlow 2.16.1 runs Keras 2 as tf-keras: installing tf-keras==2.16.* "
        "without dependencies"
    ) in lines
    assert f"{tag} " + '{"event": "done", "step": 2000}' in lines
    launch = f"{tag} launching trainer (attempt 1/3): " + " ".join(
        shlex.quote(a) for a in ["python3", *TRAINER_ARGV]
    )
    assert launch in lines
    assert lines[-1] == f"{tag} trainer finished"
    assert all(line.startswith("[trainstack slice=") for line in lines)
    assert (worker.state / "logs" / "startup.log").read_text().splitlines() == lines
    assert {flavor for _, flavor in worker0.requests} == {"Google"}


def test_worker3_installs_and_serves_without_launching(
    worker: Worker, worker3: MetadataServer
) -> None:
    result = worker.run(worker3)
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.argvs() == _install_calls(worker)
    assert result.stdout.splitlines()[-1] == (
        f"[trainstack slice={SLICE} worker=3] serving TPU chips to the trainer on worker 0 "
        "(10.130.0.2); nothing to launch here"
    )
    assert "launching trainer" not in result.stdout


def test_rerun_after_reboot_installs_nothing_and_does_not_retrain(
    worker: Worker, worker0: MetadataServer
) -> None:
    assert worker.run(worker0).returncode == 0
    first = len(worker.calls())
    again = worker.run(worker0)
    assert again.returncode == 0
    assert len(worker.calls()) == first  # no download, no pip, no probe, no trainer
    tag = f"[trainstack slice={SLICE} worker=0]"
    assert again.stdout.splitlines()[1:] == [
        f"{tag} trainer package already installed: {PACKAGE}",
        f"{tag} this run already finished on an earlier boot; not training again",
    ]


def test_rerun_after_an_unfinished_run_relaunches_the_same_command(
    worker: Worker, worker0: MetadataServer
) -> None:
    # Every attempt of the first boot fails (e.g. preempted workers); the next boot resumes.
    failed = worker.run(worker0, FAKE_TRAINER_EXITS="1,1,1,0")
    assert failed.returncode == 1
    assert [c["argv"] for c in worker.calls() if c["prog"] == "sleep"] == [["10"], ["20"]]
    assert failed.stdout.splitlines()[-2].endswith("trainer exited with status 1")
    resumed = worker.run(worker0, FAKE_TRAINER_EXITS="1,1,1,0")
    assert resumed.returncode == 0
    trainer_runs = [c for c in worker.calls() if c["argv"][:2] == TRAINER_ARGV[:2]]
    assert [c["argv"] for c in trainer_runs] == [TRAINER_ARGV] * 4
    assert [c["prog"] for c in worker.calls()].count("gcloud") == 1
    # Each boot reads the VM's TensorFlow again; tf-keras went in once.
    assert [c["argv"] for c in worker.calls() if c["argv"][:1] == ["-c"]] == [TF_PROBE] * 2
    assert sum("tf-keras==2.16.*" in c["argv"] for c in worker.calls()) == 1
    assert "tf-keras==2.16.* already installed" in resumed.stdout


def test_only_the_last_attempt_ends_the_run_on_a_failure(
    worker: Worker, worker0: MetadataServer
) -> None:
    failed = worker.run(worker0, FAKE_TRAINER_EXITS="1,1,1")
    assert failed.returncode == 1
    trainer_runs = [c for c in worker.calls() if c["argv"][:2] == TRAINER_ARGV[:2]]
    assert [c["env"].get("TRAINSTACK_RUN_FINAL_CODES") for c in trainer_runs] == [
        None,
        None,
        "1 2 3 4 5",
    ]
    # No attempt follows on this boot: the script records the end where the node launcher
    # did not (this fake trainer writes none), created only if absent.
    assert _ended(worker0) == {
        "outcome": "failed",
        "stage": "trainer",
        "reason": "the trainer exited 1 on its last attempt (3 of 3)",
        "node_rank": 0,
    }
    assert failed.stdout.splitlines()[-1] == (
        f"{TAG0} recorded the run's end (failed: trainer) at {RECORD}.ended"
    )
    assert f"gs://p-exp-42-checkpoints/{CLOCK_OBJECT.removesuffix('.started')}" == RECORD


def test_a_running_trainer_is_left_alone(worker: Worker, worker0: MetadataServer) -> None:
    worker.state.mkdir()
    with open(worker.state / "trainer.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = worker.run(worker0)
    assert result.returncode == 0
    assert worker.argvs() == _install_calls(worker)
    assert result.stdout.splitlines()[-1] == (
        f"[trainstack slice={SLICE} worker=0] a trainer is already running on this worker; "
        "leaving it alone"
    )


# -- the run limit (max_run_seconds) ----------------------------------------------------

CLOCK_BUCKET = "p-exp-42-checkpoints"
CLOCK_OBJECT = "trainstack-run-0160ba026744d3f7.started"
CLOCK = f"gs://{CLOCK_BUCKET}/{CLOCK_OBJECT}"
NOW = 1_800_000_000
TAG0 = f"[trainstack slice={SLICE} worker=0]"


def _limited(tmp_path: Path, max_run_seconds: int = 3600) -> Worker:
    return Worker(tmp_path, _script(max_run_seconds=max_run_seconds))


def _google(server: MetadataServer) -> dict[str, str]:
    """The node helper's endpoints: this server for the metadata and Cloud Storage."""
    return {
        "GCE_METADATA_HOST": server.base_url.removeprefix("http://"),
        "STORAGE_EMULATOR_HOST": server.base_url,
    }


def _ended(server: MetadataServer) -> dict[str, Any]:
    """The run's end record the script wrote, but for its time (checked for its form)."""
    bucket, _, name = RECORD.removeprefix("gs://").partition("/")
    record: dict[str, Any] = json.loads(server.objects[(bucket, f"{name}.ended")])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.pop("time"))
    return record


def _helper_call(worker: Worker) -> list[str]:
    return ["python3", str(worker.state / "trainstack_node_helper.py"), "run-started", CLOCK]


def test_the_run_clock_is_named_per_run_beside_the_checkpoints() -> None:
    assert run_clock(SLICE, PACKAGE, ["python3", *TRAINER_ARGV], CKPT) == CLOCK
    other = run_clock(SLICE, PACKAGE, ["python3", *TRAINER_ARGV], "gs://other-bucket/run-7")
    assert other == f"gs://other-bucket/{CLOCK_OBJECT}"
    again = run_clock(SLICE, PACKAGE.replace("0123", "4567"), ["python3", *TRAINER_ARGV], CKPT)
    assert again == f"gs://{CLOCK_BUCKET}/trainstack-run-31b85be757048dd9.started"


def test_the_deadline_stops_the_trainer_and_exits_0_without_a_retry(
    tmp_path: Path, worker0: MetadataServer
) -> None:
    worker = _limited(tmp_path)
    worker0.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] = str(NOW - 600).encode()
    ready = tmp_path / "trainer-ready"
    result = worker.run(
        worker0,
        **_google(worker0),
        FAKE_NOW=str(NOW),
        FAKE_TRAINER_BLOCK="1",
        FAKE_SLEEP_UNTIL=str(ready),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [a for a in worker.argvs() if a[0] != "sleep"] == [
        _helper_call(worker),
        ["date", "+%s"],
        *_install_calls(worker),
        *_keras_calls(),
        ["date", "+%s"],
        ["python3", *TRAINER_ARGV],
    ]
    assert [a for a in worker.argvs() if a[0] == "sleep"] == [["sleep", "3000"]]
    assert (tmp_path / "calls.jsonl.signals").read_text() == "SIGTERM\n"
    lines = result.stdout.splitlines()
    assert lines[1] == (
        f"{TAG0} run limit: 3000s of 3600s left (the run started at {NOW - 600}, "
        f"recorded at {CLOCK})"
    )
    launch = f"{TAG0} launching trainer (attempt 1/3): " + " ".join(
        shlex.quote(a) for a in ["python3", *TRAINER_ARGV]
    )
    assert lines[-4:] == [
        launch,
        f"{TAG0} " + '{"event": "start", "step": 0}',
        f"{TAG0} " + '{"event": "preempted", "step": 40}',
        f"{TAG0} max_run_hours reached: stopped the trainer after 3600s of the run "
        "(trainer exit 143); the newest checkpoint holds its state",
    ]
    assert not list(worker.state.glob("done-*"))  # not finished: status shows the checkpoint
    assert worker0.storage == [("GET", f"/storage/v1/b/{CLOCK_BUCKET}/o/{CLOCK_OBJECT}?alt=media")]


def test_a_start_after_the_deadline_exits_0_at_once(
    tmp_path: Path, worker0: MetadataServer
) -> None:
    worker = _limited(tmp_path)
    worker0.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] = str(NOW - 3600).encode()
    result = worker.run(worker0, **_google(worker0), FAKE_NOW=str(NOW))
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.argvs() == [_helper_call(worker), ["date", "+%s"]]  # nothing installed
    assert result.stdout.splitlines()[1:] == [
        f"{TAG0} max_run_hours reached: 3600s since the run started (limit 3600s); not starting"
    ]
    assert worker0.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] == str(NOW - 3600).encode()
    assert [method for method, _ in worker0.storage] == ["GET"]


def test_the_first_start_records_the_clock_once(
    tmp_path: Path, worker0: MetadataServer, worker3: MetadataServer
) -> None:
    worker = _limited(tmp_path)
    # The timer's sleep lasts until the script stops it after the trainer finished.
    far = {**_google(worker0), "FAKE_SLEEP_UNTIL": str(tmp_path / "never")}
    before = int(time.time())
    first = worker.run(worker0, **far)
    after = int(time.time())
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.splitlines()[-1] == f"{TAG0} trainer finished"
    recorded = worker0.objects[(CLOCK_BUCKET, CLOCK_OBJECT)]
    assert before <= int(recorded.decode()) <= after
    get = ("GET", f"/storage/v1/b/{CLOCK_BUCKET}/o/{CLOCK_OBJECT}?alt=media")
    post = (
        "POST",
        f"/upload/storage/v1/b/{CLOCK_BUCKET}/o?uploadType=media&name={CLOCK_OBJECT}"
        "&ifGenerationMatch=0",
    )
    assert worker0.storage == [get, post, get]
    # A reboot reads the same clock and writes nothing; a serving worker never reads it.
    again = worker.run(worker0, **far)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == (
        f"{TAG0} this run already finished on an earlier boot; not training again"
    )
    assert worker0.storage == [get, post, get, get]
    assert worker0.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] == recorded
    (tmp_path / "w3").mkdir()
    serving = Worker(tmp_path / "w3", _script(max_run_seconds=3600))
    assert serving.run(worker3, **_google(worker3)).returncode == 0
    assert worker3.storage == []


def test_download_falls_back_to_gsutil(worker: Worker, worker3: MetadataServer) -> None:
    result = worker.run(worker3, FAKE_FAILING="gcloud")
    assert result.returncode == 0, result.stdout + result.stderr
    sdist = _downloaded(worker)
    assert worker.argvs()[:2] == [
        ["gcloud", "storage", "cp", PACKAGE, sdist],
        ["gsutil", "cp", PACKAGE, sdist],
    ]


# The waits of the package download: doubling from retry_delay_s (10) up to 60 s, until
# 900 s have passed since the first failure (a grant takes up to ~7 minutes to propagate).
DOWNLOAD_WAITS = [10, 20, 40, *[60] * 14]
"""Attempt n fails at sum(DOWNLOAD_WAITS[:n-1]) s: 0, 10, 30, 70, 130, ..., 850, 910."""


def _slept(worker: Worker) -> list[int]:
    return [int(a[1]) for a in worker.argvs() if a[0] == "sleep"]


def test_download_failures_are_retried_for_15_minutes_then_fatal(
    worker: Worker, worker3: MetadataServer
) -> None:
    result = worker.run(
        worker3, FAKE_FAILING="gcloud,gsutil", FAKE_CLOCK_SLEEPS="1", FAKE_NOW="1700000000"
    )
    assert result.returncode == 1
    assert _slept(worker) == DOWNLOAD_WAITS
    assert sum(DOWNLOAD_WAITS) == 910
    lines = result.stdout.splitlines()
    prefix = f"[trainstack slice={SLICE} worker=3]"
    assert lines[-2:] == [
        f"{prefix} giving up on the package download after 18 attempts over 910s",
        f"{prefix} ERROR: cannot download {PACKAGE}",
    ]
    assert lines[-3] == (
        f"{prefix} package download attempt 17 failed (850s of 900s); retrying in 60s: a new "
        "grant of the training account can take up to 7 minutes to reach Cloud Storage"
    )


def test_a_403_while_the_grant_propagates_is_waited_out(
    worker: Worker, worker3: MetadataServer
) -> None:
    """Cloud Storage refuses the new account for 7 minutes of the fake clock (the sleeps the
    script took); the download then succeeds and the worker installs as usual."""
    clock = Path(str(worker.log) + ".clock")
    worker3.denied_while = lambda: int(clock.read_text() if clock.exists() else 0) < 7 * 60
    bucket, _, name = PACKAGE.removeprefix("gs://").partition("/")
    worker3.objects[(bucket, name)] = b"the sdist"
    result = worker.run(
        worker3,
        FAKE_CLOCK_SLEEPS="1",
        FAKE_NOW="1700000000",
        FAKE_GCS_URL=worker3.base_url,
        FAKE_GCS_TOKEN=TOKEN,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Failures at 0, 10, 30, 70, 130, 190, 250, 310, 370 s; the 10th attempt, at 430 s, works.
    assert _slept(worker) == DOWNLOAD_WAITS[:9]
    object_get = f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
    assert worker3.storage == [("GET", object_get)] * (9 * 2 + 1)
    assert Path(_downloaded(worker)).read_bytes() == b"the sdist"
    prefix = f"[trainstack slice={SLICE} worker=3]"
    progress = [line for line in result.stdout.splitlines() if "package download" in line]
    assert progress[0] == (
        f"{prefix} package download attempt 1 failed (0s of 900s); retrying in 10s: a new "
        "grant of the training account can take up to 7 minutes to reach Cloud Storage"
    )
    assert [p.split("(")[1].split(")")[0] for p in progress[:-1]] == [
        f"{t}s of 900s" for t in (0, 10, 30, 70, 130, 190, 250, 310, 370)
    ]
    assert progress[-1] == f"{prefix} package downloaded on attempt 10"
    assert "HTTPError 403" in result.stderr


def test_missing_endpoints_on_a_multi_host_slice_is_an_error(worker: Worker) -> None:
    with MetadataServer(_metadata(0, endpoints=None)) as server:
        result = worker.run(server)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "[trainstack slice=exp-42-tpu worker=?] ERROR: metadata has no "
        "worker-network-endpoints on a slice of 4 workers"
    ]
    assert worker.calls() == []


def test_a_worker_id_outside_the_slice_is_an_error(worker: Worker) -> None:
    with MetadataServer({**_metadata(0), "instance/attributes/agent-worker-number": "4"}) as server:
        result = worker.run(server)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "[trainstack slice=exp-42-tpu worker=?] ERROR: agent-worker-number '4' is not a "
        "worker index below 4"
    ]


def test_more_workers_than_the_catalog_says_are_used_and_reported(
    worker: Worker,
) -> None:
    two = "unknown:unknown:10.130.0.2,unknown:unknown:10.130.0.3"
    with MetadataServer(_metadata(0, endpoints=two)) as server:
        result = worker.run(server)
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == (
        "[trainstack slice=exp-42-tpu worker=0] WARNING: the catalog expects 4 workers but "
        "metadata lists 2; using the metadata"
    )
    assert worker.calls()[-1]["env"]["TPU_WORKER_HOSTNAMES"] == "10.130.0.2,10.130.0.3"


def test_single_host_uses_the_vm_ip_and_loads_libtpu(tmp_path: Path) -> None:
    # A v4-8 on a stream-executor runtime: TPU_NAME=local (Google's harness), no PJRT env.
    worker = Worker(tmp_path, _script(expected_hosts=1, runtime_version="tpu-vm-tf-2.16.0-se"))
    with MetadataServer({"instance/network-interfaces/0/ip": "10.130.0.9"}) as server:
        result = worker.run(server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.calls()[-1]["env"] == {
        "TPU_NAME": "local",
        "TPU_WORKER_ID": "0",
        "TPU_WORKER_HOSTNAMES": "10.130.0.9",
        "PYTHONUNBUFFERED": "1",
        "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
        "TRAINSTACK_TPU_NODE_ID": SLICE,
        "TRAINSTACK_RUN_RECORD": RECORD,
    }


def _single_host_pjrt(tmp_path: Path, **env: str) -> tuple[Worker, str]:
    worker = Worker(tmp_path, _script(expected_hosts=1, runtime_version="tpu-vm-tf-2.18.0-pjrt"))
    with MetadataServer({"instance/network-interfaces/0/ip": "10.130.0.9"}) as server:
        result = worker.run(server, FAKE_TF_VERSION="2.18.0", **env)
    assert result.returncode == 0, result.stdout + result.stderr
    return worker, result.stdout


def test_single_host_pjrt_gets_the_pluggable_device_environment(tmp_path: Path) -> None:
    worker, _ = _single_host_pjrt(tmp_path)
    assert worker.argvs()[-4:] == [
        *_keras_calls("tf-keras==2.18.*"),
        ["python3", *LIBTPU_PROBE],
        ["python3", *TRAINER_ARGV],
    ]
    assert worker.calls()[-1]["env"] == {
        "TPU_NAME": "local",
        "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": str(worker.libtpu / "libtpu.so"),
        "TPU_WORKER_ID": "0",
        "TPU_WORKER_HOSTNAMES": "10.130.0.9",
        "PYTHONUNBUFFERED": "1",
        "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
        "TRAINSTACK_TPU_NODE_ID": SLICE,
        "TRAINSTACK_RUN_RECORD": RECORD,
    }


def test_single_host_pjrt_without_libtpu_warns_and_leaves_the_path_unset(
    tmp_path: Path,
) -> None:
    # /lib/libtpu.so, the other place the script looks, is absent on this machine too.
    assert not Path("/lib/libtpu.so").exists()
    worker, stdout = _single_host_pjrt(tmp_path, FAKE_NO_LIBTPU="1")
    assert "TF_PLUGGABLE_DEVICE_LIBRARY_PATH" not in worker.calls()[-1]["env"]
    assert worker.calls()[-1]["env"]["NEXT_PLUGGABLE_DEVICE_USE_C_API"] == "true"
    assert (
        "[trainstack slice=exp-42-tpu worker=0] WARNING: no libtpu.so (no libtpu package for "
        "python3, no /lib/libtpu.so); TF_PLUGGABLE_DEVICE_LIBRARY_PATH left unset"
    ) in stdout.splitlines()


# -- Keras per TensorFlow version ---------------------------------------------------------


def test_tensorflow_before_2_16_installs_no_tf_keras(tmp_path: Path) -> None:
    # The prod-tpu-v4-32 stack's runtime: TF 2.14 has Keras 2 built in.
    worker = Worker(tmp_path, _script(runtime_version="tpu-vm-tf-2.14.1-pod"))
    with MetadataServer(_metadata(0)) as server:
        result = worker.run(server, FAKE_TF_VERSION="2.14.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.argvs() == [
        *_install_calls(worker),
        *_keras_calls(None),
        ["python3", *TRAINER_ARGV],
    ]
    assert (
        f"[trainstack slice={SLICE} worker=0] TensorFlow 2.14.1 has Keras 2 built in; nothing "
        "to install"
    ) in result.stdout.splitlines()


def test_the_vms_tensorflow_decides_the_pin(worker: Worker, worker0: MetadataServer) -> None:
    # The runtime's name says 2.16 but its Python has 2.17: tf-keras follows the Python.
    result = worker.run(worker0, FAKE_TF_VERSION="2.17.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.argvs()[3:5] == _keras_calls("tf-keras==2.17.*")
    assert (
        f"[trainstack slice={SLICE} worker=0] WARNING: runtime {RUNTIME} names TensorFlow 2.16 "
        "but python3 has TensorFlow 2.17.1; matching Keras to 2.17.1"
    ) in result.stdout.splitlines()


def test_no_tensorflow_stops_before_the_trainer(worker: Worker, worker0: MetadataServer) -> None:
    result = worker.run(worker0, FAKE_TF_VERSION="")
    assert result.returncode == 1
    assert worker.argvs() == [*_install_calls(worker), ["python3", *TF_PROBE]]
    reason = (
        f"cannot import TensorFlow with python3; runtime {RUNTIME} should ship TensorFlow "
        "2.16, which the trainer needs"
    )
    assert result.stdout.splitlines()[-2:] == [
        f"{TAG0} ERROR: {reason}",
        f"{TAG0} recorded the run's end (failed: startup) at {RECORD}.ended",
    ]
    assert _ended(worker0) == {
        "outcome": "failed",
        "stage": "startup",
        "reason": reason,
        "node_rank": 0,
    }


def test_a_failed_tf_keras_install_is_retried_then_fatal(
    worker: Worker, worker0: MetadataServer
) -> None:
    result = worker.run(worker0, FAKE_PIP_FAILS="tf-keras==2.16.*")
    assert result.returncode == 1
    install = _keras_calls()[1]
    assert worker.argvs()[3:] == [
        ["python3", *TF_PROBE],
        install,
        ["sleep", "10"],
        install,
        ["sleep", "20"],
        install,
    ]
    assert result.stdout.splitlines()[-2:] == [
        f"{TAG0} ERROR: pip could not install tf-keras==2.16.*",
        f"{TAG0} recorded the run's end (failed: package_install) at {RECORD}.ended",
    ]
    assert _ended(worker0)["stage"] == "package_install"


# -- rendering --------------------------------------------------------------------------


def test_rendered_values_are_quoted_and_the_script_parses() -> None:
    script = _script(trainer_args=["--run_name=it's a run", "--steps=5"])
    assert "readonly TS_SLICE_NAME=exp-42-tpu\n" in script
    assert (
        "readonly TS_TRAINER_ARGS=(--checkpoint_dir=gs://p-exp-42-checkpoints/checkpoints "
        "'--run_name=it'\"'\"'s a run' --steps=5)\n"
    ) in script
    assert (
        "readonly TS_RUNTIME_VERSION=tpu-vm-tf-2.16.0-pod-pjrt\n"
        "readonly TS_RUNTIME_TF_MINOR=2.16\n"
        "readonly TS_DEVICE_API=pjrt\n"
        "readonly TS_TF_KERAS_FROM=2.16\n"
    ) in script
    assert "readonly TS_DEVICE_API=''\n" in _script(runtime_version="tpu-vm-tf-2.14.1-pod")
    assert "@@" not in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_the_run_limit_goes_into_the_script_only_when_set_and_the_node_helper_always() -> None:
    helper = Path("components/gpu_startup/node_helper.py").read_text().rstrip("\n")
    limited = _script(max_run_seconds=3600)
    assert "readonly TS_MAX_RUN_SECONDS=3600\n" in limited
    assert f"readonly TS_RUN_CLOCK_URI={CLOCK}\n" in limited
    assert f"<<'TRAINSTACK_HELPER_EOF'\n{helper}\nTRAINSTACK_HELPER_EOF\n" in limited
    subprocess.run(["bash", "-n"], input=limited, text=True, check=True)
    plain = _script()
    assert "readonly TS_MAX_RUN_SECONDS=''\nreadonly TS_RUN_CLOCK_URI=''\n" in plain
    # The run's records (heartbeats, the end) go through it with or without a limit.
    assert f"<<'TRAINSTACK_HELPER_EOF'\n{helper}\nTRAINSTACK_HELPER_EOF\n" in plain


def test_a_checkpoint_dir_flag_replaces_the_default() -> None:
    flags = ["--checkpoint_dir=gs://other-bucket/run-7", "--steps=5"]
    assert trainer_command("trainstack.trainers.tf_multiworker", flags, CKPT) == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "--launcher=node",
        "trainstack.trainers.tf_multiworker",
        *flags,
    ]
    assert effective_checkpoint_dir(flags, CKPT) == "gs://other-bucket/run-7"
    assert effective_checkpoint_dir(["--steps=5"], CKPT) == CKPT


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"package_uri": "/tmp/t.tar.gz"},
            "package_uri: '/tmp/t.tar.gz' is not a gs://bucket/object URI of the trainer sdist",
        ),
        (
            {"checkpoint_dir": "/mnt/ckpt"},
            "checkpoint_dir: '/mnt/ckpt' is not a gs:// URL; a TPU VM's disk does not "
            "survive preemption, so checkpoints must go to Cloud Storage",
        ),
        (
            {"trainer_args": ["--checkpoint_dir=/tmp/x"]},
            "trainer_args: --checkpoint_dir='/tmp/x' is not a gs:// URL; a TPU VM's disk "
            "does not survive preemption, so checkpoints must go to Cloud Storage",
        ),
        (
            {"trainer_args": ["--hf_token=abc"]},
            "trainer_args[0]: '--hf_token' looks like a credential; the startup script is "
            "instance metadata, readable by anyone who can view the TPU node. Give the "
            "trainer a Secret Manager name instead and let it read the value with its "
            "service account",
        ),
        (
            {"trainer_args": ["steps=5"]},
            "trainer_args[0]: 'steps=5' is not a single-line '--key=value' flag",
        ),
        (
            {"trainer_module": "trainers/tf"},
            "trainer_module: 'trainers/tf' is not a Python module name such as "
            "'trainstack.trainers.tf_multiworker'",
        ),
        (
            {"slice_name": "Exp_42"},
            "slice_name: 'Exp_42' is not a TPU node name (a lowercase letter, then up to 62 "
            "of a-z, 0-9 and '-', not ending with '-')",
        ),
        ({"expected_hosts": 0}, "expected_hosts: got 0; valid: an integer >= 1"),
        ({"max_run_seconds": 0}, "max_run_seconds: got 0; valid: an integer >= 1"),
        ({"max_run_seconds": True}, "max_run_seconds: got True; valid: an integer >= 1"),
        ({"max_run_seconds": 1.5}, "max_run_seconds: got 1.5; valid: an integer >= 1"),
        (
            {"runtime_version": "tpu-ubuntu2204-base"},
            "runtime_version: 'tpu-ubuntu2204-base' is not a TensorFlow TPU runtime, which the "
            "trainer needs; valid: tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se]",
        ),
    ],
)
def test_render_refuses_bad_values(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        _script(**overrides)
    assert str(info.value) == message


# -- the runtime's packages as constraints -----------------------------------------------


def test_the_package_installs_against_the_runtimes_frozen_packages(
    worker: Worker, worker3: MetadataServer
) -> None:
    frozen = (
        "absl-py==2.1.0\n"
        "-e git+https://example.com/x.git@abc#egg=x\n"
        "numpy==1.26.4\n"
        "libtpu @ file:///tmp/libtpu.whl\n"
        "tensorflow==2.16.1"
    )
    result = worker.run(worker3, FAKE_FREEZE=frozen)
    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.argvs() == _install_calls(worker)
    # Only name==version lines can be constraints; editable and URL entries are left out.
    constraints = worker.state / "runtime-constraints.txt"
    assert constraints.read_text() == "absl-py==2.1.0\nnumpy==1.26.4\ntensorflow==2.16.1\n"
    assert (
        f"[trainstack slice={SLICE} worker=3] runtime packages frozen as install constraints: "
        f"3 pins in {constraints}"
    ) in result.stdout.splitlines()


def test_the_constraints_are_frozen_once_before_anything_is_installed(
    worker: Worker, worker3: MetadataServer
) -> None:
    (worker.state).mkdir()
    (worker.state / "runtime-constraints.txt").write_text("numpy==1.26.4\n")
    result = worker.run(worker3, FAKE_FREEZE="numpy==2.1.0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ["python3", "-m", "pip", "freeze", "--disable-pip-version-check"] not in (worker.argvs())
    assert (worker.state / "runtime-constraints.txt").read_text() == "numpy==1.26.4\n"


def test_an_install_that_would_replace_a_runtime_package_fails_loudly(
    worker: Worker, worker3: MetadataServer
) -> None:
    # pip exits 1 when the sdist's floors (numpy>=2) conflict with a constraint.
    result = worker.run(worker3, FAKE_PIP_FAILS=_downloaded(worker))
    assert result.returncode == 1
    install = _install_calls(worker)[2]
    assert worker.argvs()[2:] == [install, ["sleep", "10"], install, ["sleep", "20"], install]
    constraints = worker.state / "runtime-constraints.txt"
    # Worker 3 only serves its chips: the trainer on worker 0 goes on, nothing is recorded.
    assert result.stdout.splitlines()[-1] == (
        f"[trainstack slice={SLICE} worker=3] ERROR: pip could not install {PACKAGE} "
        f"(the runtime's own packages are constraints: {constraints})"
    )
    assert worker.record_calls() == []


# -- your own code -----------------------------------------------------------------------

NODE_ARGS = [
    "--launcher=node",
    f"--env=TRAINSTACK_CHECKPOINT_DIR={CKPT}",
    "--secret-env=HF_TOKEN=projects/p/secrets/hf-token",
    "--",
    "python",
    "train.py",
    "--steps=10",
]
USER_CODE_ENV = {
    "TPU_WORKER_ID": "3",
    "TPU_WORKER_HOSTNAMES": ",".join(IPS),
    "PYTHONUNBUFFERED": "1",
    "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
    "TRAINSTACK_TPU_NODE_ID": SLICE,
    # Your code's run is keyed by its own command.
    "TRAINSTACK_RUN_RECORD": slice_run_record(
        slice_name=SLICE,
        package_uri=PACKAGE,
        trainer_module="",
        trainer_args=[],
        checkpoint_dir=CKPT,
        node_args=NODE_ARGS,
    ),
}


def test_user_code_runs_on_every_worker_without_the_tensorflow_setup(
    tmp_path: Path, worker3: MetadataServer
) -> None:
    worker = Worker(tmp_path, _script(runtime_version="tpu-ubuntu2204-base", node_args=NODE_ARGS))
    result = worker.run(worker3)
    assert result.returncode == 0, result.stdout + result.stderr
    # Worker 3 launches too; no TensorFlow probe, no tf-keras, no TPU_LOAD_LIBRARY.
    assert worker.argvs() == [
        *_install_calls(worker),
        ["python3", "-m", "trainstack.trainers.node", *NODE_ARGS],
    ]
    assert worker.calls()[-1]["env"] == USER_CODE_ENV
    assert "serving TPU chips" not in result.stdout
    # The logged command line names each --env variable without its value (defence in
    # depth: a stack's credentials travel as --secret-env names).
    tag = f"[trainstack slice={SLICE} worker=3]"
    assert [line for line in result.stdout.splitlines() if "launching trainer" in line] == [
        f"{tag} launching trainer (attempt 1/3): python3 -m trainstack.trainers.node "
        "--launcher=node --env=TRAINSTACK_CHECKPOINT_DIR=*** "
        "--secret-env=HF_TOKEN=projects/p/secrets/hf-token -- python train.py --steps=10"
    ]
    assert CKPT not in "".join(x for x in result.stdout.splitlines() if "launching" in x)


def test_user_code_command_and_rendering() -> None:
    assert user_code_command(NODE_ARGS) == ["python3", "-m", "trainstack.trainers.node", *NODE_ARGS]
    script = _script(runtime_version="tpu-ubuntu2204-base", node_args=NODE_ARGS)
    assert "readonly TS_USER_CODE=1\n" in script
    assert "readonly TS_RUNTIME_TF_MINOR=''\nreadonly TS_DEVICE_API=''\n" in script
    assert (
        "readonly TS_TRAINER_ARGS=(--launcher=node "
        f"--env=TRAINSTACK_CHECKPOINT_DIR={CKPT} "
        "--secret-env=HF_TOKEN=projects/p/secrets/hf-token -- python train.py --steps=10)\n"
    ) in script
    assert "readonly TS_USER_CODE=0\n" in _script()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


@pytest.mark.parametrize(
    ("node_args", "message"),
    [
        ("--launcher=node", "node_args: got '--launcher=node'; valid: a list of strings"),
        (["--", "python", "a\nb"], "node_args[2]: 'a\\nb' is not a single-line string"),
        (
            ["--launcher=node", "python"],
            "node_args: ['--launcher=node', 'python'] has no '-- ARGV' (your entrypoint)",
        ),
    ],
)
def test_render_refuses_bad_node_args(node_args: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        _script(node_args=node_args)
    assert str(info.value) == message


def test_a_403_on_the_run_clock_is_waited_out_like_the_download(
    tmp_path: Path, worker0: MetadataServer
) -> None:
    """The run limit's clock sits in the checkpoint bucket, whose grant is as new as the
    staging bucket's: Cloud Storage refuses it for the first 60 s of the fake clock, and the
    script waits as it does for the package instead of leaving the slice idle."""
    worker = _limited(tmp_path)
    clock = Path(str(worker.log) + ".clock")
    worker0.denied_while = lambda: int(clock.read_text() if clock.exists() else 0) < 60
    worker0.objects[(CLOCK_BUCKET, CLOCK_OBJECT)] = str(NOW - 3570).encode()
    result = worker.run(worker0, **_google(worker0), FAKE_NOW=str(NOW), FAKE_CLOCK_SLEEPS="1")
    assert result.returncode == 0, result.stdout + result.stderr
    # Failures at 0, 10 and 30 s; the 4th read, at 70 s, finds the clock: 3640 s gone.
    assert _slept(worker) == DOWNLOAD_WAITS[:3]
    get = ("GET", f"/storage/v1/b/{CLOCK_BUCKET}/o/{CLOCK_OBJECT}?alt=media")
    assert worker0.storage == [get] * 4
    hint = "a new grant of the training account can take up to 7 minutes to reach Cloud Storage"
    assert result.stdout.splitlines()[1:] == [
        f"{TAG0} run clock read attempt 1 failed (0s of 900s); retrying in 10s: {hint}",
        f"{TAG0} run clock read attempt 2 failed (10s of 900s); retrying in 20s: {hint}",
        f"{TAG0} run clock read attempt 3 failed (30s of 900s); retrying in 40s: {hint}",
        f"{TAG0} run clock read on attempt 4",
        f"{TAG0} max_run_hours reached: 3640s since the run started (limit 3600s); not starting",
    ]
    assert "HTTP Error 403" in result.stderr


# -- the run's records for the supervisor -------------------------------------------------


def test_a_launching_worker_writes_its_heartbeat_as_it_starts_and_installs(
    worker: Worker, worker0: MetadataServer
) -> None:
    assert worker.run(worker0).returncode == 0
    assert worker.record_calls() == [
        ["alive", RECORD, "0", "startup"],
        ["alive", RECORD, "0", "package_download"],
    ]
    bucket, _, name = RECORD.removeprefix("gs://").partition("/")
    beat = json.loads(worker0.objects[(bucket, f"{name}.alive/0")])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", beat.pop("time"))
    assert beat == {"node_rank": 0, "stage": "package_download"}
    assert (bucket, f"{name}.ended") not in worker0.objects  # a finished run: rank 0's own


def test_a_worker_that_only_serves_its_chips_keeps_no_records(
    worker: Worker, worker3: MetadataServer
) -> None:
    assert worker.run(worker3).returncode == 0
    assert (worker.record_calls(), worker3.records) == ([], [])


def test_a_failed_package_download_ends_the_run_once_its_window_has_passed(
    worker: Worker, worker0: MetadataServer
) -> None:
    result = worker.run(
        worker0, FAKE_FAILING="gcloud,gsutil", FAKE_CLOCK_SLEEPS="1", FAKE_NOW=str(NOW)
    )
    assert result.returncode == 1
    assert _ended(worker0) == {
        "outcome": "failed",
        "stage": "package_download",
        "reason": f"cannot download {PACKAGE}",
        "node_rank": 0,
    }
    # A record that is there already (here: this one) is kept, not replaced.
    first = worker0.objects[(CLOCK_BUCKET, f"{RECORD.rsplit('/', 1)[1]}.ended")]
    again = worker.run(
        worker0, FAKE_FAILING="gcloud,gsutil", FAKE_CLOCK_SLEEPS="1", FAKE_NOW=str(NOW)
    )
    assert again.returncode == 1
    assert again.stdout.splitlines()[-1] == (
        f"{TAG0} the run's end was recorded before at {RECORD}.ended; kept"
    )
    assert worker0.objects[(CLOCK_BUCKET, f"{RECORD.rsplit('/', 1)[1]}.ended")] == first

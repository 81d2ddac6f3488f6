"""The TPU supervisor as Cloud Functions runs it: Google's `functions-framework` serving the
exact source zip the dev-tpu-v5e plan uploads, against the TPU fake, the metadata server
fake and the GCS emulator (about 25 s: one emulator, one framework process per test)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

# The emulator has no gRPC endpoint for gcsfs's bucket-type probe (trainers/common/storage.py).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
import fsspec

from tests import REPO_ROOT
from tests.bundled import bundled_plan
from tests.fakes.gcs_emulator import free_port, running_gcs_emulator
from tests.fakes.metadata_fake import MetadataFake
from tests.fakes.tpu_server import TpuFakeServer
from trainstack.infra.plan import build_plan, load_stack

STACK = "dev-tpu-v5e"
BUCKET = "my-ml-project-dev-tpu-v5e-checkpoints"
NODE = "projects/my-ml-project/locations/us-west4-a/nodes/dev-tpu-v5e-tpu"
SA = "dev-tpu-v5e-sup@my-ml-project.iam.gserviceaccount.com"
STATE = f"my-ml-project-{STACK}-supervisor"
"""The supervisor's own bucket (its state, events and the marker Pulumi writes)."""
EVENTS = f"{STATE}/events.jsonl"
QUEUED_STACK = "dev-tpu-v5e-queued"
QUEUED_STATE = f"my-ml-project-{QUEUED_STACK}-supervisor"
QUEUED = f"projects/my-ml-project/locations/us-west4-a/queuedResources/{QUEUED_STACK}-tpu-qr"
QUEUED_NODE = f"projects/my-ml-project/locations/us-west4-a/nodes/{QUEUED_STACK}-tpu"


def _planned_source(tmp: Path, plan: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The zip the plan's BucketObject uploads, extracted; and its config.json."""
    (source,) = [
        r["inputs"]["source"]["fileAsset"]
        for r in plan["resources"]
        if r["name"] == f"{plan['stack']}-supervisor-source"
    ]
    folder = tmp / "source"
    with zipfile.ZipFile(REPO_ROOT / source) as bundle:
        names = ["config.json", "main.py", "requirements.txt", "supervisor_store.py"]
        names += ["supervisor_targets.py"]
        assert sorted(bundle.namelist()) == names
        bundle.extractall(folder)
    return folder, json.loads((folder / "config.json").read_text())


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return _planned_source(tmp_path_factory.mktemp("supervisor"), bundled_plan(STACK))


@pytest.fixture(scope="module")
def queued_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The bundle of dev-tpu-v5e planned with `tpu.provisioning: queued`."""
    _, config = load_stack(STACK, None)
    config = copy.deepcopy(config)
    config["trainstack:tpu"]["provisioning"] = "queued"
    plan = build_plan(QUEUED_STACK, config)
    return _planned_source(tmp_path_factory.mktemp("queued"), plan)


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator(bucket=BUCKET) as url:
        yield url


class Function:
    """`functions-framework --target supervise` in the source folder, as the runtime starts it."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        argv = [sys.executable, "-m", "functions_framework", "--target", "supervise"]
        argv += ["--source", str(folder / "main.py"), "--port", str(self.port)]
        argv += ["--host", "127.0.0.1"]
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "GCE_"))}
        # Its stdout is what Cloud Run sends to Cloud Logging (`printed`).
        self.stdout = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by stop)
        self.proc: subprocess.Popen[str] = subprocess.Popen(
            argv,
            cwd=folder,
            env={**clean, **env},
            stdout=self.stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        self.stop()
        raise AssertionError("functions-framework did not start")

    def call(self, status: int = 200) -> dict[str, Any]:
        """One scheduled call's answer, which must come with HTTP `status`."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/", method="POST", data=b"")
        try:
            answer = urllib.request.urlopen(request, timeout=60)
        except urllib.error.HTTPError as err:
            if err.code == status:
                with err:
                    failed: dict[str, Any] = json.loads(err.read())
                    return failed
            self.stop()
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"the function failed:\n{stderr[-1200:]}") from None
        with answer:
            assert answer.status == status
            result: dict[str, Any] = json.loads(answer.read())
            return result

    def printed(self) -> list[str]:
        """The lines the function has printed on stdout so far."""
        self.stdout.seek(0)
        return self.stdout.read().splitlines()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.stdout.close()


World = tuple[Function, TpuFakeServer, dict[str, Any], Any]


@pytest.fixture
def world(source: tuple[Path, dict[str, Any]], gcs: str) -> Iterator[World]:
    with _world(source, gcs, STATE) as running:
        yield running


@pytest.fixture
def queued_world(queued_source: tuple[Path, dict[str, Any]], gcs: str) -> Iterator[World]:
    with _world(queued_source, gcs, QUEUED_STATE) as running:
        yield running


def state_bucket(fs: Any, bucket: str, armed: bool = True) -> None:
    """The supervisor's bucket as `pulumi up` leaves it: empty but for the marker it writes
    after the compute (`RunSupervisor.arm`)."""
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for leftover in fs.find(bucket):
        fs.rm(leftover)
    if armed:
        fs.pipe_file(f"{bucket}/armed", b"Pulumi holds the stack's compute.\n")


@contextlib.contextmanager
def _world(source: tuple[Path, dict[str, Any]], gcs: str, bucket: str) -> Iterator[World]:
    folder, config = source
    assert config["state_uri"] == f"gs://{bucket}"
    fs = fsspec.filesystem("gcs", endpoint_url=gcs, token="anon")
    state_bucket(fs, bucket)
    values = {"instance/service-accounts/default/": json.dumps({"email": SA, "scopes": []})}
    with TpuFakeServer() as tpu, MetadataFake(values) as metadata:
        env = {
            "GCE_METADATA_HOST": metadata.host,
            "GCE_METADATA_IP": metadata.host,
            "STORAGE_EMULATOR_HOST": gcs,
            "TRAINSTACK_TPU_API_ENDPOINT": tpu.endpoint,
        }
        function = Function(folder, env)
        try:
            yield function, tpu, config, fs
        finally:
            function.stop()


def _events(fs: Any, path: str = EVENTS) -> list[dict[str, Any]]:
    fs.invalidate_cache()
    if not fs.exists(path):
        return []
    return [json.loads(line) for line in fs.cat_file(path).decode().splitlines()]


def _ready_node(tpu: TpuFakeServer, config: dict[str, Any]) -> None:
    tpu.nodes[NODE] = {**config["body"], "name": NODE, "state": "READY"}


def test_the_bundle_recreates_the_planned_spot_node(source: tuple[Path, dict[str, Any]]) -> None:
    _, config = source
    assert config["kind"] == "node"
    assert config["name"] == NODE
    assert config["state_uri"] == f"gs://{STATE}"
    assert config["body"]["schedulingConfig"] == {"spot": True}
    plan = bundled_plan(STACK)
    (vm,) = [r["inputs"] for r in plan["resources"] if r["type"] == "gcp:tpu/v2Vm:V2Vm"]
    assert config["body"]["metadata"] == vm["metadata"]
    assert config["body"]["labels"] == vm["labels"]
    assert config["body"]["runtimeVersion"] == vm["runtimeVersion"]
    assert config["body"]["acceleratorConfig"] == vm["acceleratorConfig"]
    assert config["body"]["serviceAccount"] == {
        "email": vm["serviceAccount"]["email"],
        "scope": vm["serviceAccount"]["scopes"],
    }
    assert config["body"]["networkConfig"] == vm["networkConfig"]
    assert config["body"]["tags"] == vm["tags"]
    assert config["body"]["shieldedInstanceConfig"] == vm["shieldedInstanceConfig"]
    assert config["body"]["description"] == vm["description"]


def test_a_ready_node_is_left_alone(world: Any) -> None:
    function, tpu, config, fs = world
    _ready_node(tpu, config)
    assert function.call()["action"] == "none"
    assert [r[0] for r in tpu.requests] == ["GET"]
    assert _events(fs) == []


def test_a_preempted_node_is_deleted_then_recreated_with_the_same_name_and_body(
    world: Any,
) -> None:
    function, tpu, config, fs = world
    _ready_node(tpu, config)
    tpu.preempt(NODE)
    first = function.call()
    assert (first["seen"], first["action"], first["result"]) == ("PREEMPTED", "delete", "ok")
    assert tpu.nodes[NODE]["state"] == "DELETING"
    deleting = function.call()  # still going: nothing to do
    assert (deleting["seen"], deleting["action"]) == ("DELETING", "none")
    second = function.call()  # the node is gone now
    assert (second["seen"], second["action"], second["result"]) == ("NOT_FOUND", "create", "ok")
    (create,) = tpu.calls("POST", "/nodes")
    assert create[1] == "/v2/projects/my-ml-project/locations/us-west4-a/nodes"
    assert create[2]["nodeId"] == ["dev-tpu-v5e-tpu"]
    assert create[3] == config["body"]
    third = function.call()  # CREATING: nothing to do
    assert (third["seen"], third["action"]) == ("CREATING", "none")
    fourth = function.call()
    assert (fourth["seen"], fourth["result"]) == ("READY", "recovered")
    events = _events(fs)
    assert [(e["seen"], e["action"], e["result"], e["attempt"]) for e in events] == [
        ("PREEMPTED", "delete", "ok", 0),
        ("NOT_FOUND", "create", "ok", 1),
        ("READY", "none", "recovered", 1),
    ]
    assert all(e["resource"] == NODE for e in events)
    assert events[1]["next_allowed"] is not None


def test_a_refused_create_is_recorded_and_the_backoff_holds_the_next_call(world: Any) -> None:
    function, tpu, config, fs = world
    _ready_node(tpu, config)
    tpu.preempt(NODE)
    function.call()  # delete
    function.call()  # DELETING
    tpu.fail_next(1, 429, "POST")  # no capacity
    refused = function.call()
    assert refused["action"] == "create"
    assert refused["result"].startswith("error: HTTP 429")
    held = function.call()  # within the 120 s backoff: no create
    assert (held["seen"], held["action"], held["result"]) == ("NOT_FOUND", "none", "backoff")
    assert len(tpu.calls("POST", "/nodes")) == 1
    events = _events(fs)
    assert [(e["action"], e["attempt"]) for e in events] == [("delete", 0), ("create", 1)]
    assert events[1]["result"].startswith("error: HTTP 429")
    state = json.loads(fs.cat_file(f"{STATE}/state.json"))
    assert state["attempts"] == 1 and state["recreate"] is True
    assert 118 <= state["next_allowed"] - time.time() <= 120


def test_each_recorded_event_is_one_structured_log_line_on_stdout(world: Any) -> None:
    """Cloud Run functions send stdout to Cloud Logging; a one-line JSON object becomes the
    entry's `jsonPayload`, its `severity` the entry's (https://cloud.google.com/logging/docs/
    structured-logging): `trainstack logs` reads these (tests/unit/test_logs_supervisor.py)."""
    function, tpu, config, fs = world
    _ready_node(tpu, config)
    tpu.preempt(NODE)
    deleted = function.call()
    function.call()  # DELETING: nothing recorded, nothing printed
    tpu.fail_next(1, 429, "POST")
    refused = function.call()
    events = _events(fs)
    assert [e["time"] for e in events] == [deleted["time"], refused["time"]]
    assert refused["result"] == "error: HTTP 429: injected fault"
    waited = datetime.fromisoformat(refused["next_allowed"]) - datetime.fromisoformat(
        refused["time"]
    )
    assert waited == timedelta(seconds=120)  # BACKOFF_BASE_S
    assert function.printed() == [
        json.dumps(
            {
                "action": "delete",
                "attempt": 0,
                "message": "supervisor: PREEMPTED -> delete: ok",
                "next_allowed": None,
                "resource": NODE,
                "result": "ok",
                "seen": "PREEMPTED",
                "severity": "NOTICE",
                "time": deleted["time"],
            },
            sort_keys=True,
        ),
        json.dumps(
            {
                "action": "create",
                "attempt": 1,
                "message": "supervisor: NOT_FOUND -> create: error: HTTP 429: injected fault",
                "next_allowed": refused["next_allowed"],
                "resource": NODE,
                "result": "error: HTTP 429: injected fault",
                "seen": "NOT_FOUND",
                "severity": "WARNING",
                "time": refused["time"],
            },
            sort_keys=True,
        ),
    ]


def test_a_node_not_created_yet_is_not_reported(world: Any) -> None:
    # The supervisor is deployed before the slice (it must never run unsupervised): until
    # the node first exists, its absence is no news.
    function, tpu, _, fs = world
    assert function.call()["result"] == "not created yet"
    assert tpu.calls("POST") == []
    assert _events(fs) == []


def test_a_node_deleted_by_someone_else_is_reported_once_and_not_recreated(world: Any) -> None:
    function, tpu, config, fs = world
    _ready_node(tpu, config)
    function.call()
    del tpu.nodes[NODE]  # deleted by hand
    function.call()
    function.call()
    assert tpu.calls("POST") == []
    assert [(e["seen"], e["result"]) for e in _events(fs)] == [
        ("NOT_FOUND", "missing, and not deleted by this supervisor: left alone")
    ]


def test_a_preempted_node_is_left_to_pulumi_while_the_stack_is_destroyed(world: Any) -> None:
    # `pulumi destroy` deletes the marker before the slice, and the slice before the
    # function: a check in between neither deletes nor creates (a slice created then would
    # outlive the stack, billing).
    function, tpu, config, fs = world
    _ready_node(tpu, config)
    tpu.preempt(NODE)
    assert function.call()["action"] == "delete"
    function.call()  # DELETING
    fs.rm(f"{STATE}/armed")
    held = [function.call() for _ in range(2)]
    assert [(e["seen"], e["action"], e["result"]) for e in held] == [
        ("NOT_FOUND", "none", "held: the stack's compute is being deployed or destroyed")
    ] * 2
    assert tpu.calls("POST") == []
    assert [(e["seen"], e["action"], e["result"]) for e in _events(fs)] == [
        ("PREEMPTED", "delete", "ok"),
        ("NOT_FOUND", "none", "held: the stack's compute is being deployed or destroyed"),
    ]


def _post(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()


def test_a_suspended_queued_resource_is_deleted_and_requeued_with_the_same_id_and_body(
    queued_world: World,
) -> None:
    function, tpu, config, fs = queued_world
    assert (config["kind"], config["name"]) == ("queued", QUEUED)
    parent = QUEUED.split("/queuedResources/")[0]
    # As `pulumi up` left it: created by the provider with this body, then ACTIVE.
    _post(
        f"{tpu.base_url}/v2/{parent}/queuedResources?queuedResourceId={QUEUED_STACK}-tpu-qr",
        config["body"],
    )
    for _ in range(4):  # CREATING -> ACCEPTED -> ... -> ACTIVE, which makes the node
        urllib.request.urlopen(f"{tpu.base_url}/v2/{QUEUED}", timeout=10).close()
    assert tpu.queued[QUEUED]["state"]["state"] == "ACTIVE"
    tpu.preempt(QUEUED_NODE)
    tpu.requests.clear()
    seen = [function.call() for _ in range(6)]
    assert [(e["seen"], e["action"], e["result"]) for e in seen] == [
        ("SUSPENDED", "delete", "ok"),
        ("NOT_FOUND", "create", "ok"),
        ("ACCEPTED", "none", "ok"),
        ("WAITING_FOR_RESOURCES", "none", "ok"),
        ("PROVISIONING", "none", "ok"),
        ("ACTIVE", "none", "recovered"),
    ]
    (create,) = tpu.calls("POST", "/queuedResources")
    assert create[2]["queuedResourceId"] == [f"{QUEUED_STACK}-tpu-qr"]
    assert create[3] == config["body"]
    assert tpu.nodes[QUEUED_NODE]["state"] == "READY"
    events = _events(fs, f"{QUEUED_STATE}/events.jsonl")
    assert [(e["seen"], e["action"], e["result"]) for e in events] == [
        ("SUSPENDED", "delete", "ok"),
        ("NOT_FOUND", "create", "ok"),
        ("ACTIVE", "none", "recovered"),
    ]

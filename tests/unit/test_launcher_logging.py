"""The Compute Engine launcher's own lines reach Cloud Logging, where `trainstack logs` and the
dashboard look.

The rendered launcher runs for real with bash against the metadata fake, a Cloud Storage fake
(tests/fakes/metadata_fake.py, a small handler here) and the Cloud Logging fake
(tests/fakes/logging_server.py, which evaluates filters); pip and the node launcher
(`python3 -m trainstack.trainers.node`) are fake executables. A download refused with 403, a failed pip
install and a node launcher that stopped (with its last stderr lines) each end with an
ERROR entry that `trainstack logs`' query (`trainstack.infra.log_source.cloud_filter`) and the dashboard's log
filter (`gce_filters`) select, carrying the cause. The entry is the one the trainer's shipper writes (`trainstack.trainers.common.cloud_logging`).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import LocalServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.metadata_fake import PROJECT, ZONE, MetadataFake, vm_values
from trainstack.components.gpu_startup import NODE_RANK_ATTRIBUTE, node_helper, render_launcher
from trainstack.components.training_dashboard.targets import gce_filters
from trainstack.infra.config import load_stack_config
from trainstack.infra.log_source import cloud_filter
from trainstack.infra.plan import load_stack
from trainstack.trainers.common.cloud_logging import LogShipper
from trainstack.trainers.common.contract import LOG_ID

STACK = "prod-a100-gce"
NAMES = [f"{STACK}-a100-0", f"{STACK}-a100-1"]
INSTANCE_ID = "4815162342"
BUCKET = "p-exp-42-staging"
OBJECT = "trainers/trainstack_trainers-0123456789abcdef.tar.gz"
PACKAGE = f"gs://{BUCKET}/{OBJECT}"
FAKE = r"""
import os, sys
prog, args = sys.argv[1], sys.argv[2:]
if prog == "pip":
    print(os.environ.get("FAKE_PIP_SAYS", ""))
    sys.exit(int(os.environ.get("FAKE_PIP_EXIT", "0")))
if prog == "python3":  # the node launcher
    sys.stderr.write(os.environ.get("FAKE_NODE_STDERR", ""))
    sys.exit(int(os.environ.get("FAKE_NODE_EXIT", "0")))
sys.exit(f"fake: unknown program {prog}")
"""


class Storage(LocalServer):
    """Cloud Storage's media download of the one package object; `status` 403 refuses it."""

    def __init__(self) -> None:
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                quoted = urllib.parse.quote(OBJECT, safe="")
                ok = self.path == f"/storage/v1/b/{BUCKET}/o/{quoted}?alt=media"
                status = fake.status if ok else 404
                body = b"sdist" if status == 200 else b"forbidden"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


@pytest.fixture
def logging_api() -> Iterator[LoggingFakeServer]:
    with LoggingFakeServer() as server:
        yield server


@pytest.fixture
def metadata() -> Iterator[MetadataFake]:
    values = {**vm_values(INSTANCE_ID, NAMES[1]), f"instance/attributes/{NODE_RANK_ATTRIBUTE}": "1"}
    with MetadataFake(values) as server:
        yield server


@pytest.fixture
def storage() -> Iterator[Storage]:
    with Storage() as server:
        yield server


def _run(
    tmp_path: Path,
    metadata: MetadataFake,
    storage: Storage,
    logging_api: LoggingFakeServer,
    node_args: list[str] | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    python = shlex.quote(sys.executable)
    (bin_dir / "pip").write_text(f'#!/bin/sh\nexec {python} {shlex.quote(str(fake))} pip "$@"\n')
    (bin_dir / "python3").write_text(
        "#!/bin/sh\n"
        f'if [ "${{1:-}}" = -m ]; then exec {python} {shlex.quote(str(fake))} python3 "$@"; fi\n'
        f'exec {python} "$@"\n'
    )
    for prog in ("pip", "python3"):
        (bin_dir / prog).chmod(0o755)
    launcher = render_launcher(
        package_uri=PACKAGE,
        module=None if node_args else "trainstack.trainers.tf_multiworker",
        trainer_args=[] if node_args else ["--framework=tensorflow", "--steps=10"],
        num_nodes=2,
        procs_per_node=1,
        coordinator=NAMES[0],
        work_dir=str(tmp_path / "work"),
        worker_hosts=NAMES,
        node_args=node_args,
    )
    full_env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GCE_METADATA_HOST": metadata.host,
        "STORAGE_EMULATOR_HOST": storage.base_url,
        "TRAINSTACK_LOGGING_ENDPOINT": logging_api.endpoint,
        **env,
    }
    return subprocess.run(
        ["bash", "-c", launcher, "trainstack-launch"],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _shown(logging_api: LoggingFakeServer) -> dict[str, list[tuple[str, str]]]:
    """(severity, text) of the entries `trainstack logs` and the dashboard select."""
    _, config = load_stack(STACK, None)
    cfg = load_stack_config(config)
    queries = {
        "trainstack logs": cloud_filter(cfg, STACK, {"instance_names": NAMES}, None),
        "trainstack logs --worker 1": cloud_filter(cfg, STACK, {"instance_names": NAMES}, 1),
        "dashboard": gce_filters(STACK)[0],
    }
    return {
        name: [(e["severity"], e["textPayload"]) for e in logging_api.matching(query)]
        for name, query in queries.items()
    }


INSTALLING = ("INFO", f"trainstack-launch: installing {PACKAGE}")


@pytest.mark.parametrize(
    ("env", "storage_status", "last"),
    [
        (
            {},
            403,
            f"trainstack-launch: could not download {PACKAGE}: trainstack-helper: download "
            "failed: HTTP Error 403: Forbidden",
        ),
        (
            {"FAKE_PIP_EXIT": "1", "FAKE_PIP_SAYS": "ERROR: No matching distribution for x==9"},
            200,
            f"trainstack-launch: pip could not install {PACKAGE}: ERROR: No matching "
            "distribution for x==9",
        ),
    ],
)
def test_setup_failures_reach_trainstack_logs_and_the_dashboard(
    env: dict[str, str],
    storage_status: int,
    last: str,
    tmp_path: Path,
    metadata: MetadataFake,
    storage: Storage,
    logging_api: LoggingFakeServer,
) -> None:
    storage.status = storage_status
    result = _run(tmp_path, metadata, storage, logging_api, **env)
    assert result.returncode == 3, result.stderr
    expected = [INSTALLING, ("ERROR", last.format(work=tmp_path / "work"))]
    assert _shown(logging_api) == {
        "trainstack logs": expected,
        "trainstack logs --worker 1": expected,
        "dashboard": expected,
    }


LOST = (
    "trainstack-node: node 1 of 2, 8 accelerator(s), 8 process(es): python3 -m trainstack.trainers.elastic\n"
    "trainstack-elastic: rendezvous lost (RendezvousConnectionError: The connection to the "
    "C10d store has failed.); exit 4 so the platform starts this node again\n"
    "trainstack-node: exit 4 (target exit 4)\n"
)
FEWER = (
    "trainstack-node: TRAINSTACK_EXPECTED_ACCELERATORS: the plan bought 8 accelerator(s) for "
    "this machine but it has 0 found (nvidia-smi)\n"
)


@pytest.mark.parametrize(
    ("code", "stderr", "shipped"),
    [
        (
            "4",
            LOST,
            "trainstack-launch: the node launcher exited 4: a peer node or the elastic "
            "rendezvous was lost (node 0 gone, or no quorum in time); the unit restarts it and "
            "the node rejoins from the newest checkpoint; its last lines:\n" + LOST.rstrip("\n"),
        ),
        (
            "5",
            FEWER,
            "trainstack-launch: the node launcher exited 5: fewer usable GPUs than the plan "
            "bought (1); the unit does not restart it; its last lines:\n" + FEWER.rstrip("\n"),
        ),
        (
            "3",
            "",
            "trainstack-launch: the node launcher exited 3: the trainer's setup failed before "
            "training started; the unit restarts it",
        ),
    ],
)
def test_why_the_node_launcher_stopped_reaches_the_logs(
    code: str,
    stderr: str,
    shipped: str,
    tmp_path: Path,
    metadata: MetadataFake,
    storage: Storage,
    logging_api: LoggingFakeServer,
) -> None:
    result = _run(
        tmp_path, metadata, storage, logging_api, FAKE_NODE_EXIT=code, FAKE_NODE_STDERR=stderr
    )
    assert result.returncode == int(code), result.stderr
    assert stderr in result.stderr  # the journal still gets the lines as they come
    shown = _shown(logging_api)["trainstack logs"]
    assert shown[0] == INSTALLING
    assert shown[1][0] == "INFO"
    assert shown[1][1].startswith("trainstack-launch: node 1 of 2: ")
    assert shown[2:] == [("ERROR", shipped)]


def test_only_the_last_20_lines_of_the_node_launcher_travel(
    tmp_path: Path, metadata: MetadataFake, storage: Storage, logging_api: LoggingFakeServer
) -> None:
    lines = [f"Traceback line {i}" for i in range(30)]
    stderr = "\n".join(lines) + "\n"
    result = _run(
        tmp_path, metadata, storage, logging_api, FAKE_NODE_EXIT="1", FAKE_NODE_STDERR=stderr
    )
    assert result.returncode == 1, result.stderr
    [(severity, text)] = _shown(logging_api)["trainstack logs"][2:]
    assert severity == "ERROR"
    assert text.splitlines() == [
        "trainstack-launch: the node launcher exited 1: a code error in the trainer; the unit "
        "does not restart it; its last lines:",
        *lines[10:],
    ]


def test_the_launchers_entry_is_the_trainer_shippers_entry(
    metadata: MetadataFake, logging_api: LoggingFakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)
    request = node_helper.log_entry_request("ERROR", "launcher line", 1_700_000_000.25)
    shipper = LogShipper(
        "gce_instance",
        {"GCE_METADATA_HOST": metadata.host, "TRAINSTACK_LOGGING_ENDPOINT": logging_api.endpoint},
        print,
    )
    shipper.add(b"trainer line\n")
    shipper.close()
    [shipped] = logging_api.entries
    assert node_helper.LOG_ID == LOG_ID
    assert request == {
        "logName": shipped["logName"],
        "resource": shipped["resource"],
        "labels": shipped["labels"],
        "entries": [
            {
                "timestamp": "2023-11-14T22:13:20.250000Z",
                "severity": "ERROR",
                "textPayload": "launcher line",
            }
        ],
    }
    assert request["logName"] == f"projects/{PROJECT}/logs/trainstack"
    assert request["resource"]["labels"] == {
        "project_id": PROJECT,
        "instance_id": INSTANCE_ID,
        "zone": ZONE,
    }


def test_the_logged_node_command_line_names_env_variables_without_their_values(
    tmp_path: Path, metadata: MetadataFake, storage: Storage, logging_api: LoggingFakeServer
) -> None:
    # Defence in depth: a stack's credentials reach the node as --secret-env names, but a
    # plain --env value (or one set by hand in a program) is still no business of the log,
    # which the journal and Cloud Logging (`trainstack logs`) keep.
    node_args = [
        "--launcher=node",
        "--env=DB_URL=postgres://app:hunter2@db/app",
        "--secret-env=HF_TOKEN=projects/p/secrets/s/versions/1",
        "--",
        "python",
        "train.py",
    ]
    result = _run(tmp_path, metadata, storage, logging_api, node_args)
    assert result.returncode == 0, result.stderr
    line = (
        f"trainstack-launch: node 1 of 2: {tmp_path}/bin/python3 -m trainstack.trainers.node "
        "--launcher=node --env=DB_URL=*** "
        "--secret-env=HF_TOKEN=projects/p/secrets/s/versions/1 -- python train.py"
    )
    assert _shown(logging_api)["trainstack logs"] == [
        INSTALLING,
        ("INFO", line),
        ("INFO", "trainstack-launch: training finished"),
    ]
    assert [x for x in result.stderr.splitlines() if "node 1 of 2" in x] == [line]
    assert "hunter2" not in result.stderr + str(logging_api.entries)

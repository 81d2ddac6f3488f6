"""A run whose setup fails for good, on each supervised target, run the way the platform runs
it: the stage that gives up on its last attempt records the run's end (`<prefix>.ended`:
`{"outcome": "failed", "stage", "reason", "node_rank", "time"}`,
`trainstack.trainers.common.run_records`), and the planned run supervisor, served as Cloud
Functions runs it against the fake of the platform's API, stops the compute on it. Before,
only the node launcher wrote an end record, so a run that never reached it billed until
`pulumi destroy`.

- Compute Engine (`tests.fidelity.test_gce`'s VMs and systemd shim): the package object is
  gone, every start of the unit fails its download (exit 3), the 20th (the unit's last
  before its start limit, `GCE_SETUP_ATTEMPTS`) records it; the group's VMs are deleted. The
  same with 18 failures already counted on the disk (starts slower than the start limit
  counts: the launcher's own count ends it, the next start does nothing), in the default
  run; the whole 20 starts are `slow`. An A4 group (dev-b200-gce's VMs) whose
  `apt-get install nccl-gib` fails the same way, before the framework's python is known.
- GKE (`tests.fidelity.test_gke`'s pods under `tests.fidelity.job_controller`): index 1's
  pip install cannot resolve (a requirement's version no index has, planted as
  `PIP_CONSTRAINT` in that pod's environment), 4 attempts (backoffLimitPerIndex 3); the 4th,
  whose failure-count annotation says it is the last, records it; the Job fails and the GPU
  pool is set to 0 nodes (`slow`; tests/components/test_launch_records.py runs the pod
  script's last and earlier attempts in the default run).
- Cloud TPU (`tests.fidelity.tpu_vm`'s worker 0): the package is not an sdist, pip fails its
  3 tries, the startup script gives up (nothing runs it again but a reboot) and records it;
  the slice is deleted. `sleep` returns at once there (the retries' waits).

Each ends with `trainstack status` of the stack as `pulumi up` left it (its outputs, the fakes'
endpoints), which names the stage, the machine (node rank) and the reason:
`finished (failed at <stage> on node <rank>: <reason>); compute stopped at <time>`.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.components.test_tpu_startup import MetadataServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.kube_server import KubeFakeServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.fidelity import test_gce, test_gke
from tests.fidelity.job_controller import FAILURE_COUNT, IndexedJobController
from tests.fidelity.nodes import Node, explain, require_unshare
from tests.fidelity.supervisor import planned_supervisor, serve_planned_supervisor, stack_status
from tests.fidelity.test_gce_fabric import FabricGroup, KeyServer
from tests.fidelity.test_gke import TOKEN, Cluster
from tests.fidelity.tpu_vm import TpuVm, planned_from
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.run_records import ALIVE_SUFFIX, ENDED_SUFFIX

ISO_SECONDS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _read(storage: str, uri: str) -> dict[str, Any]:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    url = f"{storage}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
    with urllib.request.urlopen(url, timeout=10) as answer:
        record: dict[str, Any] = json.loads(answer.read())
    assert ISO_SECONDS.fullmatch(record.pop("time")), record
    return record


def _delete(storage: str, uri: str) -> None:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    url = f"{storage}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10):
        pass


def _prefix(plan: dict[str, Any], folder: Path) -> str:
    """The run's record prefix the supervisor reads (its `end_uri` less `.ended`)."""
    end_uri: str = planned_supervisor(plan, folder)["run"]["end_uri"]
    assert end_uri.endswith(ENDED_SUFFIX)
    return end_uri.removesuffix(ENDED_SUFFIX)


def _last_line(path: Path) -> str:
    return [line for line in path.read_text().splitlines() if line.strip()][-1]


@pytest.fixture
def gce_fakes() -> Iterator[tuple[str, LoggingFakeServer]]:
    require_unshare()
    with running_gcs_emulator() as storage, LoggingFakeServer() as logging_api:
        yield storage, logging_api


@pytest.mark.slow  # about 140 s here: the unit's 20 starts, each a few Python processes
def test_gce_a_package_that_cannot_be_downloaded_ends_the_run_and_empties_the_group(
    tmp_path: Path, gce_fakes: tuple[str, LoggingFakeServer]
) -> None:
    storage, logging_api = gce_fakes
    plan = test_gce._plan_document({"steps": 4})
    planned = test_gce._planned(plan)
    group = test_gce.Group(tmp_path / "vms", planned, storage, logging_api.endpoint)
    _delete(storage, planned.package_uri)
    try:
        vm = group.boot(1)
        code = vm.wait(300)
    finally:
        group.close()
    console = vm.output()
    assert code == 1, explain([vm])
    # Every start failed its download; systemd refused a 21st start within the hour.
    assert console.count("systemd-shim: trainstack-trainer exited 3") == 20, explain([vm])
    assert "systemd-shim: trainstack-trainer: start request repeated too quickly" in console
    prefix = _prefix(plan, tmp_path / "supervisor")
    recorded = f"trainstack-launch: recorded the run's end (failed: package_download) at {prefix}"
    assert [line for line in console.splitlines() if "run's end" in line] == [
        f"{recorded}{ENDED_SUFFIX}"
    ]
    assert _read(storage, prefix + ENDED_SUFFIX) == {
        "outcome": "failed",
        "stage": "package_download",
        "reason": (
            f"could not download {planned.package_uri}: trainstack-helper: download failed: "
            "HTTP Error 404: Not Found"
        ),
        "node_rank": 1,
    }
    assert _read(storage, f"{prefix}{ALIVE_SUFFIX}1") == {"node_rank": 1, "stage": "launch"}

    answers, lines = _stopped_and_status(
        plan, test_gce._stack_config({"steps": 4}), tmp_path, storage, logging_api.endpoint
    )
    assert _seen(answers) == [
        ("SIZE_2", "stop", "failed", "stopping"),
        ("DELETING_2", "none", "failed", "stopping"),
        ("STOPPED", "none", "failed", "compute stopped"),
    ]
    assert _finished(lines) == (
        "finished (failed at package_download on node 1: could not download "
        f"{planned.package_uri}: trainstack-helper: download failed: HTTP Error 404: Not "
        f"Found); compute stopped at {answers[-1]['time']}"
    )


def _seen(answers: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(a["seen"], a["action"], a.get("reason"), a["result"]) for a in answers]


def _finished(lines: list[str]) -> str:
    """The one line `trainstack status` says the run's end with."""
    [line] = [line for line in lines if line.startswith("finish")]
    return line


def _stopped_and_status(
    plan: dict[str, Any],
    config: dict[str, Any],
    tmp_path: Path,
    storage: str,
    logging_endpoint: str,
    stop: tuple[str, dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The planned supervisor's checks of the Compute Engine group until it finds the VMs
    gone (3: the stop, the VMs still being deleted, gone), then `trainstack status`.
    `stop`: the deletion the fake notes (default: `test_gce.PlannedGroup.stop`)."""
    planned = test_gce._planned(plan)
    with serve_planned_supervisor(plan, tmp_path / "supervisor", storage, 2) as served:
        answers = [served.function.call() for _ in range(3)]
        endpoints = {"compute": served.compute.endpoint, "logging": logging_endpoint}
        code, lines = stack_status(
            plan, config, tmp_path / "status", {**endpoints, "storage": f"{storage}/storage/v1/"}
        )
    assert code == 0, lines
    assert (served.compute.deletions, served.compute.resizes) == ([stop or planned.stop], [])
    return answers, lines


def test_gce_a_setup_slower_than_the_start_limit_still_ends_on_its_20th_failure(
    tmp_path: Path, gce_fakes: tuple[str, LoggingFakeServer]
) -> None:
    # 18 failed starts are on the disk already, spread over more than the start limit's hour
    # (systemd would allow more): the launcher's own count ends the run on the 20th, and the
    # start after it does nothing.
    storage, logging_api = gce_fakes
    plan = test_gce._plan_document({"steps": 4})
    planned = test_gce._planned(plan)
    [counter] = re.findall(r"^SETUP_FAILURES=/var/lib/(\S+)$", planned.script, re.MULTILINE)
    group = test_gce.Group(tmp_path / "vms", planned, storage, logging_api.endpoint)
    _delete(storage, planned.package_uri)
    try:
        vm = group.boot(0, var_lib={counter: "18\n"})
        code = vm.wait(120)
    finally:
        group.close()
    lines = vm.output().splitlines()
    assert code == 0, explain([vm])
    prefix = _prefix(plan, tmp_path / "supervisor")
    shim = [line for line in lines if line.startswith("systemd-shim: ") or "run's end" in line]
    assert shim == [
        "systemd-shim: trainstack-trainer exited 3",
        "trainstack-launch: recorded the run's end (failed: package_download) at "
        f"{prefix}{ENDED_SUFFIX}",
        "systemd-shim: trainstack-trainer exited 3",
        "systemd-shim: trainstack-trainer exited 0",
    ], explain([vm])
    assert lines[-3] == (
        "trainstack-launch: the setup failed 20 times in a row (at most 20); not starting again"
    )
    ended = _read(storage, prefix + ENDED_SUFFIX)
    assert (ended["node_rank"], ended["stage"]) == (0, "package_download")
    answers, lines = _stopped_and_status(
        plan, test_gce._stack_config({"steps": 4}), tmp_path, storage, logging_api.endpoint
    )
    assert [(a["action"], a.get("reason")) for a in answers] == [("stop", "failed")] + [
        ("none", "failed")
    ] * 2
    assert _finished(lines) == (
        f"finished (failed at package_download on node 0: {ended['reason']}); compute stopped "
        f"at {answers[-1]['time']}"
    )
    assert ended["reason"] == (
        f"could not download {planned.package_uri}: trainstack-helper: download failed: HTTP "
        "Error 404: Not Found"
    )


# apt-get of the A4 image whose `install` fails as apt does for a package no configured
# source lists: "E: Unable to locate package <name>" and exit 100 (apt's apt-pkg/cacheset.cc,
# `CacheSetHelper::canNotFindPkgName`: `_error->Insert(ErrorType, _("Unable to locate
# package %s"), str.c_str())`, printed as an `E:` line; apt-get(8), DIAGNOSTICS: "apt-get
# returns zero on normal operation, decimal 100 on error"). `update` passes.
APT_INSTALL_FAILS = """#!{python}
import sys
if "install" in sys.argv[1:]:
    print("Reading package lists...", flush=True)
    print("E: Unable to locate package nccl-gib", file=sys.stderr, flush=True)
    sys.exit(100)
"""


def test_gce_a4_a_gpu_fabric_install_that_fails_ends_the_run_and_empties_the_group(
    tmp_path: Path, gce_fakes: tuple[str, LoggingFakeServer]
) -> None:
    """dev-b200-gce's A4 VMs (here with rank metadata: flex-start off, so the group has its
    per-instance configs): `apt-get install nccl-gib` fails on every start. With 18 failed
    starts on the disk, the 20th records the run's end (stage `launch`, apt's reason) and
    the start after it idles before the install; the supervisor empties the group and
    `trainstack status` names the stage. Before, the install's failure came before the
    framework's python was known, so nothing was recorded and no heartbeat was written."""
    storage, logging_api = gce_fakes
    name, config = load_stack("dev-b200-gce", None)
    config["trainstack:gpu_cluster"] = {**config["trainstack:gpu_cluster"], "flex_start": False}
    plan = build_plan(name, config)
    planned = test_gce._planned(plan)
    [counter] = re.findall(r"^SETUP_FAILURES=/var/lib/(\S+)$", planned.script, re.MULTILINE)
    with KeyServer() as keys:
        group = FabricGroup(
            tmp_path / "vms",
            planned,
            storage,
            logging_api.endpoint,
            tools={"apt-get": APT_INSTALL_FAILS.format(python=sys.executable)},
            node_dirs=("/etc/apt/sources.list.d", "/etc/apt/keyrings"),
        )
        group.key_url = f"{keys.base_url}/apt/doc/apt-key.gpg"
        try:
            vm = group.boot(1, var_lib={counter: "18\n"})
            code = vm.wait(120)
        finally:
            group.close()
    lines = vm.output().splitlines()
    assert code == 0, explain([vm])
    prefix = _prefix(plan, tmp_path / "supervisor")
    reason = "apt-get could not install nccl-gib: E: Unable to locate package nccl-gib"
    shim = [line for line in lines if line.startswith("systemd-shim: ") or "run's end" in line]
    assert shim == [
        "systemd-shim: trainstack-trainer exited 3",
        f"trainstack-launch: recorded the run's end (failed: launch) at {prefix}{ENDED_SUFFIX}",
        "systemd-shim: trainstack-trainer exited 3",
        "systemd-shim: trainstack-trainer exited 0",
    ], explain([vm])
    assert lines[-3] == (
        "trainstack-launch: the setup failed 20 times in a row (at most 20); not starting again"
    )
    assert _read(storage, prefix + ENDED_SUFFIX) == {
        "outcome": "failed",
        "stage": "launch",
        "reason": reason,
        "node_rank": 1,
    }
    assert _read(storage, f"{prefix}{ALIVE_SUFFIX}1") == {"node_rank": 1, "stage": "launch"}

    vms = [f"zones/{planned.zone}/instances/{vm_name}" for vm_name in planned.names]
    stop = (
        f"{planned.project}/{planned.zone}/{name}-a100",
        {"instances": vms, "skipInstancesOnValidationError": True},
    )
    answers, status = _stopped_and_status(
        plan, config, tmp_path, storage, logging_api.endpoint, stop
    )
    assert _seen(answers) == [
        ("SIZE_2", "stop", "failed", "stopping"),
        ("DELETING_2", "none", "failed", "stopping"),
        ("STOPPED", "none", "failed", "compute stopped"),
    ]
    assert _finished(status) == (
        f"finished (failed at launch on node 1: {reason}); compute stopped at {answers[-1]['time']}"
    )


@pytest.fixture
def gke_fakes() -> Iterator[tuple[str, str]]:
    require_unshare()
    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as meta,
    ):
        yield storage, meta.base_url


@pytest.mark.trainer
@pytest.mark.slow  # about 120 s here: pod 0 installs and starts torch, index 1 fails 4 times
def test_gke_a_pip_install_that_fails_on_the_last_attempt_fails_the_job_and_empties_the_pool(
    tmp_path: Path, gke_fakes: tuple[str, str]
) -> None:
    storage, metadata = gke_fakes
    plan = test_gke._plan_document({"steps": 4})
    planned = test_gke._planned(plan)
    cluster = Cluster(tmp_path / "pods", planned, storage, metadata)
    # A version of one of the package's requirements that no index has: pip cannot resolve.
    conflict = tmp_path / "constraints.txt"
    conflict.write_text("pydantic==0.0.1\n")
    given: list[tuple[int, str]] = []

    def start(index: int, annotations: Mapping[str, str]) -> Node:
        given.append((index, annotations[FAILURE_COUNT]))
        planted = {"PIP_CONSTRAINT": str(conflict)} if index == 1 else None
        return cluster.start(index, annotations, planted)

    outcome = IndexedJobController(planned.job, start).run(timeout_s=240)
    assert (outcome.state, outcome.reason) == ("Failed", "MaxFailedIndexesExceeded"), explain(
        outcome.pods
    )
    assert [(e.index, e.exit_code, e.action) for e in outcome.exits] == [(1, 3, "Count")] * 4
    assert sorted(given) == [(0, "0"), (1, "0"), (1, "1"), (1, "2"), (1, "3")]
    index_1 = [pod for pod in outcome.pods if pod.name.endswith("-1")]
    recorded = [
        ["run's end" in line for line in pod.output().splitlines()].count(True) for pod in index_1
    ]
    assert recorded == [0, 0, 0, 1], explain(index_1)
    last = index_1[-1].log_path.parent
    prefix = _prefix(plan, tmp_path / "supervisor")
    pip_said = _last_line(last / "trainstack" / "pip.log")
    assert _read(storage, prefix + ENDED_SUFFIX) == {
        "outcome": "failed",
        "stage": "package_install",
        "reason": f"pip could not install {planned.package_uri}: {pip_said}",
        "node_rank": 1,
    }
    assert pip_said.startswith("ERROR: ")

    with (
        serve_planned_supervisor(plan, tmp_path / "supervisor", storage, 2) as served,
        LoggingFakeServer() as logs,
        KubeFakeServer() as kube,
    ):
        answers = [served.function.call() for _ in range(3)]
        # The Job as the controller left it (`trainstack status` reads its conditions).
        condition = {"type": outcome.state, "status": "True", "reason": outcome.reason}
        kube.jobs[f"default/{planned.name}"] = {"status": {"conditions": [condition]}}
        endpoints = {"kubernetes": kube.endpoint, "logging": logs.endpoint}
        code, lines = stack_status(
            plan,
            test_gke._stack_config({"steps": 4}),
            tmp_path / "status",
            {**endpoints, "storage": f"{storage}/storage/v1/"},
        )
    assert _seen(answers) == [
        ("SIZE_2", "stop", "failed", "stopping"),
        ("DELETING_2", "none", "failed", "stopping"),
        ("STOPPED", "none", "failed", "compute stopped"),
    ]
    assert served.container.set_sizes == [(served.config["name"], {"nodeCount": 0})]
    assert (code, lines[1]) == (1, "state: FAILED")  # a failed Job: status exits 1
    assert _finished(lines) == (
        f"finished (failed at package_install on node 1: pip could not install "
        f"{planned.package_uri}: {pip_said}); compute stopped at {answers[-1]['time']}"
    )


SLEEP_AT_ONCE = "#!/bin/sh\nexit 0\n"


def test_tpu_a_pip_install_that_fails_ends_the_run_and_deletes_the_slice(tmp_path: Path) -> None:
    name, config = load_stack("dev-tpu-v5e", None)
    config["trainstack:trainer"] = {**config["trainstack:trainer"], "steps": 3}
    plan = build_plan(name, config)
    planned = planned_from(plan)
    broken = tmp_path / "not-an-sdist.tar.gz"
    broken.write_bytes(b"not a gzip archive")
    vm = TpuVm(tmp_path / "vm", replace(planned, sdist=broken))
    (vm.bin / "sleep").write_text(SLEEP_AT_ONCE)
    (vm.bin / "sleep").chmod(0o755)
    with running_gcs_emulator(planned.checkpoint_bucket) as gcs:
        result = vm.boot(0, 4, gcs)
        assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
        prefix = _prefix(plan, tmp_path / "supervisor")
        tag = "[trainstack slice=dev-tpu-v5e-tpu worker=0]"
        assert result.stdout.splitlines()[-1] == (
            f"{tag} recorded the run's end (failed: package_install) at {prefix}{ENDED_SUFFIX}"
        )
        pip_said = _last_line(vm.state / "logs" / "pip.log")
        constraints = vm.state / "runtime-constraints.txt"
        assert _read(gcs, prefix + ENDED_SUFFIX) == {
            "outcome": "failed",
            "stage": "package_install",
            "reason": (
                f"pip could not install {planned.package_uri}: {pip_said} (the runtime's own "
                f"packages are constraints: {constraints})"
            ),
            "node_rank": 0,
        }
        assert _read(gcs, f"{prefix}{ALIVE_SUFFIX}0") == {
            "node_rank": 0,
            "stage": "package_download",
        }
        with (
            serve_planned_supervisor(plan, tmp_path / "supervisor", gcs, 0) as served,
            LoggingFakeServer() as logs,
        ):
            [answer] = [served.function.call()]
            endpoints = {"tpu": served.tpu.endpoint, "logging": logs.endpoint}
            code, lines = stack_status(
                plan, config, tmp_path / "status", {**endpoints, "storage": f"{gcs}/storage/v1/"}
            )
    assert _seen([answer]) == [("READY", "stop", "failed", "ok")]
    slice_name = served.config["name"]
    assert [call[:2] for call in served.tpu.calls("DELETE")] == [("DELETE", f"/v2/{slice_name}")]
    assert code == 0, lines
    assert _finished(lines) == (
        f"finished (failed at package_install on node 0: pip could not install "
        f"{planned.package_uri}: {pip_said} (the runtime's own packages are constraints: "
        f"{constraints})); compute stopped at {answer['time']}"
    )

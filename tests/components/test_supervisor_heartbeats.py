"""Issue 29 item 2, the supervisor's side: a run that fails before the trainer's launcher
starts, or whose nodes all went quiet, is an end of run. The end record may name the stage
that failed (`{"outcome": "failed", "stage", "reason"}`), and every node rewrites a heartbeat
`<prefix>.alive/<node_rank>` (`trainstack.trainers.common.run_records`): the supervisor
stops the compute on a stage's failure, and with `no_heartbeat` once the compute has billed
`NO_HEARTBEAT_S` since the later of its own first sight of it billing and the newest
heartbeat (Cloud Storage's `updated` time, never the object's content), read by one get of
each node's heartbeat by name: its grant on the checkpoint bucket is held to the run records'
object names, which no list matches (`tests.fakes.storage_grant` answers as Google does under
that condition). `trainstack status` says why. Google's functions-framework serving the
bundle against the Compute Engine fake and the GCS emulator; the bound's start is the
supervisor's own state as its earlier checks left it (`World.seed`), and one test runs
`supervise_once` in process with the clock given, since 45 minutes cannot pass here."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fsspec
import pytest
from google.auth.credentials import AnonymousCredentials

from tests import REPO_ROOT
from tests.components.test_run_supervisor_function import (
    BUCKET,
    DELETE_VMS,
    MIG,
    NODE,
    RUN,
    STATE,
    VMS,
    _world,
)
from tests.components.test_tpu_supervisor_function import state_bucket
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.storage_grant import ObjectNameGrant
from trainstack.components.gpu_startup import RUN_CLOCK_PREFIX, node_helper
from trainstack.components.run_supervisor import supervisor_config
from trainstack.components.supervisor import main
from trainstack.trainers.common.run_records import ALIVE_SUFFIX, NO_HEARTBEAT_S

GROUP = "p/us-central1-a/exp-42-a100"
PREFIX = RUN["end_uri"].removesuffix(".ended")
ALIVE = PREFIX + ALIVE_SUFFIX
HEARTBEATS = {**RUN, "alive_uri": ALIVE, "node_count": len(VMS), "hourly_usd": 58.77}
QUIET = "no_heartbeat: no node reported for 45 min"


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator(bucket=BUCKET) as url:
        yield url


@pytest.fixture
def granted(gcs: str) -> Iterator[ObjectNameGrant]:
    """Cloud Storage as the supervisor's account sees it: the checkpoint bucket through its
    grant's condition (`records_condition`: the run records' object names only)."""
    with ObjectNameGrant(gcs, BUCKET, RUN_CLOCK_PREFIX) as front:
        yield front


def _summary(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["seen"], e["action"], e.get("reason"), e["result"]) for e in events]


def _quiet_for(world: Any, billed_s: float) -> None:
    """The supervisor's state after it has seen the group billing for `billed_s` with no
    heartbeat since its first sight, its last check 2 minutes ago."""
    now = time.time()
    first = now - billed_s - 120
    world.seed(started=first, heard=first, silent_s=billed_s, last_tick=now - 120, billing=True)


def test_the_constants_are_the_launchers() -> None:
    # The bundle cannot import trainstack; its constant is read from its source.
    tree = ast.parse((REPO_ROOT / "components/supervisor/main.py").read_text())
    [bound] = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["NO_HEARTBEAT_S"]
        and isinstance(node.value, ast.Constant)
    ]
    assert bound == NO_HEARTBEAT_S == main.NO_HEARTBEAT_S == 2700
    assert ALIVE_SUFFIX == ".alive/"
    # A stage's reason: the supervisor keeps all the node helper records.
    assert main.DETAIL_MAX == node_helper.REASON_MAX == 500


def test_a_stage_that_failed_for_good_stops_the_compute_and_status_says_where(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=HEARTBEATS, instances=VMS)
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(GROUP, VMS)
        assert world.function.call()["action"] == "none"
        record = {"outcome": "failed", "stage": "package_install", "node_rank": 1}
        record |= {"reason": "pip install exited 1\nERROR: No matching distribution", "time": "t"}
        world.put(RUN["end_uri"], record)
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["result"]) == ("stop", "failed", "stopping")
        assert (stop["stage"], stop["detail"], stop["node"]) == (
            "package_install",
            "pip install exited 1",
            1,
        )
        assert world.compute.deletions == [(GROUP, DELETE_VMS)]  # at once: no stop request first
        assert world.function.call()["result"] == "stopping"  # its VMs still being deleted
        assert world.function.call()["result"] == "compute stopped"
        gone = world.events()[-1]
        assert (gone["stage"], gone["detail"], gone["node"]) == (
            "package_install",
            "pip install exited 1",
            1,
        )
        # Which machine: the node rank the record names (the hosts' list maps it to a VM).
        assert world.status_lines()[0] == (
            "finished (failed at package_install on node 1: pip install exited 1); compute "
            f"stopped at {gone['time']}"
        )


@pytest.mark.parametrize("rank", [None, True, -1, "1"])
def test_a_failure_record_without_a_node_rank_names_no_node(
    rank: object, tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("node", NODE, None, STATE, run=RUN, recover=False)
    with _world(tmp_path, gcs, config) as world:
        world.tpu.nodes[NODE] = {"name": NODE, "state": "READY"}
        record = {"outcome": "failed", "stage": "startup", "reason": "no runtime"}
        world.put(RUN["end_uri"], record | ({} if rank is None else {"node_rank": rank}))
        stop = world.function.call()
        assert (stop["action"], stop["stage"], "node" in stop) == ("stop", "startup", False)
        assert world.status_lines()[0] == (
            f"finished (failed at startup: no runtime); compute stopped at {stop['time']}"
        )


def test_no_heartbeat_for_45_minutes_of_billing_stops_the_compute_at_once(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=HEARTBEATS, instances=VMS)
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        _quiet_for(world, NO_HEARTBEAT_S - 60)  # this check adds the last 2 minutes
        stop = world.function.call()
        assert (stop["seen"], stop["action"], stop["reason"], stop["result"]) == (
            "SIZE_2",
            "stop",
            "no_heartbeat",
            "stopping",
        )
        assert world.compute.deletions == [(GROUP, DELETE_VMS)]
        world.fs.invalidate_cache()
        assert not world.fs.exists(RUN["stop_uri"].removeprefix("gs://"))  # nothing to save
        assert world.status_lines()[0] == (
            f"finished ({QUIET}); stopping the compute since {stop['time']} "
            "(2 instance(s) still being deleted)"
        )
        assert _summary(world.events()) == [("SIZE_2", "stop", "no_heartbeat", "stopping")]
        # Read under its grant's condition: no call refused (a list would be), nothing logged.
        assert granted.denied == []
        assert not [line for line in world.function.printed() if "heartbeats unread" in line]


def test_a_fresh_heartbeat_keeps_the_compute_up(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=HEARTBEATS, instances=VMS)
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        _quiet_for(world, NO_HEARTBEAT_S - 60)
        # Node 1's launcher rewrote its heartbeat a moment ago (its content is not read);
        # node 0 has written none.
        world.fs.pipe_file(f"{ALIVE}1".removeprefix("gs://"), b"not read")
        for _ in range(2):
            check = world.function.call()
            assert (check["action"], check["result"]) == ("none", "ok")
        assert world.compute.deletions == []
        assert world.events() == []
        world.fs.invalidate_cache()
        run = json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]
        assert run["silent_s"] < 60  # the billing time since that heartbeat
        assert (run["heartbeats_unread"], granted.denied) == (None, [])


def test_heartbeats_it_cannot_read_never_end_the_run_and_are_logged_once(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=HEARTBEATS, instances=VMS)
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        _quiet_for(world, NO_HEARTBEAT_S - 60)  # this check would reach the bound
        granted.refused = ALIVE.removeprefix(f"gs://{BUCKET}/")  # every heartbeat get: 403
        for _ in range(2):
            check = world.function.call()
            assert (check["action"], check["result"], check.get("reason")) == ("none", "ok", None)
        assert world.compute.deletions == []
        [unread] = [line for line in world.function.printed() if "heartbeats unread" in line]
        # The first get refused: node 0's (gcsfs names the object quoted, `/` as %2F).
        node_0 = quote(f"{PREFIX.removeprefix(f'gs://{BUCKET}/')}.alive/0", safe="")
        assert json.loads(unread) == {
            "severity": "WARNING",
            "message": f"supervisor: heartbeats unread: error: OSError: Forbidden: b/{BUCKET}/o/"
            f"{node_0}\nThe caller does not have storage.objects.get access to the Google Cloud "
            f"Storage bucket {BUCKET} under its grant's condition.",
        }
        world.fs.invalidate_cache()
        run = json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]
        assert (run["silent_s"], run["heartbeats_unread"].startswith("error: OSError")) == (
            0.0,
            True,
        )
        # Readable again, and no node has reported: the silence counts from now.
        granted.refused = None
        assert world.function.call()["action"] == "none"
        world.fs.invalidate_cache()
        run = json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]
        assert (run["heartbeats_unread"], run["silent_s"] < 60) == (None, True)


def _check(config: dict[str, Any], now: float) -> dict[str, Any]:
    """One check in process, at `now`, as the function makes it."""
    credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    target = main.target_of(config, credentials)
    return main.supervise_once(target, main.Store(config["state_uri"], "anon"), now, config)


def test_a_heartbeat_before_the_supervisors_first_sight_does_not_extend_the_bound(
    gcs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = fsspec.filesystem("gcs", endpoint_url=gcs, token="anon")
    state_bucket(fs, STATE)
    for leftover in fs.find(BUCKET):
        fs.rm(leftover)
    config = supervisor_config("mig", MIG, None, STATE, run=HEARTBEATS, instances=VMS)
    with ComputeFakeServer() as compute:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs)
        monkeypatch.setenv(main.COMPUTE_ENDPOINT_ENV, compute.endpoint)
        compute.create_instances(GROUP, VMS)
        # A heartbeat from before the compute was seen billing (a node of an earlier boot).
        fs.pipe_file(f"{ALIVE}0".removeprefix("gs://"), b"")
        first = time.time() + 60  # the supervisor's first sight, after that heartbeat
        assert _check(config, first)["result"] == "ok"
        quiet = _check(config, first + NO_HEARTBEAT_S - 1)
        assert (quiet["action"], quiet.get("reason")) == ("none", None)
        stop = _check(config, first + NO_HEARTBEAT_S)
        assert (stop["action"], stop["reason"], stop["result"]) == (
            "stop",
            "no_heartbeat",
            "stopping",
        )
        assert compute.deletions == [(GROUP, DELETE_VMS)]


def test_an_end_record_it_cannot_read_is_logged_once_and_read_again_later(
    tmp_path: Path, gcs: str, granted: ObjectNameGrant
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=HEARTBEATS, instances=VMS)
    ended = RUN["end_uri"]
    with _world(tmp_path, gcs, config, storage_endpoint=granted.url) as world:
        world.compute.create_instances(GROUP, VMS)
        world.fs.pipe_file(ended.removeprefix("gs://"), b'{"outcome": "done", "node_rank": 0}')
        granted.refused = ended.removeprefix(f"gs://{BUCKET}/")  # a wrong grant: 403
        for _ in range(2):
            # Was an uncaught 403 (HTTP 500 from the function); the check goes on instead.
            check = world.function.call()
            assert (check["action"], check["result"], check.get("reason")) == ("none", "ok", None)
        assert world.compute.deletions == []
        [unread] = [line for line in world.function.printed() if "end record unread" in line]
        assert json.loads(unread)["message"].startswith(
            "supervisor: the run's end record unread: error: OSError: Forbidden: "
        )
        granted.refused = None
        check = world.function.call()
        assert (check["action"], check.get("reason")) == ("stop", "done")
        assert world.compute.deletions == [(GROUP, DELETE_VMS)]

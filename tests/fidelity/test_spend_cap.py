"""`limits.max_total_usd` end to end on the Compute Engine launch path (tests/fidelity/
test_gce.py's VMs): the planned supervisor counts the group's spend at list price, writes
the stop request once the cap is reached, the node launchers stop the trainer with SIGTERM
(it saves a checkpoint), rank 0 records `stopped`, the restarted units hold instead of
training on, and the supervisor then deletes the group's VMs. About 60 s here."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fidelity.nodes import events, explain, require_unshare
from tests.fidelity.supervisor import read_object, serve_planned_supervisor
from tests.fidelity.test_gce import NODES, STACK, Group, _plan_document, _planned
from trainstack.trainers.common.checkpoint import newest_marked


@pytest.fixture
def fakes() -> Iterator[tuple[str, LoggingFakeServer]]:
    """The GCS emulator and the Cloud Logging API, as test_gce's VMs use them."""
    require_unshare()
    with running_gcs_emulator() as storage, LoggingFakeServer() as logging_api:
        yield storage, logging_api


CAP_USD = 0.05
"""prod-a100-gce cut to 2 nodes bills $58.77/hour at list price: about 3 s pass the cap."""


@pytest.mark.trainer
@pytest.mark.slow
def test_the_spend_cap_saves_a_checkpoint_then_empties_the_group(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, logging_api = fakes
    plan = _plan_document({"steps": 400, "checkpoint_every": 1000}, {"max_total_usd": CAP_USD})
    planned = _planned(plan)
    group = Group(tmp_path, planned, storage, logging_api.endpoint)
    # Test hooks: slow steps, so the run is still going when the cap is reached; a short
    # poll of the stop request (30 s on Google Cloud).
    hooks = {"TRAINSTACK_TEST_STEP_DELAY_S": "0.05", "TRAINSTACK_RUN_STOP_POLL_S": "0.5"}
    vms = [group.boot(rank, hooks) for rank in range(NODES)]
    try:
        with serve_planned_supervisor(plan, tmp_path / "sup", storage, NODES) as served:
            run = served.config["run"]
            assert (run["hourly_usd"], run["max_total_usd"]) == (58.77, CAP_USD)
            deadline = time.monotonic() + 240
            while not any(r.get("step", 0) >= 3 for r in vms[0].records()):
                assert time.monotonic() < deadline, explain(vms)
                time.sleep(0.2)
            assert served.function.call()["action"] == "none"  # the first count
            time.sleep(3.5)
            request = served.function.call()
            assert (request["action"], request["reason"]) == ("request_stop", "max_total_usd")
            assert request["spend_usd"] >= CAP_USD
            while True:
                try:
                    ended = read_object(storage, run["end_uri"])
                    break
                except OSError:
                    assert time.monotonic() < deadline, explain(vms)
                    time.sleep(0.5)
            assert (ended["outcome"], ended["reason"], ended["node_rank"]) == (
                "stopped",
                "max_total_usd",
                0,
            )
            stop = served.function.call()
            assert (stop["action"], stop["reason"], stop["result"]) == (
                "stop",
                "stopped",
                "stopping",
            )
            assert (served.compute.deletions, served.compute.resizes) == ([planned.stop], [])
            # The units restarted after exit 143 and hold while the request stands.
            while not all("holding: the supervisor asked" in vm.output() for vm in vms):
                assert time.monotonic() < deadline, explain(vms)
                time.sleep(0.5)
            # The VMs still bill while the group deletes them; stopped once they are gone.
            deleting = served.function.call()
            assert (deleting["seen"], deleting["result"]) == (f"DELETING_{NODES}", "stopping")
            counted = read_object(storage, served.config["state_uri"] + "/state.json")["run"]
            assert (counted["billing"], counted["stopping"] is not None) == (True, True)
            gone = served.function.call()
            assert (gone["seen"], gone["result"]) == ("STOPPED", "compute stopped")
            assert len(served.compute.deletions) == 1
    finally:
        for vm in vms:  # the supervisor's deleteInstances deletes the VMs
            vm.kill()
        group.close()
    [step] = {r["step"] for r in events(vms, "preempted")}
    assert not events(vms, "done")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage)
    folder = f"gs://{planned.checkpoint_bucket}/checkpoints/{STACK}"
    assert newest_marked(folder) == (step, f"step-{step:08d}")
    for vm in vms:
        assert "systemd-shim: trainstack-trainer exited 143" in vm.output()

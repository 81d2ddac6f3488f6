"""A managed instance group as the supervisor counts and stops it (the audit's L7 and L8):
its spend counts only while one of its VMs runs (a group whose Spot VMs Compute Engine
preempted holds them TERMINATED and bills no accelerator for them), and its stop deletes
every VM the group holds by name, the stack's and any a resize added, since
`deleteInstances` deletes only the VMs it names. Google's functions-framework serving the
bundle against `tests.fakes.compute_server.ComputeFakeServer` (its `listManagedInstances`
answers each VM's `instanceStatus`; `preempt` stops Spot VMs as Compute Engine does) and the
GCS emulator."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.components.test_run_supervisor_function import (
    BUCKET,
    DELETE_VMS,
    MIG,
    RUN,
    STATE,
    VMS,
    _world,
)
from tests.fakes.gcs_emulator import running_gcs_emulator
from trainstack.components._discovery import validate_body
from trainstack.components.run_supervisor import supervisor_config

GROUP = "p/us-central1-a/exp-42-a100"


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator(bucket=BUCKET) as url:
        yield url


def test_a_group_whose_spot_vms_were_all_preempted_adds_nothing_to_the_spend(
    tmp_path: Path, gcs: str
) -> None:
    # $100 a second while it bills.
    config = supervisor_config(
        "mig", MIG, None, STATE, run={**RUN, "hourly_usd": 360000.0}, instances=VMS
    )
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(GROUP, VMS)
        world.compute.preempt(GROUP, VMS)
        first = world.function.call()
        time.sleep(1.0)
        second = world.function.call()
        assert [(c["seen"], c["action"], c["result"]) for c in (first, second)] == [
            ("SIZE_2", "none", "ok"),
            ("SIZE_2", "none", "ok"),
        ]
        # Was $100 for each second between the checks: the group asks for 2 VMs, none runs.
        run = json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]
        assert (run["billing"], run["spend_usd"], run["started"]) == (False, 0.0, None)
        assert world.compute.deletions == []


def test_one_preempted_vm_of_two_leaves_the_group_billing(tmp_path: Path, gcs: str) -> None:
    config = supervisor_config(
        "mig", MIG, None, STATE, run={**RUN, "hourly_usd": 360000.0}, instances=VMS
    )
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(GROUP, VMS)
        world.compute.preempt(GROUP, VMS[1:])
        world.function.call()
        time.sleep(1.0)
        world.function.call()
        # Still billing (one VM runs): the check counts the time between the two.
        run = json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]
        assert run["billing"] is True


def test_a_vm_a_resize_added_is_deleted_with_the_stacks_own(tmp_path: Path, gcs: str) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=RUN, instances=VMS)
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(GROUP, VMS)
        world.compute.scale(GROUP, 3)  # `gcloud ... resize --size=3`: an auto-named VM
        [added] = sorted(set(world.compute.members(GROUP)) - set(VMS))
        assert added == "exp-42-a100-0001"
        world.put(RUN["end_uri"], {"outcome": "done"})
        stop = world.function.call()
        assert (stop["seen"], stop["action"], stop["result"], stop["instances_left"]) == (
            "SIZE_3",
            "stop",
            "stopping",
            3,
        )
        # Was the two it names only: the group kept the third, billing, at target size 1.
        body = {
            "instances": [*DELETE_VMS["instances"], f"zones/us-central1-a/instances/{added}"],
            "skipInstancesOnValidationError": True,
        }
        assert world.compute.deletions == [(GROUP, body)]
        assert (
            validate_body("compute.v1", "InstanceGroupManagersDeleteInstancesRequest", body) == []
        )
        assert world.compute.groups[GROUP]["targetSize"] == 0
        assert world.function.call()["seen"] == "DELETING_3"
        gone = world.function.call()
        assert (gone["seen"], gone["result"]) == ("STOPPED", "compute stopped")
        assert world.compute.members(GROUP) == {}

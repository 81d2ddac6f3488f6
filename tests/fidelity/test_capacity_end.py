"""The end of a flex-start machine's run duration on the Compute Engine target, seen by the
planned run supervisor: `prod-a100-gce` with `flex_start: true` (two nodes), its bundle
served by Google's `functions-framework` against the GCS emulator and the Compute Engine
fake. Node 0's launcher recorded `capacity_ended` with the step its trainer saved before the
VM's maxRunDuration (what `tests/trainers/test_capacity_end.py` runs for real): the
supervisor deletes the group's VMs at once, as for every end that needs no checkpoint of its
own, `trainstack status` says `finished (flex-start duration ended; checkpoint at step 40;
`pulumi up` to continue); compute stopped at <time>`, and once `pulumi up` brings VMs back
(new capacity) the run goes on: the end record is withdrawn and the VMs are not stopped
again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fidelity import test_gce
from tests.fidelity.supervisor import planned_supervisor, serve_planned_supervisor, stack_status
from trainstack.infra.plan import build_plan

STEP = 40


@pytest.fixture
def fakes() -> Iterator[tuple[str, LoggingFakeServer]]:
    with running_gcs_emulator() as storage, LoggingFakeServer() as logging_api:
        yield storage, logging_api


def _config() -> dict[str, Any]:
    config = test_gce._stack_config({"steps": 400})
    section = config["trainstack:gpu_cluster"]
    config["trainstack:gpu_cluster"] = {**section, "flex_start": True}
    return config


def _seen(answers: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(a["seen"], a["action"], a.get("reason"), a.get("step"), a["result"]) for a in answers]


def test_a_flex_start_vms_end_stops_the_group_and_pulumi_up_goes_on(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    storage, logging_api = fakes
    config = _config()
    plan = build_plan(test_gce.STACK, config)
    planned = test_gce._planned(plan)
    run = planned_supervisor(plan, tmp_path / "bundle")["run"]
    fs = fsspec.filesystem("gcs", endpoint_url=storage, token="anon")
    bucket = run["end_uri"].removeprefix("gs://").split("/")[0]
    fs.mkdir(bucket)
    # Node 0's launcher, as trainstack.trainers.common.run_records writes it.
    ended = {"outcome": "capacity_ended", "step": STEP, "node_rank": 0, "time": "x"}
    fs.pipe_file(run["end_uri"].removeprefix("gs://"), json.dumps(ended).encode())

    with serve_planned_supervisor(plan, tmp_path / "supervisor", storage, 2) as served:
        answers = [served.function.call() for _ in range(3)]
        endpoints = {
            "compute": served.compute.endpoint,
            "logging": logging_api.endpoint,
            "storage": f"{storage}/storage/v1/",
        }
        code, lines = stack_status(plan, config, tmp_path / "status", endpoints)
        # `pulumi up`: the provider's per-instance configs bring the VMs back, on new
        # flex-start capacity (tests/fidelity/test_gce_group_count.py).
        group = "/".join([planned.project, planned.zone, served.config["name"].split("/")[-1]])
        served.compute.create_instances(group, planned.names)
        back = served.function.call()
        again = served.function.call()
    assert _seen(answers) == [
        ("SIZE_2", "stop", "capacity_ended", STEP, "stopping"),
        ("DELETING_2", "none", "capacity_ended", STEP, "stopping"),
        ("STOPPED", "none", "capacity_ended", STEP, "compute stopped"),
    ]
    assert (served.compute.deletions, served.compute.resizes) == ([planned.stop], [])
    assert code == 0, lines
    [finished] = [line for line in lines if line.startswith("finish")]
    assert finished == (
        f"finished (flex-start duration ended; checkpoint at step {STEP}; `pulumi up` to "
        "continue (raise limits.max_run_hours first if the run used it up)); compute stopped "
        f"at {answers[-1]['time']}"
    )
    events = fs.cat_file(served.config["state_uri"].removeprefix("gs://") + "/events.jsonl")
    last = json.loads(events.decode().splitlines()[-1])
    assert (last["seen"], last["result"]) == (
        "SIZE_2",
        "compute back after a stop; the run goes on from its checkpoint",
    )
    assert not fs.exists(run["end_uri"].removeprefix("gs://"))
    for check in (back, again):  # nothing stopped again: the run trains on
        assert (check["seen"], check["action"], check["result"]) == ("SIZE_2", "none", "ok")
    assert len(served.compute.deletions) == 1

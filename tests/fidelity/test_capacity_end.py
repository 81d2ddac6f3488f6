"""The end of a flex-start machine's run duration on the Compute Engine target, seen by the
planned run supervisor: `prod-a100-gce` with `flex_start: true` (two A2 nodes) deployed as
the engine and the provider deploy it against the Compute Engine fake
(`tests.fidelity.gce_deploy`): an empty group and one resize request, whose 2 VMs the group
names itself. Its bundle is served by Google's `functions-framework` against the GCS emulator
and that fake. Node 0's launcher recorded `capacity_ended` with the step its trainer saved
before the VM's maxRunDuration (what `tests/trainers/test_capacity_end.py` runs for real):
the supervisor deletes the VMs the group lists at once, as for every end that needs no
checkpoint of its own, and `trainstack status` says so. The resize request is spent then
(SUCCEEDED; a request's every field is ForceNew and the provider reads only its state,
terraform-provider-google resource_compute_resize_request.go), so `pulumi up --refresh`
alone changes nothing and brings no VM back; `pulumi up --replace <its URN>` deletes it and
asks again, and once Dynamic Workload Scheduler fills the new request the run goes on: the
end record is withdrawn and the VMs are not stopped again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests import REPO_ROOT
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fidelity import test_gce
from tests.fidelity.gce_deploy import RESIZE, Provider, Stack, refresh_option, registered
from tests.fidelity.supervisor import planned_supervisor, serve_planned_supervisor, stack_status
from trainstack.infra.plan import build_plan

STEP = 40
GROUP = f"my-ml-project/us-central1-c/{test_gce.STACK}-a100"
REQUEST = f"{test_gce.STACK}-a100-run"


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


def test_a_flex_start_vms_end_stops_the_group_and_a_new_resize_request_goes_on(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    storage, logging_api = fakes
    config = _config()
    plan = build_plan(test_gce.STACK, config)
    run = planned_supervisor(plan, tmp_path / "bundle")["run"]
    fs = fsspec.filesystem("gcs", endpoint_url=storage, token="anon")
    bucket = run["end_uri"].removeprefix("gs://").split("/")[0]
    fs.mkdir(bucket)
    # Node 0's launcher, as trainstack.trainers.common.run_records writes it.
    ended = {"outcome": "capacity_ended", "step": STEP, "node_rank": 0, "time": "x"}
    fs.pipe_file(run["end_uri"].removeprefix("gs://"), json.dumps(ended).encode())
    resources = registered(config)
    [request] = [r for r in resources if r.type == RESIZE]
    refresh = refresh_option(REPO_ROOT / "Pulumi.yaml")

    with ComputeFakeServer() as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(resources, refresh=refresh)
        api.fulfil(GROUP, REQUEST)
        first = sorted(api.members(GROUP))
        with serve_planned_supervisor(
            plan, tmp_path / "supervisor", storage, 2, deployed=api
        ) as served:
            answers = [served.function.call() for _ in range(3)]
            endpoints = {
                "compute": api.endpoint,
                "logging": logging_api.endpoint,
                "storage": f"{storage}/storage/v1/",
            }
            code, lines = stack_status(plan, config, tmp_path / "status", endpoints)
            # `pulumi up`: the spent request is read SUCCEEDED and left as it is.
            stack.up(resources, refresh=refresh)
            after_up = (api.members(GROUP), api.resize_requests(GROUP)[REQUEST]["state"])
            idle = served.function.call()
            # `pulumi up --replace <the request's URN>`: deleted (no cancel: SUCCEEDED), then
            # created again; its new VMs wait for capacity, then run.
            stack.up(resources, refresh=refresh, replace=[request.name])
            waiting = served.function.call()
            api.fulfil(GROUP, REQUEST)
            second = sorted(api.members(GROUP))
            back = served.function.call()
            again = served.function.call()
    assert first == [f"{test_gce.STACK}-a100-0001", f"{test_gce.STACK}-a100-0002"]
    assert _seen(answers) == [
        ("SIZE_2", "stop", "capacity_ended", STEP, "stopping"),
        ("DELETING_2", "none", "capacity_ended", STEP, "stopping"),
        ("STOPPED", "none", "capacity_ended", STEP, "compute stopped"),
    ]
    # Exactly the VMs the group listed: no planned `<dep>-a100-<i>` name (none exists).
    body = {
        "instances": [f"zones/us-central1-c/instances/{name}" for name in first],
        "skipInstancesOnValidationError": True,
    }
    assert api.deletions == [(GROUP, body)]
    assert api.resizes == []
    assert code == 0, lines
    [finished] = [line for line in lines if line.startswith("finish")]
    # The name status gives is the request's (the URN ends `::<name>`).
    assert request.urn.endswith(f"::{test_gce.STACK}-gpu-resize")
    assert finished == (
        f"finished (flex-start duration ended; checkpoint at step {STEP}; `pulumi up "
        f"--replace <URN of {test_gce.STACK}-gpu-resize>` (`pulumi stack --show-urns`; the "
        "group's resize request is spent, `pulumi up` alone asks for no VM) to continue "
        "(raise limits.max_run_hours first if the run used it up)); compute stopped at "
        f"{answers[-1]['time']}"
    )
    assert after_up == ({}, "SUCCEEDED")
    assert (idle["seen"], idle["action"], idle["result"]) == ("STOPPED", "none", "stopped")
    assert second == [f"{test_gce.STACK}-a100-0003", f"{test_gce.STACK}-a100-0004"]
    # The new request's VMs wait for capacity (none runs): the run is not back yet.
    assert (waiting["seen"], waiting["action"], waiting["result"]) == ("SIZE_2", "none", "stopped")
    events = fs.cat_file(served.config["state_uri"].removeprefix("gs://") + "/events.jsonl")
    back_events = [
        json.loads(line)
        for line in events.decode().splitlines()
        if json.loads(line)["result"].startswith("compute back")
    ]
    assert [(e["seen"], e["result"]) for e in back_events] == [
        ("SIZE_2", "compute back after a stop; the run goes on from its checkpoint"),
    ]
    assert not fs.exists(run["end_uri"].removeprefix("gs://"))
    for check in (back, again):  # nothing stopped again: the run trains on
        assert (check["seen"], check["action"], check["result"]) == ("SIZE_2", "none", "ok")
    assert len(api.deletions) == 1

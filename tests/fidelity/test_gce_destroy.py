"""`pulumi destroy` of the `prod-a100-gce` stack after the run supervisor stopped its group:
the program's registrations deployed and destroyed the way the Pulumi engine and the
Terraform provider under pulumi-gcp do (`tests.fidelity.gce_deploy`), against the Compute
Engine fake (`tests.fakes.compute_server`), with the planned supervisor's own stop
(`tests.fidelity.supervisor`) in between.

The supervisor deletes the group's VMs by name and their per-instance configs go with them,
while the stack's state still holds the configs. The provider deletes a config with
`remove_instance_on_destroy` by `deleteInstances` naming its VM, without
`skipInstancesOnValidationError` (resource_compute_per_instance_config.go
resourceComputePerInstanceConfigDelete), and the API fails that call for a VM no longer in
the group. With the project's `options.refresh: always` (Pulumi.yaml) the destroy reads
first: the configs' Read (listPerInstanceConfigs, flattenNestedComputePerInstanceConfig)
finds them gone, so only the group and the template are deleted. Without it
(`--refresh=false`) the destroy deletes the configs first, all refused, and
stops there, having deleted nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.gce_deploy import (
    CONFIG,
    GROUP,
    TEMPLATE,
    DestroyFailed,
    Provider,
    Stack,
    refresh_option,
    registered,
)
from tests.fidelity.supervisor import serve_planned_supervisor
from trainstack.infra.plan import build_plan, load_stack

STACK = "prod-a100-gce"
KEY = "my-ml-project/us-central1-c/prod-a100-gce-a100"
CHECKPOINTS = "my-ml-project-prod-a100-gce-checkpoints"
PROJECT_FILE = Path(__file__).resolve().parents[2] / "Pulumi.yaml"


def _stopped(tmp_path: Path, api: ComputeFakeServer) -> Stack:
    """The stack deployed, then its group stopped by the planned supervisor at the run's end
    (its VMs deleted by name; the state still holds their configs)."""
    _, config = load_stack(STACK, None)
    stack = Stack(Provider(api.endpoint))
    stack.up(registered(config))
    plan = build_plan(STACK, config)
    with (
        running_gcs_emulator(bucket=CHECKPOINTS) as storage,
        serve_planned_supervisor(plan, tmp_path, storage, 4, deployed=api) as served,
    ):
        assert served.function.call()["seen"] == "SIZE_4"
        end: dict[str, Any] = {"outcome": "done", "node_rank": 0}
        fs = fsspec.filesystem("gcs", endpoint_url=storage, token="anon")
        uri = served.config["run"]["end_uri"].removeprefix("gs://")
        fs.pipe_file(uri, json.dumps(end).encode())
        assert served.function.call()["result"] == "stopping"
        assert served.function.call()["seen"] == "DELETING_4"
        assert served.function.call()["result"] == "compute stopped"
    assert api.members(KEY) == {}
    return stack


def _calls(api: ComputeFakeServer, start: int) -> list[str]:
    """The changing calls after the `start`th request, as `METHOD last-path-segment`."""
    return [
        f"{method} {path.rsplit('/', 1)[-1]}"
        for method, path in api.requests[start:]
        if method != "GET" and not path.rsplit("/", 1)[-1].startswith("list")
    ]


def test_the_project_refreshes_before_up_preview_and_destroy() -> None:
    assert refresh_option(PROJECT_FILE) is True
    assert refresh_option(PROJECT_FILE, "false") is False


def test_destroy_after_the_supervisor_stop_deletes_the_group_and_nothing_else(
    tmp_path: Path,
) -> None:
    with ComputeFakeServer() as api:
        stack = _stopped(tmp_path, api)
        start = len(api.requests)
        stack.destroy(refresh=refresh_option(PROJECT_FILE))
        # The refresh dropped the four configs the supervisor's delete took with their VMs;
        # the destroy deleted the group (the template makes no call here).
        assert _calls(api, start) == ["DELETE prod-a100-gce-a100"]
        assert (stack.state, KEY in api.groups, api.deletions[1:]) == ({}, False, [])


def test_destroy_without_a_refresh_is_refused_at_the_node_configs(tmp_path: Path) -> None:
    with ComputeFakeServer() as api:
        stack = _stopped(tmp_path, api)
        start = len(api.requests)
        with pytest.raises(DestroyFailed) as failed:
            stack.destroy(refresh=refresh_option(PROJECT_FILE, "false"))
        # The four configs, which nothing depends on, go first: each deleteInstances naming
        # its VM is refused, so nothing is deleted and the group, empty, and the whole state
        # are left for a destroy that reads first.
        refused = {n: (e.code, e.message) for n, e in failed.value.refused.items()}
        assert refused == {
            f"prod-a100-gce-gpu-{rank}": (
                400,
                f"not in the group or already being deleted: ['prod-a100-gce-a100-{rank}']",
            )
            for rank in range(4)
        }
        assert _calls(api, start) == ["POST deleteInstances"] * 4
        assert sorted(d.type for d in stack.state.values()) == sorted(
            [TEMPLATE, GROUP] + [CONFIG] * 4
        )
        assert (KEY in api.groups, api.groups[KEY]["targetSize"]) == (True, 0)

"""How many VMs the gce backend's group asks Google for, and with which ranks: the
`prod-a100-gce` program's registrations deployed the way `pulumi up` deploys them
(`tests.fidelity.gce_deploy`: the engine's steps and the Terraform provider's calls) against
the Compute Engine fake, which creates and deletes VMs as the API does
(`tests.fakes.compute_server`). Each case ends with exactly `node_count` VMs, named
`<deployment>-a100-<rank>`, each with its `trainstack-node-rank` metadata: on first deploy,
after the run supervisor stopped the group (its VMs deleted by name, as the provider deletes
a per-instance config) and `pulumi up` (which refreshes first: Pulumi.yaml) brought it back,
after a new template, a replaced per-instance config, a replaced group, and a new node
count. Nothing here resizes
the group: the fake refuses a resize that would delete a VM with a per-instance config (in
no source read here).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.gce_deploy import (
    CONFIG,
    Provider,
    ProviderError,
    Stack,
    refresh_option,
    registered,
    template_link,
)
from tests.fidelity.supervisor import serve_planned_supervisor
from trainstack.components.gpu_startup import NODE_RANK_ATTRIBUTE
from trainstack.infra.mocks import RecordedResource
from trainstack.infra.plan import build_plan, load_stack

STACK = "prod-a100-gce"
GROUP = "my-ml-project/us-central1-c/prod-a100-gce-a100"
CHECKPOINTS = "my-ml-project-prod-a100-gce-checkpoints"
PROJECT_FILE = Path(__file__).resolve().parents[2] / "Pulumi.yaml"


def _config(node_count: int = 4, steps: int | None = None) -> dict[str, Any]:
    _, config = load_stack(STACK, None)
    config = copy.deepcopy(config)
    config["trainstack:gpu_cluster"]["node_count"] = node_count
    if steps is not None:
        config["trainstack:trainer"]["steps"] = steps
    return config


def _ranks(api: ComputeFakeServer, key: str = GROUP) -> dict[str, str | None]:
    """Every VM the group holds, by name: its rank metadata (None: it has none)."""
    return {name: m.metadata.get(NODE_RANK_ATTRIBUTE) for name, m in api.members(key).items()}


def _ranked(node_count: int) -> dict[str, str | None]:
    return {f"{STACK}-a100-{rank}": str(rank) for rank in range(node_count)}


def _size(api: ComputeFakeServer, key: str = GROUP) -> int:
    return int(api.groups[key]["targetSize"])


def _calls(api: ComputeFakeServer, start: int) -> list[str]:
    """The group calls after the `start`th request, as `METHOD verb`."""
    calls = []
    for method, path in api.requests[start:]:
        verb = path.rsplit("/", 1)[-1]
        if method != "GET" and not verb.startswith("list"):
            calls.append(f"{method} {verb}")
    return calls


def test_the_first_deploy_asks_for_exactly_node_count_vms_each_with_its_rank() -> None:
    with ComputeFakeServer(deletion_gets=0) as api:
        Stack(Provider(api.endpoint)).up(registered(_config()))
        # Four named VMs from the four per-instance configs, and nothing else: a target
        # size of the group's own would add four auto-named VMs without a rank.
        assert _ranks(api) == _ranked(4)
        assert _size(api) == 4
        assert [c for c in _calls(api, 0) if c != "POST createInstances"] == [
            "POST instanceGroupManagers"
        ]


def _put(storage: str, uri: str, value: Any) -> None:
    fs = fsspec.filesystem("gcs", endpoint_url=storage, token="anon")
    fs.pipe_file(uri.removeprefix("gs://"), json.dumps(value).encode())


def test_after_the_supervisor_stops_the_group_pulumi_up_brings_back_the_same_vms(
    tmp_path: Path,
) -> None:
    config = _config()
    resources = registered(config)
    plan = build_plan(STACK, config)
    with ComputeFakeServer() as api, running_gcs_emulator(bucket=CHECKPOINTS) as storage:
        stack = Stack(Provider(api.endpoint))
        stack.up(resources)
        with serve_planned_supervisor(plan, tmp_path, storage, 4, deployed=api) as served:
            assert served.function.call()["seen"] == "SIZE_4"
            _put(storage, served.config["run"]["end_uri"], {"outcome": "done", "node_rank": 0})
            start = len(api.requests)
            stop = served.function.call()
            assert (stop["action"], stop["result"]) == ("stop", "stopping")
            assert served.function.call()["seen"] == "DELETING_4"
            assert served.function.call()["result"] == "compute stopped"
        # One deleteInstances naming the four VMs, as the provider's config delete names one.
        names = [f"zones/us-central1-c/instances/{name}" for name in _ranked(4)]
        body = {"instances": names, "skipInstancesOnValidationError": True}
        assert api.deletions == [(GROUP, body)]
        assert (_calls(api, start), api.resizes) == (["POST deleteInstances"], [])
        # It deleted the VMs and their per-instance configs with them.
        assert (_ranks(api), _size(api)) == ({}, 0)
        project, zone, name = GROUP.split("/")
        path = f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}"
        assert stack.provider._send("POST", f"{path}/listPerInstanceConfigs") == {}
        # `pulumi up --refresh=false` reads nothing: the state still holds the four configs.
        stack.up(resources, refresh=refresh_option(PROJECT_FILE, "false"))
        assert (_ranks(api), _size(api)) == ({}, 0)
        # `pulumi up` refreshes first (the project's `options.refresh: always`): it finds
        # them gone and creates them again; the group's target size, left to the configs,
        # is not resized.
        start = len(api.requests)
        stack.up(resources, refresh=refresh_option(PROJECT_FILE))
        assert _ranks(api) == _ranked(4)
        assert _size(api) == 4
        assert _calls(api, start) == ["POST createInstances"] * 4


def test_a_new_template_recreates_the_same_ranked_vms() -> None:
    with ComputeFakeServer(deletion_gets=0) as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(registered(_config()))
        changed = registered(_config(steps=30000))
        start = len(api.requests)
        stack.up(changed)
        # The group's PROACTIVE update recreates every VM from the new template.
        assert _calls(api, start) == ["PATCH prod-a100-gce-a100"]
        [template] = [r for r in changed if r.name == f"{STACK}-gpu-template"]
        link = template_link(template.inputs)
        members = api.members(GROUP)
        assert _ranks(api) == _ranked(4)
        assert {(m.template, m.created) for m in members.values()} == {(link, 2)}
        assert _size(api) == 4


def _without_delete_first(resources: list[RecordedResource]) -> list[RecordedResource]:
    return [dataclasses.replace(r, delete_before_replace=False) for r in resources]


def test_a_replaced_node_config_deletes_its_vm_before_creating_it_again() -> None:
    resources = registered(_config())
    with ComputeFakeServer() as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(resources)
        start = len(api.requests)
        stack.up(resources, replace=[f"{STACK}-gpu-1"])
        assert _calls(api, start) == ["POST deleteInstances", "POST createInstances"]
        assert _ranks(api) == _ranked(4)
        assert _size(api) == 4
    # Created first (Pulumi's default), the new config would ask for a name the group
    # still holds.
    with ComputeFakeServer() as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(_without_delete_first(resources))
        with pytest.raises(ProviderError, match="HTTP 409"):
            stack.up(_without_delete_first(resources), replace=[f"{STACK}-gpu-1"])


def test_a_replaced_group_goes_with_its_vms_first_and_comes_back_with_node_count() -> None:
    resources = registered(_config())
    with ComputeFakeServer() as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(resources)
        start = len(api.requests)
        stack.up(resources, replace=[f"{STACK}-gpu-group"])
        assert _calls(api, start) == [
            *["POST deleteInstances"] * 4,
            "DELETE prod-a100-gce-a100",
            "POST instanceGroupManagers",
            *["POST createInstances"] * 4,
        ]
        assert _ranks(api) == _ranked(4)
        assert _size(api) == 4


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2)])
def test_a_new_node_count_adds_or_deletes_ranked_vms(before: int, after: int) -> None:
    with ComputeFakeServer() as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(registered(_config(before)))
        assert _ranks(api) == _ranked(before)
        stack.up(registered(_config(after)))
        assert _ranks(api) == _ranked(after)
        assert _size(api) == after
        resources = {r.name: r.type for r in registered(_config(after))}
        assert sum(t == CONFIG for t in resources.values()) == after

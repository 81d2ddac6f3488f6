"""The supervisor of a `tpu` stack with `backend: gke` (kind `node_pools`: one GKE node pool
per TPU slice) stopping the slices' pools at the run's end and at the spend cap, as Cloud
Functions runs it (`tests.components.test_run_supervisor_function`'s world: the bundle under
functions-framework against the GKE and Compute Engine fakes and the GCS emulator)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.components.test_run_supervisor_function import (
    RUN,
    STATE,
    World,
    _summary,
    _world,
    gcs,
)
from trainstack.components._discovery import validate_body
from trainstack.components.run_supervisor import supervisor_config
from trainstack.infra.supervision import stop_command

__all__ = ["gcs"]  # the fixture, used by name

CLUSTER = "projects/p/locations/us-east5-b/clusters/exp-42-tpu"
POOLS = ["tpu-0", "tpu-1"]
GROUPS = {
    f"{CLUSTER}/nodePools/{pool}": f"p/us-east5-b/gke-exp-42-tpu-{pool}-1a2b3c4d-grp"
    for pool in POOLS
}
"""Each slice's pool and its one instance group (GKE lists it in `instanceGroupUrls`)."""


def _url(group: str) -> str:
    project, zone, name = group.split("/")
    return (
        f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/"
        f"instanceGroupManagers/{name}"
    )


def _slices(world: World, size: int, autoscaling: dict[str, Any] | None = None) -> None:
    """Both slices up, `size` VMs each; GKE resizes a pool's group on `setSize`. An
    autoscaled pool's new maximum removes no node: the JobSet's pods still run on them
    (`tests.fakes.container_server`)."""
    for pool, group in GROUPS.items():
        world.compute.groups[group] = {"targetSize": size}
        world.container.pools[pool] = {"instanceGroupUrls": [_url(group)]}
        if autoscaling is not None:
            world.container.pools[pool]["autoscaling"] = dict(autoscaling)
    world.container.on_set_size = lambda name, count: world.compute.scale(GROUPS[name], count)


def test_the_runs_end_sets_both_slices_pools_to_zero(tmp_path: Path, gcs: str) -> None:
    config = supervisor_config("node_pools", CLUSTER, None, STATE, run=RUN, pools=POOLS)
    assert config["pools"] == POOLS
    with _world(tmp_path, gcs, config) as world:
        _slices(world, 4)
        running = world.function.call()
        assert (running["resource"], running["seen"], running["action"]) == (
            CLUSTER,
            "SIZE_8",
            "none",
        )
        world.put(RUN["end_uri"], {"outcome": "done", "step": 100})
        stop = world.function.call()
        assert (stop["seen"], stop["action"], stop["reason"], stop["result"]) == (
            "SIZE_8",
            "stop",
            "done",
            "stopping",
        )
        assert world.container.set_sizes == [(pool, {"nodeCount": 0}) for pool in GROUPS]
        assert validate_body("container.v1", "SetNodePoolSizeRequest", {"nodeCount": 0}) == []
        assert world.function.call()["seen"] == "DELETING_8"  # both groups' VMs still there
        gone = world.function.call()
        assert (gone["seen"], gone["result"]) == ("STOPPED", "compute stopped")
        assert world.function.call()["result"] == "stopped"
        assert len(world.container.set_sizes) == 2  # never resized again
        assert _summary(world.events()) == [
            ("SIZE_8", "stop", "done", "stopping"),
            ("DELETING_8", "none", "done", "stopping"),
            ("STOPPED", "none", "done", "compute stopped"),
        ]
        assert world.status_lines("dev-tpu-v6e-gke")[0] == (
            f"finished (done); compute stopped at {gone['time']}"
        )


def test_the_spend_cap_stops_flex_start_pools_through_their_autoscaling(
    tmp_path: Path, gcs: str
) -> None:
    # $100 a second, so two calls a second apart pass a $50 cap.
    run = {**RUN, "hourly_usd": 360000.0, "max_total_usd": 50.0}
    config = supervisor_config("node_pools", CLUSTER, None, STATE, run=run, pools=POOLS)
    flex = {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 4}
    with _world(tmp_path, gcs, config) as world:
        _slices(world, 4, autoscaling=flex)
        names = {group: sorted(world.compute.members(group)) for group in GROUPS.values()}
        assert world.function.call()["action"] == "none"
        time.sleep(1.0)
        request = world.function.call()
        assert (request["action"], request["reason"]) == ("request_stop", "max_total_usd")
        assert world.read(RUN["stop_uri"])["reason"] == "max_total_usd"
        world.put(RUN["end_uri"], {"outcome": "stopped", "step": 40})
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["result"]) == ("stop", "stopped", "stopping")
        body = {
            "autoscaling": {
                "enabled": True,
                "totalMinNodeCount": 0,
                "totalMaxNodeCount": 0,
                "locationPolicy": "ANY",
            }
        }
        # Never a setSize: the autoscaler owns a flex-start pool's size. The pool's own
        # bounds (`total_*`, as TpuGkeSlices plans them), never the per-location ones.
        assert (world.container.set_autoscalings, world.container.set_sizes) == (
            [(pool, body) for pool in GROUPS],
            [],
        )
        assert validate_body("container.v1", "SetNodePoolAutoscalingRequest", body) == []
        # The slices' VMs deleted through their groups: the JobSet's pods keep them up.
        assert world.compute.deletions == [
            (
                group,
                {
                    "instances": [f"zones/us-east5-b/instances/{n}" for n in names[group]],
                    "skipInstancesOnValidationError": True,
                },
            )
            for group in GROUPS.values()
        ]
        assert [len(names[group]) for group in GROUPS.values()] == [4, 4]
        assert world.function.call()["seen"] == "DELETING_8"
        assert world.function.call()["result"] == "compute stopped"
        lines = world.status_lines("dev-tpu-v6e-gke")
        assert lines[0].startswith("finished (stopped at limits.max_total_usd); compute stopped")


def test_status_gives_the_command_that_stops_each_pool() -> None:
    assert stop_command(CLUSTER, POOLS) == (
        "gcloud container clusters resize exp-42-tpu --node-pool=tpu-0 --num-nodes=0 "
        "--zone=us-east5-b --project=p && "
        "gcloud container clusters resize exp-42-tpu --node-pool=tpu-1 --num-nodes=0 "
        "--zone=us-east5-b --project=p"
    )

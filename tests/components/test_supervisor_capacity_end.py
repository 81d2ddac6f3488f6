"""The supervisor and the end of a flex-start machine's run duration (`capacity_ended`,
`trainstack.trainers.common.deadline`), as Cloud Functions runs it (the harness of
`tests.components.test_run_supervisor_function`): a GKE flex-start GPU pool, which the
cluster autoscaler sizes, is stopped through its autoscaling bounds, never `setSize` (which
the autoscaler would undo while the Job's replacement pods ask for nodes), and its VMs
deleted through its instance group (the autoscaler leaves nodes that still run pods:
`tests.fakes.container_server`); status names the checkpoint's step, or says none is
known."""

from __future__ import annotations

from pathlib import Path

from tests.components.test_run_supervisor_function import (
    POOL,
    POOL_GROUP,
    RUN,
    STATE,
    _summary,
    _world,
    gcs,
)
from trainstack.components._discovery import validate_body
from trainstack.components.run_supervisor import supervisor_config
from trainstack.infra.logs import ended_text

__all__ = ["gcs"]  # the fixture, used by name

STOPPED_BOUNDS = {
    "autoscaling": {"enabled": True, "minNodeCount": 0, "maxNodeCount": 0, "locationPolicy": "ANY"}
}
"""The pool's per-location bounds at 0: the family A100Cluster plans it with (`min_node_count`,
`max_node_count`), never the `total_*` one, which "are mutually exclusive with the
*_node_count fields" (container.v1 discovery, NodePoolAutoscaling)."""


def test_a_flex_start_pool_whose_capacity_ended_is_stopped_through_its_autoscaling(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("node_pool", POOL, None, STATE, run=RUN)
    with _world(tmp_path, gcs, config) as world:
        world.compute.groups[POOL_GROUP] = {"targetSize": 2}
        url = f"https://www.googleapis.com/compute/v1/projects/{POOL_GROUP.split('/')[0]}/zones/"
        url += "us-central1-a/instanceGroupManagers/" + POOL_GROUP.rsplit("/", 1)[-1]
        # As A100Cluster plans a flex-start pool (autoscaling 0 to node_count), read back with
        # `enabled` (hashicorp/terraform-provider-google resource_container_node_pool.go
        # expandNodePool: `NodePoolAutoscaling{Enabled: true, ...}`).
        flex = {"enabled": True, "minNodeCount": 0, "maxNodeCount": 2, "locationPolicy": "ANY"}
        world.container.pools[POOL] = {"instanceGroupUrls": [url], "autoscaling": flex}
        # The Job's pods still run on both nodes: a maximum of 0 alone removes neither (the
        # fake's setAutoscaling changes no node, kubernetes/autoscaler#5691).
        names = sorted(world.compute.members(POOL_GROUP))
        assert len(names) == 2
        assert world.function.call()["action"] == "none"
        world.put(RUN["end_uri"], {"outcome": "capacity_ended", "step": 40, "node_rank": 1})
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["step"], stop["result"]) == (
            "stop",
            "capacity_ended",
            40,
            "stopping",
        )
        assert (world.container.set_autoscalings, world.container.set_sizes) == (
            [(POOL, STOPPED_BOUNDS)],
            [],
        )
        assert validate_body("container.v1", "SetNodePoolAutoscalingRequest", STOPPED_BOUNDS) == []
        deleted = {
            "instances": [f"zones/us-central1-a/instances/{n}" for n in names],
            "skipInstancesOnValidationError": True,
        }
        assert world.compute.deletions == [(POOL_GROUP, deleted)]
        assert world.function.call()["seen"] == "DELETING_2"
        assert world.function.call()["result"] == "compute stopped"
        [finished] = [x for x in world.status_lines("dev-a100-gke") if x.startswith("finished")]
        assert finished.startswith(
            "finished (flex-start duration ended; checkpoint at step 40; `pulumi up` to "
            "continue (raise limits.max_run_hours first if the run used it up)); compute "
            "stopped at "
        )
        assert _summary(world.events()) == [
            ("SIZE_2", "stop", "capacity_ended", "stopping"),
            ("DELETING_2", "none", "capacity_ended", "stopping"),
            ("STOPPED", "none", "capacity_ended", "compute stopped"),
        ]


def test_the_end_in_words() -> None:
    assert ended_text({"reason": "capacity_ended", "step": 40}) == (
        "flex-start duration ended; checkpoint at step 40"
    )
    # Your code that printed no step: the record has none.
    assert ended_text({"reason": "capacity_ended"}) == (
        "flex-start duration ended; no checkpoint step known"
    )

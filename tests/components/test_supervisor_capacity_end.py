"""The supervisor and the end of a flex-start machine's run duration (`capacity_ended`,
`trainstack.trainers.common.deadline`), as Cloud Functions runs it (the harness of
`tests.components.test_run_supervisor_function`): a GKE flex-start GPU pool, which the
cluster autoscaler sizes, is stopped through its autoscaling bounds, never `setSize` (which
the autoscaler would undo while the Job's replacement pods ask for nodes); status names the
checkpoint's step, or says none is known."""

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
    "autoscaling": {
        "enabled": True,
        "totalMinNodeCount": 0,
        "totalMaxNodeCount": 0,
        "locationPolicy": "ANY",
    }
}


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

        def autoscale(name: str, autoscaling: dict[str, object]) -> None:
            # The cluster autoscaler, with a maximum of 0, removes the pool's nodes.
            world.compute.scale(POOL_GROUP, int(str(autoscaling["totalMaxNodeCount"])))

        world.container.on_set_autoscaling = autoscale
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

"""`trainstack plan-diff` on GKE node pools: the fields trainstack sets that the Terraform
provider marks ForceNew replace the pool (components/catalog/replace_on_change.py, node pool
entries), the ones its Update sends change it in place; and a replaced TPU JobSet says that
the run relaunches."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.bundled import bundled_plan
from trainstack.infra.plan import build_plan, load_stack, plan_diff
from trainstack.infra.plan_replace import REPLACE_ON_CHANGES_SOURCE, Verdict, classify
from trainstack.infra.plan_runs import NODE_POOL

STACK = "dev-tpu-v6e-gke"
SCHEMA = "the Terraform provider schema"


def _stack(**tpu: Any) -> dict[str, Any]:
    name, config = load_stack(STACK, None)
    config["trainstack:tpu"] = {**config["trainstack:tpu"], **tpu}
    return build_plan(name, config)


def _headlines(diff: str, type_: str) -> list[str]:
    return [line for line in diff.splitlines() if f"({type_})" in line]


def test_two_spot_slices_to_three_on_demand_replace_both_pools() -> None:
    base = bundled_plan(STACK)  # 2 spot slices
    head = _stack(slices=3, provisioning="on-demand")
    diff = plan_diff(base, head)
    assert _headlines(diff, NODE_POOL) == [
        "- **add** `dev-tpu-v6e-gke-tpu-slice-2` (gcp:container/nodePool:NodePool)",
        *(
            f"- **replace** `dev-tpu-v6e-gke-tpu-slice-{i}` (gcp:container/nodePool:NodePool): "
            "`nodeConfig.spot` changed, which forces a new resource (the Terraform provider "
            "schema); deletes the old one first"
            for i in (0, 1)
        ),
    ]


def test_a_reservation_or_flex_start_replaces_the_pools() -> None:
    base = bundled_plan(STACK)
    reserved = plan_diff(base, _stack(provisioning="reserved", reservation="r1"))
    assert _headlines(reserved, NODE_POOL)[0] == (
        "- **replace** `dev-tpu-v6e-gke-tpu-slice-0` (gcp:container/nodePool:NodePool): "
        "`nodeConfig.reservationAffinity.consumeReservationType`, "
        "`nodeConfig.reservationAffinity.key`, `nodeConfig.reservationAffinity.values[0]` and "
        "1 more changed, which forces a new resource (the Terraform provider schema); deletes "
        "the old one first"
    )
    flex = plan_diff(base, _stack(provisioning="flex-start"))
    assert _headlines(flex, NODE_POOL)[0] == (
        "- **replace** `dev-tpu-v6e-gke-tpu-slice-0` (gcp:container/nodePool:NodePool): "
        "`initialNodeCount`, `nodeConfig.flexStart`, `nodeConfig.maxRunDuration` and 2 more "
        "changed, which forces a new resource (the Terraform provider schema); deletes the old "
        "one first"
    )


def _pool() -> dict[str, Any]:
    [pool] = [r for r in bundled_plan(STACK)["resources"] if r["name"].endswith("slice-0")]
    return dict(pool["inputs"])


@pytest.mark.parametrize(
    ("path", "value", "verdict"),
    [
        # node_config.go: machine_type has no ForceNew; nodePoolNodeConfigUpdate sends it.
        ("nodeConfig.machineType", "ct6e-standard-8t", Verdict("change", source=SCHEMA)),
        ("nodeCount", 8.0, Verdict("change", source=SCHEMA)),
        ("nodeConfig.serviceAccount", "x@p.iam.gserviceaccount.com", None),
        ("networkConfig.acceleratorNetworkProfile", "none", None),
        # Not ForceNew inside a ForceNew block: the block is still there, no table says.
        (
            "placementPolicy.tpuTopology",
            "2x8",
            Verdict(
                "change (may replace)", source=SCHEMA, unknown=("placementPolicy.tpuTopology",)
            ),
        ),
    ],
)
def test_each_pool_field_by_the_provider_schema(
    path: str, value: Any, verdict: Verdict | None
) -> None:
    old = _pool()
    new = copy.deepcopy(old)
    *parents, leaf = path.split(".")
    target = new
    for key in parents:
        target = target[key]
    target[leaf] = value
    expected = verdict or Verdict("replace", (path,), True, SCHEMA)
    assert classify(NODE_POOL, old, new, [path]) == expected


def test_a_placement_added_or_removed_replaces_the_pool() -> None:
    # A single-host slice's pool has no placement policy (xpk core/nodepool.py); the block is
    # ForceNew, its fields are not (resource_container_node_pool.go lines 364-390).
    old = _pool()
    new = {k: v for k, v in old.items() if k != "placementPolicy"}
    paths = ["placementPolicy.tpuTopology", "placementPolicy.type"]
    assert classify(NODE_POOL, old, new, paths) == Verdict("replace", tuple(paths), True, SCHEMA)
    assert classify(NODE_POOL, new, old, paths).action == "replace"


def test_a_replaced_jobset_says_the_run_relaunches_from_its_checkpoints() -> None:
    # The JobSet replaces by its own replace_on_changes (JobSet's webhook refuses a changed
    # spec), deleting first (its delete_before_replace); the diff then says, as for the GPU
    # Job, that training relaunches and from where.
    base, head = bundled_plan(STACK), _stack(slices=3, provisioning="on-demand")
    diff = plan_diff(base, head).splitlines()
    at = diff.index(
        next(line for line in diff if line.startswith("- **replace** `dev-tpu-v6e-gke-tpu-jobset`"))
    )
    assert diff[at].endswith(
        f"which forces a new resource ({REPLACE_ON_CHANGES_SOURCE}); deletes the old one first"
    )
    assert diff[at + 1] == (
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-dev-tpu-v6e-gke-checkpoints/checkpoints/dev-tpu-v6e-gke`**"
    )

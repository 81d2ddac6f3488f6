"""The text plan's lines under a GKE node pool and a TPU JobSet: what a TPU or GPU user
checks before `pulumi up` (machine type, accelerators, spot / flex-start / reservation,
placement; the JobSet's slices, pods, TPU limit, exclusive topology and failure policy),
with whole numbers where the engine sends doubles."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tests.bundled import bundled_plan
from trainstack.infra.mocks import UNKNOWN
from trainstack.infra.plan import UNWRAPPED_WIDTH, build_plan, load_stack, render_plan
from trainstack.infra.plan_runs import NODE_POOL, runs_lines
from trainstack.infra.targets.tpu_gke import JOBSET_TYPE

TPU_STACK = "dev-tpu-v6e-gke"
IMAGE = "us-docker.pkg.dev/my-ml-project/jax/tpu-trainer:1"
JOBSET_LINES = [
    "2 x slice tpu-v6e-slice 4x4, spot: one Job each of 4 pods (parallelism 4, completions 4), "
    f"image {IMAGE}",
    "each pod: google.com/tpu 4",
    "failure policy: fail on exits 1, 2, 5; restart the whole JobSet on other failures, up to "
    "10 times",
    "alpha.jobset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool (one slice's Job "
    "per node pool)",
]


def _tree(plan: dict[str, Any]) -> list[str]:
    console = Console(width=UNWRAPPED_WIDTH, record=True, file=io.StringIO())
    render_plan(plan, console)
    return console.export_text().splitlines()


def _lines(plan: dict[str, Any], name: str) -> list[str]:
    [resource] = [r for r in plan["resources"] if r["name"] == name]
    return runs_lines(resource["type"], resource["inputs"])


def _tpu_plan(**tpu: Any) -> dict[str, Any]:
    name, config = load_stack(TPU_STACK, None)
    config["trainstack:tpu"] = {**config["trainstack:tpu"], **tpu}
    return build_plan(name, config)


def test_the_tpu_tree_shows_each_slice_pool_and_the_jobset_whole() -> None:
    lines = _tree(bundled_plan(TPU_STACK))
    pool = "│   │   └── 4 x ct6e-standard-4t, spot, placement COMPACT (TPU topology 4x4)"
    at = lines.index(
        "│   ├── dev-tpu-v6e-gke-tpu-slice-0 gcp:container/nodePool:NodePool  nodeCount=4, "
        'cluster="dev-tpu-v6e-gke-tpu", location="us-east5-b", project="my-ml-project"'
    )
    assert lines[at + 1] == pool
    assert lines[at + 3] == pool  # slice-1's
    system = lines.index(
        "│   ├── dev-tpu-v6e-gke-tpu-system-pool gcp:container/nodePool:NodePool  nodeCount=1, "
        'cluster="dev-tpu-v6e-gke-tpu", location="us-east5-b", project="my-ml-project"'
    )
    assert lines[system + 1] == "│   │   └── 1 x e2-standard-4, on-demand"
    jobset = lines.index(
        "│   ├── dev-tpu-v6e-gke-tpu-jobset kubernetes:jobset.x-k8s.io/v1alpha2:JobSet  "
        'kind="JobSet", apiVersion="jobset.x-k8s.io/v1alpha2"'
    )
    assert lines[jobset + 1 : jobset + 5] == [
        *("│   │   ├── " + line for line in JOBSET_LINES[:3]),
        "│   │   └── " + JOBSET_LINES[3],
    ]
    assert not [line for line in lines if " 2.0 " in line or " 4.0 " in line]


def test_flex_start_and_reserved_pools_say_how_they_get_their_nodes() -> None:
    flex = _tpu_plan(provisioning="flex-start")
    assert _lines(flex, "dev-tpu-v6e-gke-tpu-slice-0") == [
        "0..4 (autoscaled) x ct6e-standard-4t, flex-start, max run 604800s, reservation "
        "NO_RESERVATION, placement COMPACT (TPU topology 4x4)"
    ]
    # The JobSet's pods no longer ask for spot nodes.
    assert _lines(flex, "dev-tpu-v6e-gke-tpu-jobset")[0] == (
        "2 x slice tpu-v6e-slice 4x4: one Job each of 4 pods (parallelism 4, completions 4), "
        f"image {IMAGE}"
    )
    reserved = _tpu_plan(provisioning="reserved", reservation="r1")
    assert _lines(reserved, "dev-tpu-v6e-gke-tpu-slice-1") == [
        "4 x ct6e-standard-4t, reservation SPECIFIC_RESERVATION r1, placement COMPACT "
        "(TPU topology 4x4)"
    ]
    any_reservation = _tpu_plan(provisioning="reserved")
    assert _lines(any_reservation, "dev-tpu-v6e-gke-tpu-slice-0") == [
        "4 x ct6e-standard-4t, reservation ANY_RESERVATION, placement COMPACT (TPU topology 4x4)"
    ]


def test_a_single_host_slice_pool_has_no_placement() -> None:
    plan = _tpu_plan(accelerator_type="v6e-4", slices=1, provisioning="on-demand")
    assert _lines(plan, "dev-tpu-v6e-gke-tpu-slice-0") == ["1 x ct6e-standard-4t, on-demand"]


def test_the_gpu_pool_shows_its_accelerators_the_same_way() -> None:
    plan = bundled_plan("dev-a100-gke")
    assert _lines(plan, "dev-a100-gke-gpu-gpu-pool") == [
        "2 x a2-highgpu-8g with 8 x nvidia-tesla-a100, spot, placement COMPACT"
    ]


def test_inputs_known_only_after_deploy_are_said_so() -> None:
    assert runs_lines(JOBSET_TYPE, {"spec": UNKNOWN}) == [f"JobSet spec {UNKNOWN}"]
    assert runs_lines(NODE_POOL, {"nodeCount": 2.0, "nodeConfig": UNKNOWN}) == [
        f"2 x {UNKNOWN}, on-demand"
    ]


def test_the_gpu_job_shows_its_pods_limits_and_failure_policy_as_the_jobset_does() -> None:
    [job] = [
        r
        for r in bundled_plan("dev-a100-gke")["resources"]
        if r["type"] == "kubernetes:batch/v1:Job"
    ]
    assert runs_lines(job["type"], job["inputs"]) == [
        "2 pods (parallelism 2, completions 2, Indexed), image pytorch/pytorch@sha256:"
        "6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4",
        "each pod: nvidia.com/gpu 8",
        "failure policy: fail on exits 1, 2, 5; retry other failures up to 3 times per pod; "
        "exits 4, 143, 6 and disruptions not counted",
        "deadline: 14400s (activeDeadlineSeconds)",
    ]
    assert runs_lines(job["type"], {"spec": UNKNOWN}) == [f"Job spec {UNKNOWN}"]

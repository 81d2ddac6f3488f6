"""Vertex `flex_start`: the CustomJob's `scheduling` (FLEX_START with its wait limit, checked
against the aiplatform.v1 discovery document), the exact line each refused setting gets on
the stack and the component, the plan's note and the quota it counts on."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components._discovery import load_document, validate_body
from trainstack.components._vertex_args import vertex_training_job_problems
from trainstack.components._vertex_body import custom_job_body
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.estimate import quota_needs
from trainstack.infra.targets.vertex_image import vertex_plan_notes

VERTEX = {
    "machine_type": "a3-highgpu-8g",
    "accelerator_type": "NVIDIA_H100_80GB",
    "accelerator_count": 8,
    "replica_count": 2,
    "flex_start": True,
}


def _stack(**overrides: Any) -> dict[str, Any]:
    section = {k: v for k, v in {**VERTEX, **overrides}.items() if v is not None}
    return {
        "gcp:project": "p",
        "gcp:region": "us-central1",
        "trainstack:vertex": section,
        "trainstack:limits": {"max_run_hours": 24},
    }


def _body(**spec: Any) -> dict[str, Any]:
    return custom_job_body(
        display_name="d",
        region="us-central1",
        machine_type="a3-highgpu-8g",
        replica_count=2,
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        container_image_uri="us-docker.pkg.dev/p/r/i:1",
        timeout_s=86400,
        **spec,
    )


def test_flex_start_scheduling_with_its_default_wait() -> None:
    body = _body(flex_start=True)
    # aiplatform.v1 GoogleCloudAiplatformV1Scheduling: strategy "FLEX_START" ("Flex Start
    # strategy uses DWS to queue for resources"), maxWaitDuration ("The default is 24 hours").
    assert body["jobSpec"]["scheduling"] == {
        "strategy": "FLEX_START",
        "restartJobOnWorkerRestart": False,
        "maxWaitDuration": "86400s",
        "timeout": "86400s",
    }
    assert validate_body("aiplatform.v1", "CustomJob", body) == []
    schema = load_document("aiplatform.v1")["schemas"]["GoogleCloudAiplatformV1Scheduling"]
    assert schema["properties"]["maxWaitDuration"]["format"] == "google-duration"


def test_flex_start_wait_zero_waits_indefinitely() -> None:
    scheduling = _body(flex_start=True, flex_start_max_wait_s=0)["jobSpec"]["scheduling"]
    assert scheduling["maxWaitDuration"] == "0s"


def test_without_flex_start_the_body_is_unchanged() -> None:
    assert _body()["jobSpec"]["scheduling"] == {
        "strategy": "STANDARD",
        "restartJobOnWorkerRestart": False,
        "timeout": "86400s",
    }


FLEX_SPOT = (
    "vertex.flex_start: cannot be used with spot (scheduling.strategy is one of FLEX_START or "
    "SPOT); valid: flex_start: false, or spot: false"
)
FLEX_RS = (
    "vertex.flex_start: cannot be used with reduction_server (Google: flex-start 'uses the "
    "same machine configuration for all worker pools', and the reducers run on CPU machines); "
    "valid: flex_start: false, or reduction_server.enabled: false"
)
FLEX_CPU = (
    "vertex.flex_start: machine_type 'n1-standard-8' has no GPU Vertex flex-start takes "
    "(Google: 'requests L4, A100, H100, H200, or B200 GPUs'); valid: an A2, A3 or A4 machine "
    "type, or flex_start: false"
)
WAIT_WITHOUT_FLEX = (
    "vertex.flex_start_max_wait_s: applies to flex_start, which is off; valid: flex_start: "
    "true, or remove flex_start_max_wait_s"
)
WAIT_NEGATIVE = (
    "vertex.flex_start_max_wait_s: -1 is not a whole number of seconds >= 0; valid: >= 0 "
    "(0 waits indefinitely)"
)
CASES = [
    ("spot", _stack(spot=True), [FLEX_SPOT]),
    ("reduction server", _stack(reduction_server={"enabled": True}), [FLEX_RS]),
    (
        "cpu",
        _stack(machine_type="n1-standard-8", accelerator_type=None, accelerator_count=None),
        [FLEX_CPU],
    ),
    ("wait without flex", _stack(flex_start=False, flex_start_max_wait_s=60), [WAIT_WITHOUT_FLEX]),
    ("negative wait", _stack(flex_start_max_wait_s=-1), [WAIT_NEGATIVE]),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_stack(raw: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    assert info.value.errors == expected


def test_component_says_the_same() -> None:
    args = {
        **VERTEX,
        "spot": True,
        "region": "us-central1",
        "display_name": "d",
        "container_image_uri": "us-docker.pkg.dev/p/r/i:1",
    }
    assert vertex_training_job_problems(args) == [FLEX_SPOT.removeprefix("vertex.")]


def test_plan_says_the_wait_and_the_cost_and_counts_preemptible_quota() -> None:
    cfg = load_stack_config(_stack(flex_start_max_wait_s=7200))
    flex = [n for n in vertex_plan_notes(cfg, "d") if "flex-start" in n]
    assert flex == [
        "vertex: flex-start (scheduling.strategy FLEX_START): the job queues up to 2 hours "
        "(maxWaitDuration 7200s) for all its GPUs at once, then runs at most its "
        "scheduling.timeout (7 days at most), where Vertex AI ends it; what its replicas get "
        "then (a SIGTERM, a grace) Google does not say, so the run gets no deadline: its "
        "newest checkpoint is the last trainer.checkpoint_every step; flex-start is billed "
        "at Dynamic Workload "
        "Scheduler prices, 'discounts (up to 53%)' on vCPU and GPU "
        "(https://cloud.google.com/kubernetes-engine/docs/concepts/dws); no per-machine "
        "flex-start price is in a stored source, so the plan counts on-demand price (an upper "
        "bound); Vertex flex-start draws on Vertex AI preemptible GPU quota (Google's sample "
        "GoogleCloudPlatform/vertex-ai-samples notebook_util/common_util.py get_quota_id: a "
        "training job with is_dynamic_workload_scheduler gets "
        "CustomModelTrainingPreemptible<GPU>PerProjectPerRegion)"
    ]
    assert [n["quota_id"] for n in quota_needs(cfg)] == [
        "CustomModelTrainingPreemptibleH100GPUsPerProjectPerRegion"
    ]

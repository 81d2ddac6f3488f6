"""The offline plan, its JSON shape, determinism, and the pull-request plan diff."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra.compose import main_program
from infra.config import ConfigError
from infra.mocks import run_program
from infra.plan import MAX_DIFF_CHARS, build_plan, bundled_stacks, load_stack, plan_diff
from tests.bundled import bundled_plan
from tests.stacks import GPU_STACK


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_bundled_stack_plans_with_exact_inputs(stack: str) -> None:
    plan = bundled_plan(stack)
    assert set(plan) >= {"stack", "resources", "summary", "quota"}
    assert plan["stack"] == stack
    assert set(plan["summary"]) >= {"tpu_chips", "gpus", "hourly_usd"}
    for q in plan["quota"]:
        assert set(q) >= {"service", "quota_id", "dimensions", "needed"}
    # The plan's inputs are exactly what a fresh run of the program registers.
    name, config = load_stack(stack, None)
    run = run_program(main_program, config=config, stack=name)
    registered = {(r.type, r.name): (r.parent, r.inputs) for r in run.resources}
    assert len(plan["resources"]) == len(run.resources)
    for entry in plan["resources"]:
        assert registered[entry["type"], entry["name"]] == (entry["parent"], entry["inputs"])
    json.dumps(plan)  # the whole plan is JSON-serializable


def test_plan_is_deterministic() -> None:
    first = build_plan("dev-gpu", GPU_STACK)
    second = build_plan("dev-gpu", copy.deepcopy(GPU_STACK))
    assert first == second


def test_gpu_foundation_resources() -> None:
    plan = build_plan("dev-gpu", GPU_STACK)
    types = [r["type"] for r in plan["resources"]]
    assert types.count("gcp:storage/bucket:Bucket") == 3
    assert types.count("gcp:serviceaccount/account:Account") == 1
    assert types.count("gcp:compute/network:Network") == 1
    apis = [
        r["inputs"]["service"]
        for r in plan["resources"]
        if r["type"] == "gcp:projects/service:Service"
    ]
    assert "container.googleapis.com" in apis
    assert plan["summary"]["gpus"] == 16
    assert plan["target"] == "gpu_cluster"


def test_invalid_config_registers_nothing() -> None:
    bad = {
        **GPU_STACK,
        "trainstack:gpu_cluster": {**GPU_STACK["trainstack:gpu_cluster"], "nodes": 3},
    }
    errors: list[str] = []

    def program() -> dict[str, Any]:
        try:
            return main_program()
        except ConfigError as exc:
            errors.append(str(exc))
            return {}

    run = run_program(program, config=bad, stack="bad")
    assert run.resources == []
    assert errors and errors[0].startswith("gpu_cluster.nodes: unknown key")
    with pytest.raises(ConfigError, match=r"^gpu_cluster\.nodes: unknown key"):
        build_plan("bad", bad)


def test_plan_diff_node_count_change_shows_cost_and_quota() -> None:
    base = build_plan("dev-gpu", GPU_STACK)
    bigger = copy.deepcopy(GPU_STACK)
    bigger["trainstack:gpu_cluster"]["node_count"] = 4
    head = build_plan("dev-gpu", bigger)
    text = plan_diff(base, head)
    assert "| gpus | 16 | 32 | +16 |" in text
    assert "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region" in text
    assert len(text) <= MAX_DIFF_CHARS


def test_plan_diff_no_changes() -> None:
    plan = build_plan("dev-gpu", GPU_STACK)
    assert plan_diff(plan, plan) == "## trainstack plan diff\n\n### Stack `dev-gpu`: no changes\n"


def test_plan_diff_input_change_is_listed() -> None:
    base = build_plan("dev-gpu", GPU_STACK)
    head = copy.deepcopy(base)
    bucket = next(r for r in head["resources"] if r["type"] == "gcp:storage/bucket:Bucket")
    bucket["inputs"]["location"] = "EUROPE-WEST4"
    text = plan_diff(base, head)
    assert f"- **change** `{bucket['name']}` (gcp:storage/bucket:Bucket)" in text
    assert "  - `location`: `US-CENTRAL1` -> `EUROPE-WEST4`" in text


def test_plan_diff_is_trimmed_to_the_comment_limit() -> None:
    base = build_plan("dev-gpu", GPU_STACK)
    head = copy.deepcopy(base)
    template = head["resources"][-1]
    for i in range(3000):
        extra = copy.deepcopy(template)
        extra["name"] = f"extra-resource-{i:04d}-" + "x" * 40
        head["resources"].append(extra)
    text = plan_diff(base, head)
    assert len(text) <= MAX_DIFF_CHARS
    assert "**Diff trimmed:**" in text
    assert "3000 to add" in text


@pytest.mark.parametrize("stack", ["prod-vertex-rs", "dev-vertex-hpt"])
def test_bundled_vertex_stacks_send_schema_valid_bodies(stack: str) -> None:
    from components._discovery import normalize_numbers, validate_body

    plan = bundled_plan(stack)
    [job] = [r for r in plan["resources"] if r["type"].startswith("pulumi-python:dynamic/vertex:")]
    schema = {"customJobs": "CustomJob", "hyperparameterTuningJobs": "HyperparameterTuningJob"}
    kind = job["inputs"]["kind"]
    body = normalize_numbers("aiplatform.v1", schema[kind], job["inputs"]["body"])
    assert validate_body("aiplatform.v1", schema[kind], body) == []
    package = next(
        r for r in plan["resources"] if r["type"] == "gcp:storage/bucketObject:BucketObject"
    )
    spec = body.get("jobSpec") or body["trialJobSpec"]
    uris = spec["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    assert uris == [f"gs://{package['inputs']['bucket']}/{package['inputs']['name']}"]


def test_reduction_server_stack_sizes_reducers_by_bandwidth() -> None:
    plan = bundled_plan("prod-vertex-rs")
    assert plan["outputs"]["reducers"] == 13
    [job] = [r for r in plan["resources"] if r["type"] == "pulumi-python:dynamic/vertex:CustomJob"]
    pools = job["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "3", "13"]
    assert pools[2]["containerSpec"]["imageUri"] == (
        "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    )
    assert "--bucket_cap_mb=64" in pools[0]["pythonPackageSpec"]["args"]
    assert plan["summary"]["machines"] == 17


def test_plan_diff_shows_a_dropped_protection() -> None:
    base = bundled_plan("prod-a100-gce")
    protected = [r for r in base["resources"] if r.get("protect")]
    assert [r["type"] for r in protected] == ["gcp:storage/bucket:Bucket"] * 2
    head = copy.deepcopy(base)
    data = next(r for r in head["resources"] if r["name"] == protected[0]["name"])
    del data["protect"]
    text = plan_diff(base, head)
    assert (
        f"- **change** `{data['name']}` (gcp:storage/bucket:Bucket)\n  - protect: `true` -> `false`"
        in text
    )

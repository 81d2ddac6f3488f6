"""The offline plan, its JSON shape, determinism, and the pull-request plan diff."""

from __future__ import annotations

import asyncio
import copy
import gc
import io
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from rich.console import Console

from tests import REPO_ROOT
from tests.bundled import bundled_plan
from tests.stacks import GPU_STACK
from trainstack.components.a100_cluster import STACK_GRACE_KEY, gke_spot_grace_note
from trainstack.infra.compose import main_program
from trainstack.infra.config import ConfigError
from trainstack.infra.mocks import SECRET, UNKNOWN, run_program
from trainstack.infra.plan import (
    MAX_DIFF_CHARS,
    UNWRAPPED_WIDTH,
    PlanDocumentError,
    build_plan,
    bundled_stacks,
    load_stack,
    plan_diff,
    read_stack_file,
    render_plan,
)
from trainstack.infra.plan_runs import PROVIDER_INPUT, runs_lines
from trainstack.infra.targets.tpu import QUEUED_TPU as TPU_QUEUED
from trainstack.infra.targets.vertex_runs import CUSTOM_JOB


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
    # Data, checkpoints, staging, and the run supervisor's own state bucket.
    assert types.count("gcp:storage/bucket:Bucket") == 4
    # The training account, the run supervisor's own and its function's build account.
    assert types.count("gcp:serviceaccount/account:Account") == 3
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
    # The engine sends every number as a double; the diff prints integers as integers.
    assert (
        "- **change** `dev-gpu-gpu-gpu-pool` (gcp:container/nodePool:NodePool): "
        "updated in place (the Terraform provider schema)\n"
    ) in text
    assert "  - `nodeCount`: `2` -> `4`\n" in text
    assert "  - `conditions[1].conditionThreshold.thresholdValue`: `2` -> `4`\n" in text
    assert ".0`" not in text


def test_plan_diff_no_changes() -> None:
    plan = build_plan("dev-gpu", GPU_STACK)
    assert plan_diff(plan, plan) == "## trainstack plan diff\n\n### Stack `dev-gpu`: no changes\n"


def test_plan_diff_input_change_is_listed() -> None:
    base = build_plan("dev-gpu", GPU_STACK)
    head = copy.deepcopy(base)
    bucket = next(r for r in head["resources"] if r["type"] == "gcp:storage/bucket:Bucket")
    bucket["inputs"]["location"] = "EUROPE-WEST4"
    text = plan_diff(base, head)
    # A bucket's location is ForceNew in the provider schema (replace_on_change.py).
    assert (
        f"- **replace** `{bucket['name']}` (gcp:storage/bucket:Bucket): `location` changed, "
        "which forces a new resource (the Terraform provider schema); deletes the old one "
        "first\n"
    ) in text
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
    assert text.endswith(
        "comment holds at most 65,536 characters. Run `trainstack plan-diff --full BASE.json "
        "HEAD.json` locally for the full diff.\n"
    )
    full = plan_diff(base, head, full=True)
    assert len(full) > MAX_DIFF_CHARS
    assert "**Diff trimmed:**" not in full
    assert full.count("- **add** `extra-resource-") == 3000


@pytest.mark.parametrize("stack", ["prod-vertex-rs", "dev-vertex-hpt"])
def test_bundled_vertex_stacks_send_schema_valid_bodies(stack: str) -> None:
    from trainstack.components._discovery import normalize_numbers, validate_body

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
    # The pod setup script installs this package into the image's python3.
    env = spec["workerPoolSpecs"][0]["containerSpec"]["env"]
    uri = f"gs://{package['inputs']['bucket']}/{package['inputs']['name']}"
    assert {"name": "TRAINSTACK_PACKAGE_URI", "value": uri} in env


def test_reduction_server_stack_sizes_reducers_by_bandwidth() -> None:
    plan = bundled_plan("prod-vertex-rs")
    assert plan["outputs"]["reducers"] == 13
    [job] = [r for r in plan["resources"] if r["type"] == "pulumi-python:dynamic/vertex:CustomJob"]
    pools = job["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "3", "13"]
    assert pools[2]["containerSpec"]["imageUri"] == (
        "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    )
    assert "--bucket_cap_mb=64" in pools[0]["containerSpec"]["args"]
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


def _one_change(value_path: str, old: Any, new: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two one-resource plans whose only difference is input `value_path`."""

    def plan(value: Any) -> dict[str, Any]:
        resource = {"type": "t:m:R", "name": "r", "parent": None, "inputs": {value_path: value}}
        return {"stack": "s", "resources": [resource], "summary": {}, "quota": []}

    return plan(old), plan(new)


def test_plan_diff_shows_a_long_value_where_it_changed() -> None:
    old = "a" * 300 + "OLD" + "b" * 300
    base, head = _one_change("filter", old, old.replace("OLD", "NEW"))
    context = "a" * 40 + "{}" + "b" * 40
    assert plan_diff(base, head) == (
        "## trainstack plan diff\n\n"
        "### Stack `s`: 0 to add, 1 to change, 0 to replace, 0 to delete\n\n"
        "- **change (may replace)** `r` (t:m:R): no replace-on-change table covers `filter`\n"
        f"  - `filter`: `...{context.format('OLD')}...` -> `...{context.format('NEW')}...`\n\n"
        "> 1 long value(s) are shown only around their changes; "
        "`trainstack plan-diff --full BASE.json HEAD.json` shows them whole.\n"
    )
    full = plan_diff(base, head, full=True)
    assert f"  - `filter`: `{old}` -> `{old.replace('OLD', 'NEW')}`\n" in full
    assert "shown only around their changes" not in full


def test_plan_diff_long_difference_shows_its_start() -> None:
    base, head = _one_change("v", "x" * 10 + "a" * 400, "x" * 10 + "b" * 400)
    line = plan_diff(base, head).splitlines()[5]
    assert line == f"  - `v`: `{'x' * 10}{'a' * 160}...` -> `{'x' * 10}{'b' * 160}...`"


def test_plan_diff_shows_the_changed_lines_of_a_script() -> None:
    script = [f"echo step {i}" for i in range(100)]
    changed = list(script)
    changed[50] = "echo step 50 --with-a-flag"
    base, head = _one_change("metadataStartupScript", "\n".join(script), "\n".join(changed))
    assert plan_diff(base, head).split("\n\n")[2] == (
        "- **change (may replace)** `r` (t:m:R): no replace-on-change table covers "
        "`metadataStartupScript`\n"
        "  - `metadataStartupScript` (100 -> 100 lines):\n"
        "    ```diff\n"
        "    @@ -49,5 +49,5 @@\n"
        "     echo step 48\n"
        "     echo step 49\n"
        "    -echo step 50\n"
        "    +echo step 50 --with-a-flag\n"
        "     echo step 51\n"
        "     echo step 52\n"
        "    ```\n"
    )


def test_plan_diff_cuts_a_long_script_diff_unless_full() -> None:
    old = "\n".join(f"line {i}" for i in range(200))
    new = "\n".join(f"line {i} changed" for i in range(200))
    base, head = _one_change("script", old, new)
    text = plan_diff(base, head)
    assert "    -line 37\n    -line 38\n    ```\n    (361 more diff lines)\n" in text
    assert "1 long value(s) are shown only around their changes" in text
    full = plan_diff(base, head, full=True)
    assert "    +line 199 changed\n    ```\n" in full
    assert "more diff lines" not in full


def test_plan_diff_fences_a_script_that_contains_backticks() -> None:
    base, head = _one_change("script", "a\n```\nb", "a\n```\nc")
    assert plan_diff(base, head).endswith(
        "    ````diff\n    @@ -1,3 +1,3 @@\n     a\n     ```\n    -b\n    +c\n    ````\n"
    )


def test_plan_diff_shows_a_change_of_line_endings() -> None:
    base, head = _one_change("script", "a\nb", "a\nb\n")
    assert plan_diff(base, head).splitlines()[5] == '  - `script`: `"a\\nb"` -> `"a\\nb\\n"`'


def test_plan_diff_prints_integral_totals_as_integers() -> None:
    base, head = _one_change("x", 1, 1)
    base["summary"] = {"machines": 2.0, "hourly_usd": 1.5}
    head["summary"] = {"machines": 4.0, "hourly_usd": 3.0}
    base["quota"] = [{"service": "s", "quota_id": "Q", "dimensions": {}, "needed": 8.0}]
    head["quota"] = [{"service": "s", "quota_id": "Q", "dimensions": {}, "needed": 16.0}]
    text = plan_diff(base, head)
    assert "| machines | 2 | 4 | +2 |\n| hourly_usd | $1.50 | $3.00 | +$1.50 |\n" in text
    assert "| quota | dimensions | base | head | delta |\n|---|---|---|---|---|\n" in text
    assert "| Q | global | 8 | 16 | +8 |\n" in text


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            [],
            None,
        ),
        (
            {"stack": "s"},
            "plan 0: expected a JSON plan with a `stack` name and a `resources` list; "
            "valid: what `trainstack plan --json` writes, or a list of those",
        ),
        (
            {"stack": "s", "resources": [], "summary": {"gpus": "8"}},
            "plan 's': summary is not a mapping of numbers; valid: {'tpu_chips': number, "
            "'gpus': number, 'machines': number, 'hourly_usd': number}",
        ),
        (
            {"stack": "s", "resources": [], "quota": [{"quota_id": "Q"}]},
            "plan 's': quota is not a list of quota needs; valid: "
            '[{"service", "quota_id": str, "dimensions": {...}, "needed": number}]',
        ),
        (
            [{"stack": "s", "resources": []}, {"stack": "s", "resources": []}],
            "plan 1: stack 's' appears twice; valid: one plan per stack",
        ),
    ],
)
def test_plan_diff_rejects_what_is_not_a_plan(document: Any, message: str | None) -> None:
    if message is None:
        assert plan_diff(document, document) == "## trainstack plan diff\n"
        return
    with pytest.raises(PlanDocumentError) as raised:
        plan_diff(document, document)
    assert str(raised.value) == message


def test_tree_labels_name_the_size_of_documents() -> None:
    from trainstack.infra.plan import INLINE_MAX_CHARS, _inline

    long = "x" * (INLINE_MAX_CHARS + 1)
    inputs = {"name": "exp-42", "dashboardJson": long, "script": "a\nb\nc", "count": 2.0}
    assert _inline(inputs) == (
        f'name="exp-42", dashboardJson=<{INLINE_MAX_CHARS + 1} characters>, '
        "script=<3 lines>, count=2"
    )
    assert _inline({"filter": "y" * INLINE_MAX_CHARS}) == f'filter="{"y" * INLINE_MAX_CHARS}"'


def test_a_spot_gke_cluster_says_whether_its_checkpoint_fits_the_15_seconds() -> None:
    # GKE's Spot docs: 15 s for non-system pods, whatever terminationGracePeriodSeconds says.
    head = (
        "gpu_cluster.spot: GKE gives the pods of a preempted Spot node 15 s to stop (the rest "
        "of the 30 s notice is for system pods), whatever their terminationGracePeriodSeconds "
        "says (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); "
    )
    fits = head + (
        "trainer.preemption_grace_s (12 s) fits: the trainer saves within 12 s and exits "
        "before then, if its checkpoint writes in time (see write_s of its checkpoint_written "
        "records)"
    )
    assert fits in bundled_plan("dev-a100-gke")["notes"]
    note = gke_spot_grace_note(30, spot_key="gpu_cluster.spot", grace_key=STACK_GRACE_KEY)
    assert note == head + (
        "trainer.preemption_grace_s (30 s) does NOT fit: a save after a preemption that takes "
        "longer than 12 s is cut off and the run resumes from the checkpoint before; set "
        "trainer.preemption_grace_s to at most 12"
    )
    assert not [n for n in bundled_plan("prod-a100-gce")["notes"] if "gpu_cluster.spot" in n]


CLOUD_TPU_API = (
    "tpu: the slice is created through the Cloud TPU API (tpu.googleapis.com v2), which Google "
    'says is "no longer in active development" (bug fixes and security updates only) and '
    '"not supported on TPU7x and later" (https://docs.cloud.google.com/tpu/docs/runtimes, '
    "https://docs.cloud.google.com/tpu/docs/tpus-in-compute-engine); this target serves v4, "
    "v5e, v5p and v6e, and TPU7x and later need GKE (Google's supported path for TPU7x and "
    "later)"
)


@pytest.mark.parametrize("stack", ["dev-tpu-v5e", "prod-tpu-v4-32"])
def test_every_tpu_plan_says_the_cloud_tpu_api_is_in_maintenance(stack: str) -> None:
    notes = bundled_plan(stack)["notes"]
    assert [n for n in notes if n.startswith("tpu: the slice is created")] == [CLOUD_TPU_API]


def test_only_tpu_plans_carry_the_cloud_tpu_api_note() -> None:
    for stack in ("dev-a100-gke", "prod-a100-gce", "prod-vertex-rs", "local"):
        assert CLOUD_TPU_API not in bundled_plan(stack)["notes"]


def _open_loops() -> set[int]:
    return {
        id(o)
        for o in gc.get_objects()
        if isinstance(o, asyncio.BaseEventLoop) and not o.is_closed()
    }


def test_a_run_closes_every_event_loop_it_made() -> None:
    # The mock monitor's executor threads each get a loop (infra/mocks.py); left open, they
    # were finalized at interpreter exit and could print `Invalid file descriptor: -1`.
    # In a thread of its own, with a loop of its own and no executor before the run.
    before = _open_loops()
    threads_before = set(threading.enumerate())

    def plan() -> None:
        own = asyncio.new_event_loop()
        asyncio.set_event_loop(own)
        run_program(main_program, config=GPU_STACK, stack="dev-gpu")
        assert asyncio.get_event_loop() is own  # the thread's loop is given back
        own.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(plan).result()
    assert _open_loops() == before
    assert set(threading.enumerate()) == threads_before


PLAN_LINE = "stack prod-a100-gce (target: gpu_cluster)"


@pytest.mark.parametrize(
    "count", [pytest.param(4), pytest.param(50, marks=pytest.mark.slow)], ids=["4", "50"]
)
def test_plans_end_without_event_loop_noise_at_exit(count: int) -> None:
    # Each plan in a process of its own that exits as the console script does
    # (tests/unit/plan_at_exit.py). With ResourceWarning shown, a loop left open prints
    # `unclosed event loop` in every process, where the `Invalid file descriptor: -1` it
    # caused came in a few; nothing at all on stderr is the bar. On 2 shared cores 4 plans
    # take about 10 s; 50 took 40 s at load 2.6 and 72 s at load 7, hence `slow`.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PYTHONASYNCIODEBUG", None)
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-m", "tests.unit.plan_at_exit"]
        + ["prod-a100-gce", str(count)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    expected = {"exit": 0, "stdout_first_line": PLAN_LINE, "stderr": ""}
    assert len(records) == count
    assert [r for r in records if r != expected] == []


# Reduction Server: the default image rebuilt with Google's plugin, by the digest its build
# pushes (known after deploy).
RS_IMAGE = (
    "us-central1-docker.pkg.dev/my-ml-project/prod-vertex-rs-built/pytorch-reduction-server"
    "@(known after deploy)"
)
# The bundled trainers run on pytorch/pytorch through the stack's Docker Hub mirror.
HPT_IMAGE = (
    "us-central1-docker.pkg.dev/my-ml-project/dev-vertex-hpt-dockerhub/pytorch/pytorch@sha256:"
    "6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
)
SETUP = "runs the pod setup script (installs the trainer package), then "
RS_COMMAND = (
    "python3 -m trainstack.trainers.node trainstack.trainers.torch_ddp --model=gpt --steps=20000 "
    "--global_batch_size=1024 --checkpoint_every=500 --bucket_cap_mb=64 --precision=bf16 "
    "--run_name=prod-vertex-rs"
)
RUNS: dict[str, list[str]] = {
    "local": [
        "2 workers on this machine run the bundled torch trainer: strategy ddp, model cnn on "
        "digits, 300 steps, global batch 64"
    ],
    "local-tf": [
        "2 workers on this machine run the bundled tensorflow trainer: strategy "
        "multi_worker_mirrored, model mlp on digits, 300 steps, global batch 64"
    ],
    "prod-vertex-rs": [
        f"chief: 1 x a2-highgpu-8g with 8 x NVIDIA_TESLA_A100, image {RS_IMAGE}, "
        + SETUP
        + RS_COMMAND,
        f"workers: 3 x a2-highgpu-8g with 8 x NVIDIA_TESLA_A100, image {RS_IMAGE}, "
        + SETUP
        + RS_COMMAND,
        "reduction server: 13 x n1-highcpu-16, image "
        "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
        "scheduling STANDARD",
    ],
    "dev-vertex-hpt": [
        "8 trials, 2 at a time, RANDOM_SEARCH, MAXIMIZE accuracy",
        f"chief: 1 x a2-highgpu-1g with 1 x NVIDIA_TESLA_A100, image {HPT_IMAGE}, "
        + SETUP
        + "python3 -m trainstack.trainers.node trainstack.trainers.torch_ddp --model=cnn --dataset=digits "
        "--steps=2000 --run_name=dev-vertex-hpt",
        "scheduling SPOT",
    ],
}


def _dynamic_runs(plan: dict[str, Any]) -> list[list[str]]:
    return [
        runs_lines(r["type"], r["inputs"])
        for r in plan["resources"]
        if r["type"].startswith("pulumi-python:dynamic/")
    ]


@pytest.mark.parametrize("stack", sorted(RUNS))
def test_the_plan_says_what_each_dynamic_resource_runs(stack: str) -> None:
    # prod-vertex-rs also builds its plugin image (sorted after the job): it runs no trainer.
    builds = [[]] if stack == "prod-vertex-rs" else []
    assert _dynamic_runs(bundled_plan(stack)) == [RUNS[stack], *builds]


def test_your_codes_local_run_shows_its_entrypoint() -> None:
    stack, config = read_stack_file(REPO_ROOT / "examples/own-trainer/Pulumi.local.yaml")
    assert _dynamic_runs(build_plan(stack, config)) == [
        [
            "2 workers on this machine run your code examples/own-trainer: python train.py "
            "--steps=60 --checkpoint-every=10 --global-batch=32 (launcher torchrun)"
        ]
    ]


def test_a_queued_tpu_shows_accelerator_runtime_nodes_and_tier() -> None:
    name, config = load_stack("prod-tpu-v4-32", None)
    config["trainstack:tpu"] = {**config["trainstack:tpu"], "provisioning": "queued"}
    [queued] = [r for r in build_plan(name, config)["resources"] if r["type"] == TPU_QUEUED]
    where = "runtime tpu-vm-tf-2.14.1-pod, {}, in projects/my-ml-project/locations/us-central2-b"
    assert runs_lines(TPU_QUEUED, queued["inputs"]) == [
        "1 x TPU V4 topology 2x2x4, " + where.format("on-demand")
    ]
    # The tiers the component offers (TpuPodSlice `queued.tier`) and a multislice node count.
    body = copy.deepcopy(queued["inputs"]["body"])
    body["spot"] = {}
    body["tpu"]["nodeSpec"][0]["multisliceParams"] = {"nodeCount": 2.0}
    assert runs_lines(TPU_QUEUED, {"body": body}) == [
        "2 x TPU V4 topology 2x2x4, " + where.format("spot")
    ]
    del body["spot"]
    body["guaranteed"] = {}
    assert runs_lines(TPU_QUEUED, {"body": body}) == [
        "2 x TPU V4 topology 2x2x4, " + where.format("guaranteed")
    ]


def test_a_body_unknown_in_a_preview_is_said_so() -> None:
    unknown = {"body": UNKNOWN, PROVIDER_INPUT: SECRET}
    assert runs_lines(CUSTOM_JOB, unknown) == [f"job body {UNKNOWN}"]
    assert runs_lines(TPU_QUEUED, unknown) == [f"queued resource body {UNKNOWN}"]
    assert runs_lines("gcp:storage/bucket:Bucket", {"name": "b"}) == []


def test_the_text_plan_shows_runs_not_the_provider() -> None:
    console = Console(width=UNWRAPPED_WIDTH, record=True, file=io.StringIO())
    render_plan(bundled_plan("local"), console)
    lines = console.export_text().splitlines()
    assert lines[1:4] == [
        "└── local-job trainstack:local:LocalTrainingJob",
        "    └── local-job-run pulumi-python:dynamic/local:TrainingRun  workers=2, "
        'stop_grace_s=45, root=".trainstack/local/local"',
        "        └── " + RUNS["local"][0],
    ]
    for stack in bundled_stacks():
        console = Console(width=UNWRAPPED_WIDTH, record=True, file=io.StringIO())
        render_plan(bundled_plan(stack), console)
        assert PROVIDER_INPUT not in console.export_text(), stack

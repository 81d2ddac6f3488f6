"""examples/own-program: a Pulumi program of your own that trains its own code through
trainstack's public components only, on GKE A100s (stack gke) and on a spot TPU slice (stack
tpu); planned with `trainstack plan --program` and checked with `policy --program` as a
user would, its totals from the compute's `facts`."""

from __future__ import annotations

import ast
import json
from collections import Counter
from typing import Any

import pytest
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.infra.cli import app

EXAMPLE = REPO_ROOT / "examples" / "own-program"
runner = CliRunner()

CONTRACT = [
    "--env=TRAINSTACK_CHECKPOINT_DIR=gs://my-ml-project-own-program-{s}-checkpoints/checkpoints/"
    "own-program-{s}",
    "--env=TRAINSTACK_DATA_DIR=gs://my-ml-project-own-program-{s}-data",
    "--env=TRAINSTACK_OUTPUT_DIR=gs://my-ml-project-own-program-{s}-checkpoints/outputs/"
    "own-program-{s}",
    "--env=TRAINSTACK_RUN_NAME=own-program-{s}",
]
SHARED_TYPES = {
    "trainstack:storage:TrainingBuckets": 1,
    "gcp:storage/bucket:Bucket": 3,
    "trainstack:network:TrainingNetwork": 1,
    "gcp:compute/network:Network": 1,
    "gcp:compute/subnetwork:Subnetwork": 1,
    "gcp:compute/router:Router": 1,
    "gcp:compute/routerNat:RouterNat": 1,
    "gcp:compute/firewall:Firewall": 2,
    "trainstack:iam:TrainingIdentity": 1,
    "gcp:serviceaccount/account:Account": 1,
    "gcp:storage/bucketIAMMember:BucketIAMMember": 3,
    "gcp:projects/iAMMember:IAMMember": 2,
    "trainstack:storage:TrainerPackage": 1,
    "gcp:storage/bucketObject:BucketObject": 1,
}


def _plan(stack: str) -> dict[str, Any]:
    result = runner.invoke(app, ["plan", "--program", str(EXAMPLE), "--stack", stack, "--json"])
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def _one(plan: dict[str, Any], type_: str) -> dict[str, Any]:
    (found,) = [r for r in plan["resources"] if r["type"] == type_]
    return found


def test_the_program_imports_only_public_component_names() -> None:
    tree = ast.parse((EXAMPLE / "__main__.py").read_text())
    imports = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if (node.module or "").startswith("trainstack")
    ]
    assert imports == [
        ("trainstack.components", name)
        for name in (
            "A100Cluster",
            "TpuPodSlice",
            "TrainerPackage",
            "TrainingBuckets",
            "TrainingIdentity",
            "TrainingNetwork",
            "UserCode",
        )
    ]
    assert "refresh: always" in (EXAMPLE / "Pulumi.yaml").read_text()


def test_gke_plans_your_torch_code_as_a_job_on_two_spot_a100_nodes() -> None:
    plan = _plan("gke")
    assert Counter(r["type"] for r in plan["resources"]) == {
        **SHARED_TYPES,
        "trainstack:gpu:A100Cluster": 1,
        "gcp:container/cluster:Cluster": 1,
        "gcp:container/nodePool:NodePool": 2,
        "pulumi:providers:kubernetes": 1,
        "trainstack:k8s:KubernetesTrainingJob": 1,
        "kubernetes:batch/v1:Job": 1,
        "kubernetes:core/v1:ServiceAccount": 1,
        "kubernetes:core/v1:Service": 1,
        "gcp:serviceaccount/iAMMember:IAMMember": 1,
    }
    assert len(plan["resources"]) == 30
    assert plan["summary"] == {"tpu_chips": 0, "gpus": 16, "machines": 3, "hourly_usd": 23.74}
    assert [(q["quota_id"], q["needed"]) for q in plan["quota"]] == [
        ("PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region", 16),
        ("GPUS-ALL-REGIONS-per-project", 16),
        ("A2-CPUS-per-project-region", 192),
        ("CPUS-per-project-region", 4),
    ]
    job = _one(plan, "kubernetes:batch/v1:Job")
    container = job["inputs"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "--launcher=torchrun",
        *(line.format(s="gke") for line in CONTRACT),
        "--",
        "python",
        "train.py",
    ]
    # A100Cluster's `environment` put the label the policy requires on the Job and the nodes.
    assert job["inputs"]["metadata"]["labels"]["environment"] == "dev"
    pools = [r for r in plan["resources"] if r["type"] == "gcp:container/nodePool:NodePool"]
    assert [p["inputs"]["nodeConfig"]["resourceLabels"] for p in pools] == [
        {
            "component": "a100-cluster",
            "environment": "dev",
            "managed-by": "trainstack",
            "stack": "gke",
            "team": "research",
        }
    ] * 2
    assert plan["outputs"]["job"] == "own-program-gke-train"
    assert plan["outputs"]["compute"]["status"]["job"] == "own-program-gke-train"


def test_tpu_plans_your_jax_code_on_a_spot_v4_32_slice() -> None:
    plan = _plan("tpu")
    assert Counter(r["type"] for r in plan["resources"]) == {
        **SHARED_TYPES,
        "trainstack:tpu:TpuPodSlice": 1,
        "gcp:tpu/v2Vm:V2Vm": 1,
    }
    assert len(plan["resources"]) == 22
    assert plan["summary"] == {"tpu_chips": 16, "gpus": 0, "machines": 4, "hourly_usd": 20.61}
    assert plan["quota"] == [
        {
            "dimensions": {"zone": "us-central2-b"},
            "needed": 16,
            "verified": False,
            "quota_id": "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI",
            "service": "tpu.googleapis.com",
        }
    ]
    vm = _one(plan, "gcp:tpu/v2Vm:V2Vm")
    assert vm["inputs"]["schedulingConfig"] == {"spot": True}
    assert vm["inputs"]["labels"]["environment"] == "dev"
    script = vm["inputs"]["metadata"]["startup-script"]
    (line,) = [x for x in script.splitlines() if x.startswith("readonly TS_TRAINER_ARGS=")]
    args = " ".join(
        ["--launcher=node", *(x.format(s="tpu") for x in CONTRACT), "--env=JAX_PLATFORMS=tpu"]
    )
    assert line == f"readonly TS_TRAINER_ARGS=({args} -- python train.py)"
    package = _one(plan, "gcp:storage/bucketObject:BucketObject")
    assert package["inputs"]["bucket"] == "my-ml-project-own-program-tpu-staging"


@pytest.mark.parametrize(
    ("program", "stack", "count"),
    [
        ("own-program", "gke", 30),
        ("own-program", "tpu", 22),
        ("tpu-own-bucket", "dev", 14),
    ],
)
def test_the_examples_pass_the_mandatory_policies(program: str, stack: str, count: int) -> None:
    folder = str(REPO_ROOT / "examples" / program)
    result = runner.invoke(app, ["policy", "--program", folder, "--stack", stack, "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)
    assert (report["stack"], report["resources"], report["violations"]) == (stack, count, [])

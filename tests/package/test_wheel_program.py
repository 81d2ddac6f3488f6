"""Issue 30, "Done when": the built wheel, installed into a fresh environment, gives a Pulumi
program of one's own, in a folder outside this checkout, what a trainstack stack gets.

The program (`PROGRAM`) brings its own bucket and service account (plain pulumi_gcp
resources), and composes through `trainstack.components` two TrainingNetworks, a TrainerPackage
of its code per compute, a spot v5litepod-16 in us-west4-a running its JAX code and a spot
GKE A100 cluster (2 x a2-highgpu-8g in us-central1-a) running its PyTorch code, both given
by `UserCode`: the compute of the bundled stacks `dev-tpu-v5e` and `dev-a100-gke`, without
their run supervisors. `trainstack plan --program` gives the totals, quota and notes of those
two stacks' compute; `plan-diff --program` the cost and quota deltas of one node more;
`status` and `logs --program` answer from a saved `pulumi stack output --json` file, over
the local fakes tests/unit/test_program_status.py uses.

Uses the session's wheel (tests/package/conftest.py). About 40 s on 2 busy cores: three
program plans through the installed CLI (about 8 s each), then status and logs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from tests.bundled import bundled_plan
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.kube_server import KubeFakeServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.package.wheel import REPO, Installed, assert_install_untouched, ok, run, user_env
from tests.unit.test_logs import entry, gke_resource, tpu_resource, train
from tests.unit.test_status import NOW, put
from trainstack.infra.plan import build_plan, load_stack

PROGRAM = '''
    """Acme's training: its own bucket and account, trainstack's networks, package and
    compute, each compute running Acme's own code."""
    import pulumi
    import pulumi_gcp as gcp

    from trainstack.components import (
        A100Cluster,
        TpuPodSlice,
        TrainerPackage,
        TrainingNetwork,
        UserCode,
    )

    config = pulumi.Config()
    project = pulumi.Config("gcp").require("project")
    computes = config.require_object("computes")
    labels = {"team": "acme", "environment": "dev"}
    bucket = gcp.storage.Bucket(
        "acme-runs", name="acme-ml-runs", location="US", uniform_bucket_level_access=True,
        labels=labels,
    )
    account = gcp.serviceaccount.Account("acme-train", account_id="acme-train")
    urls = {
        "checkpoint_url": bucket.name.apply(lambda name: f"gs://{name}"),
        "data_url": bucket.name.apply(lambda name: f"gs://{name}/data"),
    }


    def network(region: str) -> TrainingNetwork:
        return TrainingNetwork(
            f"acme-{region}",
            {"project": project, "region": region, "deployment_name": f"acme-{region}"},
        )


    def placed(net: TrainingNetwork, zone: str, name: str) -> dict:
        return {
            "project": project,
            "zone": zone,
            "deployment_name": name,
            "network_self_link": net.network_self_link,
            "subnetwork_self_link": net.subnetwork_self_link,
            "service_account_email": account.email,
            "max_run_seconds": 14400,
            "labels": labels,
        }


    if "tpu" in computes:
        code = UserCode(
            source="jax_train", entrypoint=["python", "train.py"], requirements="requirements.txt"
        )
        package = TrainerPackage("acme-jax", {"staging_bucket": bucket.name, "code": code})
        west = network("us-west4")
        tpu = TpuPodSlice(
            "acme-tpu",
            {
                **placed(west, "us-west4-a", "acme-jax"),
                "accelerator_type": "v5litepod-16",
                "runtime_version": "v2-alpha-tpuv5-lite",
                "provisioning": "spot",
                "network_tags": [west.node_tag],
                "package_uri": package.uri,
                "code": code,
                **urls,
            },
        )
        pulumi.export("tpu", tpu.facts)
    if "gpu" in computes:
        code = UserCode(source="torch_train", entrypoint=["python", "train.py"])
        package = TrainerPackage("acme-torch", {"staging_bucket": bucket.name, "code": code})
        central = network("us-central1")
        gpu = A100Cluster(
            "acme-gpu",
            {
                **placed(central, "us-central1-a", "acme-torch"),
                "backend": "gke",
                "machine_type": "a2-highgpu-8g",
                "node_count": config.require_int("node_count"),
                "spot": True,
                "node_tag": central.node_tag,
                "environment": "dev",
                "training": {"package_uri": package.uri, "code": code, **urls},
            },
        )
        pulumi.export("gpu", gpu.facts)
        pulumi.export("kubeconfig", gpu.kubeconfig)
'''

FILES = {
    "Pulumi.yaml": """
        name: acme-train
        runtime:
          name: python
        stackConfigDir: stacks
    """,
    "__main__.py": PROGRAM,
    "stacks/Pulumi.dev.yaml": """
        config:
          gcp:project: my-ml-project
          acme-train:computes: [tpu, gpu]
          acme-train:node_count: 2
    """,
    "stacks/Pulumi.gpu.yaml": """
        config:
          gcp:project: my-ml-project
          acme-train:computes: [gpu]
          acme-train:node_count: 2
    """,
    "stacks/Pulumi.tpu.yaml": """
        config:
          gcp:project: my-ml-project
          acme-train:computes: [tpu]
    """,
    "torch_train/train.py": "import torch\n",
    "jax_train/train.py": "import jax\n",
    "jax_train/requirements.txt": "jax[tpu]\n",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "acme-train"
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text).lstrip("\n"))
    assert not root.resolve().is_relative_to(REPO)
    return root


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator() as url:
        yield url


def trainstack(installed: Installed, project: Path, *argv: str | Path) -> str:
    return ok(run([installed.trainstack, *argv], project, user_env(installed)))


def program_plan(installed: Installed, project: Path, stack: str) -> dict[str, Any]:
    argv = ("plan", "--program", ".", "--stack", stack, "--json")
    return json.loads(trainstack(installed, project, *argv))


def compute_notes(stack_plan: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A stack plan's notes on its compute: the target's own, and its run limit's (the
    estimate's and quota's notes, the supervisor's, and the unverified quota ids left out)."""
    own = [
        n
        for n in stack_plan["notes"][2:]
        if not n.startswith(("run supervisor", "the supervisor's stop", "unverified quota ids"))
    ]
    return [n for n in own if not n.startswith("limits.")], [
        n for n in own if n.startswith("limits.")
    ]


def test_your_program_plans_the_totals_quota_and_notes_of_the_same_stacks(
    installed: Installed, project: Path, tmp_path: Path
) -> None:
    plan = program_plan(installed, project, "dev")
    tpu_stack = bundled_plan("dev-tpu-v5e")
    # dev-a100-gke runs the bundled trainer with preemption_grace_s 12; own code has the
    # default, which the stack's spot note then weighs.
    name, config = load_stack("dev-a100-gke", None)
    del config["trainstack:trainer"]["preemption_grace_s"]
    gpu_stack = build_plan(name, config)

    # The two stacks' compute, without their supervisors (a few hundredths of a cent an hour).
    assert plan["summary"] == {
        "tpu_chips": 16,
        "gpus": 16,
        "machines": 7,
        "hourly_usd": round(
            gpu_stack["summary"]["hourly_usd"] + tpu_stack["summary"]["hourly_usd"], 2
        ),
    }
    assert plan["summary"]["hourly_usd"] == 31.42
    facts = [plan["outputs"]["gpu"], plan["outputs"]["tpu"]]
    assert plan["summary"]["hourly_usd"] == round(sum(f["hourly_usd"] for f in facts), 2)
    # Compute in resource-name order: the A100 cluster's, then the TPU slice's.
    assert plan["quota"] == gpu_stack["quota"] + tpu_stack["quota"]
    [tpu_own], _ = compute_notes(tpu_stack)
    # Without a QuotaGuard or a RunSupervisor the program is promised neither (before: the
    # stacks' notes that QuotaGuard stops the deployment and the supervisor stops the nodes);
    # its own code on GKE Spot is told what it gets, not the stack's trainer.preemption_grace_s.
    assert plan["notes"] == [
        tpu_stack["notes"][0],
        "quota: no QuotaGuard in this program, so nothing checks the quota before `pulumi up` "
        "creates the compute; a shortfall shows as a failed create. Add one "
        "(trainstack.components.quota_guard.QuotaGuard, registered first, with the quota this "
        "plan lists as its needs): docs/own-program.md",
        "A100Cluster.spot: GKE gives the pods of a preempted Spot node 15 s to stop (the rest "
        "of the 30 s notice is for system pods), whatever their terminationGracePeriodSeconds "
        "says (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); your "
        "code gets SIGTERM from the node launcher then: it must save its checkpoint and exit "
        "within about 12 s, or the run resumes from the checkpoint before",
        tpu_own,
        "unverified quota ids (confirm with gcp.cloudquota.get_s_quota_infos before "
        "requesting): A2-CPUS-per-project-region, CPUS-per-project-region, "
        "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI",
        "limits.max_run_hours: GKE Job activeDeadlineSeconds 14400",
        "limits.max_run_hours: enforced by the TPU startup script: it stops the trainer 14400s "
        "after the run's first start (TpuPodSlice max_run_seconds)",
        "run supervisor: none in this program stops its A100Cluster (gke), TpuPodSlice (tpu): "
        "nothing stops the machines at the run's end or at its limits (max_run_seconds stops "
        "the trainer, not the machines), so they bill until `pulumi destroy`. Add a "
        "RunSupervisor (trainstack.components.run_supervisor) for it: docs/own-program.md",
    ]
    quota = trainstack(installed, project, "quota", "--program", ".", "--stack", "dev", "--json")
    assert json.loads(quota) == plan["quota"]

    (tmp_path / "base.json").write_text(json.dumps(plan))
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    stack_file.write_text(stack_file.read_text().replace("node_count: 2", "node_count: 3"))
    diff = trainstack(
        installed, project, "plan-diff", "--program", ".", "--stack", "dev", tmp_path / "base.json"
    )
    tables = [line for line in diff.splitlines() if line.startswith("| ")]
    assert tables == [
        "| total | base | head | delta |",
        "| gpus | 16 | 24 | +8 |",
        "| machines | 7 | 8 | +1 |",
        "| hourly_usd | $31.42 | $43.18 | +$11.76 |",
        "| quota | dimensions | base | head | delta |",
        "| A2-CPUS-per-project-region | region=us-central1 | 192 | 288 | +96 |",
        "| GPUS-ALL-REGIONS-per-project | global | 16 | 24 | +8 |",
        "| PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region | region=us-central1 | 16 | 24 | +8 |",
    ]
    assert_install_untouched(installed)


def saved_outputs(plan: dict[str, Any], path: Path) -> Path:
    """The stack's outputs as `pulumi stack output --json --show-secrets` prints them: each
    export by name, the kubeconfig secret in plaintext (under the fakes, a stand-in: the
    cluster is reached through `--endpoint kubernetes=`)."""
    outputs = {k: v for k, v in plan["outputs"].items() if k != "kubeconfig"}
    if "kubeconfig" in plan["outputs"]:
        outputs["kubeconfig"] = "unused: an http:// override"
    path.write_text(json.dumps(outputs, indent=2) + "\n")
    return path


def test_your_program_status_and_logs_from_its_saved_outputs(
    installed: Installed, project: Path, tmp_path: Path, gcs: str
) -> None:
    gpu = saved_outputs(program_plan(installed, project, "gpu"), tmp_path / "gpu.json")
    tpu = saved_outputs(program_plan(installed, project, "tpu"), tmp_path / "tpu.json")
    checkpoint = "checkpoints/acme-torch/step-00000050"
    put(gcs, "acme-ml-runs", f"{checkpoint}/COMPLETE", f"{checkpoint}/model.pt")
    with LoggingFakeServer() as logs, KubeFakeServer() as kube:
        kube.jobs["default/acme-torch-train"] = {
            "status": {
                "startTime": "2026-11-23T11:00:00Z",
                "completionTime": "2026-11-23T11:30:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        }
        logs.add(
            entry(1, gke_resource("acme-torch-train-0-x0k2p", "acme-torch-a100"), train(60, 0, 0)),
            entry(2, tpu_resource(1, "acme-jax-tpu"), "jax step 20: loss 2.30"),
        )
        endpoints = [
            *("--endpoint", f"logging={logs.endpoint}"),
            *("--endpoint", f"kubernetes={kube.endpoint}"),
            *("--endpoint", f"storage={gcs}/storage/v1/"),
        ]
        program = ("--program", ".", "--outputs")
        status = trainstack(
            installed, project, "status", *program, gpu, "--stack", "gpu", *endpoints, "--now", NOW
        )
        lines = trainstack(
            installed, project, "logs", *program, tpu, "--stack", "tpu", "--worker", "1", *endpoints
        )
        query = logs.requests[-1][2]["filter"]
    assert status == (
        "stack: gpu (gpu_cluster)\n"
        "state: SUCCEEDED\n"
        "step: 60\n"
        "checkpoint: step 50 (gs://acme-ml-runs/checkpoints/acme-torch/step-00000050)\n"
        "hosts: 0/0 up\n"
        "cost so far: $11.87 at list price ($23.74/hour x 0.50 h since 2026-11-23T11:00:00Z)\n"
    )
    assert lines == "jax step 20: loss 2.30\n"
    assert query == (
        'resource.type="tpu_worker" AND resource.labels.node_id="acme-jax-tpu" '
        'AND resource.labels.worker_id="1"'
    )
    # Both computes in one stack: status reads one, and says in one line how to name it.
    both = saved_outputs(program_plan(installed, project, "dev"), tmp_path / "dev.json")
    done = run(
        [installed.trainstack, "status", "--program", ".", "--stack", "dev", "--outputs", both],
        project,
        user_env(installed),
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "error: stack 'dev' has 2 compute components (acme-tpu (TpuPodSlice), acme-gpu "
        "(A100Cluster)); status and logs read one; valid: --component NAME, one of them\n",
    )
    assert_install_untouched(installed)

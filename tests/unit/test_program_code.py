"""A program's plan shows, for each compute component given your code (`UserCode`), the "Your
code" section a stack plan shows for `trainstack:trainer` (files packaged, entrypoint,
launcher, requirements, ...: `trainstack.components.code_summary`, from the component's
`facts`), and its `plan-diff` says a code change in the stack plan-diff's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.unit.test_program_facts import COMMON, own_code_program
from trainstack.components import A100Cluster, LocalTrainingJob, UserCode, VertexTrainingJob
from trainstack.components.tpu_gke_slices import TpuGkeSlices
from trainstack.infra.cli import app
from trainstack.infra.code_plan import code_summary
from trainstack.infra.config import load_stack_config
from trainstack.infra.mocks import run_program
from trainstack.infra.program_plan import build_program_plan

runner = CliRunner()


def table_rows(output: str, title: str) -> list[list[str]]:
    """The body rows of the table titled `title` in a plan's text, as cells."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    rows = []
    for line in lines[start + 4 :]:
        if not line.startswith("│"):
            break
        rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


def test_a_program_plan_shows_your_code_of_its_tpu_slice(tmp_path: Path) -> None:
    folder = own_code_program(tmp_path / "acme")
    result = runner.invoke(app, ["plan", "--program", str(folder), "--stack", "dev"])
    assert result.exit_code == 0, result.output
    # Before: no such table (a program's plan had no code section at all).
    assert table_rows(result.stdout, "Your code: acme-tpu") == [
        ["source", "train (sha256 fc01ef6bcd43f93b)"],
        ["files", "2 files, 20 B"],
        ["largest", "train.py 11 B, requirements.txt 9 B"],
        ["image", "-"],
        ["runs on", "TPU VM runtime tpu-ubuntu2204-base"],
        ["entrypoint", "python train.py"],
        ["launcher", "node (the default on TpuPodSlice)"],
        [
            "launcher env",
            "TRAINSTACK_CHECKPOINT_DIR, TRAINSTACK_DATA_DIR, TRAINSTACK_OUTPUT_DIR, "
            "TRAINSTACK_RUN_NAME, TRAINSTACK_NODE_RANK, TRAINSTACK_NUM_NODES, "
            "TRAINSTACK_ACCELERATORS_PER_NODE, TRAINSTACK_COORDINATOR, TPU_WORKER_ID, "
            "TPU_WORKER_HOSTNAMES",
        ],
        ["world size", "2"],
        ["requirements", "jax[tpu]"],
    ]


def test_the_programs_code_entry_is_the_stack_plans(tmp_path: Path) -> None:
    folder = own_code_program(tmp_path / "acme")
    program_code = build_program_plan(folder, "dev")["code_by_component"]
    # The same slice and code as a stack file in the same project.
    stack_file = folder / "Pulumi.slice.yaml"
    config = {
        "gcp:project": "my-ml-project",
        "gcp:region": "us-central2",
        "trainstack:tpu": {
            "accelerator_type": "v4-16",
            "zone": "us-central2-b",
            "runtime_version": "tpu-ubuntu2204-base",
            "provisioning": "spot",
        },
        "trainstack:trainer": {
            "source": "train",
            "entrypoint": ["python", "train.py"],
            "requirements": "requirements.txt",
        },
    }
    stack_file.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "--config-file", str(stack_file), "--json"])
    assert result.exit_code == 0, result.output
    stack_code = json.loads(result.stdout)["code"]
    assert list(program_code) == ["acme-tpu"]
    # The launcher's default is the component's in a program, the target's in a stack.
    assert stack_code["launcher_from"] == "the default on tpu"
    assert program_code["acme-tpu"] == {
        **stack_code,
        "launcher_from": "the default on TpuPodSlice",
    }


def test_a_given_launcher_names_the_components_argument(tmp_path: Path) -> None:
    folder = own_code_program(tmp_path / "acme")
    main = folder / "__main__.py"
    main.write_text(main.read_text().replace(")\ntpu =", ', launcher="node")\ntpu =', 1))
    [code] = build_program_plan(folder, "dev")["code_by_component"].values()
    assert (code["launcher"], code["launcher_from"]) == ("node", "TpuPodSlice.code.launcher")


PACKAGED = (
    COMMON.replace("REGION", "us-central2")
    + """
from trainstack.components import TpuPodSlice, TrainerPackage, UserCode

code = UserCode(
    source="train",
    entrypoint=["python", "train.py"],
    requirements="requirements.txt",
    env={"WANDB_PROJECT": "acme"},
)
package = TrainerPackage("acme-code", {"staging_bucket": "acme-staging", "code": code})
tpu = TpuPodSlice(
    "acme-tpu",
    {
        **shared,
        "zone": "us-central2-b",
        "accelerator_type": "v4-16",
        "runtime_version": "tpu-ubuntu2204-base",
        "provisioning": "spot",
        "network_tags": ["acme-node"],
        "package_uri": package.uri,
        "package": package,
        "code": code,
        "checkpoint_url": "gs://acme-checkpoints",
        "data_url": "gs://acme-data",
    },
)
"""
)


def test_plan_diff_of_a_program_says_its_code_changed(tmp_path: Path) -> None:
    folder = own_code_program(tmp_path / "acme", PACKAGED)
    base = tmp_path / "base.json"
    base.write_text(json.dumps(build_program_plan(folder, "dev")))
    (folder / "train" / "train.py").write_text("import jax\nprint(jax.devices())\n")
    main = folder / "__main__.py"
    main.write_text(
        main.read_text().replace('"WANDB_PROJECT": "acme"', '"WANDB_PROJECT": "acme-2"')
    )
    result = runner.invoke(
        app, ["plan-diff", "--program", str(folder), "--stack", "dev", str(base)]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # Before: no code line, and the slice "updated in place" though its replaceOnChanges
    # option replaces it on a new startup script (TpuPodSlice), so no relaunch note.
    assert [line for line in lines if line.startswith(("- **", "  - **"))] == [
        "- **code** `acme-tpu`: source sha256 `fc01ef6bcd43f93b` -> `6700e12a8a8f4e76`; env "
        "changed",
        "- **replace** `acme-code-sdist` (gcp:storage/bucketObject:BucketObject): "
        "`metadata.sha256`, `name`, `source.fileAsset` changed, which forces a new resource "
        "(the Terraform provider schema); creates the new one first",
        "- **replace** `acme-tpu-vm` (gcp:tpu/v2Vm:V2Vm): `metadata.startup-script` changed, "
        "which forces a new resource (its replaceOnChanges option); deletes the old one first",
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://acme-checkpoints/checkpoints/acme`**",
    ]
    # Your code's env values show as a short hash, as in a stack's plan-diff.
    assert "acme-2" not in result.stdout


IMAGE = "us-docker.pkg.dev/p/r/train:1"
VERTEX = {
    "project": "p",
    "region": "us-central1",
    "display_name": "exp",
    "machine_type": "a2-highgpu-8g",
    "replica_count": 2,
    "package_uri": "gs://staging/code.tar.gz",
    "data_url": "gs://data",
}
TPU_GKE = {
    "project": "p",
    "zone": "us-east5-b",
    "deployment_name": "exp",
    "accelerator_type": "v6e-16",
    "slices": 2,
    "package_uri": "gs://staging/code.tar.gz",
    "checkpoint_url": "gs://ckpt",
    "data_url": "gs://data",
    "network_self_link": "projects/p/global/networks/n",
    "subnetwork_self_link": "projects/p/regions/us-east5/subnetworks/s",
    "node_tag": "exp-node",
    "service_account_email": "sa@p.iam.gserviceaccount.com",
}
CASES = {
    # component, its arguments but `code`, the stack's section with the same compute
    "vertex": (
        VertexTrainingJob,
        VERTEX,
        {"vertex": {"machine_type": "a2-highgpu-8g", "replica_count": 2}},
    ),
    "local": (LocalTrainingJob, {"workers": 2}, {"local": {"workers": 2}}),
    "tpu_gke": (
        TpuGkeSlices,
        TPU_GKE,
        {
            "tpu": {
                "backend": "gke",
                "accelerator_type": "v6e-16",
                "zone": "us-east5-b",
                "slices": 2,
            }
        },
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_computes_code_entry_is_the_stack_plans(tmp_path: Path, case: str) -> None:
    component, args, section = CASES[case]
    (tmp_path / "train.py").write_text("import jax\n")
    image = IMAGE if case != "local" else None
    code = UserCode(
        source=str(tmp_path), image=image, entrypoint=["python", "train.py"], env={"A": "1"}
    )
    extra = {"root": str(tmp_path / "run"), "base_dir": str(tmp_path)} if case == "local" else {}

    def program() -> None:
        component("exp", {**args, **extra, "code": code})

    [facts] = [o["facts"] for o in run_program(program).registered_outputs.values() if "facts" in o]
    config = {f"trainstack:{key}": body for key, body in section.items()}
    if case != "local":
        config |= {
            "gcp:project": "p",
            "gcp:region": "us-east5" if case == "tpu_gke" else "us-central1",
        }
    config["trainstack:trainer"] = code.model_dump(exclude_defaults=True)
    stack = code_summary(load_stack_config(config))
    assert stack is not None
    # Before: no `code` in the component's facts.
    assert facts["code"] == {
        **stack,
        "launcher_from": f"the default on {component.__name__}",
    }


TORCH_POD_IMAGE = (
    "pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
)
"""The bundled torch image a GKE pod of your code without `image` pulls on an A100."""
GPU_CLUSTER = {
    "project": "p",
    "zone": "us-central1-a",
    "deployment_name": "exp",
    "machine_type": "a2-highgpu-8g",
    "node_count": 2,
    "network_self_link": "projects/p/global/networks/n",
    "subnetwork_self_link": "projects/p/regions/us-central1/subnetworks/s",
    "node_tag": "exp-node",
    "service_account_email": "sa@p.iam.gserviceaccount.com",
}


@pytest.mark.parametrize(
    ("backend", "image", "launcher"),
    [("gke", IMAGE, None), ("gke", None, "node"), ("gce", None, None), ("gce", None, "node")],
)
def test_a_gpu_clusters_code_entry_is_the_stack_plans(
    tmp_path: Path, backend: str, image: str | None, launcher: str | None
) -> None:
    (tmp_path / "train.py").write_text("import torch\n")
    code = UserCode(
        source=str(tmp_path),
        image=image,
        entrypoint=["python", "train.py"],
        launcher=launcher,
        env={"A": "1"},
    )
    training = {
        "package_uri": "gs://staging/code.tar.gz",
        "code": code,
        "checkpoint_url": "gs://ckpt",
        "data_url": "gs://data",
    }

    def program() -> None:
        A100Cluster("exp", {**GPU_CLUSTER, "backend": backend, "training": training})

    [facts] = [o["facts"] for o in run_program(program).registered_outputs.values() if "facts" in o]
    section = {
        "backend": backend,
        "machine_type": "a2-highgpu-8g",
        "node_count": 2,
        "zone": "us-central1-a",
    }
    config = {
        "gcp:project": "p",
        "gcp:region": "us-central1",
        "trainstack:gpu_cluster": section,
        "trainstack:trainer": code.model_dump(exclude_defaults=True),
    }
    stack = code_summary(load_stack_config(config))
    assert stack is not None
    # Before: no `code` in the cluster's facts (KeyError).
    assert facts["code"] == {
        **stack,
        "launcher_from": (
            "A100Cluster.training.code.launcher" if launcher else "the default on A100Cluster"
        ),
    }


def test_the_own_program_examples_gke_plan_shows_its_code() -> None:
    folder = Path(__file__).parents[2] / "examples" / "own-program"
    result = runner.invoke(app, ["plan", "--program", str(folder), "--stack", "gke"])
    assert result.exit_code == 0, result.output
    # Before: no such table (A100Cluster's facts carried no code).
    assert table_rows(result.stdout, "Your code: own-program-gke-gpu") == [
        ["source", "torch_train (sha256 c290dbfdeb16961e)"],
        ["files", "1 files, 654 B"],
        ["largest", "train.py 654 B"],
        ["image", "-"],
        ["runs on", TORCH_POD_IMAGE],
        ["entrypoint", "python train.py"],
        ["launcher", "torchrun (the default on A100Cluster)"],
        [
            "launcher env",
            "TRAINSTACK_CHECKPOINT_DIR, TRAINSTACK_DATA_DIR, TRAINSTACK_OUTPUT_DIR, "
            "TRAINSTACK_RUN_NAME, TRAINSTACK_NODE_RANK, TRAINSTACK_NUM_NODES, "
            "TRAINSTACK_ACCELERATORS_PER_NODE, TRAINSTACK_COORDINATOR, RANK, LOCAL_RANK, "
            "WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
        ],
        # 2 a2-highgpu-8g nodes, one process per GPU.
        ["world size", "16"],
    ]
    # Where it says the code runs is the image the Job's pods pull.
    plan = build_program_plan(folder, "gke")
    [job] = [r for r in plan["resources"] if r["type"] == "kubernetes:batch/v1:Job"]
    [container] = job["inputs"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == TORCH_POD_IMAGE

"""KubernetesTrainingJob, VertexTrainingJob and LocalTrainingJob take your code as `code`
(`trainstack.components.UserCode`) and register exactly what the stack path registers from
the node launcher arguments it builds by hand (`trainstack.infra.compose.user_code_node_args`,
the target's run contract: Vertex AI keeps its own checkpoint and output folders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.components import (
    KubernetesTrainingJob,
    LocalTrainingJob,
    UserCode,
    VertexTrainingJob,
)
from trainstack.infra.compose import user_code_node_args
from trainstack.infra.config import load_stack_config
from trainstack.infra.mocks import run_program

ENTRYPOINT = ["python", "train.py", "--steps=10"]


def _code(tmp_path: Path) -> UserCode:
    (tmp_path / "train.py").write_text("import torch\n")
    return UserCode(source=str(tmp_path), entrypoint=ENTRYPOINT, env={"A": "1"})


def _stack_node_args(section: str, body: dict[str, Any], code: UserCode) -> list[str]:
    cfg = load_stack_config(
        {
            "gcp:project": "p",
            "gcp:region": "us-central1",
            f"trainstack:{section}": body,
            "trainstack:trainer": code.model_dump(exclude_defaults=True),
        }
    )
    return user_code_node_args(cfg, "exp", "gs://ckpt", "gs://data")


def _inputs(build: Any) -> list[tuple[str, str, Any]]:
    def program() -> None:
        build()

    # The mocks record registrations as the engine's event loop completes them, so two runs of
    # one program may list the same resources in another order.
    return sorted(
        ((r.type, r.name, r.inputs) for r in run_program(program).resources),
        key=lambda r: (r[0], r[1]),
    )


def test_a_kubernetes_job_given_code_registers_the_stack_paths_job(tmp_path: Path) -> None:
    code = _code(tmp_path)
    gke = {"backend": "gke", "machine_type": "a2-highgpu-8g", "zone": "us-central1-a"}
    node_args = _stack_node_args("gpu_cluster", gke, code)
    assert node_args[:2] == [
        "--launcher=torchrun",
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://ckpt/checkpoints/exp",
    ]
    shared = {
        "job_name": "exp-train",
        "node_count": 2,
        "gpus_per_node": 8,
        "package_uri": "gs://staging/code.tar.gz",
        "checkpoint_url": "gs://ckpt",
    }
    by_hand = _inputs(lambda: KubernetesTrainingJob("t", {**shared, "node_args": node_args}))  # type: ignore[typeddict-item]
    given = {**shared, "code": code, "data_url": "gs://data", "run_name": "exp"}
    assert _inputs(lambda: KubernetesTrainingJob("t", given)) == by_hand  # type: ignore[arg-type]


def test_a_vertex_job_given_code_registers_the_stack_paths_job(tmp_path: Path) -> None:
    code = _code(tmp_path)
    node_args = _stack_node_args(
        "vertex", {"machine_type": "a2-highgpu-8g", "replica_count": 2}, code
    )
    # Vertex names the checkpoint and output folders (AIP_*): the contract keeps data and run.
    assert node_args == [
        "--launcher=torchrun",
        "--env=TRAINSTACK_DATA_DIR=gs://data",
        "--env=TRAINSTACK_RUN_NAME=exp",
        "--env=A=1",
        "--",
        *ENTRYPOINT,
    ]
    shared = {
        "project": "p",
        "region": "us-central1",
        "display_name": "exp",
        "machine_type": "a2-highgpu-8g",
        "replica_count": 2,
        "package_uri": "gs://staging/code.tar.gz",
        "container_image_uri": "us-docker.pkg.dev/p/r/train:1",
    }
    by_hand = _inputs(lambda: VertexTrainingJob("v", {**shared, "node_args": node_args}))  # type: ignore[typeddict-item]
    given = {**shared, "code": code, "data_url": "gs://data"}
    assert _inputs(lambda: VertexTrainingJob("v", given)) == by_hand  # type: ignore[arg-type]


def test_a_local_job_given_code_registers_the_stack_paths_run(tmp_path: Path) -> None:
    code = _code(tmp_path)
    cfg = load_stack_config(
        {
            "trainstack:local": {"workers": 2},
            "trainstack:trainer": code.model_dump(exclude_defaults=True),
        }
    )
    # What the local target passes (infra/targets/local.py compose_alone).
    trainer = cfg.trainer.model_copy(update={"run_name": "exp"})
    shared = {"workers": 2, "root": str(tmp_path / "run"), "base_dir": str(tmp_path)}
    by_hand = _inputs(lambda: LocalTrainingJob("l", {**shared, "trainer": trainer}))  # type: ignore[typeddict-item]
    given = {**shared, "code": code, "run_name": "exp"}
    assert _inputs(lambda: LocalTrainingJob("l", given)) == by_hand  # type: ignore[arg-type]


def test_a_package_built_from_other_code_is_one_line(tmp_path: Path) -> None:
    from trainstack.components import TrainerPackage
    from trainstack.components._args import ArgsError

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code, other = _code(tmp_path / "a"), _code(tmp_path / "b")
    shared = {
        "job_name": "exp-train",
        "node_count": 1,
        "gpus_per_node": 8,
        "package_uri": "gs://staging/code.tar.gz",
        "checkpoint_url": "gs://ckpt",
        "data_url": "gs://data",
    }

    def program(package_code: UserCode) -> None:
        package = TrainerPackage(
            "pkg",
            {"staging_bucket": "s", "code": package_code, "build_dir": str(tmp_path / "build")},
        )
        KubernetesTrainingJob("t", {**shared, "code": code, "package": package})  # type: ignore[typeddict-item]

    run_program(lambda: program(code))
    try:
        run_program(lambda: program(other))
    except ArgsError as exc:
        assert exc.errors == [
            f"KubernetesTrainingJob.package: built from {tmp_path / 'b'}, not code.source "
            f"{str(tmp_path / 'a')!r}; valid: the TrainerPackage given the same code"
        ]
    else:
        raise AssertionError("no error for a package of other code")

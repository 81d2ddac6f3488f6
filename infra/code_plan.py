"""What a plan says about your own code (`trainstack:trainer.entrypoint`).

`code_summary` is the plan's `code` entry: the source folder and the sha256 of its packaged
files (what decides whether a deployment relaunches), the image, the entrypoint, the
launcher the target runs it with, the world size (processes that run it: machines x
accelerators per machine under torchrun, machines / TPU hosts with launcher node, local
workers either way), the requirements, the plain env and the secret_env names with the
secrets they read (resource names only: values never reach a plan). `code_rows` is the
same for the plan's table.
"""

from __future__ import annotations

from typing import Any

from trainstack.components.catalog.images import DLVM_IMAGE, KUBERNETES_IMAGES
from trainstack.infra.compose import vertex_image
from trainstack.infra.config import StackConfig
from trainstack.infra.project import current_place
from trainstack.trainers.common.contract import TORCH_MODULE
from trainstack.trainers.common.user_code import (
    UserCode,
    read_requirements,
    resolve_source,
    source_files,
    source_sha256,
)


def world_size(cfg: StackConfig, code: UserCode) -> int:
    """Processes that run `code` on the stack's target."""
    launcher = code.launcher_for(cfg.target)
    if cfg.local is not None:
        return cfg.local.workers
    if cfg.tpu is not None:
        return cfg.tpu.slice.hosts
    if cfg.gpu_cluster is not None:
        gpu = cfg.gpu_cluster
        return gpu.node_count * (gpu.machine.gpus if launcher == "torchrun" else 1)
    assert cfg.vertex is not None
    vx = cfg.vertex
    return vx.replica_count * (max(vx.gpus_per_replica, 1) if launcher == "torchrun" else 1)


def runs_on(cfg: StackConfig, code: UserCode) -> str:
    """Where the code will run: the image (yours or the target's default) or the machine."""
    if cfg.target == "tpu" and cfg.tpu is not None:
        return f"TPU VM runtime {cfg.tpu.runtime_version or '(the default for the slice)'}"
    if cfg.target == "gpu_cluster" and cfg.gpu_cluster is not None:
        if cfg.gpu_cluster.backend == "gce":
            return f"Deep Learning VM image {DLVM_IMAGE}"
        return code.image or KUBERNETES_IMAGES[TORCH_MODULE]
    if cfg.target == "vertex" and cfg.vertex is not None:
        return vertex_image(cfg)[0]
    return "this machine (local-run's Python)"


def code_summary(cfg: StackConfig) -> dict[str, Any] | None:
    """The plan's `code` entry, or None for the bundled trainer."""
    code = cfg.trainer.user_code
    if code is None:
        return None
    digest = None
    requirements: list[str] = []
    if code.source is not None:
        base_dir = current_place().base_dir
        folder = resolve_source(code.source, base_dir)
        digest = source_sha256(source_files(folder))
        if code.requirements is not None:
            requirements = read_requirements(code, base_dir)
    return {
        "source": code.source,
        "source_sha256": digest,
        "image": code.image,
        "runs_on": runs_on(cfg, code),
        "entrypoint": list(code.entrypoint),
        "launcher": code.launcher_for(cfg.target),
        "world_size": world_size(cfg, code),
        "requirements": requirements,
        "env": code.env,
        "secret_env": code.secret_env,
    }


def code_rows(code: dict[str, Any]) -> list[tuple[str, str]]:
    """The `code` entry as (field, value) rows for the plan's table."""
    digest = code["source_sha256"]
    rows = [
        ("source", f"{code['source']} (sha256 {digest[:16]})" if digest else "-"),
        ("image", code["image"] or "-"),
        ("runs on", code["runs_on"]),
        ("entrypoint", " ".join(code["entrypoint"])),
        ("launcher", code["launcher"]),
        ("world size", str(code["world_size"])),
    ]
    if code["requirements"]:
        rows.append(("requirements", ", ".join(code["requirements"])))
    if code["env"]:
        rows.append(("env", ", ".join(f"{k}={v}" for k, v in code["env"].items())))
    if code["secret_env"]:
        rows.append(("secret_env", ", ".join(f"{k} <- {v}" for k, v in code["secret_env"].items())))
    return rows

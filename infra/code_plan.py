"""What a plan says about your own code (`trainstack:trainer.entrypoint`).

`code_summary` is the plan's `code` entry: the source folder and the sha256 of its packaged
files (what decides whether a deployment relaunches), the image, the entrypoint, the
launcher the target runs it with and whether `trainer.launcher` chose it or the target's
default did (`launcher_from`), the variables that launcher gives every process
(`launcher_env`), the world size (processes that run it: machines x
accelerators per machine under torchrun, machines / TPU hosts with launcher node, local
workers either way), the requirements, the plain env and the secret_env names with the
secrets they read (resource names only: values never reach a plan). `code_rows` is the
same for the plan's table.
"""

from __future__ import annotations

from typing import Any, Final

from trainstack.infra.config import StackConfig
from trainstack.infra.project import current_place
from trainstack.infra.targets import target_of
from trainstack.trainers.common.contract import RUN_CONTRACT_ENV
from trainstack.trainers.common.user_code import (
    UserCode,
    read_requirements,
    resolve_source,
    source_files,
    source_sha256,
)

TORCHRUN_ENV: Final = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""What torchrun sets on each process it starts
(https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables")."""


def world_size(cfg: StackConfig, code: UserCode) -> int:
    """Processes that run `code` on the stack's target (`Target.code_world_size`)."""
    return target_of(cfg).code_world_size(cfg, code)


def launcher_env(cfg: StackConfig, code: UserCode) -> list[str]:
    """The variables every process of `code` gets from its launcher on the stack's target:
    the run contract, then the launcher's own (your `env` and `secret_env` come on top)."""
    if code.launcher_for(cfg.target) == "torchrun":
        return [*RUN_CONTRACT_ENV, *TORCHRUN_ENV]
    return [*RUN_CONTRACT_ENV, *target_of(cfg).node_launcher_env(cfg)]


def runs_on(cfg: StackConfig, code: UserCode) -> str:
    """Where the code will run: the image (yours or the target's default) or the machine."""
    return target_of(cfg).runs_on(cfg, code)


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
        "launcher_from": (
            "trainer.launcher" if code.launcher is not None else f"the default on {cfg.target}"
        ),
        "launcher_env": launcher_env(cfg, code),
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
        ("launcher", f"{code['launcher']} ({code['launcher_from']})"),
        ("launcher env", ", ".join(code["launcher_env"])),
        ("world size", str(code["world_size"])),
    ]
    if code["requirements"]:
        rows.append(("requirements", ", ".join(code["requirements"])))
    if code["env"]:
        rows.append(("env", ", ".join(f"{k}={v}" for k, v in code["env"].items())))
    if code["secret_env"]:
        rows.append(("secret_env", ", ".join(f"{k} <- {v}" for k, v in code["secret_env"].items())))
    return rows

"""What a plan says about your own code (`trainstack:trainer.entrypoint`).

`code_summary` is the plan's `code` entry: the source folder and the sha256 of its packaged
files (what decides whether a deployment relaunches), what is packaged (`files`: count, total
bytes, the largest, the ignore file, what it and the default secret rules left out; see
`trainstack.components.trainer_package.code_files`), the image, the entrypoint, the
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

from trainstack.components.trainer_package import code_files
from trainstack.infra.config import StackConfig
from trainstack.infra.project import current_place
from trainstack.infra.targets import target_of
from trainstack.trainers.common.contract import RUN_CONTRACT_ENV
from trainstack.trainers.common.user_code import UserCode, read_requirements, resolve_source

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
    if code.launcher_for(target_of(cfg).default_launcher) == "torchrun":
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
    digest = files = None
    requirements: list[str] = []
    if code.source is not None:
        base_dir = current_place().base_dir
        packaged = code_files(resolve_source(code.source, base_dir))
        digest, files = packaged.sha256, packaged.summary()
        if code.requirements is not None:
            requirements = read_requirements(code, base_dir)
    return {
        "source": code.source,
        "source_sha256": digest,
        "files": files,
        "image": code.image,
        "runs_on": runs_on(cfg, code),
        "entrypoint": list(code.entrypoint),
        "launcher": code.launcher_for(target_of(cfg).default_launcher),
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
        *(_file_rows(code["files"]) if code.get("files") else []),
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


def _size(n: int) -> str:
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def _file_rows(files: dict[str, Any]) -> list[tuple[str, str]]:
    """What the package holds and what was left out, for the plan's table."""
    rule = f" (ignore file {files['ignore_file']})" if files["ignore_file"] else ""
    rows = [
        ("files", f"{files['count']} files, {_size(files['bytes'])}{rule}"),
        ("largest", ", ".join(f"{f['path']} {_size(f['bytes'])}" for f in files["largest"]) or "-"),
    ]
    if files["excluded"]:
        left_out = ", ".join(f"{e['path']} ({e['why']})" for e in files["excluded"])
        rows.append(("left out", left_out))
    ignored = files["ignored"]
    if ignored["count"]:
        more = ignored["count"] - len(ignored["first"])
        shown = ", ".join(ignored["first"]) + (f" and {more} more" if more else "")
        rows.append(("ignored", shown))
    return rows

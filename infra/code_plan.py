"""What a plan says about your own code (`trainstack:trainer.entrypoint`).

`code_summary` is the plan's `code` entry (`trainstack.components.code_summary.code_summary`,
which a compute component's `facts` carry for a program's plan too): the source folder and
the sha256 of its packaged files, what is packaged, the image, the entrypoint, the launcher
the target runs it with and whether `trainer.launcher` chose it or the target's default did
(`launcher_from`), the variables that launcher gives every process (`launcher_env`), the world
size (processes that run it: machines x accelerators per machine under torchrun, machines /
TPU hosts with launcher node, local workers either way), the requirements, the plain env and
the secret_env names with the secrets they read (resource names only: values never reach a
plan). `code_rows` is the same for the plan's table, a stack's or each compute's of a
program.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainstack.components.code_summary import code_summary as compute_code_summary
from trainstack.infra.config import StackConfig
from trainstack.infra.project import current_place
from trainstack.infra.targets import target_of
from trainstack.trainers.common.printable import printable


def code_summary(cfg: StackConfig) -> dict[str, Any] | None:
    """The plan's `code` entry, or None for the bundled trainer."""
    code = cfg.trainer.user_code
    if code is None:
        return None
    target = target_of(cfg)
    return compute_code_summary(
        code,
        default_launcher=target.default_launcher,
        launcher_key="trainer.launcher",
        default_on=cfg.target,
        runs_on=target.runs_on(cfg, code),
        world_size=target.code_world_size(cfg, code),
        node_env=target.node_launcher_env(cfg),
        base_dir=current_place().base_dir,
    )


def code_rows(code: Mapping[str, Any]) -> list[tuple[str, str]]:
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
    # File names and arguments are the user's: a name holding ESC sequences or a newline
    # must not clear the terminal or break the row (escaped as `trainstack logs` does).
    return [(field, _one_line(value)) for field, value in rows]


def _one_line(text: str) -> str:
    return printable(text).replace("\t", "\\x09").replace("\n", "\\x0a")


def _size(n: int) -> str:
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def _file_rows(files: Mapping[str, Any]) -> list[tuple[str, str]]:
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

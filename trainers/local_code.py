"""`trainstack local-run` for your own code: the cloud's node launch, on this machine.

Each "machine" is a node launcher process (`python -m trainstack.trainers.node <node_args>`), started
with the variables a GCE VM's startup script gives it (`TRAINSTACK_NODE_RANK`,
`TRAINSTACK_NUM_NODES`, `TRAINSTACK_COORDINATOR` on a free localhost port) and
`TRAINSTACK_SIMULATED_ACCELERATORS`, so the code runs through the same launcher, wrapper and
environment as on every target:

- `launcher: torchrun`: one node with `workers` simulated accelerators: torchrun starts
  `workers` processes (world size `workers`).
- `launcher: node`: `workers` nodes of one process each (world size `workers`), with
  `TRAINSTACK_WORKER_HOSTS` naming a TF port per node for `TF_CONFIG`.

The run contract's folders live under `root`: checkpoints in `trainer.checkpoint_dir` or
`root/checkpoints/<run_name>` (so running again resumes), data in `root/data`, outputs in
`root/outputs/<run_name>`; the JSON records the code prints are kept in `root/logs/<run>.jsonl` (its
other lines are shown as they come),
stderr in `root/logs/<run>.stderr.log`. Requirements are not installed here: the code runs
in this environment. SIGTERM or Ctrl-C is forwarded once as SIGTERM (the code saves and exits
143; 130 after Ctrl-C), a second one or the grace period running out kills every process.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import fsspec
from rich.console import Console

from trainstack.trainers.common.checkpoint import (
    MARKED_STEP_RE,
    MARKER,
    CheckpointStore,
    Cleared,
    newest_marked,
    write_whole,
)
from trainstack.trainers.common.contract import (
    CHECKPOINT_DIR_ENV,
    COORDINATOR_ENV,
    DATA_DIR_ENV,
    NODE_MODULE,
    NODE_RANK_ENV,
    NUM_NODES_ENV,
    OUTPUT_DIR_ENV,
    RUN_NAME_ENV,
)
from trainstack.trainers.common.fingerprint import FINGERPRINT_FIELD, check, code_fingerprint
from trainstack.trainers.common.storage import storage_options
from trainstack.trainers.common.user_code import (
    DEFAULT_LAUNCHER,
    StackTrainer,
    UserCode,
    node_args,
    resolve_source,
)
from trainstack.trainers.local import (
    PROGRESS_EVERY_S,
    LocalProcess,
    PreparedRun,
    free_ports,
    supervise_run,
)
from trainstack.trainers.local_report import LocalRunResult, print_line
from trainstack.trainers.local_start import (
    check_files,
    checkpoint_dir_problem,
    checkpoint_lock,
    make_folder,
    on_storage,
)
from trainstack.trainers.run_lock import RunLock, running_pid_file
from trainstack.trainers.user_code import LOCAL_RUN_PID_ENV, WORKER_HOSTS_ENV

SIMULATED: Final = "TRAINSTACK_SIMULATED_ACCELERATORS"
# Rendezvous variables must not leak in from an enclosing distributed launcher.
_RENDEZVOUS: Final = frozenset(
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"}
)


@dataclass(frozen=True)
class CodePlan:
    """The processes of a local run of your code, and its folders."""

    processes: list[LocalProcess]
    contract: dict[str, str]
    """The run contract's folder and name variables."""
    log_path: Path


def local_secrets(secret_env: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The values of `secret_env`'s names from `env`; ValueError naming the first missing
    one (never a value)."""
    missing = sorted(name for name in secret_env if name not in env)
    if missing:
        name = missing[0]
        raise ValueError(
            f"trainer.secret_env.{name}: local-run reads secrets from this environment (no "
            f"metadata server here to reach {secret_env[name]}); valid: export {name} before "
            "local-run"
        )
    return {name: env[name] for name in secret_env}


def plan_code_run(
    trainer: StackTrainer, code: UserCode, *, workers: int, root: Path, base_dir: Path
) -> CodePlan:
    """The node launchers that run `code` with `workers` processes under `root`."""
    if code.source is None:
        raise ValueError(
            "trainer.source: required by local-run (an image cannot run here); valid: a folder"
        )
    source = resolve_source(code.source, base_dir)
    run = trainer.run_name
    contract = {
        CHECKPOINT_DIR_ENV: trainer.checkpoint_dir or str(root / "checkpoints" / run),
        DATA_DIR_ENV: str(root / "data"),
        OUTPUT_DIR_ENV: str(root / "outputs" / run),
        RUN_NAME_ENV: run,
    }
    launcher = code.launcher_for(DEFAULT_LAUNCHER)
    argv = [sys.executable, "-m", NODE_MODULE]
    # No metadata server here to read Secret Manager with: `secret_env` names come from this
    # environment, and stay in the environment only, as on the cloud.
    secrets = local_secrets(code.secret_env, os.environ)
    local = replace(code, secret_env={})
    argv += node_args(local, DEFAULT_LAUNCHER, contract=contract, source=str(source))
    nodes = 1 if launcher == "torchrun" else workers
    ports = free_ports(1 + nodes)
    base = {
        **secrets,
        NUM_NODES_ENV: str(nodes),
        COORDINATOR_ENV: f"127.0.0.1:{ports[0]}",
        SIMULATED: str(workers if launcher == "torchrun" else 1),
        WORKER_HOSTS_ENV: ",".join(f"127.0.0.1:{port}" for port in ports[1:]),
    }
    processes = [LocalProcess(argv, {**base, NODE_RANK_ENV: str(i)}) for i in range(nodes)]
    logs = root / "logs"
    return CodePlan(processes, contract, logs / f"{run}.jsonl")


def checked_plan(
    trainer: StackTrainer, code: UserCode, *, workers: int, root: Path, base_dir: Path
) -> CodePlan:
    """`plan_code_run`, and ValueError for a checkpoint folder that holds the stack's folder
    or the source (`checkpoint_dir_problem`): nothing is written."""
    plan = plan_code_run(trainer, code, workers=workers, root=root, base_dir=base_dir)
    problem = checkpoint_dir_problem(
        plan.contract[CHECKPOINT_DIR_ENV], base_dir, resolve_source(code.source or ".", base_dir)
    )
    if problem is not None:
        raise ValueError(problem)
    return plan


def prepare_code_run(
    trainer: StackTrainer,
    *,
    workers: int,
    root: Path,
    base_dir: Path,
    extra_env: Mapping[str, str] | None = None,
) -> PreparedRun:
    """`trainstack.trainers.local.prepare_run` for your code: its processes, folders and environment
    (for `trainstack.components.local_training_job`, which starts them detached). The section is
    written to `root/logs/<run>.config.json`."""
    code = trainer.user_code
    if code is None:
        raise ValueError("trainer.entrypoint: required to run your own code")
    plan = checked_plan(trainer, code, workers=workers, root=root, base_dir=base_dir)
    make_folder(plan.log_path.parent, "local.root")
    config_path = plan.log_path.with_suffix(".config.json")
    check_files(plan.log_path, plan.log_path.with_suffix(".stderr.log"), config_path)
    config_path.write_text(trainer.model_dump_json(indent=2, exclude_none=True))
    env = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS}
    env.update({"PYTHONUNBUFFERED": "1", **(extra_env or {})})
    return PreparedRun(
        trainer.bundled(),
        plan.contract[CHECKPOINT_DIR_ENV],
        config_path,
        plan.log_path,
        env,
        plan.processes,
    )


RUN_MARKER: Final = "trainstack-run.json"
"""Your code's run folder's record of the settings that started it (`code_fingerprint`)."""


def clear_code_run(checkpoint_dir: str) -> Cleared:
    """What `--fresh` deletes of your code's run: its `step-<N>` checkpoint folders that hold
    a `COMPLETE` marker (whatever your code wrote in it) and `RUN_MARKER`. A `step-<N>`
    folder without a marker is not a checkpoint your code committed, and stays with anything
    else in the folder; `Cleared.left` names those folders."""
    fs, path = fsspec.core.url_to_fs(checkpoint_dir, **storage_options(checkpoint_dir))
    if not fs.exists(path):
        return Cleared([], [])
    removed, left = [], []
    for entry in fs.ls(path, detail=False):
        name = str(entry).rstrip("/").rsplit("/", 1)[-1]
        if MARKED_STEP_RE.fullmatch(name) and not fs.exists(f"{entry}/{MARKER}"):
            left.append(name)
        elif MARKED_STEP_RE.fullmatch(name) or name == RUN_MARKER:
            fs.rm(entry, recursive=True)
            removed.append(name)
    return Cleared(sorted(removed), sorted(left))


def _saved_record(fs: Any, marker: str) -> tuple[dict[str, Any] | None, str | None]:
    """The fingerprint `RUN_MARKER` at `marker` records, and why it cannot be read when it
    exists but holds none (None, None: there is no such file)."""
    if not fs.exists(marker):
        return None, None
    with fs.open(marker, "rb") as f:
        text = bytes(f.read())
    if not text.strip():
        return None, f"{RUN_MARKER} is empty (a write cut short, e.g. by a full disk)"
    try:
        record = json.loads(text)
    except ValueError:
        return None, f"{RUN_MARKER} is not JSON (a write cut short, or another program's file)"
    found = record.get(FINGERPRINT_FIELD) if isinstance(record, dict) else None
    if not isinstance(found, dict):
        return None, f"{RUN_MARKER} holds no {FINGERPRINT_FIELD} record"
    return found, None


def claim_folder(checkpoint_dir: str, entrypoint: list[str], env: Mapping[str, str] | None) -> None:
    """Check your code's checkpoint folder against `entrypoint` and `env` before the run
    starts, then record them there (`RUN_MARKER`, written whole). Raises `StateMismatch` when
    the folder holds a marked checkpoint written under another entrypoint or env, one with
    no record, or one whose record cannot be read (each said by its cause): trainstack cannot
    tell which of your arguments shape your state, so any change counts."""
    current = code_fingerprint(entrypoint, env)
    fs, path = fsspec.core.url_to_fs(checkpoint_dir, **storage_options(checkpoint_dir))
    marker = f"{path.rstrip('/')}/{RUN_MARKER}"
    saved, unreadable = _saved_record(fs, marker)
    newest = newest_marked(checkpoint_dir)
    if newest is not None or saved is not None:
        where = "your code's newest checkpoint" if newest is None else f"{newest[1]}"
        check(
            saved,
            current,
            what=f"{where} in {checkpoint_dir}",
            where=checkpoint_dir,
            unknown=None if unreadable is None else f"cannot be checked: {unreadable}",
        )
    fs.makedirs(path, exist_ok=True)
    write_whole(fs, marker, json.dumps({FINGERPRINT_FIELD: current}).encode())


def run_local_code(
    trainer: StackTrainer,
    *,
    workers: int,
    root: Path,
    base_dir: Path,
    console: Console | None = None,
    out: Console | None = None,
    fresh: bool = False,
    extra_env: Mapping[str, str] | None = None,
    progress_every_s: float = PROGRESS_EVERY_S,
) -> LocalRunResult:
    """Run your code (`trainer.entrypoint`) with `workers` processes; blocks until it ends.

    Shown as a bundled run is (`trainstack.trainers.local.supervise_run`): what your code prints that
    is not a JSON record goes to `console` (default stderr) as it comes, its rank-0
    `start`/`resume`/`train`/`preempted`/`done` records drive the progress line, and a
    stopped run ends with one line naming the step and the newest `step-<N>` checkpoint
    folder holding a `COMPLETE` marker. `fresh` first deletes the run's own checkpoints
    (`clear_code_run`), nothing else in the folder. Raises
    ValueError when the trainer section has no runnable code here (no entrypoint, no source),
    and `StateMismatch` (a ValueError) when the folder holds checkpoints of another
    entrypoint or env (`claim_folder`).
    """
    code = trainer.user_code
    if code is None:
        raise ValueError("trainer.entrypoint: required to run your own code")
    checked_plan(trainer, code, workers=workers, root=root.resolve(), base_dir=base_dir)
    console = console or Console(stderr=True)
    logs = root.resolve() / "logs"
    make_folder(logs, "local-run")
    with RunLock(running_pid_file(logs / f"{trainer.run_name}.jsonl"), trainer.run_name):
        prepared = prepare_code_run(
            trainer, workers=workers, root=root.resolve(), base_dir=base_dir, extra_env=extra_env
        )
        folder = prepared.checkpoint_dir
        with checkpoint_lock(folder, trainer.run_name) as took_over:
            if took_over is not None:
                print_line(console, took_over)
            if fresh:
                cleared = on_storage(
                    folder, "delete its checkpoints (--fresh)", lambda: clear_code_run(folder)
                )
                if (left := cleared.left_line(folder)) is not None:
                    print_line(console, left)
            on_storage(
                folder, "write to it", lambda: CheckpointStore(folder, keep=1).check_writable()
            )
            on_storage(
                folder,
                "read its checkpoints",
                lambda: claim_folder(folder, list(code.entrypoint), code.env),
            )
            prepared.env[LOCAL_RUN_PID_ENV] = str(os.getpid())
            return supervise_run(
                prepared,
                prepared.new_result(),
                workers=workers,
                run_name=trainer.run_name,
                total_steps=None,
                grace_s=trainer.preemption_grace_s,
                saved=lambda: newest_marked(folder),
                done_required=False,
                console=console,
                out=out or Console(),
                progress_every_s=progress_every_s,
            )

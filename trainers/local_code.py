"""`trainstack local-run` for your own code: the cloud's node launch, on this machine.

Each "machine" is a node launcher process (`python -m trainers.node <node_args>`), started
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
`root/outputs/<run_name>`; every line the code prints is kept in `root/logs/<run>.jsonl`,
stderr in `root/logs/<run>.stderr.log`. Requirements are not installed here: the code runs
in this environment. SIGTERM or Ctrl-C is forwarded once as SIGTERM (the code saves and exits
143; 130 after Ctrl-C), a second one or the grace period running out kills every process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from trainers.common.contract import (
    CHECKPOINT_DIR_ENV,
    COLLECTIVE_TIMEOUT_ENV,
    COORDINATOR_ENV,
    DATA_DIR_ENV,
    EXIT_WITH_PARENT_ENV,
    NODE_MODULE,
    NODE_RANK_ENV,
    NUM_NODES_ENV,
    OUTPUT_DIR_ENV,
    RUN_NAME_ENV,
)
from trainers.common.exit_codes import PREEMPTED_EXIT_CODE
from trainers.common.user_code import StackTrainer, UserCode, node_args, resolve_source
from trainers.local import (
    INTERRUPTED_EXIT_CODE,
    LOCAL_COLLECTIVE_TIMEOUT_S,
    STOP_MARGIN_S,
    LocalProcess,
    PreparedRun,
    RunStopper,
    free_ports,
    start_worker,
)
from trainers.user_code import LOCAL_RUN_PID_ENV, WORKER_HOSTS_ENV

SIMULATED: Final = "TRAINSTACK_SIMULATED_ACCELERATORS"
# Rendezvous variables must not leak in from an enclosing distributed launcher.
_RENDEZVOUS: Final = frozenset(
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"}
)
TAIL_LINES: Final = 20


@dataclass(frozen=True)
class CodePlan:
    """The processes of a local run of your code, and its folders."""

    processes: list[LocalProcess]
    contract: dict[str, str]
    """The run contract's folder and name variables."""
    log_path: Path
    stderr_path: Path


@dataclass
class CodeResult:
    """How a local run of your code ended."""

    exit_code: int
    done: dict[str, Any] | None
    """The `{"event": "done", ...}` line rank 0 printed, if any."""
    checkpoint_dir: str
    log_path: Path
    stderr_path: Path


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
    launcher = code.launcher_for("local")
    argv = [sys.executable, "-m", NODE_MODULE]
    argv += node_args(code, "local", contract=contract, source=str(source))
    nodes = 1 if launcher == "torchrun" else workers
    ports = free_ports(1 + nodes)
    base = {
        NUM_NODES_ENV: str(nodes),
        COORDINATOR_ENV: f"127.0.0.1:{ports[0]}",
        SIMULATED: str(workers if launcher == "torchrun" else 1),
        WORKER_HOSTS_ENV: ",".join(f"127.0.0.1:{port}" for port in ports[1:]),
    }
    processes = [LocalProcess(argv, {**base, NODE_RANK_ENV: str(i)}) for i in range(nodes)]
    logs = root / "logs"
    return CodePlan(processes, contract, logs / f"{run}.jsonl", logs / f"{run}.stderr.log")


def prepare_code_run(
    trainer: StackTrainer,
    *,
    workers: int,
    root: Path,
    base_dir: Path,
    extra_env: Mapping[str, str] | None = None,
) -> PreparedRun:
    """`trainers.local.prepare_run` for your code: its processes, folders and environment
    (for `components.local_training_job`, which starts them detached). The section is
    written to `root/logs/<run>.config.json`."""
    code = trainer.user_code
    if code is None:
        raise ValueError("trainer.entrypoint: required to run your own code")
    plan = plan_code_run(trainer, code, workers=workers, root=root, base_dir=base_dir)
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    config_path = plan.log_path.with_suffix(".config.json")
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


def _pump(
    stream: IO[str], log: IO[str], out: IO[str], done: list[dict[str, Any]], lock: threading.Lock
) -> None:
    for line in stream:
        with lock:
            out.write(line)
            out.flush()
            # Every line is kept, not only the JSON records: `trainstack logs` shows the others
            # as they are, and your code's prints are often what a failure needs.
            log.write(line if line.endswith("\n") else line + "\n")
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(record, dict)
                and record.get("event") == "done"
                and record.get("rank") == 0
            ):
                done.append(record)


def run_local_code(
    trainer: StackTrainer,
    *,
    workers: int,
    root: Path,
    base_dir: Path,
    out: IO[str] | None = None,
    fresh: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> CodeResult:
    """Run your code (`trainer.entrypoint`) with `workers` processes; blocks until it ends.

    The processes' output goes to `out` (default stderr). Raises ValueError when the
    trainer section has no runnable code here (no entrypoint, no source).
    """
    user_code = trainer.user_code
    if user_code is None:
        raise ValueError("trainer.entrypoint: required to run your own code")
    root = root.resolve()
    plan = plan_code_run(trainer, user_code, workers=workers, root=root, base_dir=base_dir)
    checkpoint_dir = plan.contract[CHECKPOINT_DIR_ENV]
    if fresh:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS}
    env.update({"PYTHONUNBUFFERED": "1", EXIT_WITH_PARENT_ENV: "1", **(extra_env or {})})
    env[LOCAL_RUN_PID_ENV] = str(os.getpid())
    env.setdefault(COLLECTIVE_TIMEOUT_ENV, str(LOCAL_COLLECTIVE_TIMEOUT_S))
    sink = out or sys.stderr
    stopper = RunStopper(trainer.preemption_grace_s + STOP_MARGIN_S)
    in_main = threading.current_thread() is threading.main_thread()
    previous = (
        {s: signal.signal(s, stopper.handle) for s in (signal.SIGINT, signal.SIGTERM)}
        if in_main
        else {}
    )
    done: list[dict[str, Any]] = []
    lock = threading.Lock()
    stderr_offset = plan.stderr_path.stat().st_size if plan.stderr_path.exists() else 0
    try:
        with plan.log_path.open("a", buffering=1) as log, plan.stderr_path.open("ab") as err:
            procs = []
            for p in plan.processes:
                proc = start_worker(p.argv, {**env, **p.env}, err)
                procs.append(proc)
                stopper.add(proc, True)
            pumps = [
                threading.Thread(target=_pump, args=(proc.stdout, log, sink, done, lock))
                for proc in procs
            ]
            for pump in pumps:
                pump.start()
            while any(proc.poll() is None for proc in procs):
                stopper.check_deadline()
                time.sleep(0.1)
            for pump in pumps:
                pump.join()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    codes = [int(proc.returncode) for proc in procs]
    if stopper.signum is not None:
        code = INTERRUPTED_EXIT_CODE if stopper.signum == signal.SIGINT else PREEMPTED_EXIT_CODE
        code = 0 if done and not any(codes) else code
    elif PREEMPTED_EXIT_CODE in codes:
        code = PREEMPTED_EXIT_CODE
    else:
        code = next((c for c in codes if c != 0), 0)
    if code not in (0, PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE):
        with plan.stderr_path.open("rb") as f:
            f.seek(stderr_offset)
            tail = f.read().decode(errors="replace").splitlines()[-TAIL_LINES:]
        sink.write(f"local-run: exit {code}; last stderr lines ({plan.stderr_path}):\n")
        sink.write("".join(f"  {line}\n" for line in tail))
    return CodeResult(
        code, done[-1] if done else None, checkpoint_dir, plan.log_path, plan.stderr_path
    )

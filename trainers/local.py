"""Run a stack's trainer on this machine: `workers` CPU processes.

torch: one torchrun (gloo) with `workers` local processes. TensorFlow: one process per task,
each with its own `TF_CONFIG` naming every task on a free localhost port:

- multi_worker_mirrored: `workers` worker tasks (worker 0 is the chief);
- parameter_server: a chief (the coordinator), one ps and `workers` worker tasks;
- mirrored: one process with `workers` replicas on as many logical CPU devices
  (MirroredStrategy is single-machine: its replicas are devices, not processes);
- tpu: refused (it needs a Cloud TPU VM).

`trainstack local-run` calls `run_local`; `components.local_training_job` starts the same
processes detached from `prepare_run`'s plan. The run contract is the cloud one: the same
trainer module, config and JSON log lines; checkpoints go to `cfg.checkpoint_dir` when set,
else `root/checkpoints/<run_name>`, so starting the same run again resumes it. Every JSON line
the workers print is kept in `root/logs/<run_name>.jsonl`.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainers.common.config import TrainConfig
from trainers.common.contract import (
    EVENT_DONE,
    EVENT_PREEMPTED,
    EVENT_RESUME,
    EVENT_START,
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_LOSS,
    FIELD_PARAMS_SHA256,
    FIELD_RANK,
    FIELD_SAMPLES_PER_S,
    FIELD_STEP,
    TF_CPU_REPLICAS_ENV,
    TF_MODULE,
    TORCH_MODULE,
)
from trainers.common.exit_codes import PREEMPTED_EXIT_CODE


@dataclass
class LocalRunResult:
    exit_code: int
    """0 done; 143 preempted (checkpoint saved); 2 invalid config; other: crash."""
    done: dict[str, Any] | None
    """Rank 0's `done` record, None when the run did not finish."""
    checkpoint_dir: str
    log_path: Path
    wall_s: float
    last_train: dict[str, Any] | None = None
    """The last `train` record from rank 0."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Every JSON record the workers printed, in order."""


def torchrun_command(workers: int, *target: str) -> list[str]:
    """`torchrun --standalone` with `workers` local processes running `target`."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(workers),
        *target,
    ]


@dataclass(frozen=True)
class LocalProcess:
    """One OS process of a local run."""

    argv: list[str]
    env: dict[str, str]
    """Variables set on top of `PreparedRun.env` for this process only."""


@dataclass(frozen=True)
class PreparedRun:
    """Everything needed to start a local run, with its files written: the resolved
    config, where checkpoints and logs go, and the processes to start."""

    config: TrainConfig
    """`cfg` with `checkpoint_dir` resolved."""
    checkpoint_dir: str
    config_path: Path
    log_path: Path
    env: dict[str, str]
    """The environment every process starts from."""
    processes: list[LocalProcess]


def free_ports(count: int) -> list[int]:
    """`count` distinct localhost ports that were free a moment ago (all held open together
    while choosing, so the kernel cannot hand out one twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_cluster_tasks(strategy: str, workers: int) -> list[tuple[str, int]]:
    """The (task type, index) pairs of a local TensorFlow cluster, chief first."""
    if strategy == "parameter_server":
        return [("chief", 0), ("ps", 0), *(("worker", i) for i in range(workers))]
    return [("worker", i) for i in range(workers)]


def _tf_processes(cfg: TrainConfig, workers: int, config_path: Path) -> list[LocalProcess]:
    argv = [sys.executable, "-m", TF_MODULE, "--config", str(config_path)]
    if cfg.strategy == "tpu":
        raise ValueError(
            "trainer.strategy 'tpu' needs a Cloud TPU VM and cannot run locally; local runs "
            "support mirrored, multi_worker_mirrored and parameter_server"
        )
    if cfg.strategy == "mirrored":
        return [LocalProcess(argv, {TF_CPU_REPLICAS_ENV: str(workers)})]
    tasks = tf_cluster_tasks(cfg.strategy, workers)
    addresses = [f"127.0.0.1:{port}" for port in free_ports(len(tasks))]
    cluster: dict[str, list[str]] = {}
    for (kind, _), address in zip(tasks, addresses, strict=True):
        cluster.setdefault(kind, []).append(address)
    return [
        LocalProcess(
            argv,
            {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": i}})},
        )
        for kind, i in tasks
    ]


def local_processes(cfg: TrainConfig, workers: int, config_path: Path) -> list[LocalProcess]:
    """The processes that run `cfg` with `workers` local workers.

    Raises ValueError for a strategy that cannot run on this machine (tpu).
    """
    if cfg.framework == "tensorflow":
        return _tf_processes(cfg, workers, config_path)
    argv = torchrun_command(workers, "-m", TORCH_MODULE, "--config", str(config_path))
    return [LocalProcess(argv, {})]


def prepare_run(
    cfg: TrainConfig,
    *,
    workers: int,
    root: Path,
    extra_env: Mapping[str, str] | None = None,
) -> PreparedRun:
    """Resolve the checkpoint dir, write the run's config file and plan its processes.

    Raises ValueError for a strategy that cannot run locally (tpu) or a non-positive worker
    count.
    """
    if workers < 1:
        raise ValueError(f"local.workers must be >= 1, got {workers}")
    root = Path(root)
    checkpoint_dir = cfg.checkpoint_dir or str((root / "checkpoints" / cfg.run_name).resolve())
    run_cfg = cfg.model_copy(update={"checkpoint_dir": checkpoint_dir})
    (root / "logs").mkdir(parents=True, exist_ok=True)
    config_path = (root / "logs" / f"{cfg.run_name}.config.json").resolve()
    processes = local_processes(run_cfg, workers, config_path)
    config_path.write_text(run_cfg.model_dump_json(indent=2))

    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "TRAINSTACK_PROGRESS": "0"})
    # Set explicitly (the trainer sets its own torch threads) so torchrun does not print its
    # OMP_NUM_THREADS banner on every run.
    env.setdefault("OMP_NUM_THREADS", str(cfg.torch_threads or 1))
    # Rendezvous variables must not leak in from an enclosing distributed launcher.
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"):
        env.pop(name, None)
    env.update(extra_env or {})
    log_path = (root / "logs" / f"{cfg.run_name}.jsonl").resolve()
    return PreparedRun(run_cfg, checkpoint_dir, config_path, log_path, env, processes)


def _summary(result: LocalRunResult, cfg: TrainConfig, workers: int) -> Table:
    table = Table(title=f"trainstack local-run: {cfg.run_name}")
    table.add_column("metric")
    table.add_column("value")
    done = result.done or {}
    last = result.last_train or {}
    rows: list[tuple[str, Any]] = [
        ("exit code", result.exit_code),
        ("workers", workers),
        ("steps", done.get(FIELD_STEP, last.get(FIELD_STEP))),
        ("final loss", done.get(FIELD_LOSS, last.get(FIELD_LOSS))),
        ("test accuracy", done.get("test_accuracy")),
        ("wall time (s)", round(result.wall_s, 2)),
        ("samples/s", done.get(FIELD_SAMPLES_PER_S, last.get(FIELD_SAMPLES_PER_S))),
        ("checkpoint dir", result.checkpoint_dir),
        ("params_sha256", done.get(FIELD_PARAMS_SHA256)),
    ]
    for name, value in rows:
        if isinstance(value, float):
            value = f"{value:.4g}"
        table.add_row(name, "-" if value is None else str(value))
    return table


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def run_local(
    cfg: TrainConfig,
    *,
    workers: int,
    root: Path,
    extra_env: Mapping[str, str] | None = None,
    console: Console | None = None,
) -> LocalRunResult:
    """Train `cfg` with `workers` local processes; blocks until they exit.

    Raises ValueError for a strategy that cannot run locally (tpu) or a non-positive worker
    count.
    """
    prepared = prepare_run(cfg, workers=workers, root=root, extra_env=extra_env)
    console = console or Console(stderr=True)
    result = LocalRunResult(-1, None, prepared.checkpoint_dir, prepared.log_path, 0.0)
    preempted = False
    started = time.perf_counter()
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    with prepared.log_path.open("a") as log, progress:
        task = progress.add_task(cfg.run_name, total=cfg.steps, stats="")
        procs = [
            subprocess.Popen(
                p.argv,
                stdout=subprocess.PIPE,
                env={**prepared.env, **p.env},
                text=True,
                bufsize=1,
            )
            for p in prepared.processes
        ]
        for proc in procs:
            threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        open_pipes = len(procs)
        while open_pipes:
            line = lines.get()
            if line is None:
                open_pipes -= 1
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                progress.console.print(line.rstrip("\n"), markup=False, highlight=False)
                continue
            if not isinstance(record, dict):
                continue
            log.write(line if line.endswith("\n") else line + "\n")
            result.events.append(record)
            if record.get(FIELD_RANK) != 0:
                continue
            event = record.get(FIELD_EVENT)
            if event == EVENT_TRAIN:
                result.last_train = record
                progress.update(
                    task,
                    completed=record.get(FIELD_STEP, 0),
                    stats=f"loss {record.get(FIELD_LOSS, float('nan')):.4f}  "
                    f"{record.get(FIELD_SAMPLES_PER_S, 0):.0f} samples/s",
                )
            elif event in (EVENT_RESUME, EVENT_START):
                progress.update(task, completed=record.get(FIELD_STEP, 0))
            elif event == EVENT_PREEMPTED:
                preempted = True
            elif event == EVENT_DONE:
                result.done = record
                progress.update(task, completed=record.get(FIELD_STEP, cfg.steps))
        codes = [proc.wait() for proc in procs]
    result.wall_s = time.perf_counter() - started
    code = next((c for c in codes if c != 0), 0)
    # torchrun reports any failed worker as 1; the trainer's own preemption code is the
    # useful answer for whoever restarts the run.
    result.exit_code = PREEMPTED_EXIT_CODE if preempted and result.done is None else code
    console.print(_summary(result, prepared.config, workers))
    return result

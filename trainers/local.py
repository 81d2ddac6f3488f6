"""Run a stack's trainer on this machine: `workers` CPU processes.

torch: one torchrun (gloo) with `workers` local processes. TensorFlow: one process per task,
each with its own `TF_CONFIG` naming every task on a free localhost port:

- multi_worker_mirrored: `workers` worker tasks (worker 0 is the chief);
- parameter_server: a chief (the coordinator), one ps and `workers` worker tasks;
- mirrored: one process with `workers` replicas on as many logical CPU devices
  (MirroredStrategy is single-machine: its replicas are devices, not processes);
- tpu: refused (it needs a Cloud TPU VM).

`trainstack local-run` calls `run_local`; `trainstack.components.local_training_job` starts the same
processes detached from `prepare_run`'s plan. The run contract is the cloud one: the same
trainer module, config and JSON log lines; checkpoints go to `cfg.checkpoint_dir` when set,
else `root/checkpoints/<run_name>`, so starting the same run again resumes it. Every JSON line
the workers print is kept in `root/logs/<run_name>.jsonl`, their stderr (and torchrun's) in
`root/logs/<run_name>.stderr.log`.

`run_local` runs in the foreground and behaves like a preemptible job. SIGTERM or SIGINT
(Ctrl-C) to the launcher, or to its process group, is forwarded once as SIGTERM to the
processes that checkpoint (torchrun, which forwards it to its workers; a TensorFlow chief or
every worker): every rank saves and the run exits 143 (130 after SIGINT). A second signal, or
the grace period running out, kills them without saving. The processes run in sessions of
their own (a terminal's Ctrl-C reaches only the launcher), die with it
(`trainstack.trainers.common.signals.kill_with_parent`, `watch_parent`), and torch collectives time out
after `LOCAL_COLLECTIVE_TIMEOUT_S`, so a killed launcher or a lost peer never leaves workers
waiting. A run whose newest checkpoint has reached `steps` is not started again; `fresh`
deletes its checkpoints first.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from rich.console import Console

from trainstack.trainers.common.checkpoint import CheckpointStore, step_name
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import (
    COLLECTIVE_TIMEOUT_ENV,
    EVENT_DONE,
    EVENT_EXIT,
    EVENT_FAILED,
    EVENT_PREEMPTED,
    EVENT_RESUME,
    EVENT_START,
    EVENT_TRAIN,
    EXIT_WITH_PARENT_ENV,
    FIELD_EVENT,
    FIELD_LOSS,
    FIELD_RANK,
    FIELD_SAMPLES_PER_S,
    FIELD_STEP,
    TF_CPU_REPLICAS_ENV,
    TF_MODULE,
    TORCH_MODULE,
)
from trainstack.trainers.common.exit_codes import (
    CONFIG_ERROR_EXIT_CODE,
    INTERRUPTED_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
)
from trainstack.trainers.common.fingerprint import trainer_fingerprint
from trainstack.trainers.common.signals import kill_with_parent
from trainstack.trainers.local_records import previous_done, stamped
from trainstack.trainers.local_report import (
    LiveProgress,
    LocalRunResult,
    PlainProgress,
    headline,
    print_failure,
    print_line,
    print_summary,
)
from trainstack.trainers.local_start import (
    check_files,
    checked_resume,
    checkpoint_dir_problem,
    checkpoint_lock,
    clear_bundled,
    make_folder,
    on_storage,
)
from trainstack.trainers.local_stopper import RunStopper, install, restore
from trainstack.trainers.run_lock import RunLock, running_pid_file

__all__ = [
    "LocalRunResult",
    "RunStopper",
    "check_world",
    "local_processes",
    "prepare_run",
    "run_local",
    "supervise_run",
    "torchrun_command",
]

LOCAL_COLLECTIVE_TIMEOUT_S: Final = 300
"""A torch collective waiting this long for a peer fails the local run (torch's own default
is 30 minutes); `COLLECTIVE_TIMEOUT_ENV` in the environment overrides it."""
STOP_MARGIN_S: Final = 15.0
"""After forwarding a signal, the launcher waits `preemption_grace_s` plus this for the
processes to save and exit before it kills them."""
PROGRESS_EVERY_S: Final = 5.0
"""Seconds between plain progress lines when the output is not a terminal."""


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
    stops_run: bool = True
    """SIGTERM to this process makes the run checkpoint and stop. False for parameter-server
    ps and worker tasks, which hold the variables the chief saves and end once it has."""


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

    @property
    def stderr_path(self) -> Path:
        """The processes' stderr (torchrun's too), beside the log, appended run after run."""
        return self.log_path.with_suffix(".stderr.log")

    def new_result(self) -> LocalRunResult:
        """The result of a run of these processes before it starts."""
        return LocalRunResult(
            -1, None, self.checkpoint_dir, self.log_path, 0.0, stderr_path=self.stderr_path
        )


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
            stops_run=cfg.strategy != "parameter_server" or kind == "chief",
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


def check_world(cfg: TrainConfig, workers: int) -> None:
    """Raise ValueError unless the global batch splits over `workers` local replicas (torch
    ranks; TensorFlow workers or mirrored CPU replicas) and `grad_accum_steps`, as the
    trainer itself would once started: said before anything starts or is deleted."""
    if cfg.framework == "tensorflow" and cfg.strategy == "parameter_server":
        return  # the coordinator batches per worker; the trainer checks that itself
    if cfg.global_batch_size % (workers * cfg.grad_accum_steps):
        raise ValueError(
            f"trainer.global_batch_size ({cfg.global_batch_size}) must be divisible by the "
            f"{workers} local workers x trainer.grad_accum_steps ({cfg.grad_accum_steps}); "
            "valid: a worker count (--workers, local.workers) that divides "
            f"{cfg.global_batch_size // cfg.grad_accum_steps}"
        )


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
    check_world(cfg, workers)
    root = Path(root)
    checkpoint_dir = cfg.checkpoint_dir or str((root / "checkpoints" / cfg.run_name).resolve())
    run_cfg = cfg.model_copy(update={"checkpoint_dir": checkpoint_dir})
    make_folder(root / "logs", "local.root")
    config_path = (root / "logs" / f"{cfg.run_name}.config.json").resolve()
    log_path = (root / "logs" / f"{cfg.run_name}.jsonl").resolve()
    check_files(log_path, log_path.with_suffix(".stderr.log"), config_path)
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
    return PreparedRun(run_cfg, checkpoint_dir, config_path, log_path, env, processes)


def _pump(
    proc: subprocess.Popen[str], index: int, lines: queue.Queue[tuple[int, str | None]]
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put((index, line))
    lines.put((index, None))


def _track(
    result: LocalRunResult, record: dict[str, Any], view: LiveProgress | PlainProgress
) -> None:
    """Fold one of rank 0's records into `result` and the progress display."""
    event = record.get(FIELD_EVENT)
    step = record.get(FIELD_STEP)
    if event == EVENT_DONE:
        result.done = record  # your own code's `done` line need not name a step
    if event == EVENT_FAILED and isinstance(record.get("error"), str):
        result.error = record["error"]  # the bundled trainer's one line: storage refused
    if not isinstance(step, int):
        return
    result.step = step
    if event == EVENT_TRAIN:
        result.last_train = record
        view.step(step, record.get(FIELD_LOSS), record.get(FIELD_SAMPLES_PER_S))
    elif event == EVENT_RESUME:
        result.resumed_from = step
        view.note(f"resumed from step {step}")
        view.step(step, None, None)
    elif event == EVENT_START:
        if step > 0 and result.resumed_from is None:
            # Your own code may say only `start` at the step it resumed from.
            result.resumed_from = step
            view.note(f"resumed from step {step}")
        view.step(step, None, None)
    elif event == EVENT_PREEMPTED:
        result.stopped_at = step
    elif event == EVENT_DONE:
        view.step(step, record.get(FIELD_LOSS), record.get(FIELD_SAMPLES_PER_S))


def start_worker(argv: list[str], env: Mapping[str, str], err: IO[bytes]) -> subprocess.Popen[str]:
    """One local worker: its own session (a signal reaches it through the run's stopper
    only), line-buffered text stdout for the pumps, stderr to `err`, and it dies with this
    process (parent-death signal). Start workers before any thread: the preexec_fn runs
    between fork and exec."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
        env=dict(env),
        text=True,
        bufsize=1,
        start_new_session=True,
        preexec_fn=kill_with_parent(),  # noqa: PLW1509
    )


def _supervise(
    prepared: PreparedRun,
    result: LocalRunResult,
    stopper: RunStopper,
    view: LiveProgress | PlainProgress,
    workers: int,
) -> list[int]:
    """Start the processes, follow their output until they exit; returns their exit codes."""
    assert result.stderr_path is not None
    env = {**prepared.env, EXIT_WITH_PARENT_ENV: "1"}
    env.setdefault(COLLECTIVE_TIMEOUT_ENV, str(LOCAL_COLLECTIVE_TIMEOUT_S))
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    # Line-buffered: `tail -f` on the log follows the run as it trains.
    with prepared.log_path.open("a", buffering=1) as log, result.stderr_path.open("ab") as err:
        procs = []
        # Started before this function starts any thread (progress display, pumps): the
        # preexec_fn runs between fork and exec, and only calls prctl (resolved earlier).
        for p in prepared.processes:
            proc = start_worker(p.argv, {**env, **p.env}, err)
            procs.append(proc)
            stopper.add(proc, p.stops_run)
        if isinstance(view, PlainProgress):
            view.note(f"starting {workers} workers; log {prepared.log_path}")
        with view:
            for index, proc in enumerate(procs):
                threading.Thread(target=_pump, args=(proc, index, lines), daemon=True).start()
            open_pipes = len(procs)
            while open_pipes:
                if stopper.signum is not None and not view.quiet:
                    view.stopping()
                stopper.check_deadline()
                try:
                    index, line = lines.get(timeout=0.5)
                except queue.Empty:
                    view.tick()
                    continue
                if line is None:
                    open_pipes -= 1
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    view.note(line.rstrip("\n"))
                    continue
                if not isinstance(record, dict):
                    continue
                # The log holds JSON records only (the run contract); other lines are shown.
                log.write(stamped(record, line, index))
                result.events.append(record)
                if record.get(FIELD_RANK) == 0:
                    _track(result, record, view)
            while any(proc.poll() is None for proc in procs):
                stopper.check_deadline()
                time.sleep(0.1)
    return [int(proc.returncode) for proc in procs]


def run_local(
    cfg: TrainConfig,
    *,
    workers: int,
    root: Path,
    extra_env: Mapping[str, str] | None = None,
    console: Console | None = None,
    out: Console | None = None,
    fresh: bool = False,
    progress_every_s: float = PROGRESS_EVERY_S,
    base_dir: Path | None = None,
) -> LocalRunResult:
    """Train `cfg` with `workers` local processes; blocks until they exit.

    `console` (default stderr) gets the progress and the line of an interrupted or failed
    run, `out` (default stdout) the summary of a finished one. `fresh` deletes the run's
    checkpoints first; without it a run whose newest checkpoint has reached `cfg.steps` is
    reported as already complete and nothing is started.

    Everything is checked before `fresh` deletes anything or a process starts: raises
    ValueError for a strategy that cannot run locally (tpu), a worker count the global batch
    does not split over, a checkpoint folder that holds the stack's folder (`base_dir`,
    default the cwd) or a system folder (`checkpoint_dir_problem`), another local-run of the
    same run or in the same local checkpoint folder (`trainstack.trainers.run_lock`),
    a folder that cannot be created or a checkpoint folder that cannot be written or read
    (`trainstack.trainers.local_start.StartError`), and (without `fresh`) a newest checkpoint
    written under other settings (`trainstack.trainers.common.fingerprint.StateMismatch`).
    `fresh` deletes only the folders trainstack wrote and says which `step-N` folders it
    left; marked folders newer than the newest complete checkpoint are said, one line each,
    and passed over.
    """
    problem = checkpoint_dir_problem(cfg.checkpoint_dir, base_dir or Path.cwd())
    if problem is not None:
        raise ValueError(problem)
    console = console or Console(stderr=True)
    out = out or Console()
    logs = Path(root) / "logs"
    make_folder(logs, "local-run")
    with RunLock(running_pid_file((logs / f"{cfg.run_name}.jsonl").resolve()), cfg.run_name):
        prepared = prepare_run(cfg, workers=workers, root=root, extra_env=extra_env)
        with checkpoint_lock(prepared.checkpoint_dir, cfg.run_name) as took_over:
            if took_over is not None:
                print_line(console, took_over)
            return _start(
                prepared,
                cfg,
                console,
                out,
                fresh=fresh,
                workers=workers,
                progress_every_s=progress_every_s,
            )


def _start(
    prepared: PreparedRun,
    cfg: TrainConfig,
    console: Console,
    out: Console,
    *,
    fresh: bool,
    workers: int,
    progress_every_s: float,
) -> LocalRunResult:
    """`run_local` once its run and checkpoint folder are locked."""
    result = prepared.new_result()
    store = on_storage(
        prepared.checkpoint_dir,
        "open it",
        lambda: CheckpointStore(
            prepared.checkpoint_dir,
            keep=cfg.keep_checkpoints,
            fingerprint=trainer_fingerprint(cfg),
        ),
    )
    left = clear_bundled(store) if fresh else None
    if left is not None:
        print_line(console, left)
    latest, skipped = checked_resume(store)
    for line in skipped:
        print_line(console, line)
    if latest is not None and latest >= cfg.steps:
        result.exit_code, result.already_complete = 0, True
        result.saved_step = result.step = latest
        result.checkpoint_path = store.url_of(store.path(step_name(latest)))
        result.done = previous_done(prepared.log_path, latest, prepared.checkpoint_dir)
        print_line(out, headline(result))
        return result
    return supervise_run(
        prepared,
        result,
        workers=workers,
        run_name=cfg.run_name,
        total_steps=cfg.steps,
        grace_s=cfg.preemption_grace_s,
        saved=lambda: None if (n := store.latest()) is None else (n, step_name(n)),
        done_required=True,
        console=console,
        out=out,
        progress_every_s=progress_every_s,
    )


def _log_exit(log_path: Path, code: int) -> None:
    with log_path.open("a") as log:
        log.write(json.dumps({FIELD_EVENT: EVENT_EXIT, "exit_code": code}) + "\n")


def supervise_run(
    prepared: PreparedRun,
    result: LocalRunResult,
    *,
    workers: int,
    run_name: str,
    total_steps: int | None,
    grace_s: float,
    saved: Callable[[], tuple[int, str] | None],
    done_required: bool,
    console: Console,
    out: Console,
    progress_every_s: float,
) -> LocalRunResult:
    """Run `prepared` in the foreground, show its progress and say how it ended: the part of
    `run_local` that the bundled trainers and your own code (`trainstack.trainers.local_code`) share.
    `total_steps` is None when the code does not say how far it goes; `saved` gives
    the newest complete checkpoint (step, folder name) once the processes are gone;
    `done_required`: a run that ends without rank 0's `done` line failed (the bundled
    trainers), or is judged by its exit codes alone (your own code)."""
    stderr_path = result.stderr_path
    assert stderr_path is not None
    result.stderr_offset = stderr_path.stat().st_size if stderr_path.exists() else 0
    view: LiveProgress | PlainProgress = (
        LiveProgress(console, total_steps, run_name)
        if console.is_terminal
        else PlainProgress(console, total_steps, progress_every_s)
    )
    stopper = RunStopper(grace_s + STOP_MARGIN_S)
    started = time.perf_counter()
    previous = install(stopper.handle)
    try:
        codes = _supervise(prepared, result, stopper, view, workers)
    finally:
        restore(previous)
    result.wall_s = time.perf_counter() - started
    newest = saved()
    result.saved_step, result.saved_name = (None, None) if newest is None else newest
    if stopper.signum is not None:
        result.interrupted = signal.Signals(stopper.signum).name
    code = next((c for c in codes if c != 0), 0)
    # torchrun stops the other ranks with SIGTERM when one fails, and they may save and say
    # `preempted`: without a signal to this launcher, any other exit code is a failure.
    failed = next((c for c in codes if c not in (0, PREEMPTED_EXIT_CODE)), None)
    stopped = False
    if result.done is not None:
        # A signal that came as the run finished changes nothing: it is complete and saved.
        result.exit_code = 0 if result.interrupted else code
    elif result.error is not None:
        # Every rank stopped on the one cause rank 0 named (a checkpoint the storage refused).
        result.exit_code = CONFIG_ERROR_EXIT_CODE
    elif result.interrupted or (
        failed is None and (result.stopped_at is not None or PREEMPTED_EXIT_CODE in codes)
    ):
        # torchrun reports any failed worker as 1; the trainer's own preemption code is the
        # useful answer for whoever restarts the run.
        stopped = True
        interrupted_by_ctrl_c = stopper.signum == signal.SIGINT
        result.exit_code = INTERRUPTED_EXIT_CODE if interrupted_by_ctrl_c else PREEMPTED_EXIT_CODE
    elif failed is not None:
        result.exit_code = failed
    else:
        # Every process exited 0: your own code need not print a `done` line; the bundled
        # trainers always do, so without one something ended them early.
        result.exit_code = 0 if not done_required else 1
    _log_exit(prepared.log_path, result.exit_code)
    if result.done is None and result.error is not None:
        print_line(console, f"error: {result.error}")
    elif stopped:
        print_line(console, headline(result))
    elif result.exit_code == 0:
        print_summary(result, workers, run_name, out)
    else:
        print_summary(result, workers, run_name, console)
        print_failure(result, console)
    return result

"""Pulumi dynamic provider that runs the bundled trainer as detached processes on this machine.

The `local` compute target: `pulumi up -s local` starts the trainer, `pulumi destroy -s local`
stops it, and the checkpoints and logs under the local "bucket" directory stay.

    from trainstack.components._local_provider import LocalRun, LocalRunProvider

    run = LocalRun("exp-local-run", trainer=cfg.model_dump(mode="json", exclude_none=True),
                   workers=2, root=".trainstack/local", env={}, stop_grace_s=45.0,
                   labels={}, provider=LocalRunProvider(base_dir="/path/to/project"))
    # outputs: run.pids, run.start_times, run.log_path, run.checkpoint_dir, run.state

Behaviour:
- check: the trainer config is validated by `TrainConfig`; workers, root, env and the stop
  grace period are checked; every error is a CheckFailure naming the property.
- create: first the run's locks, as `trainstack local-run` takes them
  (`trainstack.trainers.run_lock`): the run's (`<root>/logs/<run>.pid`) and the local
  checkpoint folder's; a live local-run (or another `pulumi up`'s processes) holding either
  is refused with its one line (`RunLocked`) before any process starts. The
  started processes inherit both locks' descriptors and the provider hands the locks over
  to them (`RunLock.hand_over`), so they hold them until the last one exits, and a
  `local-run` of the run meanwhile is refused in turn.
  Then `trainstack.trainers.local.prepare_run` writes the run's config and plans its processes (one
  torchrun launcher for torch); each starts in a session of its own, with stdin from
  /dev/null and stdout/stderr appended to files, through a short-lived launcher process, so
  the processes are orphaned at once: they survive the engine and this provider exiting or
  being killed, and no caller is left holding an unwaited child. Create then waits until
  rank 0 logs `start` (or `startup_timeout_s` passes) so `pulumi up` fails, with the tail of
  the stderr log, when the trainer dies on startup. A checkpoint left in the checkpoint
  directory by an earlier run is resumed by the trainer itself.
- diff: any change to trainer, workers, root or env replaces, deleting first (two runs must
  never write one checkpoint directory at once; the new run resumes from the old one's
  checkpoint); stop_grace_s and labels update in place.
- delete: SIGTERM to every process of the run (the recorded session leaders' groups and all
  their descendants: torchrun puts each worker in a session of its own); the trainer
  checkpoints and exits 143. Whatever is alive after `stop_grace_s` gets SIGKILL. Files stay,
  but the two lock files, once nothing holds them.
- read: liveness refreshed: `running`, `finished` (rank 0's `done` record is in the log) or
  `exited` (stopped, preempted or crashed; see the logs).

Processes are identified by pid and start time (`trainstack.components._local_processes`, which also
stops them), so a pid the OS has recycled since is never signalled. POSIX only (Linux,
macOS): sessions and process groups are how the run is detached and stopped.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import pulumi
import pulumi.dynamic as dyn
from pydantic import ValidationError

from trainstack.components._local_processes import ProcessRef, ProcessTable, stop_processes
from trainstack.components._project import with_local_paths
from trainstack.components._unknown import contains_unknown, is_unknown
from trainstack.trainers.common.contract import EVENT_LAUNCH, EVENT_START
from trainstack.trainers.common.user_code import StackTrainer
from trainstack.trainers.local import PreparedRun, prepare_run
from trainstack.trainers.local_code import prepare_code_run
from trainstack.trainers.local_start import folder_lock, local_folder, make_folder
from trainstack.trainers.run_lock import (
    PULUMI_UP,
    FolderLock,
    RunLock,
    RunLocked,
    running_pid_file,
)

REPLACE_KEYS: Final = ("trainer", "workers", "root", "env")
UPDATE_KEYS: Final = ("stop_grace_s", "labels")
OUTPUT_KEYS: Final = (
    "pids",
    "start_times",
    "root_dir",
    "log_path",
    "stderr_path",
    "log_offset",
    "stderr_offset",
    "checkpoint_dir",
    "config_path",
    "state",
    "done",
    "resumed_from",
)
STATE_RUNNING: Final = "running"
STATE_FINISHED: Final = "finished"
STATE_EXITED: Final = "exited"
# "FileNotFoundError: ..." or torchrun's "[rank0]: FileNotFoundError: ...".
_EXCEPTION_LINE: Final = re.compile(r"^(\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(Error|Exception)\b.*:")
# The line a trainstack trainer or launcher prints when it refuses to run or stops (a resume
# under other settings, a bad setting): the cause, where torchrun's own error that follows
# (ChildFailedError) only says that a worker exited.
_TRAINER_ERROR_LINE: Final = re.compile(r"^(\[rank\d+\]:\s*)?(trainstack trainer|error): ")

# Started with `python -I -c`: reads {"cwd", "stdout", "stderr", "pass_fds", "processes":
# [{"argv", "env"}]} on stdin, starts each process (with the run's lock descriptors,
# `pass_fds`, inherited) in a new session and prints their pids as JSON. It
# exits right away, so the processes are reparented to init (or the nearest subreaper), which
# reaps them: nothing the provider runs in ever holds them as children. If one fails to
# start, the ones already started are killed so a failed create leaves nothing behind.
_LAUNCHER: Final = r"""
import json, os, signal, subprocess, sys
spec = json.load(sys.stdin)
pids = []
try:
    for proc in spec["processes"]:
        with open(spec["stdout"], "ab") as out, open(spec["stderr"], "ab") as err:
            child = subprocess.Popen(
                proc["argv"], env=proc["env"], cwd=spec["cwd"], stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True, pass_fds=spec["pass_fds"],
            )
        pids.append(child.pid)
except BaseException as exc:
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
    sys.stderr.flush()
    os._exit(1)
sys.stdout.write(json.dumps(pids))
sys.stdout.flush()
os._exit(0)
"""


class LocalRunStartError(RuntimeError):
    """The trainer's processes exited before the run started training."""


def _log(message: str) -> None:
    # With no engine attached (tests, the CLI) pulumi.log writes to stderr instead.
    pulumi.log.info(message)


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------


def read_records(path: str | Path, offset: int = 0) -> list[dict[str, Any]]:
    """The JSON objects logged in `path` from byte `offset` on (other lines are skipped)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written
        if isinstance(record, dict):
            records.append(record)
    return records


def _rank0(records: Iterable[Mapping[str, Any]], event: str) -> dict[str, Any] | None:
    found = None
    for record in records:
        if record.get("event") == event and record.get("rank") == 0:
            found = dict(record)
    return found


def _tail(path: str | Path, offset: int, lines: int = 20) -> str:
    """The cause, and the last `lines` lines written from `offset` on. The cause is the
    trainer's own last error line, else the first exception line (a worker's root cause,
    before the launcher's own traceback about the failed child)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    all_lines = text.splitlines()
    tail = "\n".join(all_lines[-lines:])
    own = [line for line in all_lines if _TRAINER_ERROR_LINE.match(line)]
    if own:
        return f"the trainer's error: {own[-1]}\n...\n{tail}"
    first = next((line for line in all_lines if _EXCEPTION_LINE.match(line)), None)
    return tail if first is None else f"first error: {first}\n...\n{tail}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# --------------------------------------------------------------------------------------
# Provider
# --------------------------------------------------------------------------------------


def _refs(props: Mapping[str, Any]) -> list[ProcessRef]:
    # Numbers come back from the engine as doubles (protobuf Struct).
    pids = [int(p) for p in props.get("pids") or []]
    starts = [str(s) for s in props.get("start_times") or []]
    return [ProcessRef(pid, start) for pid, start in zip(pids, starts, strict=True) if start]


def _trainer(value: Any) -> StackTrainer:
    # The stack's trainer section: the bundled trainer's keys, or your code's.
    return StackTrainer.model_validate(value)


def _same_trainer(old: Any, new: Any) -> bool:
    try:
        return _trainer(old) == _trainer(new)
    except ValidationError:
        return bool(old == new)


def _drop_locks(props: Mapping[str, Any], wait_s: float = 0.0) -> None:
    """Remove the run's two lock files once its processes are gone: each is taken and
    released (which removes it); one another run holds now is left to it."""
    try:
        run = _trainer(props.get("trainer")).run_name
    except ValidationError:
        return
    locks: list[RunLock] = []
    if props.get("log_path"):
        locks.append(RunLock(running_pid_file(Path(props["log_path"])), run, PULUMI_UP))
    folder = local_folder(str(props.get("checkpoint_dir") or "gs://"))
    if folder is not None and folder.is_dir():
        locks.append(FolderLock(folder.absolute(), run, PULUMI_UP))
    # A process the run forked inherits the descriptor that holds the flock and may outlive
    # the stopped processes by a moment (flock(2): the lock goes with the last descriptor),
    # so each lock is tried until `wait_s` has passed; then it is left to whoever holds it.
    deadline = time.monotonic() + wait_s
    for lock in locks:
        while lock.path.exists():
            try:
                lock.acquire()
            except RunLocked:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
                continue
            lock.release()
            break


class LocalRunProvider(dyn.ResourceProvider):
    """Start/stop the trainer on this machine; see the module docstring for the behaviour."""

    def __init__(
        self,
        *,
        base_dir: str,
        startup_timeout_s: float = 120.0,
        poll_interval_s: float = 0.2,
    ) -> None:
        # Resolves a relative `root` and is the processes' working directory: the Pulumi
        # project root, because the engine runs providers in `main`'s directory (infra/).
        self.base_dir = base_dir
        self.startup_timeout_s = startup_timeout_s
        self.poll_interval_s = poll_interval_s

    def _root(self, root: str) -> Path:
        return (Path(self.base_dir) / Path(root).expanduser()).resolve()

    # -- provider methods ------------------------------------------------------------------

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        # In a preview any input may be unknown (trainstack.components._unknown): what is known is checked.
        failures: list[dyn.CheckFailure] = []
        trainer = news.get("trainer")
        if not contains_unknown(trainer):
            try:
                _trainer(trainer)
            except ValidationError as exc:
                for error in exc.errors():
                    where = ".".join(str(p) for p in error["loc"]) or "trainer"
                    failures.append(dyn.CheckFailure("trainer", f"{where}: {error['msg']}"))
        workers = news.get("workers")
        if not is_unknown(workers) and (
            isinstance(workers, bool)
            or not isinstance(workers, int | float)
            or not float(workers).is_integer()
            or workers < 1
        ):
            failures.append(
                dyn.CheckFailure("workers", f"expected an integer >= 1, got {workers!r}")
            )
        root = news.get("root")
        if not is_unknown(root) and (not isinstance(root, str) or not root):
            failures.append(dyn.CheckFailure("root", f"expected a non-empty path, got {root!r}"))
        env = news.get("env") or {}
        if not is_unknown(env) and (
            not isinstance(env, dict)
            or not all(
                isinstance(k, str) and k and "=" not in k and (isinstance(v, str) or is_unknown(v))
                for k, v in env.items()
            )
        ):
            failures.append(
                dyn.CheckFailure("env", "expected names (no '=') mapped to string values")
            )
        grace = news.get("stop_grace_s")
        if not is_unknown(grace) and (
            isinstance(grace, bool) or not isinstance(grace, int | float) or grace <= 0
        ):
            failures.append(
                dyn.CheckFailure("stop_grace_s", f"expected seconds > 0, got {grace!r}")
            )
        return dyn.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        # The trainer's relative folders are the stack's, as `trainstack local-run` reads
        # them (trainstack.infra.local_paths.localized); your code runs in its source folder.
        cfg = with_local_paths(_trainer(props["trainer"]), Path(self.base_dir))
        root = self._root(props["root"])
        # The run's lock, where `trainstack local-run` takes it (`run_local`), before anything
        # is written: a live local-run of this run is refused here, not overwritten.
        make_folder(root / "logs", "local.root")
        log_path = root / "logs" / f"{cfg.run_name}.jsonl"
        locks: list[RunLock] = [RunLock(running_pid_file(log_path), cfg.run_name, PULUMI_UP)]
        locks[0].acquire()
        try:
            outs, refs = self._start(props, cfg, root, locks)
        except BaseException:
            for lock in reversed(locks):
                lock.release()
            raise
        for lock in locks:
            lock.hand_over(refs[0].pid)
        _log(
            f"{cfg.run_name}: {outs['state']} as pids {outs['pids']}; log {outs['log_path']}, "
            f"checkpoints {outs['checkpoint_dir']}"
        )
        return dyn.CreateResult(f"{cfg.run_name}-{refs[0].pid}", outs)

    def _start(
        self, props: dict[str, Any], cfg: StackTrainer, root: Path, locks: list[RunLock]
    ) -> tuple[dict[str, Any], list[ProcessRef]]:
        """`create` once the run is locked: the checkpoint folder's lock (added to `locks`),
        then the processes, which inherit every lock's descriptor."""
        workers, env = int(props["workers"]), props.get("env") or {}
        if cfg.user_code is not None:
            prepared = prepare_code_run(
                cfg, workers=workers, root=root, base_dir=Path(self.base_dir), extra_env=env
            )
        else:
            prepared = prepare_run(cfg.bundled(), workers=workers, root=root, extra_env=env)
        folder = folder_lock(prepared.checkpoint_dir, cfg.run_name, PULUMI_UP)
        if folder is not None:
            locks.append(folder)
            if (line := folder.took_over_line()) is not None:
                _log(line)
        stderr_path = prepared.stderr_path
        log_offset, stderr_offset = _size(prepared.log_path), _size(stderr_path)
        fds = [fd for lock in locks if (fd := lock.fileno()) is not None]
        refs = self._launch(prepared, stderr_path, fds)
        outs = {
            **props,
            "pids": [r.pid for r in refs],
            "start_times": [r.start_time for r in refs],
            "root_dir": str(root),
            "log_path": str(prepared.log_path),
            "stderr_path": str(stderr_path),
            "log_offset": log_offset,
            "stderr_offset": stderr_offset,
            "checkpoint_dir": prepared.checkpoint_dir,
            "config_path": str(prepared.config_path),
        }
        outs.update(self._await_start(outs))
        return outs, refs

    def _launch(self, prepared: PreparedRun, stderr_path: Path, fds: list[int]) -> list[ProcessRef]:
        spec = {
            "cwd": self.base_dir,
            "stdout": str(prepared.log_path),
            "stderr": str(stderr_path),
            "pass_fds": fds,
            "processes": [
                {"argv": p.argv, "env": {**prepared.env, **p.env}} for p in prepared.processes
            ],
        }
        launched = subprocess.run(
            [sys.executable, "-I", "-c", _LAUNCHER],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            check=False,
            pass_fds=fds,
        )
        if launched.returncode != 0:
            raise LocalRunStartError(
                f"could not start the trainer ({prepared.processes[0].argv[:4]}...): "
                f"{launched.stderr.strip()}"
            )
        table = ProcessTable.snapshot()
        # A process that already exited has no start time: it is recorded as gone.
        return [ProcessRef(pid, table.start_time(pid) or "") for pid in json.loads(launched.stdout)]

    def _await_start(self, outs: Mapping[str, Any]) -> dict[str, Any]:
        """Wait for rank 0's `start` record (the bundled trainers), or the `launch` record of
        the wrapper around your own code; raise if the processes die before it."""
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            status = self._status(outs)
            if status.pop("started") or status["state"] == STATE_FINISHED:
                return status
            if status["state"] == STATE_EXITED:
                raise LocalRunStartError(
                    f"the trainer exited before it started training; last lines of "
                    f"{outs['stderr_path']}:\n"
                    f"{_tail(outs['stderr_path'], int(outs['stderr_offset']))}"
                )
            if time.monotonic() >= deadline:
                _log(
                    f"no `start` record after {self.startup_timeout_s:.0f}s; the processes are "
                    f"running, follow {outs['log_path']}"
                )
                return status
            time.sleep(self.poll_interval_s)

    def _status(self, props: Mapping[str, Any]) -> dict[str, Any]:
        table = ProcessTable.snapshot()
        alive = any(table.alive(ref) for ref in _refs(props))
        records = read_records(props["log_path"], int(props.get("log_offset") or 0))
        done = _rank0(records, "done")
        start = _rank0(records, EVENT_START)
        if alive:
            state = STATE_RUNNING
        elif done is not None:
            state = STATE_FINISHED
        else:
            state = STATE_EXITED
        # Your own code need not print a `start` line with its step: then this stays None.
        resumed_from = None if start is None else int(start.get("step") or 0)
        started = start is not None or _rank0(records, EVENT_LAUNCH) is not None
        return {"state": state, "done": done, "resumed_from": resumed_from, "started": started}

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces: list[str] = []
        if not _same_trainer(olds.get("trainer"), news.get("trainer")):
            replaces.append("trainer")
        if olds.get("workers") != news.get("workers"):
            replaces.append("workers")
        if olds.get("root") != news.get("root"):
            replaces.append("root")
        if (olds.get("env") or {}) != (news.get("env") or {}):
            replaces.append("env")
        if olds.get("source_sha256") != news.get("source_sha256"):
            replaces.append("source_sha256")  # your code changed: run the new code
        updates = [key for key in UPDATE_KEYS if olds.get(key) != news.get(key)]
        return dyn.DiffResult(
            changes=bool(replaces or updates),
            replaces=replaces,
            stables=[],
            delete_before_replace=True,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only stop_grace_s and labels reach here (everything else replaces): the processes
        # are left alone.
        return dyn.UpdateResult({**news, **{k: olds[k] for k in OUTPUT_KEYS if k in olds}})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        refs = _refs(props)
        grace = float(props["stop_grace_s"])
        result = stop_processes(refs, grace, poll_s=self.poll_interval_s / 2)
        _drop_locks(props, wait_s=grace + 10.0)
        where = f"data kept: {props.get('checkpoint_dir')}, {props.get('log_path')}"
        if not result.terminated:
            _log(f"pids {[r.pid for r in refs]} had already exited; {where}")
        elif result.killed:
            _log(
                f"{len(result.killed)} process(es) ignored SIGTERM for {grace:.0f}s and were "
                f"killed (the last checkpoint may be older); {where}"
            )
        else:
            _log(
                f"stopped {len(result.terminated)} process(es) in {result.seconds:.1f}s with "
                f"SIGTERM (checkpoint saved); {where}"
            )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        if not props.get("log_path"):
            return dyn.ReadResult(None, {})
        status = self._status(props)
        del status["started"]
        return dyn.ReadResult(id_, {**props, **status})


class LocalRun(dyn.Resource, module="local", name="TrainingRun"):
    """The trainer running on this machine (type `pulumi-python:dynamic/local:TrainingRun`)."""

    pids: pulumi.Output[list[int]]
    start_times: pulumi.Output[list[str]]
    root_dir: pulumi.Output[str]
    log_path: pulumi.Output[str]
    stderr_path: pulumi.Output[str]
    checkpoint_dir: pulumi.Output[str]
    config_path: pulumi.Output[str]
    state: pulumi.Output[str]
    done: pulumi.Output[dict[str, Any] | None]
    resumed_from: pulumi.Output[int | None]

    def __init__(
        self,
        name: str,
        *,
        trainer: Mapping[str, Any],
        workers: int,
        root: str,
        env: Mapping[str, str],
        stop_grace_s: float,
        labels: pulumi.Input[Mapping[str, str]],
        provider: LocalRunProvider,
        source_sha256: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            # Only for your code, so the bundled trainer's inputs stay as they were.
            **({"source_sha256": source_sha256} if source_sha256 else {}),
            "trainer": dict(trainer),
            "workers": workers,
            "root": root,
            "env": dict(env),
            "stop_grace_s": stop_grace_s,
            "labels": labels,
            **dict.fromkeys(OUTPUT_KEYS),
        }
        super().__init__(provider, name, props, opts)

"""One `trainstack local-run` of a run at a time, and which process it is.

`local-run` takes an exclusive `flock` on the run's pid file (`<local root>/logs/<run>.pid`,
beside its log; `running_pid_file`) before it deletes (`--fresh`) or starts anything, holds it
until its processes are gone, and records there its pid, its start time and when it started
(`RunHolder`, one JSON object). A second `local-run` of the same run finds the lock held and
stops with one line naming the holder (`RunLocked`). The kernel drops a `flock` when its
holder dies, so a killed run never blocks the next one.

`trainstack status` calls a run live only when the recorded pid runs and started at the
recorded time (`RunHolder.alive`; Linux: field 22 of /proc/<pid>/stat, the start in clock
ticks since boot, proc_pid_stat(5); elsewhere `ps -o lstart=`), so a pid the OS has given to
another process since does not count. A record of an older trainstack (the pid alone) is
checked by the pid alone.

The checkpoint folder has a lock of its own (`FolderLock`, `FOLDER_LOCK` in the folder, the
same record): two stacks whose `trainer.checkpoint_dir` names one folder are two runs with
two pid files, and without it the second one's `--fresh` deleted the first one's checkpoints
while it trained. A record left by a killed run (its pid gone, or another process's start
time) holds no `flock`; it is taken over, and `FolderLock.took_over` names it.

`pulumi up -s local` (`trainstack.components._local_provider`) takes both locks too, but its
processes outlive it: it hands each lock to them (`RunLock.hand_over`: the record names the
run's first process, and the lock's file descriptor is inherited by every process it starts),
so the kernel drops the `flock` only when the last of them exits.

POSIX only (Linux, macOS); standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

FOLDER_LOCK: Final = ".trainstack-run.lock"
"""The lock file `local-run` keeps in a local checkpoint folder while a run uses it."""

LOCAL_RUN: Final = "local-run"
PULUMI_UP: Final = "pulumi up -s local"
HOLDERS: Final = (LOCAL_RUN, PULUMI_UP)
"""What may hold a run's lock: `trainstack local-run`, or the processes `pulumi up` started."""


def running_pid_file(log_path: Path) -> Path:
    """Where a running `local-run` keeps its record and lock (beside the run's log), so
    `trainstack status --stack` can tell a live run from a stopped one."""
    return log_path.with_suffix(".pid")


def process_start(pid: int) -> str | None:
    """When process `pid` started, as this machine reports it; None when it does not run."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
    except OSError:
        return None
    else:
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; field 22 is
        # the 20th after it.
        return text[text.rindex(")") + 2 :].split()[19]
    out = subprocess.run(
        ["ps", "-o", "lstart=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    ).stdout
    return " ".join(out.split()) or None


class UnreadableRecord(ValueError):
    """A pid file that holds no record; the message names the file and why."""


@dataclass(frozen=True)
class RunHolder:
    """The `local-run` process a pid file records."""

    pid: int
    start: str | None
    """`process_start(pid)` when it took the lock; None in an older trainstack's record."""
    started_at: str | None = None
    """When it started, in UTC (ISO 8601), for people."""
    by: str = LOCAL_RUN
    """Which of `HOLDERS` took the lock (an older trainstack's record: local-run)."""

    def alive(self) -> bool:
        """The recorded process still runs: same pid and, when recorded, same start time."""
        if self.start is not None:
            return process_start(self.pid) == self.start
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def describe(self) -> str:
        since = f", started {self.started_at}" if self.started_at else ""
        return f"pid {self.pid}{since}"

    @classmethod
    def read(cls, path: Path) -> RunHolder | None:
        """The record in `path`; None when there is none (no file, or an empty one: a lock
        taken a moment ago, or a write cut short). `UnreadableRecord` when it holds other
        bytes."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path)
            raise UnreadableRecord(
                f"cannot read {path}: {blocker} is a file where a folder is expected; valid: "
                "move that file away (local-run keeps its runs' folders there)"
            ) from None
        except IsADirectoryError:
            raise UnreadableRecord(
                f"cannot read {path}: it is a folder where local-run's record file is "
                "expected; valid: move that folder away (local-run writes the file there)"
            ) from None
        except OSError as exc:
            raise UnreadableRecord(f"cannot read {path}: {exc.strerror}") from None
        if not raw.strip():
            return None
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise UnreadableRecord(
                f"{path} holds binary bytes, not a local-run record; valid: delete it when no "
                "local-run of this stack is running (local-run writes it again)"
            ) from None
        holder = cls._parse(text)
        if holder is None:
            raise UnreadableRecord(
                f"{path} is not a local-run record ({text.strip()[:40]!r}); valid: delete it "
                "when no local-run of this stack is running (local-run writes it again)"
            )
        return holder

    @classmethod
    def _parse(cls, text: str) -> RunHolder | None:
        """The holder `text` records; None when it records none a process can be."""
        if text.strip().isdigit():
            record: Any = {"pid": int(text.strip())}  # an older trainstack's: the pid alone
        else:
            try:
                record = json.loads(text)
            except ValueError:
                return None
        if not isinstance(record, dict):
            return None  # `[1, 2]`, `"abc"`: JSON, but no record
        pid, start, started_at = record.get("pid"), record.get("start"), record.get("started_at")
        # kill(0, 0) and kill(-1, 0) ask about a process group and every process, and
        # succeed; pid 1 (init) always runs, so without a start time to compare it names no
        # local-run; Linux gives no pid above PID_MAX_LIMIT, 2**22 (include/linux/threads.h).
        lowest = 1 if isinstance(start, str) else 2
        if not (isinstance(pid, int) and not isinstance(pid, bool) and lowest <= pid <= 2**22):
            return None
        # Only a known holder's name is shown: the file is text anyone may write.
        by = str(record["by"]) if record.get("by") in HOLDERS else LOCAL_RUN
        return cls(
            pid,
            start if isinstance(start, str) else None,
            started_at if isinstance(started_at, str) else None,
            by,
        )


class RunLocked(ValueError):
    """Another `local-run` holds the run, or the lock cannot be taken; the message is the one
    line that says which, or why."""


class RunLock:
    """The exclusive lock of one run, held by this process (see the module doc).

    with RunLock(running_pid_file(log_path), run_name):
        ...  # delete, start, supervise
    """

    def __init__(self, path: Path, run: str, by: str = LOCAL_RUN) -> None:
        self.path = path
        self.run = run
        self.by = by
        """Who takes it (one of `HOLDERS`), for the record another process reads."""
        self._fd: int | None = None
        self.took_over: RunHolder | None = None
        """The holder a stale record named when this process took the lock over."""

    def acquire(self) -> None:
        """Take the lock and record this process; `RunLocked` when another process holds
        it (the folder must exist)."""
        while True:
            fd = self._open()
            if fd is None:
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunLocked(self._held_line()) from None
            except BaseException:
                os.close(fd)
                raise
            # The holder before us may have removed the file between our open and our lock:
            # a lock on that file locks nothing anyone else will open.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        try:
            self.took_over = RunHolder.read(self.path)  # we hold the flock: its holder is gone
        except UnreadableRecord:
            self.took_over = None
        self._record(os.getpid())

    def _record(self, pid: int) -> None:
        """Write the record naming process `pid` as the holder."""
        if self._fd is None:
            return
        holder = RunHolder(
            pid,
            process_start(pid),
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            self.by,
        )
        record = json.dumps(
            {
                "pid": holder.pid,
                "start": holder.start,
                "started_at": holder.started_at,
                "by": holder.by,
            }
        )
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (record + "\n").encode(), 0)

    def fileno(self) -> int | None:
        """The descriptor that holds the `flock` (None when not held, or nothing to guard):
        a process that inherits it holds the lock with this one."""
        return self._fd

    def hand_over(self, pid: int) -> None:
        """Leave the lock to the processes that inherited `fileno()` (`pid` the first of
        them, named in the record) and close this process's descriptor: the `flock` belongs
        to the open file, so it stays held until the last of them exits or closes it; the
        file stays (its record says who holds it)."""
        if self._fd is None:
            return
        try:
            self._record(pid)
        finally:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _open(self) -> int | None:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunLocked(
                f"cannot create {self.path}, the lock of run {self.run!r}: "
                f"{exc.strerror or exc}; valid: a local.root this user may write in"
            ) from None

    def _holder(self) -> str:
        try:
            holder = RunHolder.read(self.path)
        except UnreadableRecord:
            holder = None
        return "another local-run" if holder is None else f"{holder.by} {holder.describe()}"

    def _held_line(self) -> str:
        who = self._holder()
        return (
            f"run {self.run!r} is already running here ({who}; its lock: {self.path}); "
            "valid: wait for it to end, or stop it (Ctrl-C in its terminal, or SIGTERM to "
            "its pid), then run this again"
        )

    def release(self) -> None:
        """Remove the record and drop the lock (in that order: nobody reads a stale one)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class FolderLock(RunLock):
    """The exclusive lock of a local checkpoint folder (`FOLDER_LOCK` in it), held by the
    run that reads, writes and (`--fresh`) clears it; see the module doc.

    with FolderLock(Path(checkpoint_dir), run_name) as lock:
        ...  # lock.took_over: a stale record's holder, to say
    """

    def __init__(self, folder: Path, run: str, by: str = LOCAL_RUN) -> None:
        super().__init__(folder / FOLDER_LOCK, run, by)
        self.folder = folder

    def _open(self) -> int | None:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                # Nothing this process may write there, so nothing to guard: the folder's own
                # test write says why the run cannot use it (`CheckpointStore.check_writable`).
                return None
            raise RunLocked(
                f"trainer.checkpoint_dir: cannot create {self.path}, the lock of the folder: "
                f"{exc.strerror or exc}"
            ) from None

    def _held_line(self) -> str:
        return (
            f"trainer.checkpoint_dir: {self.folder} is in use by {self._holder()} (its lock: "
            f"{self.path}); run {self.run!r} would read, write and prune that run's "
            "checkpoints; valid: a checkpoint folder of this run's own, or wait for that run "
            "to end"
        )

    def took_over_line(self) -> str | None:
        """The line saying a stale lock was taken over, or None."""
        if self.took_over is None:
            return None
        return (
            f"took over the lock of {self.folder} from {self.took_over.describe()}, which no "
            "longer runs"
        )

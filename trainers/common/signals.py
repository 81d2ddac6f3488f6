"""SIGTERM as a flag plus a watchdog, without any framework (torch or TensorFlow).

Spot/preemptible VMs, GKE pod eviction and Vertex all send SIGTERM and then SIGKILL after a
grace period. The handler only sets a flag; the trainer's loop reads it once per step and
agrees with its peers on when to stop (`trainstack.trainers.torch_ddp.preemption` for torch,
`trainstack.trainers.tf_multiworker.sync` and `.parameter_server` for TensorFlow), saves a checkpoint
and exits with `PREEMPTED_EXIT_CODE` (143, `trainstack.trainers.common.exit_codes`). The watchdog exits
with the same code if saving takes longer than `grace_s`, so the process is never left to the
platform's SIGKILL halfway through something else.

A local run (`trainstack local-run`) also ties its processes' lives to the launcher's:
`kill_with_parent` (Linux `PR_SET_PDEATHSIG`, for the processes the CLI starts) and
`watch_parent` (a polling watchdog the trainers start when `EXIT_WITH_PARENT_ENV` is set,
which also covers torchrun's workers, whose launcher is torchrun) make sure that no worker
outlives a launcher killed with SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Final

from trainstack.trainers.common.contract import EXIT_WITH_PARENT_ENV
from trainstack.trainers.common.exit_codes import LAUNCHER_LOST_EXIT_CODE, PREEMPTED_EXIT_CODE

PARENT_POLL_S: Final = 0.5
"""How often `watch_parent` checks that the launcher is still there."""
_PR_SET_PDEATHSIG: Final = 1


class SigtermWatcher:
    """Installs a SIGTERM handler that sets a flag and starts the grace-period watchdog."""

    def __init__(self, *, grace_s: float) -> None:
        self.grace_s = grace_s
        self._flag = threading.Event()
        self._watchdog: threading.Timer | None = None
        self._previous: Callable[[int, FrameType | None], object] | int | None = None

    def install(self) -> SigtermWatcher:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._flag.is_set():
            return
        self._flag.set()
        self._start_watchdog()

    def _start_watchdog(self) -> None:
        if self._watchdog is None:
            self._watchdog = threading.Timer(self.grace_s, self._expire)
            self._watchdog.daemon = True
            self._watchdog.start()

    def _expire(self) -> None:
        sys.stderr.write(f"preemption grace of {self.grace_s}s ran out; exiting\n")
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT_CODE)

    @property
    def signalled(self) -> bool:
        return self._flag.is_set()

    def peer_signalled(self) -> None:
        """A peer was signalled: this process must also finish within the grace period."""
        self._flag.set()
        self._start_watchdog()


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


# Resolved once, in the parent: the function `kill_with_parent` returns runs between fork and
# exec, where loading a library is not safe.
_PRCTL = _prctl()


def kill_with_parent(sig: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A `subprocess.Popen(preexec_fn=...)` that makes the child receive `sig` when the
    process starting it dies (Linux; elsewhere it does nothing and `watch_parent` is the only
    guard). A child whose parent died before the call exits at once."""
    parent = os.getpid()
    prctl = _PRCTL

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(LAUNCHER_LOST_EXIT_CODE)

    return preexec


def watch_parent(
    environ: Mapping[str, str] | None = None, *, poll_s: float = PARENT_POLL_S
) -> threading.Thread | None:
    """When `EXIT_WITH_PARENT_ENV` is "1", start a daemon thread that ends this process with
    `LAUNCHER_LOST_EXIT_CODE` as soon as its parent (the launcher: torchrun or the CLI) is
    gone. Returns the thread, or None when not asked to."""
    env = os.environ if environ is None else environ
    if env.get(EXIT_WITH_PARENT_ENV) != "1":
        return None
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        sys.stderr.write(f"trainstack trainer: the launcher (pid {parent}) is gone; exiting\n")
        sys.stderr.flush()
        os._exit(LAUNCHER_LOST_EXIT_CODE)

    thread = threading.Thread(target=watch, name="trainstack-parent-watch", daemon=True)
    thread.start()
    return thread


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first), from /proc's per-task `children`
    lists; used to signal or wait for a whole launch tree (torchrun, its workers, their
    children) that left its process group."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found.extend(children)
            stack.extend(children)
    return found

"""The launcher's answer to SIGTERM and SIGINT during `trainstack local-run`
(`trainstack.trainers.local.supervise_run`): the first signal is forwarded once as SIGTERM to
the processes that stop the run (each saves a checkpoint and exits); a second one, or the
grace period running out, kills every process group of the run without saving."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any


class RunStopper:
    """The launcher's SIGTERM/SIGINT handler: the first signal is forwarded once as SIGTERM
    to the processes that stop the run; a second one, or `grace_s` passing, kills them all."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.procs: list[tuple[subprocess.Popen[str], bool]] = []
        self.signum: int | None = None
        self.deadline: float | None = None
        self.killed = False

    def add(self, proc: subprocess.Popen[str], stops_run: bool) -> None:
        self.procs.append((proc, stops_run))
        if self.signum is not None and stops_run:
            _send(proc, signal.SIGTERM)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            self.kill()
            return
        self.signum = signum
        self.deadline = time.monotonic() + self.grace_s
        for proc, stops_run in self.procs:
            if stops_run:
                _send(proc, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL every process group of the run (torchrun's workers, in sessions of their
        own, follow through `watch_parent`)."""
        self.killed = True
        for proc, _ in self.procs:
            _send(proc, signal.SIGKILL, group=True)

    def check_deadline(self) -> None:
        if self.deadline is not None and not self.killed and time.monotonic() > self.deadline:
            self.kill()


def _send(proc: subprocess.Popen[str], sig: signal.Signals, *, group: bool = False) -> None:
    if proc.returncode is not None:
        return  # reaped: its pid may belong to someone else by now
    try:
        if group:
            os.killpg(proc.pid, sig)  # a session leader: its group id is its pid
        else:
            os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def install(handler: Any) -> dict[int, Any]:
    """Install `handler` for SIGINT and SIGTERM; returns the previous handlers (none outside
    the main thread, where Python cannot install any)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore(previous: Mapping[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)

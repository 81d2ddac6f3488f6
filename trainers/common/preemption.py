"""Preemption: turn SIGTERM into a checkpoint and a distinct exit code.

Spot/preemptible VMs, GKE pod eviction and Vertex all send SIGTERM and then SIGKILL after a
grace period. The handler only sets a flag; the training loop asks `should_stop()` once per
step, which all-reduces the flag (MAX) so every rank stops at the same step even when only
one of them was signalled. Every rank then takes part in the checkpoint and the process
exits with `PREEMPTED_EXIT_CODE` (143 = 128 + SIGTERM, what a shell and Kubernetes report
for a SIGTERM death; Job `podFailurePolicy` and restart wrappers can match it). A watchdog
exits with the same code if saving takes longer than `grace_s`, so the process is never
left to the platform's SIGKILL halfway through something else.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

PREEMPTED_EXIT_CODE = 143


class PreemptionWatcher:
    def __init__(self, *, grace_s: float, device: torch.device) -> None:
        self.grace_s = grace_s
        self.device = device
        self._flag = threading.Event()
        self._watchdog: threading.Timer | None = None
        self._previous: Callable[[int, FrameType | None], object] | int | None = None
        self._pending: tuple[Any, torch.Tensor] | None = None

    def install(self) -> PreemptionWatcher:
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

    def should_stop(self) -> bool:
        """True on every rank at the same step once any rank has been signalled.

        Distributed, the flag is all-reduced without blocking: the reduction started at one
        call is read at the next, so it overlaps a training step instead of adding a sync
        point to every step, and every rank still decides at the same call (one step late).
        """
        local = self._flag.is_set()
        if not (dist.is_available() and dist.is_initialized()):
            return local
        stop = False
        if self._pending is not None:
            work, flag = self._pending
            work.wait()
            stop = bool(flag.item() > 0)
        flag = torch.tensor([1.0 if local else 0.0], device=self.device)
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True), flag)
        if stop and not local:
            # A peer was signalled; this rank must also finish within the grace period.
            self._flag.set()
            self._start_watchdog()
        return stop

    def drain(self) -> None:
        """Complete the reduction in flight, so that every rank leaves with no collective
        outstanding (call on every rank before the next collective outside the loop)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None

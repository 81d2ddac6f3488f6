"""SIGTERM as a flag plus a watchdog, without any framework (torch or TensorFlow).

Spot/preemptible VMs, GKE pod eviction and Vertex all send SIGTERM and then SIGKILL after a
grace period. The handler only sets a flag; the trainer's loop reads it once per step and
agrees with its peers on when to stop (`trainers.torch_ddp.preemption` for torch,
`trainers.tf_multiworker.sync` and `.parameter_server` for TensorFlow), saves a checkpoint
and exits with `PREEMPTED_EXIT_CODE` (143, `trainers.common.exit_codes`). The watchdog exits
with the same code if saving takes longer than `grace_s`, so the process is never left to the
platform's SIGKILL halfway through something else.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from trainers.common.exit_codes import PREEMPTED_EXIT_CODE


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

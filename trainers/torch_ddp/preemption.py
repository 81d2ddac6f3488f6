"""Preemption for the torch trainer: SIGTERM becomes a checkpoint and a distinct exit code.

The signal handling itself (flag, grace-period watchdog, exit code 143) is framework-free in
`trainstack.trainers.common.signals`. This module adds the torch.distributed agreement: `should_stop()`
all-reduces the flag (MAX) once per step so every rank stops at the same step even when only
one of them was signalled. Every rank then takes part in the checkpoint and the process exits
with `trainstack.trainers.common.exit_codes.PREEMPTED_EXIT_CODE`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from trainstack.trainers.common.signals import SigtermWatcher


class PreemptionWatcher(SigtermWatcher):
    def __init__(self, *, grace_s: float, device: torch.device) -> None:
        super().__init__(grace_s=grace_s)
        self.device = device
        self._pending: tuple[Any, torch.Tensor] | None = None

    def install(self) -> PreemptionWatcher:
        super().install()
        return self

    def should_stop(self) -> bool:
        """True on every rank at the same step once any rank has been signalled.

        Distributed, the flag is all-reduced without blocking: the reduction started at one
        call is read at the next, so it overlaps a training step instead of adding a sync
        point to every step, and every rank still decides at the same call (one step late).
        """
        local = self.signalled
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
            self.peer_signalled()
        return stop

    def drain(self) -> None:
        """Complete the reduction in flight, so that every rank leaves with no collective
        outstanding (call on every rank before the next collective outside the loop)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None

"""Preemption and the end of a machine's capacity for the torch trainer: SIGTERM, or the
flex-start deadline drawing near, becomes a checkpoint and a distinct exit code.

The signal handling itself (flag, grace-period watchdog, exit code 143) is framework-free in
`trainstack.trainers.common.signals`, the deadline in `trainstack.trainers.common.deadline`.
This module adds the torch.distributed agreement: `stop_reason()` all-reduces why this rank
would stop (MAX of `STOP_CODES`) once per step, so every rank stops at the same step, for
the same reason, even when only one of them was signalled or one machine's capacity ends
sooner than another's. Every rank then takes part in the checkpoint and the process exits
with `PREEMPTED_EXIT_CODE` (143) or `CAPACITY_ENDED_EXIT_CODE` (6)
(`trainstack.trainers.common.exit_codes`).
"""

from __future__ import annotations

from typing import Any, Final

import torch
import torch.distributed as dist

from trainstack.trainers.common.contract import EVENT_CAPACITY_ENDED
from trainstack.trainers.common.deadline import Deadline
from trainstack.trainers.common.signals import SigtermWatcher

PREEMPTION: Final = "preemption"
STOP_CODES: Final = {PREEMPTION: 1.0, EVENT_CAPACITY_ENDED: 2.0}
"""Why a rank stops, as the number the ranks all-reduce (MAX): the capacity's end wins over a
SIGTERM, since the machine goes either way."""


class PreemptionWatcher(SigtermWatcher):
    def __init__(
        self, *, grace_s: float, device: torch.device, deadline: Deadline | None = None
    ) -> None:
        super().__init__(grace_s=grace_s)
        self.device = device
        self.deadline = deadline
        self._pending: tuple[Any, torch.Tensor] | None = None

    def install(self) -> PreemptionWatcher:
        super().install()
        return self

    def _local(self) -> float:
        if self.deadline is not None and self.deadline.reached():
            return STOP_CODES[EVENT_CAPACITY_ENDED]
        return STOP_CODES[PREEMPTION] if self.signalled else 0.0

    def stop_reason(self) -> str | None:
        """`preemption` or `capacity_ended` on every rank at the same step once any rank has
        been signalled or reached its deadline; None while training goes on.

        Distributed, the code is all-reduced without blocking: the reduction started at one
        call is read at the next, so it overlaps a training step instead of adding a sync
        point to every step, and every rank still decides at the same call (one step late).
        """
        local = self._local()
        if not (dist.is_available() and dist.is_initialized()):
            return _reason(local)
        agreed = 0.0
        if self._pending is not None:
            work, code = self._pending
            work.wait()
            agreed = float(code.item())
        code = torch.tensor([local], device=self.device)
        self._pending = (dist.all_reduce(code, op=dist.ReduceOp.MAX, async_op=True), code)
        reason = _reason(agreed)
        if reason == PREEMPTION and not self.signalled:
            # A peer was signalled: this rank's save must finish within the grace too. The
            # capacity's end arms no watchdog: its margin is the save's time.
            self.peer_signalled()
        return reason

    def should_stop(self) -> bool:
        return self.stop_reason() is not None

    def drain(self) -> None:
        """Complete the reduction in flight, so that every rank leaves with no collective
        outstanding (call on every rank before the next collective outside the loop)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None


def _reason(code: float) -> str | None:
    for reason, value in STOP_CODES.items():
        if code == value:
            return reason
    return None

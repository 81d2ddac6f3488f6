"""The node launcher and the end of its machine's capacity (a flex-start run duration,
`trainstack.trainers.common.deadline`): the deadline and its margin, the hold of a start
within the margin, the SIGTERM for targets that do not stop by themselves, and the exit code
that says the run ended `capacity_ended` (6).

Standard library only at import time (the node launcher's rule); a bundled trainer's margin
is read from its flags, with pydantic, only where a deadline is set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from trainstack.trainers.common.contract import TRAINER_MODULES
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S, Deadline
from trainstack.trainers.common.exit_codes import CAPACITY_ENDED_EXIT_CODE, DONE_EXIT_CODE

Log = Callable[[str], None]


def deadline_for(
    module: str | None, argv: Sequence[str], env: Mapping[str, str]
) -> Deadline | None:
    """This machine's deadline (`TRAINSTACK_DEADLINE`) with its margin: a bundled trainer's
    `deadline_margin_s` (its flags), `DEFAULT_MARGIN_S` for your code; None without one.
    Raises ValueError for a deadline that is not a time or flags the trainer refuses."""
    deadline = Deadline.from_env(env)
    if deadline is None or module not in TRAINER_MODULES.values():
        return deadline
    from trainstack.trainers.common.cli import load_config

    return Deadline(deadline.at, load_config(argv).deadline_margin_s)


def when(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def hold_for_capacity(deadline: Deadline, stop: threading.Event, log: Log) -> int:
    """A start within the deadline's margin (a replaced pod, a restarted unit on the machine
    that is going): nothing trains; wait until the platform stops this launcher."""
    log(
        f"this machine's capacity ends at {when(deadline.at)} (TRAINSTACK_DEADLINE), less than "
        f"{deadline.margin_s:g} s from now: not starting the target; holding until it goes"
    )
    stop.wait()
    return CAPACITY_ENDED_EXIT_CODE


class Backstop:
    """SIGTERM to the target (`forward`) at the deadline's stop time, for a target that does
    not stop by itself (the run contract: save and exit 143). Inactive without a deadline or
    for a target that `stops_itself` (the bundled torch trainer)."""

    def __init__(
        self,
        deadline: Deadline | None,
        stops_itself: bool,
        forward: Callable[[], None],
        log: Log,
    ) -> None:
        self.fired = threading.Event()
        self._timer: threading.Timer | None = None
        if deadline is None or stops_itself:
            return

        def fire() -> None:
            log(
                f"this machine's capacity ends at {when(deadline.at)} (TRAINSTACK_DEADLINE); "
                f"stopping the target {deadline.margin_s:g} s before it"
            )
            self.fired.set()
            forward()

        self._timer = threading.Timer(max(0.0, deadline.stop_at - time.time()), fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def capacity_code(code: int, capacity_ended: bool, backstop: Backstop) -> int:
    """The launcher's exit code: 6 where the target saved and stopped for the capacity's
    end (the bundled torch trainer's `capacity_ended` line), or stopped after the backstop's
    SIGTERM (whatever torchrun made of that), unless it finished."""
    if code != DONE_EXIT_CODE and (capacity_ended or backstop.fired.is_set()):
        return CAPACITY_ENDED_EXIT_CODE
    return code


__all__ = ["DEFAULT_MARGIN_S", "Backstop", "capacity_code", "deadline_for", "hold_for_capacity"]

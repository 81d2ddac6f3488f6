"""When this machine's capacity ends: a flex-start machine goes away at the end of its run
duration, and the run saves before that instead of losing what it trained since the last
checkpoint.

`TRAINSTACK_DEADLINE` (`DEADLINE_ENV`) is that time, whole seconds since the Unix epoch, set
by the launches of flex-start machines and passed to every process of the run (the run
contract; unset elsewhere). The launches compute it as this machine's boot time plus the run
duration the stack gave the machine (`CAPACITY_RUN_ENV`, `boot_time` below): Google starts a
flex-start VM's clock before the guest boots, so the time is a little late, never early, and
the margin covers that (`trainstack.components.catalog.capacity_end` has the sources).

What happens at `deadline - margin` (`Deadline.stop_at`):

- the bundled torch trainer: every rank agrees on the step (the preemption watcher's
  all-reduce), saves a checkpoint, logs `capacity_ended` and exits
  `CAPACITY_ENDED_EXIT_CODE` (6); the margin is `trainer.deadline_margin_s`;
- any other target of the node launcher (the TensorFlow trainer, your own code): the node
  launcher sends it SIGTERM, which the run contract says means "save and exit 143"; the
  margin is the bundled trainer's `deadline_margin_s`, `DEFAULT_MARGIN_S` for your code;
- either way the node launcher exits 6 and records the run's end `capacity_ended` with the
  checkpoint's step (`trainstack.trainers.common.run_records`), and a launcher that starts
  after `stop_at` on the same machine holds instead of training (the capacity is going).

Framework-free, standard library only (the node launcher imports it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from trainstack.trainers.common.contract import CAPACITY_RUN_ENV, DEADLINE_ENV

DEFAULT_MARGIN_S: Final = 600.0
"""How long before the deadline a run saves and stops unless told otherwise: room for a
checkpoint of a large model to reach Cloud Storage, plus the minute or so by which the
deadline from the boot time is late (`boot_time`)."""
MAX_MARGIN_S: Final = 86400.0
"""`trainer.deadline_margin_s` at most a day: flex-start runs at most 7 days."""
PROC_STAT: Final = "/proc/stat"


@dataclass(frozen=True)
class Deadline:
    """The capacity's end (`at`, Unix seconds) and how long before it to stop."""

    at: float
    margin_s: float

    @property
    def stop_at(self) -> float:
        return self.at - self.margin_s

    def reached(self, now: float | None = None) -> bool:
        """Whether it is time to save and stop."""
        return (time.time() if now is None else now) >= self.stop_at

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], margin_s: float = DEFAULT_MARGIN_S
    ) -> Deadline | None:
        """The deadline `DEADLINE_ENV` names, or None without one; ValueError for a value
        that is not a whole number of seconds."""
        raw = env.get(DEADLINE_ENV, "").strip()
        if not raw:
            return None
        if not raw.isdigit():
            raise ValueError(
                f"{DEADLINE_ENV}: {raw!r} is not a time; valid: whole seconds since the epoch"
            )
        return cls(float(raw), margin_s)


def boot_time(stat: str = PROC_STAT) -> int:
    """This machine's boot time (Unix seconds): the `btime` line of /proc/stat ("boot time,
    in seconds since the Epoch", proc_stat(5)). A container reads its node's: /proc/stat is
    the kernel's, not a namespace's. What the launch scripts do in shell, for tests."""
    with open(stat) as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key == "btime":
                return int(value)
    raise ValueError(f"{stat}: no btime line")


__all__ = ["CAPACITY_RUN_ENV", "DEADLINE_ENV", "DEFAULT_MARGIN_S", "Deadline", "boot_time"]

"""The processes of a local training run: who they are, and how they are stopped.

Processes are identified by pid and start time (Linux: /proc/<pid>/stat field 22; elsewhere
`ps -o lstart`), so a pid the OS has recycled since is never signalled. A run's processes
are session leaders (their group ids are their pids) and everything descended from them:
torchrun puts each worker in a session of its own, so stopping a run walks the process tree
as well as signalling the groups. POSIX only (Linux, macOS).

    table = ProcessTable.snapshot()
    refs = [ProcessRef(pid, table.start_time(pid) or "") for pid in pids]
    result = stop_processes(refs, grace_s=45.0)   # SIGTERM, then SIGKILL after 45 s
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

KILL_WAIT_S: Final = 10.0
"""How long `stop_processes` (the provider's delete) waits for SIGKILLed processes to vanish
before reporting them."""


class LocalRunStopError(RuntimeError):
    """Processes of the run were still alive after SIGKILL."""


@dataclass(frozen=True)
class ProcessRef:
    """One process, as its pid and its start time (which a recycled pid does not share)."""

    pid: int
    start_time: str


@dataclass(frozen=True)
class _Entry:
    ppid: int
    start_time: str
    zombie: bool


class ProcessTable:
    """A snapshot of the processes on this machine."""

    def __init__(self, entries: Mapping[int, _Entry]) -> None:
        self._entries = dict(entries)

    @classmethod
    def snapshot(cls) -> ProcessTable:
        proc = Path("/proc")
        if (proc / "self" / "stat").exists():
            return cls(_linux_entries(proc))
        return cls(_ps_entries())

    def start_time(self, pid: int) -> str | None:
        entry = self._entries.get(pid)
        return None if entry is None else entry.start_time

    def alive(self, ref: ProcessRef) -> bool:
        """`ref` still runs: same pid, same start time, not a zombie awaiting its parent."""
        entry = self._entries.get(ref.pid)
        return entry is not None and entry.start_time == ref.start_time and not entry.zombie

    def descendants(self, roots: Iterable[ProcessRef]) -> list[ProcessRef]:
        """Live descendants of the live `roots` (children, grandchildren, ...)."""
        children: dict[int, list[int]] = {}
        for pid, entry in self._entries.items():
            children.setdefault(entry.ppid, []).append(pid)
        found: list[ProcessRef] = []
        stack = [r.pid for r in roots if self.alive(r)]
        seen = set(stack)
        while stack:
            for child in children.get(stack.pop(), []):
                if child in seen:
                    continue
                seen.add(child)
                entry = self._entries[child]
                if not entry.zombie:
                    found.append(ProcessRef(child, entry.start_time))
                stack.append(child)
        return found


def _linux_entries(proc: Path) -> dict[int, _Entry]:
    entries: dict[int, _Entry] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited while the table was read
        # "pid (comm) state ppid ... starttime ...": comm may hold spaces and parentheses.
        fields = text[text.rindex(")") + 2 :].split()
        # fields[0] is field 3 of proc_pid_stat(5): state; 4: ppid; 22: starttime (ticks).
        entries[int(stat.parent.name)] = _Entry(int(fields[1]), fields[19], fields[0] in "ZX")
    return entries


def _ps_entries() -> dict[int, _Entry]:
    out = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid=,stat=,lstart="],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LC_ALL": "C"},
    ).stdout
    entries: dict[int, _Entry] = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4:
            pid, ppid, stat, start = parts
            entries[int(pid)] = _Entry(int(ppid), " ".join(start.split()), stat.startswith("Z"))
    return entries


def _signal(ref: ProcessRef, sig: signal.Signals, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            # A session leader's pgid is its pid: this reaches children left in its group.
            os.killpg(ref.pid, sig)
        else:
            os.kill(ref.pid, sig)


@dataclass(frozen=True)
class StopResult:
    """What `stop_processes` did."""

    terminated: list[ProcessRef]
    """Processes that were alive and got SIGTERM."""
    killed: list[ProcessRef]
    """Those still alive after the grace period, which got SIGKILL."""
    seconds: float
    """Time from SIGTERM until every process was gone."""


def stop_processes(
    leaders: Sequence[ProcessRef], grace_s: float, *, poll_s: float = 0.1
) -> StopResult:
    """SIGTERM `leaders` (session leaders: their whole groups) and all their descendants,
    wait up to `grace_s` for them to exit, then SIGKILL the rest.

    Only processes whose pid and start time both match are signalled. Raises
    LocalRunStopError if any is still alive `KILL_WAIT_S` after SIGKILL.
    """
    started = time.monotonic()
    table = ProcessTable.snapshot()
    live_leaders = [ref for ref in leaders if table.alive(ref)]
    tree = [*live_leaders, *table.descendants(live_leaders)]
    for ref in tree:
        _signal(ref, signal.SIGTERM, group=ref in live_leaders)

    def remaining() -> list[ProcessRef]:
        now = ProcessTable.snapshot()
        # A process may have started a child since the SIGTERM; it goes down with the rest.
        found = [*tree, *(d for d in now.descendants(tree) if d not in tree)]
        return [ref for ref in found if now.alive(ref)]

    deadline = started + grace_s
    alive = remaining()
    while alive and time.monotonic() < deadline:
        time.sleep(poll_s)
        alive = remaining()
    if not alive:
        return StopResult(tree, [], time.monotonic() - started)
    for ref in alive:
        _signal(ref, signal.SIGKILL, group=ref in live_leaders)
    kill_deadline = time.monotonic() + KILL_WAIT_S
    left = remaining()
    while left and time.monotonic() < kill_deadline:
        time.sleep(poll_s)
        left = remaining()
    if left:
        raise LocalRunStopError(
            f"processes {', '.join(str(r.pid) for r in left)} are still alive "
            f"{KILL_WAIT_S:.0f}s after SIGKILL (stuck in the kernel?); run `pulumi destroy` again"
        )
    return StopResult(tree, alive, time.monotonic() - started)

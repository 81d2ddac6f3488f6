"""What `trainstack local-run` shows while a local run trains and after it ends.

On a terminal: a progress bar (rich, transient) and a summary table whose long values (the
parameter digest, paths) wrap instead of being cut. Piped or redirected: one plain progress
line every few seconds and the summary as `name: value` lines, never truncated, so a log
file or a script sees the same values a person does.

The outcome is one line for everything but a finished or failed run: an interrupted run
says where it stopped and which checkpoint it saved, a run found complete says so and how to
start over. Framework-free: `trainstack.trainers.local` uses it before any trainer is imported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainstack.trainers.common.checkpoint import step_name
from trainstack.trainers.common.contract import (
    EVENT_FAILED,
    FIELD_EVENT,
    FIELD_LOSS,
    FIELD_PARAMS_SHA256,
    FIELD_RANK,
    FIELD_SAMPLES_PER_S,
    FIELD_STEP,
)
from trainstack.trainers.common.exit_codes import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from trainstack.trainers.common.printable import printable

STDERR_TAIL_LINES = 20
"""Lines of the workers' stderr shown when a run fails (the whole of it is in the file)."""


@dataclass
class LocalRunResult:
    exit_code: int
    """0 done (or already complete); 143 stopped by SIGTERM or preempted, 130 stopped by
    Ctrl-C (SIGINT), each after saving a checkpoint when there was time; 2 invalid config;
    other: crash."""
    done: dict[str, Any] | None
    """Rank 0's `done` record, None when the run did not finish."""
    checkpoint_dir: str
    log_path: Path
    wall_s: float
    last_train: dict[str, Any] | None = None
    """The last `train` record from rank 0."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Every JSON record the workers printed, in order."""
    stderr_path: Path | None = None
    """The workers' stderr (torchrun's too), appended run after run."""
    stderr_offset: int = 0
    """Size of `stderr_path` before this run: where this run's part starts."""
    resumed_from: int | None = None
    """The checkpoint step rank 0 resumed from; None for a run that started at step 0."""
    step: int = 0
    """The last step rank 0 reported (start, resume, train, preempted or done)."""
    stopped_at: int | None = None
    """The step at which rank 0 stopped for a signal (its `preempted` record)."""
    saved_step: int | None = None
    """The newest complete checkpoint after the run."""
    saved_name: str | None = None
    """That checkpoint's folder name (`step-00000030` for the bundled trainers; your code
    may not pad the step)."""
    interrupted: str | None = None
    """The signal that stopped the launcher ("SIGTERM", "SIGINT"), if any."""
    already_complete: bool = False
    """The newest checkpoint had reached `steps`: nothing was started."""
    checkpoint_path: str | None = None
    """For an already complete run, its final checkpoint."""
    error: str | None = None
    """Rank 0's one line when the run stopped on a checkpoint the storage refused (its
    `failed` record's `error`): the run's outcome line, exit 2."""


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def headline(result: LocalRunResult) -> str:
    """One line saying how the run ended."""
    if result.already_complete:
        return (
            f"already complete at step {result.saved_step} (checkpoint "
            f"{result.checkpoint_path}); --fresh starts over"
        )
    stopped = result.exit_code in (PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE)
    if result.done is None and stopped and (result.interrupted or result.stopped_at is not None):
        step = result.stopped_at if result.stopped_at is not None else result.step
        newest = result.saved_name or step_name(result.saved_step or 0)
        # Compared with the step it stopped at however that was learnt (a stop record, else
        # the last step logged): a checkpoint at that step was saved on the way out.
        if result.saved_step == step:
            saved = f"checkpoint {newest} saved"
            return f"interrupted at step {step}; {saved}; run the same command to resume"
        if result.saved_step is not None:
            return (
                f"interrupted at step {step} before a checkpoint was saved; the newest is "
                f"{newest}; run the same command to resume from it"
            )
        return (
            f"interrupted at step {step} before any checkpoint was saved; run the same "
            "command to start again"
        )
    if result.done is not None:
        line = f"done at step {result.done.get(FIELD_STEP, result.step)}"
        if result.resumed_from:
            line += f"; resumed from step {result.resumed_from}"
        return line
    if result.exit_code == 0:
        # Your own code that printed no `done` line: its exit codes say it finished.
        return f"finished at step {result.step}" if result.step else "finished"
    return f"failed with exit code {result.exit_code} at step {result.step}"


def summary_rows(result: LocalRunResult, workers: int) -> list[tuple[str, str]]:
    done = result.done or {}
    last = result.last_train or {}
    rows: list[tuple[str, Any]] = [
        ("exit code", result.exit_code),
        ("workers", workers),
        ("steps", done.get(FIELD_STEP, last.get(FIELD_STEP, result.step))),
        ("resumed from", None if not result.resumed_from else f"step {result.resumed_from}"),
        ("final loss", done.get(FIELD_LOSS, last.get(FIELD_LOSS))),
        ("test accuracy", done.get("test_accuracy")),
        ("wall time (s)", round(result.wall_s, 2)),
        ("samples/s", done.get(FIELD_SAMPLES_PER_S, last.get(FIELD_SAMPLES_PER_S))),
        ("checkpoint dir", result.checkpoint_dir),
        ("log file", result.log_path),
        ("params_sha256", done.get(FIELD_PARAMS_SHA256)),
    ]
    return [(name, _fmt(value)) for name, value in rows]


def print_line(console: Console, text: str) -> None:
    """`text` as one line, whatever the console's width (no markup, no wrapping), with the
    control characters a terminal would act on escaped (`printable`: the run's processes
    print what they like)."""
    console.print(printable(text), markup=False, highlight=False, soft_wrap=True)


def print_summary(result: LocalRunResult, workers: int, run_name: str, console: Console) -> None:
    """The headline and the summary: a table on a terminal, `name: value` lines elsewhere."""
    rows = summary_rows(result, workers)
    if not console.is_terminal:
        print_line(console, f"trainstack local-run {run_name}: {headline(result)}")
        for name, value in rows:
            print_line(console, f"{name}: {value}")
        return
    table = Table(title=f"trainstack local-run: {run_name}", caption=headline(result))
    table.add_column("metric", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


def stderr_tail(result: LocalRunResult, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last `lines` lines this run wrote to its stderr file."""
    if result.stderr_path is None or not result.stderr_path.exists():
        return []
    with result.stderr_path.open("rb") as f:
        f.seek(result.stderr_offset)
        text = f.read().decode(errors="replace")
    return text.splitlines()[-lines:]


def print_failure(result: LocalRunResult, console: Console) -> None:
    """What each failed process of your code printed last (its wrapper's `failed` lines),
    then the workers' last stderr lines and where the rest is."""
    for record in result.events:
        if record.get(FIELD_EVENT) != EVENT_FAILED or not record.get("last_lines"):
            continue
        rank, code = record.get(FIELD_RANK), record.get("exit_code")
        print_line(console, f"rank {rank} exited {code}; its last output lines:")
        for line in record["last_lines"]:
            print_line(console, f"  {line}")
    tail = stderr_tail(result)
    if tail:
        print_line(console, f"last {len(tail)} lines of {result.stderr_path}:")
        for line in tail:
            print_line(console, f"  {line}")


class PlainProgress:
    """Progress without a terminal: a line when the run starts or resumes and one every
    `every_s` seconds while rank 0 reports new steps."""

    def __init__(self, console: Console, total: int | None, every_s: float) -> None:
        self.console, self.total, self.every_s = console, total, every_s
        self.started = time.monotonic()
        self._last_line = self.started
        self._pending: str | None = None
        self.quiet = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def note(self, text: str) -> None:
        if not self.quiet:
            print_line(self.console, text)

    def step(self, step: int, loss: float | None, samples_per_s: float | None) -> None:
        parts = [f"step {step}" if self.total is None else f"step {step}/{self.total}"]
        if loss is not None:
            parts.append(f"loss {loss:.4f}")
        if samples_per_s is not None:
            parts.append(f"{samples_per_s:.0f} samples/s")
        parts.append(f"{time.monotonic() - self.started:.0f}s elapsed")
        self._pending = ", ".join(parts)
        self.tick()

    def tick(self) -> None:
        now = time.monotonic()
        if self._pending is not None and now - self._last_line >= self.every_s:
            self.note(self._pending)
            self._pending, self._last_line = None, now

    def stopping(self) -> None:
        """A signal arrived: the outcome line is the next and last thing printed."""
        self.quiet = True


class LiveProgress:
    """A progress bar on a terminal (cleared when the run ends)."""

    def __init__(self, console: Console, total: int | None, run_name: str) -> None:
        # Your own code need not say how many steps it runs: then the bar pulses and the
        # count has no total.
        steps = "step {task.completed}" if total is None else "{task.completed}/{task.total} steps"
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn(steps),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task(run_name, total=total, stats="")
        self.console = console
        self.quiet = False

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def note(self, text: str) -> None:
        if not self.quiet:
            self.progress.console.print(
                printable(text), markup=False, highlight=False, soft_wrap=True
            )

    def step(self, step: int, loss: float | None, samples_per_s: float | None) -> None:
        stats = "" if loss is None else f"loss {loss:.4f}"
        if samples_per_s is not None:
            stats += f"  {samples_per_s:.0f} samples/s"
        self.progress.update(self.task, completed=step, stats=stats)

    def tick(self) -> None:
        return None

    def stopping(self) -> None:
        self.quiet = True
        self.progress.update(self.task, stats="stopping: saving a checkpoint")

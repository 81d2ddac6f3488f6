"""Run `trainstack plan --stack STACK` in COUNT fresh processes and report what each printed.

`python -W always::ResourceWarning -m tests.unit.plan_at_exit STACK COUNT` prints one JSON
object per line: `{"exit": <status>, "stdout_first_line": ..., "stderr": ...}`.

What is under test is the end of a process: the interpreter's exit after a plan has
succeeded, where open asyncio loops used to be finalized (infra/mocks.py). So every plan
runs in a process of its own that exits the way the `trainstack` console script exits
(`SystemExit` from typer, then the interpreter's own shutdown: thread joins, atexit, the
garbage collector), never through `os._exit`. The processes are forked from this one after
the imports, so each starts from the same imported modules without paying for them again;
no event loop or extra thread exists before a fork (checked).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pulumi_gcp

from trainstack.infra.cli import app

# The pulumi_gcp modules a GPU stack's plan uses, loaded once here (speed only: a module not
# listed is loaded by each child, as a fresh process would load it). pulumi_gcp loads a
# module lazily, on its first attribute other than the introspection ones
# (pulumi/_utils.py `_LazyModule`), hence the `__all__` lookup.
for _name in (
    "cloudquota",
    "compute",
    "container",
    "logging",
    "monitoring",
    "projects",
    "secretmanager",
    "serviceaccount",
    "storage",
):
    getattr(getattr(pulumi_gcp, _name), "__all__", None)


def _plan_in_child(stack: str, out: Path, err: Path) -> None:
    """In the forked child: stdout and stderr to files, then the console script's path."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["trainstack", "plan", "--stack", stack]
    app()  # raises SystemExit; nothing on the way out catches it


def main(stack: str, count: int) -> None:
    parallel = max(1, os.cpu_count() or 1)
    # No `with` or `finally` between a fork and the child's exit: it would run in the child
    # too (and remove the files the parent still reads). The parent removes them at the end.
    tmp = Path(tempfile.mkdtemp(prefix="plan-at-exit-"))
    files = [(tmp / f"{i}.out", tmp / f"{i}.err") for i in range(count)]
    status: dict[int, int] = {}
    for start in range(0, count, parallel):
        running: dict[int, int] = {}
        for i in range(start, min(start + parallel, count)):
            if threading.active_count() != 1:
                raise RuntimeError("a thread is running before the fork")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _plan_in_child(stack, *files[i])
            running[pid] = i
        while running:
            pid, raw = os.wait()
            status[running.pop(pid)] = os.waitstatus_to_exitcode(raw)
    for i, (out, err) in enumerate(files):
        lines = out.read_text().splitlines()
        record = {
            "exit": status[i],
            "stdout_first_line": lines[0] if lines else "",
            "stderr": err.read_text(),
        }
        print(json.dumps(record))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

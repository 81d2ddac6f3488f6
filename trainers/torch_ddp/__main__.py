"""`python -m trainstack.trainers.torch_ddp [--config FILE] [--key=value ...]`."""

from __future__ import annotations

import logging
import os
import sys

from trainstack.trainers.common.cli import help_text
from trainstack.trainers.common.signals import watch_parent
from trainstack.trainers.crash import reported_crash


def _run() -> int:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(help_text())
        return 0
    # A local run's workers must not outlive its launcher (torchrun or the CLI).
    watch_parent()
    with reported_crash():
        # Imported late so `--help` answers without loading torch.
        from trainstack.trainers.torch_ddp.train import main

        return main(sys.argv[1:])


def _exit(code: int) -> None:
    """Leave without interpreter finalization.

    Collective handles (FSDP's prefetch work, DDP's reducer) can outlive
    destroy_process_group inside modules still referenced at exit; when finalization frees
    them, gloo's worker threads take the GIL of a dying interpreter and the process aborts
    with SIGABRT ("terminate called without an active exception") after a successful run.
    Every file and log was committed before main() returned, so skipping finalization is safe.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(_run())

"""`python -m trainstack.trainers.tf_multiworker [--config FILE] [--key=value ...]`."""

from __future__ import annotations

import logging
import os
import sys

from trainstack.trainers.common.cli import help_text
from trainstack.trainers.common.contract import TF_MODULE
from trainstack.trainers.common.signals import watch_parent
from trainstack.trainers.crash import reported_crash


def _run() -> int:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(help_text(TF_MODULE))
        return 0
    # A local run's workers must not outlive its launcher (torchrun or the CLI).
    watch_parent()
    with reported_crash():
        # Imported late so `--help` answers without loading anything heavy.
        from trainstack.trainers.tf_multiworker.launch import main

        return main(sys.argv[1:])


def _exit(code: int) -> None:
    """Leave without interpreter finalization: TensorFlow's gRPC servers and collective
    executors keep threads that can block or abort a finishing interpreter after a
    successful run. Every file and log line was committed before main() returned."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(_run())

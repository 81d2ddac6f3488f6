"""`python -m trainers.torch_ddp [--config FILE] [--key=value ...]`."""

from __future__ import annotations

import sys

from trainers.common.cli import help_text


def _run() -> int:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(help_text())
        return 0
    # Imported late so `--help` answers without loading torch.
    from trainers.torch_ddp.train import main

    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(_run())

"""A bundled trainer's crash as the same `failed` record your own code's wrapper prints.

    with reported_crash():
        return main(argv)

An exception out of the block prints one JSON line on stdout, `{"event": "failed", "rank": R,
"exit_code": 1, "last_lines": [...]}` (the traceback's last lines), then propagates as
before: the interpreter prints the traceback on stderr and exits 1, and under the elastic
launcher (`trainstack.trainers.elastic`) it is still told a lost peer (4) from a code error
(1). So `trainstack local-run` shows the failing rank's last lines for the bundled trainers
as it does for your code (`trainstack.trainers.local_report.print_failure`), and `trainstack
status` reads the same record from the cloud's logs. A lost peer prints no record: it is not
this rank's failure.

Standard library only: the trainers' entry points use it before torch or TensorFlow load.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from trainstack.trainers.common.contract import EVENT_FAILED, FIELD_EVENT, FIELD_RANK
from trainstack.trainers.common.exit_codes import CRASH_EXIT_CODE
from trainstack.trainers.elastic import peer_lost

TAIL_LINES: Final = 20
"""Traceback lines kept in the record, as many as the wrapper keeps of your code's output
(`trainstack.trainers.user_code.TAIL_LINES`)."""


def failed_record(exc: BaseException, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The `failed` record for `exc` raised on this rank (`RANK`, else the node's rank)."""
    env = dict(os.environ) if env is None else env
    rank = env.get("RANK") or env.get("TRAINSTACK_NODE_RANK") or "0"
    lines = "".join(traceback.format_exception(exc)).rstrip("\n").splitlines()
    return {
        FIELD_EVENT: EVENT_FAILED,
        FIELD_RANK: int(rank) if rank.isdigit() else 0,
        "exit_code": CRASH_EXIT_CODE,
        "last_lines": lines[-TAIL_LINES:],
    }


@contextmanager
def reported_crash() -> Iterator[None]:
    """Print the `failed` record of an exception leaving the block, then let it go on."""
    try:
        yield
    except Exception as exc:
        if not peer_lost(exc):
            sys.stdout.write(json.dumps(failed_record(exc)) + "\n")
            sys.stdout.flush()
        raise

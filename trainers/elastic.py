"""torchrun for a multi-node run, with a rendezvous that is lost reported as retryable.

    python -m trainers.elastic TORCHRUN_ARGS...

The node launcher (`trainers.node`) starts this instead of `python -m torch.distributed.run`
when the run spans several nodes. It is torchrun (`torch.distributed.run.main`) with one
difference: when torchrun's agent cannot rendezvous (the store on node 0 is gone because
node 0 was preempted, no quorum within the join timeout, a closed rendezvous) it exits 3,
which the platforms retry (the Compute Engine unit restarts it; a GKE pod is replaced),
instead of the 1 of an uncaught exception, which fails a GKE Job like a trainer bug. A
worker that keeps failing still exits 1 once torchrun's `--max-restarts` are spent.

It also sets `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (unless set): with the agent's shared
TCP store (torch >= 2.4's default) the rank-0 node publishes the workers' master address
only in its own first rendezvous round, so a replacement node that joins a later round
waits on `store.get(MASTER_ADDR)` for ever (`DynamicRendezvousHandler.next_rendezvous`,
torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, torch 2.13). Without sharing,
rank 0 publishes a fresh master address and port in every round.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from trainers.common.exit_codes import SETUP_FAILED_EXIT_CODE

SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def main(args: Sequence[str]) -> int:
    os.environ.setdefault(SHARE_STORE_ENV, "1")
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(list(args))
    except RendezvousError as exc:
        print(
            f"trainstack-elastic: rendezvous lost ({type(exc).__name__}: {exc}); exit "
            f"{SETUP_FAILED_EXIT_CODE} so the platform starts this node again",
            file=sys.stderr,
            flush=True,
        )
        return SETUP_FAILED_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""torchrun for a multi-node run, whose exit code tells a lost peer from a code error.

    python -m trainstack.trainers.elastic TORCHRUN_ARGS...          # the node's agent (torchrun)
    python -m trainstack.trainers.elastic --worker MODULE ARGS...    # one worker, under that agent

The node launcher (`trainstack.trainers.node`) starts the agent instead of `python -m
torch.distributed.run` when the run spans several nodes, with `--max-restarts=0` and each
bundled trainer worker wrapped by `--worker`. Platforms restart a node on a retryable exit
and count only real failures against their budget (a GKE Job's podFailurePolicy and
backoffLimitPerIndex, the Compute Engine unit's restart rule), so the agent does not retry
in place: torchrun's own restart counter cannot tell a peer that vanished from a worker that
raised, and each lost peer would spend one of its restarts. Instead, when the worker group
fails the agent exits with what the failed workers say (`exit_code_for`):

- 4 (`PEER_LOST_EXIT_CODE`): every failed worker lost a peer (a gloo/NCCL connection reset
  or closed, the store gone), or saved and stopped (143) because a peer was preempted; or
  the agent itself lost the rendezvous (node 0 and its store gone, no quorum in time). The
  platform starts the node again without counting a failure and every worker resumes from
  the newest checkpoint.
- 6 (`CAPACITY_ENDED_EXIT_CODE`): the workers saved and stopped because the machine's
  capacity ends (`trainstack.trainers.common.deadline`); any others were stopped by torchrun.
- 2: a worker rejected its config or checkpoint.
- 1: anything else, a code error (an exception, an abort, the OOM killer): retrying cannot
  help, and the platform stops the run at once.

A worker (`--worker`) runs the trainer module as `python -m MODULE` would; an exception it
raises that is a lost peer (`peer_lost`) exits 4, any other prints its traceback and exits
1. The workers of your own code are not wrapped: their exit status is theirs (exit 4 to
say a peer was lost).

It also sets `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (unless set): with the agent's shared
TCP store (torch >= 2.4's default) the rank-0 node publishes the workers' master address
only in its own first rendezvous round, so a replacement node that joins a later round
waits on `store.get(MASTER_ADDR)` for ever (`DynamicRendezvousHandler.next_rendezvous`,
torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, torch 2.13). Without sharing,
rank 0 publishes a fresh master address and port in every round.

And it sets `TORCH_NCCL_ASYNC_ERROR_HANDLING=2` (`nccl_error_handling`) unless either of its
names is set: torchrun gives its workers 1 when it is unset
(`LocalElasticAgent._start_workers`, torch/distributed/elastic/agent/server/
local_elastic_agent.py, torch 2.13), and 1 (TearDown) and torch's own default 3 (SkipCleanUp)
make ProcessGroupNCCL's watchdog thread rethrow a remote rank's failure, which aborts the
process (SIGABRT, read as a code error) before Python sees it. 2 (CleanUpOnly) aborts the
communicators without tearing the process down (`ErrorHandlingMode`,
torch/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp), so the next use of the
communicator raises `DistBackendError: NCCL communicator was aborted on rank N. Original
reason for failure was: ...` (`NCCLComm::getNcclComm`, torch/csrc/distributed/c10d/
NCCLUtils.cpp) in the worker, which `peer_lost` reads as a lost peer (exit 4).
"""

from __future__ import annotations

import os
import re
import runpy
import signal
import sys
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from trainstack.trainers.common.exit_codes import (
    CAPACITY_ENDED_EXIT_CODE,
    CONFIG_ERROR_EXIT_CODE,
    CRASH_EXIT_CODE,
    PEER_LOST_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
)

SHARE_STORE_ENV: Final = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
NCCL_ERROR_HANDLING_ENV: Final = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
NCCL_ERROR_HANDLING_NAMES: Final = (NCCL_ERROR_HANDLING_ENV, "NCCL_ASYNC_ERROR_HANDLING")
"""The variable's names, newest first (`TORCH_NCCL_ASYNC_ERROR_HANDLING` in
ProcessGroupNCCL.hpp): a user who set either one chose the mode."""
NCCL_CLEAN_UP_ONLY: Final = "2"
"""`ErrorHandlingMode::CleanUpOnly`: abort the communicators, keep the process, so a lost
peer surfaces as a Python exception the worker can classify."""
WORKER_FLAG: Final = "--worker"
PEER_LOST_MESSAGE: Final = re.compile(
    # gloo (torch/third_party/gloo/gloo/transport/tcp/pair.cc): a peer process or its node
    # went away in the middle of a collective.
    r"Connection reset by peer|Connection closed by peer|Broken pipe|Connection refused"
    # NCCL (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, NCCLUtils.cpp): the
    # communicator was aborted after a remote rank failed, or a collective waited out its
    # timeout on a peer whose machine vanished without closing its connections.
    r"|remote process exited or there was a network error|NCCL communicator was aborted"
    r"|ncclRemoteError|Watchdog caught collective operation timeout"
)
PEER_EXIT_CODES: Final = frozenset({PEER_LOST_EXIT_CODE, PREEMPTED_EXIT_CODE, -signal.SIGTERM})
"""Worker outcomes that say nothing is wrong with the code: a lost peer, a checkpoint saved
because a peer was preempted, and torchrun stopping the rest of the group."""


def nccl_error_handling(env: Mapping[str, str]) -> dict[str, str]:
    """What to add to `env` so NCCL errors raise in the workers instead of aborting them:
    `TORCH_NCCL_ASYNC_ERROR_HANDLING=2`, or nothing when the user set either name."""
    if any(name in env for name in NCCL_ERROR_HANDLING_NAMES):
        return {}
    return {NCCL_ERROR_HANDLING_ENV: NCCL_CLEAN_UP_ONLY}


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def peer_lost(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a collective or the store failing because a
    peer process, its node or node 0's store went away."""
    for item in _chain(exc):
        names = {cls.__name__ for cls in type(item).__mro__}
        # torch.distributed's network and store errors: the store on node 0 is gone.
        if names & {"DistNetworkError", "DistStoreError"}:
            return True
        if isinstance(item, RuntimeError) and PEER_LOST_MESSAGE.search(str(item)):
            return True
    return False


def exit_code_for(worker_codes: Iterable[int]) -> int:
    """The agent's exit code for the exit codes of its failed workers (negative: a signal)."""
    codes = set(worker_codes)
    if CONFIG_ERROR_EXIT_CODE in codes:
        return CONFIG_ERROR_EXIT_CODE
    if CAPACITY_ENDED_EXIT_CODE in codes and codes <= PEER_EXIT_CODES | {CAPACITY_ENDED_EXIT_CODE}:
        # Every worker saved for the capacity's end; torchrun stopped the slower ones.
        return CAPACITY_ENDED_EXIT_CODE
    if codes and codes <= PEER_EXIT_CODES:
        return PEER_LOST_EXIT_CODE
    return CRASH_EXIT_CODE


def _log(message: str) -> None:
    print(f"trainstack-elastic: {message}", file=sys.stderr, flush=True)


def _leave(code: int) -> None:
    # No interpreter finalization: gloo's threads abort a dying interpreter (SIGABRT) when
    # collective handles are freed late (see trainers/torch_ddp/__main__.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def worker(args: Sequence[str]) -> int:
    """Run `python -m MODULE ARGS` in this process (`args` = MODULE, ARGS...)."""
    if not args:
        _log(f"{WORKER_FLAG} needs a module")
        return CONFIG_ERROR_EXIT_CODE
    module = args[0]
    sys.argv = [module, *args[1:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except Exception as exc:  # noqa: BLE001  (any exception: a code error unless a lost peer)
        if peer_lost(exc):
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            _log(
                f"a peer is gone ({type(exc).__name__}: {first[:300]}); exit {PEER_LOST_EXIT_CODE}"
            )
            _leave(PEER_LOST_EXIT_CODE)
        traceback.print_exc()
        _leave(CRASH_EXIT_CODE)
    return 0


def main(args: Sequence[str]) -> int:
    if args and args[0] == WORKER_FLAG:
        return worker(args[1:])
    os.environ.setdefault(SHARE_STORE_ENV, "1")
    os.environ.update(nccl_error_handling(os.environ))
    from torch.distributed import DistNetworkError, DistStoreError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(list(args))
    except (RendezvousError, DistNetworkError, DistStoreError) as exc:
        _log(
            f"rendezvous lost ({type(exc).__name__}: {exc}); exit {PEER_LOST_EXIT_CODE} so the "
            "platform starts this node again"
        )
        return PEER_LOST_EXIT_CODE
    except ChildFailedError as exc:
        codes = {rank: failure.exitcode for rank, failure in exc.failures.items()}
        code = exit_code_for(codes.values())
        _log(f"workers failed (rank: exit code) {codes}; exit {code}")
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

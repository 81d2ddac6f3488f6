"""Exit codes of both trainer processes, which launchers and restart policies match on.

0 done; 1 a crash (a code error: retrying cannot help), or a local run's launcher was
killed (`trainstack.trainers.common.signals.watch_parent`); 2 invalid config, cluster environment or
checkpoint; 3 (node launchers only) setup failed before training started (install, a
missing framework): retryable a bounded number of times; 4 a peer node, task or the
rendezvous was lost (a node disappeared, pod 0 and its store went away): restart and
resume from the newest checkpoint, never counted as a failure; 5 (node launchers only)
this machine has fewer usable accelerators than the plan bought: stop, retrying on it
cannot help; 6 the machine's capacity ends (a flex-start run duration,
`trainstack.trainers.common.deadline`): a checkpoint was saved before it and the run ended
as `capacity_ended`, not an error, and nothing trains again on the machine that is going; 143
preempted after saving a checkpoint (128 + SIGTERM, what a shell and
Kubernetes report for a SIGTERM death, so Job `podFailurePolicy` and restart wrappers can
match it).
"""

from __future__ import annotations

from typing import Final

DONE_EXIT_CODE: Final = 0
CRASH_EXIT_CODE: Final = 1
PEER_LOST_EXIT_CODE: Final = 4
LAUNCHER_LOST_EXIT_CODE: Final = 1
CONFIG_ERROR_EXIT_CODE: Final = 2
SETUP_FAILED_EXIT_CODE: Final = 3
ACCELERATORS_MISSING_EXIT_CODE: Final = 5
CAPACITY_ENDED_EXIT_CODE: Final = 6
PREEMPTED_EXIT_CODE: Final = 143
INTERRUPTED_EXIT_CODE: Final = 130
"""`trainstack local-run` after Ctrl-C (SIGINT), what a shell reports for it; SIGTERM gives 143."""

"""Exit codes of both trainer processes, which launchers and restart policies match on.

0 done; 1 a crash (torchrun reports any failed worker as 1), or a TensorFlow peer task was
lost (restart the job: it resumes from the newest checkpoint), or a local run's launcher
was killed (`trainers.common.signals.watch_parent`); 2 invalid config, cluster
environment or checkpoint; 3 (node launchers only) setup failed before training started
(install, rendezvous, a missing framework): retryable; 143 preempted after saving a
checkpoint (128 + SIGTERM, what a shell and Kubernetes report for a SIGTERM death, so Job
`podFailurePolicy` and restart wrappers can match it).
"""

from __future__ import annotations

from typing import Final

DONE_EXIT_CODE: Final = 0
PEER_LOST_EXIT_CODE: Final = 1
LAUNCHER_LOST_EXIT_CODE: Final = 1
CONFIG_ERROR_EXIT_CODE: Final = 2
SETUP_FAILED_EXIT_CODE: Final = 3
PREEMPTED_EXIT_CODE: Final = 143
INTERRUPTED_EXIT_CODE: Final = 130
"""`trainstack local-run` after Ctrl-C (SIGINT), what a shell reports for it; SIGTERM gives 143."""

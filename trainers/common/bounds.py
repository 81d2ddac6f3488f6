"""Upper bounds of the stack config's numbers, each set by where the number goes.

A number with only a lower bound passed the plan at any size: `limits.max_run_hours: 1e300`
became a run limit bash arithmetic wraps around, so the launcher refused to start while the
machines billed. Every numeric key now has a ceiling the code it reaches accepts, and floats
must be finite (an infinite or NaN cap compares false with everything and never fires).
"""

from __future__ import annotations

from typing import Final

MAX_COUNT: Final = 2**53
"""Integer keys (steps, batch sizes, intervals, model sizes): the largest integer a float64
holds exactly. The Pulumi engine passes resource inputs as protobuf Struct numbers, which are
doubles (google/protobuf/struct.proto: `double number_value = 2;`), so a larger integer
reaches the provider rounded."""

MAX_SEED: Final = 2**32 - 1
"""`trainer.seed`: the TensorFlow trainer seeds NumPy's global generator with it
(tf_keras/src/utils/tf_utils.py `set_random_seed` calls `np.random.seed(seed)`), which
refuses anything outside 0..2**32 - 1 ("Seed must be between 0 and 2**32 - 1")."""

MAX_RUN_HOURS: Final = 24 * 365
"""`limits.max_run_hours`: a year. The limit reaches the platforms in seconds
(`LimitsConfig.max_run_seconds`, 31,536,000 at most): Vertex's `scheduling.timeout` is a
protobuf Duration (aiplatform v1 discovery document, Duration.seconds "Must be from 0 to
315,576,000,000 inclusive"), the GKE Job's `activeDeadlineSeconds` an int64, and the GCE and
TPU startup scripts add it to the run's start time in bash arithmetic (64-bit signed): a
year stays orders of magnitude inside all three, and a guardrail longer than a year guards
nothing."""

MAX_GRACE_S: Final = 3600.0
"""`trainer.preemption_grace_s`: an hour, far above any stop notice the platforms give
(GCE preemption 30 s, a GKE Spot pod 15 s); the trainer's watchdog is a `threading.Timer`,
which refuses waits above `threading.TIMEOUT_MAX`."""

MAX_LOCAL_WORKERS: Final = 512
"""`local.workers`: processes on this one machine. Each gloo rank keeps a TCP connection to
every other rank (a full mesh: pytorch/gloo's gloo/rendezvous/context.cc
`Context::connectFullMesh`), so n workers hold n - 1 sockets each
beside their own files, under the usual soft open-files limit of 1024 per process
(`ulimit -n`)."""

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

MAX_GLOBAL_BATCH: Final = 2**20
"""`trainer.global_batch_size`: 1,048,576 samples a step, 16 times the largest published
data-parallel batch (65,536 sequences: BERT trained with LAMB, You et al. 2019,
https://arxiv.org/abs/1904.00962, Table 1) and far past the bundled datasets (digits: 1,797
samples; synthetic: 8,192 by default). Every rank builds its share of it in memory each
step, so 10^12 passed the plan and failed on the machines."""

MAX_LEARNING_RATE: Final = 10.0
"""`trainer.learning_rate`: both bundled trainers use Adam (torch AdamW, Keras Adam), whose
step moves each parameter by about the learning rate whatever the gradient's scale (Kingma &
Ba, https://arxiv.org/abs/1412.6980, section 2.1: "the effective magnitude of the steps
taken in parameter space at each timestep are approximately bounded by the stepsize setting
α"); the models' weights start well under 1, so a rate above 10 moves every weight ten
times its scale at each step (1e308 is past even float32's range, 3.4e38, the weights'
type)."""

MAX_TOTAL_USD: Final = 10**9
"""`limits.max_total_usd`: a billion US dollars, above a year (`MAX_RUN_HOURS`) of the most
the catalog plans for one gpu_cluster stack, 1,000 machines (`catalog.gpus.MAX_NODES`) of
its dearest type, a2-megagpu-16g at $55.74/h list (`catalog.prices.MACHINE_PRICES`): about
$488 million. A cap no stack can reach caps nothing, and 1e300 printed a 301-digit amount in
the plan."""

MAX_REQUIREMENT_CHARS: Final = 8190
"""A line of `trainer.requirements`: the longest request line Apache httpd serves by default
(`LimitRequestLine` 8190, https://httpd.apache.org/docs/2.4/mod/core.html#limitrequestline;
nginx's default `large_client_header_buffers` is 8k too), so a direct-reference URL longer
than that cannot be fetched from a default index, and each line is also one
`Requires-Dist:` header of the package's metadata. 200,000 characters passed and were printed
whole in the plan."""

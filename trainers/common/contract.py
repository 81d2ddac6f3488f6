"""Names shared by the trainers, the components that launch them and the dashboard that
reads their logs: one place, so a rename cannot split the producer from its readers.

Framework-free on purpose: components import it without importing torch or TensorFlow.
"""

from __future__ import annotations

from typing import Final, Literal

Framework = Literal["torch", "tensorflow"]

TORCH_MODULE: Final = "trainstack.trainers.torch_ddp"
"""`python -m` module of the PyTorch trainer (DDP/FSDP, run under torchrun)."""
TF_MODULE: Final = "trainstack.trainers.tf_multiworker"
"""`python -m` module of the TensorFlow trainer (one process per TF task)."""
TRAINER_MODULES: Final[dict[Framework, str]] = {"torch": TORCH_MODULE, "tensorflow": TF_MODULE}
"""The bundled trainer module of each framework."""
TORCHRUN_MODULES: Final = frozenset({TORCH_MODULE})
"""Modules started by torchrun (one process per accelerator); others run once per node/task."""
NODE_MODULE: Final = "trainstack.trainers.node"
"""`python -m` module of the node launcher, run once per machine: it starts torchrun with one
process per accelerator for `TORCHRUN_MODULES`, the trainer once for the others."""

# `event` values of the JSON log lines (trainstack.trainers.common.metrics.MetricsLogger.log).
EVENT_START: Final = "start"
EVENT_LAUNCH: Final = "launch"
"""The wrapper around your own code (`trainstack.trainers.user_code`) started it; your code's own
`start`/`resume` line, if it prints one, says from which step."""
EVENT_EXIT: Final = "exit"
"""`trainstack local-run` ended the run with this `exit_code` (the last line of an attempt
in the run's log), so `trainstack status` tells finished, stopped and failed runs apart."""
EVENT_FAILED: Final = "failed"
"""Your own code exited non-zero (not 143): the wrapper's line with its last output lines. A
bundled trainer's rank 0 says it too when a checkpoint could not be written (a full disk, a
read-only folder): `error` is the one line that names the folder and the cause."""
EVENT_RESUME: Final = "resume"
EVENT_TRAIN: Final = "train"
EVENT_CHECKPOINT_BEGIN: Final = "checkpoint_begin"
EVENT_CHECKPOINT: Final = "checkpoint"
EVENT_CHECKPOINT_WRITTEN: Final = "checkpoint_written"
"""Rank 0 committed a checkpoint (`write_s`: from the start of the save to the commit); for an
async save this comes after training went on, from the writer thread."""
EVENT_CHECKPOINT_SKIPPED: Final = "checkpoint_skipped"
"""Rank 0 passed over a marked step folder that is not a complete checkpoint (`reason`: an
empty marker, a truncated file; `path`; `resumed_from`: the step it resumes from instead, None
for step 0), one line per folder, before its `start`
(`trainstack.trainers.common.checkpoint.Skipped`)."""
EVENT_PREEMPTED: Final = "preempted"
EVENT_CAPACITY_ENDED: Final = "capacity_ended"
"""Every rank of the bundled torch trainer stopped at this step because the machine's
capacity ends soon (`DEADLINE_ENV`); its checkpoint follows (`reason: capacity_ended`)."""
EVENT_DONE: Final = "done"
EVENT_IDLE: Final = "idle"
EVENT_SERVER: Final = "server"

# Fields of those lines that readers (the dashboard's log-based metrics, local-run) rely on.
FIELD_EVENT: Final = "event"
FIELD_STEP: Final = "step"
FIELD_LOSS: Final = "loss"
FIELD_LR: Final = "lr"
FIELD_STEP_TIME: Final = "step_time_s"
FIELD_SAMPLES_PER_S: Final = "samples_per_s"
FIELD_TOKENS_PER_S: Final = "tokens_per_s"
FIELD_MFU: Final = "mfu"
FIELD_PEAK_FLOPS: Final = "peak_flops"
FIELD_DATA_WAIT: Final = "data_wait_s"
FIELD_STALL: Final = "stall_s"
FIELD_PARAMS_SHA256: Final = "params_sha256"
FIELD_RANK: Final = "rank"
FIELD_NODE: Final = "node"
FIELD_WORKER: Final = "worker"
FIELD_RUN: Final = "run"
FIELD_SEVERITY: Final = "severity"
FIELD_TIME: Final = "time"
FIELD_GPU_UTIL: Final = "gpu_util_pct"
"""GPU utilization (percent, from NVML) of the rank's device; absent without CUDA or NVML."""

TF_CPU_REPLICAS_ENV: Final = "TRAINSTACK_TF_CPU_REPLICAS"
"""Logical CPU devices for the TensorFlow trainer's `mirrored` on a machine without GPUs
(set by local runs, read by `trainstack.trainers.tf_multiworker.train.configure`)."""
EXIT_WITH_PARENT_ENV: Final = "TRAINSTACK_EXIT_WITH_PARENT"
"""Set to "1" by `trainstack local-run`: the trainer exits as soon as its launcher (torchrun
or the CLI) is gone (`trainstack.trainers.common.signals.watch_parent`)."""
CLOUD_LOGGING_ENV: Final = "TRAINSTACK_CLOUD_LOGGING"
"""Set by the GCE and TPU VM startup scripts to the monitored resource type the node launcher
(`trainstack.trainers.node`) writes its target's lines as, straight to the Cloud Logging API
(`trainstack.trainers.common.cloud_logging`): `gce_instance` or `tpu_worker`. Unset, empty or `0`: the
lines only go to stdout (Vertex and GKE ship stdout themselves)."""
CLOUD_LOGGING_RESOURCES: Final = ("gce_instance", "tpu_worker")
"""The values `CLOUD_LOGGING_ENV` accepts."""
LOGGING_ENDPOINT_ENV: Final = "TRAINSTACK_LOGGING_ENDPOINT"
"""Base URL of the Cloud Logging API (default `https://logging.googleapis.com/`); tests point
it at a local fake. The metadata server's host comes from `GCE_METADATA_HOST`, as in
google-auth."""
TPU_NODE_ID_ENV: Final = "TRAINSTACK_TPU_NODE_ID"
"""The TPU node (slice) name, exported by the TPU worker startup script: the `node_id` label
of the `tpu_worker` resource the launcher writes as (the dashboard's `tpu_filters` key)."""
LOG_ID: Final = "trainstack"
"""Log id of the entries the node launcher writes: `projects/<project>/logs/trainstack`."""
COLLECTIVE_TIMEOUT_ENV: Final = "TRAINSTACK_COLLECTIVE_TIMEOUT_S"
"""Seconds a torch.distributed collective may wait for a peer before the run fails (the
process group's `timeout`); unset: torch's default (30 minutes on gloo). `trainstack
local-run` sets it, so a lost or hung peer ends a local run."""

DEADLINE_ENV: Final = "TRAINSTACK_DEADLINE"
"""When this machine's capacity ends (a flex-start machine's run duration), whole seconds
since the Unix epoch; set by the launches of flex-start machines on every process of the run,
unset elsewhere (`trainstack.trainers.common.deadline`)."""
CAPACITY_RUN_ENV: Final = "TRAINSTACK_CAPACITY_RUN_S"
"""The run duration a flex-start machine got (seconds), set by the components on the pods of
a flex-start pool; the pod script turns it into `DEADLINE_ENV` with the node's boot time."""

# Your own code (`trainstack:trainer.entrypoint`): what every process of it receives.
CHECKPOINT_DIR_ENV: Final = "TRAINSTACK_CHECKPOINT_DIR"
DATA_DIR_ENV: Final = "TRAINSTACK_DATA_DIR"
OUTPUT_DIR_ENV: Final = "TRAINSTACK_OUTPUT_DIR"
RUN_NAME_ENV: Final = "TRAINSTACK_RUN_NAME"
NODE_RANK_ENV: Final = "TRAINSTACK_NODE_RANK"
NUM_NODES_ENV: Final = "TRAINSTACK_NUM_NODES"
ACCELERATORS_PER_NODE_ENV: Final = "TRAINSTACK_ACCELERATORS_PER_NODE"
COORDINATOR_ENV: Final = "TRAINSTACK_COORDINATOR"
RUN_CONTRACT_ENV: Final = (
    CHECKPOINT_DIR_ENV,
    DATA_DIR_ENV,
    OUTPUT_DIR_ENV,
    RUN_NAME_ENV,
    NODE_RANK_ENV,
    NUM_NODES_ENV,
    ACCELERATORS_PER_NODE_ENV,
    COORDINATOR_ENV,
)
"""Set on every process of your own code, on every target."""
RESERVED_ENV: Final = frozenset(
    {
        *RUN_CONTRACT_ENV,
        DEADLINE_ENV,
        CAPACITY_RUN_ENV,
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TF_CONFIG",
        "JAX_COORDINATOR_ADDRESS",
        "CUDA_VISIBLE_DEVICES",
    }
)
"""Set by the launchers: `trainstack:trainer.env` may not override them."""
USER_CODE_MODULE: Final = "trainstack.trainers.user_code"
"""Runs one process of your own code (`python -m trainstack.trainers.user_code -- ARGV`): started by the
node launcher for `python -m trainstack.trainers.node --launcher=... -- ARGV`."""
SOURCE_PACKAGE: Final = "trainstack.user_source"
"""Import name under which the package carries your `source` folder (inside the `trainstack`
namespace: the package installs nothing else at top level)."""

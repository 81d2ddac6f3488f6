"""The node launcher: run once per machine, it starts one process per accelerator.

    python -m trainstack.trainers.node [--launcher=auto|torchrun|node] [--procs-per-node=N] MODULE [ARGS...]
    python -m trainstack.trainers.node [--launcher=torchrun|node] [--procs-per-node=N] [--source=DIR]
        [--env=NAME=VALUE]... [--secret-env=NAME=projects/P/secrets/S]... -- ARGV...

Platforms start one command per machine (a Vertex replica runs `python -m <pythonModule>`
once; a GKE pod, a GCE service, a TPU VM worker likewise), but a multi-GPU machine needs one
training process per GPU. The launcher reads where the machine sits in the job from the
platform's environment (`trainstack.trainers.common.cluster`: Vertex `CLUSTER_SPEC`/`TF_CONFIG`, GKE
`JOB_COMPLETION_INDEX`, TPU VM workers, `TRAINSTACK_NODE_RANK`...), counts this machine's
accelerators (`trainstack.trainers.common.accelerators`, `TRAINSTACK_SIMULATED_ACCELERATORS` included),
then runs the target:

- `torchrun` (the default for `trainstack.trainers.torch_ddp`): `python -m torch.distributed.run
  --nnodes=<nodes> --node-rank=<rank> --nproc-per-node=<accelerators>
  --master-addr=<coordinator> --master-port=<port>` with the module (`-m MODULE ARGS`) or
  the argv (`--no-python ARGV`); several nodes get an elastic c10d rendezvous on node 0
  through `python -m trainstack.trainers.elastic` (torchrun that never restarts in place and exits 4
  when a peer or the rendezvous is lost, 1 for a code error). The world size is nodes x accelerators per node and torchrun owns every per-process variable (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_*`;
  Vertex sets `RANK`/`WORLD_SIZE` per node, which torchrun overwrites). The coordinator is
  node 0 (Vertex: `CLUSTER_SPEC` workerpool0's `host:port`, the port Google's own multi-node
  torchrun sample reuses); a single machine outside any cluster uses `--standalone`.
- `node` (the default for every other module, e.g. `trainstack.trainers.tf_multiworker`): the target
  once on this machine, with the platform's environment (`TF_CONFIG`...) passed through.

ARGV after `--` is your own code (`trainstack:trainer.entrypoint`): each of its processes
runs as `python -m trainstack.trainers.user_code -- ARGV` in the source folder, with `--env` values,
`--secret-env` values read from Secret Manager on this machine, and with `node` also
`TF_CONFIG` and JAX's coordinator variables (`trainstack.trainers.user_code`).

Either way the target also gets `TRAINSTACK_NODE_RANK`, `TRAINSTACK_NUM_NODES`,
`TRAINSTACK_ACCELERATORS_PER_NODE` and `TRAINSTACK_COORDINATOR` (`host:port`). With simulated
accelerators it gets `CUDA_VISIBLE_DEVICES=` (so its processes run on CPU with gloo) and
`TRAINSTACK_TF_CPU_REPLICAS=N` (TensorFlow's `mirrored` then has N CPU replicas).

Bundled trainer modules have their arguments checked before anything starts (and, under
torchrun, the global batch against the world size), so a bad flag exits 2 rather than as
torchrun's generic worker failure. SIGTERM or SIGINT to the launcher is passed on to the
target as SIGTERM (torchrun forwards it to its workers, which checkpoint and exit 143).
Under torchrun the target gets `TORCH_NCCL_ASYNC_ERROR_HANDLING=2` unless you set it
(`trainstack.trainers.elastic`).

Before anything starts, a machine with fewer usable accelerators than the plan bought
(`TRAINSTACK_EXPECTED_ACCELERATORS`, set by the GPU targets' launches, not on TPU VMs;
`trainstack.trainers.common.accelerators.check_expected`) stops with exit 5.

Exit codes (those of `components/gpu_startup/launch.sh`; `trainstack.trainers.common.exit_codes`):
  0    training finished
  1    the target failed after it started: a code error (retrying cannot help)
  2    invalid arguments, cluster environment or accelerator count
  3    setup failed before training started (framework missing): retryable
  4    a peer node or the elastic rendezvous was lost (node 0 and its store gone, no
       quorum in time; `trainstack.trainers.elastic`), or a TensorFlow peer task: restart the node,
       never counted as a failure
  5    fewer usable accelerators than TRAINSTACK_EXPECTED_ACCELERATORS: do not restart
  6    this machine's capacity ends (TRAINSTACK_DEADLINE, a flex-start run duration): the
       target saved and stopped before it (`trainstack.trainers.node_capacity`)
  143  preempted: SIGTERM reached this machine, or the target itself exited 143 (saved and
       stopped). Ranks that torchrun stops after another rank failed may print `preempted`
       too; with torchrun's 1 that is still a failure (1), never a preemption.

Your own code (`-- ARGV`) exits with its own status: its wrapper reports it started, so its
failures are never read as 3, and its exit 143 (saved after SIGTERM) is 143.

With `TRAINSTACK_RUN_RECORD` (GCE, GKE, TPU) the launcher keeps the run's records for the
supervisor (`trainstack.trainers.common.run_records`): it writes this node's heartbeat while
the target runs, polls the stop request, and records the run's end (`done`, `stopped`,
`capacity_ended`, or `failed` with stage `trainer` for an exit in `TRAINSTACK_RUN_FINAL_CODES`).

Standard library only at import time, and Python 3.10 (the prebuilt images' version).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import IO, Any, Final, Literal

from trainstack.trainers.common import cloud_logging
from trainstack.trainers.common.accelerators import (
    EXPECTED_ACCELERATORS_ENV,
    SIMULATED_ACCELERATORS_ENV,
    AcceleratorsMissing,
    check_expected,
    count_accelerators,
)
from trainstack.trainers.common.cluster import ClusterInfo, resolve_cluster
from trainstack.trainers.common.contract import (
    EVENT_CAPACITY_ENDED,
    EVENT_CHECKPOINT,
    EVENT_FAILED,
    EVENT_PREEMPTED,
    FIELD_EVENT,
    TF_CPU_REPLICAS_ENV,
    TORCH_MODULE,
    TORCHRUN_MODULES,
    TRAINER_MODULES,
)
from trainstack.trainers.common.deadline import Deadline
from trainstack.trainers.common.exit_codes import (
    ACCELERATORS_MISSING_EXIT_CODE,
    CAPACITY_ENDED_EXIT_CODE,
    CONFIG_ERROR_EXIT_CODE,
    CRASH_EXIT_CODE,
    DONE_EXIT_CODE,
    PEER_LOST_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
    SETUP_FAILED_EXIT_CODE,
)
from trainstack.trainers.common.run_records import RunRecords
from trainstack.trainers.elastic import WORKER_FLAG, nccl_error_handling
from trainstack.trainers.node_capacity import (
    Backstop,
    capacity_code,
    deadline_for,
    hold_for_capacity,
)
from trainstack.trainers.user_code import (
    SecretError,
    read_secrets,
    secrets_exit_code,
    user_code_env,
    worker_argv,
)

Launcher = Literal["torchrun", "node"]
LAUNCHERS: Final = ("auto", "torchrun", "node")
USAGE: Final = (
    "usage: python -m trainstack.trainers.node [--launcher=auto|torchrun|node] [--procs-per-node=N] "
    "MODULE [ARGS...]  |  ... -- ARGV..."
)


@dataclass(frozen=True)
class Request:
    """What the command line asks for."""

    launcher: Literal["auto", "torchrun", "node"] = "auto"
    procs_per_node: int | None = None
    module: str | None = None
    """`python -m` target; None when `argv` is given."""
    argv: list[str] = field(default_factory=list)
    """The module's arguments, or the whole command after `--`."""
    source: str | None = None
    """Your code's folder (`--source`); None: the folder the package installed."""
    env: dict[str, str] = field(default_factory=dict)
    """`--env` values for your code."""
    secret_env: dict[str, str] = field(default_factory=dict)
    """`--secret-env` names -> Secret Manager resources, read when the node starts."""


@dataclass(frozen=True)
class NodeCommand:
    """The process this machine runs and the environment it runs with."""

    launcher: Launcher
    argv: list[str]
    env: dict[str, str]
    cluster: ClusterInfo
    accelerators: int
    processes: int
    """Processes on this machine: one per accelerator under torchrun, else 1."""
    deadline: Deadline | None = None
    """When this machine's capacity ends (`TRAINSTACK_DEADLINE`, `capacity_deadline`)."""
    stops_itself: bool = False
    """The target saves and stops before `deadline` by itself (the bundled torch trainer);
    any other gets SIGTERM from the launcher at `deadline.stop_at`."""


def _user_option(option: str, value: str, request: dict[str, Any]) -> bool:
    """Fold a user-code option (`--source`, `--env`, `--secret-env`) into `request`."""
    if option == "--source" and value:
        request["source"] = value
        return True
    name, sep, item = value.partition("=")
    if option in ("--env", "--secret-env") and sep and name:
        request["env" if option == "--env" else "secret_env"][name] = item
        return True
    if option in ("--source", "--env", "--secret-env"):
        valid = "a folder" if option == "--source" else "NAME=VALUE"
        raise ValueError(f"{option}: {value!r} is not allowed; valid: {valid}")
    return False


def parse_args(args: Sequence[str]) -> Request:
    """Parse the launcher's command line; raises ValueError with the usage problem."""
    launcher, procs = "auto", None
    user: dict[str, Any] = {"source": None, "env": {}, "secret_env": {}}
    rest = list(args)
    while rest and rest[0].startswith("--") and rest[0] != "--":
        option, sep, value = rest.pop(0).partition("=")
        if option == "--launcher" and sep and value in LAUNCHERS:
            launcher = value
        elif option == "--procs-per-node" and sep and value.isdigit() and int(value) >= 1:
            procs = int(value)
        elif option in ("--launcher", "--procs-per-node"):
            valid = ", ".join(LAUNCHERS) if option == "--launcher" else "an integer >= 1"
            raise ValueError(f"{option}: {value!r} is not allowed; valid: {valid}")
        elif not _user_option(option, value, user):
            raise ValueError(f"unknown option {option!r}; {USAGE}")
    if not rest:
        raise ValueError(f"nothing to run; {USAGE}")
    if rest[0] == "--":
        if len(rest) == 1:
            raise ValueError(f"nothing to run after '--'; {USAGE}")
        if launcher == "auto":
            raise ValueError("--launcher: 'auto' needs a MODULE; valid with '--': torchrun, node")
        return Request(launcher, procs, None, rest[1:], **user)  # type: ignore[arg-type]
    if user["source"] or user["env"] or user["secret_env"]:
        raise ValueError("--source, --env and --secret-env are for your own code after '--'")
    return Request(launcher, procs, rest[0], rest[1:])  # type: ignore[arg-type]


def _launcher(request: Request, cluster: ClusterInfo) -> Launcher:
    if not cluster.trains:
        # Parameter servers, reducers and evaluators run the target once (it idles or serves).
        return "node"
    if request.launcher != "auto":
        return request.launcher
    return "torchrun" if request.module in TORCHRUN_MODULES else "node"


ELASTIC_MAX_RESTARTS: Final = 0
"""torchrun never restarts the workers itself: its counter cannot tell a lost peer from a
code error, and each lost peer would spend a restart. The agent (`trainstack.trainers.elastic`) exits
at once with 4 (a peer or the rendezvous lost: the platform starts the node again without
counting a failure) or 1 (a code error: the run stops)."""
ELASTIC_JOIN_TIMEOUT_S: Final = 1800
"""How long a node waits in the rendezvous for the others (torch's default is 600 s): a
replacement node (a spot VM the managed instance group recreates, a pod GKE schedules on
a new node) can take longer than that to boot and install the trainer. A node that joined
waits as long for node 0's rendezvous store (`read_timeout`) when node 0 itself restarts."""
ELASTIC_LAUNCHER_MODULE: Final = "trainstack.trainers.elastic"
"""torchrun whose exit tells a lost peer (4) from a code error (1) (see `trainstack.trainers.elastic`)."""


def _rdzv_conf(cluster: ClusterInfo) -> str:
    # Node 0 hosts the store, named rather than guessed from host names (fixed membership:
    # --nnodes=N keeps the global batch arithmetic of the plan).
    return ",".join(
        (
            f"is_host={int(cluster.node_rank == 0)}",
            f"join_timeout={ELASTIC_JOIN_TIMEOUT_S}",
            f"read_timeout={ELASTIC_JOIN_TIMEOUT_S}",
        )
    )


def _torchrun_argv(request: Request, cluster: ClusterInfo, procs: int) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run"]
    if cluster.platform == "local_single":
        argv += ["--standalone", "--nnodes=1"]
    elif cluster.num_nodes > 1:
        # Elastic c10d rendezvous: a node that restarts rejoins and every worker restarts from
        # the newest checkpoint. Ranks come from the rendezvous, so --node-rank and --master-*
        # do not apply.
        argv = [sys.executable, "-m", ELASTIC_LAUNCHER_MODULE]
        argv += [
            f"--nnodes={cluster.num_nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={cluster.coordinator_address}:{cluster.coordinator_port}",
            "--rdzv-id=trainstack",
            f"--rdzv-conf={_rdzv_conf(cluster)}",
            f"--max-restarts={ELASTIC_MAX_RESTARTS}",
        ]
    else:
        argv += [
            f"--nnodes={cluster.num_nodes}",
            f"--node-rank={cluster.node_rank}",
            f"--master-addr={cluster.coordinator_address}",
            f"--master-port={cluster.coordinator_port}",
        ]
    argv.append(f"--nproc-per-node={procs}")
    if request.module is not None and argv[2] == ELASTIC_LAUNCHER_MODULE:
        # Each worker reports a lost peer as 4 and a code error as 1 (`trainstack.trainers.elastic`).
        wrapped = [ELASTIC_LAUNCHER_MODULE, WORKER_FLAG, request.module]
        return [*argv, "-m", *wrapped, *request.argv]
    if request.module is not None:
        return [*argv, "-m", request.module, *request.argv]
    return [*argv, "--no-python", *request.argv]


def node_command(request: Request, env: Mapping[str, str]) -> NodeCommand:
    """The command and environment for this machine (pure but for counting accelerators).

    Raises ValueError for an inconsistent cluster environment or accelerator count.
    """
    cluster = resolve_cluster(env)
    accelerators = count_accelerators(env)
    check_expected(env, accelerators)
    launcher = _launcher(request, cluster)
    procs = request.procs_per_node or accelerators.processes
    child_env = dict(env)
    child_env.update(
        {
            "TRAINSTACK_NODE_RANK": str(cluster.node_rank),
            "TRAINSTACK_NUM_NODES": str(cluster.num_nodes),
            "TRAINSTACK_ACCELERATORS_PER_NODE": str(accelerators.count),
            "TRAINSTACK_COORDINATOR": (f"{cluster.coordinator_address}:{cluster.coordinator_port}"),
        }
    )
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    if accelerators.simulated:
        # Simulated accelerators are CPU processes: real GPUs, if any, stay out of it.
        child_env["CUDA_VISIBLE_DEVICES"] = ""
        child_env.setdefault(TF_CPU_REPLICAS_ENV, str(accelerators.count))
    if request.module is None:
        # Your own code: each process runs through trainstack.trainers.user_code (source folder, events).
        request = replace(request, argv=worker_argv(request.argv, request.source))
        gpus = accelerators.count if accelerators.source in ("nvidia-smi", "torch") else 0
        child_env.update(
            user_code_env(env, cluster, launcher=launcher, gpus=gpus, plain_env=request.env)
        )
    if launcher == "torchrun":
        # NCCL errors raise in the workers rather than abort them (`trainstack.trainers.elastic`), so a
        # lost peer is told from a code error; a value of yours (environment, `--env`) stays.
        child_env.update(nccl_error_handling(child_env))
        argv = _torchrun_argv(request, cluster, procs)
    elif request.module is not None:
        argv = [sys.executable, "-m", request.module, *request.argv]
        procs = 1
    else:
        argv = list(request.argv)
        procs = 1
    return NodeCommand(launcher, argv, child_env, cluster, accelerators.count, procs)


def check_trainer_args(request: Request, command: NodeCommand) -> None:
    """For a bundled trainer, parse its flags with its own parser and, under torchrun, check
    the global batch against the world size and the newest checkpoint's settings; raises
    ValueError."""
    if request.module not in TRAINER_MODULES.values():
        return
    from trainstack.trainers.common.cli import load_config  # pydantic: only when it is needed

    cfg = load_config(request.argv)
    if command.launcher != "torchrun":
        return
    world = command.cluster.num_nodes * command.processes
    if cfg.global_batch_size % (world * cfg.grad_accum_steps):
        raise ValueError(
            f"global_batch_size ({cfg.global_batch_size}) must be divisible by world size "
            f"({world}) x grad_accum_steps ({cfg.grad_accum_steps})"
        )
    # torchrun restarts a worker that exits 2 and then reports 1: a resume under other
    # settings (`trainstack.trainers.common.fingerprint`) is refused here instead, as an exit 2.
    from trainstack.trainers.common.checkpoint import check_resume

    check_resume(cfg, command.env)


def capacity_deadline(request: Request, command: NodeCommand) -> NodeCommand:
    """`command` with this machine's capacity deadline (`trainstack.trainers.node_capacity`)."""
    deadline = deadline_for(request.module, request.argv, command.env)
    return replace(command, deadline=deadline, stops_itself=request.module == TORCH_MODULE)


SHIP_FLUSH_S: Final = 5.0
"""With `TRAINSTACK_CLOUD_LOGGING=gce_instance|tpu_worker` (set by the GCE and TPU VM startup
scripts) the target's stdout lines also go to the Cloud Logging API as structured entries
(`trainstack.trainers.common.cloud_logging`), batched in the background so training never waits on it;
once the target exited (SIGTERM included) the launcher waits at most this many seconds for
the last lines to be written."""


class _Watch:
    """Copies the target's stdout through and notes which trainer events went by."""

    def __init__(self, ship: Callable[[bytes], None] | None = None) -> None:
        self.started = False
        self.preempted = False
        self.capacity_ended = False
        """The bundled torch trainer saved and stopped for the capacity's end."""
        self.saved: int | None = None
        """The step of the newest checkpoint a line named (the capacity's end's own first)."""
        self.ship = ship
        """Also hands each line to Cloud Logging (`trainstack.trainers.common.cloud_logging`)."""

    def pump(self, source: IO[bytes], sink: IO[bytes]) -> None:
        for line in source:
            sink.write(line)
            sink.flush()
            if self.ship is not None:
                self.ship(line)
            if not line.startswith(b"{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and FIELD_EVENT in record:
                # A bundled trainer's `failed` record (`trainstack.trainers.crash`) can
                # come before training started: the exit is still a setup failure (3).
                self.started = self.started or record[FIELD_EVENT] != EVENT_FAILED
                self.preempted = self.preempted or record[FIELD_EVENT] == EVENT_PREEMPTED
                self._note_saved(record)

    def _note_saved(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if record[FIELD_EVENT] == EVENT_CAPACITY_ENDED:
            self.capacity_ended = True
            self.saved = record.get("checkpoint_step")
        elif record[FIELD_EVENT] == EVENT_CHECKPOINT and not self.capacity_ended:
            self.saved = step if isinstance(step, int) else self.saved


def _log(message: str) -> None:
    print(f"trainstack-node: {message}", file=sys.stderr, flush=True)


def exit_code(
    status: int, *, terminated: bool, started: bool, preempted: bool, classified: bool = False
) -> int:
    """The launcher's exit code for the target's `status` (negative: killed by a signal).
    `classified`: the target (`trainstack.trainers.elastic`) already told a code error (1) from a lost
    peer (4), so a 1 before training started is still a code error."""
    if status < 0:
        status = 128 - status
    if status == DONE_EXIT_CODE:
        return DONE_EXIT_CODE
    if terminated:
        return PREEMPTED_EXIT_CODE
    if preempted and status != PREEMPTED_EXIT_CODE:
        # A SIGTERM this launcher never got: torchrun stopping the other ranks after one
        # failed. Their `preempted` lines are the teardown, not a preemption: a failure.
        return status
    if status in (
        CONFIG_ERROR_EXIT_CODE,
        PEER_LOST_EXIT_CODE,
        ACCELERATORS_MISSING_EXIT_CODE,
        CAPACITY_ENDED_EXIT_CODE,
    ):
        return status
    if not started and not (classified and status == CRASH_EXIT_CODE):
        return SETUP_FAILED_EXIT_CODE
    return status


def _record_end(
    records: RunRecords | None,
    code: int,
    node_rank: int,
    stop_request: list[dict[str, Any]],
    saved: int | None = None,
) -> int:
    """Write the run's end record where this exit ends the run (`RunRecords.end_record`;
    `saved`: the step of the checkpoint a capacity's end left); the exit code, 143 after a
    stop on request (saved and stopped, as on a preemption)."""
    if stop_request and code != DONE_EXIT_CODE:
        code = PREEMPTED_EXIT_CODE
    if records is not None:
        stop = stop_request[0] if stop_request else None
        record = records.end_record(code, node_rank, stop, saved)
        if record is not None:
            records.record_end(record, _log)
    return code


def run(command: NodeCommand) -> int:
    """Start the target, pass signals on, and map its exit status (see the module docstring)."""
    if command.launcher == "torchrun" and importlib.util.find_spec("torch") is None:
        _log(f"torch is not installed for {sys.executable}; torchrun cannot start")
        return SETUP_FAILED_EXIT_CODE
    terminated = threading.Event()
    forwarded = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward() -> None:
        if child is not None and not forwarded.is_set() and child.poll() is None:
            forwarded.set()
            child.send_signal(signal.SIGTERM)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        terminated.set()
        forward()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    records = RunRecords.from_env(command.env)
    stop_request: list[dict[str, Any]] = []

    def on_stop_request(request: dict[str, Any]) -> None:
        _log(
            f"the supervisor asked this run to stop ({request.get('reason')}); stopping the target"
        )
        stop_request.append(request)
        forward()

    try:
        cluster = command.cluster
        if records is not None and not records.hold_while_stopped(_log, terminated):
            return PREEMPTED_EXIT_CODE
        if command.deadline is not None and command.deadline.reached():
            return hold_for_capacity(command.deadline, terminated, _log)
        _log(
            f"node {cluster.node_rank} of {cluster.num_nodes}, {command.accelerators} "
            f"accelerator(s), {command.processes} process(es): {' '.join(command.argv)}"
        )
        try:
            # A session of its own: a terminal's Ctrl-C reaches the target once, through us.
            child = subprocess.Popen(
                command.argv, env=command.env, stdout=subprocess.PIPE, start_new_session=True
            )
        except OSError as exc:
            _log(f"could not start {command.argv[0]}: {exc}")
            return SETUP_FAILED_EXIT_CODE
        if terminated.is_set():
            forward()  # a signal that came while the target was starting
        # GCE and TPU VMs: nothing else turns stdout into structured Cloud Logging entries.
        shipper = cloud_logging.from_env(command.env, _log)
        watch = _Watch(shipper.add if shipper is not None else None)
        assert child.stdout is not None
        pump = threading.Thread(
            target=watch.pump, args=(child.stdout, sys.stdout.buffer), daemon=True
        )
        pump.start()
        watching = records.watch(on_stop_request, _log) if records is not None else None
        # The supervisor's sign of life from this node while its trainer runs (a rendezvous
        # wait included); silence from every node for long enough stops the compute.
        beating = records.heartbeat(cluster.node_rank, _log) if records is not None else None
        backstop = Backstop(command.deadline, command.stops_itself, forward, _log)
        status = child.wait()
        for event in (watching, beating):
            if event is not None:
                event.set()
        backstop.cancel()
        pump.join()
        if shipper is not None:
            shipper.close(SHIP_FLUSH_S)  # bounded: a dead Logging API cannot hold the exit
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    code = exit_code(
        status,
        terminated=terminated.is_set(),
        started=watch.started,
        preempted=watch.preempted,
        classified=command.argv[1:3] == ["-m", ELASTIC_LAUNCHER_MODULE],
    )
    code = capacity_code(code, watch.capacity_ended, backstop)
    code = _record_end(records, code, command.cluster.node_rank, stop_request, watch.saved)
    if code != DONE_EXIT_CODE:
        _log(f"exit {code} (target exit {status})")
    return code


def main(args: Sequence[str]) -> int:
    try:
        request = parse_args(args)
        command = node_command(request, os.environ)
        check_trainer_args(request, command)
        command = capacity_deadline(request, command)
    except AcceleratorsMissing as exc:
        _log(str(exc))
        return ACCELERATORS_MISSING_EXIT_CODE
    except ValueError as exc:
        _log(str(exc))
        return CONFIG_ERROR_EXIT_CODE
    try:
        # Values go into the environment only: the log line names the variables.
        command.env.update(read_secrets(request.secret_env, os.environ))
    except SecretError as exc:
        _log(str(exc))
        return secrets_exit_code(exc)
    if request.secret_env:
        _log(f"secret_env: read {', '.join(sorted(request.secret_env))}")
    return run(command)


__all__ = [
    "EXPECTED_ACCELERATORS_ENV",
    "SIMULATED_ACCELERATORS_ENV",
    "NodeCommand",
    "Request",
    "capacity_deadline",
    "check_trainer_args",
    "exit_code",
    "main",
    "node_command",
    "parse_args",
    "run",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

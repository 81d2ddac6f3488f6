"""Compute Engine node scripts for the A100 gce backend, rendered from the templates beside
this module.

The launcher (`launch.sh`) runs the trainer on a node: it reads the node's rank from its
`trainstack-node-rank` metadata attribute, downloads the `TrainerPackage` sdist with the
node's service account (metadata-server token, Cloud Storage JSON API), pip-installs it,
checks the trainer flags, and starts the node launcher `python -m trainstack.trainers.node`
(`node_argv`), which counts the node's accelerators and runs torchrun (one process per
accelerator; an elastic c10d rendezvous on node 0 when there are several nodes) or, for
trainers that are not torch, one process per node. The startup script (`gce_startup.sh`)
writes it to disk and starts it as a transient systemd service. (GKE pods run
`components/kubernetes_pod.sh` and the same `node_argv`.)

Your own code (`node_args`, the `python -m trainstack.trainers.node` arguments of
`trainstack.trainers.common.user_code.node_args`) replaces the module and its flags: every node runs
`python -m trainstack.trainers.node <node_args>`, torchrun when they say `--launcher=torchrun`, and the
bundled trainer's flag check (`check-args`) is skipped.

    from trainstack.components.gpu_startup import gce_startup_script

    script = gce_startup_script(
        package_uri="gs://acme-exp-42-staging/trainers/trainstack_trainers-0123abcd.tar.gz",
        module="trainstack.trainers.torch_ddp",
        trainer_args=["--steps=1000"],
        num_nodes=4,
        procs_per_node=8,
        coordinator="exp-42-a100-0",  # instance 0's name
        max_run_seconds=86400,  # limits.max_run_hours
        checkpoint_url="gs://acme-exp-42-checkpoints",
    )

Node environment the trainers read (`trainstack.trainers.common.cluster`): torchrun's own variables for
torch; otherwise `TRAINSTACK_NODE_RANK`, `TRAINSTACK_NUM_NODES` and `TRAINSTACK_COORDINATOR`
(`host:port`), plus `TF_CONFIG` listing every worker for trainers not launched with torchrun
(TensorFlow cannot find its peers from node 0's address alone).

Run limit: a VM-level `scheduling.maxRunDuration` does not end a run in a managed instance
group, which recreates a VM that stops (`trainstack.components.catalog.recovery`). With
`max_run_seconds` the launcher enforces it: the run's first start is recorded once in the
checkpoint bucket (`run_clock_uri`), and the launcher stops the trainer (SIGTERM: it
checkpoints) when the limit has passed since then, logs `max_run_hours reached` and exits
0, which the unit does not restart; a start after the deadline exits 0 at once.

Exit codes of the launcher (`EXIT_*` below) drive the Compute Engine service's restart
rule; the GKE pod's podFailurePolicy matches the node launcher's same codes.

The run's end (`run_record`, `trainstack.trainers.common.run_records`): the launcher records
that the run ended for good where it gave up itself, not only the node launcher: an exit
the unit does not restart (1, 2, 5), or the `GCE_SETUP_ATTEMPTS`-th setup failure in a row
(`.ended` with the stage and the reason: `package_download`, `package_install`, `launch`,
`trainer`); each start also rewrites the node's heartbeat. The supervisor stops the group
on either, or once the heartbeats fall silent (what no launcher can record).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from trainstack.components._node_args import keyed_node_args, validate_node_args
from trainstack.components.catalog import gpu_fabric_gce as gib
from trainstack.components.catalog.images import DLVM_PYTHON_BIN
from trainstack.trainers.common.cluster import DEFAULT_PORT
from trainstack.trainers.common.contract import TORCHRUN_MODULES

TEMPLATE_DIR: Final = Path(__file__).parent
LAUNCHER_TEMPLATE: Final = TEMPLATE_DIR / "launch.sh"
GCE_STARTUP_TEMPLATE: Final = TEMPLATE_DIR / "gce_startup.sh"
NODE_HELPER: Final = TEMPLATE_DIR / "node_helper.py"

EXIT_DONE: Final = 0
"""Training finished, or (Compute Engine) the run limit was reached."""
EXIT_CRASH: Final = 1
"""A code error after the trainer started: a worker raised (`trainstack.trainers.elastic`)."""
EXIT_CONFIG: Final = 2
"""Invalid trainer arguments or node environment."""
EXIT_SETUP: Final = 3
"""Download or install failed before training started: worth a bounded retry."""
EXIT_PEER_LOST: Final = 4
"""A peer node or the elastic rendezvous was lost (node 0 and its store gone, no quorum in
time; `trainstack.trainers.elastic`), or a TensorFlow peer task: restart, never a counted failure
(`trainstack.trainers.common.exit_codes.PEER_LOST_EXIT_CODE`)."""
EXIT_ACCELERATORS_MISSING: Final = 5
"""Fewer usable accelerators than the plan bought (`TRAINSTACK_EXPECTED_ACCELERATORS`):
the same machine cannot do better on a retry
(`trainstack.trainers.common.exit_codes.ACCELERATORS_MISSING_EXIT_CODE`)."""
EXIT_CAPACITY_ENDED: Final = 6
"""The machine's capacity ends (a flex-start run duration): the trainer saved a checkpoint
and stopped before it (`trainstack.trainers.common.exit_codes.CAPACITY_ENDED_EXIT_CODE`).
The Compute Engine launcher exits 0 on it (the unit stops; the VM is going); a GKE Job
replaces the pod without counting a failure, and a replacement on the same node holds
(`trainstack.trainers.node_capacity`) until the node goes."""
EXIT_PREEMPTED: Final = 143
"""SIGTERM reached the node, or the trainer saved a checkpoint and stopped (128 + SIGTERM,
`trainstack.trainers.common.exit_codes.PREEMPTED_EXIT_CODE`)."""

FAIL_FAST_EXIT_CODES: Final = (EXIT_CRASH, EXIT_CONFIG, EXIT_ACCELERATORS_MISSING)
"""Code errors and machines without their accelerators: retrying cannot help."""
RESTART_EXIT_CODES: Final = (EXIT_PEER_LOST, EXIT_PREEMPTED, EXIT_CAPACITY_ENDED)
"""A lost peer, a preemption after a checkpoint or the capacity's end after one: restart
and resume (on new capacity), without counting a failure."""
GCE_STOP_EXIT_CODES: Final = (EXIT_DONE, *FAIL_FAST_EXIT_CODES)
"""The Compute Engine unit restarts the launcher on every other exit: 143 (preempted), 4 (a
peer or node 0 lost) and 3 (setup). `GCE_START_LIMIT` bounds the retries of a setup that
keeps failing."""
GCE_RESTART_SEC: Final = 30
GCE_START_LIMIT: Final = (20, 3600)
"""At most 20 starts of the unit in 3600 s, then systemd gives up: "units which are started
more than burst times within an interval time span are not permitted to start any more"
(systemd.unit(5), StartLimitIntervalSec=, StartLimitBurst=,
https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html). Giving up stops
no VM: the group keeps it, billing, until the supervisor stops it on the run's end record
(`GCE_SETUP_ATTEMPTS`) or on the silence of its heartbeats. 20 restarts 30 s apart outlast
the up to 7 minutes a new bucket grant takes to reach Cloud Storage
(https://cloud.google.com/iam/docs/access-change-propagation), which the download meets as
403s."""
GCE_SETUP_ATTEMPTS: Final = GCE_START_LIMIT[0]
"""Setup failures in a row (exit 3) after which the launcher records the run's end and
starts no more: the unit's last start before its start limit when attempts come faster than
3600 s / 20 apart; slower ones would never reach that limit, so the launcher counts them
itself."""

"""Trainer modules launched with torchrun (one process per GPU); any other module runs as
one process per node and reads the node-level environment."""

NODE_RANK_ATTRIBUTE: Final = "trainstack-node-rank"
"""Compute Engine instance metadata key holding the node's rank (its instance index)."""
METADATA_HOST_ENV: Final = "GCE_METADATA_HOST"
"""Overrides the metadata server host (tests only), as in Google's client libraries."""
STORAGE_HOST_ENV: Final = "STORAGE_EMULATOR_HOST"
"""Overrides the Cloud Storage endpoint (tests only), as in Google's client libraries."""

RUN_CLOCK_PREFIX: Final = "trainstack-run-"
"""Object name prefix, in the checkpoint bucket, of a run's recorded first start."""
GCE_STATE_DIR: Final = "/var/lib/trainstack"
GCE_UNIT: Final = "trainstack-trainer"
GCE_STOP_TIMEOUT_S: Final = 90
"""systemd stop timeout: the trainer's default preemption grace (30 s) plus the upload."""
CHECKPOINT_SUBDIR: Final = "checkpoints"
"""`--checkpoint_dir` defaults to `<checkpoint_url>/checkpoints/<run_name>`: Vertex's
AIP_CHECKPOINT_DIR is `<bucket>/checkpoints` and the trainer adds the run's name there too,
so every target keeps one folder per run under the prefix the bucket's age rule covers."""
DEFAULT_RUN_NAME: Final = "run"
"""The trainer's own `run_name` default (`trainstack.trainers.common.config.TrainConfig`), for flags
that name none."""

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
_MARKER = re.compile(r"@@([A-Z_]+)@@")
_HELPER_EOF = "TRAINSTACK_HELPER_EOF"
_LAUNCHER_EOF = "TRAINSTACK_LAUNCHER_EOF"


def uses_torchrun(module: str) -> bool:
    """Whether `module` is launched with torchrun (one process per GPU)."""
    return module in TORCHRUN_MODULES


NODE_LAUNCHER_MODULE: Final = "trainstack.trainers.node"


def node_argv(
    module: str | None, trainer_args: Sequence[str], node_args: Sequence[str] | None = None
) -> list[str]:
    """The Python arguments that run the trainer on one node through the node launcher
    (`python <these>`): the one place that builds them, for every target. With `node_args`
    (your own code) they are the launcher's whole command line; `module` is then unused."""
    if node_args is not None:
        return ["-m", NODE_LAUNCHER_MODULE, *node_args]
    return ["-m", NODE_LAUNCHER_MODULE, str(module), *trainer_args]


def node_args_use_torchrun(node_args: Sequence[str]) -> bool:
    """Whether your code's `node_args` run torchrun (one process per GPU)."""
    options = list(node_args)[: list(node_args).index("--")]
    return "--launcher=torchrun" in options


def with_checkpoint_dir(trainer_args: Sequence[str], checkpoint_url: str | None) -> list[str]:
    """The trainer flags plus `--checkpoint_dir=<checkpoint_url>/checkpoints/<run_name>` (the
    flags' `--run_name`, else the trainer's default), unless the flags already choose a
    checkpoint directory or there is no checkpoint bucket."""
    args = list(trainer_args)
    chosen = any(a == "--checkpoint_dir" or a.startswith("--checkpoint_dir=") for a in args)
    if checkpoint_url and not chosen:
        run = next(
            (a.split("=", 1)[1] for a in reversed(args) if a.startswith("--run_name=")),
            DEFAULT_RUN_NAME,
        )
        base = checkpoint_url.rstrip("/")
        args.append(f"--checkpoint_dir={base}/{CHECKPOINT_SUBDIR}/{run}")
    return args


def check_trainer(module: object, trainer_args: object) -> None:
    """Raise ValueError unless `module` is a module name and `trainer_args` a list of
    one-line strings (the launcher passes them to the trainer verbatim)."""
    if not isinstance(module, str) or not _MODULE.fullmatch(module):
        raise ValueError(f"trainer_module: {module!r} is not a Python module name")
    if not isinstance(trainer_args, list | tuple):
        raise ValueError(f"trainer_args: {trainer_args!r} is not a list of strings")  # noqa: TRY004
    for arg in trainer_args:
        if not isinstance(arg, str) or "\0" in arg or "\n" in arg:
            raise ValueError(f"trainer_args: {arg!r} is not a one-line string")


def _check_launch(
    *,
    package_uri: str,
    module: str | None,
    trainer_args: Sequence[str],
    num_nodes: int,
    procs_per_node: int,
    coordinator: str,
    coordinator_port: int,
    node_args: Sequence[str] | None,
) -> None:
    bucket, _, obj = package_uri.removeprefix("gs://").partition("/")
    if not package_uri.startswith("gs://") or not bucket or not obj or obj.endswith("/"):
        raise ValueError(
            f"package_uri: {package_uri!r} is not a gs://bucket/object URI of the trainer sdist"
        )
    if node_args is None:
        check_trainer(module, trainer_args)
    else:
        validate_node_args(node_args)
        if module is not None or trainer_args:
            raise ValueError(
                "node_args: runs your own code, which takes no module or trainer_args; "
                "valid: remove them"
            )
    for key, value in (("node_count", num_nodes), ("procs_per_node", procs_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key}: {value!r} is not an integer >= 1")
    if not _HOST.fullmatch(coordinator):
        raise ValueError(f"coordinator: {coordinator!r} is not a host name")
    if isinstance(coordinator_port, bool) or not 1 <= coordinator_port <= 65535:
        raise ValueError(f"coordinator_port: {coordinator_port!r} is not a TCP port (1-65535)")


def _render(template: Path, values: Mapping[str, str]) -> str:
    """Replace every `@@NAME@@` marker of `template` with `values[NAME]` (inserted as given:
    callers quote). Unknown or unused names are errors, so a template and its renderer
    cannot drift apart silently."""
    text = template.read_text()
    found = set(_MARKER.findall(text))
    if found != set(values):
        raise ValueError(
            f"{template.name}: markers {sorted(found)} do not match values {sorted(values)}"
        )
    return _MARKER.sub(lambda m: values[m.group(1)], text)


def _embeddable(text: str, terminator: str, what: str) -> str:
    if terminator in text.splitlines():
        raise ValueError(f"{what} contains its heredoc terminator line {terminator!r}")
    return text.rstrip("\n")


def run_record_uri(checkpoint_url: str, key: str) -> str:
    """The prefix of a run's records beside the checkpoints (`.started`, the run clock;
    `.ended` and `.stop`, `trainstack.trainers.common.run_records`), one set per run."""
    return f"{checkpoint_url.rstrip('/')}/{RUN_CLOCK_PREFIX}{key}"


def run_clock_uri(checkpoint_url: str, key: str) -> str:
    """Where a run's first start is recorded: beside the checkpoints, one object per run."""
    return run_record_uri(checkpoint_url, key) + ".started"


def render_launcher(
    *,
    package_uri: str,
    module: str | None,
    trainer_args: Sequence[str],
    num_nodes: int,
    procs_per_node: int,
    coordinator: str,
    work_dir: str,
    coordinator_port: int = DEFAULT_PORT,
    done_marker: str = "",
    extra_path: str = "",
    worker_hosts: Sequence[str] = (),
    max_run_seconds: int | None = None,
    run_clock: str = "",
    node_args: Sequence[str] | None = None,
    accelerators_per_node: int | None = None,
    run_record: str = "",
    setup_failures: str = "",
    nccl_gib: bool = False,
    rank_claims: bool = False,
    capacity_run_seconds: int | None = None,
) -> str:
    """The node launcher for plain values (see the module docstring and `launch.sh`).

    `coordinator` is instance 0's name. `procs_per_node` is the GPUs per node the plan
    expects (it keys a run; the node launcher counts the node's own accelerators).
    `work_dir` holds the download and the helper. `done_marker` is a file the launcher
    creates after a successful run, `extra_path` directories appended to PATH to find
    torchrun. `worker_hosts` (every node's host name by rank) gives trainers that are not
    launched with torchrun a `TF_CONFIG` listing every worker on `coordinator_port`.
    `max_run_seconds` stops the run that long after its first start, recorded at the
    gs:// object `run_clock` (`run_clock_uri`). `node_args` runs your own code instead of
    `module` (which is then None, with no `trainer_args`). `accelerators_per_node` (default
    `procs_per_node`) is what the plan bought per node: the node launcher stops with exit 5
    on a node with fewer usable ones (`TRAINSTACK_EXPECTED_ACCELERATORS`). `run_record`
    (`run_record_uri`) is where the node launcher records the run's end and looks for the
    supervisor's stop request (`TRAINSTACK_RUN_RECORD`). `setup_failures` is the file that
    counts the setup failures in a row (default: `<work_dir>/setup-failures`). `nccl_gib`
    (A4, A3 Ultra on Compute Engine): install Google's NCCL/gIB plugin at the first start
    and give every rank its NCCL settings (`trainstack.components.catalog.gpu_fabric_gce`).
    `rank_claims` (VMs without rank metadata: a flex-start group's): each VM claims its rank
    under `run_record` (`node_helper.py claim-rank`), and the rank-0 VM's name replaces
    `coordinator`; it needs `run_record` and takes no `worker_hosts`.
    `capacity_run_seconds` is a flex-start VM's run duration (its `maxRunDuration`): the
    launcher gives the run `TRAINSTACK_DEADLINE`, the VM's first boot plus it.
    """
    if rank_claims and (not run_record or worker_hosts):
        raise ValueError(
            "rank_claims: needs a run_record to claim ranks under and takes no worker_hosts "
            "(the VMs' names are the group's own)"
        )
    if not work_dir:
        raise ValueError("work_dir: empty; the launcher needs a directory on the node")
    if accelerators_per_node is not None and (
        isinstance(accelerators_per_node, bool)
        or not isinstance(accelerators_per_node, int)
        or accelerators_per_node < 1
    ):
        raise ValueError(f"accelerators_per_node: {accelerators_per_node!r} is not an integer >= 1")
    if max_run_seconds is not None and (
        isinstance(max_run_seconds, bool)
        or not isinstance(max_run_seconds, int)
        or max_run_seconds < 1
    ):
        raise ValueError(f"max_run_seconds: {max_run_seconds!r} is not an integer >= 1")
    if capacity_run_seconds is not None and (
        isinstance(capacity_run_seconds, bool)
        or not isinstance(capacity_run_seconds, int)
        or capacity_run_seconds < 1
    ):
        raise ValueError(f"capacity_run_seconds: {capacity_run_seconds!r} is not an integer >= 1")
    if max_run_seconds is not None and not run_clock.startswith("gs://"):
        raise ValueError(
            f"run_clock: {run_clock!r} is not a gs:// object; max_run_seconds needs a "
            "checkpoint bucket to record the run's start in"
        )
    _check_launch(
        package_uri=package_uri,
        module=module,
        trainer_args=trainer_args,
        num_nodes=num_nodes,
        procs_per_node=procs_per_node,
        coordinator=coordinator,
        coordinator_port=coordinator_port,
        node_args=node_args,
    )
    if worker_hosts and len(worker_hosts) != num_nodes:
        raise ValueError(
            f"worker_hosts: {len(worker_hosts)} host(s) for {num_nodes} node(s); valid: one "
            "per node"
        )
    for host in worker_hosts:
        if not _HOST.fullmatch(host):
            raise ValueError(f"worker_hosts: {host!r} is not a host name")
    workers = json.dumps([f"{h}:{coordinator_port}" for h in worker_hosts]) if worker_hosts else ""
    torchrun = (
        node_args_use_torchrun(node_args) if node_args is not None else uses_torchrun(str(module))
    )
    q = shlex.quote
    helper = _embeddable(NODE_HELPER.read_text(), _HELPER_EOF, NODE_HELPER.name)
    return _render(
        LAUNCHER_TEMPLATE,
        {
            "PACKAGE_URI": q(package_uri),
            "TRAINER_ARGS": " ".join(q(a) for a in trainer_args),
            "NODE_ARGV": " ".join(q(a) for a in node_argv(module, trainer_args, node_args)),
            "USE_TORCHRUN": "1" if torchrun else "0",
            "USER_CODE": "1" if node_args is not None else "0",
            "NUM_NODES": str(num_nodes),
            "EXPECTED_ACCELERATORS": str(
                procs_per_node if accelerators_per_node is None else accelerators_per_node
            ),
            "COORDINATOR": q(coordinator),
            "COORDINATOR_PORT": str(coordinator_port),
            "WORK_DIR": q(work_dir),
            "DONE_MARKER": q(done_marker),
            "EXTRA_PATH": q(extra_path),
            "NODE_RANK_ATTRIBUTE": q(NODE_RANK_ATTRIBUTE),
            "RANK_CLAIMS": "1" if rank_claims else "0",
            "TF_WORKERS": q(workers),
            "MAX_RUN_SECONDS": q(str(max_run_seconds) if max_run_seconds is not None else ""),
            "RUN_CLOCK_URI": q(run_clock if max_run_seconds is not None else ""),
            "RUN_RECORD": q(run_record),
            "RUN_FINAL_CODES": q(" ".join(str(c) for c in FAIL_FAST_EXIT_CODES)),
            "SETUP_ATTEMPTS": str(GCE_SETUP_ATTEMPTS),
            "SETUP_FAILURES": q(setup_failures or f"{work_dir.rstrip('/')}/setup-failures"),
            **_fabric_values(nccl_gib),
            "NODE_HELPER": helper,
            "CAPACITY_RUN_SECONDS": q(
                str(capacity_run_seconds) if capacity_run_seconds is not None else ""
            ),
        },
    )


def _fabric_values(nccl_gib: bool) -> dict[str, str]:
    """The launcher's fabric markers: Google's NCCL/gIB install and settings, or empty."""
    values = {
        "FABRIC_APT_KEY_URL": gib.GIB_APT_KEY_URL,
        "FABRIC_APT_KEYRING": gib.GIB_APT_KEYRING,
        "FABRIC_APT_SOURCE": gib.GIB_APT_SOURCE,
        "FABRIC_APT_LIST": gib.GIB_APT_LIST,
        "FABRIC_PACKAGE": gib.GIB_PACKAGE,
        "TORCH_REQUIREMENT": gib.TORCH_REQUIREMENT,
        "TORCH_PIP_PACKAGE": gib.TORCH_PIP_PACKAGE,
        "NCCL_ENV_SCRIPT": gib.NCCL_ENV_SCRIPT,
        "NCCL_LIB_DIR": gib.NCCL_LIB_DIR,
    }
    return {k: shlex.quote(v if nccl_gib else "") for k, v in values.items()}


def run_key(**launch: object) -> str:
    """A short digest of a Compute Engine run's launch values: it names the launcher file
    and the done marker, so a new package or new flags start a new run on the same disk."""
    canonical = json.dumps(launch, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def pod_run_env(
    checkpoint_url: str, package_uri: str, argv: Sequence[str], shape: Mapping[str, Any]
) -> dict[str, str]:
    """A GKE pod's run records (`trainstack.trainers.common.run_records`): the prefix, keyed
    by the package, the node launcher's argv (as the key may see it: secret `--env` values
    left out, `_node_args.keyed_node_args`) and the shape (`node_count`, `gpus_per_node`),
    and the exits the Job's podFailurePolicy fails for good (FailJob)."""
    key = run_key(
        package_uri=package_uri,
        args=list(argv),
        node_count=shape["node_count"],
        gpus=shape["gpus_per_node"],
    )
    return {
        "TRAINSTACK_RUN_RECORD": run_record_uri(checkpoint_url, key),
        "TRAINSTACK_RUN_FINAL_CODES": " ".join(str(c) for c in FAIL_FAST_EXIT_CODES),
    }


def gce_run_key(
    *,
    package_uri: str,
    module: str | None,
    trainer_args: Sequence[str],
    num_nodes: int,
    procs_per_node: int,
    coordinator: str,
    coordinator_port: int = DEFAULT_PORT,
    worker_hosts: Sequence[str] = (),
    node_args: Sequence[str] | None = None,
    secret_env_names: Collection[str] = (),
) -> str:
    """The run key of a Compute Engine launch (`gce_startup_script`'s values), the secret
    `--env` values of `node_args` left out (`_node_args.keyed_node_args`)."""
    launch: dict[str, object] = {
        "package_uri": package_uri,
        "module": module,
        "trainer_args": list(trainer_args),
        "num_nodes": num_nodes,
        "procs_per_node": procs_per_node,
        "coordinator": coordinator,
        "coordinator_port": coordinator_port,
        "worker_hosts": list(worker_hosts),
    }
    if node_args is not None:
        # Only when given, so the bundled trainer's run keys stay what they were.
        launch["node_args"] = keyed_node_args(node_args, secret_env_names)
    return run_key(**launch)


def gce_startup_script(
    *,
    package_uri: str,
    module: str | None,
    trainer_args: Sequence[str],
    num_nodes: int,
    procs_per_node: int,
    coordinator: str,
    coordinator_port: int = DEFAULT_PORT,
    state_dir: str = GCE_STATE_DIR,
    unit: str = GCE_UNIT,
    extra_path: str = DLVM_PYTHON_BIN,
    worker_hosts: Sequence[str] = (),
    max_run_seconds: int | None = None,
    checkpoint_url: str | None = None,
    node_args: Sequence[str] | None = None,
    accelerators_per_node: int | None = None,
    secret_env_names: Collection[str] = (),
    nccl_gib: bool = False,
    rank_claims: bool = False,
    capacity_run_seconds: int | None = None,
) -> str:
    """The Compute Engine startup script (see `gce_startup.sh`); identical on every node,
    which reads its rank from the `trainstack-node-rank` metadata attribute. `worker_hosts`
    as for `render_launcher` (needed by trainers that are not launched with torchrun).
    `max_run_seconds` (the stack's run limit) needs `checkpoint_url`, the bucket where the
    run's first start is recorded (`run_clock_uri`). `node_args` and
    `accelerators_per_node` as for `render_launcher`; `secret_env_names` names the `--env`
    values of `node_args` the run's key leaves out (`gce_run_key`); `nccl_gib` as for
    `render_launcher`; `rank_claims` too, which needs `checkpoint_url` (the run's records);
    `capacity_run_seconds`, a flex-start VM's run duration, as for `render_launcher` (not
    part of the run's key)."""
    key = gce_run_key(
        package_uri=package_uri,
        module=module,
        trainer_args=trainer_args,
        num_nodes=num_nodes,
        procs_per_node=procs_per_node,
        coordinator=coordinator,
        coordinator_port=coordinator_port,
        worker_hosts=worker_hosts,
        node_args=node_args,
        secret_env_names=secret_env_names,
    )
    state = state_dir.rstrip("/") or "/"
    if max_run_seconds is not None and not checkpoint_url:
        raise ValueError(
            "max_run_seconds: needs a checkpoint bucket to record the run's start in; "
            "valid: a stack with a checkpoint bucket, or no limits.max_run_hours"
        )
    clock = run_clock_uri(checkpoint_url, key) if checkpoint_url else ""
    launcher = render_launcher(
        package_uri=package_uri,
        module=module,
        trainer_args=trainer_args,
        num_nodes=num_nodes,
        procs_per_node=procs_per_node,
        coordinator=coordinator,
        coordinator_port=coordinator_port,
        work_dir=state,
        done_marker=f"{state}/done-{key}",
        setup_failures=f"{state}/setup-failures-{key}",
        extra_path=extra_path,
        worker_hosts=worker_hosts,
        max_run_seconds=max_run_seconds,
        run_clock=clock,
        node_args=node_args,
        accelerators_per_node=accelerators_per_node,
        run_record=run_record_uri(checkpoint_url, key) if checkpoint_url else "",
        nccl_gib=nccl_gib,
        rank_claims=rank_claims,
        capacity_run_seconds=capacity_run_seconds,
    )
    q = shlex.quote
    return _render(
        GCE_STARTUP_TEMPLATE,
        {
            "STATE_DIR": q(state),
            "UNIT": q(unit),
            "RUN_KEY": q(key),
            "STOP_TIMEOUT_S": str(GCE_STOP_TIMEOUT_S),
            "RESTART_SEC": str(GCE_RESTART_SEC),
            "RESTART_PREVENT": q(" ".join(str(c) for c in GCE_STOP_EXIT_CODES)),
            "START_LIMIT_BURST": str(GCE_START_LIMIT[0]),
            "START_LIMIT_INTERVAL_S": str(GCE_START_LIMIT[1]),
            "LAUNCHER": _embeddable(launcher, _LAUNCHER_EOF, "the launcher"),
        },
    )

"""Render the startup script every worker VM of a Cloud TPU slice runs at boot.

    from trainstack.components.startup.tpu_worker import render_tpu_worker_script

    script = render_tpu_worker_script(
        slice_name="exp-42-tpu",
        package_uri="gs://p-exp-42-staging/trainers/trainstack_trainers-0123abcd.tar.gz",
        trainer_module="trainstack.trainers.tf_multiworker",
        trainer_args=["--framework=tensorflow", "--strategy=tpu", "--steps=1000"],
        checkpoint_dir="gs://p-exp-42-checkpoints/checkpoints",
        expected_hosts=4,
        runtime_version="tpu-vm-tf-2.16.0-pod-pjrt",
    )
    # -> metadata {"startup-script": script} of a gcp.tpu.V2Vm or a queued resource's node

What the script does is documented at the top of `tpu_worker.sh`. Worker 0 launches

    python3 -m trainstack.trainers.node --launcher=node <trainer_module> \
        --checkpoint_dir=<checkpoint_dir> <trainer_args...>

(`trainer_command` gives exactly that argv: the node launcher checks the trainer's flags,
runs it once, maps its exit code and, with `TRAINSTACK_CLOUD_LOGGING=tpu_worker` and
`TRAINSTACK_TPU_NODE_ID=<slice_name>`, which the script exports, writes each of its lines to
the Cloud Logging API as a `tpu_worker` entry, JSON lines as `jsonPayload`:
`trainstack.trainers.common.cloud_logging`) with `TPU_WORKER_ID`, `TPU_WORKER_HOSTNAMES`
(worker IPs, worker 0 first), `PYTHONUNBUFFERED=1` and the variables Google's TensorFlow TPU
harness sets for the slice's shape (`trainstack.components.catalog.tpu_runtimes.TPU_TF_ENVIRONMENT`):
on a multi-host slice `TPU_LOAD_LIBRARY=0` (the `-pod` runtime's servers own the chips); on
a single host `TPU_NAME=local` and, on a `-pjrt` runtime, `NEXT_PLUGGABLE_DEVICE_USE_C_API=true`
and `TF_PLUGGABLE_DEVICE_LIBRARY_PATH` (the runtime's libtpu.so). `TPU_NAME` stays unset on a
multi-host slice: TensorFlow's TPUClusterResolver would then resolve the slice through the
Cloud TPU API, which needs an extra IAM role; the worker list (`grpc://<ip>:8470` each, see
`trainstack.trainers.tf_multiworker.cluster.tpu_target`) needs none. A `--checkpoint_dir=` among
`trainer_args` replaces the default one.

Before the first launch worker 0 reads the TensorFlow version of the runtime's Python and,
from TF 2.16 on, installs `tf-keras==<major>.<minor>.*` with `--no-deps` (the trainer's Keras
2; `trainstack.components.catalog.tpu_runtimes.TF_KERAS_SOURCE`). `runtime_version` (a TensorFlow
runtime: the trainer needs TensorFlow) gives the TensorFlow minor the script expects, which
it reports when the VM's differs, and the device API.

Your own code (`node_args`, the `python -m trainstack.trainers.node` arguments of
`trainstack.trainers.common.user_code.node_args`) runs on every worker instead, as
`python3 -m trainstack.trainers.node <node_args>` (`user_code_command`), with `TPU_WORKER_ID`,
`TPU_WORKER_HOSTNAMES` and `PYTHONUNBUFFERED=1` but none of the TensorFlow setup; the
runtime may then be any TPU software version (your requirements bring the framework).

`max_run_seconds` (the stack's `limits.max_run_hours`) is enforced by the script itself, as
the Compute Engine node launcher does (`components/gpu_startup/launch.sh`): the GA Cloud TPU
API has no run limit (`trainstack.components.catalog.tpu.TPU_RUN_LIMIT_SOURCE`). Every launching worker
asks the node helper (`components/gpu_startup/node_helper.py run-started`, embedded in the
script) for the run's first start, recorded once in the checkpoint bucket (`run_clock`:
`trainstack-run-<key>.started`, the GCE name scheme); once the limit has passed since then
the trainer gets SIGTERM (it checkpoints), the script logs `max_run_hours reached: ...` and
exits 0 without relaunching; a boot after the deadline exits 0 at once.

The run's records for the supervisor (`run_record`, `trainstack.trainers.common.run_records`)
go through the same helper: a launching worker rewrites its heartbeat as the script starts
and as it installs, and records the run's end when the script gives up for good (nothing
but a reboot runs it again): the step (`startup`, `package_download`, `package_install`,
`trainer`) and why, e.g. pip's last line. The supervisor deletes the slice on it.

Every value is shell-quoted into the template; nothing secret may go in (the script lands in
instance metadata, readable by anyone who can read the node): flags whose names look like
credentials are refused.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Final

from trainstack.components._node_args import keyed_node_args, validate_node_args
from trainstack.components.catalog.checkpoint_paths import GS_DIR
from trainstack.components.catalog.tpu_runtimes import TF_KERAS_FROM, parse_tf_runtime
from trainstack.components.gpu_startup import NODE_HELPER, run_key, run_record_uri
from trainstack.trainers.common.contract import NODE_MODULE

TEMPLATE_PATH: Final = Path(__file__).with_name("tpu_worker.sh")
METADATA_URL_ENV: Final = "TRAINSTACK_METADATA_URL"
"""Overrides the metadata server base URL; only tests set it."""
STATE_DIR_ENV: Final = "TRAINSTACK_STATE_DIR"
"""Overrides the state directory (default /var/lib/trainstack); only tests set it."""
DEFAULT_PYTHON: Final = "python3"
DEFAULT_TRAINER_ATTEMPTS: Final = 3
DEFAULT_RETRY_DELAY_S: Final = 10
DEFAULT_DOWNLOAD_WINDOW_S: Final = 900
"""How long the package download keeps retrying after its first failure: twice the up to
about 7 minutes a new IAM grant takes to propagate
(https://cloud.google.com/iam/docs/access-change-propagation), plus one minute."""

METADATA_ATTRIBUTES_VERIFIED: Final = False
METADATA_ATTRIBUTES_SOURCE: Final = (
    "jax-ml/jax:jax/_src/clusters/cloud_tpu_cluster.py (GceTpuCluster reads instance "
    "attributes agent-worker-number and worker-network-endpoints, 'x:y:IP' entries sorted "
    "by worker id); not stated on a Google documentation page"
)
CLOUD_LOGGING_VERIFIED: Final = False
CLOUD_LOGGING_SOURCE: Final = (
    "The trainer's lines reach Cloud Logging through the node launcher's entries:write "
    "(https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/write), not through "
    "the guest agent; the tpu_worker resource labels it writes are "
    "trainstack.trainers.common.cloud_logging.RESOURCE_LABELS_SOURCE['tpu_worker'] (TO VERIFY)"
)

_SLICE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_GS_OBJECT = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]/\S+$")
_GS_DIR = GS_DIR  # the one rule of where checkpoints may go (catalog/checkpoint_paths.py)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.-]*(=.*)?$", re.DOTALL)
_SECRET_NAME = re.compile(
    r"password|passwd|secret|token|credential|api_?key|private_?key|access_?key", re.IGNORECASE
)
_PLACEHOLDER = re.compile(r"@@[A-Z_]+@@")
_HELPER_EOF: Final = "TRAINSTACK_HELPER_EOF"
CHECKPOINT_FLAG: Final = "--checkpoint_dir="
LAUNCH_PREFIX: Final = 5
"""`python3 -m trainstack.trainers.node --launcher=node <module>`: the argv before the trainer's flags."""


def validate_trainer_launch(trainer_module: str, trainer_args: Sequence[str]) -> None:
    """Raise ValueError unless the module name and flags can go into the startup script."""
    if not isinstance(trainer_module, str) or not _MODULE.match(trainer_module):
        raise ValueError(
            f"trainer_module: {trainer_module!r} is not a Python module name such as "
            "'trainstack.trainers.tf_multiworker'"
        )
    if isinstance(trainer_args, str):
        raise ValueError(  # noqa: TRY004 - a config mistake, reported like every other
            f"trainer_args: got {trainer_args!r}; valid: a list of '--key=value' flags"
        )
    for i, arg in enumerate(trainer_args):
        if not isinstance(arg, str) or not _FLAG.match(arg) or "\n" in arg:
            raise ValueError(f"trainer_args[{i}]: {arg!r} is not a single-line '--key=value' flag")
        name = arg.split("=", 1)[0]
        if _SECRET_NAME.search(name):
            raise ValueError(
                f"trainer_args[{i}]: {name!r} looks like a credential; the startup script is "
                "instance metadata, readable by anyone who can view the TPU node. Give the "
                "trainer a Secret Manager name instead and let it read the value with its "
                "service account"
            )


def effective_checkpoint_dir(trainer_args: Sequence[str], checkpoint_dir: str) -> str:
    """The directory the trainer will write to: the last `--checkpoint_dir=` flag among
    `trainer_args` (the trainer's later flags win), else `checkpoint_dir`."""
    given = [a[len(CHECKPOINT_FLAG) :] for a in trainer_args if a.startswith(CHECKPOINT_FLAG)]
    return given[-1] if given else checkpoint_dir


def trainer_command(
    trainer_module: str,
    trainer_args: Sequence[str],
    checkpoint_dir: str,
    python: str = DEFAULT_PYTHON,
) -> list[str]:
    """The exact argv worker 0 launches: the trainer under the node launcher."""
    args = list(trainer_args)
    if not any(a.startswith(CHECKPOINT_FLAG) for a in args):
        args.insert(0, f"{CHECKPOINT_FLAG}{checkpoint_dir}")
    return [python, "-m", NODE_MODULE, "--launcher=node", trainer_module, *args]


def user_code_command(node_args: Sequence[str], python: str = DEFAULT_PYTHON) -> list[str]:
    """The exact argv every worker launches for your own code."""
    return [python, "-m", NODE_MODULE, *node_args]


def run_clock(
    slice_name: str, package_uri: str, command: Sequence[str], checkpoint_dir: str
) -> str:
    """Where a slice's run records its first start: `trainstack-run-<key>.started` at the
    root of the checkpoint bucket (beside `checkpoints/`, as on Compute Engine), `<key>` a
    digest of the slice, the package and the launched argv, so a new package or new flags
    start a new clock, like the done marker."""
    return run_record(slice_name, package_uri, command, checkpoint_dir) + ".started"


def run_record(
    slice_name: str, package_uri: str, command: Sequence[str], checkpoint_dir: str
) -> str:
    """The prefix of the slice's run records (`run_clock` is its `.started`; the node
    launcher's end record and the supervisor's stop request, trainers/common/run_records)."""
    bucket = checkpoint_dir[len("gs://") :].split("/", 1)[0]
    key = run_key(slice_name=slice_name, package_uri=package_uri, command=list(command))
    return run_record_uri(f"gs://{bucket}", key)


def slice_run_record(
    *,
    slice_name: str,
    package_uri: str,
    trainer_module: str,
    trainer_args: Sequence[str],
    checkpoint_dir: str,
    node_args: Sequence[str] | None = None,
    python: str = DEFAULT_PYTHON,
    secret_env_names: Collection[str] = (),
) -> str:
    """`run_record` of the script `render_tpu_worker_script` renders from these values."""
    keyed = _keyed_command(
        trainer_module, trainer_args, checkpoint_dir, node_args, python, secret_env_names
    )
    effective = effective_checkpoint_dir(trainer_args, checkpoint_dir)
    return run_record(slice_name, package_uri, keyed, effective)


def _keyed_command(
    trainer_module: str,
    trainer_args: Sequence[str],
    checkpoint_dir: str,
    node_args: Sequence[str] | None,
    python: str,
    secret_env_names: Collection[str],
) -> list[str]:
    """The launched argv as the run's key sees it: secret `--env` values left out
    (`trainstack.components._node_args.keyed_node_args`)."""
    if node_args is not None:
        node_args = keyed_node_args(node_args, secret_env_names)
    return _command(trainer_module, trainer_args, checkpoint_dir, node_args, python)[0]


def _command(
    trainer_module: str,
    trainer_args: Sequence[str],
    checkpoint_dir: str,
    node_args: Sequence[str] | None,
    python: str,
) -> tuple[list[str], list[str]]:
    """(The argv every worker launches, the part of it the script's TRAINER_ARGS holds)."""
    if node_args is not None:
        command = user_code_command(node_args, python)
        return command, command[3:]
    command = trainer_command(trainer_module, trainer_args, checkpoint_dir, python)
    return command, command[LAUNCH_PREFIX:]


def _node_helper() -> str:
    text = NODE_HELPER.read_text(encoding="utf-8")
    if _HELPER_EOF in text.splitlines():
        raise ValueError(f"{NODE_HELPER.name} cannot go into the script's heredoc unchanged")
    return text.rstrip("\n")


def render_tpu_worker_script(
    *,
    slice_name: str,
    package_uri: str,
    trainer_module: str,
    trainer_args: Sequence[str],
    checkpoint_dir: str,
    expected_hosts: int,
    runtime_version: str,
    python: str = DEFAULT_PYTHON,
    trainer_attempts: int = DEFAULT_TRAINER_ATTEMPTS,
    retry_delay_s: int = DEFAULT_RETRY_DELAY_S,
    download_window_s: int = DEFAULT_DOWNLOAD_WINDOW_S,
    node_args: Sequence[str] | None = None,
    max_run_seconds: int | None = None,
    secret_env_names: Collection[str] = (),
) -> str:
    """The startup script for one slice, every value validated and shell-quoted;
    `node_args` runs your own code on every worker instead of `trainer_module`;
    `max_run_seconds` stops the run that long after its first start (`run_clock`);
    `secret_env_names` names the `--env` values of `node_args` that are secrets, which the
    run's key leaves out (`trainstack.components._node_args.keyed_node_args`)."""
    if not isinstance(slice_name, str) or not _SLICE_NAME.match(slice_name):
        raise ValueError(
            f"slice_name: {slice_name!r} is not a TPU node name (a lowercase letter, then up "
            "to 62 of a-z, 0-9 and '-', not ending with '-')"
        )
    if not isinstance(package_uri, str) or not _GS_OBJECT.match(package_uri):
        raise ValueError(
            f"package_uri: {package_uri!r} is not a gs://bucket/object URI of the trainer sdist"
        )
    if not isinstance(checkpoint_dir, str) or not _GS_DIR.match(checkpoint_dir):
        raise ValueError(
            f"checkpoint_dir: {checkpoint_dir!r} is not a gs:// URL; a TPU VM's disk does not "
            "survive preemption, so checkpoints must go to Cloud Storage"
        )
    runtime = parse_tf_runtime(runtime_version) if isinstance(runtime_version, str) else None
    if node_args is not None:
        validate_node_args(node_args)
        if not isinstance(runtime_version, str) or not runtime_version:
            raise ValueError(f"runtime_version: {runtime_version!r} is not a TPU runtime")
    elif runtime is None:
        raise ValueError(
            f"runtime_version: {runtime_version!r} is not a TensorFlow TPU runtime, which the "
            "trainer needs; valid: tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se]"
        )
    validate_trainer_launch(trainer_module, trainer_args)
    effective = effective_checkpoint_dir(trainer_args, checkpoint_dir)
    if not _GS_DIR.match(effective):
        raise ValueError(
            f"trainer_args: --checkpoint_dir={effective!r} is not a gs:// URL; a TPU VM's disk "
            "does not survive preemption, so checkpoints must go to Cloud Storage"
        )
    for key, value, low in (
        ("expected_hosts", expected_hosts, 1),
        ("trainer_attempts", trainer_attempts, 1),
        ("retry_delay_s", retry_delay_s, 0),
        ("download_window_s", download_window_s, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{key}: got {value!r}; valid: an integer >= {low}")
    if max_run_seconds is not None and (
        isinstance(max_run_seconds, bool)
        or not isinstance(max_run_seconds, int)
        or max_run_seconds < 1
    ):
        raise ValueError(f"max_run_seconds: got {max_run_seconds!r}; valid: an integer >= 1")
    if not isinstance(python, str) or not python or any(c.isspace() for c in python):
        raise ValueError(f"python: {python!r} is not an executable name")

    _, launch = _command(trainer_module, trainer_args, checkpoint_dir, node_args, python)
    keyed = _keyed_command(
        trainer_module, trainer_args, checkpoint_dir, node_args, python, secret_env_names
    )
    limited = max_run_seconds is not None
    values = {
        "SLICE_NAME": shlex.quote(slice_name),
        "PACKAGE_URI": shlex.quote(package_uri),
        "TRAINER_MODULE": shlex.quote(trainer_module) if node_args is None else "''",
        "EXPECTED_HOSTS": str(expected_hosts),
        "PYTHON": shlex.quote(python),
        "TRAINER_ATTEMPTS": str(trainer_attempts),
        "RETRY_DELAY_S": str(retry_delay_s),
        "DOWNLOAD_WINDOW_S": str(download_window_s),
        "TRAINER_ARGS": " ".join(shlex.quote(a) for a in launch),
        "RUNTIME_VERSION": shlex.quote(runtime_version),
        "RUNTIME_TF_MINOR": runtime.tf_minor if runtime is not None else "''",
        "DEVICE_API": (runtime.device_api if runtime is not None else None) or "''",
        "TF_KERAS_FROM": ".".join(str(n) for n in TF_KERAS_FROM),
        "USER_CODE": "1" if node_args is not None else "0",
        "MAX_RUN_SECONDS": str(max_run_seconds) if limited else "''",
        "RUN_CLOCK_URI": (
            shlex.quote(run_clock(slice_name, package_uri, keyed, effective)) if limited else "''"
        ),
        "RUN_RECORD": shlex.quote(run_record(slice_name, package_uri, keyed, effective)),
        "NODE_HELPER": _node_helper(),
    }
    template = TEMPLATE_PATH.read_text(encoding="utf-8")
    rendered = _PLACEHOLDER.sub(lambda m: values[m.group(0).strip("@")], template)
    return rendered

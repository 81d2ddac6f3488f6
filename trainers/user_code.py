"""Your own code on a node: the run contract it gets and one process of it.

    python -m trainstack.trainers.node --launcher=torchrun|node [--source=DIR] [--env=NAME=VALUE]...
        [--secret-env=NAME=projects/P/secrets/S]... -- ARGV...

The node launcher (`trainstack.trainers.node`) runs `python -m trainstack.trainers.user_code --source=DIR -- ARGV`
as its target: under torchrun once per accelerator, with `launcher: node` once per machine.
This module is that process: it enters the source folder (the `--source` folder, else the
`trainstack/user_source` folder the uploaded package installed, else the working directory: an
image's WORKDIR), runs ARGV with the environment
it was given (a leading `python`/`python3` is this interpreter, the one the package and its
requirements were installed for), and speaks the bundled trainers' event lines for it, so the node launcher and
`trainstack local-run` treat both alike: a `launch` line when the code starts, `preempted`
when it exits 143 (saved after SIGTERM: restart it) unless the code printed its own
`preempted` record, and on any other failure a `failed` line with its last output lines.
The step lines (`start`, `resume`, `train`, `done`) are your code's to print, if it wants
progress shown. SIGTERM and SIGINT are passed to the code as they come.

What the node adds to the environment (`user_code_env`), on top of the `TRAINSTACK_*` run
contract the node launcher sets for every target:

- `launcher: node`: JAX's coordinator (`JAX_COORDINATOR_ADDRESS`, the node launcher's
  coordinator `host:port`) and the one process-count shape JAX detects from plain variables,
  Open MPI's (`OMPI_MCA_orte_hnp_uri`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_RANK`,
  `OMPI_COMM_WORLD_LOCAL_RANK`; jax/_src/clusters/ompi_cluster.py reads exactly these and
  jax/_src/distributed.py prefers `JAX_COORDINATOR_ADDRESS`), so `jax.distributed.initialize()`
  with no arguments works; `JAX_LOCAL_DEVICE_IDS` lists every GPU of the machine (JAX would
  otherwise give the one process only GPU `local rank`). `TF_CONFIG` too, unless the
  platform set one (Vertex): workers from `TRAINSTACK_WORKER_HOSTS` (`host:port,...`), the
  GKE Indexed Job's pod names, or the one node itself, port `TRAINSTACK_TF_PORT` (default
  2222) where a host has none. On a TPU VM nothing is added: JAX's own TPU detection
  (`TPU_WORKER_ID`/`TPU_WORKER_HOSTNAMES` from the startup script, the `tpu-env` metadata)
  must not be shadowed by the Open MPI shape, and TensorFlow finds the slice through its
  TPU cluster resolver, not `TF_CONFIG`.
- On Vertex, `TRAINSTACK_CHECKPOINT_DIR` and `TRAINSTACK_OUTPUT_DIR` default to the job's
  `AIP_CHECKPOINT_DIR/<TRAINSTACK_RUN_NAME>` and `AIP_MODEL_DIR`.
- `--env` values, and `--secret-env` values read from Secret Manager with the machine's
  identity (metadata server token; `versions/latest` when no version is named). Secret
  values are put in the environment only: never on a command line, never logged.

Standard library only, and Python 3.10 (the prebuilt images' version).
"""

from __future__ import annotations

import base64
import collections
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Final

from trainstack.trainers.common.cluster import ClusterInfo
from trainstack.trainers.common.contract import (
    CHECKPOINT_DIR_ENV,
    EVENT_FAILED,
    EVENT_LAUNCH,
    EVENT_PREEMPTED,
    OUTPUT_DIR_ENV,
    RUN_NAME_ENV,
    SOURCE_PACKAGE,
    USER_CODE_MODULE,
)
from trainstack.trainers.common.exit_codes import (
    CONFIG_ERROR_EXIT_CODE,
    LAUNCHER_LOST_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
    SETUP_FAILED_EXIT_CODE,
)
from trainstack.trainers.common.signals import kill_with_parent, watch_parent

LOCAL_RUN_PID_ENV: Final = "TRAINSTACK_LOCAL_RUN_PID"
"""Set by `trainstack local-run`: its pid, which every process of your code watches."""
WATCH_POLL_S: Final = 0.5
TAIL_LINES: Final = 20
"""Output lines of failed code quoted in its `failed` event line."""
TF_PORT_ENV: Final = "TRAINSTACK_TF_PORT"
WORKER_HOSTS_ENV: Final = "TRAINSTACK_WORKER_HOSTS"
DEFAULT_TF_PORT: Final = 2222
SECRETMANAGER_ENDPOINT_ENV: Final = "TRAINSTACK_SECRETMANAGER_ENDPOINT"
"""Secret Manager's base URL (tests point it at a local fake); default Google's."""
SECRETMANAGER_ENDPOINT: Final = "https://secretmanager.googleapis.com"
METADATA_HOST_ENV: Final = "GCE_METADATA_HOST"
"""The metadata server's `host[:port]`, as Google's client libraries read it."""
HTTP_TIMEOUT_S: Final = 30
_PYTHON: Final = re.compile(r"python(3(\.\d+)?)?")
OMPI_ENV: Final = (
    "OMPI_MCA_orte_hnp_uri",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
)


class SecretError(Exception):
    """A secret could not be read; `permanent` when retrying cannot help (403, 404)."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


# ------------------------------------------------------------------------------------------
# What the node launcher adds
# ------------------------------------------------------------------------------------------


def worker_argv(argv: Sequence[str], source: str | None) -> list[str]:
    """The command the node launcher runs for ARGV: this module around it."""
    head = [sys.executable, "-m", USER_CODE_MODULE]
    return [*head, *([f"--source={source}"] if source else []), "--", *argv]


def _tf_hosts(env: Mapping[str, str], cluster: ClusterInfo) -> list[str] | None:
    port = env.get(TF_PORT_ENV) or str(DEFAULT_TF_PORT)
    if env.get(WORKER_HOSTS_ENV):
        hosts = [h.strip() for h in env[WORKER_HOSTS_ENV].split(",") if h.strip()]
    elif env.get("JOB_NAME") and env.get("TRAINSTACK_HEADLESS_SERVICE"):
        job, service = env["JOB_NAME"], env["TRAINSTACK_HEADLESS_SERVICE"]
        hosts = [f"{job}-{i}.{service}" for i in range(cluster.num_nodes)]
    elif cluster.num_nodes == 1:
        hosts = [cluster.coordinator_address]
    else:
        return None
    if len(hosts) != cluster.num_nodes:
        return None
    return [h if ":" in h.rsplit("]", 1)[-1] else f"{h}:{port}" for h in hosts]


def user_code_env(
    env: Mapping[str, str],
    cluster: ClusterInfo,
    *,
    launcher: str,
    gpus: int,
    plain_env: Mapping[str, str],
) -> dict[str, str]:
    """The variables the node adds for your code (see the module docstring); `gpus` is the
    machine's real GPU count (0 on CPU, TPU or simulated accelerators)."""
    added = dict(plain_env)
    run = added.get(RUN_NAME_ENV) or env.get(RUN_NAME_ENV)
    for ours, vertex in (
        (CHECKPOINT_DIR_ENV, "AIP_CHECKPOINT_DIR"),
        (OUTPUT_DIR_ENV, "AIP_MODEL_DIR"),
    ):
        # Vertex names the job's folders itself; the contract's names point at them.
        if not added.get(ours) and not env.get(ours) and env.get(vertex):
            added[ours] = env[vertex]
            if ours == CHECKPOINT_DIR_ENV and run:
                # Vertex's checkpoint folder is the same for every run of a stack: each run
                # keeps its state in a folder of its own below it, as the bundled trainers do.
                added[ours] = f"{env[vertex].rstrip('/')}/{run}"
    if launcher != "node" or cluster.platform == "tpu_vm":
        return added
    coordinator = f"{cluster.coordinator_address}:{cluster.coordinator_port}"
    added["JAX_COORDINATOR_ADDRESS"] = coordinator
    added.update(
        zip(
            OMPI_ENV,
            (f"0.0;tcp://{coordinator}", str(cluster.num_nodes), str(cluster.node_rank), "0"),
            strict=True,
        )
    )
    if gpus > 0:
        added["JAX_LOCAL_DEVICE_IDS"] = ",".join(str(i) for i in range(gpus))
    hosts = None if env.get("TF_CONFIG") else _tf_hosts(env, cluster)
    if hosts is not None:
        added["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": cluster.node_rank}}
        )
    return added


# ------------------------------------------------------------------------------------------
# Secret Manager
# ------------------------------------------------------------------------------------------


def _http_json(url: str, headers: Mapping[str, str]) -> dict[str, object]:
    request = urllib.request.Request(url, headers=dict(headers))
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        value = json.loads(response.read())
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")  # noqa: TRY004 - a bad answer, like bad JSON
    return value


def access_token(env: Mapping[str, str]) -> str:
    """The machine identity's OAuth token, from the metadata server."""
    host = env.get(METADATA_HOST_ENV) or "metadata.google.internal"
    url = f"http://{host}/computeMetadata/v1/instance/service-accounts/default/token"
    try:
        token = _http_json(url, {"Metadata-Flavor": "Google"}).get("access_token")
    except (OSError, ValueError) as exc:
        message = f"no access token from the metadata server: {exc}"
        raise SecretError(message, permanent=False) from None
    if not isinstance(token, str) or not token:
        raise SecretError("no access token from the metadata server", permanent=False)
    return token


def read_secret(resource: str, token: str, env: Mapping[str, str]) -> str:
    """The value of `resource` (`projects/P/secrets/S[/versions/V]`) as text."""
    name = resource if "/versions/" in resource else f"{resource}/versions/latest"
    base = (env.get(SECRETMANAGER_ENDPOINT_ENV) or SECRETMANAGER_ENDPOINT).rstrip("/")
    url = f"{base}/v1/{urllib.parse.quote(name)}:access"
    try:
        answer = _http_json(url, {"Authorization": f"Bearer {token}"})
    except urllib.error.HTTPError as exc:
        raise SecretError(f"HTTP {exc.code}", permanent=exc.code in (400, 403, 404)) from None
    except (OSError, ValueError) as exc:
        raise SecretError(str(exc), permanent=False) from None
    payload = answer.get("payload")
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, str):
        raise SecretError("the answer has no payload.data", permanent=False)
    try:
        return base64.b64decode(data).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError both are
        # An environment variable holds text: a binary secret cannot be passed this way.
        raise SecretError("the secret's value is not UTF-8 text", permanent=True) from None


def read_secrets(secret_env: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Every `NAME: resource` of `secret_env` read; raises SecretError naming the variable
    and the resource (never a value)."""
    if not secret_env:
        return {}
    token = access_token(env)
    values: dict[str, str] = {}
    for name, resource in sorted(secret_env.items()):
        try:
            values[name] = read_secret(resource, token, env)
        except SecretError as exc:
            message = f"secret_env.{name}: could not read {resource}: {exc}"
            raise SecretError(message, permanent=exc.permanent) from None
    return values


def secrets_exit_code(error: SecretError) -> int:
    """2 when the configuration is wrong (no access, no such secret), else 3 (retryable)."""
    return CONFIG_ERROR_EXIT_CODE if error.permanent else SETUP_FAILED_EXIT_CODE


# ------------------------------------------------------------------------------------------
# One process of your code
# ------------------------------------------------------------------------------------------


def installed_source() -> Path | None:
    """The source folder the uploaded package installed, if any."""
    spec = importlib.util.find_spec(SOURCE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _event(event: str, **fields: object) -> None:
    rank = os.environ.get("RANK") or os.environ.get("TRAINSTACK_NODE_RANK") or "0"
    record = {"event": event, "rank": int(rank) if rank.isdigit() else 0, **fields}
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class _Output:
    """Copies one stream of your code through, keeping its last lines and noting whether it
    printed its own `preempted` record."""

    def __init__(self) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.preempted = False

    def copy(self, source: IO[bytes], sink: IO[bytes]) -> None:
        for line in source:
            sink.write(line)
            sink.flush()
            text = line.decode(errors="replace").rstrip("\n")
            self.tail.append(text)
            if text.startswith("{") and f'"{EVENT_PREEMPTED}"' in text:
                try:
                    record = json.loads(text)
                except ValueError:
                    continue
                self.preempted |= (
                    isinstance(record, dict) and record.get("event") == EVENT_PREEMPTED
                )


def run_code(argv: Sequence[str], source: Path) -> int:
    """Run ARGV in `source`; returns its exit code (143: preempted after saving)."""
    output = _Output()
    try:
        # Dies with this process: a launcher killed outright leaves no training code behind.
        child = subprocess.Popen(
            list(argv),
            cwd=source,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=kill_with_parent(),  # noqa: PLW1509
        )
    except OSError as exc:
        _event(EVENT_FAILED, exit_code=SETUP_FAILED_EXIT_CODE, last_lines=[str(exc)])
        return SETUP_FAILED_EXIT_CODE
    _event(EVENT_LAUNCH, argv=[Path(argv[0]).name, *argv[1:]])

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    assert child.stdout is not None and child.stderr is not None
    pumps = [
        threading.Thread(target=output.copy, args=(child.stdout, sys.stdout.buffer)),
        threading.Thread(target=output.copy, args=(child.stderr, sys.stderr.buffer)),
    ]
    for pump in pumps:
        pump.start()
    status = child.wait()
    for pump in pumps:
        pump.join()
    code = 128 - status if status < 0 else status
    if code == PREEMPTED_EXIT_CODE and not output.preempted:
        # The node launcher restarts on this line or the exit code; a line of its own keeps
        # the log saying why the code stopped when your code does not say it.
        _event(EVENT_PREEMPTED, step=None)
    elif code not in (0, PREEMPTED_EXIT_CODE):
        _event(EVENT_FAILED, exit_code=code, last_lines=list(output.tail))
    return code


def _watch_run(pid: str | None) -> None:
    """Exit (the code follows, `kill_with_parent`) once `trainstack local-run` is gone: under
    torchrun our parent is torchrun, which outlives a CLI killed outright."""
    if not pid or not pid.isdigit():
        return

    def watch() -> None:
        while True:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                os._exit(LAUNCHER_LOST_EXIT_CODE)
            except PermissionError:
                pass
            time.sleep(WATCH_POLL_S)

    threading.Thread(target=watch, name="trainstack-run-watch", daemon=True).start()


def main(args: Sequence[str]) -> int:
    rest = list(args)
    source: Path | None = None
    while rest and rest[0] != "--":
        option, _, value = rest.pop(0).partition("=")
        if option != "--source" or not value:
            print(f"trainstack.trainers.user_code: unknown option {option!r}", file=sys.stderr)
            return CONFIG_ERROR_EXIT_CODE
        source = Path(value)
    if len(rest) < 2:
        print(
            "usage: python -m trainstack.trainers.user_code [--source=DIR] -- ARGV...",
            file=sys.stderr,
        )
        return CONFIG_ERROR_EXIT_CODE
    # No folder given or installed: code baked into an image runs in the image's WORKDIR.
    folder = source or installed_source() or Path.cwd()
    if not folder.is_dir():
        print(
            f"trainstack.trainers.user_code: --source: {str(folder)!r} is not a folder",
            file=sys.stderr,
        )
        return CONFIG_ERROR_EXIT_CODE
    watch_parent()  # local runs: exit once the launcher (torchrun, the CLI) is gone
    _watch_run(os.environ.get(LOCAL_RUN_PID_ENV))
    argv = rest[1:]
    if _PYTHON.fullmatch(argv[0]):
        # `python` is the interpreter the package (and its requirements) went into: ours.
        argv = [sys.executable, *argv[1:]]
    return run_code(argv, folder.resolve())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

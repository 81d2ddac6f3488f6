"""A small double of the Pulumi engine for dynamic resources: the plugin it starts, the
calls it makes and the properties it sends. Read tests/engine/__init__.py for the pulumi/pulumi
source lines each part imitates and for what it does not imitate.

    launch = plugin_launch(REPO_ROOT)                    # from Pulumi.yaml, as the engine reads it
    deployment = Deployment(launch, state)               # one fresh host process per deployment
    with deployment:
        deployment.register(goal, preview=True)          # Check (+ Diff / Create / Update / Delete)
    deployment.calls                                     # [("Check", urn), ("Diff", urn), ...]
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import warnings
from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import grpc
import yaml
from google.protobuf import empty_pb2, struct_pb2
from google.protobuf.json_format import MessageToDict
from pulumi.runtime import rpc
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, provider_pb2, provider_pb2_grpc

PROVIDER_PACKAGE = "pulumi-python"
"""The dynamic-provider plugin: `pulumi-resource-pulumi-python` (sdk/python/dist)."""
CLOSE_GRACE_S = 5.0
"""Plugin.Close: SIGINT to the process group, SIGKILL after 5 s (pkg/resource/plugin/plugin.go)."""
LOADED_MACHINE_GRACE_S = 25.0
"""Extra time before the double's SIGKILL: on 2 shared cores a host can take over 5 s to
handle SIGINT, which the engine would end with SIGKILL, not an error; a host that ignores
SIGINT still fails the tier."""
SDK_WAIT_FRAME = re.compile(r'pulumi/dynamic/__main__\.py", line \d+ in main$')
"""The frame of the host's `Event().wait()` (sdk/python/lib/pulumi/dynamic/__main__.py main),
where SIGINT must raise KeyboardInterrupt. CPython runs a signal's handler only in the main
thread, and a lock wait with no timeout wakes only when the kernel hands the signal to that
thread; a process-directed SIGINT may go to one of the host's gRPC threads instead, and the
main thread then sleeps on (seen here about once in 15 runs under load: faulthandler showed
the main thread in that wait, the gRPC server still serving). The engine ends such a host
with SIGKILL after 5 s and carries on; so does the double. Any other place the host is held
(a provider call of ours that never returns) still fails the tier."""
EXITED_ON_SIGINT = (0, -signal.SIGINT)
"""The host's exit on Close's SIGINT: 0 from its KeyboardInterrupt handler, or death by
SIGINT when it comes before the host reached that handler (Python re-raises it)."""
_SECRET_SIG = (rpc._special_sig_key, rpc._special_secret_sig)


class PluginStartError(RuntimeError):
    """The plugin did not start; the message is what it printed (or why no port came)."""


class ProviderError(RuntimeError):
    """A provider call failed (the host's gRPC error), or Check reported failures."""


# --------------------------------------------------------------------------------------
# Starting the plugin
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginLaunch:
    """How the engine starts the dynamic-provider plugin for one Pulumi project."""

    project: str
    pwd: Path
    """The plugin's working directory: Pulumi.yaml's folder joined with `main`."""
    options_env: dict[str, str]
    """PULUMI_RUNTIME_<OPTION> for each `runtime.options` entry, and PULUMI_PROJECT."""


def _go_format(value: Any) -> str:
    # fmt.Sprintf("%v", v) for the scalar option values Pulumi.yaml holds.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def plugin_launch(project_dir: Path) -> PluginLaunch:
    """Read `project_dir/Pulumi.yaml` as the engine does (pkg/engine/project.go getPwdMain;
    pkg/resource/plugin/provider_plugin.go, the PULUMI_RUNTIME_ options)."""
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text(encoding="utf-8"))
    pwd = project_dir
    main = project.get("main")
    if main:
        target = main if os.path.isabs(main) else os.path.normpath(project_dir / main)
        pwd = Path(target) if os.path.isdir(target) else Path(target).parent
    runtime = project.get("runtime")
    options = runtime.get("options") or {} if isinstance(runtime, dict) else {}
    env = {f"PULUMI_RUNTIME_{key.upper()}": _go_format(value) for key, value in options.items()}
    env["PULUMI_PROJECT"] = str(project["name"])
    return PluginLaunch(project=str(project["name"]), pwd=pwd, options_env=env)


def plugin_command(launch: PluginLaunch, engine_env: Mapping[str, str]) -> tuple[list[str], dict]:
    """The host command and environment, as `pulumi-resource-pulumi-python` builds them.

    Raises PluginStartError with the script's own message when the virtualenv is missing.
    """
    env = {**engine_env, **launch.options_env}
    venv = env.get("PULUMI_RUNTIME_VIRTUALENV", "")
    if not venv:
        toolchain = env.get("PULUMI_RUNTIME_TOOLCHAIN", "")
        if toolchain == "uv":
            venv = ".venv"
        elif toolchain == "poetry":
            raise PluginStartError("the poetry toolchain is not imitated (poetry env info)")
    if not venv:
        python = shutil.which(env.get("PULUMI_PYTHON_CMD", "python3"), path=env.get("PATH"))
        if python is None:
            raise PluginStartError("python3: not found")
        return [python, "-u", "-m", "pulumi.dynamic"], env
    venv = venv.rstrip("/") if venv != "/" else venv
    if not venv.startswith("/"):
        venv = f"{launch.pwd}/{venv}"
    if not os.path.isfile(f"{venv}/bin/python"):
        state = (
            "doesn't appear to be a virtual environment" if os.path.isdir(venv) else "doesn't exist"
        )
        raise PluginStartError(
            f'The \'virtualenv\' option in Pulumi.yaml is set to "{venv}", but "{venv}" {state}.'
        )
    env["PATH"] = f"{venv}/bin:{env.get('PATH', '')}"
    env.pop("PYTHONHOME", None)
    return [f"{venv}/bin/python", "-u", "-m", "pulumi.dynamic"], env


class _Engine(engine_pb2_grpc.EngineServicer):
    """The engine's gRPC service as far as a dynamic provider uses it: Log."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, str, str]] = []

    def Log(self, request: Any, context: Any) -> Any:
        self.logs.append((request.severity, request.message, request.urn))
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> Any:
        return engine_pb2.GetRootResourceResponse(urn="")

    def SetRootResource(self, request: Any, context: Any) -> Any:
        return engine_pb2.SetRootResourceResponse()


@contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """A shell's background job (CI, `cmd &`) ignores SIGINT and children inherit that, so
    Close's SIGINT would always end in SIGKILL. The host starts as from a terminal."""
    ignored = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    )
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class ProviderHost:
    """One `python -m pulumi.dynamic` process and the gRPC stub the engine holds to it."""

    def __init__(self, launch: PluginLaunch, engine_env: Mapping[str, str]) -> None:
        self.engine = _Engine()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        engine_pb2_grpc.add_EngineServicer_to_server(self.engine, self._server)
        self.engine_address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()
        argv, env = plugin_command(launch, engine_env)
        # A host that hangs on Close is a failure; faulthandler's dump on SIGABRT (close())
        # says where it hung.
        env = {**env, "PYTHONFAULTHANDLER": "1"}
        self.argv = [*argv, self.engine_address]
        self.stderr: list[str] = []
        self.stdout: list[str] = []
        self.returncode: int | None = None
        self.killed = False
        self.sigint_missed_sdk_wait = False
        """Killed while its main thread still sat in the SDK's own wait (`SDK_WAIT_FRAME`)."""
        with _sigint_not_ignored():
            self.process = subprocess.Popen(
                self.argv,
                cwd=launch.pwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0,  # cmdutil.RegisterProcessGroup: Setpgid
            )
        self._drains = [threading.Thread(target=self._drain, args=("stderr",), daemon=True)]
        self._drains[0].start()
        port = self._read_port()
        self._drains.append(threading.Thread(target=self._drain, args=("stdout",), daemon=True))
        self._drains[1].start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)

    def _drain(self, name: str) -> None:
        stream = getattr(self.process, name)
        sink = getattr(self, name)
        for line in iter(stream.readline, b""):
            sink.append(line.decode("utf-8", "replace"))

    def _read_port(self) -> int:
        # One byte at a time up to the first newline, as newPlugin reads it.
        assert self.process.stdout is not None
        text = b""
        while True:
            byte = self.process.stdout.read(1)
            if not byte:
                self.process.wait()
                self._drains[0].join(5)
                self.close()
                raise PluginStartError(
                    f"could not read plugin [{self.argv[0]}]: exit status "
                    f"{self.process.returncode}: {''.join(self.stderr).strip()}"
                )
            if byte == b"\n":
                break
            text += byte
        port = int(text.decode().strip())
        if not 0 < port <= 65535:
            raise PluginStartError(f"invalid port number: {port}")
        return port

    def close(self) -> None:
        """Plugin.Close: close the connection, SIGINT the group, SIGKILL it after 5 s."""
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(CLOSE_GRACE_S + LOADED_MACHINE_GRACE_S)
            except subprocess.TimeoutExpired:
                self.killed = True
                os.kill(self.process.pid, signal.SIGABRT)
                with suppress(subprocess.TimeoutExpired):
                    self.process.wait(5)
                # The group is gone when the abort took its last process with it.
                with suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.returncode = self.process.returncode
        for drain in self._drains:
            drain.join(5)
        if self.killed:
            self.sigint_missed_sdk_wait = _main_thread_in_sdk_wait("".join(self.stderr))
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self._server.stop(0)


def _main_thread_in_sdk_wait(stderr: str) -> bool:
    """Whether faulthandler's dump (the SIGABRT in `close`) shows the main thread in the
    host's own `Event().wait()`, with nothing but `threading`'s wait above it."""
    _, found, current = stderr.rpartition("Current thread ")
    if not found:
        return False
    lines = [line.strip() for line in current.splitlines()[1:]]
    frames = [line for line in lines if line.startswith("File ")]
    for i, frame in enumerate(frames):
        if SDK_WAIT_FRAME.search(frame):
            return all('/threading.py"' in above for above in frames[:i])
    return False


# --------------------------------------------------------------------------------------
# Properties on the wire
# --------------------------------------------------------------------------------------


def _engine_value(value: Any, *, keep_unknowns: bool) -> Any:
    if isinstance(value, dict):
        if (value.get(_SECRET_SIG[0]), len(value)) == (_SECRET_SIG[1], 2):
            # The host answers Configure with acceptSecrets false: the engine unwraps secrets.
            return _engine_value(value["value"], keep_unknowns=keep_unknowns)
        return {k: _engine_value(v, keep_unknowns=keep_unknowns) for k, v in value.items()}
    if isinstance(value, list):
        return [_engine_value(v, keep_unknowns=keep_unknowns) for v in value]
    if value == rpc.UNKNOWN and not keep_unknowns:
        raise ProviderError("an unknown value outside a preview")
    return value


def to_provider(registered: struct_pb2.Struct, *, preview: bool) -> struct_pb2.Struct:
    """What the SDK registered, as the engine marshals it to a provider that accepts no
    secrets: secrets unwrapped, unknowns kept as the sentinel only in a preview, nulls kept,
    every number a double (protobuf Struct)."""
    plain = _engine_value(MessageToDict(registered), keep_unknowns=preview)
    out = struct_pb2.Struct()
    out.update(plain)
    return out


def plain(props: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as Python values (numbers stay floats, as they travel)."""
    return MessageToDict(props)


# --------------------------------------------------------------------------------------
# Deployments
# --------------------------------------------------------------------------------------


@dataclass
class Goal:
    """One dynamic resource as the program registered it."""

    urn: str
    type: str
    name: str
    inputs: struct_pb2.Struct
    """Exactly what the SDK sent (request.object of RegisterResource)."""


@dataclass
class ResourceState:
    """What the engine keeps in the stack's state for a resource."""

    urn: str
    type: str
    id: str
    inputs: struct_pb2.Struct
    outputs: struct_pb2.Struct


@dataclass
class StepResult:
    urn: str
    op: str
    """create | same | update | replace | delete | refresh (and for previews the same)."""
    diff: Any = None
    check_failures: list[tuple[str, str]] = field(default_factory=list)


class Deployment:
    """One `pulumi preview` / `up` / `refresh` / `destroy`: a fresh provider host, the calls
    the engine makes for each dynamic resource, the host closed at the end."""

    def __init__(
        self,
        launch: PluginLaunch,
        state: dict[str, ResourceState],
        *,
        preview: bool,
        engine_env: Mapping[str, str] | None = None,
    ) -> None:
        self.launch = launch
        self.state = state
        self.preview = preview
        self.engine_env = dict(os.environ if engine_env is None else engine_env)
        self.calls: list[tuple[str, str]] = []
        self.results: list[StepResult] = []
        self.host: ProviderHost | None = None

    def __enter__(self) -> Self:
        self.host = ProviderHost(self.launch, self.engine_env)
        stub = self.host.stub
        stub.GetPluginInfo(empty_pb2.Empty())
        # The registry configures the default provider before its first resource call
        # (pkg/resource/deploy/providers/registry.go, Configure).
        configured = stub.Configure(
            provider_pb2.ConfigureRequest(acceptSecrets=True, acceptResources=True)
        )
        self.accepts_secrets = configured.acceptSecrets
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.host is not None
        self.host.close()

    def _call(self, method: str, urn: str, request: Any) -> Any:
        assert self.host is not None
        self.calls.append((method, urn))
        try:
            return getattr(self.host.stub, method)(request)
        except grpc.RpcError as exc:
            raise ProviderError(f"{method}({urn}): {exc.details()}") from exc

    # -- the steps ---------------------------------------------------------------------

    def register(self, goal: Goal) -> StepResult:
        """The step generator for one registration (step_generator.go generateResourceSteps)."""
        news = to_provider(goal.inputs, preview=self.preview)
        old = self.state.get(goal.urn)
        check = self._call(
            "Check",
            goal.urn,
            provider_pb2.CheckRequest(
                urn=goal.urn,
                name=goal.name,
                type=goal.type,
                olds=old.inputs if old is not None else struct_pb2.Struct(),
                news=news,
            ),
        )
        failures = [(f.property, f.reason) for f in check.failures]
        if failures:
            raise ProviderError(f"Check({goal.urn}) failed: {failures}")
        inputs = check.inputs
        if not self.preview:
            _engine_value(MessageToDict(inputs), keep_unknowns=False)
        if old is None:
            return self._done(StepResult(goal.urn, "create"), self._create(goal, inputs))
        diff = self._call(
            "Diff",
            goal.urn,
            provider_pb2.DiffRequest(
                id=old.id,
                urn=goal.urn,
                name=goal.name,
                type=goal.type,
                olds=old.outputs,
                old_inputs=old.inputs,
                news=inputs,
            ),
        )
        if diff.changes == provider_pb2.DiffResponse.DIFF_NONE:
            if not self.preview:
                # A same step keeps the old outputs and records the new inputs.
                self.state[goal.urn] = ResourceState(
                    goal.urn, goal.type, old.id, inputs, old.outputs
                )
            return self._done(StepResult(goal.urn, "same", diff))
        if diff.changes != provider_pb2.DiffResponse.DIFF_SOME:
            raise ProviderError(f"Diff({goal.urn}) answered {diff.changes}")
        if not diff.replaces:
            return self._done(StepResult(goal.urn, "update", diff), self._update(goal, old, inputs))
        # Replace: the provider's deleteBeforeReplace orders delete then create
        # (step_generator.go ~2041-2163).
        if self.preview:
            return self._done(StepResult(goal.urn, "replace", diff))
        if diff.deleteBeforeReplace:
            self._delete(old)
            created = self._create(goal, inputs)
        else:
            created = self._create(goal, inputs)
            self._delete(old)
        return self._done(StepResult(goal.urn, "replace", diff), created)

    def _done(self, result: StepResult, state: ResourceState | None = None) -> StepResult:
        if state is not None:
            self.state[result.urn] = state
        self.results.append(result)
        return result

    def _create(self, goal: Goal, inputs: struct_pb2.Struct) -> ResourceState | None:
        if self.preview:
            return None  # no provider preview from this host: the engine shows the inputs
        created = self._call(
            "Create",
            goal.urn,
            provider_pb2.CreateRequest(
                urn=goal.urn, name=goal.name, type=goal.type, properties=inputs
            ),
        )
        return ResourceState(goal.urn, goal.type, created.id, inputs, created.properties)

    def _update(
        self, goal: Goal, old: ResourceState, inputs: struct_pb2.Struct
    ) -> ResourceState | None:
        if self.preview:
            return None
        updated = self._call(
            "Update",
            goal.urn,
            provider_pb2.UpdateRequest(
                id=old.id,
                urn=goal.urn,
                name=goal.name,
                type=goal.type,
                olds=old.outputs,
                old_inputs=old.inputs,
                news=inputs,
            ),
        )
        return ResourceState(goal.urn, goal.type, old.id, inputs, updated.properties)

    def _delete(self, old: ResourceState) -> None:
        self._call(
            "Delete",
            old.urn,
            provider_pb2.DeleteRequest(
                id=old.id,
                urn=old.urn,
                name=old.urn.split("::")[-1],
                type=old.type,
                properties=old.outputs,
                old_inputs=old.inputs,
            ),
        )

    def refresh(self, urn: str) -> StepResult:
        """RefreshStep.Apply: Read with the old inputs and outputs (step.go ~1580)."""
        old = self.state[urn]
        read = self._call(
            "Read",
            urn,
            provider_pb2.ReadRequest(
                id=old.id,
                urn=urn,
                name=urn.split("::")[-1],
                type=old.type,
                properties=old.outputs,
                inputs=old.inputs,
            ),
        )
        if not read.id:
            del self.state[urn]
            return self._done(StepResult(urn, "deleted"))
        inputs = read.inputs if read.HasField("inputs") else old.inputs
        self.state[urn] = ResourceState(urn, old.type, read.id, inputs, read.properties)
        return self._done(StepResult(urn, "refresh"))

    def destroy(self, urn: str) -> StepResult:
        """DeleteStep.Apply: Delete with the old outputs and inputs (step.go ~688)."""
        if not self.preview:
            self._delete(self.state.pop(urn))
        return self._done(StepResult(urn, "delete"))


def with_input(goal: Goal, key: str, value: Any) -> Goal:
    """`goal` with input `key` set to `value`: how the tier points a resource's
    `api_endpoint` at a local HTTP fake (the program registers none)."""
    inputs = struct_pb2.Struct()
    inputs.CopyFrom(goal.inputs)
    inputs.update({key: value})
    return Goal(goal.urn, goal.type, goal.name, inputs)


class EngineStack:
    """A stack's state across deployments, each one a fresh host (Deployment)."""

    def __init__(self, launch: PluginLaunch, engine_env: Mapping[str, str] | None = None) -> None:
        self.launch = launch
        self.engine_env = engine_env
        self.state: dict[str, ResourceState] = {}

    def _deployment(self, preview: bool) -> Deployment:
        return Deployment(self.launch, self.state, preview=preview, engine_env=self.engine_env)

    def _run(self, preview: bool, step: Any, items: list[Any]) -> Deployment:
        deployment = self._deployment(preview)
        with deployment:
            for item in items:
                step(deployment, item)
        assert deployment.host is not None
        host = deployment.host
        if host.sigint_missed_sdk_wait:
            warnings.warn(
                "the provider host missed SIGINT in the SDK's own wait (SDK_WAIT_FRAME) and "
                "was killed, as the engine kills it",
                stacklevel=2,
            )
            return deployment
        if host.killed or host.returncode not in EXITED_ON_SIGINT:
            raise ProviderError(
                f"the host did not exit on SIGINT (rc {deployment.host.returncode}, killed "
                f"{deployment.host.killed}): {''.join(deployment.host.stderr)[-6000:]}"
            )
        return deployment

    def preview(self, goals: list[Goal]) -> Deployment:
        """`pulumi preview`: Check, and Diff where the resource exists; nothing changes."""
        return self._run(True, Deployment.register, goals)

    def up(self, goals: list[Goal]) -> Deployment:
        """`pulumi up`: Check, Diff, then Create / Update / Delete+Create as the diff says."""
        return self._run(False, Deployment.register, goals)

    def refresh(self) -> Deployment:
        """`pulumi refresh`: Read every resource in the state."""
        return self._run(False, Deployment.refresh, list(self.state))

    def destroy(self) -> Deployment:
        """`pulumi destroy`: Delete every resource, in reverse order of creation."""
        return self._run(False, Deployment.destroy, list(reversed(self.state)))

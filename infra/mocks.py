"""Run a Pulumi program offline under recording mocks.

This is the engine behind `trainstack plan`, the component tests and the plan benchmark:
the same program code that `pulumi up` runs registers its resources here against a mock
monitor that records every registration (type, logical name, parent, inputs exactly as
serialized, and the protect / retain-on-delete / replace-on-changes options), and answers invokes from a table.
No credentials, no network, no Pulumi CLI.

Each run owns the asyncio event loops it runs on and closes them before it returns. Pulumi's
mock monitor answers from the default executor's worker threads and gives each thread a
loop of its own that nobody closes (`_ensure_event_loop` in pulumi/runtime/mocks.py and
pulumi/runtime/sync_await.py). Left open, those loops were reclaimed at interpreter exit,
when `threading._shutdown` joins the workers: each loop is garbage in a cycle with its
self-pipe reader, and when the collector finalized the self-pipe socket first (the socket's
finalizer sets its fd to -1), the loop's `__del__` closed itself, unregistered fd -1 and
printed `Exception ignored in: <function BaseEventLoop.__del__ ...> ValueError: Invalid file
descriptor: -1` (CPython Lib/asyncio/base_events.py `__del__`, selector_events.py
`_close_self_pipe`), after a plan that had succeeded. Whether the socket came first depends
on the collector's generation lists, hence a few plans in thirty.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as _mocks
from pulumi.runtime import rpc as _rpc
from pulumi.runtime import settings as _settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from trainstack.infra.project import find_project

PROJECT = "trainstack"
UNKNOWN = "(known after deploy)"
SECRET = "[secret]"

# Extra state a mocked resource reports back, keyed by type token. Each function gets the
# recorded inputs and the logical name and returns outputs the real provider would compute
# (camelCase, as the engine returns them). Anything not computed echoes the inputs.
OutputsFn = Callable[[str, dict[str, Any]], dict[str, Any]]
InvokeFn = Callable[[dict[str, Any]], dict[str, Any]]


def _bucket_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    bucket = inputs.get("name", name)
    return {
        "url": f"gs://{bucket}",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}",
    }


def _account_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    account = inputs.get("accountId", name)
    project = inputs.get("project", "mock-project")
    email = f"{account}@{project}.iam.gserviceaccount.com"
    return {
        "email": email,
        "member": f"serviceAccount:{email}",
        "name": f"projects/{project}/serviceAccounts/{email}",
    }


def _account_deploy_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    # Google assigns `uniqueId` when the account is created ("The unique, stable numeric ID
    # for the service account", iam.v1 discovery `ServiceAccount.uniqueId`): known after an
    # up, unknown in a preview. Here a 21-digit number derived from the account's email.
    email = _account_outputs(name, inputs)["email"]
    digits = int(hashlib.sha256(email.encode()).hexdigest(), 16) % 10**20
    return {"uniqueId": f"1{digits:020d}"}


def _self_link_outputs(kind: str) -> OutputsFn:
    def outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        project = inputs.get("project", "mock-project")
        physical = inputs.get("name", name)
        where = f"regions/{inputs['region']}" if "region" in inputs else "global"
        link = f"https://www.googleapis.com/compute/v1/projects/{project}/{where}/{kind}/{physical}"
        return {"selfLink": link, "id": f"projects/{project}/{where}/{kind}/{physical}"}

    return outputs


QUOTA_INFO_INVOKE = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"


def _quota_offline(args: dict[str, Any]) -> dict[str, Any]:
    # Offline there is no limit to read: answer as a refused read does (QuotaGuard warns),
    # not with an empty result, which is how the provider reports an id the API lacks.
    raise InvokeFailure("offline: quota limits are read by pulumi preview/up, not under mocks")


def _function_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    # The cloudfunctions.net address every function has besides its run.app one
    # (https://cloud.google.com/functions/docs/calling/http).
    project = inputs.get("project", "mock-project")
    physical = inputs.get("name", name)
    return {"url": f"https://{inputs.get('location')}-{project}.cloudfunctions.net/{physical}"}


def _image_build_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    # The digest exists only once Cloud Build has pushed the image
    # (trainstack.components._cloud_build_provider): the plan shows where it will be.
    image = str(inputs.get("image", name))
    return {"image_uri": f"{image.rsplit(':', 1)[0]}@{UNKNOWN}"}


SECRET_TYPE = "gcp:secretmanager/secret:Secret"


def _secret_id(inputs: dict[str, Any]) -> str:
    # The provider's id of a secret: `projects/{{project}}/secrets/{{secret_id}}`
    # (terraform-provider-google google/services/secretmanager/resource_secret_manager_secret.go
    # `resourceSecretManagerSecretCreate`, `tpgresource.ReplaceVars(d, config,
    # "projects/{{project}}/secrets/{{secret_id}}")`).
    return f"projects/{inputs.get('project', 'mock-project')}/secrets/{inputs.get('secretId')}"


def _secret_version_outputs(name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    # The version's `name` is Google's (the provider sets it from the create response,
    # resource_secret_manager_secret_version.go `resourceSecretManagerSecretVersionCreate`):
    # "projects/*/secrets/*/versions/*. SecretVersion IDs in a Secret start at 1"
    # (secretmanager.v1 discovery, `SecretVersion.name`). A stack's secret has one version.
    return {"name": f"{inputs.get('secret')}/versions/1", "version": "1"}


DEFAULT_OUTPUTS: dict[str, OutputsFn] = {
    "gcp:secretmanager/secretVersion:SecretVersion": _secret_version_outputs,
    "pulumi-python:dynamic/cloudbuild:ImageBuild": _image_build_outputs,
    "gcp:cloudfunctionsv2/function:Function": _function_outputs,
    "gcp:storage/bucket:Bucket": _bucket_outputs,
    "gcp:serviceaccount/account:Account": _account_outputs,
    "gcp:compute/network:Network": _self_link_outputs("networks"),
    "gcp:compute/subnetwork:Subnetwork": _self_link_outputs("subnetworks"),
    "gcp:compute/router:Router": _self_link_outputs("routers"),
}


DEPLOY_OUTPUTS: dict[str, OutputsFn] = {
    "gcp:serviceaccount/account:Account": _account_deploy_outputs,
}
"""Outputs a provider computes only when it creates the resource: added under `pulumi up`
(`preview=False`), left unknown in a preview."""


_ENGINE = Path(pulumi.runtime.__file__).resolve().parent
"""pulumi's runtime: where the engine's wrappers of a program's exceptions are raised."""


def engine_unwrapped(exc: BaseException) -> BaseException:
    """`exc` without the engine's wrappers: the exception the program (or a component it
    called) raised.

    The Python runtime wraps an error met while it serializes a resource's inputs, once per
    input and once per resource (`raise ValueError("While processing input: ...\nValueError
    has risen: ...") from e`, pulumi/runtime/rpc.py `serialize_properties` and
    pulumi/runtime/resource.py `do_register`), and re-raises a failed registration with
    itself as its cause (`raise exn from cause` in pulumi/runtime/stack.py `wait_for_rpcs`,
    where `cause` is the first failure, usually `exn` itself), which drops the cause the
    wrapper had; its `__context__` still holds it. Only exceptions raised inside pulumi's
    runtime are unwrapped: a program's own `raise ValueError(...) from err`, and what it
    raises while handling another exception, are what it means to say.
    """
    seen: set[int] = set()
    while id(exc) not in seen and _raised_in(exc, _ENGINE):
        seen.add(id(exc))
        inner = exc.__cause__ if exc.__cause__ not in (None, exc) else exc.__context__
        if inner is None:
            break
        exc = inner
    return exc


def _raised_in(exc: BaseException, folder: Path) -> bool:
    """Whether `exc` was raised by code under `folder` (the innermost frame of its
    traceback; re-raising an exception keeps that frame)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(folder)


class InvokeFailure(Exception):
    """Raised by an invoke handler to answer as a provider does when the API call fails
    (e.g. PERMISSION_DENIED): the program sees a catchable invoke error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RecordedResource:
    """One resource registration as the engine would have received it."""

    type: str
    name: str
    urn: str
    parent_urn: str
    inputs: dict[str, Any]
    custom: bool
    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool
    dependencies: tuple[str, ...]
    values: dict[str, Any] = field(default_factory=dict)
    """`inputs` with each secret's value in place of [secret], for tests (what the engine
    would send the provider)."""
    secret_digests: dict[str, str] = field(default_factory=dict)
    """For each input shown as [secret], the sha256 of its value with each `secure:` value
    as its [secret] placeholder (`secret_digest`): it changes when what is not secret in the
    input changes. Only in a run that asked for them (`run_program(digest_secrets=True)`,
    offline: `trainstack plan` of a stack with `secure:` values)."""
    secure_inputs: tuple[str, ...] = ()
    """Those of `secret_digests` whose value carries a `secure:` value's placeholder: the
    inputs the engine decrypts a `secure:` value into."""
    replace_on_changes: tuple[str, ...] = ()
    """The resource's `replace_on_changes` option: inputs whose change replaces it."""

    @property
    def parent(self) -> str | None:
        """Logical name of the parent resource, or None for children of the stack."""
        if not self.parent_urn:
            return None
        # urn:pulumi:<stack>::<project>::<type chain>::<name>
        _, _, type_chain, name = self.parent_urn.split("::", 3)
        if type_chain.split("$")[-1] == "pulumi:pulumi:Stack":
            return None
        return name


@dataclass
class ProgramRun:
    """Everything one offline run of a program registered."""

    resources: list[RecordedResource]
    outputs: dict[str, Any]
    invokes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)
    """(level name, message) of everything the program logged through `pulumi.log`."""
    secret_outputs: frozenset[str] = frozenset()
    """The outputs that are Pulumi secrets (`outputs` holds their values, for tests)."""
    registered_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each component registered with `register_outputs`, by URN, as serialized (secrets
    as [secret], numbers as floats, resources as references), as the engine keeps it on the
    component's state: a component's `facts` are read here."""

    @property
    def shown_outputs(self) -> dict[str, Any]:
        """`outputs` as the engine shows them (`pulumi stack output`): secrets as [secret]."""
        return {k: SECRET if k in self.secret_outputs else v for k, v in self.outputs.items()}

    def of_type(self, type_token: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_token]

    def named(self, name: str) -> RecordedResource:
        found = [r for r in self.resources if r.name == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} resources named {name!r}; have {self.names()}")
        return found[0]

    def names(self) -> list[str]:
        return [r.name for r in self.resources]


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that echo inputs back as state, plus computed outputs from a table."""

    def __init__(
        self,
        outputs: Mapping[str, OutputsFn] | None = None,
        invokes: Mapping[str, InvokeFn] | None = None,
        preview: bool = True,
    ) -> None:
        self.outputs = {**DEFAULT_OUTPUTS, **(outputs or {})}
        self.deploy_outputs = {} if preview else dict(DEPLOY_OUTPUTS)
        self.invoke_table = {QUOTA_INFO_INVOKE: _quota_offline, **(invokes or {})}
        self.invokes: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args: _mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        state = dict(args.inputs)
        fn = self.outputs.get(args.typ)
        if fn is not None:
            state.update(fn(args.name, args.inputs))
        deployed = self.deploy_outputs.get(args.typ)
        if deployed is not None:
            state.update(deployed(args.name, args.inputs))
        if args.typ == SECRET_TYPE:
            return _secret_id(args.inputs), state
        return f"{args.name}-id", state

    def call(
        self, args: _mocks.MockCallArgs
    ) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        self.invokes.append((args.token, dict(args.args)))
        fn = self.invoke_table.get(args.token)
        if fn is None:
            return {}, []  # the mock monitor iterates the failures: a list, never None
        try:
            return fn(dict(args.args)), []
        except InvokeFailure as failure:
            return {}, [("", failure.reason)]


class RecordingMonitor(_mocks.MockMonitor):
    """A mock monitor that also keeps each registration's parent and resource options."""

    def __init__(self, mocks: RecordingMocks, digest_secrets: bool = False) -> None:
        super().__init__(mocks)
        self.digest_secrets = digest_secrets
        self.recorded: list[RecordedResource] = []
        self.registered_outputs: dict[str, dict[str, Any]] = {}

    def RegisterResourceOutputs(self, request: Any) -> Any:
        # Pulumi's MockMonitor drops these (`RegisterResourceOutputs` returns an empty
        # message, sdk/python/lib/pulumi/runtime/mocks.py); the engine sets them as the
        # component's state outputs (`reg.New().Outputs = outs` in
        # pkg/resource/deploy/step_executor.go `executeRegisterResourceOutputs`), which the
        # checkpoint keeps: a component's `facts` are read from there.
        # As serialized, not deserialized: deserializing a resource reference (a component's
        # child in its outputs) would await a `get_resource` on this executor thread's loop.
        outputs = json_format.MessageToDict(request.outputs)
        self.registered_outputs[request.urn] = _plain(outputs)
        return super().RegisterResourceOutputs(request)

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            _mocks._ensure_event_loop()
            inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
            self.recorded.append(
                RecordedResource(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent_urn=request.parent,
                    inputs=_plain(inputs),
                    values=_plain(inputs, secrets=True),
                    secret_digests=secret_digests(inputs) if self.digest_secrets else {},
                    secure_inputs=secure_inputs(inputs) if self.digest_secrets else (),
                    custom=bool(request.custom),
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    dependencies=tuple(request.dependencies),
                    replace_on_changes=tuple(request.replaceOnChanges),
                )
            )
        return response


def _holds_secret(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get(_rpc._special_sig_key) == _rpc._special_secret_sig:
            return True
        return any(_holds_secret(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_secret(v) for v in value)
    return False


def secret_digest(value: Any) -> str | None:
    """The sha256 of `value` (deserialized inputs) with its secrets' values in place, when
    it holds a secret; else None.

    Only for a run of trainstack's own program offline (`run_program(digest_secrets=True)`,
    never with `secret_keys`): there every `secure:` value is its [secret] placeholder
    (`trainstack.infra.config_secrets`) and every other secret is made of the mocks' values
    (a kubeconfig of the mocked cluster), so what is hashed is the input's non-secret
    content: a changed argument or env value beside the secret, or a bundle named by the
    hash of a script that carries it, changes the digest; no secret reaches it.
    """
    if not _holds_secret(value):
        return None
    text = json.dumps(_plain(value, secrets=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def secure_inputs(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs holding a secret whose value carries the [secret] placeholder."""
    return tuple(
        key
        for key, value in inputs.items()
        if _holds_secret(value) and SECRET in json.dumps(_plain(value, secrets=True))
    )


def secret_digests(inputs: Mapping[str, Any]) -> dict[str, str]:
    """`secret_digest` of each input that has one, by input name."""
    found = {key: secret_digest(value) for key, value in inputs.items()}
    return {key: digest for key, digest in found.items() if digest is not None}


def _plain(value: Any, secrets: bool = False) -> Any:
    """Inputs as JSON-able data (assets become their path; unknowns become a marker; secrets
    [secret], or their values with `secrets`)."""
    if isinstance(value, dict):
        if value.get(_rpc._special_sig_key) == _rpc._special_secret_sig:
            # Shown as the engine shows secrets in a preview.
            return _plain(value.get("value"), secrets) if secrets else SECRET
        return {k: _plain(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, secrets) for v in value]
    if isinstance(value, pulumi.FileAsset):
        # Relative to the project so plans from two checkouts (PR base and head) compare.
        path = Path(str(value.path))
        root = find_project().root
        if path.is_absolute() and path.is_relative_to(root):
            path = path.relative_to(root)
        return {"fileAsset": path.as_posix()}
    if isinstance(value, pulumi.StringAsset):
        return {"stringAsset": value.text}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, pulumi.output.Unknown):
        # Its repr carries an address, which would make two plans of one config differ.
        return UNKNOWN
    return repr(value)


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[tuple[str, str]]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append((record.levelname, record.getMessage()))


def config_to_engine(config: Mapping[str, Any]) -> dict[str, str]:
    """Stack-file config values as the engine hands them to a program: objects as JSON."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for key, value in config.items()
    }


@contextmanager
def owned_event_loops() -> Iterator[None]:
    """A fresh event loop for this thread and one per executor thread, all closed at the end
    (the executor too), the thread's previous loop restored: a run leaves no loop open that
    was not open before it."""
    try:
        previous: asyncio.AbstractEventLoop | None = (
            asyncio.get_event_loop_policy().get_event_loop()
        )
    except RuntimeError:
        previous = None
    loops: list[asyncio.AbstractEventLoop] = []
    lock = threading.Lock()

    def thread_loop() -> None:
        # The mock monitor asks each executor thread for its current loop (creating one
        # when there is none); give it one this run closes.
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        with lock:
            loops.append(loop)

    executor = ThreadPoolExecutor(thread_name_prefix="trainstack-mocks", initializer=thread_loop)
    main = asyncio.new_event_loop()
    # The runtime sends every monitor call through the loop's default executor
    # (`run_in_executor(None, ...)` in pulumi/runtime/resource.py), so these are its threads.
    main.set_default_executor(executor)
    asyncio.set_event_loop(main)
    try:
        yield
    finally:
        executor.shutdown(wait=True)
        for loop in [*loops, main]:
            loop.close()
        # The thread's loop as it was: the one it had (in a main thread that had none,
        # the one `get_event_loop` made above, as it would have for any caller), else none.
        asyncio.set_event_loop(previous)


def run_program(
    program: Callable[[], Mapping[str, Any] | None],
    *,
    config: Mapping[str, Any] | None = None,
    stack: str = "plan",
    project: str = PROJECT,
    preview: bool = True,
    outputs: Mapping[str, OutputsFn] | None = None,
    invokes: Mapping[str, InvokeFn] | None = None,
    secret_keys: Collection[str] = (),
    digest_secrets: bool = False,
) -> ProgramRun:
    """Run `program` under recording mocks and return what it registered.

    `digest_secrets` records each resource's `secret_digests`; never with `secret_keys`
    (then the secrets hold their decrypted values, which no digest may be taken of).

    `config` is the stack file's `config:` mapping (e.g. `{"gcp:project": "p",
    "trainstack:tpu": {...}}`). `secret_keys` names the config keys the engine would mark
    secret, their values given decrypted, as `pulumi up` hands them to a program
    (`PULUMI_CONFIG_SECRET_KEYS`); offline a stack file's `secure:` values stay encrypted and
    no key is. Exceptions raised by the program propagate after the runtime has settled, so
    a validation error registers nothing further. The run's event loops are closed when it
    returns (module docstring).
    """
    # The root Stack that set_mocks registers binds its futures to the current loop, so the
    # loops are in place before anything of the run exists.
    with owned_event_loops():
        return _record(
            program,
            config=config,
            stack=stack,
            project=project,
            preview=preview,
            outputs=outputs,
            invokes=invokes,
            secret_keys=secret_keys,
            digest_secrets=digest_secrets and not secret_keys,
        )


def _record(
    program: Callable[[], Mapping[str, Any] | None],
    *,
    config: Mapping[str, Any] | None,
    stack: str,
    project: str,
    preview: bool,
    outputs: Mapping[str, OutputsFn] | None,
    invokes: Mapping[str, InvokeFn] | None,
    secret_keys: Collection[str],
    digest_secrets: bool,
) -> ProgramRun:
    mocks = RecordingMocks(outputs=outputs, invokes=invokes, preview=preview)
    monitor = RecordingMonitor(mocks, digest_secrets)
    logs: list[tuple[str, str]] = []
    logger = logging.getLogger(f"trainstack.mocks.{id(logs)}")
    logger.propagate = False  # keep engine messages out of the CLI's output; they are returned
    logger.handlers = [_ListHandler(logs)]
    _settings.ROOT.set(None)
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=preview, monitor=monitor, logger=logger
    )
    pulumi.runtime.set_all_config(config_to_engine(config or {}), list(secret_keys))
    result: dict[str, Any] = {}
    exports: dict[str, pulumi.Output[Any]] = {}

    def body() -> None:
        returned = program()
        # `pulumi.export` puts a value on the root Stack (set_mocks made one); a program's
        # returned mapping is exported beside them, as `pulumi.run` does.
        root = _settings.get_root_resource()
        exported = {**getattr(root, "outputs", {}), **(returned or {})}
        # Outputs a provider computes at deploy time stay unknown in a preview; they keep
        # this marker instead of hiding the outputs that are known.
        result.update(dict.fromkeys(exported, UNKNOWN))

        def keeper(key: str) -> Callable[[Any], None]:
            def keep(value: Any) -> None:
                result[key] = value

            return keep

        for key, value in exported.items():
            exports[key] = pulumi.Output.from_input(value)
            exports[key].apply(keeper(key))

    secret: set[str] = set()
    settings = _settings.SETTINGS
    settings.rpc_manager.clear()
    settings.outputs.clear()
    try:
        _sync_await(run_pulumi_func(body))
        secret.update(key for key, out in exports.items() if _sync_await(out.is_secret()))
    finally:
        pulumi.runtime.set_all_config({}, [])
    return ProgramRun(
        resources=list(monitor.recorded),
        outputs=result,
        invokes=list(mocks.invokes),
        logs=logs,
        secret_outputs=frozenset(secret),
        registered_outputs=dict(monitor.registered_outputs),
    )

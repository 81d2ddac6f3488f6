"""What every `trainstack` command shares: the typer app, the stack options, and errors as
one `error:` line (exit 2) instead of a traceback. The commands live in `trainstack.infra.cli` (plan,
plan-diff, quota, policy, stacks) and `trainstack.infra.cli_run` (status, logs, local-run: operating a
run)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Final, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType

from trainstack.infra.config import (
    ConfigError,
    NotATrainstackStack,
    StackConfig,
    load_stack_config,
)
from trainstack.infra.local_paths import localized
from trainstack.infra.plan import StackFileError, load_stack, stack_file, stack_place
from trainstack.infra.project import (
    InstallWriteError,
    ProjectFileError,
    find_project,
    place_scope,
    set_place,
)
from trainstack.infra.targets import StandaloneTarget, target_of

P = ParamSpec("P")
R = TypeVar("R")


def prose(text: str | None) -> str | None:
    """Help text as sentences: each paragraph's hard-wrapped lines joined into one (rich
    prints a docstring's line breaks as they are, so a wrapped docstring reads broken)."""
    if text is None:
        return None
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _without_flag_metavars(params: Iterable[Any]) -> None:
    # typer shows a flag's type as `<bool>`, as if it took a value: a flag takes none.
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class HelpCommand(TyperCommand):
    """A command whose help reads as sentences and whose flags show no value type."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = prose(self.help)
        _without_flag_metavars(self.params)
        for param in self.params:
            if isinstance(param, TyperOption) and param.help:
                param.help = prose(param.help)

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _without_flag_metavars(params)  # the --help option click adds
        return params


class HelpGroup(TyperGroup):
    """The `trainstack` group: its own --help shows no value type either."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _without_flag_metavars(params)
        return params


class _Typer(typer.Typer):
    """Every command is a `HelpCommand` unless it names another class."""

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(name, cls=cls or HelpCommand, **kwargs)


app = _Typer(
    cls=HelpGroup,
    help="Google Cloud training infrastructure as code, with a bundled distributed trainer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
_JSON_PLAN = "the output of `trainstack plan --json`"

StackOpt = Annotated[
    str | None,
    typer.Option(
        "--stack",
        "-s",
        help="A stack of your project (Pulumi.<NAME>.yaml in the stackConfigDir of the "
        "nearest Pulumi.yaml), or example:NAME for a bundled one (`trainstack stacks "
        "--examples`).",
    ),
]
ConfigFileOpt = Annotated[
    Path | None,
    typer.Option("--config-file", "-c", help="A Pulumi.<stack>.yaml-shaped file to use instead."),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def fail_each(messages: list[str], code: int = 2) -> typer.Exit:
    """One `error:` line per message (a stack config's problems, one per key), so that each
    line names its stack and key on its own and a `grep error:` finds every one."""
    for message in messages[:-1]:
        fail(message, code)
    return fail(messages[-1], code)


MAX_JSON_DEPTH: Final = 128
"""How deep a plan's values may nest: a plan's deepest values (a Kubernetes pod spec's) are
about 15 levels down. Python's JSON reader and the plan walkers recurse per level, so
100,000 levels of `[` were a RecursionError and its traceback."""


def _depth(value: Any) -> int:
    """How deep `value` nests (0 for a scalar), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def read_json(path: Path, what: str) -> Any:
    """The JSON document at `path`; exit 2 naming `what` when it cannot be read or parsed, or
    nests deeper than `MAX_JSON_DEPTH`."""
    too_deep = f"its values nest more than {MAX_JSON_DEPTH} levels deep"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if _depth(document) <= MAX_JSON_DEPTH:
            return document
        reason = too_deep
    except OSError as exc:
        reason = str(exc.strerror)
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text at byte {exc.start}"
    except json.JSONDecodeError as exc:
        reason = str(exc)
    except RecursionError:
        reason = too_deep
    raise fail(f"{what}: {path} is not a readable JSON plan ({reason}); valid: {_JSON_PLAN}")


def load(stack: str | None, config_file: Path | None) -> tuple[str, dict[str, Any]]:
    """The stack's name and config. Until the command ends (`scoped`), its relative paths
    resolve and its runs write where `stack_place` says (`trainstack.infra.project`)."""
    try:
        place = stack_place(stack, config_file)
        loaded = load_stack(stack, config_file)
    except (StackFileError, ProjectFileError) as exc:
        raise fail(str(exc)) from None
    set_place(place)
    return loaded


def scoped(command: Callable[P, R]) -> Callable[P, R]:
    """`command` with the stack place its `load` sets undone when it returns or fails, so
    commands run in one process (tests, CliRunner) never see another's."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with place_scope():
            return command(*args, **kwargs)

    return run


def validated(
    stack: str | None,
    config_file: Path | None,
    overrides: dict[str, dict[str, Any]] | None = None,
    command: str = "plan",
) -> tuple[str, StackConfig]:
    """The stack's name and validated config, a local stack's folders absolute against its
    base folder (`localized`); exit 2 naming the key when it is invalid. `overrides` (a
    command's flags, e.g. `local-run --workers`) replace keys of a section the file gives,
    before it is validated: a flag stands in for the file's value, valid or not."""
    name, config = load(stack, config_file)
    for section, values in (overrides or {}).items():
        given = config.get(section)
        if isinstance(given, dict):
            config = {**config, section: {**given, **values}}
    try:
        cfg = load_stack_config(config)
        target = target_of(cfg)
        if isinstance(target, StandaloneTarget):
            cfg = localized(cfg, name, target.local_run_root(cfg))
        return name, cfg
    except ConfigError as exc:
        raise fail_each(invalid_config(name, exc, stack, config_file, command)) from None
    except InstallWriteError as exc:
        raise fail(f"stack {name!r}: {exc}") from None


def program_folder(stack: str | None, config_file: Path | None) -> Path:
    """The Pulumi project folder (`--program DIR`) that the stack file belongs to."""
    path = config_file if config_file is not None else stack_file(str(stack))
    return find_project(path.resolve().parent).root


def invalid_config(
    name: str,
    exc: ConfigError,
    stack: str | None,
    config_file: Path | None,
    command: str = "plan",
) -> list[str]:
    """One line per problem, `stack 'NAME': <key>: <what is wrong>; valid: ...`; for a stack
    file without any `trainstack:` key (a stack of the user's own program), the `trainstack
    COMMAND --program` line that plans, checks or reads it instead (`plan`, `policy`, `status` and `logs` take
    --program)."""
    if not isinstance(exc, NotATrainstackStack):
        return config_problems(name, exc)
    folder = program_folder(stack, config_file)
    line = (
        f"stack {name!r} has no `trainstack:` keys, so it is not a trainstack stack; if it is "
        f"a stack of your own Pulumi program, valid: trainstack {command} --program {folder} "
        f"--stack {name}"
    )
    return [line]


def config_problems(name: str, exc: ConfigError) -> list[str]:
    """`stack 'NAME': <problem>` for each of the config's problems (one per key)."""
    return [f"stack {name!r}: {problem}" for problem in exc.errors]


def rejected_by_program(stack: str, exc: BaseException) -> str:
    """A component's own check that the config passed but the program refused.

    The engine wraps the component's error once per resource and input it flowed through
    (`trainstack.infra.mocks.engine_unwrapped`); the component's own says what is wrong
    (`<key>: <what>; valid: ...`).
    """
    from trainstack.infra.mocks import engine_unwrapped

    return f"stack {stack!r}: {engine_unwrapped(exc)}"


OutputsOpt = Annotated[
    Path | None,
    typer.Option(
        "--outputs",
        help="JSON of the stack's outputs (`pulumi stack output --json --show-secrets`); "
        "default: $TRAINSTACK_OUTPUTS, else the Pulumi CLI.",
    ),
]
EndpointOpt = Annotated[list[str] | None, typer.Option("--endpoint", hidden=True)]
ProgramOpt = Annotated[
    Path | None,
    typer.Option(
        "--program",
        help="A Pulumi project folder of your own (its Pulumi.yaml and program); --stack "
        "then names one of its stack files.",
    ),
]
ComponentOpt = Annotated[
    str | None,
    typer.Option(
        "--component",
        help="With --program: the compute component to read, by its Pulumi name (its facts' "
        "`name`), where the program has more than one.",
    ),
]
StateOpt = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="With --program: the stack's `pulumi stack export --show-secrets` JSON (every "
        "component's facts); default: --outputs, else the Pulumi CLI's export.",
    ),
]


def adc_hint() -> str:
    """What to do when Application Default Credentials cannot be loaded."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        return (
            f"GOOGLE_APPLICATION_CREDENTIALS is {path!r}, which is not a readable credentials "
            "file; valid: a service-account or `gcloud auth application-default login` JSON "
            "file, or unset it"
        )
    return (
        "run `gcloud auth application-default login` "
        "(or set GOOGLE_APPLICATION_CREDENTIALS to a credentials file)"
    )


def auth_failure(exc: Exception) -> str:
    """`could not authenticate ...` for credentials that exist but are refused."""
    detail = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    detail = " ".join(detail.split())
    return (
        f"could not authenticate with Application Default Credentials ({detail}); renew them "
        "with `gcloud auth application-default login`, or point GOOGLE_APPLICATION_CREDENTIALS "
        "at a current key"
    )


@contextlib.contextmanager
def google_errors(command: str, what: str) -> Iterator[None]:
    """Missing or refused credentials as one `error:` line (exit 2), like `quota --live`."""
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    try:
        yield
    except DefaultCredentialsError:
        raise fail(
            f"{command} needs Application Default Credentials to read {what}: {adc_hint()}"
        ) from None
    except GoogleAuthError as exc:
        raise fail(f"{command} {auth_failure(exc)}") from None

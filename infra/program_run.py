"""Run a Pulumi project folder of your own offline, the way Pulumi's Python language host does.

`read_program` reads the folder's `Pulumi.yaml` (its `name`, `main`, `stackConfigDir` and
`runtime`); `stack_config` reads a stack file from the stackConfigDir; `run_program_folder`
runs the program under trainstack's recording mocks (`trainstack.infra.mocks.run_program`).

The run matches what the language host does for `pulumi preview`: the working directory is
the program folder (the folder of `main`, or the project folder when `main` is unset) and
the entry point is run with `runpy.run_path(..., run_name="__main__")`
(pkg/engine/project.go:45-70 `getPwdMain`; sdk/python/cmd/pulumi-language-python-exec:146-149
and 188, pulumi/pulumi at 1b59498). The program folder also comes first on `sys.path`, so
the program's own top-level packages (a project's `infra/`, `components/`) are what bare
`import infra` / `import components` find, as they are in the language host's fresh
process. trainstack itself imports only as `trainstack.*`, so those names never reach it.

One process may run several programs (tests, `plan-diff --program`): modules that the
program folder provides are hidden from `sys.modules` while it runs and put back after,
and the modules the program loaded from its folder are dropped when it ends, so the next
program imports its own. Modules under `trainstack` and third-party packages stay loaded.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import yaml

from trainstack import _portions
from trainstack.components import _strict_yaml as strict_yaml
from trainstack.components._project import project_file_at_or_above
from trainstack.infra.mocks import InvokeFn, OutputsFn, ProgramRun, run_program
from trainstack.infra.project import placed, program_place

PROTECTED = frozenset({"trainstack", "__main__"})
"""Top-level module names a program folder never hides or drops: trainstack's own, and the
`__main__` that `runpy` swaps in and restores itself."""


class ProgramError(ValueError):
    """A project folder, stack file or program run that cannot be planned: one line per
    problem (a program's component may report several)."""


class ProgramExit(Exception):
    """The program called `sys.exit` (`code`): raised in place of its SystemExit, which
    asyncio re-raises out of the event loop while the task keeps it, to be logged with a
    traceback as "Task exception was never retrieved" when the task is collected
    (CPython Lib/asyncio/tasks.py `__step`, base_events.py `default_exception_handler`)."""

    def __init__(self, code: object) -> None:
        super().__init__(f"the program exited with code {code!r}")
        self.code = code


@dataclass(frozen=True)
class Program:
    """A Pulumi project folder of your own and how its program is started."""

    root: Path
    """The folder holding Pulumi.yaml."""
    name: str
    """The project name (`name:` of Pulumi.yaml); bare stack-file keys belong to it."""
    stacks_dir: Path
    """Where its `Pulumi.<stack>.yaml` files live: root / stackConfigDir, else root."""
    workdir: Path
    """The program's working directory and first `sys.path` entry: `main`'s folder."""
    entry: Path
    """What `runpy.run_path` runs: `main` (a file or a folder with __main__.py), else root."""
    project_config: Mapping[str, Any] = field(default_factory=dict)
    """Pulumi.yaml's `config:` block, as written (`stack_config` applies it)."""
    refreshes: bool = False
    """Pulumi.yaml has `options: {refresh: always}`: `pulumi up`, `preview` and `destroy`
    refresh first (pulumi/pulumi pkg/cmd/pulumi/operations/io.go getRefreshOption)."""

    def key(self, key: str) -> str:
        """A config key with its namespace: a bare key is the project's (`prefix` is
        `<project>:prefix`), as the Pulumi CLI reads stack files and Pulumi.yaml."""
        return key if ":" in key else f"{self.name}:{key}"

    def stacks(self) -> list[str]:
        """The stacks that have a stack file in `stacks_dir`."""
        files = [p for p in self.stacks_dir.glob("Pulumi.*.yaml") if p.is_file()]
        return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in files)


def read_program(directory: str | Path, what: str = "--program") -> Program:
    """The project in `directory` (its Pulumi.yaml); ProgramError naming what is wrong
    (`what`: the option or argument that named the folder)."""
    root = Path(directory).resolve()
    shown = str(directory)
    project_file = root / "Pulumi.yaml"
    if not root.is_dir():
        raise ProgramError(
            f"{what}: {shown!r} is not a folder; valid: a Pulumi project folder (one that "
            "holds Pulumi.yaml)"
        )
    # As `pulumi preview` run in a subfolder: the nearest project at or above it.
    found = project_file_at_or_above(root)
    if found is not None:
        root, project_file = found.parent, found
    if not project_file.is_file():
        raise ProgramError(
            f"{what}: no Pulumi.yaml in {shown!r}; valid: a Pulumi project folder (one "
            "that holds Pulumi.yaml with `name` and `runtime: python`)"
        )
    document = _yaml_mapping(project_file, what)
    name = document.get("name")
    if not isinstance(name, str) or not name:
        raise ProgramError(f"{what}: {project_file} has no `name`; valid: `name: <project name>`")
    runtime = document.get("runtime")
    runtime_name = runtime.get("name") if isinstance(runtime, Mapping) else runtime
    if runtime_name != "python":
        raise ProgramError(
            f"{what}: {project_file} has runtime {runtime_name!r}; valid: python "
            "(`runtime: python` or `runtime: {name: python}`)"
        )
    config_dir = document.get("stackConfigDir")
    stacks_dir = root / config_dir if isinstance(config_dir, str) and config_dir else root
    main = document.get("main")
    if main is None:
        entry = workdir = root
    else:
        entry = root / str(main)
        if not entry.exists():
            raise ProgramError(
                f"{what}: `main: {main}` in {project_file} does not exist; valid: a "
                "Python file or a folder holding __main__.py, relative to Pulumi.yaml"
            )
        workdir = entry if entry.is_dir() else entry.parent
    if entry.is_dir() and not (entry / "__main__.py").is_file():
        raise ProgramError(
            f"{what}: no __main__.py in {str(entry)!r}; valid: a program in __main__.py, "
            f"or `main: <file.py>` in {project_file}"
        )
    project_config = document.get("config") or {}
    if not isinstance(project_config, Mapping):
        raise ProgramError(
            f"{what}: `config:` in {project_file} is not a mapping; valid: `key: value` or "
            "`key: {default: value}` lines"
        )
    options = document.get("options")
    refreshes = isinstance(options, Mapping) and options.get("refresh") == "always"
    return Program(root, name, stacks_dir, workdir, entry, dict(project_config), refreshes)


def _yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    try:
        document = strict_yaml.load(path.read_text(encoding="utf-8")) or {}
    except strict_yaml.StrictYamlError as exc:
        raise ProgramError(f"{what}: {path}: {strict_yaml.describe(exc)}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        problem = " ".join(str(exc).split())
        raise ProgramError(
            f"{what}: cannot read {path} ({problem}); valid: a YAML mapping"
        ) from None
    if not isinstance(document, dict):
        raise ProgramError(f"{what}: {path} is not a YAML mapping; valid: `key: value` lines")
    return document


def stack_config(
    program: Program, stack: str, overrides: Mapping[str, Any] | None = None, *, required: bool
) -> dict[str, Any]:
    """The config of `program`'s stack file `Pulumi.<stack>.yaml`, updated by `overrides`.

    Bare keys belong to the project's namespace (`prefix` is `<project>:prefix`), as the
    Pulumi CLI reads them. A key of Pulumi.yaml's `config:` block that the stack does not
    set takes its `default` or `value` (a plain value there is one of those); a project key
    declared with neither is an error, as `pulumi preview` makes it (`mergeConfig` in
    pkg/workspace/config.go:295-345 and the shorthand at
    sdk/go/common/workspace/project.go:490-515, pulumi/pulumi at 1b59498). A missing stack
    file is a ProgramError when `required`, else an empty config.
    """
    path = program.stacks_dir / f"Pulumi.{stack}.yaml"
    config: dict[str, Any] = {}
    if path.is_file():
        document = _yaml_mapping(path, "--stack")
        inner = document.get("config") or {}
        if not isinstance(inner, dict):
            raise ProgramError(f"--stack: {path}: `config:` is not a mapping; valid: key: value")
        config = dict(inner)
    elif required:
        raise ProgramError(
            f"--stack: no stack file Pulumi.{stack}.yaml in {str(program.stacks_dir)!r} "
            f"(where project {program.name!r} keeps its stack files); valid: "
            f"{', '.join(program.stacks()) or '(no stack files there)'}"
        )
    merged = {program.key(key): value for key, value in {**config, **(overrides or {})}.items()}
    for key, entry in program.project_config.items():
        full = program.key(str(key))
        if full in merged:
            continue
        if not isinstance(entry, Mapping):
            merged[full] = entry
        elif entry.get("value") is not None or entry.get("default") is not None:
            merged[full] = entry["default"] if entry.get("default") is not None else entry["value"]
        elif full.startswith(f"{program.name}:"):
            raise ProgramError(
                f"--stack: stack {stack!r} has no value for {full!r}, which Pulumi.yaml's "
                f"`config:` requires; valid: `{key}: <value>` under `config:` in {path}"
            )
    return merged


def run_program_folder(
    program: Program,
    *,
    stack: str,
    config: Mapping[str, Any],
    preview: bool = True,
    outputs: Mapping[str, OutputsFn] | None = None,
    invokes: Mapping[str, InvokeFn] | None = None,
) -> ProgramRun:
    """Run `program` as stack `stack` with `config` (namespaced keys) under recording mocks.

    Whatever the program raises propagates (after the runtime has settled; a `sys.exit` as
    ProgramExit); the working directory, `sys.path` and `sys.modules` are as they were
    before, either way.
    """

    shadowing_problem(program.workdir)

    def body() -> None:
        try:
            runpy.run_path(str(program.entry), run_name="__main__")
        except SystemExit as exc:
            raise ProgramExit(exc.code) from None

    # The whole run, not only the program's top level: its `apply` callbacks run after
    # that, and they may import its modules or read files relative to its folder. Placed
    # before the folder becomes the cwd: a program inside the install builds into the
    # project trainstack was run from.
    with placed(program_place(program.root)), program_imports(program.workdir), _exit_noticed():
        return run_program(
            body,
            config=config,
            stack=stack,
            project=program.name,
            preview=preview,
            outputs=outputs,
            invokes=invokes,
        )


@contextmanager
def _exit_noticed() -> Iterator[None]:
    """`os._exit` raises ProgramExit while the program runs: it ends the process at once,
    without unwinding, and the program runs in this one, so `os._exit(0)` ended `plan` with
    no plan and exit code 0, which CI reads as success."""

    def _exit(code: int) -> NoReturn:
        raise ProgramExit(code)

    real = os._exit
    os._exit = _exit  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


def shadowing_problem(workdir: Path) -> None:
    """ProgramError when the program's folder holds a `trainstack` of its own: first on
    `sys.path` under `pulumi preview`, it would replace the installed trainstack (a package or
    module) or merge into it (a folder of modules), as `trainstack._portions` explains."""
    own = Path(__file__).parent.parent
    for candidate in (workdir / "trainstack", workdir / "trainstack.py"):
        if candidate.is_file() or (
            candidate.is_dir()
            and candidate.resolve() != own.resolve()
            and _portions.importable(candidate)
        ):
            raise ProgramError(
                f"--program: {candidate} would be imported as trainstack: the program's "
                "folder comes first on sys.path (as `pulumi preview` runs it), ahead of the "
                f"trainstack at {own}; valid: rename or move it"
            )


def provided_names(folder: Path) -> set[str]:
    """Top-level modules `folder` provides on `sys.path`: packages and `.py` modules."""
    names = set()
    for entry in folder.iterdir():
        if entry.is_dir() and (entry / "__init__.py").is_file():
            names.add(entry.name)
        elif entry.is_file() and entry.suffix == ".py":
            names.add(entry.stem)
    return {name for name in names if name.isidentifier()} - PROTECTED


def _from_folder(module: ModuleType, folder: Path) -> bool:
    """Whether `module` was loaded from the program's own files: under `folder`, but not
    from a virtualenv kept there (Pulumi's default `virtualenv: venv` is in the project)."""
    paths = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
    for path in paths:
        if not isinstance(path, str):
            continue
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(folder):
            continue
        inside = resolved.relative_to(folder).parts
        in_env = resolved.is_relative_to(Path(sys.prefix).resolve()) or any(
            part in ("site-packages", "dist-packages") for part in inside
        )
        if not in_env:
            return True
    return False


@contextmanager
def program_imports(folder: Path) -> Iterator[None]:
    """`folder` first on `sys.path` and as the working directory, its modules its own.

    Loaded modules of the names the folder provides (another program's `infra`, a test
    suite's `tests`) are set aside for the run and restored after; modules loaded from the
    folder are dropped after, so the next program in this process imports its own.
    """
    folder = folder.resolve()
    shadowed = provided_names(folder)

    def top(name: str) -> str:
        return name.partition(".")[0]

    set_aside = {name: sys.modules.pop(name) for name in list(sys.modules) if top(name) in shadowed}
    loaded = set(sys.modules)
    saved_path = list(sys.path)
    saved_cwd = os.getcwd()
    sys.path.insert(0, str(folder))
    # The path finder caches folder listings; a folder written this second may look stale.
    importlib.invalidate_caches()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        for name, module in list(sys.modules.items()):
            if top(name) in PROTECTED:
                continue
            if top(name) in shadowed or (name not in loaded and _from_folder(module, folder)):
                del sys.modules[name]
        sys.modules.update(set_aside)

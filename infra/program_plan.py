"""`trainstack plan|policy|plan-diff --program DIR --stack NAME`: plans of your own program.

A Pulumi project of your own that composes trainstack's components is run offline under the
same recording mocks as a stack (`trainstack.infra.program_run`), with the config of its
stack file `Pulumi.NAME.yaml`. Its plan has the stack plan's shape (`stack`, `resources`
exactly as registered, `outputs`, `notes`) plus `project`, the Pulumi project's name. The
parts of a stack plan that are read from a trainstack stack config (`target`, `summary`,
`quota`, `code`, `defaults`, `limits`) are left out: a program has no such config, and a
total guessed from some resource types and not others would read as the whole cost.
`trainstack plan-diff` and `trainstack policy --plan` take these plans as they take a
stack's (a missing summary or quota counts as none).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainstack.components.catalog.names import stack_name_problem
from trainstack.infra.mocks import ProgramRun
from trainstack.infra.plan import plan_resources
from trainstack.infra.program_run import (
    Program,
    ProgramError,
    read_program,
    run_program_folder,
    stack_config,
)
from trainstack.infra.project import find_project

PROGRAM_NOTE = (
    "a program's plan lists what it registers; totals, $/hour and quota come from a trainstack "
    "stack config (`trainstack plan --stack`), which a program does not have"
)
SUPERVISED_GROUP = (
    "trainstack:supervision:RunSupervisor",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
)
NO_REFRESH_NOTE = (
    "gce: the run supervisor deletes the instance group's VMs, and their per-instance configs "
    "with them, at the run's end, and this project's Pulumi.yaml has no `options: {refresh: "
    "always}`: `pulumi up` then reads nothing and leaves the VMs deleted, and `pulumi destroy` "
    "fails at the per-instance configs, whose VMs are no longer in the group; add "
    "`options:` / `  refresh: always` to Pulumi.yaml, or pass --refresh to `pulumi up` and "
    "`pulumi destroy`"
)
"""Without a refresh the engine acts on its state: the provider's delete of a per-instance
config with remove_instance_on_destroy sends `deleteInstances` naming its VM, which the API
refuses for a VM not in the group (tests/fidelity/test_gce_destroy.py)."""


def load_program(directory: str | Path, stack: str) -> tuple[Program, dict[str, Any]]:
    """The project in `directory` and the config of its stack `stack` (ProgramError, one
    line, when the folder, its Pulumi.yaml or the stack file is not usable)."""
    problem = stack_name_problem(stack, "--stack")
    if problem is not None:
        raise ProgramError(problem)
    program = read_program(directory)
    return program, stack_config(program, stack, required=True)


def run_own_program(
    program: Program, stack: str, config: Mapping[str, Any], shown: str | Path
) -> ProgramRun:
    """Run the program; anything it raises (or a `sys.exit`) becomes one ProgramError line
    naming the exception and the program's own line it came from."""
    try:
        return run_program_folder(program, stack=stack, config=config)
    except SystemExit as exc:
        raise ProgramError(
            f"--program {shown}: stack {stack!r}: the program exited with code {exc.code!r}; "
            "valid: a program that declares its resources and returns"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's program may raise anything
        raise ProgramError(program_failure(program, stack, exc, shown)) from None


def program_failure(program: Program, stack: str, exc: BaseException, shown: str | Path) -> str:
    """`exc` on one line: the innermost exception the engine wrapped, and where in the
    program's own files it was raised."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    text = " ".join(str(exc).split()) or "(no message)"
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(program.root) and "site-packages" not in path.parts:
            where = f" at {path.relative_to(program.root).as_posix()}:{frame.lineno}"
    return (
        f"--program {shown}: stack {stack!r}: the program raised {type(exc).__name__}{where}: "
        f"{text}"
    )


def build_program_plan(directory: str | Path, stack: str) -> dict[str, Any]:
    """The JSON plan of the program in `directory` as stack `stack` (module docstring)."""
    program, config = load_program(directory, stack)
    run = run_own_program(program, stack, config, directory)
    types = {r.type for r in run.resources}
    notes = [PROGRAM_NOTE]
    if not program.refreshes and types.issuperset(SUPERVISED_GROUP):
        notes.append(NO_REFRESH_NOTE)
    return {
        "stack": stack,
        "project": program.name,
        "resources": [
            {**entry, "inputs": _program_assets(entry["inputs"], program.root)}
            for entry in plan_resources(run.resources)
        ],
        "outputs": run.shown_outputs,
        "notes": notes,
    }


def _program_assets(value: Any, root: Path) -> Any:
    """File assets named relative to the program's folder, so two checkouts' plans compare
    (the mocks name them relative to the program's Pulumi project, or absolute)."""
    if isinstance(value, dict):
        path = value.get("fileAsset")
        if len(value) == 1 and isinstance(path, str):
            where = Path(path) if Path(path).is_absolute() else find_project(root).root / path
            if where.resolve().is_relative_to(root):
                return {"fileAsset": where.resolve().relative_to(root).as_posix()}
        return {key: _program_assets(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [_program_assets(item, root) for item in value]
    return value


def program_stack_required(directory: str | Path) -> str:
    """The line for `--program DIR` without `--stack`: the stacks the program has."""
    program = read_program(directory)
    return (
        f"--program {directory}: give --stack NAME, one of the program's stack files in "
        f"{str(program.stacks_dir)!r}; valid: {', '.join(program.stacks()) or '(none there)'}"
    )

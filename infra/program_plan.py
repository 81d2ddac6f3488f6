"""`trainstack plan|policy|plan-diff --program DIR --stack NAME`: plans of your own program.

A Pulumi project of your own that composes trainstack's components is run offline under the
same recording mocks as a stack (`trainstack.infra.program_run`), with the config of its
stack file `Pulumi.NAME.yaml`. Its plan has the stack plan's shape (`stack`, `resources`
exactly as registered, `outputs`, `notes`) plus `project`, the Pulumi project's name.
`summary`, `quota` and the notes come from the `facts` its trainstack compute components
(`TpuPodSlice`, `TpuGkeSlices`, `A100Cluster`, `VertexTrainingJob`, `LocalTrainingJob`) and
run supervisors register (`trainstack.infra.program_facts`): the totals, quota and notes a
stack plan of the same resources shows; `code_by_component` the "Your code" entry (a stack
plan's `code`) of each compute component given your code, by its name. A program without
such a component has none: a total guessed from some resource types and not others would
read as the whole cost. The parts a stack plan reads from a trainstack stack config alone
(`target`, `defaults`, `limits`) are left out. `trainstack plan-diff` and
`trainstack policy --plan` take these plans as they take a stack's (a missing summary or
quota counts as none).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainstack.components import ArgsError
from trainstack.components.catalog.names import stack_name_problem
from trainstack.infra.mocks import ProgramRun, engine_unwrapped
from trainstack.infra.plan import plan_resources
from trainstack.infra.program_facts import program_totals
from trainstack.infra.program_run import (
    Program,
    ProgramError,
    ProgramExit,
    read_program,
    run_program_folder,
    stack_config,
)
from trainstack.infra.project import find_project

PROGRAM_NOTE = (
    "a program's plan lists what it registers; totals, $/hour and quota come from the facts "
    "of trainstack's compute components (TpuPodSlice, TpuGkeSlices, A100Cluster, "
    "VertexTrainingJob, LocalTrainingJob, RunSupervisor), and this program registers none"
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
    """Run the program; anything it raises (or a `sys.exit`) becomes a ProgramError naming
    the exception and the program's own line it came from (`program_failure`)."""
    try:
        return run_program_folder(program, stack=stack, config=config)
    except ProgramError:
        raise  # the folder itself (run_program_folder checks it before the program runs)
    except ProgramExit as exc:
        raise ProgramError(
            f"--program {shown}: stack {stack!r}: the program exited with code {exc.code!r}; "
            "valid: a program that declares its resources and returns"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's program may raise anything
        raise ProgramError(program_failure(program, stack, exc, shown)) from None


def program_failure(program: Program, stack: str, exc: BaseException, shown: str | Path) -> str:
    """What the program raised, one line per problem, each
    `--program DIR: stack 'NAME': FILE:LINE: TYPE: MESSAGE`.

    The exception is the one the program raised, the engine's wrappers taken off
    (`engine_unwrapped`): a program's own `raise ValueError(...) from err` is reported, not
    the `err` it explains. FILE:LINE is the last of the program's own lines in its
    traceback (where it called the component that refused, for a component's problem), left
    out when none is (a callback the engine ran). A component's arguments (`ArgsError`) are
    one line per problem, in the component's own words (`<Component>.<key>: ...`), without
    the type: trainstack's, not the program's; any other message is one line.
    """
    exc = engine_unwrapped(exc)
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(program.root) and "site-packages" not in path.parts:
            where = f"{path.relative_to(program.root).as_posix()}:{frame.lineno}: "
    head = f"--program {shown}: stack {stack!r}: {where}"
    if isinstance(exc, ArgsError) and exc.errors:
        return "\n".join(f"{head}{' '.join(line.split())}" for line in exc.errors)
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{head}{type(exc).__name__}: {text}"


def build_program_plan(directory: str | Path, stack: str) -> dict[str, Any]:
    """The JSON plan of the program in `directory` as stack `stack` (module docstring)."""
    program, config = load_program(directory, stack)
    run = run_own_program(program, stack, config, directory)
    totals = program_totals(run.registered_outputs)
    resources = [
        {**entry, "inputs": _program_assets(entry["inputs"], program.root)}
        for entry in plan_resources(run.resources)
    ]
    types = {r.type for r in run.resources}
    refresh_notes = (
        [NO_REFRESH_NOTE] if not program.refreshes and types.issuperset(SUPERVISED_GROUP) else []
    )
    if totals is None:
        return {
            "stack": stack,
            "project": program.name,
            "resources": resources,
            "outputs": run.shown_outputs,
            "notes": [PROGRAM_NOTE, *refresh_notes],
        }
    code = (
        {"code_by_component": totals["code_by_component"]} if "code_by_component" in totals else {}
    )
    return {
        "stack": stack,
        "project": program.name,
        **code,
        "resources": resources,
        "summary": totals["summary"],
        "quota": totals["quota"],
        "outputs": run.shown_outputs,
        "notes": [*totals["notes"], *refresh_notes],
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

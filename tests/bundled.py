"""The bundled stacks' offline program runs and plans, built once per test session.

Running a stack program under the recording mocks is what makes the plan, policy and CLI
tests slow, and a bundled stack's file does not change during a session. So each bundled
stack is run once, the first time a test asks for it, and every test that only reads that
stack's plan shares the run:

    plan = bundled_plan("prod-vertex-rs")     # trainstack.infra.plan.build_plan over the shared run
    run = bundled_run("prod-vertex-rs")       # the trainstack.infra.mocks.ProgramRun itself

and, through the `shared_bundled_runs` fixture (tests/conftest.py), so do `build_plan`,
`trainstack.infra.policy.check_stack` and the CLI commands built on them. Callers get deep copies, so
no test can change what the next one reads. A test that changes a config, renames a stack
or checks that two runs agree calls `build_plan` / `run_program` itself and builds afresh.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

import pytest

import trainstack.infra.plan
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import ProgramRun, run_program
from trainstack.infra.plan import build_plan, bundled_stacks, load_stack


@functools.cache
def _stack_file(stack: str) -> tuple[str, dict[str, Any]]:
    return load_stack(stack, None)


@functools.cache
def _run(stack: str) -> ProgramRun:
    name, config = _stack_file(stack)
    return run_program(main_program, config=copy.deepcopy(config), stack=name)


@functools.cache
def _plan(stack: str) -> dict[str, Any]:
    name, config = _stack_file(stack)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainstack.infra.plan, "run_program", shared_run_program)
        return build_plan(name, copy.deepcopy(config))


def bundled_run(stack: str) -> ProgramRun:
    """The session's run of bundled stack `stack` with its own stack file's config."""
    return copy.deepcopy(_run(stack))


def bundled_plan(stack: str) -> dict[str, Any]:
    """`build_plan` of bundled stack `stack` with its own stack file's config."""
    return copy.deepcopy(_plan(stack))


def shared_run_program(
    program: Callable[[], Mapping[str, Any] | None],
    *,
    config: Mapping[str, Any] | None = None,
    stack: str = "plan",
    **options: Any,
) -> ProgramRun:
    """`trainstack.infra.mocks.run_program`, answered from the session's run when it is the stack
    program of a bundled stack with that stack file's exact config and default options."""
    if (
        program is main_program
        and not options
        and stack in bundled_stacks()
        and config == _stack_file(stack)[1]
    ):
        return bundled_run(stack)
    return run_program(program, config=config, stack=stack, **options)

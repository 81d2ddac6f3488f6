"""Fixtures shared by the test tiers."""

from __future__ import annotations

import pytest


@pytest.fixture
def shared_bundled_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`trainstack.infra.plan.build_plan` and `trainstack.infra.policy.check_stack` (and so `trainstack plan`,
    `trainstack policy` and the other commands built on them) read a bundled stack's
    program run from the session's one run of it (tests/bundled.py) when they are given
    that stack's own config; any other stack or config still runs afresh."""
    # Imported here, not at the top, so trainer-only runs do not load Pulumi.
    import trainstack.infra.plan
    import trainstack.infra.policy
    from tests.bundled import shared_run_program

    monkeypatch.setattr(trainstack.infra.plan, "run_program", shared_run_program)
    monkeypatch.setattr(trainstack.infra.policy, "run_program", shared_run_program)


PLAN_TODAY = "2026-07-01"
"""The date `trainstack plan` checks image end-of-availability against in tests: fixed, so a
test's outcome does not depend on the clock. Before the end of availability of the pinned
Vertex images (2026-07-11 and 2026-07-24), so the bundled Vertex stacks plan; the tests of
the check itself pass their own date."""


@pytest.fixture(autouse=True)
def fixed_plan_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """`TRAINSTACK_TODAY` for every test, inherited by the CLI subprocesses tests start."""
    monkeypatch.setenv("TRAINSTACK_TODAY", PLAN_TODAY)

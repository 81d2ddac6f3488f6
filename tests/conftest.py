"""Fixtures shared by the test tiers."""

from __future__ import annotations

import pytest


@pytest.fixture
def shared_bundled_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`infra.plan.build_plan` and `infra.policy.check_stack` (and so `trainstack plan`,
    `trainstack policy` and the other commands built on them) read a bundled stack's
    program run from the session's one run of it (tests/bundled.py) when they are given
    that stack's own config; any other stack or config still runs afresh."""
    # Imported here, not at the top, so trainer-only runs do not load Pulumi.
    import infra.plan
    import infra.policy
    from tests.bundled import shared_run_program

    monkeypatch.setattr(infra.plan, "run_program", shared_run_program)
    monkeypatch.setattr(infra.policy, "run_program", shared_run_program)

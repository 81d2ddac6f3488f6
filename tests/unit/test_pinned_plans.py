"""Every bundled stack's plan is pinned in tests/plans/<stack>.json.

A change to a component, the catalog or a stack file that alters what a stack would
create fails here until the pinned plan is regenerated (`make pin-plans`), so the change is
reviewed twice: once as code, once as the plan diff the pull request shows.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from infra.mocks import REPO_ROOT
from infra.plan import build_plan, bundled_stacks, load_stack, plan_diff
from tests.bundled import bundled_plan

PINNED = REPO_ROOT / "tests" / "plans"


def _pinned(stack: str) -> dict[str, object]:
    path = PINNED / f"{stack}.json"
    if not path.exists():
        pytest.fail(f"{path.relative_to(REPO_ROOT)} is missing; run `make pin-plans`")
    result: dict[str, object] = json.loads(path.read_text())
    return result


@pytest.mark.parametrize("stack", bundled_stacks())
def test_plan_matches_the_pinned_plan(stack: str) -> None:
    plan = bundled_plan(stack)
    pinned = _pinned(stack)
    if plan != pinned:
        pytest.fail(
            f"the plan of stack {stack!r} changed; review the diff below and run "
            f"`make pin-plans` if it is intended:\n{plan_diff(pinned, plan)}"
        )


def test_no_pinned_plan_without_a_stack() -> None:
    assert sorted(p.stem for p in PINNED.glob("*.json")) == sorted(bundled_stacks())


def test_a_deliberate_change_shows_in_the_diff_against_the_pinned_plan() -> None:
    name, config = load_stack("prod-a100-gce", None)
    changed = copy.deepcopy(config)
    changed["trainstack:gpu_cluster"]["node_count"] = 2
    text = plan_diff(_pinned("prod-a100-gce"), build_plan(name, changed))
    assert "| gpus | 32 | 16 | -16 |" in text


def _write_all(directory: Path) -> None:
    for stack in bundled_stacks():
        name, config = load_stack(stack, None)
        text = json.dumps(build_plan(name, config), indent=2) + "\n"
        (directory / f"{stack}.json").write_text(text)


if __name__ == "__main__":
    # `make pin-plans`: regenerate every pinned plan.
    PINNED.mkdir(exist_ok=True)
    for old in PINNED.glob("*.json"):
        old.unlink()
    _write_all(PINNED)
    print(f"pinned {len(bundled_stacks())} plans in {PINNED.relative_to(REPO_ROOT)}")

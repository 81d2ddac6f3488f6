"""Every bundled stack's plan is pinned in tests/plans/<stack>.json.

A change to a component, the catalog or a stack file that alters what a stack would
create fails here until the pinned plan is regenerated (`make pin-plans`), so the change is
reviewed twice: once as code, once as the plan diff the pull request shows.

A stack a user adds to stacks/ is not pinned (and so cannot fail here) until they ask:
`make pin-plans STACKS=mine` pins it, and from then on it is checked like the bundled ones.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.bundled import bundled_plan
from trainstack.infra.plan import build_plan, bundled_stacks, load_stack, plan_diff, stack_names

PINNED = REPO_ROOT / "tests" / "plans"


def _pinned(stack: str) -> dict[str, object]:
    path = PINNED / f"{stack}.json"
    if not path.exists():
        pytest.fail(f"{path.relative_to(REPO_ROOT)} is missing; run `make pin-plans`")
    result: dict[str, object] = json.loads(path.read_text())
    return result


def _pinned_stacks() -> list[str]:
    """The bundled stacks and every user stack pinned on request."""
    return sorted({*bundled_stacks(), *(p.stem for p in PINNED.glob("*.json"))})


@pytest.mark.parametrize("stack", _pinned_stacks())
def test_plan_matches_the_pinned_plan(stack: str) -> None:
    plan = bundled_plan(stack)
    pinned = _pinned(stack)
    if plan != pinned:
        pytest.fail(
            f"the plan of stack {stack!r} changed; review the diff below and run "
            f"`make pin-plans` if it is intended:\n{plan_diff(pinned, plan)}"
        )


def test_every_bundled_stack_is_pinned_and_every_pin_has_a_stack() -> None:
    pinned = {p.stem for p in PINNED.glob("*.json")}
    assert set(bundled_stacks()) <= pinned
    assert pinned <= set(stack_names())


def test_a_deliberate_change_shows_in_the_diff_against_the_pinned_plan() -> None:
    name, config = load_stack("prod-a100-gce", None)
    changed = copy.deepcopy(config)
    changed["trainstack:gpu_cluster"]["node_count"] = 2
    text = plan_diff(_pinned("prod-a100-gce"), build_plan(name, changed))
    assert "| gpus | 32 | 16 | -16 |" in text


def _write(directory: Path, stacks: list[str]) -> None:
    for stack in stacks:
        name, config = load_stack(stack, None)
        text = json.dumps(build_plan(name, config), indent=2) + "\n"
        (directory / f"{stack}.json").write_text(text)


if __name__ == "__main__":
    # `make pin-plans`: regenerate every pinned plan (the bundled stacks' and those of user
    # stacks pinned before); `make pin-plans STACKS="a b"` pins (or re-pins) just those.
    import os

    from tests.conftest import PLAN_TODAY

    # The same date the tests plan for (tests/conftest.py), so a pin matches what they check.
    os.environ.setdefault("TRAINSTACK_TODAY", PLAN_TODAY)
    PINNED.mkdir(exist_ok=True)
    chosen = sys.argv[1:]
    unknown = sorted(set(chosen) - set(stack_names()))
    if unknown:
        sys.exit(f"pin-plans: no stack named {', '.join(unknown)} in stacks/")
    if not chosen:
        chosen = _pinned_stacks()
        for old in PINNED.glob("*.json"):
            old.unlink()
    _write(PINNED, chosen)
    print(f"pinned {len(chosen)} plans in {PINNED.relative_to(REPO_ROOT)}")


def test_a_user_stack_is_listed_but_pinned_only_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    # A copy of this project, with one stack more.
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    stacks = tmp_path / "stacks"
    shutil.copytree(REPO_ROOT / "stacks", stacks)
    (stacks / "Pulumi.mine.yaml").write_text((stacks / "Pulumi.local.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert "mine" in stack_names()
    assert "mine" not in bundled_stacks()
    assert "mine" not in _pinned_stacks()
    pins = tmp_path / "plans"
    pins.mkdir()
    monkeypatch.setattr(sys.modules[__name__], "PINNED", pins)
    _write(pins, ["mine"])
    assert _pinned_stacks() == sorted([*bundled_stacks(), "mine"])
    assert json.loads((pins / "mine.json").read_text())["stack"] == "mine"

"""The local TrainingRun through a stack's whole life with real trainer processes, driven the
way the engine drives it (tests/engine/__init__.py): up starts training, an in-place update
leaves it alone, a replace stops the old run and the new one resumes from its checkpoint,
destroy leaves no process and keeps the checkpoints.

Steps are tiny and slowed (0.05 s each) so a run is still training when it is replaced.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime.proto import provider_pb2

from tests.engine.cases import DYNAMIC_RESOURCES, LOCAL_CASES, relabelled, replaced
from tests.engine.double import EngineStack, PluginLaunch, plain
from tests.engine.programs import capture, sources
from trainstack.components._local_processes import ProcessRef, ProcessTable, stop_processes
from trainstack.components._local_provider import read_records

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE
STEP_DELAY_S = "0.05"
STEPS = 4000
"""Long enough (over 3 minutes at STEP_DELAY_S) that the run is still training when the
update is checked, even if a provider host takes the double's whole grace to close each time
(tests/engine/double.py `SDK_WAIT_FRAME`: 35 s a close); no step waits for the run's end."""
CHECKPOINTS = {"stacks/local", "stacks/local-tf", "examples/own-trainer/Pulumi.local.yaml"}
"""The cases whose trainer checkpoints (examples/own-jax only gathers one value and ends)."""


def _tiny(label: str, config: dict[str, Any], root: Path) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    # One worker: the engine's calls are the point here, not the world size.
    changed["trainstack:local"] = {"workers": 1, "root": str(root)}
    trainer = changed["trainstack:trainer"]
    if label == "examples/own-trainer/Pulumi.local.yaml":
        trainer["entrypoint"] = [
            "python",
            "train.py",
            f"--steps={STEPS}",
            "--checkpoint-every=5",
            "--global-batch=32",
            f"--step-sleep={STEP_DELAY_S}",
        ]
    elif "source" not in trainer:
        trainer.update(steps=STEPS, checkpoint_every=5, log_every=5)
    return changed


def _refs(outputs: dict[str, Any]) -> list[ProcessRef]:
    return [
        ProcessRef(int(pid), str(start))
        for pid, start in zip(
            outputs.get("pids") or [], outputs.get("start_times") or [], strict=True
        )
    ]


def _alive(outputs: dict[str, Any]) -> list[ProcessRef]:
    table = ProcessTable.snapshot()
    return [ref for ref in _refs(outputs) if table.alive(ref)]


def _wait(what: str, found: Callable[[], Any], timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _steps(checkpoint_dir: str) -> list[int]:
    return sorted(
        int(p.name[5:]) for p in Path(checkpoint_dir).glob("step-*") if p.name[5:].isdigit()
    )


def _rank0_start(outputs: dict[str, Any]) -> bool:
    records = read_records(outputs["log_path"], int(outputs["log_offset"]))
    return any(r.get("event") == "start" and r.get("rank") == 0 for r in records)


@pytest.fixture
def engine(launch: PluginLaunch) -> Iterator[EngineStack]:
    # The engine's own environment reaches the plugin and, through it, the trainer.
    stack = EngineStack(launch, {**os.environ, "TRAINSTACK_TEST_STEP_DELAY_S": STEP_DELAY_S})
    started: list[ProcessRef] = []
    stack.on_outputs = lambda outputs: started.extend(_refs(outputs))  # type: ignore[attr-defined]
    yield stack
    # Detached processes: nothing else stops them when an assertion fails half-way.
    stop_processes(started, grace_s=10.0)


@pytest.mark.trainer
# Every bundled local stack and example in the default run, TensorFlow's too (its start-up
# takes most of a minute on a busy 2-core machine).
@pytest.mark.parametrize("label", LOCAL_CASES)
def test_up_update_replace_resumes_destroy_keeps_checkpoints(
    engine: EngineStack, label: str, tmp_path: Path
) -> None:
    stack, config = sources()[label]
    config = _tiny(label, config, tmp_path / "local")
    first = capture(config, stack, first_preview=True)
    known = capture(config, stack, first_preview=False)
    assert [(g.type, g.name) for g in known] == DYNAMIC_RESOURCES[label]
    (goal,) = known
    keep: Callable[[dict[str, Any]], None] = engine.on_outputs  # type: ignore[attr-defined]

    preview = engine.preview(first)
    assert ([m for m, _ in preview.calls], preview.results[0].op) == (["Check"], "create")
    assert not (tmp_path / "local").exists()

    up = engine.up(known)
    assert [m for m, _ in up.calls] == ["Check", "Create"]
    outputs = plain(engine.state[goal.urn].outputs)
    keep(outputs)
    assert outputs["state"] in ("running", "finished")
    if label in CHECKPOINTS:
        assert outputs["state"] == "running" and len(_alive(outputs)) == len(outputs["pids"])

    for deployment in (engine.preview(known), engine.up(known)):
        assert [m for m, _ in deployment.calls] == ["Check", "Diff"]
        assert deployment.results[0].diff.changes == DIFF_NONE

    refresh = engine.refresh()
    assert [m for m, _ in refresh.calls] == ["Read"]
    assert plain(engine.state[goal.urn].outputs)["pids"] == outputs["pids"]

    # Labels update in place: the same processes go on training.
    update = engine.up(capture(relabelled(config), stack, first_preview=False))
    assert [m for m, _ in update.calls] == ["Check", "Diff", "Update"]
    assert plain(engine.state[goal.urn].outputs)["pids"] == outputs["pids"]
    if label in CHECKPOINTS:
        assert len(_alive(outputs)) == len(outputs["pids"])
        before = _wait("a checkpoint", lambda: _steps(outputs["checkpoint_dir"]))[-1]

    # Replace: delete before replace stops the old run (it checkpoints on SIGTERM), then
    # the new run resumes from the newest checkpoint.
    replace = engine.up(capture(relabelled(replaced(config)), stack, first_preview=False))
    assert [m for m, _ in replace.calls] == ["Check", "Diff", "Delete", "Create"]
    assert replace.results[0].diff.deleteBeforeReplace
    assert _alive(outputs) == []
    new = plain(engine.state[goal.urn].outputs)
    keep(new)
    if new.get("resumed_from") is None and label in CHECKPOINTS:
        # Your own code: create returns at the wrapper's `launch` record; the trainer's
        # `start` record (its step) is read by the next refresh.
        _wait("the start record", lambda: _rank0_start(new))
        engine.refresh()
        new = plain(engine.state[goal.urn].outputs)
    assert new["pids"] != outputs["pids"]
    if label in CHECKPOINTS:
        # From the checkpoint the old run saved when stopped (the newest then; the new run
        # may have saved more since).
        assert new["checkpoint_dir"] == outputs["checkpoint_dir"]
        assert new["resumed_from"] >= before > 0
        assert new["resumed_from"] in _steps(outputs["checkpoint_dir"])

    destroy = engine.destroy()
    assert [m for m, _ in destroy.calls] == ["Delete"] and engine.state == {}
    assert _alive(new) == []
    if label in CHECKPOINTS:
        assert _steps(new["checkpoint_dir"])[-1] >= new["resumed_from"]

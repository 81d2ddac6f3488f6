"""`pulumi up` on the local target with your own code: the LocalRun provider starts
examples/own-trainer detached through the node launcher, `pulumi destroy` stops it with
SIGTERM (it saves and exits 143) and a changed source replaces the run."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainstack.components._local_processes import ProcessRef, ProcessTable, stop_processes
from trainstack.components._local_provider import LocalRunProvider, read_records

REPO = Path(__file__).resolve().parents[2]
TRAINER = {
    "run_name": "mine",
    "source": "examples/own-trainer",
    "entrypoint": ["python", "train.py", "--steps=60", "--step-sleep=0.2"],
    "launcher": "torchrun",
}


def _props(root: Path, **change: Any) -> dict[str, Any]:
    return {
        "trainer": TRAINER,
        "workers": 2,
        "root": str(root),
        "env": {},
        "stop_grace_s": 60.0,
        "labels": {},
        "source_sha256": "a" * 64,
        **change,
    }


@pytest.fixture
def started() -> Iterator[list[ProcessRef]]:
    leaders: list[ProcessRef] = []
    yield leaders
    stop_processes(leaders, grace_s=10.0)


@pytest.mark.trainer
def test_your_code_runs_detached_and_stops_with_a_checkpoint(
    tmp_path: Path, started: list[ProcessRef]
) -> None:
    provider = LocalRunProvider(base_dir=str(REPO))
    props = _props(tmp_path / "root")
    assert provider.check({}, props).failures == []
    result = provider.create(props)
    outs = result.outs
    assert outs is not None
    started.extend(ProcessRef(p, s) for p, s in zip(outs["pids"], outs["start_times"], strict=True))
    root = (tmp_path / "root").resolve()
    ckpt = root / "checkpoints" / "mine"
    # `up` returns once the wrapper launched the code (its `launch` line); the script's own
    # `start` line, with the step it starts from, may come later: until then no step is known.
    assert (outs["state"], outs["resumed_from"], outs["checkpoint_dir"]) == (
        "running",
        None,
        str(ckpt),
    )
    assert json.loads(Path(outs["config_path"]).read_text())["entrypoint"] == TRAINER["entrypoint"]
    deadline = time.monotonic() + 120
    while not list(ckpt.glob("step-*")):
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)
    leaders = started[:]
    everything = [*leaders, *ProcessTable.snapshot().descendants(leaders)]
    provider.delete(str(result.id), outs)
    table = ProcessTable.snapshot()
    assert not [p for p in everything if table.alive(p)]
    records = read_records(outs["log_path"])
    saved = [r for r in records if r.get("event") == "preempted" and r.get("step") is not None]
    assert [r["rank"] for r in saved] == [0]
    assert (ckpt / f"step-{saved[0]['step']}").is_dir()


def test_a_changed_source_replaces_the_run(tmp_path: Path) -> None:
    provider = LocalRunProvider(base_dir=str(REPO))
    olds, news = _props(tmp_path), _props(tmp_path, source_sha256="b" * 64)
    assert provider.diff("id", olds, news).replaces == ["source_sha256"]
    assert provider.diff("id", olds, _props(tmp_path)).changes is False


@pytest.mark.trainer
def test_a_relative_checkpoint_dir_is_the_projects_not_the_source_folders(
    tmp_path: Path, started: list[ProcessRef]
) -> None:
    """About 2 s: `pulumi up` runs your code in its source folder; `checkpoint_dir:
    ckpts/rel` is still `<project>/ckpts/rel`, as `trainstack local-run` reads it."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(
        "import os, pathlib\n"
        "folder = pathlib.Path(os.environ['TRAINSTACK_CHECKPOINT_DIR'])\n"
        "folder.mkdir(parents=True, exist_ok=True)\n"
        "(folder / 'step-1').write_text('saved')\n"
    )
    trainer = {"source": "code", "entrypoint": ["python", "train.py"], "launcher": "node"}
    props = _props(tmp_path / "root", trainer={**trainer, "checkpoint_dir": "ckpts/rel"}, workers=1)
    provider = LocalRunProvider(base_dir=str(tmp_path))
    outs = provider.create(props).outs
    assert outs is not None
    started.extend(ProcessRef(p, s) for p, s in zip(outs["pids"], outs["start_times"], strict=True))
    assert outs["checkpoint_dir"] == str(tmp_path / "ckpts" / "rel")
    deadline = time.monotonic() + 60
    while not (tmp_path / "ckpts" / "rel" / "step-1").is_file():
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == ["train.py"]

"""The local dynamic provider called for real: it starts, signals and inspects real trainer
processes (torchrun, 2 gloo workers on CPU) and real stand-in processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainstack.components._local_processes import (
    ProcessRef,
    ProcessTable,
    _ps_entries,
    stop_processes,
)
from trainstack.components._local_provider import (
    LocalRunProvider,
    LocalRunStartError,
    _tail,
    read_records,
)
from trainstack.trainers.common.checkpoint import CheckpointStore
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.fingerprint import StateMismatch, check, trainer_fingerprint

REPO = Path(__file__).resolve().parents[2]
STEPS = 120  # ~11 s of steps after the 12th: still training when deleted on a loaded machine
TRAINER = TrainConfig(
    model="mlp",
    dataset="synthetic",
    synthetic_samples=512,
    hidden_dim=32,
    steps=STEPS,
    global_batch_size=32,
    learning_rate=0.01,
    log_every=1,
    checkpoint_every=5,
    keep_checkpoints=2,
    preemption_grace_s=5,
    seed=11,
    run_name="lifecycle",
)
GRACE_S = 60.0  # generous: the trainer checkpoints on SIGTERM even on a loaded machine
# Slows each step so the run is still training when it is stopped.
STEP_DELAY = {"TRAINSTACK_TEST_STEP_DELAY_S": "0.1"}

Record = dict[str, Any]


def _props(trainer: TrainConfig = TRAINER, **overrides: Any) -> dict[str, Any]:
    return {
        "trainer": trainer.model_dump(mode="json", exclude_none=True),
        "workers": 2,
        "root": "local",
        "env": STEP_DELAY,
        "stop_grace_s": GRACE_S,
        "labels": {"component": "local-training-job", "managed-by": "trainstack"},
        **overrides,
    }


def _wait(what: str, pred: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _read(provider: LocalRunProvider, id_: str, outs: dict[str, Any]) -> dict[str, Any]:
    result = provider.read(id_, outs)
    assert result.id == id_ and result.outs is not None
    return result.outs


def _rank0(records: list[Record], event: str) -> list[Record]:
    return [r for r in records if r.get("event") == event and r.get("rank") == 0]


# The engine runs a dynamic provider in a plugin process and kills that process's group when
# it is done; the trainer must outlive it.
_ENGINE = """
import json, sys, time
from trainstack.components._local_provider import LocalRunProvider
result = LocalRunProvider(base_dir=sys.argv[2]).create(json.loads(sys.argv[1]))
print(json.dumps({"id": result.id, "outs": result.outs}), flush=True)
time.sleep(600)
"""


def _create_in_engine_process(props: dict[str, Any], base: Path) -> tuple[str, dict[str, Any]]:
    with (base / "engine.stderr").open("w") as err:
        engine = subprocess.Popen(
            [sys.executable, "-c", _ENGINE, json.dumps(props), str(base)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
    assert engine.stdout is not None
    line = engine.stdout.readline()
    os.killpg(engine.pid, signal.SIGKILL)
    engine.wait()
    engine.stdout.close()
    assert line, (base / "engine.stderr").read_text()[-3000:]
    created = json.loads(line)
    return created["id"], created["outs"]


@pytest.fixture
def started() -> Iterator[list[ProcessRef]]:
    """Leaders a test started; stopped afterwards even when the test fails half-way (the
    processes are detached: nothing else would stop them)."""
    leaders: list[ProcessRef] = []
    yield leaders
    stop_processes(leaders, grace_s=10.0)


@pytest.mark.trainer
def test_create_delete_and_resume_with_real_processes(
    tmp_path: Path, started: list[ProcessRef]
) -> None:
    provider = LocalRunProvider(base_dir=str(tmp_path))
    props = _props()
    assert provider.check({}, props).failures == []
    root = (tmp_path / "local").resolve()
    log_path = root / "logs" / "lifecycle.jsonl"
    ckpt = root / "checkpoints" / "lifecycle"

    # create: detached processes that outlive the (killed) engine process
    id_, outs = _create_in_engine_process(props, tmp_path)
    (pid,) = outs["pids"]
    started.append(ProcessRef(pid, outs["start_times"][0]))
    assert id_ == f"lifecycle-{pid}"
    assert outs == {
        **props,
        "pids": [pid],
        "start_times": outs["start_times"],
        "root_dir": str(root),
        "log_path": str(log_path),
        "stderr_path": str(root / "logs" / "lifecycle.stderr.log"),
        "log_offset": 0,
        "stderr_offset": 0,
        "checkpoint_dir": str(ckpt),
        "config_path": str(root / "logs" / "lifecycle.config.json"),
        "state": "running",
        "done": None,
        "resumed_from": 0,
    }
    leader = ProcessRef(pid, outs["start_times"][0])
    table = ProcessTable.snapshot()
    assert table.alive(leader), "the trainer died with the engine process"
    workers = table.descendants([leader])
    assert len(workers) == 2, workers  # torchrun's two gloo workers
    assert json.loads(Path(outs["config_path"]).read_text())["checkpoint_dir"] == str(ckpt)

    # it trains and checkpoints
    def trained() -> bool:
        records = read_records(log_path)
        steps = [r["step"] for r in _rank0(records, "train")]
        return bool(steps) and max(steps) >= 12

    _wait("12 training steps", trained)
    store = CheckpointStore(str(ckpt), keep=2)
    assert store.complete_steps()[-1] >= 10
    assert _read(provider, id_, outs)["state"] == "running"

    # delete: SIGTERM, the trainer checkpoints and exits well within the grace period
    t0 = time.monotonic()
    provider.delete(id_, outs)
    stopped_in = time.monotonic() - t0
    assert stopped_in < GRACE_S
    table = ProcessTable.snapshot()
    assert not [p for p in [leader, *workers] if table.alive(p)]
    records = read_records(log_path)
    preempted = [r for r in records if r.get("event") == "preempted"]
    assert sorted(r["rank"] for r in preempted) == [0, 1]
    stop_step = preempted[0]["step"]
    assert {r["step"] for r in preempted} == {stop_step} and 12 <= stop_step < STEPS
    saved = [r for r in _rank0(records, "checkpoint") if r.get("reason") == "preemption"]
    assert [r["step"] for r in saved] == [stop_step]
    assert store.latest() == stop_step  # data kept
    assert not _rank0(records, "done")
    after = _read(provider, id_, outs)
    assert (after["state"], after["done"]) == ("exited", None)

    # a second create resumes from that checkpoint and runs to the end
    first_run_bytes = log_path.stat().st_size
    result = provider.create(props)
    outs2 = result.outs
    assert outs2 is not None
    started.append(ProcessRef(outs2["pids"][0], outs2["start_times"][0]))
    assert (outs2["log_offset"], outs2["state"]) == (first_run_bytes, "running")
    assert outs2["resumed_from"] == stop_step
    resumed = _rank0(read_records(log_path, outs2["log_offset"]), "resume")
    assert [(r["step"], r["checkpoint_dir"]) for r in resumed] == [(stop_step, str(ckpt))]

    def finished() -> Record | None:
        read = _read(provider, str(result.id), outs2)
        return read if read["state"] == "finished" else None

    final = _wait("the resumed run to finish", finished, timeout=90)
    assert final["done"]["step"] == STEPS
    assert final["done"]["resumed_from"] == stop_step
    assert final["resumed_from"] == stop_step
    # deleting a finished run stops nothing and keeps the data
    provider.delete(result.id, final)
    assert store.latest() == STEPS
    assert len(_rank0(read_records(log_path), "done")) == 1


@pytest.mark.trainer
def test_create_fails_with_the_trainers_error_when_it_dies_on_startup(tmp_path: Path) -> None:
    trainer = TrainConfig(
        model="mlp", dataset="files", data_path=str(tmp_path / "missing"), run_name="crash"
    )
    provider = LocalRunProvider(base_dir=str(tmp_path))
    with pytest.raises(LocalRunStartError) as info:
        provider.create(_props(trainer, workers=1, env={}))
    message = str(info.value)
    stderr_path = tmp_path / "local" / "logs" / "crash.stderr.log"
    assert message.startswith(
        f"the trainer exited before it started training; last lines of {stderr_path}:\n"
        f"first error: [rank0]: FileNotFoundError: [Errno 2] No such file or directory: "
        f"'{tmp_path / 'missing'}'\n...\n"
    )


def test_a_start_failure_names_the_trainers_refusal_not_torchruns_child_error(
    tmp_path: Path,
) -> None:
    # What torchrun leaves in the stderr log when the trainer refuses to resume (a
    # fingerprinted setting changed): the trainer's line, then torchrun's ChildFailedError.
    old = TrainConfig(learning_rate=0.003, run_name="local")
    new = TrainConfig(learning_rate=0.005, run_name="local")
    with pytest.raises(StateMismatch) as refused:
        check(trainer_fingerprint(old), trainer_fingerprint(new), what="step 10", where="ck")
    refusal = f"trainstack trainer: {refused.value}"
    log = tmp_path / "local.stderr.log"
    lines = [
        "old run's line",
        refusal,
        "Traceback (most recent call last):",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "trainstack.trainers.torch_ddp FAILED",
        "  exitcode  : 2 (pid: 7)",
    ]
    log.write_text("".join(f"{line}\n" for line in lines))
    assert _tail(log, len("old run's line\n"), lines=2) == (
        "the trainer's error: trainstack trainer: step 10 was written with other settings "
        "(learning_rate: 0.003 -> 0.005); resuming it would continue another run's state under "
        "learning_rate. Refused: set a new trainer.run_name (a new run, in a folder of its "
        "own), or start this run fresh by deleting ck (`trainstack local-run --fresh` does "
        "that for a local run)\n...\ntrainstack.trainers.torch_ddp FAILED\n  exitcode  : 2 (pid: 7)"
    )


# -- stopping processes that ignore SIGTERM, and recycled pids -------------------------------

_STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = None
if sys.argv[1] == "spawn":
    # Like a torchrun worker: a child in a session of its own, outside the leader's group.
    child = subprocess.Popen(
        [sys.executable, "-c", sys.argv[2], "leaf"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    # Ready once the child ignores SIGTERM too (bit 15 of its SigIgn mask).
    def ignoring():
        for line in open(f"/proc/{child.pid}/status"):
            if line.startswith("SigIgn:"):
                return int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1))
    while not ignoring():
        time.sleep(0.01)
print(child.pid if child else 0, flush=True)
time.sleep(120)
"""


@dataclass
class Stubborn:
    """A process that ignores SIGTERM, with a child in a session of its own that does too."""

    proc: subprocess.Popen[str]
    leader: ProcessRef
    child: ProcessRef


@pytest.fixture
def stubborn() -> Iterator[Stubborn]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUBBORN, "spawn", _STUBBORN],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    child_pid = int(proc.stdout.readline())
    proc.stdout.close()
    table = ProcessTable.snapshot()
    child = ProcessRef(child_pid, str(table.start_time(child_pid)))
    try:
        yield Stubborn(proc, ProcessRef(proc.pid, str(table.start_time(proc.pid))), child)
    finally:
        if ProcessTable.snapshot().alive(child):
            os.kill(child.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_sigkill_after_the_grace_period(stubborn: Stubborn) -> None:
    leader, child = stubborn.leader, stubborn.child
    assert ProcessTable.snapshot().descendants([leader]) == [child]

    result = stop_processes([leader], grace_s=1.0, poll_s=0.05)
    assert result.terminated == [leader, child]
    assert result.killed == [leader, child]
    assert 1.0 <= result.seconds < 5.0
    assert stubborn.proc.wait(5) == -signal.SIGKILL
    assert not ProcessTable.snapshot().alive(child)


def test_a_recycled_pid_is_never_signalled(stubborn: Stubborn) -> None:
    # Same pid, another start time: the process recorded under this pid is gone.
    recycled = ProcessRef(stubborn.leader.pid, stubborn.leader.start_time + "0")
    result = stop_processes([recycled], grace_s=1.0)
    assert (result.terminated, result.killed) == ([], [])
    time.sleep(0.2)
    assert stubborn.proc.poll() is None
    table = ProcessTable.snapshot()
    assert table.alive(stubborn.leader) and table.alive(stubborn.child)


def test_ps_table_used_without_proc_agrees(stubborn: Stubborn) -> None:
    # macOS has no /proc; the same questions are answered from `ps`.
    ps = ProcessTable(_ps_entries())
    leader = ProcessRef(stubborn.leader.pid, str(ps.start_time(stubborn.leader.pid)))
    assert ps.alive(leader)
    assert [r.pid for r in ps.descendants([leader])] == [stubborn.child.pid]
    stubborn.proc.kill()
    stubborn.proc.wait()
    assert not ProcessTable(_ps_entries()).alive(leader)


# -- diff, update, check, read without processes ------------------------------------------------


@pytest.mark.parametrize(
    ("change", "replaces", "changes"),
    [
        ({}, [], False),
        ({"workers": 4}, ["workers"], True),
        ({"root": "elsewhere"}, ["root"], True),
        ({"env": {}}, ["env"], True),
        ({"trainer": TRAINER.model_dump(mode="json") | {"steps": 80}}, ["trainer"], True),
        ({"stop_grace_s": GRACE_S + 30}, [], True),
        ({"labels": {"team": "ml"}}, [], True),
    ],
)
def test_diff_replaces_on_run_config_only(
    change: dict[str, Any], replaces: list[str], changes: bool
) -> None:
    provider = LocalRunProvider(base_dir="/nowhere")
    result = provider.diff("id", _props(), {**_props(), **change})
    assert (result.changes, result.replaces, result.delete_before_replace) == (
        changes,
        replaces,
        True,
    )


def test_diff_sees_engine_doubles_and_nulls_as_unchanged() -> None:
    # The engine returns numbers as doubles and drops None fields.
    olds = _props()
    olds["trainer"] = {k: float(v) if type(v) is int else v for k, v in olds["trainer"].items()}
    news = _props(trainer=TRAINER)
    news["trainer"] = TRAINER.model_dump(mode="json")  # with checkpoint_dir: None etc.
    assert LocalRunProvider(base_dir="/").diff("id", olds, news).changes is False


def test_update_keeps_the_processes_outputs() -> None:
    olds = {**_props(), "pids": [12.0], "start_times": ["99"], "state": "running"}
    news = {**_props(), "stop_grace_s": 60.0}
    outs = LocalRunProvider(base_dir="/").update("id", olds, news).outs
    assert outs == {**news, "pids": [12.0], "start_times": ["99"], "state": "running"}


def test_check_reports_each_bad_property() -> None:
    news = _props(workers=0, root="", env={"A=B": "1"}, stop_grace_s=-1)
    news["trainer"] = {"steps": 0}
    failures = LocalRunProvider(base_dir="/").check({}, news).failures
    assert [(f.property, f.reason) for f in failures] == [
        ("trainer", "steps: Input should be greater than 0"),
        ("workers", "expected an integer >= 1, got 0"),
        ("root", "expected a non-empty path, got ''"),
        ("env", "expected names (no '=') mapped to string values"),
        ("stop_grace_s", "expected seconds > 0, got -1"),
    ]


def test_read_without_state_reports_gone() -> None:
    result = LocalRunProvider(base_dir="/").read("id", {})
    assert (result.id, result.outs) == (None, {})

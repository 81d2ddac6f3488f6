"""Issue 29 item 4: code running as the training account cannot switch the supervisor off.
It can write the checkpoint bucket (objectAdmin there), where the supervisor's state (spend
count, recovery flag) and the run clock used to be: a compromised package in the trainer's
requirements could reset the count, push the clock forward or set the recovery flag. The
state now lives in the supervisor's own bucket (`STATE`), the run's start is its own first
sight of the compute billing, and of what the trainer can write it reads only the end record
and the heartbeats' times. Each test forges what the trainer could write where the
supervisor read it before, and shows the supervisor acts on its own counts; on the code
before this change each forgery switched it off. Google's functions-framework serving the
bundle, against the Compute Engine and TPU fakes and the GCS emulator (as
test_run_supervisor_function.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.components.test_run_supervisor_function import (
    BODY,
    BUCKET,
    CLOCK,
    MIG,
    NODE,
    RUN,
    STATE,
    TRAINER_WRITABLE_STATE,
    VMS,
    _world,
)
from tests.fakes.gcs_emulator import running_gcs_emulator
from trainstack.components.run_supervisor import supervisor_config

GROUP = "p/us-central1-a/exp-42-a100"


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator(bucket=BUCKET) as url:
        yield url


def test_a_spend_count_reset_by_the_trainer_does_not_lift_the_cap(tmp_path: Path, gcs: str) -> None:
    # $100 a second against a $50 cap: two checks a second apart pass it.
    run = {**RUN, "hourly_usd": 360000.0, "max_total_usd": 50.0}
    config = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(GROUP, VMS)
        assert world.function.call()["action"] == "none"
        time.sleep(1.0)
        # The trainer resets the count where the supervisor kept it, and writes a fresh one.
        forged = {"attempts": 0, "next_allowed": None, "recreate": False}
        forged["run"] = {"id": RUN["end_uri"], "spend_usd": 0.0, "last_tick": None}
        world.fs.pipe_file(TRAINER_WRITABLE_STATE, json.dumps(forged).encode())
        request = world.function.call()
        assert (request["action"], request["reason"]) == ("request_stop", "max_total_usd")
        assert request["spend_usd"] >= 50
        assert world.read(RUN["stop_uri"])["reason"] == "max_total_usd"
        world.fs.invalidate_cache()
        assert json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]["spend_usd"] >= 50


def test_a_run_clock_rewritten_by_the_trainer_does_not_extend_the_run(
    tmp_path: Path, gcs: str
) -> None:
    run = {**RUN, "max_run_seconds": 3600}
    config = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(GROUP, VMS)
        # The supervisor first saw the group billing an hour ago; the trainer rewrites the
        # clock the startup scripts keep to now.
        world.seed(started=time.time() - 3601, billing=True)
        world.fs.pipe_file(CLOCK, b"%d" % time.time())
        request = world.function.call()
        assert (request["action"], request["reason"]) == ("request_stop", "max_run_hours")
        # Nor does the supervisor write that clock any more (a GKE pod keeps none).
        world.fs.invalidate_cache()
        assert int(world.fs.cat_file(CLOCK)) <= time.time()
        assert [(e["action"], e["reason"]) for e in world.events()] == [
            ("request_stop", "max_run_hours")
        ]


def test_a_recovery_flag_set_by_the_trainer_does_not_recreate_a_deleted_slice(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("node", NODE, BODY, STATE, run=RUN)
    with _world(tmp_path, gcs, config) as world:
        world.tpu.nodes[NODE] = {**BODY, "name": NODE, "state": "READY"}
        world.function.call()
        del world.tpu.nodes[NODE]  # an operator deletes the slice by hand
        # The trainer sets the flag that means "deleted by the supervisor: create again".
        forged = {"attempts": 0, "next_allowed": None, "recreate": True}
        forged["run"] = {"id": RUN["end_uri"]}
        world.fs.pipe_file(TRAINER_WRITABLE_STATE, json.dumps(forged).encode())
        for _ in range(2):
            assert world.function.call()["action"] == "none"
        assert world.tpu.calls("POST") == []
        assert [(e["seen"], e["result"]) for e in world.events()] == [
            ("NOT_FOUND", "missing, and not deleted by this supervisor: left alone")
        ]
        # Its state, events and marker are in its own bucket; nothing of it beside the
        # checkpoints but what the trainer forged.
        world.fs.invalidate_cache()
        assert sorted(world.fs.ls(STATE)) == [
            f"{STATE}/armed",
            f"{STATE}/events.jsonl",
            f"{STATE}/state.json",
        ]
        assert world.fs.find(f"{BUCKET}/supervisor") == [TRAINER_WRITABLE_STATE]

"""Parameter-server training for real on CPU: 1 chief + 1 ps + 2 workers as local processes,
the chief preempted (SIGTERM -> checkpoint -> 143, the servers leave on their own), then
restarted through `run_local` to the end, where the model must reach the stated loss."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.trainers.tf_helpers import TF_BASE, TFRun, train_step_at_least
from trainstack.trainers.common.checkpoint import CheckpointStore
from trainstack.trainers.common.cli import load_config
from trainstack.trainers.local import run_local

pytestmark = pytest.mark.trainer

STEPS = 100
ARGS = [
    *TF_BASE,
    "--strategy=parameter_server",
    f"--steps={STEPS}",
    "--log_every=10",
    "--checkpoint_every=20",
    "--run_name=tf-ps",
]
# 100 asynchronous steps of 64 digits images (about 4.5 passes over the training split);
# runs here end near 0.1 test loss and 0.97 accuracy.
TEST_LOSS_THRESHOLD = 0.3
TEST_ACCURACY_THRESHOLD = 0.9


@pytest.mark.slow  # about 45 s here; parameter-server recovery
def test_parameter_server_preempted_resumes_and_reaches_loss(tmp_path: Path) -> None:
    run = TFRun(
        ARGS, workers=2, root=tmp_path, env={"TRAINSTACK_TEST_STEP_DELAY_S": "0.03"}, tag="term"
    )
    assert run.names == ["chief0", "ps0", "worker0", "worker1"]
    run.wait_for(train_step_at_least(30))
    run.signal("chief0", signal.SIGTERM)
    assert run.wait(90) == {"chief0": 143, "ps0": 0, "worker0": 0, "worker1": 0}
    (preempted,) = [r for r in run.records() if r["event"] == "preempted"]
    term_step = preempted["step"]
    saved = [r for r in run.records("chief0") if r["event"] == "checkpoint"]
    assert saved[-1]["reason"] == "preemption" and saved[-1]["step"] == term_step
    for task in ("ps0", "worker0", "worker1"):
        events = [(r["event"], r.get("reason")) for r in run.records(task)]
        assert events == [("server", None), ("idle", "chief exited")], task
    ckpt = run.prepared.checkpoint_dir
    assert CheckpointStore(ckpt, keep=3).latest() == term_step

    result = run_local(load_config(ARGS), workers=2, root=tmp_path)
    assert result.exit_code == 0, result.events[-5:]
    done = result.done
    assert done is not None
    assert (done["step"], done["resumed_from"], done["workers"]) == (STEPS, term_step, 3)
    assert done["checkpoint_dir"] == ckpt
    assert done["test_loss"] <= TEST_LOSS_THRESHOLD
    assert done["test_accuracy"] >= TEST_ACCURACY_THRESHOLD
    start = next(r for r in result.events if r["event"] == "start")
    assert (start["strategy"], start["ps"], start["deterministic"]) == (
        "parameter_server",
        1,
        False,
    )

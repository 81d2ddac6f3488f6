"""Under torchrun, NCCL errors raise in the workers (TORCH_NCCL_ASYNC_ERROR_HANDLING=2)
instead of aborting them, and the worker wrapper reads them as a lost peer (exit 4).

This machine has no GPU: no NCCL collective can run here. The tests hold the environment
the workers get (through a real torchrun agent, which otherwise hands its workers 1) and
the wrapper's reading of the DistBackendError texts ProcessGroupNCCL raises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_elastic import one_worker_argv
from trainstack.trainers.common.exit_codes import CRASH_EXIT_CODE, PEER_LOST_EXIT_CODE
from trainstack.trainers.elastic import nccl_error_handling
from trainstack.trainers.node import node_command, parse_args

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
GKE_NODE = {
    "JOB_COMPLETION_INDEX": "1",
    "TRAINSTACK_NUM_NODES": "2",
    "TRAINSTACK_COORDINATOR": "job-0.svc:29500",
    "TRAINSTACK_SIMULATED_ACCELERATORS": "2",
}
# NCCLComm::getNcclComm (torch/csrc/distributed/c10d/NCCLUtils.cpp) after the watchdog
# aborted the communicator, and WorkNCCL's timeout text.
ABORTED = (
    "NCCL communicator was aborted on rank 3.  Original reason for failure was: NCCL error: "
    "remote process exited or there was a network error, NCCL version 2.27.5"
)
TIMED_OUT = (
    "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, "
    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
    "600018 milliseconds before timing out."
)
INVALID_USAGE = (
    "NCCL error in: ProcessGroupNCCL.cpp:3356, invalid usage (run with NCCL_DEBUG=WARN for "
    "details), NCCL version 2.27.5\nncclInvalidUsage: This usually reflects invalid usage of "
    "NCCL library."
)


def test_the_mode_is_clean_up_only_unless_either_name_is_set() -> None:
    assert nccl_error_handling({}) == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    assert nccl_error_handling({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}) == {}
    assert nccl_error_handling({"NCCL_ASYNC_ERROR_HANDLING": "1"}) == {}


def test_torchrun_targets_get_it_and_a_users_value_stays() -> None:
    bundled = node_command(parse_args(["trainstack.trainers.torch_ddp", "--steps=10"]), GKE_NODE)
    assert bundled.launcher == "torchrun"
    assert bundled.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"
    yours = node_command(parse_args(["--launcher=torchrun", "--", "train.py"]), GKE_NODE)
    assert yours.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"
    own = parse_args(
        ["--launcher=torchrun", "--env=TORCH_NCCL_ASYNC_ERROR_HANDLING=3", "--", "train.py"]
    )
    assert node_command(own, GKE_NODE).env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    legacy = node_command(
        parse_args(["trainstack.trainers.torch_ddp"]),
        {**GKE_NODE, "NCCL_ASYNC_ERROR_HANDLING": "1"},
    )
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in legacy.env
    tf = node_command(parse_args(["trainstack.trainers.tf_multiworker"]), GKE_NODE)
    assert tf.launcher == "node"
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in tf.env


def test_a_real_torchrun_agent_hands_its_workers_2_not_its_own_1(tmp_path: Path) -> None:
    (tmp_path / "show_mode.py").write_text(
        "import os\nprint('mode', os.environ.get('TORCH_NCCL_ASYNC_ERROR_HANDLING'))\n"
    )
    argv = one_worker_argv("show_mode")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["mode 2"]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (ABORTED, PEER_LOST_EXIT_CODE),
        (TIMED_OUT, PEER_LOST_EXIT_CODE),
        (INVALID_USAGE, CRASH_EXIT_CODE),
    ],
)
def test_the_worker_reads_nccls_errors(tmp_path: Path, message: str, code: int) -> None:
    (tmp_path / "nccl_trainer.py").write_text(
        f"import torch.distributed as dist\nraise dist.DistBackendError({message!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "trainstack.trainers.elastic", "--worker", "nccl_trainer"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == code, done.stderr[-2000:]
    if code == PEER_LOST_EXIT_CODE:
        assert "trainstack-elastic: a peer is gone (DistBackendError: " in done.stderr

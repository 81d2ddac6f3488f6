"""A machine with fewer usable accelerators than the plan bought stops (exit 5) instead of
training on CPU at the accelerator machine's price."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from trainstack.components.gpu_startup import GCE_STOP_EXIT_CODES, render_launcher
from trainstack.components.kubernetes_training_job import pod_failure_policy
from trainstack.trainers.common.accelerators import (
    Accelerators,
    AcceleratorsMissing,
    check_expected,
    expected_count,
    usable_count,
)
from trainstack.trainers.common.exit_codes import ACCELERATORS_MISSING_EXIT_CODE


def _answers(torch_says: str) -> object:
    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert argv[:2] == [sys.executable, "-c"]
        assert "torch.cuda.is_available()" in argv[2]
        return subprocess.CompletedProcess(list(argv), 0, torch_says, "")

    return run


def test_gpus_that_torch_cannot_use_are_refused() -> None:
    pytest.importorskip("torch")
    found = Accelerators(8, "nvidia-smi")
    with pytest.raises(AcceleratorsMissing) as caught:
        check_expected({"TRAINSTACK_EXPECTED_ACCELERATORS": "8"}, found, _answers("0\n"))
    assert str(caught.value) == (
        "TRAINSTACK_EXPECTED_ACCELERATORS: the plan bought 8 accelerator(s) for this machine "
        "but it has 8 found (nvidia-smi), 0 usable (torch.cuda.is_available()); stopping "
        "rather than training on CPU at the accelerator machine's price (check the GPU "
        "driver against the image's CUDA, or the node's accelerator type)"
    )
    assert usable_count(found, _answers("8\n")) == (8, "torch.cuda.is_available()")  # type: ignore[arg-type]
    check_expected({"TRAINSTACK_EXPECTED_ACCELERATORS": "8"}, found, _answers("8\n"))  # type: ignore[arg-type]


def test_unset_zero_or_simulated_checks_nothing() -> None:
    def never(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"probed {argv}")

    check_expected({}, Accelerators(0, "none"), never)
    check_expected({"TRAINSTACK_EXPECTED_ACCELERATORS": "0"}, Accelerators(0, "none"), never)
    # The test switch stands in for the hardware the plan bought.
    simulated = Accelerators(2, "simulated")
    check_expected({"TRAINSTACK_EXPECTED_ACCELERATORS": "8"}, simulated, never)
    with pytest.raises(AcceleratorsMissing, match=r"it has 0 found \(none\)"):
        check_expected({"TRAINSTACK_EXPECTED_ACCELERATORS": "4"}, Accelerators(0, "none"), never)


def test_a_malformed_expectation_names_the_variable() -> None:
    with pytest.raises(ValueError, match=r"^TRAINSTACK_EXPECTED_ACCELERATORS: 'eight' is not an"):
        expected_count({"TRAINSTACK_EXPECTED_ACCELERATORS": "eight"})


def test_the_node_launcher_on_a_machine_without_gpus_exits_5(tmp_path: Path) -> None:
    # This machine has no GPU: what a node whose CUDA is unusable looks like to torch.
    pytest.importorskip("torch")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.getcwd(),
        "HOME": str(tmp_path),
        "TRAINSTACK_EXPECTED_ACCELERATORS": "8",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.trainers.node",
            "trainstack.trainers.torch_ddp",
            "--steps=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == ACCELERATORS_MISSING_EXIT_CODE, done.stderr[-2000:]
    assert done.stderr.startswith(
        "trainstack-node: TRAINSTACK_EXPECTED_ACCELERATORS: the plan bought 8 accelerator(s) "
        "for this machine but it has 0 found (torch), 0 usable (torch.cuda.is_available()); "
    ), done.stderr[-2000:]
    assert '"event"' not in done.stdout  # nothing trained


def test_every_launch_treats_exit_5_as_final() -> None:
    assert 5 in GCE_STOP_EXIT_CODES
    [fail_job] = [r for r in pod_failure_policy()["rules"] if r["action"] == "FailJob"]
    assert fail_job["onExitCodes"]["values"] == [1, 2, 5]
    launcher = render_launcher(
        package_uri="gs://b/t.tar.gz",
        module="trainstack.trainers.tf_multiworker",
        trainer_args=[],
        num_nodes=2,
        procs_per_node=1,
        accelerators_per_node=8,
        coordinator="exp-0",
        work_dir="/var/lib/trainstack",
    )
    assert "\nEXPECTED_ACCELERATORS=8\n" in launcher
    assert '\nexport TRAINSTACK_EXPECTED_ACCELERATORS="$EXPECTED_ACCELERATORS"\n' in launcher

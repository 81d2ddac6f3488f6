"""Counting a machine's accelerators: simulated, TPU chips on PCI, nvidia-smi, torch, none."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from trainstack.trainers.common.accelerators import (
    NVIDIA_SMI_DIRS,
    SIMULATED_ACCELERATORS_ENV,
    Accelerators,
    count_accelerators,
)

SMI_LINES = "".join(f"GPU {i}: NVIDIA A100-SXM4-40GB (UUID: GPU-{i:04d})\n" for i in range(8))


def _fake_smi(tmp_path: Path, stdout: str, code: int = 0) -> str:
    """A directory holding an `nvidia-smi` that prints `stdout` for `-L`."""
    directory = tmp_path / "bin"
    directory.mkdir()
    script = directory / "nvidia-smi"
    script.write_text(
        f"#!/bin/sh\n[ \"$1\" = -L ] || exit 64\nprintf '%s' '{stdout}'\nexit {code}\n"
    )
    script.chmod(0o755)
    return str(directory)


def _no_torch(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    if argv[0] == sys.executable:  # the torch probe: pretend torch failed to load
        return subprocess.CompletedProcess(list(argv), 1, "", "ImportError")
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("visible", "expected"),
    [(None, 8), ("0,1", 2), ("", 0), ("3,-1,4", 1), ("GPU-0001,GPU-0002,GPU-0003", 3)],
)
def test_nvidia_smi_counts_gpus_capped_by_cuda_visible_devices(
    tmp_path: Path, visible: str | None, expected: int
) -> None:
    env = {"PATH": _fake_smi(tmp_path, SMI_LINES)}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    assert count_accelerators(env, run=_no_torch) == Accelerators(expected, "nvidia-smi")


def test_simulated_accelerators_win_over_real_ones(tmp_path: Path) -> None:
    env = {"PATH": _fake_smi(tmp_path, SMI_LINES), "TRAINSTACK_SIMULATED_ACCELERATORS": "2"}
    found = count_accelerators(env, run=_no_torch)
    assert found == Accelerators(2, "simulated")
    assert (found.simulated, found.processes) == (True, 2)


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_a_malformed_simulated_count_is_a_value_error(raw: str) -> None:
    with pytest.raises(ValueError) as error:
        count_accelerators({"TRAINSTACK_SIMULATED_ACCELERATORS": raw})
    assert str(error.value) == f"TRAINSTACK_SIMULATED_ACCELERATORS: {raw!r} is not an integer >= 1"


def test_a_failing_nvidia_smi_falls_back_to_torch_then_to_none(tmp_path: Path) -> None:
    env = {"PATH": _fake_smi(tmp_path, "", code=9)}
    seen: list[list[str]] = []

    def torch_says_four(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        seen.append(list(argv))
        if argv[0] == sys.executable:
            return subprocess.CompletedProcess(list(argv), 0, "4\n", "")
        return subprocess.run(list(argv), capture_output=True, text=True, check=False)

    assert count_accelerators(env, run=torch_says_four) == Accelerators(4, "torch")
    assert seen[-1] == [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
    none = count_accelerators(env, run=_no_torch)
    assert (none, none.processes, none.simulated) == (Accelerators(0, "none"), 1, False)


@pytest.mark.skipif(
    any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in NVIDIA_SMI_DIRS),
    reason="this machine has nvidia-smi",
)
def test_this_cpu_machine_counts_no_gpus_through_torch() -> None:
    # No nvidia-smi here; the real torch probe runs (torch is the CPU build).
    assert count_accelerators({"PATH": "/nonexistent"}) == Accelerators(0, "torch")


def _pci(root: Path, devices: dict[str, tuple[str, str]]) -> str:
    """A `/sys/bus/pci/devices`-shaped folder: address -> (vendor, device)."""
    for address, (vendor, device) in devices.items():
        folder = root / address
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(f"{vendor}\n")
        (folder / "device").write_text(f"{device}\n")
    return str(root)


def test_a_tpu_host_counts_its_chips_on_the_pci_bus_before_any_gpu_probe(tmp_path: Path) -> None:
    # A v4 host: 4 chips (0x005e); Google's virtio NIC (0x1ae0 with another id) and an Intel
    # bridge are not TPU chips.
    chips = {f"0000:00:0{i}.0": ("0x1ae0", "0x005e") for i in range(4, 8)}
    others = {"0000:00:03.0": ("0x1ae0", "0x0042"), "0000:00:00.0": ("0x8086", "0x1237")}
    pci = _pci(tmp_path / "pci", {**chips, **others})

    def no_probe(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"probed {argv} on a TPU host")

    found = count_accelerators({"PATH": ""}, run=no_probe, pci_devices=pci)
    assert (found, found.processes) == (Accelerators(4, "tpu-pci"), 4)
    simulated = count_accelerators({SIMULATED_ACCELERATORS_ENV: "2"}, pci_devices=pci)
    assert simulated == Accelerators(2, "simulated")
    none = count_accelerators({"PATH": ""}, run=_no_torch, pci_devices=str(tmp_path / "absent"))
    assert none == Accelerators(0, "none")

"""How many accelerators this machine has, for launchers that start one process per GPU.

Standard library only: the node launcher (`trainstack.trainers.node`) counts before any framework is
imported. The first source that answers wins:

1. `TRAINSTACK_SIMULATED_ACCELERATORS=N` (N >= 1): the machine acts as if it had N
   accelerators, and the launcher runs N CPU processes on gloo (it hides real GPUs from
   them). The one switch tests use to run a target's launch path on a CPU machine.
2. TPU chips on the PCI bus: devices of Google's vendor id (0x1ae0) whose device id is a TPU
   chip's (v3 0x0027, v4 0x005e, v5p 0x0062, v5e 0x0063, v6e 0x006f, TPU7x 0x0076), the count
   JAX itself takes on a TPU VM (jax/_src/hardware_utils.py,
   `num_available_tpu_chips_and_device_id`).
3. `nvidia-smi -L` (one `GPU <i>: ...` line per GPU), capped by the entries of
   `CUDA_VISIBLE_DEVICES` when that is set. GKE mounts the driver's tools under
   `/usr/local/nvidia/bin`, which is searched after PATH.
4. `torch.cuda.device_count()` in a child process, when torch is installed (an image
   without nvidia-smi on its PATH); a child so the launcher never initializes CUDA itself.
5. Otherwise 0: a CPU machine (launchers still start one process).

`TRAINSTACK_EXPECTED_ACCELERATORS=N`, set by the GPU targets' launches (a GKE pod, a Compute
Engine VM, a Vertex pool with accelerators) to the GPUs per machine the plan bought, makes `check_expected` refuse a machine with
fewer usable ones: GPUs count only where the framework can use them (`torch.cuda` is
available, or TensorFlow lists them), since `nvidia-smi` lists GPUs whose CUDA is unusable
(a driver too old for the image's CUDA), and training would then go on on CPU at the GPU
machine's price. TPU VMs do not set it: the check counts CUDA GPUs only, so a TPU host's
chips are not checked. Simulated accelerators stand in for the hardware and are not checked.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

SIMULATED_ACCELERATORS_ENV: Final = "TRAINSTACK_SIMULATED_ACCELERATORS"
EXPECTED_ACCELERATORS_ENV: Final = "TRAINSTACK_EXPECTED_ACCELERATORS"
"""Accelerators per machine the plan bought (set by each target's launch)."""
NVIDIA_SMI_DIRS: Final = ("/usr/local/nvidia/bin", "/usr/bin")
"""Searched after PATH: GKE's driver mount, then the usual system location."""
PROBE_TIMEOUT_S: Final = 60.0

PCI_DEVICES: Final = "/sys/bus/pci/devices"
GOOGLE_PCI_VENDOR: Final = "0x1ae0"
TPU_PCI_DEVICE_IDS: Final = frozenset({"0x0027", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"})
"""PCI device ids of TPU chips, as JAX lists them (jax/_src/hardware_utils.py)."""

Source = Literal["simulated", "tpu-pci", "nvidia-smi", "torch", "none"]
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Accelerators:
    """The accelerators of this machine and where the count came from."""

    count: int
    source: Source

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"

    @property
    def processes(self) -> int:
        """Processes a one-per-accelerator launcher starts: at least one."""
        return max(self.count, 1)


def simulated_count(env: Mapping[str, str]) -> int | None:
    """The simulated accelerator count, None when unset; raises ValueError when malformed."""
    raw = env.get(SIMULATED_ACCELERATORS_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{SIMULATED_ACCELERATORS_ENV}: {raw!r} is not an integer >= 1")
    return count


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
    )


def _nvidia_smi(env: Mapping[str, str]) -> str | None:
    path = env.get("PATH", os.defpath)
    found = shutil.which("nvidia-smi", path=path)
    if found:
        return found
    for directory in NVIDIA_SMI_DIRS:
        candidate = os.path.join(directory, "nvidia-smi")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _visible_cap(env: Mapping[str, str]) -> int | None:
    """How many devices CUDA_VISIBLE_DEVICES admits (CUDA stops at the first -1)."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    entries: list[str] = []
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    return len(entries)


def _smi_count(smi: str, run: Runner) -> int | None:
    try:
        result = run([smi, "-L"])
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))


def _torch_count(run: Runner) -> int | None:
    if importlib.util.find_spec("torch") is None:
        return None
    script = "import torch; print(torch.cuda.device_count())"
    try:
        result = run([sys.executable, "-c", script])
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].isdigit():
        return None
    return int(lines[-1])


def tpu_chip_count(pci_devices: str = PCI_DEVICES) -> int:
    """TPU chips attached through PCI (0 on any other machine)."""
    count = 0
    try:
        devices = os.listdir(pci_devices)
    except OSError:
        return 0
    for device in devices:
        try:
            with open(os.path.join(pci_devices, device, "vendor")) as vendor:
                if vendor.read().strip() != GOOGLE_PCI_VENDOR:
                    continue
            with open(os.path.join(pci_devices, device, "device")) as ident:
                count += ident.read().strip() in TPU_PCI_DEVICE_IDS
        except OSError:
            continue
    return count


def count_accelerators(
    env: Mapping[str, str] = os.environ, run: Runner = _run, pci_devices: str = PCI_DEVICES
) -> Accelerators:
    """This machine's accelerators (see the module docstring for the order).

    Raises ValueError when `TRAINSTACK_SIMULATED_ACCELERATORS` is set but not an integer >= 1.
    """
    simulated = simulated_count(env)
    if simulated is not None:
        return Accelerators(simulated, "simulated")
    chips = tpu_chip_count(pci_devices)
    if chips:
        return Accelerators(chips, "tpu-pci")
    cap = _visible_cap(env)
    smi = _nvidia_smi(env)
    if smi is not None:
        count = _smi_count(smi, run)
        if count is not None:
            return Accelerators(count if cap is None else min(count, cap), "nvidia-smi")
    # torch applies CUDA_VISIBLE_DEVICES itself.
    count = _torch_count(run)
    if count is not None:
        return Accelerators(count, "torch")
    return Accelerators(0, "none")


class AcceleratorsMissing(ValueError):
    """This machine has fewer usable accelerators than the plan bought."""


TORCH_USABLE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
TF_USABLE = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"


def expected_count(env: Mapping[str, str]) -> int | None:
    """`TRAINSTACK_EXPECTED_ACCELERATORS`, None when unset; ValueError when malformed."""
    raw = env.get(EXPECTED_ACCELERATORS_ENV)
    if raw is None or raw.strip() == "":
        return None
    if not raw.strip().isdigit():
        raise ValueError(f"{EXPECTED_ACCELERATORS_ENV}: {raw!r} is not an integer >= 0")
    return int(raw)


def _probe(run: Runner, module: str, script: str) -> int | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        result = run([sys.executable, "-c", script])
    except (OSError, subprocess.SubprocessError):
        return 0
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].isdigit():
        return 0
    return int(lines[-1])


def usable_count(accelerators: Accelerators, run: Runner = _run) -> tuple[int, str]:
    """How many of this machine's accelerators the framework can use, and who said so.

    TPU chips and simulated accelerators are taken as counted; GPUs are asked of torch
    (`torch.cuda.is_available()`), else TensorFlow, in a child process, else the count
    stands (nvidia-smi) when neither framework is installed.
    """
    if accelerators.source in ("simulated", "tpu-pci", "none"):
        return accelerators.count, accelerators.source
    for module, script, probe in (
        ("torch", TORCH_USABLE, "torch.cuda.is_available()"),
        ("tensorflow", TF_USABLE, "tf.config.list_physical_devices('GPU')"),
    ):
        usable = _probe(run, module, script)
        if usable is not None:
            return usable, probe
    return accelerators.count, accelerators.source


def check_expected(env: Mapping[str, str], accelerators: Accelerators, run: Runner = _run) -> None:
    """Raise `AcceleratorsMissing` when this machine has fewer usable accelerators than
    `TRAINSTACK_EXPECTED_ACCELERATORS` (unset, or simulated accelerators: nothing checked)."""
    expected = expected_count(env)
    if expected is None or expected == 0 or accelerators.simulated:
        return
    usable, source = usable_count(accelerators, run)
    if usable >= expected:
        return
    seen = (
        f"{accelerators.count} found ({accelerators.source}), {usable} usable ({source})"
        if source != accelerators.source
        else f"{usable} found ({source})"
    )
    raise AcceleratorsMissing(
        f"{EXPECTED_ACCELERATORS_ENV}: the plan bought {expected} accelerator(s) for this "
        f"machine but it has {seen}; stopping rather than training on CPU at the "
        "accelerator machine's price (check the GPU driver against the image's CUDA, or "
        "the node's accelerator type)"
    )

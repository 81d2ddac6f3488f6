"""The bundled TPU stacks' startup scripts against the TensorFlow release their runtimes
ship, installed from PyPI: slow and online, so it runs only with
`TRAINSTACK_FIDELITY_PYPI=1` (and is marked `slow`).

Same replay as tests/fidelity/test_tpu.py (the plan's script run with bash, the fake
metadata server, a GCS emulator, simulated chips), but the runtime's Python is a virtual
environment holding the TensorFlow of the runtime the plan names, as `tensorflow-cpu` (the
TPU build differs only in its libtpu):

- prod-tpu-v4-32 on tpu-vm-tf-2.14.1-pod: TensorFlow 2.14.1, whose tf.keras is its built-in
  Keras 2; the script installs no tf-keras, the trainer runs without it.
- dev-tpu-v5e on tpu-vm-tf-2.16.0-pod-pjrt: TensorFlow 2.16.1 (TF 2.16 shipped as 2.16.1;
  Google's table has no 2.16.0) and no tf-keras; the script installs `tf-keras==2.16.*`
  for real with Google's flags (--no-deps), and TensorFlow stays 2.16.1.

Each environment (TensorFlow, the trainer package's dependencies, setuptools) is built once
under `.trainstack/fidelity/` and reused; tf-keras is removed before each run, as the
runtime image has none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.tpu_vm import CHIPS, REPO, TpuVm, cut_plan, script_records
from trainstack.components.trainer_package import RUNTIME_DEPENDENCIES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("TRAINSTACK_FIDELITY_PYPI") != "1",
        reason="installs TensorFlow releases from PyPI; set TRAINSTACK_FIDELITY_PYPI=1",
    ),
]

CACHE = REPO / ".trainstack" / "fidelity"
SMALL = {"steps": 3, "global_batch_size": 16, "checkpoint_every": 2, "log_every": 1}


def _released_tensorflow(version: str) -> Path:
    """A virtual environment with tensorflow-cpu `version` and the trainer package's
    dependencies from PyPI, without tf-keras; its python."""
    root = CACHE / f"tensorflow-cpu-{version}"
    python = root / "bin" / "python"
    if not (root / "ready").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"tensorflow-cpu=={version}",
                *RUNTIME_DEPENDENCIES,
                "setuptools>=61",
            ],
            check=True,
            timeout=1800,
        )
        (root / "ready").write_text(version + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "tf-keras"], check=True
    )
    return python


def _boot(vm: TpuVm, stack: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Worker 0 of the 4-worker slice: the script's result and the trainer's done record."""
    with running_gcs_emulator(vm.planned.checkpoint_bucket) as gcs:
        result = vm.boot(0, 4, gcs)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    tag = f"[trainstack slice={stack}-tpu worker=0]"
    [done] = [r for r in script_records(result.stdout, tag) if r.get("event") == "done"]
    return result, done


def _versions(vm: TpuVm) -> list[str]:
    return vm.run_python(
        "import importlib.metadata as m, importlib.util as u\n"
        "print(m.version('tensorflow-cpu'), u.find_spec('tf_keras') and m.version('tf-keras'))"
    ).split()


def test_prod_tpu_v4_32_on_tensorflow_2_14_needs_no_tf_keras(tmp_path: Path) -> None:
    trainer = {**SMALL, "gpt_dim": 32, "seq_len": 16, "vocab_size": 64, "synthetic_samples": 64}
    planned = cut_plan(stack="prod-tpu-v4-32", trainer=trainer)
    assert planned.runtime == "tpu-vm-tf-2.14.1-pod"
    vm = TpuVm(tmp_path, planned, image=_released_tensorflow("2.14.1"))
    assert _versions(vm) == ["2.14.1", "None"]
    result, done = _boot(vm, "prod-tpu-v4-32")
    probes = [c for c in vm.calls() if c["argv"][:1] == ["-c"]]
    assert [c["argv"][1] for c in probes] == ["import tensorflow as tf; print(tf.__version__)"]
    assert not any("tf-keras" in arg for c in vm.calls() for arg in c["argv"])
    assert (
        "[trainstack slice=prod-tpu-v4-32-tpu worker=0] TensorFlow 2.14.1 has Keras 2 built in; "
        "nothing to install"
    ) in result.stdout.splitlines()
    assert (done["step"], done["world_size"]) == (3, CHIPS)
    assert _versions(vm) == ["2.14.1", "None"]


def test_dev_tpu_v5e_on_tensorflow_2_16_installs_the_pinned_tf_keras(tmp_path: Path) -> None:
    planned = cut_plan()
    assert planned.runtime == "tpu-vm-tf-2.16.0-pod-pjrt"
    vm = TpuVm(tmp_path, planned, image=_released_tensorflow("2.16.1"), online_pip=True)
    assert _versions(vm) == ["2.16.1", "None"]
    result, done = _boot(vm, "dev-tpu-v5e")
    pins = [c["argv"] for c in vm.calls() if "tf-keras==2.16.*" in c["argv"]]
    assert pins == [
        [
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--upgrade",
            "--force-reinstall",
            "--no-deps",
            "tf-keras==2.16.*",
        ]
    ]
    assert not any("names TensorFlow" in line for line in result.stdout.splitlines())
    assert (done["step"], done["world_size"]) == (3, CHIPS)
    # tf-keras at TensorFlow's minor, and TensorFlow still the runtime's release.
    tensorflow, tf_keras = _versions(vm)
    assert (tensorflow, tf_keras.rsplit(".", 1)[0]) == ("2.16.1", "2.16")

"""The TensorFlow trainer's Keras check with real TensorFlow (2.20 here, with tf-keras 2.20):
the trainer started the way every platform starts it, `python -m trainstack.trainers.tf_multiworker`,
with tf-keras present, missing or at another minor (a stand-in package first on
PYTHONPATH), and with metadata that claims an older TensorFlow. Each run stops at the check,
before any training; the versions this machine lacks are covered by
tests/unit/test_keras_setup.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.trainers.conftest import REPO

ARGS = ["--framework=tensorflow", "--strategy=mirrored", "--steps=1"]


def _trainer(tmp_path: Path, shadow: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = [str(shadow)] if shadow else []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*path, str(REPO)]),
        "TF_USE_LEGACY_KERAS": "1",  # inherited from a launcher; the trainer decides
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.trainers.tf_multiworker",
            *ARGS,
            f"--checkpoint_dir={tmp_path}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _only_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    mine = [line for line in result.stderr.splitlines() if line.startswith("trainstack trainer:")]
    assert len(mine) == 1, result.stderr
    assert result.stderr.rstrip("\n").endswith(mine[0])
    return mine[0]


def test_real_tensorflow_and_tf_keras_give_the_trainer_keras_2() -> None:
    code = (
        "import os, trainstack.trainers.tf_multiworker\n"
        "from trainstack.trainers.tf_multiworker.keras_setup import load_keras\n"
        "import tensorflow as tf, tf_keras\n"
        "keras = load_keras()\n"
        "print(os.environ['TF_USE_LEGACY_KERAS'], tf.__version__, tf_keras.__version__,"
        " keras.__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.split() == ["1", "2.20.0", "2.20.1", "tf_keras.api._v2.keras"]


def test_missing_tf_keras_exits_2_with_the_pin(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "tf_keras").mkdir(parents=True)
    (shadow / "tf_keras" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tf_keras'\", name='tf_keras')\n"
    )
    assert _only_error(_trainer(tmp_path, shadow)) == (
        "trainstack trainer: tf-keras: not installed, but TensorFlow 2.20.0 (>= 2.16) runs the "
        "trainer's Keras 2 code only through it; valid: tf-keras 2.20.x (pip install --no-deps "
        "'tf-keras==2.20.*')"
    )


def test_tf_keras_of_another_minor_exits_2_naming_both(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "tf_keras").mkdir(parents=True)
    (shadow / "tf_keras" / "__init__.py").write_text("__version__ = '2.19.0'\n")
    assert _only_error(_trainer(tmp_path, shadow)) == (
        "trainstack trainer: tf-keras: 2.19.0 does not match TensorFlow 2.20.0 (tf-keras must "
        "be the same minor); valid: tf-keras 2.20.x (pip install --no-deps 'tf-keras==2.20.*')"
    )


def test_metadata_claiming_tensorflow_2_15_is_caught_after_import(tmp_path: Path) -> None:
    # The package reads TF 2.15 from the metadata and leaves tf.keras to TensorFlow's own
    # Keras, which on the real 2.20 is Keras 3: the check after import says so.
    shadow = tmp_path / "shadow"
    info = shadow / "tensorflow-2.15.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow\nVersion: 2.15.1\n")
    (info / "top_level.txt").write_text("tensorflow\n")
    assert _only_error(_trainer(tmp_path, shadow)) == (
        "trainstack trainer: TF_USE_LEGACY_KERAS: TensorFlow 2.20.0 was imported without it, so "
        "tf.keras is Keras 3, which fails inside MultiWorkerMirroredStrategy; valid: import "
        "trainstack.trainers.tf_multiworker before tensorflow (it sets TF_USE_LEGACY_KERAS=1)"
    )

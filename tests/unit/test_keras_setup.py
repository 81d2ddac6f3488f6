"""The TensorFlow trainer's Keras choice by TensorFlow version (`keras_setup`), without
importing TensorFlow: fake `tf` objects, fake tf_keras modules and fake distribution
metadata stand in for TensorFlow releases this machine does not have (it has TF 2.20 with
tf-keras 2.20; tests/trainers/test_tf_keras.py runs the real ones)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from trainstack.trainers.tf_multiworker import keras_setup
from trainstack.trainers.tf_multiworker.keras_setup import (
    KerasSetupError,
    check_keras,
    keras_problem,
    legacy_keras_wanted,
    minor_of,
    needs_tf_keras,
    select_keras_environment,
    tf_keras_pin,
)


@pytest.mark.parametrize(
    ("version", "minor", "needs", "pin"),
    [
        ("2.14.1", (2, 14), False, "tf-keras==2.14.*"),
        ("2.15.1", (2, 15), False, "tf-keras==2.15.*"),
        ("2.16.1", (2, 16), True, "tf-keras==2.16.*"),
        ("2.18.0rc2", (2, 18), True, "tf-keras==2.18.*"),
        ("2.20.0", (2, 20), True, "tf-keras==2.20.*"),
        ("3.0.0", (3, 0), True, "tf-keras==3.0.*"),
    ],
)
def test_versions(version: str, minor: tuple[int, int], needs: bool, pin: str) -> None:
    assert minor_of(version) == minor
    assert needs_tf_keras(version) is needs
    assert tf_keras_pin(version) == pin


def test_a_version_without_numbers_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        minor_of("nightly")
    assert str(info.value) == "'nightly' is not a version number"


@pytest.mark.parametrize(
    ("tf_version", "tf_keras_version", "problem"),
    [
        ("2.14.1", None, None),
        ("2.15.1", None, None),
        ("2.15.1", "2.20.1", None),
        ("2.16.1", "2.16.0", None),
        ("2.18.0rc2", "2.18.0rc0", None),
        ("2.20.0", "2.20.1", None),
        (
            "2.16.1",
            None,
            "tf-keras: not installed, but TensorFlow 2.16.1 (>= 2.16) runs the trainer's Keras 2 "
            "code only through it; valid: tf-keras 2.16.x (pip install --no-deps "
            "'tf-keras==2.16.*')",
        ),
        (
            "2.17.1",
            "2.20.1",
            "tf-keras: 2.20.1 does not match TensorFlow 2.17.1 (tf-keras must be the same "
            "minor); valid: tf-keras 2.17.x (pip install --no-deps 'tf-keras==2.17.*')",
        ),
    ],
)
def test_keras_problem(tf_version: str, tf_keras_version: str | None, problem: str | None) -> None:
    assert keras_problem(tf_version, tf_keras_version) == problem


@pytest.mark.parametrize(
    ("tf_version", "tf_keras_found", "wanted"),
    [
        ("2.14.1", True, False),
        ("2.15.1", True, False),  # TF 2.15 reads the variable; its built-in Keras 2 needs none
        ("2.16.1", False, True),
        ("2.20.0", True, True),
        (None, True, True),  # no metadata: tf-keras decides
        (None, False, False),
        ("unknown", True, True),
    ],
)
def test_legacy_keras_wanted(tf_version: str | None, tf_keras_found: bool, wanted: bool) -> None:
    assert legacy_keras_wanted(tf_version, tf_keras_found) is wanted


def _fake_distribution(root: Path, name: str, version: str, top_level: str) -> None:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{top_level}\n")


def test_the_environment_follows_the_installed_tensorflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This machine's TensorFlow (2.20): set.
    env: dict[str, str] = {}
    select_keras_environment(env)
    assert env == {"TF_USE_LEGACY_KERAS": "1"}
    assert keras_setup.installed_tensorflow_version() == "2.20.0"
    # A TensorFlow 2.15 distribution first on sys.path (as on a tpu-vm-tf-2.15 runtime,
    # whose TF is named tensorflow-cpu / tensorflow-tpu as often as tensorflow): removed.
    _fake_distribution(tmp_path, "tensorflow_cpu", "2.15.1", "tensorflow")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert keras_setup.installed_tensorflow_version() == "2.15.1"
    select_keras_environment(env)
    assert env == {}


def _tf(version: str, keras_name: str) -> Any:
    keras = types.ModuleType(keras_name)
    return types.SimpleNamespace(__version__=version, keras=keras)


def test_tensorflow_before_2_16_uses_its_built_in_keras_without_tf_keras(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tf_keras", None)  # `import tf_keras` fails
    tf = _tf("2.14.1", "keras.api._v2.keras")
    assert check_keras(tf) is tf.keras


def test_tensorflow_2_16_and_later_needs_tf_keras_at_its_minor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tf = _tf("2.17.1", "tf_keras.api._v2.keras")
    monkeypatch.setitem(sys.modules, "tf_keras", None)
    with pytest.raises(KerasSetupError) as missing:
        check_keras(tf)
    assert str(missing.value) == keras_problem("2.17.1", None)
    fake = types.ModuleType("tf_keras")
    fake.__version__ = "2.20.1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tf_keras", fake)
    with pytest.raises(KerasSetupError) as mismatch:
        check_keras(tf)
    assert str(mismatch.value) == keras_problem("2.17.1", "2.20.1")
    fake.__version__ = "2.17.0"  # type: ignore[attr-defined]
    assert check_keras(tf) is tf.keras


def test_keras_3_behind_tf_keras_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("tf_keras")
    fake.__version__ = "2.20.1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tf_keras", fake)
    with pytest.raises(KerasSetupError) as info:
        check_keras(_tf("2.20.0", "keras._tf_keras.keras"))
    assert str(info.value) == (
        "TF_USE_LEGACY_KERAS: TensorFlow 2.20.0 was imported without it, so tf.keras is Keras "
        "3, which fails inside MultiWorkerMirroredStrategy; valid: import "
        "trainstack.trainers.tf_multiworker before tensorflow (it sets TF_USE_LEGACY_KERAS=1)"
    )

"""Which Keras the TensorFlow trainer runs, chosen from the TensorFlow version.

The bundled models and loop are Keras 2 code (Keras 3 fails inside
MultiWorkerMirroredStrategy's variable creation). Where Keras 2 comes from depends on
TensorFlow:

- TensorFlow < 2.16: `tf.keras` is the Keras 2 that TensorFlow depends on (`keras` 2.x at
  its minor). Nothing else is needed, and TF_USE_LEGACY_KERAS must stay unset: TensorFlow
  2.15 already reads it and then imports tf_keras, which its runtimes need not have
  (tensorflow 2.15.1 wheel: tensorflow/python/util/lazy_loader.py, KerasLazyLoader).
- TensorFlow >= 2.16: `tf.keras` is Keras 3 unless TF_USE_LEGACY_KERAS=1 is set before
  TensorFlow is imported and the tf-keras package is installed
  (https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1). tf-keras X.Y requires
  TensorFlow X.Y, so it must be the same minor, installed without dependencies so pip cannot
  replace the platform's TensorFlow build (a TPU runtime's, an image's):
  `pip install --no-deps 'tf-keras==X.Y.*'`, as Google's TensorFlow TPU harness does
  (GoogleCloudPlatform/ml-auto-solutions dags/solutions_team/configs/tensorflow/common.py).

Importing `trainstack.trainers.tf_multiworker` calls `select_keras_environment`, which reads the
TensorFlow version from the installed distribution's metadata (TensorFlow is not imported
yet) and sets or removes TF_USE_LEGACY_KERAS. `load_keras` imports TensorFlow and returns
`tf.keras`, or raises KerasSetupError, one line naming both versions and the pin to install,
when that is not the Keras 2 the trainer needs; the trainer reports it and exits 2.

Standard library only at import.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import re
from collections.abc import MutableMapping
from typing import Any, Final

LEGACY_KERAS_ENV: Final = "TF_USE_LEGACY_KERAS"
TF_KERAS_FROM: Final = (2, 16)
"""From this TensorFlow minor on, Keras 2 is the separate tf-keras package (the catalog's
`trainstack.components.catalog.tpu_runtimes.TF_KERAS_FROM`)."""

_VERSION = re.compile(r"^(\d+)\.(\d+)")


class KerasSetupError(ImportError):
    """The Keras TensorFlow gives is not the Keras 2 the trainer needs (exit 2)."""


def minor_of(version: str) -> tuple[int, int]:
    """`(major, minor)` of a version string such as `2.16.1` or `2.18.0rc2`."""
    m = _VERSION.match(version)
    if not m:
        raise ValueError(f"{version!r} is not a version number")
    return int(m[1]), int(m[2])


def needs_tf_keras(tf_version: str) -> bool:
    """True when TensorFlow `tf_version` runs Keras 2 only through the tf-keras package."""
    return minor_of(tf_version) >= TF_KERAS_FROM


def tf_keras_pin(tf_version: str) -> str:
    """The pip requirement of the tf-keras that goes with TensorFlow `tf_version`."""
    major, minor = minor_of(tf_version)
    return f"tf-keras=={major}.{minor}.*"


def keras_problem(tf_version: str, tf_keras_version: str | None) -> str | None:
    """Why TensorFlow `tf_version` with tf-keras `tf_keras_version` (None: not installed)
    cannot give the trainer its Keras 2, or None when it can."""
    if not needs_tf_keras(tf_version):
        return None
    major, minor = minor_of(tf_version)
    valid = (
        f"valid: tf-keras {major}.{minor}.x (pip install --no-deps '{tf_keras_pin(tf_version)}')"
    )
    if tf_keras_version is None:
        return (
            f"tf-keras: not installed, but TensorFlow {tf_version} (>= 2.16) runs the trainer's "
            f"Keras 2 code only through it; {valid}"
        )
    if minor_of(tf_keras_version) != (major, minor):
        return (
            f"tf-keras: {tf_keras_version} does not match TensorFlow {tf_version} (tf-keras "
            f"must be the same minor); {valid}"
        )
    return None


def _top_level_version(package: str) -> str | None:
    """Version of the first installed distribution (in sys.path order) that provides the
    top-level import `package`, whatever its name (tensorflow, tensorflow-cpu,
    tensorflow-tpu, tf-nightly...), or None."""
    for dist in md.distributions():
        top = (dist.read_text("top_level.txt") or "").split()
        if package in top:
            return str(dist.version)
    return None


def installed_tensorflow_version() -> str | None:
    """TensorFlow's version from its installed metadata, without importing it."""
    return _top_level_version("tensorflow")


def legacy_keras_wanted(tf_version: str | None, tf_keras_found: bool) -> bool:
    """Whether TF_USE_LEGACY_KERAS=1 must be set before TensorFlow is imported: TF >= 2.16;
    when the version is unknown (no metadata), whenever tf-keras is installed."""
    if tf_version is None or not _VERSION.match(tf_version):
        return tf_keras_found
    return needs_tf_keras(tf_version)


def select_keras_environment(environ: MutableMapping[str, str]) -> None:
    """Set TF_USE_LEGACY_KERAS=1 in `environ` for TensorFlow >= 2.16, remove it below."""
    found = importlib.util.find_spec("tf_keras") is not None
    if legacy_keras_wanted(installed_tensorflow_version(), found):
        environ[LEGACY_KERAS_ENV] = "1"
    else:
        environ.pop(LEGACY_KERAS_ENV, None)


def _tf_keras_version() -> str | None:
    try:
        module = importlib.import_module("tf_keras")
    except ImportError:
        return None
    return str(getattr(module, "__version__", "") or "") or None


def check_keras(tf: Any) -> Any:
    """`tf.keras` when it is the Keras 2 the trainer needs; else KerasSetupError."""
    version = str(tf.__version__)
    if not needs_tf_keras(version):
        return tf.keras
    problem = keras_problem(version, _tf_keras_version())
    if problem:
        raise KerasSetupError(problem)
    keras = tf.keras
    if not str(getattr(keras, "__name__", "")).startswith("tf_keras"):
        raise KerasSetupError(
            f"{LEGACY_KERAS_ENV}: TensorFlow {version} was imported without it, so tf.keras is "
            "Keras 3, which fails inside MultiWorkerMirroredStrategy; valid: import "
            "trainstack.trainers.tf_multiworker before tensorflow (it sets TF_USE_LEGACY_KERAS=1)"
        )
    return keras


def load_keras() -> Any:
    """Import TensorFlow and return the Keras 2 module the trainer builds with."""
    import tensorflow as tf

    return check_keras(tf)


__all__ = [
    "LEGACY_KERAS_ENV",
    "TF_KERAS_FROM",
    "KerasSetupError",
    "check_keras",
    "installed_tensorflow_version",
    "keras_problem",
    "legacy_keras_wanted",
    "load_keras",
    "minor_of",
    "needs_tf_keras",
    "select_keras_environment",
    "tf_keras_pin",
]

"""Cloud TPU TensorFlow runtimes: what a runtime name says, which Keras its TensorFlow needs,
and the environment a TensorFlow process on a TPU VM is started with.

    rt = parse_tf_runtime("tpu-vm-tf-2.16.0-pod-pjrt")
    rt.version, rt.pod, rt.device_api, rt.tf_minor     # (2, 16, 0), True, 'pjrt', '2.16'
    rt.tf_keras_requirement                            # 'tf-keras==2.16.*'

Which generation a runtime fits is `trainstack.components.catalog.tpu.tpu_runtime_match`; the startup
script every worker runs (`components/startup/tpu_worker.sh`) applies the Keras rule and the
environment below. Facts carry their source; `verified` is True only where a Google source
(documentation or Google's own test harness) states the fact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from trainstack.components.catalog.sources import FACT_SHEET

TF_RUNTIME_NAMES_SOURCE: Final = (
    "https://docs.cloud.google.com/tpu/docs/supported-tpu-versions (stored copy 'Last "
    "updated 2026-04-09'): runtime names tpu-vm-tf-x.y.z[-{pod}][-{device_api}]; 'Beginning "
    "with TensorFlow 2.15.0, you must also specify a device API' (-pjrt or -se) on v2/v3/v4, "
    "'TensorFlow versions older than 2.15.0 only support stream executor'; 'TPU v5e and future "
    "TPU generations only support PJRT'. facts-13 section 3 (V)"
)
TF_RUNTIME_NAMES_VERIFIED: Final = True
HARDWARE_SUFFIX_SOURCE: Final = (
    "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6, tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6 and "
    "tpu-vm-tf-2.18.0-pjrt-v5p-and-below, seen in users' test notes and env files, not in "
    "Google's documentation (facts-13 section 3, V-3p)"
)
HARDWARE_SUFFIX_VERIFIED: Final = False

DEVICE_API_REQUIRED_FROM: Final = (2, 15, 0)
"""From this TensorFlow on, a v2/v3/v4 runtime name carries `-pjrt` or `-se`; before it,
none (stream executor only)."""
HARDWARE_SUFFIX_FROM: Final = (2, 18, 0)
"""The hardware-suffixed names are only seen from TensorFlow 2.18.0 on."""
HARDWARE_SUFFIX_GENERATIONS: Final[dict[str, frozenset[str]]] = {
    "v5e-and-v6": frozenset({"v5e", "v6e"}),
    "v5p-and-below": frozenset({"v5p", "v4"}),
}
"""Which generations a `-pjrt-<suffix>` runtime is built for (its name says so)."""

DeviceApi = Literal["pjrt", "se"]

_TF_RUNTIME = re.compile(
    r"^tpu-vm-tf-(\d+)\.(\d+)\.(\d+)(-pod)?(?:-(pjrt|se))?(?:-(v5e-and-v6|v5p-and-below|v4))?$"
)

# -- Keras ------------------------------------------------------------------------------------

TF_KERAS_FROM: Final = (2, 16)
"""From this TensorFlow minor on, `tf.keras` is Keras 3 unless tf-keras is installed and
TF_USE_LEGACY_KERAS=1; before it, `tf.keras` is the Keras 2 that TensorFlow ships with."""
TF_KERAS_SOURCE: Final = (
    "https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1 ('Keras 3.0 will be the "
    "default Keras version ... To continue using Keras 2.0 ... install tf-keras' and set "
    "TF_USE_LEGACY_KERAS=1); GoogleCloudPlatform/ml-auto-solutions@7eda193b "
    "dags/solutions_team/configs/tensorflow/common.py:106-108 ('pip install --upgrade "
    "--force-reinstall --no-deps tf-keras=={keras_version}', with tf-keras at the TF release's "
    "minor: 2.18.0rc0 for TF 2.18.0rc2, 2.15.1 for TF 2.15.1). facts-13 section 3 (V)"
)
TF_KERAS_VERIFIED: Final = True
TF_KERAS_PIP_FLAGS: Final = ("--upgrade", "--force-reinstall", "--no-deps")
"""How Google's harness installs tf-keras: `--no-deps`, so pip cannot replace the runtime's
TensorFlow build with the newest one that a tf-keras release requires."""
TF_KERAS_PREINSTALLED_VERIFIED: Final = False
"""Whether tpu-vm-tf-2.16+ runtimes ship tf-keras is not documented (facts-13 section 3, U);
the startup script installs it on every such runtime."""


def tf_keras_requirement(tf_major: int, tf_minor: int) -> str | None:
    """The pip requirement the bundled TensorFlow trainer needs next to TensorFlow
    `tf_major.tf_minor`: tf-keras at that minor from TF 2.16 on, else None (built-in Keras 2)."""
    if (tf_major, tf_minor) < TF_KERAS_FROM:
        return None
    return f"tf-keras=={tf_major}.{tf_minor}.*"


# -- Environment --------------------------------------------------------------------------------

ML_AUTO_SOLUTIONS_ENV: Final = (
    "GoogleCloudPlatform/ml-auto-solutions@7eda193b "
    "dags/solutions_team/configs/tensorflow/common.py:120-148 (export_env_variables)"
)


@dataclass(frozen=True)
class TpuEnvFact:
    """One variable the TensorFlow process on a TPU VM is started with."""

    name: str
    value: str
    applies: Literal["single-host", "single-host-pjrt", "multi-host"]
    source: str
    verified: bool
    note: str = ""


TPU_TF_ENVIRONMENT: Final[tuple[TpuEnvFact, ...]] = (
    TpuEnvFact(
        "TPU_NAME",
        "local",
        "single-host",
        f"{ML_AUTO_SOLUTIONS_ENV}; solutionsteam_tf_release_supported_config.py:106 "
        "(tpu_name = ... if is_pod else 'local')",
        True,
        "on a multi-host slice Google's harness names the node; trainstack lists the workers "
        "in TPU_WORKER_HOSTNAMES instead, which needs no Cloud TPU API lookup",
    ),
    TpuEnvFact(
        "NEXT_PLUGGABLE_DEVICE_USE_C_API",
        "true",
        "single-host-pjrt",
        f"{ML_AUTO_SOLUTIONS_ENV}:142-143 (not is_pod and is_pjrt)",
        True,
    ),
    TpuEnvFact(
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
        "libtpu.so of the libtpu package the runtime's Python imports, else /lib/libtpu.so",
        "single-host-pjrt",
        f"{ML_AUTO_SOLUTIONS_ENV}:144-146 (/home/$USER/.local/lib/python3.10/site-packages/"
        "libtpu/libtpu.so, where Google's harness pip-installs TensorFlow's libtpu); "
        "/lib/libtpu.so before 2024-07 (git show a96327ca^ common.py:219-220)",
        False,
        "the variable is Google's; where tpu-vm-tf-* runtime images keep libtpu.so is not "
        "documented, so the startup script asks the runtime's Python for the libtpu package "
        "and falls back to /lib/libtpu.so, and sets nothing (with a warning) when neither exists",
    ),
    TpuEnvFact(
        "TPU_LOAD_LIBRARY",
        "0",
        "multi-host",
        f"{ML_AUTO_SOLUTIONS_ENV}:139-140 (if is_pod)",
        True,
        "the -pod runtime's server on every worker owns the chips; the TensorFlow client on "
        "worker 0 must not load libtpu",
    ),
)
"""What the startup script exports for the trainer, by slice shape and device API. Google's
harness also exports WRAPT_DISABLE_EXTENSIONS, TF_XLA_FLAGS and PYTHONPATH for its model
garden runs; the bundled trainer needs none of them, and it sets TF_USE_LEGACY_KERAS itself
(only on TensorFlow >= 2.16, see `trainstack.trainers.tf_multiworker.keras_setup`)."""


@dataclass(frozen=True)
class TfRuntime:
    """A TensorFlow TPU VM runtime, as its name describes it."""

    name: str
    version: tuple[int, int, int]
    """The TensorFlow release the name carries (TF 2.16 runtimes named 2.16.0 ship 2.16.1:
    only the minor is exact)."""
    pod: bool
    """A `-pod` runtime: for multi-host slices."""
    device_api: DeviceApi | None
    """`pjrt` or `se` (stream executor); None on names before TF 2.15 (stream executor)."""
    hardware: str | None
    """`v5e-and-v6`, `v5p-and-below` or `v4` (the TF <= 2.10.0 v4 names); else None."""

    @property
    def tf_minor(self) -> str:
        """`major.minor` of the TensorFlow the runtime ships, e.g. `2.16`."""
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def pjrt(self) -> bool:
        return self.device_api == "pjrt"

    @property
    def tf_keras_requirement(self) -> str | None:
        """What the bundled trainer needs installed next to this runtime's TensorFlow."""
        return tf_keras_requirement(self.version[0], self.version[1])

    @property
    def verified(self) -> bool:
        """False for the hardware-suffixed names, which no Google page lists."""
        return self.hardware not in HARDWARE_SUFFIX_GENERATIONS


def parse_tf_runtime(runtime_version: str) -> TfRuntime | None:
    """The TensorFlow runtime `runtime_version` names, or None when it names none."""
    m = _TF_RUNTIME.match(runtime_version)
    if not m:
        return None
    api = m[5]
    return TfRuntime(
        name=runtime_version,
        version=(int(m[1]), int(m[2]), int(m[3])),
        pod=bool(m[4]),
        device_api="pjrt" if api == "pjrt" else "se" if api == "se" else None,
        hardware=m[6],
    )


# -- Defaults -----------------------------------------------------------------------------------

KNOWN_TF_RUNTIMES_SOURCE: Final = (
    "https://docs.cloud.google.com/tpu/docs/supported-tpu-versions (stored copy 'Last updated "
    "2026-04-09': 'tpu-vm-tf-2.16.0-pod-pjrt' for multi-host and 'tpu-vm-tf-2.16.0-pjrt' for "
    "single-host v5e/v5p/v6e slices; 'tpu-vm-tf-2.14.1' / 'tpu-vm-tf-2.14.1-pod' for v4). "
    f"facts-13 section 3 (V); {FACT_SHEET} section 1.4"
)
KNOWN_TF_RUNTIMES: Final[dict[str, tuple[str, ...]]] = {
    "v4": ("tpu-vm-tf-2.14.1", "tpu-vm-tf-2.16.0-pjrt"),
    "v5e": ("tpu-vm-tf-2.16.0-pjrt",),
    "v5p": ("tpu-vm-tf-2.16.0-pjrt",),
    "v6e": ("tpu-vm-tf-2.16.0-pjrt",),
}
"""Single-host TensorFlow runtimes a Google page names, per generation, oldest first (the
`-pod` twin of each is the multi-host one). The hardware-suffixed 2.18.0 names are left out:
no Google page lists them (`HARDWARE_SUFFIX_VERIFIED`)."""


def pod_runtime(runtime_version: str) -> str:
    """The multi-host (`-pod`) twin of a single-host TensorFlow runtime name."""
    return re.sub(r"^(tpu-vm-tf-\d+\.\d+\.\d+)", r"\1-pod", runtime_version, count=1)


def newest_tf_runtime(generation: str, multi_host: bool) -> str:
    """The newest TensorFlow runtime of `KNOWN_TF_RUNTIMES` for `generation`, the `-pod`
    one for a multi-host slice."""
    newest = max(KNOWN_TF_RUNTIMES[generation], key=lambda name: _parsed(name).version)
    return pod_runtime(newest) if multi_host else newest


def _parsed(name: str) -> TfRuntime:
    runtime = parse_tf_runtime(name)
    assert runtime is not None, name  # the table holds runtime names only
    return runtime

"""A Cloud TPU VM of a planned slice, replayed on this machine (tests/fidelity/test_tpu.py
says how): the plan's startup script, the runtime image's Python, fake `python3` and
`gcloud`, and the VM's metadata server and Cloud Logging fakes."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.metadata_fake import PROJECT, MetadataFake, vm_values
from tests.fidelity.vertex import venv_over
from trainstack.infra.plan import build_plan, load_stack

REPO = Path(__file__).resolve().parents[2]
STACK = "dev-tpu-v5e"
V2VM = "gcp:tpu/v2Vm:V2Vm"
BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
BUCKET = "gcp:storage/bucket:Bucket"
METRIC = "gcp:logging/metric:Metric"
IPS = ["10.164.0.2", "10.164.0.3", "10.164.0.4", "10.164.0.5"]
CHIPS = 2
TRAINER = {
    "steps": 3,
    "global_batch_size": 16,
    "hidden_dim": 8,
    "checkpoint_every": 2,
    "log_every": 1,
}
"""The stack's trainer cut to a few small steps of a narrower CNN (model, dataset and
strategy kept)."""
RECORDED_ENV = (
    "TPU_NAME",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "TPU_LOAD_LIBRARY",
    "NEXT_PLUGGABLE_DEVICE_USE_C_API",
    "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
    "TF_USE_LEGACY_KERAS",
    "PIP_BREAK_SYSTEM_PACKAGES",
    "TRAINSTACK_CLOUD_LOGGING",
    "TRAINSTACK_TPU_NODE_ID",
)

# `python3` of the TPU VM: the image environment's python for everything but pip.
PYTHON3 = """#!{python}
import json, os, subprocess, sys
argv = sys.argv[1:]
env = {{k: os.environ[k] for k in {recorded!r} if k in os.environ}}
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"prog": "python3", "argv": argv, "env": env}}) + "\\n")
image = {image!r}
if argv[:2] != ["-m", "pip"]:
    os.execv(image, [image, *argv])
target = argv[-1]
if target.endswith(".tar.gz"):
    sys.exit(subprocess.run(
        [image, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
         "--quiet", "--disable-pip-version-check", target]
    ).returncode)
if {online_pip!r}:
    os.execv(image, [image, *argv])
"""

# `gcloud storage cp gs://... DEST` (and gsutil): the plan's sdist, for its URI only.
GCLOUD = """#!{python}
import json, os, shutil, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"prog": os.path.basename(sys.argv[0]), "argv": argv, "env": {{}}}}) + "\\n")
if argv[-2] != {uri!r}:
    sys.exit(1)
shutil.copyfile({sdist!r}, argv[-1])
"""


@dataclass(frozen=True)
class Planned:
    """What the TPU VM gets from a plan."""

    script: str
    runtime: str
    package_uri: str
    sdist: Path
    checkpoint_bucket: str
    trainer_args: list[str]
    metric_filters: dict[str, str]
    """`<event>/<field or lines>` -> filter of each of the dashboard's log-based metrics."""


def cut_plan(
    tpu: dict[str, Any] | None = None,
    stack: str = STACK,
    trainer: dict[str, Any] | None = None,
) -> Planned:
    """The plan of bundled `stack` with `tpu` and `trainer` keys replaced (the trainer cut to
    TRAINER by default)."""
    name, config = load_stack(stack, None)
    config["trainstack:trainer"] = {**config["trainstack:trainer"], **(trainer or TRAINER)}
    config["trainstack:tpu"] = {**config["trainstack:tpu"], **(tpu or {})}
    return planned_stack(name, config)


def planned_stack(name: str, config: dict[str, Any]) -> Planned:
    """What the TPU VM gets from the plan of stack `name` with `config`."""
    return planned_from(build_plan(name, config))


def planned_from(plan: dict[str, Any]) -> Planned:
    """What the TPU VM gets from a JSON plan (`trainstack.infra.plan.build_plan`)."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for resource in plan["resources"]:
        by_type.setdefault(resource["type"], []).append(resource["inputs"])
    [vm] = by_type[V2VM]
    # The trainer package (a spot or queued slice's supervisor adds its zip and its marker).
    [sdist] = [o for o in by_type[BUCKET_OBJECT] if o["name"].startswith("trainers/")]
    [checkpoints] = [b for b in by_type[BUCKET] if b["name"].endswith("-checkpoints")]
    script = vm["metadata"]["startup-script"]
    [args_line] = [
        line for line in script.splitlines() if line.startswith("readonly TS_TRAINER_ARGS=(")
    ]
    return Planned(
        script=script,
        runtime=vm["runtimeVersion"],
        package_uri=f"gs://{sdist['bucket']}/{sdist['name']}",
        sdist=REPO / sdist["source"]["fileAsset"],
        checkpoint_bucket=checkpoints["name"],
        trainer_args=shlex.split(
            args_line.removeprefix("readonly TS_TRAINER_ARGS=(").removesuffix(")")
        ),
        metric_filters={m["name"].split("/", 2)[2]: m["filter"] for m in by_type.get(METRIC, [])},
    )


def image_environment(root: Path) -> Path:
    """A fresh virtual environment with the shared venv's site-packages as its image layer."""
    return venv_over(root, sysconfig.get_paths()["purelib"])


class TpuVm:
    """One worker VM of the planned slice: its runtime Python, fakes and state."""

    def __init__(
        self,
        root: Path,
        planned: Planned,
        image: Path | None = None,
        online_pip: bool = False,
        project: str = PROJECT,
    ) -> None:
        """`image`: the runtime's python (default: a fresh environment over the shared
        venv); `online_pip`: run pip for real for everything but the sdist (needs PyPI);
        `project`: the project its metadata server names (where its logs go)."""
        self.root = root
        self.project = project
        self.planned = planned
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.log = root / "calls.jsonl"
        self.state = root / "state"
        self.image = image or image_environment(root / "image")
        fakes = {
            "python3": PYTHON3.format(
                python=sys.executable,
                recorded=RECORDED_ENV,
                image=str(self.image),
                online_pip=online_pip,
            ),
            "gcloud": GCLOUD.format(
                python=sys.executable, uri=planned.package_uri, sdist=str(planned.sdist)
            ),
        }
        for prog, text in fakes.items():
            (self.bin / prog).write_text(text)
            (self.bin / prog).chmod(0o755)
        self.script = root / "startup-script"
        self.script.write_text(planned.script)
        self.entries: list[dict[str, Any]] = []
        """What the node launcher wrote to Cloud Logging during the last boot."""
        self.matching: dict[str, list[dict[str, Any]]] = {}
        """The entries each of the dashboard's log-based metrics selects (`metric_filters`)."""
        self.metadata_paths: list[str] = []
        """The metadata paths read during the last boot, in order."""

    @contextlib.contextmanager
    def machine(
        self,
        worker: int,
        hosts: int,
        gcs: str | None,
        ips: Sequence[str] = IPS,
        attributes: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> Iterator[dict[str, str]]:
        """The clean environment (none of this test process's PYTHONPATH or
        TF_USE_LEGACY_KERAS) the startup script of worker `worker` of `hosts` (`ips`) boots
        with, while this VM's metadata server and Cloud Logging fakes run; `attributes`:
        more `instance/attributes/` metadata, `extra_env`: what stands in for hardware. On
        exit, `entries`, `metadata_paths` and `matching` hold what the boot did."""
        values = {
            "instance/attributes/agent-worker-number": str(worker),
            "instance/network-interfaces/0/ip": ips[worker],
        }
        if hosts > 1:
            endpoints = ",".join(f"unknown:unknown:{ip}" for ip in ips[:hosts])
            values["instance/attributes/worker-network-endpoints"] = endpoints
        values.update({f"instance/attributes/{k}": v for k, v in (attributes or {}).items()})
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "FAKE_LOG": str(self.log),
            "TRAINSTACK_STATE_DIR": str(self.state),
            "TRAINSTACK_SIMULATED_ACCELERATORS": str(CHIPS),
            "TRAINSTACK_PROGRESS": "0",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "OMP_NUM_THREADS": "1",
            **(extra_env or {}),
        }
        if gcs is not None:
            env["STORAGE_EMULATOR_HOST"] = gcs
        values.update(vm_values(f"70{worker}", f"t1v-n-0a1b2c3d-w-{worker}", project=self.project))
        with MetadataFake(values) as metadata, LoggingFakeServer() as logging_api:
            env["TRAINSTACK_METADATA_URL"] = metadata.base_url + "/computeMetadata/v1"
            env["GCE_METADATA_HOST"] = metadata.host
            env["GCE_METADATA_IP"] = metadata.host  # where JAX's cloud_tpu_cluster reads it
            env["TRAINSTACK_LOGGING_ENDPOINT"] = logging_api.endpoint
            try:
                yield env
            finally:
                self.entries = list(logging_api.entries)
                self.metadata_paths = [path for path, _ in metadata.requests]
                self.matching = {
                    role: logging_api.matching(flt)
                    for role, flt in self.planned.metric_filters.items()
                }

    def boot(
        self,
        worker: int,
        hosts: int,
        gcs: str | None,
        ips: Sequence[str] = IPS,
        attributes: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the startup script to its end with bash as worker `worker` (see `machine`)."""
        with self.machine(worker, hosts, gcs, ips, attributes, extra_env) as env:
            return subprocess.run(
                ["bash", str(self.script)],
                env=env,
                cwd=self.root,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )

    def calls(self) -> list[dict[str, Any]]:
        """The fakes' calls, but for the node helper's writes of the run's records (`alive`,
        `end`: heartbeats and the run's end, whose objects the tests read instead)."""
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [c for c in calls if not _record_write(c["argv"])]

    def run_python(self, code: str) -> str:
        return subprocess.run(
            [str(self.image), "-c", code],
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.root)},
            cwd=self.root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()


def _record_write(argv: Sequence[str]) -> bool:
    helper = bool(argv) and argv[0].endswith("trainstack_node_helper.py")
    return helper and argv[1:2] in (["alive"], ["end"])


def script_records(stdout: str, tag: str) -> list[dict[str, Any]]:
    """The trainer's JSON lines among the script's `[trainstack ...] ` prefixed output."""
    out = []
    for line in stdout.splitlines():
        body = line.removeprefix(tag + " ")
        if body.startswith("{"):
            out.append(json.loads(body))
    return out

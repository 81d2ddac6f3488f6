"""Vertex AI's side of a CustomJob, replayed on this machine.

For the CustomJob body of a plan, this does what Vertex does on each worker-pool replica:

- the environment Vertex documents (gcp-facts 3.3; facts-13 section 2): `CLUSTER_SPEC` on
  every replica (`{"cluster": {"workerpool0": ["host:port"], ...}, "environment": "cloud",
  "task": {"type": "workerpool<i>", "index": <j>}, "job": <the CustomJobSpec>}`), `TF_CONFIG`
  on distributed jobs (workerpool0 -> chief, 1 -> worker, 2 -> ps), `AIP_MODEL_DIR`,
  `AIP_CHECKPOINT_DIR`, `AIP_TENSORBOARD_LOG_DIR` (`<baseOutputDirectory>/model/`,
  `/checkpoints/`, `/logs/`), the pool's `env`, and the per-node `MASTER_ADDR`,
  `MASTER_PORT`, `WORLD_SIZE` (= replicas) and `RANK` (= replica) that Vertex is reported to
  set (facts-13 section 2, V-3p), which torchrun must override per process;
- a custom container (`containerSpec`, `run_container_replicas`): the pool's `command` +
  `args` in a fresh container of the image (`tests.fidelity.nodes.Image`), every replica at
  once: the pod setup script downloads the package named by `TRAINSTACK_PACKAGE_URI` from
  the plan's staging bucket with the metadata server's token and pip-installs it into the
  image's `python3`, then execs the node launcher;

What differs from Vertex, and why:

- Hosts are 127.0.0.1 with a free port per replica (Vertex: one VM each, port 2222).
- The "image" is a fresh virtual environment whose image layer links, from the shared
  venv, exactly the packages the catalog lists for the image (`VertexTrainingImage.packages`),
  the package's requirements (what pip would download) and setuptools (pip's build), each
  with its dependencies: nothing else is importable, so a module the trainers need but
  nobody declares fails here as it would on Vertex. The layer is a plain path (no `.pth`
  processing), so the shared venv's editable trainstack install stays invisible: `trainers`
  comes from the installed sdist only. Python is 3.11 here (the shared venv's): the TF
  image's, but not the torch image's, which ships 3.12 (`trainstack.components.catalog.images.
  TORCH_IMAGE_PYTHON_SOURCE`), so the torch path is not run on 3.12 here; torch is 2.13 (CPU)
  as in the torch image (its CUDA build there); TensorFlow is 2.20 with tf-keras 2.20.1
  here, the TF image's 2.17.0 is not installable on this offline machine. The image is the
  catalog's whatever URI the plan pulls it by (the stack's Docker Hub mirror, by digest).
- pip runs offline (`--no-index`: every requirement must already be present, as on an image
  that has it, or as pip would download it) and builds the sdist without isolation.
- `gs://` is a local GCS emulator holding the plan's buckets; the metadata server is a fake
  that hands out a token (`GCE_METADATA_HOST`, `STORAGE_EMULATOR_HOST`).
- GPUs are simulated: `TRAINSTACK_SIMULATED_ACCELERATORS=<machineSpec.acceleratorCount>`.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tests import REPO_ROOT
from trainstack.trainers.local import free_ports

if TYPE_CHECKING:  # nodes imports this module
    from tests.fidelity.nodes import Image

CUSTOM_JOB = "pulumi-python:dynamic/vertex:CustomJob"
TUNING_JOB = "pulumi-python:dynamic/vertex:HyperparameterTuningJob"
BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
TF_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps"}


@dataclass(frozen=True)
class PlannedJob:
    """The parts of a plan Vertex acts on."""

    job_spec: dict[str, Any]
    sdist: Path
    """The file the plan uploads, on this machine."""
    base_output: str
    package_uri: str
    """Where the plan uploads it (`gs://staging/object`)."""


@dataclass(frozen=True)
class Replica:
    pool: int
    index: int
    spec: dict[str, Any]
    """The pool's WorkerPoolSpec."""


@dataclass
class ReplicaRun:
    replica: Replica
    code: int
    output: str

    def records(self) -> list[dict[str, Any]]:
        found = []
        for line in self.output.splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return found


def stack_config(vertex: Mapping[str, Any], trainer: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "gcp:project": "fidelity-project",
        "gcp:region": "us-central1",
        "trainstack:environment": "dev",
        "trainstack:vertex": dict(vertex),
        "trainstack:trainer": dict(trainer),
    }


def planned_job(plan: Mapping[str, Any]) -> PlannedJob:
    """The CustomJob spec and the sdist of a plan; the job must install that very sdist."""
    by_type = {r["type"]: r for r in plan["resources"]}
    body = (by_type.get(CUSTOM_JOB) or by_type[TUNING_JOB])["inputs"]["body"]
    obj = by_type[BUCKET_OBJECT]["inputs"]
    uri = f"gs://{obj['bucket']}/{obj['name']}"
    spec = body.get("jobSpec") or body["trialJobSpec"]
    for pool in spec["workerPoolSpecs"]:
        if "pythonPackageSpec" in pool:
            assert pool["pythonPackageSpec"]["packageUris"] == [uri]
        if "containerSpec" in pool and pool["containerSpec"].get("command"):
            env = {e["name"]: e["value"] for e in pool["containerSpec"].get("env", [])}
            assert env["TRAINSTACK_PACKAGE_URI"] == uri
    return PlannedJob(
        job_spec=spec,
        sdist=REPO_ROOT / obj["source"]["fileAsset"],
        base_output=spec["baseOutputDirectory"]["outputUriPrefix"],
        package_uri=uri,
    )


def replicas(job_spec: Mapping[str, Any]) -> list[Replica]:
    """Every replica Vertex starts, pool by pool (an empty `{}` pool starts none)."""
    return [
        Replica(pool, index, spec)
        for pool, spec in enumerate(job_spec["workerPoolSpecs"])
        for index in range(int(spec.get("replicaCount") or 0))
    ]


def _snake(value: Any) -> Any:
    """The CustomJobSpec as CLUSTER_SPEC's `job` carries it (proto field names)."""
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake(v) for v in value]
    return value


def vertex_env(job: PlannedJob, replica: Replica, hosts: Mapping[int, list[str]]) -> dict[str, str]:
    """The variables Vertex sets on `replica`; `hosts` maps each pool to its `host:port`s."""
    pool_name = f"workerpool{replica.pool}"
    cluster = {f"workerpool{p}": list(h) for p, h in hosts.items() if h}
    task = {"type": pool_name, "index": replica.index}
    env = {
        "CLUSTER_SPEC": json.dumps(
            {
                "cluster": cluster,
                "environment": "cloud",
                "task": task,
                "job": _snake(job.job_spec),
            }
        ),
        "AIP_MODEL_DIR": f"{job.base_output}/model/",
        "AIP_CHECKPOINT_DIR": f"{job.base_output}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{job.base_output}/logs/",
    }
    nodes = len(hosts.get(0, [])) + len(hosts.get(1, []))
    if sum(len(h) for h in hosts.values()) > 1:
        tf_cluster = {TF_ROLES[f"workerpool{p}"]: list(h) for p, h in hosts.items() if h}
        env["TF_CONFIG"] = json.dumps(
            {
                "cluster": tf_cluster,
                "task": {"type": TF_ROLES[pool_name], "index": replica.index},
                "environment": "cloud",
                "job": _snake(job.job_spec),
            }
        )
    if replica.pool in (0, 1):
        master_host, master_port = hosts[0][0].rsplit(":", 1)
        env.update(
            {
                "MASTER_ADDR": master_host,
                "MASTER_PORT": master_port,
                "WORLD_SIZE": str(nodes),
                "RANK": str(replica.index + (1 if replica.pool == 1 else 0)),
            }
        )
    code = replica.spec.get("pythonPackageSpec") or replica.spec.get("containerSpec") or {}
    env.update({item["name"]: item["value"] for item in code.get("env", [])})
    return env


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names: list[str]) -> set[str]:
    """The installed distributions `names` (requirement strings) need, with their
    dependencies and requested extras; names not installed here are skipped."""
    from packaging.requirements import Requirement

    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(n).name, extra) for n in names for extra in ("", *Requirement(n).extras)]
    while todo:
        name, extra = todo.pop()
        name = _canon(name)
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        found.add(name)
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, e) for e in ("", *req.extras)]
    return found


def _owners() -> dict[tuple[str, ...], set[str]]:
    """Every path prefix under this environment's site-packages -> the distributions owning
    files beneath it."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    owners: dict[tuple[str, ...], set[str]] = {}
    for dist in md.distributions():
        name = _canon(dist.metadata["Name"])
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file))).resolve()
            if not path.is_relative_to(site):
                continue
            parts = path.relative_to(site).parts
            for depth in range(1, len(parts) + 1):
                owners.setdefault(parts[:depth], set()).add(name)
    return owners


def image_layer(root: Path, names: list[str]) -> set[str]:
    """Link into `root` the files of `closure(names)` and nothing else: a directory shared
    with other distributions (a namespace package such as `google/`) is made real and only
    the allowed parts are linked inside it. Returns the distributions linked."""
    allowed = closure(names)
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    owners = _owners()
    for prefix in sorted(owners, key=len):
        if not owners[prefix] & allowed or not owners[prefix] <= allowed:
            continue
        parent = prefix[:-1]
        if parent and owners[parent] <= allowed:
            continue  # linked whole above
        target = root.joinpath(*prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(site.joinpath(*prefix))
    return allowed


def venv_over(root: Path, layer: Path | str) -> Path:
    """A fresh virtual environment at `root` (no pip) that sees `layer`, a plain directory
    of packages, through a path file; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "_image_layer.pth").write_text(f"{layer}\n")
    return python


def run_container_replicas(
    job: PlannedJob,
    image: Image,
    root: Path,
    *,
    extra_env: Mapping[str, str],
    timeout_s: float,
) -> list[ReplicaRun]:
    """Start every chief/worker replica's container command + args at once, each in a fresh
    container of `image` under `root`, with the env Vertex sets, and wait for all of them."""
    started = [r for r in replicas(job.job_spec) if "command" in r.spec.get("containerSpec", {})]
    ports = iter(free_ports(len(replicas(job.job_spec))))
    hosts: dict[int, list[str]] = {}
    for r in replicas(job.job_spec):
        hosts.setdefault(r.pool, []).append(f"127.0.0.1:{next(ports)}")
    procs = []
    for r in started:
        tmp = root / f"replica-{r.pool}-{r.index}"
        tmp.mkdir(parents=True)
        bin_dir = image.container(tmp)
        spec = r.spec["containerSpec"]
        env = {
            **vertex_env(job, r, hosts),
            "PATH": f"{bin_dir}:{os.environ.get('PATH', os.defpath)}",
            "HOME": str(tmp),
            "TMPDIR": str(tmp),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            **extra_env,
        }
        procs.append(
            subprocess.Popen(
                [*spec["command"], *spec["args"]],
                cwd=tmp,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    return _wait(started, procs, timeout_s)


def _wait(
    started: list[Replica], procs: list[subprocess.Popen[str]], timeout_s: float
) -> list[ReplicaRun]:
    outputs: list[list[str]] = [[] for _ in procs]
    readers = [
        threading.Thread(target=_collect, args=(p.stdout, o), daemon=True)
        for p, o in zip(procs, outputs, strict=True)
    ]
    for reader in readers:
        reader.start()
    runs = []
    try:
        for r, proc, out, reader in zip(started, procs, outputs, readers, strict=True):
            code = proc.wait(timeout=timeout_s)
            reader.join(timeout=10)
            runs.append(ReplicaRun(r, code, "".join(out)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return runs


def _collect(stream: IO[str] | None, lines: list[str]) -> None:
    assert stream is not None
    lines.extend(stream)

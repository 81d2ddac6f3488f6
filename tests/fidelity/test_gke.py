"""GKE fidelity: the planned Indexed Job's pods, run here the way the Job controller and the
kubelet run them.

The plan is `infra.plan.build_plan` of the bundled `dev-a100-gke` stack (2 nodes of
a2-highgpu-8g), its trainer cut to a few small steps of the MLP on digits. For each
completion index the test runs the Job's container `command` + `args` with the container's
`env` from the manifest, plus what Kubernetes adds: `JOB_COMPLETION_INDEX`, the pod's host
name `<job>-<index>` and its headless-service name `<job>-<index>.<job>` in DNS.

What differs from GKE, and why (nothing else changes behaviour):

- Each pod runs in its own user, mount and UTS namespace (`unshare`): the host name is set
  to `<job>-<index>` and /etc/hosts (bind-mounted) maps `<job>-<i>.<job>` and `<job>-<i>` to
  127.0.0.<i+1>, one loopback address per pod, so every pod resolves the others as cluster
  DNS would and only pod 0 matches the rendezvous host. The pods share this machine's
  network namespace, so the manifest's rendezvous port must be free here.
- The image is a fresh virtual environment whose image layer links torch and what the
  sdist requires from the shared venv (`tests.fidelity.vertex.image_environment`), so
  `trainers` comes from the sdist the pod installs. `python3` on PATH is that environment's
  python, except that its `-m pip install` runs offline (`--no-index`, no build isolation:
  everything the package requires is already in the layer, as the real pod would download).
- `gs://` is a GCS emulator holding the plan's staging bucket (with the plan's sdist at its
  object name) and checkpoint bucket; the GKE metadata server is a fake that hands out a
  token (`GCE_METADATA_HOST`, `STORAGE_EMULATOR_HOST`).
- GPUs are simulated: `TRAINSTACK_SIMULATED_ACCELERATORS=2`, so each pod runs 2 CPU
  processes on gloo and the world is 2 pods x 2 = 4.
- Recovery: one pod's processes are SIGKILLed mid-run (its node disappeared) and the same
  index is started again in a fresh container directory, as the Job controller does for a
  pod with the DisruptionTarget condition (podFailurePolicy `Ignore`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from components.kubernetes_training_job import POD_PYTHON
from infra.mocks import REPO_ROOT
from infra.plan import build_plan, load_stack
from tests.components.test_tpu_startup import MetadataServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.vertex import image_environment
from trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV
from trainers.node import node_command, parse_args

STACK = "dev-a100-gke"
JOB_TYPE = "kubernetes:batch/v1:Job"
BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
BUCKET = "gcp:storage/bucket:Bucket"
TRAINER = {
    "model": "mlp",
    "dataset": "digits",
    "precision": "fp32",
    "global_batch_size": 32,
    "log_every": 1,
}
IMAGE_PACKAGES = ["torch", "setuptools"]
TOKEN = {"access_token": "fidelity-token", "expires_in": 3600, "token_type": "Bearer"}

# `python3` of the image: its python, but `-m pip install` offline from the image layer.
PYTHON3 = """#!{shared}
import os, subprocess, sys
argv = sys.argv[1:]
image = {image!r}
if argv[:3] == ["-m", "pip", "install"]:
    sys.exit(subprocess.run(
        [{shared!r}, "-m", "pip", "--python", image, "install", "--no-index",
         "--no-build-isolation", "--quiet", *argv[3:]]
    ).returncode)
os.execv(image, [image, *argv])
"""

# Kubernetes' side of a pod: its host name and cluster DNS, then the container's command.
POD_NAMESPACES = """set -e
mount --bind "$TEST_HOSTS" /etc/hosts
hostname "$TEST_HOSTNAME"
unset TEST_HOSTS TEST_HOSTNAME
exec "$@"
"""


@dataclass(frozen=True)
class PlannedJob:
    job: dict[str, Any]
    sdist: Path
    package_uri: str
    staging_bucket: str
    checkpoint_bucket: str

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def container(self) -> dict[str, Any]:
        return dict(self.job["spec"]["template"]["spec"]["containers"][0])


def _plan(trainer: dict[str, Any]) -> PlannedJob:
    name, config = load_stack(STACK, None)
    config["trainstack:trainer"] = {**config["trainstack:trainer"], **TRAINER, **trainer}
    plan = build_plan(name, config)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for resource in plan["resources"]:
        by_type.setdefault(resource["type"], []).append(resource["inputs"])
    [job] = by_type[JOB_TYPE]
    [sdist] = by_type[BUCKET_OBJECT]
    [checkpoints] = [b for b in by_type[BUCKET] if b["name"].endswith("-checkpoints")]
    return PlannedJob(
        job=job,
        sdist=REPO_ROOT / sdist["source"]["fileAsset"],
        package_uri=f"gs://{sdist['bucket']}/{sdist['name']}",
        staging_bucket=sdist["bucket"],
        checkpoint_bucket=checkpoints["name"],
    )


def _requires(sdist: Path) -> list[str]:
    import tarfile

    with tarfile.open(sdist, mode="r:gz") as tar:
        name = next(n for n in tar.getnames() if n.endswith("/PKG-INFO"))
        extracted = tar.extractfile(name)
        assert extracted is not None
        lines = extracted.read().decode().splitlines()
    return [line.removeprefix("Requires-Dist: ") for line in lines if "Requires-Dist" in line]


def _post(url: str, data: bytes, content_type: str) -> None:
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": content_type}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


class Cluster:
    """The fakes and the image the pods of one planned Job share."""

    def __init__(self, root: Path, planned: PlannedJob, storage: str, metadata: str) -> None:
        self.root, self.planned, self.storage, self.metadata = root, planned, storage, metadata
        for bucket in (planned.staging_bucket, planned.checkpoint_bucket):
            _post(
                f"{storage}/storage/v1/b?project=p",
                json.dumps({"name": bucket}).encode(),
                "application/json",
            )
        obj = planned.package_uri.removeprefix(f"gs://{planned.staging_bucket}/")
        _post(
            f"{storage}/upload/storage/v1/b/{planned.staging_bucket}/o?uploadType=media"
            f"&name={urllib.parse.quote(obj, safe='')}",
            planned.sdist.read_bytes(),
            "application/gzip",
        )
        image = image_environment(root / "image", [*IMAGE_PACKAGES, *_requires(planned.sdist)])
        self.bin = root / "bin"
        self.bin.mkdir()
        shim = self.bin / POD_PYTHON
        shim.write_text(PYTHON3.format(shared=sys.executable, image=str(image)))
        shim.chmod(0o755)
        nodes = int(planned.job["spec"]["completions"])
        job = planned.name
        lines = [Path("/etc/hosts").read_text().rstrip("\n")]
        lines += [f"127.0.0.{i + 1} {job}-{i}.{job} {job}-{i}" for i in range(nodes)]
        self.hosts = root / "hosts"
        self.hosts.write_text("\n".join(lines) + "\n")
        self.attempts = 0

    def start(self, index: int) -> Pod:
        """Start the pod of `index` in a fresh container directory."""
        self.attempts += 1
        tmp = self.root / f"pod-{index}-attempt-{self.attempts}"
        tmp.mkdir()
        container = self.planned.container
        env = {item["name"]: item["value"] for item in container["env"]}
        env.update(
            {
                "JOB_COMPLETION_INDEX": str(index),
                "PATH": f"{self.bin}:{os.environ.get('PATH', os.defpath)}",
                "HOME": str(tmp),
                "TMPDIR": str(tmp),
                "LANG": "C.UTF-8",
                "OMP_NUM_THREADS": "1",
                SIMULATED_ACCELERATORS_ENV: "2",
                "STORAGE_EMULATOR_HOST": self.storage,
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "GCE_METADATA_HOST": self.metadata.removeprefix("http://"),
                "TEST_HOSTS": str(self.hosts),
                "TEST_HOSTNAME": f"{self.planned.name}-{index}",
            }
        )
        argv = [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "--uts",
            "bash",
            "-c",
            POD_NAMESPACES,
            "pod",
            *container["command"],
            *container["args"],
        ]
        log = (tmp / "output.log").open("w")
        proc = subprocess.Popen(
            argv, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return Pod(index, proc, tmp / "output.log", log)


@dataclass
class Pod:
    index: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[str]

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def records(self) -> list[dict[str, Any]]:
        found = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return found

    def kill(self) -> None:
        """Every process of the pod at once, as when its node disappears."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.log.close()


@pytest.fixture
def fakes() -> Iterator[tuple[str, str]]:
    """The GCS emulator and the metadata server: (STORAGE_EMULATOR_HOST, metadata URL)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not available")
    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as metadata,
    ):
        yield storage, metadata.base_url


def _explain(pods: list[Pod]) -> str:
    return "\n".join(f"--- pod {p.index} ({p.log_path})\n{p.output()[-4000:]}" for p in pods)


def _events(pods: list[Pod], event: str) -> list[dict[str, Any]]:
    return [rec for pod in pods for rec in pod.records() if rec.get("event") == event]


def test_pod_manifest_runs_the_node_launcher() -> None:
    planned = _plan({"steps": 4})
    container = planned.container
    assert container["command"][:2] == ["bash", "-c"]
    assert container["args"][:4] == [POD_PYTHON, "-m", "trainers.node", "trainers.torch_ddp"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["TRAINSTACK_PACKAGE_URI"] == planned.package_uri
    assert (env["JOB_NAME"], env["TRAINSTACK_HEADLESS_SERVICE"]) == (planned.name,) * 2
    assert env["TRAINSTACK_NUM_NODES"] == "2"
    assert "TRAINSTACK_TF_KERAS" not in env


def _elastic() -> bool:
    """Whether the node launcher starts torchrun with an elastic (c10d) rendezvous for a
    multi-node GKE Job: without it a surviving pod's torchrun exits when a peer dies."""
    env = {
        "JOB_COMPLETION_INDEX": "1",
        "JOB_NAME": "j",
        "TRAINSTACK_HEADLESS_SERVICE": "j",
        "TRAINSTACK_NUM_NODES": "2",
        SIMULATED_ACCELERATORS_ENV: "2",
    }
    argv = node_command(parse_args(["trainers.torch_ddp"]), env).argv
    return "--rdzv-backend=c10d" in argv or "--rdzv_backend=c10d" in argv


def _run_pods(cluster: Cluster, timeout_s: float) -> list[Pod]:
    pods = [cluster.start(i) for i in range(2)]
    codes = [pod.wait(timeout_s) for pod in pods]
    assert codes == [0, 0], _explain(pods)
    return pods


@pytest.mark.trainer
def test_two_pods_of_two_gpus_train_as_one_world_of_four(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan({"steps": 4, "checkpoint_every": 2})
    pods = _run_pods(Cluster(tmp_path, planned, *fakes), timeout_s=240)
    for pod in pods:
        assert (
            f"trainstack-node: node {pod.index} of 2, 2 accelerator(s), 2 process(es): "
            in pod.output()
        )
        assert "trainstack-pod: installing " + planned.package_uri in pod.output()
    starts = _events(pods, "start")
    assert sorted((s["rank"], s["node"], s["worker"]) for s in starts) == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert {(s["world_size"], s["per_rank_batch"], s["device"]) for s in starts} == {(4, 8, "cpu")}
    [done] = _events(pods, "done")
    assert (done["world_size"], done["step"], done["rank"]) == (4, 4, 0)
    assert done["checkpoint_dir"] == f"gs://{planned.checkpoint_bucket}/checkpoints"


@pytest.mark.trainer
@pytest.mark.skipif(
    not _elastic(),
    reason="trainers.node starts torchrun with a static rendezvous: a surviving pod exits "
    "when its peer dies (needs the elastic c10d rendezvous of issue #13 defect 6)",
)
def test_a_pod_whose_node_disappears_comes_back_and_the_run_ends_as_an_uninterrupted_one(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan({"steps": 24, "checkpoint_every": 4})
    pods = _run_pods(Cluster(tmp_path / "whole", planned, *fakes), timeout_s=300)
    [reference] = _events(pods, "done")

    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as meta,
    ):
        cluster = Cluster(tmp_path / "interrupted", planned, storage, meta.base_url)
        pods = [cluster.start(i) for i in range(2)]
        try:
            deadline = time.monotonic() + 240
            # Kill pod 1 once a checkpoint exists and training went on past it.
            while not any(r.get("event") == "checkpoint" for r in pods[0].records()) or not any(
                r.get("step", 0) >= 6 for r in pods[1].records()
            ):
                assert time.monotonic() < deadline, _explain(pods)
                assert all(p.proc.poll() is None for p in pods), _explain(pods)
                time.sleep(0.2)
            pods[1].kill()
            replacement = cluster.start(1)
            codes = [pods[0].wait(300), replacement.wait(300)]
        finally:
            for pod in pods:
                if pod.proc.poll() is None:
                    pod.kill()
        everything = [pods[0], pods[1], replacement]
        assert codes == [0, 0], _explain(everything)
    [done] = _events([pods[0], replacement], "done")
    assert done["step"] == reference["step"] == 24
    assert done["params_sha256"] == reference["params_sha256"]
    assert _events([pods[0], replacement], "resume"), _explain(everything)

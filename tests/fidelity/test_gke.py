"""GKE fidelity: the planned Indexed Job's pods, run here the way the Job controller and the
kubelet run them.

The plan is `infra.plan.build_plan` of the bundled `dev-a100-gke` stack (2 nodes of
a2-highgpu-8g), its trainer cut to a few small steps of the MLP on digits. For each
completion index the test runs the Job's container `command` + `args` with the container's
`env` from the manifest, plus what Kubernetes adds: `JOB_COMPLETION_INDEX`, the pod's host
name `<job>-<index>` and its headless-service name `<job>-<index>.<job>` in DNS.

`examples/own-trainer`'s gke stack runs the same way (slow): its pods run your code through
`python3 -m trainers.node <node_args>` as a world of 4 and end with local-run's weights.

What differs from GKE, and why (nothing else changes behaviour):

- Each pod is a node of `tests.fidelity.nodes`: its own user, mount, UTS and PID namespace,
  the host name `<job>-<index>`, and a hosts file mapping `<job>-<i>.<job>` and `<job>-<i>`
  to 127.0.0.<i+1>, so every pod resolves the others as cluster DNS would and only pod 0
  matches the rendezvous host. The pods share this machine's network namespace, so the
  manifest's rendezvous port must be free here.
- The image is `tests.fidelity.nodes.Image`: a layer linking torch and what the sdist
  requires from the shared venv, and each pod a fresh virtual environment over it (its own
  container), so `trainers` comes from the sdist the pod installs. `python3` on PATH is
  that environment's python, except that its `-m pip install` runs offline (`--no-index`,
  no build isolation: everything the package requires is already in the layer, as the
  real pod would download).
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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components._pod_setup import POD_PYTHON
from infra.mocks import REPO_ROOT
from infra.plan import build_plan, load_stack
from tests.components.test_tpu_startup import MetadataServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.nodes import (
    Image,
    Node,
    events,
    explain,
    inputs_by_type,
    planned_package,
    require_unshare,
    stage_buckets,
    start_node,
    write_hosts,
)
from tests.fidelity.test_vertex import OWN_ARGS, own_node_args
from tests.fidelity.test_vertex import _local_run_digest as local_run_digest
from trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV

STACK = "dev-a100-gke"
JOB_TYPE = "kubernetes:batch/v1:Job"
TRAINER = {
    "model": "mlp",
    "dataset": "digits",
    "precision": "fp32",
    "global_batch_size": 32,
    "log_every": 1,
}
IMAGE_PACKAGES = ["torch", "setuptools"]
TOKEN = {"access_token": "fidelity-token", "expires_in": 3600, "token_type": "Bearer"}


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
    return _planned(build_plan(name, config))


def _planned(plan: dict[str, Any]) -> PlannedJob:
    by_type = inputs_by_type(plan)
    [job] = by_type[JOB_TYPE]
    return PlannedJob(job=job, **planned_package(by_type))


class Cluster:
    """The fakes and the image the pods of one planned Job share."""

    def __init__(
        self,
        root: Path,
        planned: PlannedJob,
        storage: str,
        metadata: str,
        image: Image | None = None,
    ) -> None:
        """`image`: the image built for another cluster of the same plan, reused."""
        self.root, self.planned, self.storage, self.metadata = root, planned, storage, metadata
        root.mkdir(parents=True, exist_ok=True)
        buckets = [planned.staging_bucket, planned.checkpoint_bucket]
        stage_buckets(storage, buckets, planned.package_uri, planned.sdist)
        self.image = image or Image(root, planned.sdist, IMAGE_PACKAGES)
        job = planned.name
        nodes = int(planned.job["spec"]["completions"])
        self.hosts = write_hosts(
            root / "hosts", {f"{job}-{i}": [f"{job}-{i}.{job}"] for i in range(nodes)}
        )
        self.attempts = 0

    def start(self, index: int) -> Node:
        """Start the pod of `index` in a fresh container directory."""
        self.attempts += 1
        tmp = self.root / f"pod-{index}-attempt-{self.attempts}"
        tmp.mkdir()
        bin_dir = self.image.container(tmp)
        container = self.planned.container
        env = {item["name"]: item["value"] for item in container["env"]}
        env.update(
            {
                "JOB_COMPLETION_INDEX": str(index),
                "PATH": f"{bin_dir}:{os.environ.get('PATH', os.defpath)}",
                "HOME": str(tmp),
                "TMPDIR": str(tmp),
                "LANG": "C.UTF-8",
                "OMP_NUM_THREADS": "1",
                SIMULATED_ACCELERATORS_ENV: "2",
                "STORAGE_EMULATOR_HOST": self.storage,
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "GCE_METADATA_HOST": self.metadata.removeprefix("http://"),
            }
        )
        return start_node(
            [*container["command"], *container["args"]],
            env,
            cwd=tmp,
            hostname=f"{self.planned.name}-{index}",
            hosts=self.hosts,
            log_path=tmp / "output.log",
        )


@pytest.fixture
def fakes() -> Iterator[tuple[str, str]]:
    """The GCS emulator and the metadata server: (STORAGE_EMULATOR_HOST, metadata URL)."""
    require_unshare()
    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as metadata,
    ):
        yield storage, metadata.base_url


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


def _run_pods(cluster: Cluster, timeout_s: float) -> list[Node]:
    pods = [cluster.start(i) for i in range(2)]
    codes = [pod.wait(timeout_s) for pod in pods]
    assert codes == [0, 0], explain(pods)
    return pods


@pytest.mark.trainer
def test_two_pods_of_two_gpus_train_as_one_world_of_four(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan({"steps": 4, "checkpoint_every": 2})
    pods = _run_pods(Cluster(tmp_path, planned, *fakes), timeout_s=240)
    for index, pod in enumerate(pods):
        assert (
            f"trainstack-node: node {index} of 2, 2 accelerator(s), 2 process(es): " in pod.output()
        )
        assert "trainstack-pod: installing " + planned.package_uri in pod.output()
    starts = events(pods, "start")
    assert sorted((s["rank"], s["node"], s["worker"]) for s in starts) == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert {(s["world_size"], s["per_rank_batch"], s["device"]) for s in starts} == {(4, 8, "cpu")}
    [done] = events(pods, "done")
    assert (done["world_size"], done["step"], done["rank"]) == (4, 4, 0)
    assert done["checkpoint_dir"] == f"gs://{planned.checkpoint_bucket}/checkpoints/{STACK}"


@pytest.mark.trainer
@pytest.mark.slow
def test_a_pod_whose_node_disappears_comes_back_and_the_run_ends_as_an_uninterrupted_one(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan({"steps": 24, "checkpoint_every": 4})
    whole = Cluster(tmp_path / "whole", planned, *fakes)
    pods = _run_pods(whole, timeout_s=300)
    [reference] = events(pods, "done")

    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as meta,
    ):
        cluster = Cluster(tmp_path / "interrupted", planned, storage, meta.base_url, whole.image)
        pods = [cluster.start(i) for i in range(2)]
        try:
            deadline = time.monotonic() + 240
            # Kill pod 1 once a checkpoint exists and training went on past it.
            while not any(r.get("event") == "checkpoint" for r in pods[0].records()) or not any(
                r.get("step", 0) >= 6 for r in pods[1].records()
            ):
                assert time.monotonic() < deadline, explain(pods)
                assert all(p.proc.poll() is None for p in pods), explain(pods)
                time.sleep(0.2)
            pods[1].kill()
            replacement = cluster.start(1)
            codes = [pods[0].wait(300), replacement.wait(300)]
        finally:
            for pod in pods:
                if pod.proc.poll() is None:
                    pod.kill()
        everything = [pods[0], pods[1], replacement]
        assert codes == [0, 0], explain(everything)
    [done] = events([pods[0], replacement], "done")
    assert done["step"] == reference["step"] == 24
    assert done["params_sha256"] == reference["params_sha256"]
    assert events([pods[0], replacement], "resume"), explain(everything)


OWN_TRAINER = REPO_ROOT / "examples" / "own-trainer"


def _plan_own_trainer() -> PlannedJob:
    """examples/own-trainer's gke stack (2 nodes), its entrypoint cut to a short run."""
    stack = yaml.safe_load((OWN_TRAINER / "Pulumi.gke.yaml").read_text())["config"]
    stack["trainstack:trainer"] = {
        **stack["trainstack:trainer"],
        "source": str(OWN_TRAINER),
        "entrypoint": ["python", "train.py", *OWN_ARGS],
    }
    return _planned(build_plan("fidelity-own", stack))


@pytest.mark.trainer
@pytest.mark.slow  # about 155 s here: 2 pods install the code and train, then a local-run
def test_own_trainer_on_two_pods_of_two_gpus_is_a_world_of_four(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan_own_trainer()
    checkpoints = f"gs://{planned.checkpoint_bucket}"
    assert planned.container["args"] == [POD_PYTHON, *own_node_args(checkpoints)]
    # numpy: the script's weights digest needs it (the bundled PyTorch image has it).
    image = Image(tmp_path / "image", planned.sdist, [*IMAGE_PACKAGES, "numpy"])
    pods = _run_pods(Cluster(tmp_path, planned, *fakes, image=image), timeout_s=300)
    for index, pod in enumerate(pods):
        assert (
            f"trainstack-node: node {index} of 2, 2 accelerator(s), 2 process(es): " in pod.output()
        )
        assert "trainstack-pod: installing " + planned.package_uri in pod.output()
    records = [
        json.loads(line)
        for pod in pods
        for line in pod.output().splitlines()
        if line.startswith("{") and '"world"' in line
    ]
    assert records == [{"event": "start", "rank": 0, "step": 0, "world": 4}], explain(pods)
    [done] = [
        json.loads(line)
        for pod in pods
        for line in pod.output().splitlines()
        if line.startswith("{") and '"params_sha256"' in line
    ]
    # The same code, steps and world (4 processes) through local-run: the same weights.
    assert local_run_digest(tmp_path, workers=4) == done

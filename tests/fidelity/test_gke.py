"""GKE fidelity: the planned Indexed Job's pods, run here the way the Job controller and the
kubelet run them.

The plan is `trainstack.infra.plan.build_plan` of the bundled `dev-a100-gke` stack (2 nodes of
a2-highgpu-8g), its trainer cut to a few small steps of the MLP on digits. For each
completion index the test runs the Job's container `command` + `args` with the container's
`env` from the manifest, plus what Kubernetes adds: `JOB_COMPLETION_INDEX`, the pod's host
name `<job>-<index>` and its headless-service name `<job>-<index>.<job>` in DNS.

`examples/own-trainer`'s gke stack runs the same way (slow): its pods run your code through
`python3 -m trainstack.trainers.node <node_args>` as a world of 4 and end with local-run's weights.

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
  pod with the DisruptionTarget condition (podFailurePolicy `Ignore`). The longer runs go
  through `tests.fidelity.job_controller`, which applies the planned Job's podFailurePolicy,
  backoffLimitPerIndex and maxFailedIndexes to every pod exit as Kubernetes does.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import REPO_ROOT
from tests.components.test_tpu_startup import MetadataServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.job_controller import DISRUPTION_TARGET, IndexedJobController, policy_action
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
from tests.fidelity.supervisor import (
    check_with_planned_supervisor,
    planned_supervisor,
    read_object,
)
from tests.fidelity.test_vertex import OWN_ARGS, own_node_args
from tests.fidelity.test_vertex import _local_run_digest as local_run_digest
from trainstack.components._pod_setup import POD_PYTHON
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV
from trainstack.trainers.common.contract import EVENT_CHECKPOINT_WRITTEN

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
    return _planned(_plan_document(trainer))


def _stack_config(trainer: dict[str, Any]) -> dict[str, Any]:
    _, config = load_stack(STACK, None)
    config["trainstack:trainer"] = {**config["trainstack:trainer"], **TRAINER, **trainer}
    return config


def _plan_document(trainer: dict[str, Any]) -> dict[str, Any]:
    return build_plan(STACK, _stack_config(trainer))


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

    def start(
        self,
        index: int,
        annotations: Mapping[str, str] | None = None,
        extra_env: dict[str, str] | None = None,
        binds: Mapping[Path, str] | None = None,
    ) -> Node:
        """Start the pod of `index` in a fresh container directory, with the `annotations`
        the Job controller gave it (`extra_env`: what a test plants in it; `binds`: folders
        of this machine mounted over the pod's paths, `tests.fidelity.nodes.start_node`)."""
        self.attempts += 1
        tmp = self.root / f"pod-{index}-attempt-{self.attempts}"
        tmp.mkdir()
        bin_dir = self.image.container(tmp)
        container = self.planned.container
        env = {item["name"]: _env_value(item, annotations or {}) for item in container["env"]}
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
                **(extra_env or {}),
            }
        )
        return start_node(
            [*container["command"], *container["args"]],
            env,
            cwd=tmp,
            hostname=f"{self.planned.name}-{index}",
            hosts=self.hosts,
            log_path=tmp / "output.log",
            binds=binds,
        )


ANNOTATION_PATH = re.compile(r"metadata\.annotations\['([^']+)'\]")


def _env_value(item: Mapping[str, Any], annotations: Mapping[str, str]) -> str:
    """A container env entry's value as the kubelet resolves it: its `value`, or a pod
    annotation's through the downward API, empty when the pod has none (kubernetes
    pkg/fieldpath/fieldpath.go `ExtractFieldPathAsString`: `GetAnnotations()[subscript]`)."""
    if "value" in item:
        return str(item["value"])
    match = ANNOTATION_PATH.fullmatch(item["valueFrom"]["fieldRef"]["fieldPath"])
    assert match is not None, item
    return annotations.get(match.group(1), "")


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
    assert container["args"][:4] == [
        POD_PYTHON,
        "-m",
        "trainstack.trainers.node",
        "trainstack.trainers.torch_ddp",
    ]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
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
    plan = _plan_document({"steps": 4, "checkpoint_every": 2})
    planned = _planned(plan)
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

    # Pod 0's launcher recorded the end; the planned supervisor sets the GPU pool to 0.
    storage = fakes[0]
    checked = check_with_planned_supervisor(plan, tmp_path / "supervisor", storage, 2, 4)
    config = planned_supervisor(plan, tmp_path / "supervisor")
    ended = read_object(storage, config["run"]["end_uri"])
    assert (ended["outcome"], ended["node_rank"]) == ("done", 0)
    # Stopping while the pool's group still deletes its VMs; stopped once they are gone.
    assert [(a["seen"], a["action"], a.get("reason"), a["result"]) for a in checked.answers] == [
        ("SIZE_2", "stop", "done", "stopping"),
        ("DELETING_2", "none", "done", "stopping"),
        ("STOPPED", "none", "done", "compute stopped"),
        ("STOPPED", "none", None, "stopped"),
    ]
    assert checked.container.set_sizes == [(config["name"], {"nodeCount": 0})]


def test_the_planned_job_maps_each_pod_exit_as_the_recovery_rules_say() -> None:
    # What the Job controller does with each way a pod of the planned Job can end.
    spec = _plan({"steps": 4}).job["spec"]
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (3, 0)
    policy = spec["podFailurePolicy"]
    lost = frozenset({DISRUPTION_TARGET})
    assert {
        "node lost (SIGKILL, DisruptionTarget)": policy_action(policy, 137, lost),
        "preempted after a checkpoint": policy_action(policy, 143, frozenset()),
        "a peer or pod 0's store lost": policy_action(policy, 4, frozenset()),
        "saved before the node's capacity ends": policy_action(policy, 6, frozenset()),
        "a worker raised": policy_action(policy, 1, frozenset()),
        "bad config": policy_action(policy, 2, frozenset()),
        "fewer usable GPUs than planned": policy_action(policy, 5, frozenset()),
        "setup failed": policy_action(policy, 3, frozenset()),
        "OOM-killed": policy_action(policy, 137, frozenset()),
    } == {
        "node lost (SIGKILL, DisruptionTarget)": "Ignore",
        "preempted after a checkpoint": "Ignore",
        "a peer or pod 0's store lost": "Ignore",
        "saved before the node's capacity ends": "Ignore",
        "a worker raised": "FailJob",
        "bad config": "FailJob",
        "fewer usable GPUs than planned": "FailJob",
        "setup failed": "Count",
        "OOM-killed": "Count",
    }


def test_one_index_out_of_retries_fails_the_job_and_stops_the_others(tmp_path: Path) -> None:
    # Pods that exit at once: index 0 fails setup (3) every time, index 1 would run on.
    require_unshare()
    job = _plan({"steps": 4}).job
    hosts = write_hosts(tmp_path / "hosts", {"p-0": [], "p-1": []})
    script = 'if [ "$INDEX" = 0 ]; then exit 3; fi; exec sleep 600'

    def start(index: int, annotations: Mapping[str, str]) -> Node:
        attempt = tmp_path / f"pod-{index}-{len(list(tmp_path.glob(f'pod-{index}-*')))}"
        attempt.mkdir()
        env = {"PATH": os.environ["PATH"], "INDEX": str(index)}
        log = attempt / "output.log"
        return start_node(
            ["bash", "-c", script], env, cwd=attempt, hostname=f"p-{index}", hosts=hosts,
            log_path=log,
        )  # fmt: skip

    outcome = IndexedJobController(job, start).run(timeout_s=60)
    assert (outcome.state, outcome.reason) == ("Failed", "MaxFailedIndexesExceeded")
    # backoffLimitPerIndex 3: the fourth counted failure fails the index.
    assert [(e.index, e.exit_code, e.action) for e in outcome.exits] == [(0, 3, "Count")] * 4
    assert outcome.failed_indexes == {0}
    assert len(outcome.pods) == 5  # 4 attempts of index 0, 1 of index 1 (stopped)


LOSSES = (0, 1, 0, 1, 1, 0)
"""Which pod's node disappears, in order: pod 0 (the rendezvous store) three times."""


class NodeLosses:
    """Loses the node of the next pod in `LOSSES` each time the run has written a
    checkpoint past the one it had at the previous loss, with both pods running."""

    def __init__(self) -> None:
        self.lost: list[tuple[int, int]] = []
        """(index, newest checkpoint step) of each loss."""

    def __call__(self, controller: IndexedJobController) -> None:
        if len(self.lost) == len(LOSSES) or len(controller.running) < 2:
            return
        steps = [
            int(r["step"])
            for pod in controller.running.values()
            for r in pod.records()
            if r.get("event") == EVENT_CHECKPOINT_WRITTEN
        ]
        newest = max(steps, default=0)
        if newest > (self.lost[-1][1] if self.lost else 0):
            index = LOSSES[len(self.lost)]
            controller.lose_node(index)
            self.lost.append((index, newest))


@pytest.mark.trainer
@pytest.mark.slow  # about 220 s here: the uninterrupted run, then 6 node losses
def test_six_node_losses_pod_0_among_them_end_as_the_uninterrupted_run(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan({"steps": 24, "checkpoint_every": 2})
    whole = Cluster(tmp_path / "whole", planned, *fakes)
    reference = IndexedJobController(planned.job, whole.start).run(timeout_s=300)
    assert reference.state == "Complete", explain(reference.pods)
    [expected] = events(reference.pods, "done")

    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as meta,
    ):
        cluster = Cluster(tmp_path / "lossy", planned, storage, meta.base_url, whole.image)
        losses = NodeLosses()
        outcome = IndexedJobController(planned.job, cluster.start).run(900, tick=losses)
    assert outcome.state == "Complete", explain(outcome.pods[-4:])
    assert [index for index, _ in losses.lost] == list(LOSSES)
    disrupted = [e for e in outcome.exits if DISRUPTION_TARGET in e.conditions]
    assert [(e.index, e.action) for e in disrupted] == [(i, "Ignore") for i in LOSSES]
    # The survivors of each loss exit 4 (a peer or pod 0's store gone): never counted.
    others = [e for e in outcome.exits if e not in disrupted and e.action != "Succeeded"]
    assert {(e.exit_code, e.action) for e in others} == {(4, "Ignore")}, explain(outcome.pods)
    assert (outcome.counted_failures, outcome.failed_indexes) == ({}, set())
    [done] = events(outcome.pods, "done")
    assert done["step"] == expected["step"] == 24
    assert done["params_sha256"] == expected["params_sha256"]
    assert len(events(outcome.pods, "resume")) >= len(LOSSES), explain(outcome.pods[-4:])


PLANTED_BUG = """import os
if os.environ.get("RANK") == "3":
    import torch
    calls = []
    backward = torch.Tensor.backward
    def buggy(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("planted bug: rank 3 cannot go on")
        return backward(self, *args, **kwargs)
    torch.Tensor.backward = buggy
"""
"""A `sitecustomize` for one pod: its rank 3 raises in its third backward pass."""


@pytest.mark.trainer
@pytest.mark.slow  # about 55 s here: two pods install and start, a step, the failure
def test_a_rank_that_raises_fails_the_job_within_one_attempt(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan({"steps": 16, "checkpoint_every": 2})
    cluster = Cluster(tmp_path, planned, *fakes)
    bug = tmp_path / "planted-bug"
    bug.mkdir()
    (bug / "sitecustomize.py").write_text(PLANTED_BUG)

    def start(index: int, annotations: Mapping[str, str]) -> Node:
        bug_env = {"PYTHONPATH": str(bug)} if index == 1 else None
        return cluster.start(index, annotations, bug_env)

    began = time.monotonic()
    outcome = IndexedJobController(planned.job, start).run(timeout_s=300)
    elapsed = time.monotonic() - began
    assert (outcome.state, outcome.reason) == ("Failed", "PodFailurePolicy"), explain(outcome.pods)
    [failed] = outcome.by_action("FailJob")
    assert (failed.index, failed.exit_code) == (1, 1)
    # Index 1 ran once; index 0 lost its peer (4) at most once before the Job failed.
    assert [p.name for p in outcome.pods].count(f"{planned.name}-1") == 1
    assert all((e.exit_code, e.action) == (4, "Ignore") for e in outcome.exits if e.index == 0)
    assert outcome.counted_failures == {}
    output = outcome.pods[1].output()
    assert "ValueError: planted bug: rank 3 cannot go on" in output
    # Rank 3 raised (1); rank 2 on the same pod lost its peer (4): a code error, exit 1.
    [failed_line] = [line for line in output.splitlines() if "workers failed" in line]
    assert "3: 1" in failed_line and failed_line.endswith("; exit 1"), failed_line
    assert not events(outcome.pods, "done")
    assert elapsed < 300


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

"""GKE TPU fidelity: the planned JobSet's pods, run here the way JobSet's controller, the Job
controller and GKE's TPU webhook create them (`tests.fidelity.jobset`, which cites the
source lines it models).

The plan is `trainstack.infra.plan.build_plan` of the bundled `dev-tpu-v6e-gke` stack cut to
two v6e-8 slices (2 hosts of ct6e-standard-4t each, the smallest multi-host v6e slice), so
the set is 2 slices x 2 hosts = 4 pods; and cut to the issue's single-slice v5p-8 (one
ct5p-hightpu-4t host, a Job of parallelism 1, which the webhook leaves alone). Each pod runs the container's `command` + `args`
with its environment: the manifest's `env` resolved through the downward API from the
labels JobSet stamps (`MEGASCALE_*`), `JOB_COMPLETION_INDEX`, and the webhook's
`TPU_WORKER_ID` / `TPU_WORKER_HOSTNAMES`.

What differs from GKE, and why (nothing else changes behaviour):

- Each pod is a node of `tests.fidelity.nodes` (its own user, mount, UTS and PID namespace,
  host name `<job>-<index>`, a hosts file mapping `<job>-<index>.<subdomain>` to
  127.0.0.<n>): the pods resolve each other as the JobSet's headless Service makes them
  resolvable. They share this machine's network namespace, so JAX's coordinator port
  (8482, jax/_src/clusters/cloud_tpu_cluster.py) must be free here.
- The image is `tests.fidelity.nodes.Image` with jax (CPU) and what the sdist requires; the
  TPU chips and libtpu are JAX's own switch for a Cloud TPU VM and its CPU backend
  (`SIMULATED_TPU_VM`, as tests/fidelity/test_tpu.py), and
  `TRAINSTACK_SIMULATED_ACCELERATORS=4` stands for the 4 chips per host.
- `gs://` is a GCS emulator holding the plan's buckets and package; the GKE metadata server
  a fake that hands out a token.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.components.test_tpu_startup import MetadataServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.jobset import JOBSET, JobSetController, Pod, pods
from tests.fidelity.nodes import (
    Image,
    Node,
    explain,
    inputs_by_type,
    planned_package,
    require_unshare,
    stage_buckets,
    start_node,
    write_hosts,
)
from tests.fidelity.test_tpu import SIMULATED_TPU_VM
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV
from trainstack.trainers.common.cluster import resolve_cluster

STACK = "dev-tpu-v6e-gke"
JOBSET_TYPE = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
OWN_JAX = Path(__file__).resolve().parents[2] / "examples" / "own-jax"
TOKEN = {"access_token": "fidelity-token", "expires_in": 3600, "token_type": "Bearer"}
CHIPS_PER_HOST = 4


@dataclass(frozen=True)
class Planned:
    jobset: dict[str, Any]
    sdist: Path
    package_uri: str
    staging_bucket: str
    checkpoint_bucket: str

    @property
    def container(self) -> dict[str, Any]:
        pod = self.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        return dict(pod["containers"][0])


def _plan(trainer: dict[str, Any] | None = None, tpu: dict[str, Any] | None = None) -> Planned:
    _, config = load_stack(STACK, None)
    config["trainstack:tpu"]["accelerator_type"] = "v6e-8"
    config["trainstack:tpu"].update(tpu or {})
    config["trainstack:trainer"] = {
        **config["trainstack:trainer"],
        "source": str(OWN_JAX),
        **(trainer or {}),
    }
    by_type = inputs_by_type(build_plan(STACK, config))
    [jobset] = by_type[JOBSET_TYPE]
    return Planned(jobset=jobset, **planned_package(by_type))


class Cluster:
    """The fakes, the image and the DNS the pods of one planned JobSet share."""

    def __init__(
        self,
        root: Path,
        planned: Planned,
        storage: str,
        metadata: str,
        packages: Sequence[str] = (),
    ) -> None:
        """`packages`: what the image carries beside jax (and what the sdist requires)."""
        self.root, self.planned, self.storage, self.metadata = root, planned, storage, metadata
        root.mkdir(parents=True, exist_ok=True)
        buckets = [planned.staging_bucket, planned.checkpoint_bucket]
        stage_buckets(storage, buckets, planned.package_uri, planned.sdist)
        self.image = Image(root, planned.sdist, ["jax", "setuptools", *packages])
        self.hosts = write_hosts(
            root / "hosts", {p.hostname: [p.fqdn] for p in pods(planned.jobset)}
        )
        self.attempts = 0

    def start(self, pod: Pod, restarts: int) -> Node:
        self.attempts += 1
        tmp = self.root / f"{pod.hostname}-restart-{restarts}"
        tmp.mkdir()
        bin_dir = self.image.container(tmp)
        container = self.planned.container
        env = {
            **pod.env,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', os.defpath)}",
            "HOME": str(tmp),
            "TMPDIR": str(tmp),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            SIMULATED_ACCELERATORS_ENV: str(CHIPS_PER_HOST),
            **SIMULATED_TPU_VM,
            "STORAGE_EMULATOR_HOST": self.storage,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "GCE_METADATA_HOST": self.metadata.removeprefix("http://"),
        }
        return start_node(
            [*container["command"], *container["args"]],
            env,
            cwd=tmp,
            hostname=pod.hostname,
            hosts=self.hosts,
            log_path=tmp / "output.log",
        )


@pytest.fixture
def fakes() -> Iterator[tuple[str, str]]:
    require_unshare()
    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as metadata,
    ):
        yield storage, metadata.base_url


def test_each_pod_gets_the_names_labels_and_env_of_its_slice_and_host() -> None:
    planned = _plan()
    name = planned.jobset["metadata"]["name"]
    assert name == "dev-tpu-v6e-gke-tpu"
    made = pods(planned.jobset)
    assert [(p.hostname, p.fqdn) for p in made] == [
        (f"{name}-slice-{s}-{w}", f"{name}-slice-{s}-{w}.{name}") for s in (0, 1) for w in (0, 1)
    ]
    pod = made[3]  # slice 1, host 1
    assert {k: v for k, v in pod.labels.items() if k.startswith(JOBSET)} == {
        JOBSET + "jobset-name": name,
        JOBSET + "jobset-uid": "0f5e1c9a-6b2d-4c1e-9a7f-3d2b1c0e9f8a",
        JOBSET + "replicatedjob-name": "slice",
        JOBSET + "restarts": "0",
        JOBSET + "replicatedjob-replicas": "2",
        JOBSET + "global-replicas": "2",
        JOBSET + "job-index": "1",
        # jobHashKey: sha1 of "<namespace>/<child Job>".
        JOBSET + "job-key": hashlib.sha1(f"default/{name}-slice-1".encode()).hexdigest(),
        JOBSET + "job-global-index": "1",
        JOBSET + "group-name": "default",
        JOBSET + "group-replicas": "2",
        JOBSET + "job-group-index": "1",
        JOBSET + "coordinator": f"{name}-slice-0-0.{name}",
    }
    assert pod.annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    env = {k: v for k, v in pod.env.items() if not k.startswith("TRAINSTACK_")}
    assert env == {
        "JOB_COMPLETION_INDEX": "1",
        "TPU_WORKER_ID": "1",
        "TPU_WORKER_HOSTNAMES": f"{name}-slice-1-0.{name},{name}-slice-1-1.{name}",
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
        "MEGASCALE_COORDINATOR_ADDRESS": f"{name}-slice-0-0.{name}",
    }


@pytest.mark.trainer
def test_own_jax_on_two_slices_of_two_hosts_finds_a_world_of_four(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    pytest.importorskip("jax", reason="examples/own-jax needs jax (test extras: jax[cpu])")
    planned = _plan()
    cluster = Cluster(tmp_path, planned, *fakes)
    outcome = JobSetController(planned.jobset, cluster.start).run(timeout_s=400)
    assert (outcome.state, outcome.restarts) == ("Completed", 0), explain(outcome.pods)
    assert len(outcome.pods) == 4
    for rank, node in enumerate(outcome.pods):
        assert (
            f"trainstack-node: node {rank} of 4, {CHIPS_PER_HOST} accelerator(s), "
            "1 process(es): " in node.output()
        ), explain([node])
    done = [r for node in outcome.pods for r in node.records() if r.get("event") == "done"]
    # Process 0 (slice 0, host 0) saw all 4 processes through jax.distributed.initialize().
    assert done == [
        {"event": "done", "rank": 0, "world": 4, "ranks": [0, 1, 2, 3], "devices": 4,
         "run": STACK}
    ]  # fmt: skip


SINGLE_HOST = {"accelerator_type": "v5p-8", "zone": "us-east5-a", "slices": 1}
"""The issue's single-slice v5p-8 stack: one ct5p-hightpu-4t host (parallelism 1)."""


def test_a_single_host_slice_pod_carries_its_node_count() -> None:
    planned = _plan(tpu=SINGLE_HOST)
    [pod] = pods(planned.jobset)
    # GKE's TPU webhook skips a Job of parallelism 1 (tests.fidelity.jobset): no TPU_WORKER_*.
    assert {k: v for k, v in pod.env.items() if not k.startswith("TRAINSTACK_")} == {
        "JOB_COMPLETION_INDEX": "0"
    }
    assert pod.env["TRAINSTACK_NUM_NODES"] == "1"
    cluster = resolve_cluster(pod.env)
    assert (cluster.platform, cluster.node_rank, cluster.num_nodes) == ("gke", 0, 1)
    assert cluster.coordinator_address == "127.0.0.1"


@pytest.mark.trainer
def test_own_jax_on_a_single_host_v5p_8_slice_runs_to_its_end(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    pytest.importorskip("jax", reason="examples/own-jax needs jax (test extras: jax[cpu])")
    planned = _plan(tpu=SINGLE_HOST)
    cluster = Cluster(tmp_path, planned, *fakes)
    outcome = JobSetController(planned.jobset, cluster.start).run(timeout_s=300)
    assert (outcome.state, outcome.restarts, outcome.job_failures) == ("Completed", 0, []), explain(
        outcome.pods
    )
    [node] = outcome.pods
    assert f"trainstack-node: node 0 of 1, {CHIPS_PER_HOST} accelerator(s), " in node.output()
    done = [r for r in node.records() if r.get("event") == "done"]
    # jax.distributed.initialize() with no arguments found a world of one process (through
    # the node launcher's OMPI_* variables: no TPU_WORKER_HOSTNAMES for GkeTpuCluster), whose
    # one device is JAX's CPU backend standing for the host's chips.
    assert done == [
        {"event": "done", "rank": 0, "world": 1, "ranks": [0], "devices": 1, "run": STACK}
    ]


class _Exited:
    """A pod's process that has already exited with `code`."""

    def __init__(self, code: int) -> None:
        self.code = code

    def poll(self) -> int:
        return self.code


def test_a_config_error_fails_the_set_for_good_with_jobsets_reason() -> None:
    planned = _plan()
    started: list[Pod] = []

    def start(pod: Pod, restarts: int) -> Any:
        started.append(pod)
        code = 2 if (pod.slice, pod.index) == (0, 0) else 0
        return SimpleNamespace(proc=_Exited(code), log=io.StringIO(), kill=lambda: None)

    outcome = JobSetController(planned.jobset, start).run(timeout_s=30)
    # Exit 2 fails slice 0's Job by its podFailurePolicy; the set's first rule fails the set
    # with JobSet's own reason (kubernetes-sigs/jobset@v0.12.0 pkg/constants/constants.go).
    assert (outcome.state, outcome.reason, outcome.restarts) == (
        "Failed",
        "FailJobSetFailurePolicyAction",
        0,
    )
    name = planned.jobset["metadata"]["name"]
    assert outcome.job_failures == [(f"{name}-slice-0", 0, 2, "PodFailurePolicy")]
    assert len(started) == 4


RESUMABLE = """import json, os, sys, time
import fsspec, jax, jax.numpy as jnp
from jax.experimental import multihost_utils

STEPS = 10
jax.distributed.initialize()
rank = jax.process_index()
fs, root = fsspec.core.url_to_fs(os.environ["TRAINSTACK_CHECKPOINT_DIR"])
saved = sorted(int(p.rsplit("-", 1)[1].split(".")[0]) for p in fs.glob(root + "/step-*.json"))
step, params = 0, [0.0] * jax.process_count()
if saved:
    step, params = saved[-1], json.loads(fs.cat(f"{root}/step-{saved[-1]}.json"))
    print(json.dumps({"event": "resume", "rank": rank, "step": step}), flush=True)
while step < STEPS:
    # Every process contributes; all get the same sums: one data-parallel step.
    grads = multihost_utils.process_allgather(jnp.array([(rank + 1) * (step + 1) / 7.0]))
    params = [0.9 * p + float(g) for p, g in zip(params, grads.reshape(-1))]
    step += 1
    if rank == 0:
        fs.pipe(f"{root}/step-{step}.json", json.dumps(params).encode())
    multihost_utils.sync_global_devices(f"checkpoint {step}")
    print(json.dumps({"event": "checkpoint_written", "rank": rank, "step": step}), flush=True)
    # JAX's preemption notice: SIGTERM on any host, shared with all (jax.distributed's
    # preemption sync manager); every host stops at the same step, after its checkpoint.
    if multihost_utils.reached_preemption_sync_point(step):
        sys.exit(143)
    time.sleep(1)
if rank == 0:
    digest = json.dumps(params)
    print(json.dumps({"event": "done", "step": step, "params": digest}), flush=True)
"""
"""A JAX data-parallel loop that checkpoints every step to TRAINSTACK_CHECKPOINT_DIR (gs://,
the GCS emulator) and resumes from the newest; a SIGTERM on any host (what the kubelet sends
the pods of a preempted spot node) stops every host with 143 at the step JAX's preemption
sync point names (jax/experimental/multihost_utils.py `reached_preemption_sync_point`)."""


def _container_pid(node: Node) -> int:
    """The host pid of the pod's container process, the first child of `unshare`."""
    task = Path(f"/proc/{node.proc.pid}/task/{node.proc.pid}/children")
    return int(task.read_text().split()[0])


@pytest.mark.trainer
@pytest.mark.slow  # 180 s here: the uninterrupted run, then a preempted one
def test_a_preempted_host_restarts_the_set_which_resumes_to_the_uninterrupted_parameters(
    tmp_path: Path,
) -> None:
    pytest.importorskip("jax", reason="needs jax (test extras: jax[cpu])")
    require_unshare()
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text(RESUMABLE)
    planned = _plan({"source": str(source)})
    policy = planned.jobset["spec"]["failurePolicy"]
    assert [r["action"] for r in policy["rules"]] == ["FailJobSet", "RestartJobSet"]

    def run(root: Path, tick: Any = None) -> Any:
        with (
            running_gcs_emulator() as storage,
            MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as md,
        ):
            cluster = Cluster(root, planned, storage, md.base_url, ["gcsfs"])
            return JobSetController(planned.jobset, cluster.start).run(600, tick=tick)

    whole = run(tmp_path / "whole")
    assert (whole.state, whole.restarts) == ("Completed", 0), explain(whole.pods)
    [expected] = [r for n in whole.pods for r in n.records() if r.get("event") == "done"]

    preempted: list[int] = []

    def preempt(controller: JobSetController) -> None:
        if preempted or controller.outcome.restarts:
            return
        steps = [
            int(r["step"])
            for _, node in controller.running.values()
            for r in node.records()
            if r.get("event") == "checkpoint_written"
        ]
        if max(steps, default=0) >= 3:
            _, node = controller.running[f"{planned.jobset['metadata']['name']}-slice-1-1"]
            os.kill(_container_pid(node), signal.SIGTERM)
            preempted.append(max(steps))

    outcome = run(tmp_path / "preempted", preempt)
    assert (outcome.state, outcome.restarts) == ("Completed", 1), explain(outcome.pods)
    # Every host stopped with 143 at the sync point; the first exit seen failed its slice's
    # Job (BackoffLimitExceeded, backoffLimit 0) and the set's second rule restarted both.
    assert [(code, reason) for *_, code, reason in outcome.job_failures] == [
        (143, "BackoffLimitExceeded")
    ]
    assert len(outcome.pods) == 8
    resumed = [r for n in outcome.pods[4:] for r in n.records() if r.get("event") == "resume"]
    assert sorted(r["rank"] for r in resumed) == [0, 1, 2, 3], explain(outcome.pods[4:])
    assert len({r["step"] for r in resumed}) == 1
    [done] = [r for n in outcome.pods for r in n.records() if r.get("event") == "done"]
    assert done == expected == {"event": "done", "step": 10, "params": expected["params"]}

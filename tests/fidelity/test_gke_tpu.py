"""GKE TPU fidelity: the planned JobSet's pods, run here the way JobSet's controller, the Job
controller and GKE's TPU webhook create them (`tests.fidelity.jobset`, which cites the
source lines it models).

The plan is `trainstack.infra.plan.build_plan` of the bundled `dev-tpu-v6e-gke` stack cut to
two v6e-8 slices (2 hosts of ct6e-standard-4t each, the smallest multi-host v6e slice), so
the set is 2 slices x 2 hosts = 4 pods. Each pod runs the container's `command` + `args`
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
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
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


def _plan(trainer: dict[str, Any] | None = None) -> Planned:
    _, config = load_stack(STACK, None)
    config["trainstack:tpu"]["accelerator_type"] = "v6e-8"
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

    def __init__(self, root: Path, planned: Planned, storage: str, metadata: str) -> None:
        self.root, self.planned, self.storage, self.metadata = root, planned, storage, metadata
        root.mkdir(parents=True, exist_ok=True)
        buckets = [planned.staging_bucket, planned.checkpoint_bucket]
        stage_buckets(storage, buckets, planned.package_uri, planned.sdist)
        self.image = Image(root, planned.sdist, ["jax", "setuptools"])
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

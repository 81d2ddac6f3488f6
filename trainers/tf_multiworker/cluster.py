"""The TensorFlow cluster of this process, without importing TensorFlow.

TensorFlow's strategies read the cluster from `TF_CONFIG` (MultiWorkerMirrored and
ParameterServer through `TFConfigClusterResolver`) or from the TPU runtime
(`TPUClusterResolver`). `tf_cluster` derives the `TF_CONFIG` this process must run with from
the launch shapes `trainstack.trainers.common.cluster` understands:

- `TF_CONFIG` (Vertex distributed jobs, `trainstack local-run`, any TF launcher): used as
  given, except on a Vertex job with Reduction Server (below).
- Vertex `CLUSTER_SPEC` alone: workerpool0 -> chief, workerpool1 -> worker, workerpool2 ->
  ps, workerpool3 -> evaluator (never listed in the cluster).
- Either way, when `CLUSTER_SPEC`'s job runs the Reduction Server image in workerpool2, that
  pool is not a TensorFlow task: Vertex still lists it as `ps` in `TF_CONFIG` (gcp-facts
  3.2: "Third (workerPoolSpecs[2]): Parameter servers, Reduction Server", TF_CONFIG type
  `ps`), but the reducers run Google's image and serve NCCL all-reduce, so they leave the
  cluster and a task in that pool is a `reducer`. MultiWorkerMirrored then asks for NCCL
  all-reduce (`all_reduce_implementation`), which is what Reduction Server serves.
- GKE Indexed Job with more than one pod: workers `<JOB_NAME>-<i>.<TRAINSTACK_HEADLESS_SERVICE>`
  on the coordinator port.
- TPU VM workers (`TPU_WORKER_HOSTNAMES`) for the non-TPU strategies: one worker per host.
- Anything else with one node: no TF_CONFIG (a single local worker).

A multi-node GCE launch carries only the coordinator's address, which is not enough for a
TensorFlow cluster; its startup script must set TF_CONFIG.

`simulated_tpu_chips` reads `TRAINSTACK_SIMULATED_ACCELERATORS`, the switch tests use to run
a target's launch path on a CPU machine: with it, strategy 'tpu' runs the same loop over that
many logical CPU devices (a MirroredStrategy) instead of TPU chips.

`tpu_target` chooses what TPUClusterResolver connects to: `TPU_NAME` when set (resolved
through the Cloud TPU API), the slice's workers as `grpc://<host>:8470` when
`TPU_WORKER_HOSTNAMES` lists more than one host (a multi-host slice with a `-pod` runtime,
trainer on worker 0), else `local` (the TPU chips attached to this VM).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainstack.trainers.common.accelerators import simulated_count
from trainstack.trainers.common.cluster import ClusterInfo, uses_reduction_server

TPU_GRPC_PORT = 8470
"""Port of the TPU runtime's TensorFlow server on each TPU VM worker: the default endpoint
port of TensorFlow's Cloud TPU client (tensorflow/python/tpu/client/client.py,
`_DEFAULT_ENDPOINT_PORT`) and what the Cloud TPU API reports as each worker's
networkEndpoints port for TensorFlow runtimes."""

TPU_POD_FROM_WORKER0_VERIFIED = False
"""Unverified (gcp-facts 1.5 and 9.2): on a multi-host slice with a `-pod` TensorFlow
runtime, one process on worker 0 drives every host, with `TPU_LOAD_LIBRARY=0` so that
process leaves the local chips to the runtime's server. Inferred from Google's
GoogleCloudPlatform/ml-auto-solutions TensorFlow configs (`all_workers=not is_pod`,
`export TPU_LOAD_LIBRARY=0` for pods), not from a tutorial sentence."""

# The TPU trainer counts simulated chips with the node launcher's own reader, so one
# variable means one thing on every target.
simulated_tpu_chips = simulated_count


_VERTEX_POOLS = {
    "workerpool0": "chief",
    "workerpool1": "worker",
    "workerpool2": "ps",
    "workerpool3": "evaluator",
}

REDUCTION_SERVER_ALL_REDUCE = "NCCL"
"""The all-reduce Reduction Server serves: Google's distributed-training page lists "Your
training code uses TensorFlow or PyTorch and ... multi-host data-parallel training with GPUs
using NCCL all-reduce" among its prerequisites (gcp-facts section 4,
https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduction-server).
TensorFlow's collectives use NCCL on GPUs only when asked: `use_nccl = (nccl_ ||
communication_hint == "nccl") && device_type == DEVICE_GPU` (tensorflow/tensorflow
tensorflow/core/common_runtime/collective_param_resolver_local.cc, AssignCollectiveType);
AUTO picks the gRPC ring, which never reaches the reducers."""


@dataclass(frozen=True)
class TFCluster:
    """This process's task in the TensorFlow cluster."""

    tf_config: dict[str, Any] | None
    """The TF_CONFIG to run with; None for a single worker without a cluster."""
    task_type: str
    """chief, worker, ps, evaluator, or reducer (a Vertex Reduction Server replica)."""
    task_index: int
    workers: int
    """Training tasks: chief plus workers."""
    ps: int
    """Parameter server tasks."""
    reduction_server: bool = False
    """Vertex runs Reduction Server replicas beside this cluster (not TensorFlow tasks)."""

    @property
    def is_chief(self) -> bool:
        """The task that writes checkpoints, logs `done` and (for parameter_server) drives
        training: the chief, or worker 0 when the cluster has no chief."""
        if self.tf_config is None:
            return True
        cluster = self.tf_config["cluster"]
        if cluster.get("chief") or cluster.get("master"):
            return self.task_type in ("chief", "master")
        return self.task_type == "worker" and self.task_index == 0

    @property
    def chief_address(self) -> str | None:
        if self.tf_config is None:
            return None
        cluster = self.tf_config["cluster"]
        hosts = cluster.get("chief") or cluster.get("master") or cluster.get("worker") or []
        return str(hosts[0]) if hosts else None


def all_reduce_implementation(reduction_server: bool, gpus: int) -> str:
    """The `tf.distribute.experimental.CommunicationImplementation` name MultiWorkerMirrored
    uses: NCCL when Reduction Server is to carry the all-reduce of GPU workers (see
    `REDUCTION_SERVER_ALL_REDUCE`), else AUTO. NCCL does not run on CPU devices."""
    return REDUCTION_SERVER_ALL_REDUCE if reduction_server and gpus > 0 else "AUTO"


def _single() -> TFCluster:
    return TFCluster(None, "worker", 0, 1, 0)


def _vertex_tf_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The TF_CONFIG Vertex documents for a CLUSTER_SPEC (gcp-facts 3.2): pools by role,
    evaluators outside the cluster."""
    cluster = {
        role: list(spec["cluster"][pool])
        for pool, role in _VERTEX_POOLS.items()
        if spec["cluster"].get(pool) and role != "evaluator"
    }
    task = spec["task"]
    tf_task: dict[str, Any] = {
        "type": _VERTEX_POOLS[str(task["type"])],
        "index": int(task.get("index", 0)),
    }
    if task.get("trial"):
        tf_task["trial"] = task["trial"]
    return {"cluster": cluster, "task": tf_task}


def _from_tf_config(spec: dict[str, Any], reducers: bool) -> TFCluster:
    """The task of a TF_CONFIG; with `reducers`, its `ps` pool is Vertex's Reduction Server
    and leaves the cluster."""
    task = spec["task"]
    task_type = str(task["type"])
    if task_type == "master":
        task_type = "chief"
    if reducers:
        spec = {**spec, "cluster": {k: v for k, v in spec["cluster"].items() if k != "ps"}}
        if task_type == "ps":
            task_type = "reducer"
    cluster = spec["cluster"]
    workers = len(cluster.get("chief") or cluster.get("master") or []) + len(
        cluster.get("worker") or []
    )
    return TFCluster(
        spec,
        task_type,
        int(task.get("index", 0)),
        workers,
        len(cluster.get("ps") or []),
        reducers,
    )


def _workers_cluster(hosts: list[str], index: int) -> TFCluster:
    spec = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    return TFCluster(spec, "worker", index, len(hosts), 0)


def tf_cluster(env: Mapping[str, str], info: ClusterInfo) -> TFCluster:
    """The TensorFlow task of this process; `info` is `resolve_cluster(env)`, which has
    already checked the shapes. Raises ValueError when a multi-node shape lacks the host
    list a TensorFlow cluster needs."""
    vertex = json.loads(env["CLUSTER_SPEC"]) if env.get("CLUSTER_SPEC") else None
    # Only CLUSTER_SPEC carries the job's pools, so only it tells reducers from ps tasks.
    reducers = vertex is not None and uses_reduction_server(vertex)
    if env.get("TF_CONFIG"):
        return _from_tf_config(json.loads(env["TF_CONFIG"]), reducers)
    if info.platform == "vertex" and vertex is not None:
        return _from_tf_config(_vertex_tf_config(vertex), reducers)
    if info.num_nodes <= 1:
        return _single()
    port = info.coordinator_port
    if info.platform == "gke":
        job, service = env.get("JOB_NAME"), env.get("TRAINSTACK_HEADLESS_SERVICE")
        if not (job and service):
            raise ValueError(
                "a multi-pod TensorFlow job on GKE needs JOB_NAME and "
                "TRAINSTACK_HEADLESS_SERVICE to address every pod (or TF_CONFIG)"
            )
        hosts = [f"{job}-{i}.{service}:{port}" for i in range(info.num_nodes)]
        return _workers_cluster(hosts, info.node_rank)
    if info.platform == "tpu_vm":
        names = [h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
        return _workers_cluster([f"{h}:{port}" for h in names], info.node_rank)
    raise ValueError(
        f"a {info.num_nodes}-node TensorFlow job on {info.platform} needs TF_CONFIG listing "
        "every worker (TRAINSTACK_COORDINATOR names only the first)"
    )


def tpu_target(env: Mapping[str, str]) -> str:
    """The `tpu` argument for TPUClusterResolver (see the module docstring)."""
    if env.get("TPU_NAME"):
        return env["TPU_NAME"]
    hosts = [h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) > 1:
        return ",".join(f"grpc://{h}:{TPU_GRPC_PORT}" for h in hosts)
    return "local"

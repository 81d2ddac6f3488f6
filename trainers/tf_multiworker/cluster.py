"""The TensorFlow cluster of this process, without importing TensorFlow.

TensorFlow's strategies read the cluster from `TF_CONFIG` (MultiWorkerMirrored and
ParameterServer through `TFConfigClusterResolver`) or from the TPU runtime
(`TPUClusterResolver`). `tf_cluster` derives the `TF_CONFIG` this process must run with from
the launch shapes `trainers.common.cluster` understands:

- `TF_CONFIG` (Vertex distributed jobs, `trainstack local-run`, any TF launcher): used as is.
- Vertex `CLUSTER_SPEC` alone: workerpool0 -> chief, workerpool1 -> worker, workerpool2 ->
  ps (unless it runs the Reduction Server image, which TensorFlow does not talk to),
  workerpool3 -> evaluator.
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

from trainers.common.accelerators import simulated_count
from trainers.common.cluster import ClusterInfo, uses_reduction_server

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


def _single() -> TFCluster:
    return TFCluster(None, "worker", 0, 1, 0)


def _from_tf_config(spec: dict[str, Any]) -> TFCluster:
    cluster = spec["cluster"]
    task = spec["task"]
    task_type = str(task["type"])
    if task_type == "master":
        task_type = "chief"
    workers = len(cluster.get("chief") or cluster.get("master") or []) + len(
        cluster.get("worker") or []
    )
    return TFCluster(
        spec, task_type, int(task.get("index", 0)), workers, len(cluster.get("ps") or [])
    )


def _from_cluster_spec(spec: dict[str, Any], reduction_server: bool) -> TFCluster:
    cluster: dict[str, list[str]] = {}
    for pool, role in _VERTEX_POOLS.items():
        hosts = spec["cluster"].get(pool) or []
        if hosts and not (role == "ps" and reduction_server) and role != "evaluator":
            cluster[role] = list(hosts)
    task = spec["task"]
    role = _VERTEX_POOLS[str(task["type"])]
    if role == "ps" and reduction_server:
        role = "reducer"
    index = int(task.get("index", 0))
    tf_config: dict[str, Any] = {"cluster": cluster, "task": {"type": role, "index": index}}
    if task.get("trial"):
        tf_config["task"]["trial"] = task["trial"]
    return TFCluster(
        tf_config,
        role,
        index,
        len(cluster.get("chief", [])) + len(cluster.get("worker", [])),
        len(cluster.get("ps", [])),
    )


def _workers_cluster(hosts: list[str], index: int) -> TFCluster:
    spec = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    return TFCluster(spec, "worker", index, len(hosts), 0)


def tf_cluster(env: Mapping[str, str], info: ClusterInfo) -> TFCluster:
    """The TensorFlow task of this process; `info` is `resolve_cluster(env)`, which has
    already checked the shapes. Raises ValueError when a multi-node shape lacks the host
    list a TensorFlow cluster needs."""
    if env.get("TF_CONFIG"):
        return _from_tf_config(json.loads(env["TF_CONFIG"]))
    if info.platform == "vertex" and env.get("CLUSTER_SPEC"):
        spec = json.loads(env["CLUSTER_SPEC"])
        return _from_cluster_spec(spec, uses_reduction_server(spec))
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

"""Which process am I: rank, world and coordinator, read from the launch environment.

Precedence (the first shape present wins):

1. torchrun: `LOCAL_RANK`, `RANK` and `WORLD_SIZE` (plus `LOCAL_WORLD_SIZE`, `GROUP_RANK`,
   `MASTER_ADDR`, `MASTER_PORT`). It describes processes, so it wins over the node-level
   shapes below, which a launcher inside the node turns into torchrun arguments. Vertex sets
   `RANK`/`WORLD_SIZE` per node without `LOCAL_RANK`, which is why `LOCAL_RANK` is required.
2. Vertex `CLUSTER_SPEC`: workerpool0 chief, workerpool1 workers, workerpool2 parameter
   servers or Reduction Server, workerpool3 evaluators; node rank counts pool0 then pool1.
3. `TF_CONFIG` (Vertex distributed jobs, or any TF-style launcher): chief/master, worker, ps,
   evaluator.
4. TPU host: `TPU_WORKER_ID`, `TPU_WORKER_HOSTNAMES` (comma list; entry 0 coordinates), on
   a TPU VM (the startup script) and on a GKE TPU node, where GKE's TPU webhook sets them in
   every pod of an Indexed Job, so they come before `JOB_COMPLETION_INDEX`. With several
   slices (`MEGASCALE_NUM_SLICES` > 1, a JobSet's pods: components/_tpu_jobset.py) the two
   name the host within its slice, `MEGASCALE_SLICE_ID` the slice, and the rank is
   `slice * hosts per slice + worker`, `MEGASCALE_COORDINATOR_ADDRESS` (slice 0's worker 0)
   coordinating: how JAX numbers the processes (jax/_src/clusters/cloud_tpu_cluster.py,
   `BaseTpuCluster.get_process_id` and `get_coordinator_address`).
5. GKE Indexed Job: `JOB_COMPLETION_INDEX`, `TRAINSTACK_NUM_NODES`; the coordinator is pod 0
   behind the headless service, `<JOB_NAME>-0.<TRAINSTACK_HEADLESS_SERVICE>`, unless
   `TRAINSTACK_COORDINATOR` names it.
6. GCE VM started by trainstack's startup script: `TRAINSTACK_NODE_RANK`,
   `TRAINSTACK_NUM_NODES`, `TRAINSTACK_COORDINATOR` (`host` or `host:port`).
7. Otherwise one local process.

The node-level shapes (2-6) describe one process per node: rank = node rank. The coordinator
port comes from the shape when it carries one, else `TRAINSTACK_COORDINATOR_PORT`, else
`MASTER_PORT`, else 29500.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["chief", "worker", "ps", "evaluator", "reducer"]
Platform = Literal["torchrun", "vertex", "gke", "tpu_vm", "gce", "local_single"]
"""`tpu_vm`: a TPU host, a Cloud TPU VM or a GKE TPU node (both TPU VMs, TPU_WORKER_ID set)."""

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    coordinator_address: str
    coordinator_port: int
    role: Role
    platform: Platform
    trial_id: str | None = None

    @property
    def is_chief(self) -> bool:
        return self.rank == 0 and self.role in ("chief", "worker")

    @property
    def trains(self) -> bool:
        """Whether this process is part of the training process group."""
        return self.role in ("chief", "worker")


def _int(env: Mapping[str, str], name: str, *, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(f"{name} is required but not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def _check_index(name: str, value: int, size_name: str, size: int) -> None:
    if size < 1:
        raise ValueError(f"{size_name} must be >= 1, got {size}")
    if not 0 <= value < size:
        raise ValueError(f"{name}={value} must be in [0, {size_name}={size})")


def _split_host_port(hostport: str, name: str, default_port: int) -> tuple[str, int]:
    host, sep, port = hostport.rpartition(":")
    if not sep or "]" in port:
        return hostport, default_port
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError(f"{name}: bad port in {hostport!r}") from None


def _default_port(env: Mapping[str, str]) -> int:
    if env.get("TRAINSTACK_COORDINATOR_PORT"):
        return _int(env, "TRAINSTACK_COORDINATOR_PORT")
    return _int(env, "MASTER_PORT", default=DEFAULT_PORT)


def _json(env: Mapping[str, str], name: str) -> dict[str, Any]:
    try:
        value = json.loads(env[name])
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object")  # noqa: TRY004
    return value


def trial_id(env: Mapping[str, str]) -> str | None:
    """The Vertex tuning trial this replica runs (`task.trial` of CLUSTER_SPEC or TF_CONFIG),
    else None."""
    for name in ("CLUSTER_SPEC", "TF_CONFIG"):
        if env.get(name):
            try:
                trial = json.loads(env[name]).get("task", {}).get("trial")
            except (json.JSONDecodeError, AttributeError):
                return None
            return str(trial) if trial not in (None, "") else None
    return None


def _node_level(
    *,
    node_rank: int,
    num_nodes: int,
    coordinator: tuple[str, int],
    role: Role,
    platform: Platform,
    trial_id: str | None,
) -> ClusterInfo:
    return ClusterInfo(
        rank=node_rank,
        world_size=num_nodes,
        local_rank=0,
        local_world_size=1,
        node_rank=node_rank,
        num_nodes=num_nodes,
        coordinator_address=coordinator[0],
        coordinator_port=coordinator[1],
        role=role,
        platform=platform,
        trial_id=trial_id,
    )


def _from_torchrun(env: Mapping[str, str]) -> ClusterInfo:
    rank = _int(env, "RANK")
    world = _int(env, "WORLD_SIZE")
    _check_index("RANK", rank, "WORLD_SIZE", world)
    local_rank = _int(env, "LOCAL_RANK")
    local_world = _int(env, "LOCAL_WORLD_SIZE", default=world)
    _check_index("LOCAL_RANK", local_rank, "LOCAL_WORLD_SIZE", local_world)
    if world % local_world:
        raise ValueError(f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world}")
    num_nodes = world // local_world
    node_rank = _int(env, "GROUP_RANK", default=rank // local_world)
    _check_index("GROUP_RANK", node_rank, "WORLD_SIZE/LOCAL_WORLD_SIZE", num_nodes)
    return ClusterInfo(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=num_nodes,
        coordinator_address=env.get("MASTER_ADDR") or "127.0.0.1",
        coordinator_port=_int(env, "MASTER_PORT", default=DEFAULT_PORT),
        role="chief" if rank == 0 else "worker",
        platform="torchrun",
        trial_id=trial_id(env),
    )


def _pool(cluster: Mapping[str, Any], key: str, name: str) -> list[str]:
    hosts = cluster.get(key) or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ValueError(f"{name}: cluster.{key} must be a list of 'host:port' strings")
    return hosts


def _task(spec: Mapping[str, Any], name: str) -> tuple[str, int]:
    task = spec.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise ValueError(f"{name}: task.type is missing")
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise ValueError(f"{name}: task.index must be an integer") from None
    return str(task["type"]), index


def uses_reduction_server(spec: Mapping[str, Any]) -> bool:
    """Whether a Vertex CLUSTER_SPEC's workerpool2 runs the Reduction Server image."""
    pools = (spec.get("job") or {}).get("worker_pool_specs") or (spec.get("job") or {}).get(
        "workerPoolSpecs"
    )
    if not isinstance(pools, list) or len(pools) < 3 or not isinstance(pools[2], dict):
        return False
    container = pools[2].get("container_spec") or pools[2].get("containerSpec") or {}
    image = container.get("image_uri") or container.get("imageUri") or ""
    return "reductionserver" in str(image)


def _from_cluster_spec(env: Mapping[str, str]) -> ClusterInfo:
    name = "CLUSTER_SPEC"
    spec = _json(env, name)
    cluster = spec.get("cluster")
    if not isinstance(cluster, dict):
        raise ValueError(f"{name}: cluster is missing")  # noqa: TRY004
    chief = _pool(cluster, "workerpool0", name)
    workers = _pool(cluster, "workerpool1", name)
    if len(chief) != 1:
        raise ValueError(f"{name}: cluster.workerpool0 must hold exactly one host (the chief)")
    task_type, index = _task(spec, name)
    default_port = _default_port(env)
    coordinator = _split_host_port(chief[0], name, default_port)
    trial = spec.get("task", {}).get("trial") or None
    pools: dict[str, tuple[Role, list[str]]] = {
        "workerpool0": ("chief", chief),
        "workerpool1": ("worker", workers),
        "workerpool2": (
            "reducer" if uses_reduction_server(spec) else "ps",
            _pool(cluster, "workerpool2", name),
        ),
        "workerpool3": ("evaluator", _pool(cluster, "workerpool3", name)),
    }
    if task_type not in pools:
        raise ValueError(f"{name}: task.type {task_type!r} is not one of {', '.join(pools)}")
    role, hosts = pools[task_type]
    _check_index(f"{name} task.index", index, f"len(cluster.{task_type})", len(hosts))
    num_nodes = len(chief) + len(workers)
    if role in ("chief", "worker"):
        node_rank = index + (len(chief) if role == "worker" else 0)
        return _node_level(
            node_rank=node_rank,
            num_nodes=num_nodes,
            coordinator=coordinator,
            role=role,
            platform="vertex",
            trial_id=str(trial) if trial else None,
        )
    # Servers and evaluators are outside the training group; they know their pool index only.
    return ClusterInfo(
        rank=index,
        world_size=len(hosts),
        local_rank=0,
        local_world_size=1,
        node_rank=index,
        num_nodes=num_nodes,
        coordinator_address=coordinator[0],
        coordinator_port=coordinator[1],
        role=role,
        platform="vertex",
        trial_id=str(trial) if trial else None,
    )


def _from_tf_config(env: Mapping[str, str]) -> ClusterInfo:
    name = "TF_CONFIG"
    spec = _json(env, name)
    cluster = spec.get("cluster")
    if not isinstance(cluster, dict):
        raise ValueError(f"{name}: cluster is missing")  # noqa: TRY004
    chief = _pool(cluster, "chief", name) or _pool(cluster, "master", name)
    workers = _pool(cluster, "worker", name)
    task_type, index = _task(spec, name)
    trial = spec.get("task", {}).get("trial") or None
    trial_id = str(trial) if trial else None
    hosts0 = chief or workers
    if not hosts0:
        raise ValueError(f"{name}: cluster has neither chief nor worker hosts")
    coordinator = _split_host_port(hosts0[0], name, _default_port(env))
    num_nodes = len(chief) + len(workers)
    if task_type in ("chief", "master"):
        _check_index(f"{name} task.index", index, "len(cluster.chief)", len(chief))
        node_rank, role = index, "chief"
    elif task_type == "worker":
        _check_index(f"{name} task.index", index, "len(cluster.worker)", len(workers))
        node_rank = len(chief) + index
        role = "chief" if node_rank == 0 else "worker"
    elif task_type == "ps":
        ps = _pool(cluster, "ps", name)
        _check_index(f"{name} task.index", index, "len(cluster.ps)", len(ps))
        return ClusterInfo(
            index, len(ps), 0, 1, index, num_nodes, *coordinator, "ps", "vertex", trial_id
        )
    elif task_type == "evaluator":
        # Evaluators are never listed in TF_CONFIG.cluster.
        return ClusterInfo(
            index, 1, 0, 1, index, num_nodes, *coordinator, "evaluator", "vertex", trial_id
        )
    else:
        raise ValueError(f"{name}: task.type {task_type!r} is not chief, worker, ps or evaluator")
    return _node_level(
        node_rank=node_rank,
        num_nodes=num_nodes,
        coordinator=coordinator,
        role=role,  # type: ignore[arg-type]
        platform="vertex",
        trial_id=trial_id,
    )


def _from_gke(env: Mapping[str, str]) -> ClusterInfo:
    index = _int(env, "JOB_COMPLETION_INDEX")
    num = _int(env, "TRAINSTACK_NUM_NODES")
    _check_index("JOB_COMPLETION_INDEX", index, "TRAINSTACK_NUM_NODES", num)
    port = _default_port(env)
    if env.get("TRAINSTACK_COORDINATOR"):
        coordinator = _split_host_port(
            env["TRAINSTACK_COORDINATOR"], "TRAINSTACK_COORDINATOR", port
        )
    else:
        job, service = env.get("JOB_NAME"), env.get("TRAINSTACK_HEADLESS_SERVICE")
        if num > 1 and not (job and service):
            raise ValueError(
                "GKE Indexed Job with TRAINSTACK_NUM_NODES > 1 needs JOB_NAME and "
                "TRAINSTACK_HEADLESS_SERVICE (or TRAINSTACK_COORDINATOR) to find pod 0"
            )
        # Pods of an Indexed Job are named <job>-<index>; with subdomain=<service> pod 0 is
        # resolvable as <job>-0.<service>.
        coordinator = (f"{job}-0.{service}" if job and service else "127.0.0.1", port)
    return _node_level(
        node_rank=index,
        num_nodes=num,
        coordinator=coordinator,
        role="chief" if index == 0 else "worker",
        platform="gke",
        trial_id=None,
    )


def _from_tpu_vm(env: Mapping[str, str]) -> ClusterInfo:
    worker = _int(env, "TPU_WORKER_ID")
    hosts = [h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if not hosts:
        hosts = ["127.0.0.1"] if worker == 0 else []
    _check_index("TPU_WORKER_ID", worker, "len(TPU_WORKER_HOSTNAMES)", len(hosts))
    # An empty value is what the downward API gives for a label the pod lacks: one slice.
    slices = _int(env, "MEGASCALE_NUM_SLICES", default=1)
    slice_id = _int(env, "MEGASCALE_SLICE_ID", default=0)
    _check_index("MEGASCALE_SLICE_ID", slice_id, "MEGASCALE_NUM_SLICES", slices)
    port = _default_port(env)
    coordinator = hosts[0]
    if slices > 1:
        address = env.get("MEGASCALE_COORDINATOR_ADDRESS")
        if not address:
            raise ValueError(
                f"MEGASCALE_NUM_SLICES={slices} needs MEGASCALE_COORDINATOR_ADDRESS "
                "(slice 0's worker 0)"
            )
        # JAX keeps the host only and dials its own port (cloud_tpu_cluster.py).
        coordinator = _split_host_port(address, "MEGASCALE_COORDINATOR_ADDRESS", port)[0]
    rank = slice_id * len(hosts) + worker
    return _node_level(
        node_rank=rank,
        num_nodes=slices * len(hosts),
        coordinator=(coordinator, port),
        role="chief" if rank == 0 else "worker",
        platform="tpu_vm",
        trial_id=None,
    )


def _from_gce(env: Mapping[str, str]) -> ClusterInfo:
    node = _int(env, "TRAINSTACK_NODE_RANK")
    num = _int(env, "TRAINSTACK_NUM_NODES")
    _check_index("TRAINSTACK_NODE_RANK", node, "TRAINSTACK_NUM_NODES", num)
    coord = env.get("TRAINSTACK_COORDINATOR")
    if not coord:
        if num > 1:
            raise ValueError("TRAINSTACK_COORDINATOR is required when TRAINSTACK_NUM_NODES > 1")
        coord = "127.0.0.1"
    return _node_level(
        node_rank=node,
        num_nodes=num,
        coordinator=_split_host_port(coord, "TRAINSTACK_COORDINATOR", _default_port(env)),
        role="chief" if node == 0 else "worker",
        platform="gce",
        trial_id=None,
    )


def resolve_cluster(env: Mapping[str, str] = os.environ) -> ClusterInfo:
    """Read this process's place in the job from `env`; see the module docstring for order.

    Raises ValueError naming the variable when a shape is inconsistent.
    """
    if env.get("LOCAL_RANK") is not None and "RANK" in env and "WORLD_SIZE" in env:
        return _from_torchrun(env)
    if env.get("CLUSTER_SPEC"):
        return _from_cluster_spec(env)
    if env.get("TF_CONFIG"):
        return _from_tf_config(env)
    if env.get("TPU_WORKER_ID"):
        return _from_tpu_vm(env)
    if env.get("JOB_COMPLETION_INDEX"):
        return _from_gke(env)
    if env.get("TRAINSTACK_NODE_RANK"):
        return _from_gce(env)
    return ClusterInfo(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        num_nodes=1,
        coordinator_address="127.0.0.1",
        coordinator_port=_default_port(env),
        role="chief",
        platform="local_single",
        trial_id=None,
    )

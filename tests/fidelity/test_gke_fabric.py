"""GKE fidelity with a GPUDirect fabric: the planned Indexed Job of an A3 Mega (TCPXO) and an
A3 Ultra (RDMA) stack run as two pods of two simulated GPUs (`tests.fidelity.test_gke`'s
`Cluster`, run as GKE runs them), with the host folders the fabric's installer fills mounted
where the pod mounts them, checking the NCCL settings every rank of the world of four sees.

The plans: the bundled `dev-h100-gke` stack (2 x a3-megagpu-8g) and the same stack on
a3-ultragpu-8g in us-central1-b, their trainer cut to a few steps of the MLP on digits.

What stands in for the node, and why:

- The fabric's hostPath volumes under /usr/local (the node's /home/kubernetes/bin/nvidia at
  /usr/local/nvidia, /home/kubernetes/bin/gib at /usr/local/gib) are folders of a fake node
  disk, mounted where the trainer container mounts them (the pod's mount namespace gets a
  /usr/local of its own: this machine's entries plus those mounts). The TCPXO installer's
  folder holds its tuner config (what the pod script waits for), the gIB installer's its
  `scripts/set_nccl_env.sh`. The other fabric mounts (/dev/aperture_devices) are left out:
  nothing on a CPU reads them.
- The fake set_nccl_env.sh exports what Cluster Toolkit says the real one sets for A3 Ultra
  with gIB v1.1.0 (cluster-toolkit @1047080 examples/machine-learning/a3-ultragpu-8g/
  nemo-framework/Dockerfile: "Set the following to match what is in
  /usr/local/gib/scripts/set_nccl_env.sh", its ENV lines); the script itself ships in the
  installer image, not in a stored source.
- The tcpxo-daemon sidecar does not run: it needs the GPUs and the NICs. No NCCL runs either
  (gloo on CPU), so this checks what each rank is given, not that NCCL uses it.
- Each rank reports its environment through a `sitecustomize` the test puts on PYTHONPATH
  (the same planting as test_gke's rank-3 bug): a file per process that has RANK.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.components.test_tpu_startup import MetadataServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.nodes import Node, events, explain, require_unshare
from tests.fidelity.test_gke import TOKEN, TRAINER, Cluster, PlannedJob, _planned
from trainstack.infra.plan import build_plan, load_stack

STACK = "dev-h100-gke"
ULTRA = {"machine_type": "a3-ultragpu-8g", "zone": "us-central1-b"}

REPORT_ENV = """import json, os
if "RANK" in os.environ:
    seen = {k: v for k, v in os.environ.items() if k.startswith("NCCL_") or k == "LD_LIBRARY_PATH"}
    path = os.path.join(os.path.dirname(__file__), "rank-" + os.environ["RANK"] + ".json")
    with open(path, "x") as out:
        json.dump(seen, out)
"""
"""A `sitecustomize` for every pod: each rank writes the NCCL settings it starts with to a file
of its own beside it (the ranks of a pod share its output, where lines may interleave)."""

GIB_SET_NCCL_ENV = """export NCCL_NET=gIB
export NCCL_CROSS_NIC=0
export NCCL_NET_GDR_LEVEL=PIX
export NCCL_P2P_NET_CHUNKSIZE=131072
export NCCL_NVLS_CHUNKSIZE=524288
export NCCL_IB_ADAPTIVE_ROUTING=1
export NCCL_IB_QPS_PER_CONNECTION=4
export NCCL_IB_TC=52
export NCCL_IB_FIFO_TC=84
export NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config_a3u.txtpb
"""
"""The node's /home/kubernetes/bin/gib/scripts/set_nccl_env.sh (see the module docstring)."""

NODE_FILES = {
    "/home/kubernetes/bin/nvidia/lib64/a3plus_tuner_config.textproto": "# the tuner config\n",
    "/home/kubernetes/bin/gib/scripts/set_nccl_env.sh": GIB_SET_NCCL_ENV,
}
"""What the installers leave on the node (nccl-tcpxo-installer.yaml.tftpl copies
/var/lib/tcpxo/lib64 into /home/kubernetes/bin/nvidia/lib64; the gIB installer /var/lib/gib
into /home/kubernetes/bin/gib)."""


def _plan(gpu_cluster: dict[str, Any] | None = None) -> PlannedJob:
    _, config = load_stack(STACK, None)
    config["trainstack:trainer"] = {**config["trainstack:trainer"], **TRAINER, "steps": 4}
    config["trainstack:gpu_cluster"] = {**config["trainstack:gpu_cluster"], **(gpu_cluster or {})}
    return _planned(build_plan(STACK, config))


def node_mounts(planned: PlannedJob, root: Path) -> dict[Path, str]:
    """`binds` for `tests.fidelity.nodes.start_node` that give the pod a /usr/local of its
    own: a folder of links to this machine's /usr/local entries (mounted aside first) plus,
    for each hostPath volume the trainer container mounts under /usr/local, a link to that
    path on the fake node disk under `root`."""
    spec = planned.job["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    [container] = spec["containers"]
    disk, real, usr_local = root / "node-disk", root / "real-usr-local", root / "usr-local"
    for path, text in NODE_FILES.items():
        (disk / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (disk / path.lstrip("/")).write_text(text)
    real.mkdir()
    usr_local.mkdir()
    for entry in os.listdir("/usr/local"):
        (usr_local / entry).symlink_to(real / entry)
    mounted = []
    for mount in container["volumeMounts"]:
        parent, _, name = mount["mountPath"].rpartition("/")
        if mount["name"] in host_paths and parent == "/usr/local":
            (usr_local / name).symlink_to(disk / host_paths[mount["name"]].lstrip("/"))
            mounted.append(mount["mountPath"])
    assert mounted, "the plan's pods mount nothing under /usr/local"
    return {Path("/usr/local"): str(real), usr_local: "/usr/local"}


@pytest.fixture
def fakes() -> Iterator[tuple[str, str]]:
    require_unshare()
    with (
        running_gcs_emulator() as storage,
        MetadataServer({"instance/service-accounts/default/token": json.dumps(TOKEN)}) as metadata,
    ):
        yield storage, metadata.base_url


def _run_world(tmp_path: Path, planned: PlannedJob, fakes: tuple[str, str]) -> list[Node]:
    cluster = Cluster(tmp_path / "cluster", planned, *fakes)
    (tmp_path / "report-env").mkdir()
    (tmp_path / "report-env" / "sitecustomize.py").write_text(REPORT_ENV)
    binds = node_mounts(planned, tmp_path)
    env = {"PYTHONPATH": str(tmp_path / "report-env")}
    pods = [cluster.start(i, None, env, binds) for i in range(2)]
    codes = [pod.wait(240) for pod in pods]
    assert codes == [0, 0], explain(pods)
    [done] = events(pods, "done")
    assert (done["world_size"], done["step"]) == (4, 4)
    return pods


def _rank_env(tmp_path: Path) -> dict[int, dict[str, str]]:
    reports = sorted((tmp_path / "report-env").glob("rank-*.json"))
    return {int(p.stem.removeprefix("rank-")): json.loads(p.read_text()) for p in reports}


A3_MEGA_RANK_ENV = {
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    # XPK tcpxo_decorator.py update_gpu_containers.
    "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
    # container-engine-accelerators gpudirect-tcpxo/README.md, Jan 9, 2026 (installer
    # v1.0.15): its NCCL configs, the library folder the pod's /usr/local/nvidia/lib64.
    "NCCL_FASTRAK_CTRL_DEV": "eth0",
    "NCCL_FASTRAK_IFNAME": "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_CROSS_NIC": "0",
    "NCCL_PROTO": "Simple,LL128",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
    "NCCL_TUNER_CONFIG_PATH": "/usr/local/nvidia/lib64/a3plus_tuner_config.textproto",
    "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": (
        "/usr/local/nvidia/lib64/a3plus_guest_config.textproto"
    ),
    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_FASTRAK_NUM_FLOWS": "2",
    "NCCL_FASTRAK_USE_SNAP": "1",
    "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
    "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
    "NCCL_BUFFSIZE": "8388608",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
    "NCCL_FASTRAK_USE_LLCM": "1",
    "NCCL_NVLS_ENABLE": "1",
    "NCCL_DEBUG": "WARN",
    "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV,COLL,GRAPH",
}


@pytest.mark.trainer
def test_a3_mega_ranks_see_the_tcpxo_release_settings(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan()
    pods = _run_world(tmp_path, planned, fakes)
    assert _rank_env(tmp_path) == dict.fromkeys(range(4), A3_MEGA_RANK_ENV)
    for pod in pods:
        assert "waiting for" not in pod.output()


@pytest.mark.trainer
def test_a3_ultra_ranks_see_gibs_settings_from_the_node(
    tmp_path: Path, fakes: tuple[str, str]
) -> None:
    planned = _plan(ULTRA)
    pods = _run_world(tmp_path, planned, fakes)
    expected = {
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        # NCCL_NET=gIB from the pod's env, the rest from the node's set_nccl_env.sh.
        **{
            name: value
            for name, _, value in (
                line.removeprefix("export ").partition("=")
                for line in GIB_SET_NCCL_ENV.splitlines()
            )
        },
    }
    assert _rank_env(tmp_path) == dict.fromkeys(range(4), expected)
    for pod in pods:
        assert "trainstack-pod: sourcing /usr/local/gib/scripts/set_nccl_env.sh" in pod.output()

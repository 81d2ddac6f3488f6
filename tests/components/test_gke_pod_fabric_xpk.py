"""The GPUDirect fabric's pod pieces (`trainstack.components._pod_fabric`) against what XPK's
workload decorators render for the same machine (AI-Hypercomputer/xpk @367c838,
src/xpk/core/workload_decorators/tcpxo_decorator.py and rdma_decorator.py, the functions
`xpk_tcpxo` and `xpk_rdma` below transcribe line by line), field by field: the pod
annotations, tolerations, volumes, the sidecar's fields, the trainer container's mounts and
environment. XPK decorates a pod template that has none of these (workload.py
`A3_GPU_WORKLOAD_CREATE_YAML`: no volumes, no annotations but its own), so the decorators run
on trainstack's Job without the fabric and without its /dev/shm volume, and every field where
the result differs from trainstack's Job with the fabric must be one of `TCPXO_DIFFERENCES` /
`RDMA_DIFFERENCES`, each with its reason, and each of those must differ. No XPK golden runs
these decorators (its goldens, now recipes/*.md, create no GPU workload: the GPU ones only
create clusters, Cluster_create_with_gb200-4.md).

Where trainstack differs from XPK it follows Google's own manifests, held to them at the end
(`test_where_xpk_differs_google_agrees`): GoogleCloudPlatform/container-engine-accelerators
@992db812 gpudirect-tcpxo/nccl-test-latest.yaml and gpudirect-rdma/nccl-test.yaml.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest

from trainstack.components._kubernetes_job_manifests import manifests
from trainstack.components._pod_fabric import PodFabric
from trainstack.components.a100_cluster.gke_fabric import (
    k8s_network_names,
    pod_fabric_for,
)
from trainstack.components.catalog.gpu_fabric import gke_fabric

INTERFACES = "networking.gke.io/interfaces"

# -- XPK's decorators, transcribed (tcpxo_decorator.py, rdma_decorator.py @367c838) --

XPK_RXDM = "v1.0.12"
"""tcpxo_decorator.py:22 `rxdm = 'v1.0.12'`."""


def _xpk_interfaces(sub_networks: list[str]) -> str:
    # tcpxo_decorator.py:65-71 and rdma_decorator.py:56-62 `get_interfaces_entry`.
    entries = ",\n".join(
        f'    {{"interfaceName":"eth{i}","network":"{network}"}}'
        for i, network in enumerate(sub_networks)
    )
    return f"[\n{entries}\n]"


def _xpk_start(job: dict[str, Any]) -> dict[str, Any]:
    # tcpxo_decorator.py:25-35 `decorate_job` / rdma_decorator.py:35-45: setdefault the paths.
    template = job["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})
    spec = template["spec"]
    spec.setdefault("tolerations", [])
    spec.setdefault("volumes", [])
    return spec


USER_WORKLOAD = {
    "key": "user-workload",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
"""tcpxo_decorator.py:106-114, rdma_decorator.py:95-103 `add_tolerations`."""


def xpk_tcpxo(job: dict[str, Any], sub_networks: list[str]) -> dict[str, Any]:
    """tcpxo_decorator.py:25-43 `decorate_job`."""
    spec = _xpk_start(job)
    # :74-87 get_tcpxo_deamon_entry, :90-103 add_annotations.
    devices = [f"/dev/nvidia{i}" for i in range(8)]
    devices += ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dmabuf_import_helper"]
    job["spec"]["template"]["metadata"]["annotations"].update(
        {
            "devices.gke.io/container.tcpxo-daemon": "".join(f"- path: {d}\n" for d in devices),
            "networking.gke.io/default-interface": "eth0",
            INTERFACES: _xpk_interfaces(sub_networks),
        }
    )
    # :117-132 add_volumes.
    spec["volumes"] += [
        {"name": "libraries", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {"name": "sys", "hostPath": {"path": "/sys"}},
        {"name": "proc-sys", "hostPath": {"path": "/proc/sys"}},
        {"name": "aperture-devices", "hostPath": {"path": "/dev/aperture_devices"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}},
    ]
    spec["tolerations"].append(dict(USER_WORKLOAD))
    # :135-160 add_tcpxo_daemon_container.
    spec.setdefault("initContainers", []).append(
        {
            "name": "tcpxo-daemon",
            "image": f"us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:{XPK_RXDM}",
            "imagePullPolicy": "Always",
            "restartPolicy": "Always",
            "command": ["/bin/sh", "-c"],
            "args": [
                "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
                "/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics=8 --uid= "
                "--alsologtostderr"
            ],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
            "volumeMounts": [
                {"name": "libraries", "mountPath": "/usr/local/nvidia"},
                {"name": "sys", "mountPath": "/hostsysfs"},
                {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
            ],
            "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
        }
    )
    # :163-182 update_gpu_containers (every container with an nvidia.com/gpu limit).
    for container in spec["containers"]:
        if "nvidia.com/gpu" in container.get("resources", {}).get("limits", {}):
            container.setdefault("env", []).extend(
                [
                    {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
                    {
                        "name": "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY",
                        "value": "/dev/aperture_devices",
                    },
                ]
            )
            container.setdefault("volumeMounts", []).extend(
                [
                    {"name": "aperture-devices", "mountPath": "/dev/aperture_devices"},
                    {"name": "libraries", "mountPath": "/usr/local/nvidia"},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ]
            )
    return job


def xpk_rdma(job: dict[str, Any], sub_networks: list[str]) -> dict[str, Any]:
    """rdma_decorator.py:21-53 `decorate_jobset`, for one replicated job."""
    spec = _xpk_start(job)
    # :65-74 add_annotations.
    job["spec"]["template"]["metadata"]["annotations"].update(
        {
            "networking.gke.io/default-interface": "eth0",
            INTERFACES: _xpk_interfaces(sub_networks),
        }
    )
    # :77-92 add_volumes.
    spec["volumes"] += [
        {"name": "library-dir-host", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    spec["tolerations"].append(dict(USER_WORKLOAD))
    # :106-121 update_gpu_containers.
    for container in spec["containers"]:
        if "nvidia.com/gpu" in container.get("resources", {}).get("limits", {}):
            container.setdefault("env", []).append(
                {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}
            )
            container.setdefault("volumeMounts", []).extend(
                [
                    {"name": "library-dir-host", "mountPath": "/usr/local/nvidia"},
                    {"name": "gib", "mountPath": "/usr/local/gib"},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ]
            )
    return job


def xpk_sub_networks(machine: str) -> list[str]:
    """What XPK's `get_cluster_subnetworks` (src/xpk/core/network.py:240-254) reads from the
    cluster: the names of `kubectl get GKENetworkParamSet`, which kubectl lists sorted by
    name; here the cluster's param sets are the ones trainstack creates."""
    fabric = gke_fabric(machine, "d", "us-central1-b")
    assert fabric is not None
    return sorted(name for name, _, _, _ in k8s_network_names(fabric))


# -- The comparison --


def _job(fabric: PodFabric | None) -> dict[str, Any]:
    return manifests(
        job_name="exp-42-train",
        node_count=2,
        gpus_per_node=8,
        image="pytorch/pytorch:2",
        package_uri="gs://b/trainers/t.tar.gz",
        args=["python3", "-m", "trainstack.trainers.node", "trainstack.trainers.torch_ddp"],
        labels={},
        fabric=fabric,
    )["job"]


def _without_shm(job: dict[str, Any]) -> dict[str, Any]:
    """XPK's pod template: trainstack's Job without its own /dev/shm volume and mount."""
    job = copy.deepcopy(job)
    spec = job["spec"]["template"]["spec"]
    assert [v["name"] for v in spec.pop("volumes")] == ["dshm"]
    for container in spec["containers"]:
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "dshm"]
    return job


def _by(items: list[Mapping[str, Any]], key: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in items:
        assert item[key] not in found, f"two {key} {item[key]!r}"
        found[item[key]] = item
    return found


def _annotation(key: str, value: str) -> Any:
    return json.loads(value) if key == INTERFACES else value


def fields(job: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """Every field a fabric decorates, by (kind, name): annotations (the interfaces parsed as
    JSON), tolerations by key, volumes by name, each sidecar field, the trainer container's
    mounts and environment by name; and the rest of the pod spec as one field."""
    template = job["spec"]["template"]
    spec = dict(template["spec"])
    [container] = spec.pop("containers")
    out: dict[tuple[str, str], Any] = {}
    for key, value in template["metadata"].get("annotations", {}).items():
        out["annotation", key] = _annotation(key, value)
    for toleration in spec.pop("tolerations", []):
        out["toleration", toleration["key"]] = toleration
    for name, volume in _by(spec.pop("volumes", []), "name").items():
        out["volume", name] = volume
    for sidecar in spec.pop("initContainers", []):
        for field, value in sidecar.items():
            out["sidecar", field] = value
    container = dict(container)
    for name, mount in _by(container.pop("volumeMounts", []), "name").items():
        out["mount", name] = mount
    for name, item in _by(container.pop("env"), "name").items():
        out["env", name] = item
    out["container", "rest"] = container
    out["pod", "rest"] = spec
    return out


def differing(ours: dict[str, Any], xpk: dict[str, Any]) -> set[tuple[str, str]]:
    a, b = fields(ours), fields(xpk)
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


RELEASE_ENV = (
    "the NCCL configs of Google's TCPXO release (CEA gpudirect-tcpxo/README.md, Jan 9, 2026): "
    "XPK leaves them to the workload's own command (xpk examples/nccl/nccl-a3mega.sh runs "
    "Google's demo script, which sources the installer's nccl-env-profile.sh); trainstack's "
    "launcher is not Google's script, so the pod carries them"
)
TCPXO_DIFFERENCES: dict[tuple[str, str], str] = {
    ("annotation", INTERFACES): (
        "XPK numbers the cluster's GKENetworkParamSets from eth0 in name order, which puts a "
        "GPU network on eth0; trainstack keeps eth0 on the default network and vpc1..vpc8 on "
        "eth1..eth8, as Google's manifest (CEA nccl-test-latest.yaml) and CTK's "
        "enable-tcpxo-in-workload.py write it and NCCL_FASTRAK_IFNAME=eth1..eth8 expects"
    ),
    ("toleration", "user-workload"): (
        "XPK's blueprints taint their GPU pools user-workload=true; trainstack's GPU pool "
        "carries only the nvidia.com/gpu taint, which the Job tolerates already"
    ),
    ("volume", "dshm"): (
        "trainstack's own memory-backed /dev/shm (shm_size_gib, default 32 GiB) where XPK's "
        "decorator adds one of 128Gi"
    ),
    ("sidecar", "image"): (
        "tcpgpudmarxd-dev:v1.0.21, the daemon of the installer release trainstack installs "
        "(v1.0.15, CEA README Jan 9, 2026: 'The tcpxo-daemon version is coupled with the NCCL "
        "plugin installer version'); XPK pins v1.0.12, the Oct 18, 2024 release's"
    ),
    ("sidecar", "args"): (
        "`--num_hops=2` only: CEA README retired --num_nics (Nov 19, 2025) and --uid= "
        "--alsologtostderr (Aug 21, 2025); CEA nccl-test-latest.yaml @992db812"
    ),
    ("sidecar", "env"): (
        "HEALTH_CHECK_LOG_FILE for the startup probe (CEA best-practice.md 'Setup Startup "
        "Probe for the TCPXO-daemon Sidecar')"
    ),
    ("sidecar", "startupProbe"): (
        "CEA best-practice.md's probe: the trainer starts once the daemon has initialized"
    ),
    **{
        ("env", name): RELEASE_ENV
        for name in (
            "NCCL_FASTRAK_CTRL_DEV",
            "NCCL_FASTRAK_IFNAME",
            "NCCL_SOCKET_IFNAME",
            "NCCL_CROSS_NIC",
            "NCCL_PROTO",
            "NCCL_MIN_NCHANNELS",
            "NCCL_TUNER_PLUGIN",
            "NCCL_TUNER_CONFIG_PATH",
            "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_NVLSTREE_MAX_CHUNKSIZE",
            "NCCL_P2P_NET_CHUNKSIZE",
            "NCCL_P2P_PCI_CHUNKSIZE",
            "NCCL_P2P_NVL_CHUNKSIZE",
            "NCCL_FASTRAK_NUM_FLOWS",
            "NCCL_FASTRAK_USE_SNAP",
            "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS",
            "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL",
            "NCCL_BUFFSIZE",
            "NCCL_NET_GDR_LEVEL",
            "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING",
            "NCCL_FASTRAK_USE_LLCM",
            "NCCL_NVLS_ENABLE",
            "NCCL_DEBUG",
            "NCCL_DEBUG_SUBSYS",
        )
    },
    ("env", "TRAINSTACK_NCCL_PLUGIN_FILES"): (
        "the pod script waits for the installer's tuner config before the launcher: a pod can "
        "start on a new node before the installer DaemonSet has run, and NCCL aborts without it"
    ),
}
RDMA_DIFFERENCES: dict[tuple[str, str], str] = {
    ("annotation", INTERFACES): (
        "XPK numbers the cluster's GKENetworkParamSets from eth0 in name order (gvnic-1, "
        "rdma-0..7 on eth0..eth8); trainstack attaches rdma-0..rdma-7 as eth2..eth9 with eth0 "
        "on the default network, as Google's manifest (CEA gpudirect-rdma/nccl-test.yaml) and "
        "CTK's nccl-jobset-example.yaml write it"
    ),
    ("toleration", "user-workload"): TCPXO_DIFFERENCES["toleration", "user-workload"],
    ("volume", "dshm"): (
        "trainstack's own memory-backed /dev/shm (shm_size_gib, default 32 GiB) where XPK's "
        "decorator adds one without a size limit"
    ),
    ("env", "NCCL_NET"): (
        "gIB forced as CTK's nccl-jobset-example.yaml and xpk examples/nccl/nccl-a3ultra.sh do "
        "before sourcing set_nccl_env.sh; XPK's decorator leaves both to the workload's command"
    ),
    ("env", "TRAINSTACK_NCCL_ENV_SCRIPT"): (
        "the pod script sources /usr/local/gib/scripts/set_nccl_env.sh before the launcher, as "
        "Google's manifests do in their command (CEA gpudirect-rdma/nccl-test.yaml)"
    ),
    ("env", "TRAINSTACK_NCCL_PLUGIN_FILES"): (
        "the pod script waits for the installer's set_nccl_env.sh before sourcing it"
    ),
}


@pytest.mark.parametrize(
    ("machine", "decorate", "expected"),
    [
        ("a3-megagpu-8g", xpk_tcpxo, TCPXO_DIFFERENCES),
        ("a3-ultragpu-8g", xpk_rdma, RDMA_DIFFERENCES),
        ("a4-highgpu-8g", xpk_rdma, RDMA_DIFFERENCES),
    ],
)
def test_pod_fabric_agrees_with_xpk_but_for_the_listed_differences(
    machine: str, decorate: Any, expected: dict[tuple[str, str], str]
) -> None:
    fabric = gke_fabric(machine, "d", "us-central1-b")
    assert fabric is not None
    ours = _job(pod_fabric_for(fabric, 8))
    xpk = decorate(_without_shm(_job(None)), xpk_sub_networks(machine))
    assert differing(ours, xpk) == set(expected)
    # The fields both render, spelled out for the eye (the rest of the pod is trainstack's).
    same = sorted(k for k in fields(ours).keys() & fields(xpk).keys() if k not in expected)
    own = ("JOB_", "TRAINSTACK_")
    assert [k for k in same if not (k[0] == "env" and k[1].startswith(own))] == sorted(
        SAME_TCPXO if decorate is xpk_tcpxo else SAME_RDMA
    )


SAME_TCPXO = [
    ("annotation", "devices.gke.io/container.tcpxo-daemon"),
    ("annotation", "networking.gke.io/default-interface"),
    ("container", "rest"),
    ("env", "LD_LIBRARY_PATH"),
    ("env", "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"),
    ("mount", "aperture-devices"),
    ("mount", "dshm"),
    ("mount", "libraries"),
    ("pod", "rest"),
    ("sidecar", "command"),
    ("sidecar", "imagePullPolicy"),
    ("sidecar", "name"),
    ("sidecar", "restartPolicy"),
    ("sidecar", "securityContext"),
    ("sidecar", "volumeMounts"),
    ("toleration", "nvidia.com/gpu"),
    ("volume", "aperture-devices"),
    ("volume", "libraries"),
    ("volume", "proc-sys"),
    ("volume", "sys"),
]
SAME_RDMA = [
    ("annotation", "networking.gke.io/default-interface"),
    ("container", "rest"),
    ("env", "LD_LIBRARY_PATH"),
    ("mount", "dshm"),
    ("mount", "gib"),
    ("mount", "library-dir-host"),
    ("pod", "rest"),
    ("toleration", "nvidia.com/gpu"),
    ("volume", "gib"),
    ("volume", "library-dir-host"),
]


def test_where_xpk_differs_google_agrees() -> None:
    mega = gke_fabric("a3-megagpu-8g", "d", "us-central1-b")
    ultra = gke_fabric("a3-ultragpu-8g", "d", "us-central1-b")
    assert mega is not None and ultra is not None
    tcpxo, rdma = fields(_job(pod_fabric_for(mega, 8))), fields(_job(pod_fabric_for(ultra, 8)))
    # CEA gpudirect-tcpxo/nccl-test-latest.yaml: the interfaces, the daemon's image and script.
    assert tcpxo["annotation", INTERFACES] == [
        {"interfaceName": "eth0", "network": "default"},
        *({"interfaceName": f"eth{i}", "network": f"vpc{i}"} for i in range(1, 9)),
    ]
    assert tcpxo["sidecar", "image"] == (
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21"
    )
    assert tcpxo["sidecar", "args"] == [
        "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
        "/fts/entrypoint_rxdm_container.sh --num_hops=2"
    ]
    # CEA gpudirect-tcpxo/best-practice.md: HEALTH_CHECK_LOG_FILE and the example probe.
    assert tcpxo["sidecar", "env"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
        {"name": "HEALTH_CHECK_LOG_FILE", "value": "/run/health-check"},
    ]
    assert tcpxo["sidecar", "startupProbe"] == {
        "initialDelaySeconds": 1,
        "periodSeconds": 5,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 6,
        "exec": {"command": ["cat", "/run/health-check"]},
    }
    # CEA gpudirect-rdma/nccl-test.yaml.
    assert rdma["annotation", INTERFACES] == [
        {"interfaceName": "eth0", "network": "default"},
        *({"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)),
    ]

"""What a GPUDirect fabric adds to every training pod on GKE: the multi-network annotations,
the receive-datapath sidecar (TCPXO), the host folders of the NCCL plugin and their mounts,
and the NCCL environment, as Google's pod manifests and XPK's workload decorators render
them (sources: `trainstack.components.catalog.gpu_fabric`, whose facts these are).

    fabric = tcpxo_pod([("eth1", "vpc1"), ...], gpus=8)   # A3 Mega
    fabric = rdma_pod([("eth2", "rdma-0"), ...])          # A3 Ultra, A4
    KubernetesTrainingJob(..., {"fabric": fabric, ...})

`KubernetesTrainingJob` (`trainstack.components._k8s_job_manifests.manifests`) puts
`annotations` on the pod template, `volumes` and `init_containers` in the pod spec, and
`env` and `volume_mounts` on the trainer container. `trainstack.components.a100_cluster.
gke_fabric.pod_fabric_for` builds the value for a cluster's fabric and network names.

TCPXO (XPK src/xpk/core/workload_decorators/tcpxo_decorator.py; CEA gpudirect-tcpxo/
nccl-test-latest.yaml, best-practice.md): the `devices.gke.io/container.tcpxo-daemon`
annotation, which the NRI device injector reads to give the sidecar the GPUs and the
dmabuf import helper; the sidecar as a native sidecar (an init container with
`restartPolicy: Always`, so it stops when the trainer ends: "Automatic Sidecar Termination",
best-practice.md; XPK `add_tcpxo_daemon_container`) with NET_ADMIN and NET_BIND_SERVICE, the
host's /sys and /proc/sys and the plugin's libraries, and the startup probe Google
recommends; the trainer gets the libraries at /usr/local/nvidia, /dev/aperture_devices and
the release's NCCL settings.

RDMA (XPK rdma_decorator.py; CEA gpudirect-rdma/nccl-test.yaml; CTK examples/gke-a3-ultragpu/
nccl-jobset-example.yaml): eth2..eth9 on rdma-0..7, the driver libraries at /usr/local/nvidia
and the gIB plugin at /usr/local/gib; the pod script sources gIB's set_nccl_env.sh before the
launcher (`NCCL_ENV_SCRIPT_ENV`).

Either way the pod script first waits for the installer's files (`NCCL_PLUGIN_FILES_ENV`): a
pod can start on a new node before the installer DaemonSet has copied them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from trainstack.components._pod_setup import NCCL_ENV_SCRIPT_ENV, NCCL_PLUGIN_FILES_ENV
from trainstack.components.catalog.gpu_fabric import (
    GIB_DIR,
    GIB_NCCL_ENV,
    GIB_NCCL_ENV_SCRIPT,
    RXDM_ENTRYPOINT,
    RXDM_HEALTH_FILE,
    RXDM_IMAGE,
    TCPXO_NCCL_ENV,
)
from trainstack.components.catalog.gpu_families import Fabric

DEFAULT_INTERFACE_ANNOTATION: Final = "networking.gke.io/default-interface"
INTERFACES_ANNOTATION: Final = "networking.gke.io/interfaces"
RXDM_CONTAINER: Final = "tcpxo-daemon"
RXDM_DEVICES_ANNOTATION: Final = f"devices.gke.io/container.{RXDM_CONTAINER}"
"""The NRI device injector's per-container device list (XPK `get_tcpxo_deamon_entry`)."""
NVIDIA_HOST_DIR: Final = "/home/kubernetes/bin/nvidia"
"""The GPU driver's folder on a GKE node, where the installers also copy NCCL's libraries
(nccl-tcpxo-installer.yaml.tftpl `cp -r /var/lib/tcpxo/lib64/. /usr/local/nvidia/lib64` with
/home/kubernetes/bin mounted at /usr/local; the gIB installer's `cp -r /var/lib/gib/lib64/.
/usr/local/home/kubernetes/bin/nvidia/lib64`)."""
NVIDIA_MOUNT: Final = "/usr/local/nvidia"
LD_LIBRARY_PATH: Final = f"{NVIDIA_MOUNT}/lib64"
"""XPK tcpxo_decorator.py and rdma_decorator.py `update_gpu_containers`: LD_LIBRARY_PATH."""
APERTURE_DEVICES: Final = "/dev/aperture_devices"
"""Bind-mounted by the TCPXO installer's pre-installation step on the host; the trainer
mounts it and names it in NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY (XPK `update_gpu_containers`)."""
GIB_HOST_DIR: Final = "/home/kubernetes/bin/gib"
"""The gIB installer's copy of the plugin (nccl-installer.yaml.tftpl `cp -r /var/lib/gib/.
/usr/local/home/kubernetes/bin/gib`)."""


@dataclass(frozen=True)
class PodFabric:
    """A fabric's additions to a training pod (camelCase Kubernetes fields)."""

    fabric: Fabric
    annotations: Mapping[str, str]
    """Pod template annotations."""
    env: Mapping[str, str]
    """The trainer container's environment (a Job's own `env` values take precedence)."""
    volumes: tuple[dict[str, Any], ...] = ()
    volume_mounts: tuple[dict[str, Any], ...] = ()
    """The trainer container's mounts of `volumes`."""
    init_containers: tuple[dict[str, Any], ...] = ()
    """Native sidecars (init containers with `restartPolicy: Always`)."""


def interfaces_annotation(interfaces: Sequence[tuple[str, str]]) -> str:
    """`networking.gke.io/interfaces`: eth0 on the `default` network, then each (interface,
    Network object) pair, one JSON object a line as Google's manifests write it (CEA
    gpudirect-tcpxo/nccl-test-latest.yaml, gpudirect-rdma/nccl-test.yaml)."""
    pairs = [("eth0", "default"), *interfaces]
    lines = [
        "  " + json.dumps({"interfaceName": i, "network": n}, separators=(",", ":"))
        for i, n in pairs
    ]
    return "[\n" + ",\n".join(lines) + "\n]"


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def tcpxo_pod(interfaces: Sequence[tuple[str, str]], gpus: int) -> PodFabric:
    """A3 Mega's pod pieces, `interfaces` the pod's GPU interfaces and their Network objects
    (eth1..eth8 on vpc1..vpc8), `gpus` the GPUs the sidecar needs."""
    devices = [f"/dev/nvidia{i}" for i in range(gpus)]
    devices += ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dmabuf_import_helper"]
    sidecar = {
        "name": RXDM_CONTAINER,
        "image": RXDM_IMAGE,
        "imagePullPolicy": "Always",
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c"],
        "args": [RXDM_ENTRYPOINT],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
        "volumeMounts": [
            {"name": "libraries", "mountPath": NVIDIA_MOUNT},
            {"name": "sys", "mountPath": "/hostsysfs"},
            {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
        ],
        "env": [
            {"name": "LD_LIBRARY_PATH", "value": LD_LIBRARY_PATH},
            {"name": "HEALTH_CHECK_LOG_FILE", "value": RXDM_HEALTH_FILE},
        ],
        "startupProbe": {
            "initialDelaySeconds": 1,
            "periodSeconds": 5,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 6,
            "exec": {"command": ["cat", RXDM_HEALTH_FILE]},
        },
    }
    env = {
        "LD_LIBRARY_PATH": LD_LIBRARY_PATH,
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": APERTURE_DEVICES,
        **TCPXO_NCCL_ENV,
        # NCCL aborts at start when the tuner config is missing (CEA README, Jun 27, 2024).
        NCCL_PLUGIN_FILES_ENV: TCPXO_NCCL_ENV["NCCL_TUNER_CONFIG_PATH"],
    }
    return PodFabric(
        fabric="tcpxo",
        annotations={
            RXDM_DEVICES_ANNOTATION: "".join(f"- path: {d}\n" for d in devices),
            DEFAULT_INTERFACE_ANNOTATION: "eth0",
            INTERFACES_ANNOTATION: interfaces_annotation(interfaces),
        },
        env=env,
        volumes=(
            _host("libraries", NVIDIA_HOST_DIR),
            _host("sys", "/sys"),
            _host("proc-sys", "/proc/sys"),
            _host("aperture-devices", APERTURE_DEVICES),
        ),
        volume_mounts=(
            {"name": "aperture-devices", "mountPath": APERTURE_DEVICES},
            {"name": "libraries", "mountPath": NVIDIA_MOUNT},
        ),
        init_containers=(sidecar,),
    )


def rdma_pod(interfaces: Sequence[tuple[str, str]]) -> PodFabric:
    """A3 Ultra's and A4's pod pieces, `interfaces` the pod's RDMA interfaces and their
    Network objects (eth2..eth9 on rdma-0..rdma-7)."""
    env = {
        "LD_LIBRARY_PATH": LD_LIBRARY_PATH,
        **GIB_NCCL_ENV,
        NCCL_PLUGIN_FILES_ENV: GIB_NCCL_ENV_SCRIPT,
        NCCL_ENV_SCRIPT_ENV: GIB_NCCL_ENV_SCRIPT,
    }
    return PodFabric(
        fabric="rdma",
        annotations={
            DEFAULT_INTERFACE_ANNOTATION: "eth0",
            INTERFACES_ANNOTATION: interfaces_annotation(interfaces),
        },
        env=env,
        volumes=(_host("library-dir-host", NVIDIA_HOST_DIR), _host("gib", GIB_HOST_DIR)),
        volume_mounts=(
            {"name": "library-dir-host", "mountPath": NVIDIA_MOUNT},
            {"name": "gib", "mountPath": GIB_DIR},
        ),
    )

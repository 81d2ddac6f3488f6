"""`KubernetesTrainingJob` with a GPUDirect fabric (`fabric`): the pod template the
component registers (annotations, sidecar, volumes, mounts, environment, a Job's own `env`
over the fabric's), valid for every cluster version trainstack supports; and what the pod
script does with the fabric's two variables (waits for the node's plugin files, sources
gIB's settings before the launcher). The values themselves are held to XPK's and Google's in
test_gke_pod_fabric_xpk.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.components.test_kubernetes_training_job import VERSIONS, _integers, _job, _run
from tests.components.test_pod_setup_retry import run_pod
from trainstack.components._pod_fabric import PodFabric, rdma_pod, tcpxo_pod

MEGA = tcpxo_pod([(f"eth{i}", f"vpc{i}") for i in range(1, 9)], gpus=8)
ULTRA = rdma_pod([(f"eth{i + 2}", f"rdma-{i}") for i in range(8)])


def _template(fabric: PodFabric, **overrides: Any) -> dict[str, Any]:
    return dict(_job(_run(fabric=fabric, gpus_per_node=8, **overrides))["spec"]["template"])


def test_a3_mega_pod_template() -> None:
    template = _template(MEGA)
    assert template["metadata"]["annotations"] == {
        "devices.gke.io/container.tcpxo-daemon": "".join(
            f"- path: {d}\n"
            for d in [
                *(f"/dev/nvidia{i}" for i in range(8)),
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/dmabuf_import_helper",
            ]
        ),
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": "[\n"
        + ",\n".join(
            f'  {{"interfaceName":"eth{i}","network":"{"default" if i == 0 else f"vpc{i}"}"}}'
            for i in range(9)
        )
        + "\n]",
    }
    spec = template["spec"]
    assert spec["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
        {"name": "libraries", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {"name": "sys", "hostPath": {"path": "/sys"}},
        {"name": "proc-sys", "hostPath": {"path": "/proc/sys"}},
        {"name": "aperture-devices", "hostPath": {"path": "/dev/aperture_devices"}},
    ]
    assert spec["initContainers"] == [
        {
            "name": "tcpxo-daemon",
            "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21",
            "imagePullPolicy": "Always",
            "restartPolicy": "Always",
            "command": ["/bin/sh", "-c"],
            "args": [
                "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
                "/fts/entrypoint_rxdm_container.sh --num_hops=2"
            ],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
            "volumeMounts": [
                {"name": "libraries", "mountPath": "/usr/local/nvidia"},
                {"name": "sys", "mountPath": "/hostsysfs"},
                {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
            ],
            "env": [
                {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
                {"name": "HEALTH_CHECK_LOG_FILE", "value": "/run/health-check"},
            ],
            "startupProbe": {
                "initialDelaySeconds": 1,
                "periodSeconds": 5,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": 6,
                "exec": {"command": ["cat", "/run/health-check"]},
            },
        }
    ]
    [container] = spec["containers"]
    assert container["name"] == "trainer"
    assert container["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "aperture-devices", "mountPath": "/dev/aperture_devices"},
        {"name": "libraries", "mountPath": "/usr/local/nvidia"},
    ]
    names = [e["name"] for e in container["env"]]
    assert names == sorted(names)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: env[k] for k in MEGA.env} == dict(MEGA.env)


def test_a3_ultra_pod_template() -> None:
    template = _template(ULTRA)
    assert set(template["metadata"]["annotations"]) == {
        "networking.gke.io/default-interface",
        "networking.gke.io/interfaces",
    }
    spec = template["spec"]
    assert "initContainers" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["dshm", "library-dir-host", "gib"]
    [container] = spec["containers"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == [
        "/dev/shm",
        "/usr/local/nvidia",
        "/usr/local/gib",
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: env[k] for k in ULTRA.env} == {
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        "NCCL_NET": "gIB",
        "TRAINSTACK_NCCL_PLUGIN_FILES": "/usr/local/gib/scripts/set_nccl_env.sh",
        "TRAINSTACK_NCCL_ENV_SCRIPT": "/usr/local/gib/scripts/set_nccl_env.sh",
    }


def test_the_jobs_own_env_overrides_the_fabrics() -> None:
    template = _template(MEGA, env={"NCCL_DEBUG": "INFO"})
    [container] = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET,ENV,COLL,GRAPH")


def test_without_a_fabric_the_pod_has_none_of_it() -> None:
    template = dict(_job(_run())["spec"]["template"])
    assert "annotations" not in template["metadata"]
    assert "initContainers" not in template["spec"]
    assert [v["name"] for v in template["spec"]["volumes"]] == ["dshm"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fabric", [MEGA, ULTRA], ids=["tcpxo", "rdma"])
def test_fabric_jobs_validate_for_the_cluster_versions(version: str, fabric: PodFabric) -> None:
    job = _integers(_run(fabric=fabric, gpus_per_node=8).named("train-job").inputs)
    kubernetes_validate.validate(job, version, strict=True)


# -- The pod script with a fabric (tests.components.test_pod_setup_retry's harness: a fake
# clock, a local metadata server and Cloud Storage) --

PRINT_ENV = "import json, os; print(json.dumps({k: os.environ.get(k) for k in KEYS}))"

GIB_SCRIPT = """# set_nccl_env.sh as a shell sources it: unset variables and failing tests included.
export NCCL_NET=gIB
export NCCL_IB_TC=52
export LD_LIBRARY_PATH="/usr/local/gib/lib64:${LD_LIBRARY_PATH}"
[ -n "$NOT_SET_ANYWHERE" ] && echo never
export NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config_a3u.txtpb
"""


def test_the_pod_sources_the_plugins_settings_before_the_launcher(tmp_path: Path) -> None:
    script = tmp_path / "gib" / "scripts" / "set_nccl_env.sh"
    script.parent.mkdir(parents=True)
    script.write_text(GIB_SCRIPT)
    keys = ["NCCL_NET", "NCCL_IB_TC", "LD_LIBRARY_PATH", "NCCL_TUNER_CONFIG_PATH"]
    done, sleeps, lines, _ = run_pod(
        tmp_path,
        extra_env={
            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
            "TRAINSTACK_NCCL_PLUGIN_FILES": str(script),
            "TRAINSTACK_NCCL_ENV_SCRIPT": str(script),
        },
        launcher=f"KEYS = {keys!r}; {PRINT_ENV}",
    )
    assert done.returncode == 0, done.stderr
    assert sleeps == []
    assert lines[-1] == f"trainstack-pod: sourcing {script}"
    assert json.loads(done.stdout) == {
        "NCCL_NET": "gIB",
        "NCCL_IB_TC": "52",
        "LD_LIBRARY_PATH": "/usr/local/gib/lib64:/usr/local/nvidia/lib64",
        "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a3u.txtpb",
    }


def test_a_plugin_file_that_never_comes_fails_setup_after_10_minutes(tmp_path: Path) -> None:
    missing = tmp_path / "nvidia" / "lib64" / "a3plus_tuner_config.textproto"
    done, sleeps, lines, _ = run_pod(
        tmp_path, extra_env={"TRAINSTACK_NCCL_PLUGIN_FILES": str(missing)}
    )
    assert done.returncode == 3
    assert done.stdout == ""
    assert sleeps == [10] * 60
    waiting = [line for line in lines if "waiting for" in line]
    assert waiting[0] == (
        f"trainstack-pod: waiting for {missing}, which the node's NCCL plugin installer copies "
        "(0s of 600s)"
    )
    assert len(waiting) == 60
    assert lines[-1] == (
        f"trainstack-pod: no {missing} after 600s: the node's NCCL plugin installer DaemonSet "
        "has not installed it"
    )

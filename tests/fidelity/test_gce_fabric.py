"""Compute Engine fidelity of the A4 fabric: the planned startup script of an a4-highgpu-8g
group boots 2 VMs (`tests.fidelity.test_gce.Group`: namespaces, the faked metadata server,
the GCS emulator, the systemd shim), installs Google's NCCL/gIB plugin with the image's
apt-get and runs your code under torchrun; every rank reports the NCCL environment it got.
A flex-start A4 group runs the same way with the VMs its resize request made in the Compute
Engine fake (`tests.fidelity.gce_deploy`): no rank metadata, each VM claims its rank.

What stands in for the VM, besides `tests.fidelity.test_gce`'s (and why):

- apt-get (`APT_GET`): the accelerator image's own would reach Google's repository. This
  one records each call and, for `install nccl-gib`, lays the package out as Google's
  NCCL/gIB page says it installs ("All NCCL/gIB content is installed to the /usr/local/gib
  directory"; "/usr/local/gib/scripts/set_nccl_env.sh"; "/usr/local/gib/lib64",
  https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms). The real script's
  contents are in no source read here: the stand-in (`SET_NCCL_ENV`) holds the NCCL lines
  Cluster Toolkit's A4 VM blueprint sets "to enable the NCCL gIB network plugin"
  (examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml, its /etc/environment runner),
  as plain assignments, so the test also proves the launcher exports them.
- /usr/local and /etc/apt/sources.list.d are folders of the VM's disk (a boot disk holds
  them), where apt-get and the launcher write.
- The image carries torchrun (`tests.fidelity.nodes.Image`), so the launcher installs no
  torch: the pip step for an image without torchrun is not run here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fidelity.gce_deploy import TEMPLATE, Provider, Stack, registered
from tests.fidelity.nodes import (
    Image,
    events,
    explain,
    inputs_by_type,
    planned_package,
    require_unshare,
)
from tests.fidelity.test_gce import IMAGE_PACKAGES, Group, PlannedGroup, _planned
from trainstack.infra.plan import build_plan

SET_NCCL_ENV = {
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_NET_CHUNKSIZE": "131072",
    "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "52",
    "NCCL_IB_FIFO_TC": "84",
    "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config.txtpb",
}
"""CTK a4high-vm.yaml's /etc/environment lines between "The following are set to enable the
NCCL gIB network plugin" and "End of NCCL gIB section", LD_LIBRARY_PATH left out (the
launcher's to set)."""

APT_GET = """#!{python}
# apt-get of the test's image (see the module docstring).
import json, pathlib, sys

args = sys.argv[1:]
with open("/usr/local/apt-get.calls", "a") as calls:
    calls.write(json.dumps(args) + "\\n")
if "install" in args and "nccl-gib" in args:
    gib = pathlib.Path("/usr/local/gib")
    (gib / "lib64").mkdir(parents=True, exist_ok=True)
    (gib / "scripts").mkdir(parents=True, exist_ok=True)
    (gib / "scripts" / "set_nccl_env.sh").write_text({script!r})
"""

PROBE = """import json, os

env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_") or k == "LD_LIBRARY_PATH"}
print(json.dumps({"event": "nccl_env", "rank": int(os.environ["RANK"]),
                  "world": int(os.environ["WORLD_SIZE"]), "env": env}), flush=True)
"""


def _stack(code: Path, **gpu: Any) -> dict[str, Any]:
    (code / "probe.py").write_text(PROBE)
    stack: dict[str, Any] = {
        "gcp:project": "my-ml-project",
        "gcp:region": "us-central1",
        "trainstack:gpu_cluster": {
            "backend": "gce",
            "machine_type": "a4-highgpu-8g",
            "node_count": 2,
            "zone": "us-central1-b",
            **gpu,
        },
        "trainstack:trainer": {
            "source": str(code),
            "entrypoint": ["python", "probe.py"],
            "launcher": "torchrun",
        },
    }
    if gpu.get("flex_start"):
        stack["trainstack:limits"] = {"max_run_hours": 1}
    return stack


def _plan(code: Path) -> dict[str, Any]:
    return build_plan("fidelity-a4", _stack(code))


@pytest.fixture
def fakes() -> Iterator[tuple[str, LoggingFakeServer]]:
    require_unshare()
    with running_gcs_emulator() as storage, LoggingFakeServer() as logging_api:
        yield storage, logging_api


def _group(
    root: Path,
    planned: PlannedGroup,
    fakes: tuple[str, LoggingFakeServer],
    rank_metadata: bool = True,
) -> Group:
    storage, logging_api = fakes
    script = "".join(f"{k}={v}\n" for k, v in SET_NCCL_ENV.items())
    return Group(
        root / "vms",
        planned,
        storage,
        logging_api.endpoint,
        Image(root / "image", planned.sdist, IMAGE_PACKAGES),
        tools={"apt-get": APT_GET.format(python=sys.executable, script=script)},
        node_dirs=("/usr/local", "/etc/apt/sources.list.d"),
        rank_metadata=rank_metadata,
    )


@pytest.mark.trainer
def test_every_rank_of_two_a4_vms_sees_the_gib_nccl_settings(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    planned = _planned(_plan(code))
    assert planned.names == ["fidelity-a4-a100-0", "fidelity-a4-a100-1"]
    group = _group(tmp_path, planned, fakes)
    try:
        vms = [group.boot(rank) for rank in range(2)]
        codes = [vm.wait(300) for vm in vms]
    finally:
        group.close()
    assert codes == [0, 0], explain(vms)
    reported = sorted((e["rank"], e["world"], e["env"]) for e in events(vms, "nccl_env"))
    expected = {**SET_NCCL_ENV, "LD_LIBRARY_PATH": "/usr/local/gib/lib64"}
    assert reported == [(rank, 4, expected) for rank in range(4)], explain(vms)
    for rank, vm in enumerate(vms):
        disk = tmp_path / "vms" / f"vm-{rank}-boot-{rank + 1}"
        # The apt source Google's page adds, and one install of the plugin per boot disk.
        assert (disk / "etc-apt-sources.list.d" / "nccl-gib.list").read_text() == (
            "deb https://packages.cloud.google.com/apt gpudirect-gib-apt main\n"
        )
        calls = (disk / "usr-local" / "apt-get.calls").read_text().splitlines()
        assert calls == ['["update", "-q"]', '["install", "-y", "-q", "nccl-gib"]']
        assert (
            "trainstack-launch: installing nccl-gib from "
            "'deb https://packages.cloud.google.com/apt gpudirect-gib-apt main'" in vm.output()
        )
        assert "trainstack-launch: NCCL: sourced /usr/local/gib/scripts/set_nccl_env.sh; " in (
            vm.output()
        )


@pytest.mark.trainer
def test_a_flex_start_a4_group_trains_as_one_world_each_vm_with_its_claimed_rank(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    """`pulumi up` of a flex-start A4 stack against the Compute Engine fake: its resize request
    makes 2 VMs with the group's own names and no rank metadata; booted with those names,
    each launcher claims a rank and finds node 0's name, and torchrun makes one world of 4."""
    code = tmp_path / "code"
    code.mkdir()
    stack = _stack(code, flex_start=True)
    plan = build_plan("fidelity-flex", stack)
    [template] = inputs_by_type(plan)[TEMPLATE]
    with ComputeFakeServer(deletion_gets=0) as api:
        Stack(Provider(api.endpoint)).up(registered(stack, stack="fidelity-flex"))
        group_key = "my-ml-project/us-central1-b/fidelity-flex-a100"
        api.fulfil(group_key, "fidelity-flex-a100-run")
        members = api.members(group_key)
    assert sorted(members) == ["fidelity-flex-a100-0001", "fidelity-flex-a100-0002"]
    assert [m.metadata for m in members.values()] == [{}, {}]
    planned = PlannedGroup(
        script=template["metadataStartupScript"],
        names=sorted(members),
        zone="us-central1-b",
        project="my-ml-project",
        **planned_package(inputs_by_type(plan)),
    )
    group = _group(tmp_path, planned, fakes, rank_metadata=False)
    try:
        vms = [group.boot(rank) for rank in range(2)]
        codes = [vm.wait(300) for vm in vms]
    finally:
        group.close()
    assert codes == [0, 0], explain(vms)
    claimed = [
        next(line for line in vm.output().splitlines() if "holds node rank" in line) for vm in vms
    ]
    ranks = sorted(int(line.split("holds node rank ")[1].split(";")[0]) for line in claimed)
    assert ranks == [0, 1], explain(vms)
    [zero] = {line.rsplit("node 0 is ", 1)[1] for line in claimed}
    assert zero in planned.names
    reported = sorted((e["rank"], e["world"], e["env"]) for e in events(vms, "nccl_env"))
    expected = {**SET_NCCL_ENV, "LD_LIBRARY_PATH": "/usr/local/gib/lib64"}
    assert reported == [(rank, 4, expected) for rank in range(4)], explain(vms)

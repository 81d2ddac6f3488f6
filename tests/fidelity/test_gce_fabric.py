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
  `update` verifies each source as apt does (apt-secure(8)): a source's Release is signed
  by its repository's key (`REPO_KEY` here), checked against the keyrings its
  `[signed-by=...]` names or, without one, /etc/apt/trusted.gpg.d; where no keyring holds
  the key apt prints "NO_PUBKEY ..." and "E: The repository '... InRelease' is not signed.
  N: Updating from such a repository can't be done securely, and is therefore disabled by
  default." and exits 100 (apt-get update's output on Ubuntu, as users report it, e.g.
  https://github.com/joglomedia/LEMPer/issues/8). A `.gpg` keyring is read in binary
  OpenPGP form ("apt-key supports only the binary OpenPGP format ... in files with the
  "gpg" extension", apt-key(8)). The image is Canonical's, so its trusted.gpg.d holds no
  key of Google's.
- Google's key URL (`KEY_SERVER`, through the helper's `TRAINSTACK_APT_KEY_URL`): serves
  `REPO_KEY` ASCII-armored, as the page's `gpg --dearmor` step expects it.
- /usr/local, /etc/apt/sources.list.d, /etc/apt/keyrings and /etc/apt/trusted.gpg.d are
  folders of the VM's disk (a boot disk holds them), where apt-get and the launcher write.
- The image carries torchrun (`tests.fidelity.nodes.Image`), so the launcher installs no
  torch: the pip step for an image without torchrun is not run here.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import LocalServer
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fidelity.gce_deploy import TEMPLATE, Provider, Stack, registered
from tests.fidelity.nodes import (
    Image,
    Node,
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

REPO_KEY = bytes(range(0x99, 0x100)) + b"trainstack test key of gpudirect-gib-apt"
"""The repository's signing key, as packets (the binary OpenPGP form); arbitrary bytes: the
fake compares keyrings by content, it does not check signatures."""


def _crc24(data: bytes) -> int:
    # RFC 4880 section 6.1: the armor checksum.
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def _armored(key: bytes) -> bytes:
    body = base64.b64encode(key).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    check = base64.b64encode(_crc24(key).to_bytes(3, "big")).decode()
    return (
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n"
        + "\n".join(lines)
        + f"\n={check}\n-----END PGP PUBLIC KEY BLOCK-----\n"
    ).encode()


APT_GET = """#!{python}
# apt-get of the test's image (see the module docstring).
import json, pathlib, re, sys

args = sys.argv[1:]
with open("/usr/local/apt-get.calls", "a") as calls:
    calls.write(json.dumps(args) + "\\n")
if "update" in args:
    key = {key!r}
    for listing in sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*.list")):
        for line in listing.read_text().splitlines():
            found = re.match(r"deb (?:\\[(.*)\\] )?(\\S+) (\\S+)", line.strip())
            if not found:
                continue
            options = dict(o.split("=", 1) for o in (found.group(1) or "").split() if "=" in o)
            signed_by = options.get("signed-by")
            rings = (
                [pathlib.Path(p) for p in signed_by.split(",")]
                if signed_by
                else sorted(pathlib.Path("/etc/apt/trusted.gpg.d").glob("*.gpg"))
            )
            if not any(r.is_file() and r.read_bytes() == key for r in rings):
                release = found.group(2) + " " + found.group(3) + " InRelease"
                print("W: GPG error: " + release + ": The following signatures couldn't be "
                      "verified because the public key is not available", file=sys.stderr)
                print("E: The repository '" + release + "' is not signed.", file=sys.stderr)
                print("N: Updating from such a repository can't be done securely, and is "
                      "therefore disabled by default.", file=sys.stderr)
                sys.exit(100)
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


class KeyServer(LocalServer):
    """Google's apt key URL: `REPO_KEY`, ASCII-armored, at any path."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                data = _armored(REPO_KEY)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


class FabricGroup(Group):
    """A group whose VMs reach `KeyServer` for Google's apt key."""

    key_url = ""

    def boot(
        self,
        rank: int,
        extra_env: dict[str, str] | None = None,
        var_lib: Mapping[str, str] | None = None,
    ) -> Node:
        env = {"TRAINSTACK_APT_KEY_URL": self.key_url, **(extra_env or {})}
        return super().boot(rank, env, var_lib)


@pytest.fixture
def fakes() -> Iterator[tuple[str, LoggingFakeServer, str]]:
    require_unshare()
    with (
        running_gcs_emulator() as storage,
        LoggingFakeServer() as logging_api,
        KeyServer() as keys,
    ):
        yield storage, logging_api, f"{keys.base_url}/apt/doc/apt-key.gpg"


def _group(
    root: Path,
    planned: PlannedGroup,
    fakes: tuple[str, LoggingFakeServer, str],
    rank_metadata: bool = True,
) -> Group:
    storage, logging_api, key_url = fakes
    script = "".join(f"{k}={v}\n" for k, v in SET_NCCL_ENV.items())
    group = FabricGroup(
        root / "vms",
        planned,
        storage,
        logging_api.endpoint,
        Image(root / "image", planned.sdist, IMAGE_PACKAGES),
        tools={"apt-get": APT_GET.format(python=sys.executable, script=script, key=REPO_KEY)},
        node_dirs=(
            "/usr/local",
            "/etc/apt/sources.list.d",
            "/etc/apt/keyrings",
            "/etc/apt/trusted.gpg.d",
        ),
        rank_metadata=rank_metadata,
    )
    group.key_url = key_url
    return group


@pytest.mark.trainer
def test_every_rank_of_two_a4_vms_sees_the_gib_nccl_settings(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer, str]
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
        # The apt source Google's page adds, signed by Google's key (stored unarmored, as
        # the page's `gpg --dearmor`), and one install of the plugin per boot disk.
        assert (disk / "etc-apt-sources.list.d" / "nccl-gib.list").read_text() == (
            "deb [signed-by=/etc/apt/keyrings/cloud.google.gpg] "
            "https://packages.cloud.google.com/apt gpudirect-gib-apt main\n"
        )
        assert (disk / "etc-apt-keyrings" / "cloud.google.gpg").read_bytes() == REPO_KEY
        calls = (disk / "usr-local" / "apt-get.calls").read_text().splitlines()
        assert calls == ['["update", "-q"]', '["install", "-y", "-q", "nccl-gib"]']
        assert (
            "trainstack-launch: installing nccl-gib from 'deb "
            "[signed-by=/etc/apt/keyrings/cloud.google.gpg] "
            "https://packages.cloud.google.com/apt gpudirect-gib-apt main'" in vm.output()
        )
        assert "trainstack-launch: NCCL: sourced /usr/local/gib/scripts/set_nccl_env.sh; " in (
            vm.output()
        )


@pytest.mark.trainer
def test_a_flex_start_a4_group_trains_as_one_world_each_vm_with_its_claimed_rank(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer, str]
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

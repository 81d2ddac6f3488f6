"""Machines of a multi-node fidelity test, as processes on this one: each node in its own
namespaces, with its own host name, the cluster's DNS as a hosts file, and a kill that
takes down every process of the node at once.

    hosts = write_hosts(root / "hosts", {"exp-0": ["exp-0.svc"], "exp-1": ["exp-1.svc"]})
    node = start_node(["bash", "-c", script], env, cwd=tmp, hostname="exp-0", hosts=hosts)
    node.kill()  # the machine disappeared: nothing of it survives

How a node differs from a machine, and why:

- It runs in its own user, mount, UTS and PID namespace (`unshare`): the host name is
  set, /etc/hosts is bind-mounted from the cluster's hosts file, and the node's first
  process is PID 1 of the namespace, so killing the node (`Node.kill`) kills every process
  it started, sessions of their own included (torchrun, its agent, its workers), as when a
  VM or a pod's node vanishes.
- The hosts file maps node i to 127.0.0.<i+1> (one loopback address per node). Its lines
  come before this machine's own, so a node's fully qualified name (what torchrun's agent
  reports to its peers) is its cluster name, as on the platform, not `localhost`.
- The nodes share this machine's network namespace: the ports a test uses must be free.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tests import REPO_ROOT
from tests.fidelity.vertex import image_layer, venv_over

NODE_NAMESPACES = """set -e
mount --bind "$TEST_HOSTS" /etc/hosts
for bind in ${TEST_BINDS:-}; do
  mount --bind "${bind%%=*}" "${bind#*=}"
done
hostname "$TEST_HOSTNAME"
unset TEST_HOSTS TEST_HOSTNAME TEST_BINDS
exec "$@"
"""
"""Runs inside the node's namespaces: its host name and DNS, then the node's command."""


def require_unshare() -> None:
    """Skip the test where user namespaces cannot be made."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not available")


def write_hosts(path: Path, names: Mapping[str, Sequence[str]]) -> Path:
    """A hosts file giving the i-th node of `names` (host name -> its other names, the
    fully qualified first) the address 127.0.0.<i+1>, then this machine's own entries."""
    lines = [
        " ".join([f"127.0.0.{i + 1}", *aliases, host])
        for i, (host, aliases) in enumerate(names.items())
    ]
    lines.append(Path("/etc/hosts").read_text().rstrip("\n"))
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Node:
    """One running node: its namespace's first process and its combined output."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[str]

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def records(self) -> list[dict[str, Any]]:
        """The trainer's JSON records in the output so far."""
        found = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return found

    def kill(self) -> None:
        """Every process of the node at once, as when its machine disappears."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def wait(self, timeout_s: float) -> int:
        """The node's exit status; a node still running after `timeout_s` is killed."""
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.kill()
            self.log.close()


def start_node(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path,
    hostname: str,
    hosts: Path,
    log_path: Path,
    binds: Mapping[Path, str] | None = None,
) -> Node:
    """Run `argv` as a node named `hostname` (see the module docstring). `binds` mounts
    each directory of this machine over a path of the node (its own disk: /var/lib...)."""
    full_env = {**env, "TEST_HOSTS": str(hosts), "TEST_HOSTNAME": hostname}
    if binds:
        full_env["TEST_BINDS"] = " ".join(f"{src}={dst}" for src, dst in binds.items())
    command = [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--uts",
        "--pid",
        "--fork",
        "--kill-child",
        "bash",
        "-c",
        NODE_NAMESPACES,
        "node",
        *argv,
    ]
    log = log_path.open("w")
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Node(hostname, proc, log_path, log)


def explain(nodes: Sequence[Node]) -> str:
    """The end of every node's output, for an assertion message."""
    return "\n".join(f"--- {n.name} ({n.log_path})\n{n.output()[-4000:]}" for n in nodes)


def events(nodes: Sequence[Node], event: str) -> list[dict[str, Any]]:
    """The trainer records of kind `event` from all `nodes`."""
    return [rec for node in nodes for rec in node.records() if rec.get("event") == event]


# `python3` of an image: its python, but `-m pip install` offline from the image layer.
PYTHON3_SHIM = """#!{shared}
import os, subprocess, sys
argv = sys.argv[1:]
image = {image!r}
if argv[:3] == ["-m", "pip", "install"]:
    sys.exit(subprocess.run(
        [{shared!r}, "-m", "pip", "--python", image, "install", "--no-index",
         "--no-build-isolation", "--no-cache-dir", "--quiet", *argv[3:]]
    ).returncode)
os.execv(image, [image, *argv])
"""
TORCHRUN_SHIM = """#!/bin/sh
exec "$(dirname "$0")/python3" -m torch.distributed.run "$@"
"""
PIP_SHIM = """#!/bin/sh
# pip of the image, offline: everything the package requires is in the image layer.
[ "$1" = install ] || exit 3
shift
exec "$(dirname "$0")/python3" -m pip install "$@"
"""


def sdist_requires(sdist: Path) -> list[str]:
    """The sdist's `Requires-Dist` lines (what its install needs from the image)."""
    with tarfile.open(sdist, mode="r:gz") as tar:
        name = next(n for n in tar.getnames() if n.endswith("/PKG-INFO"))
        extracted = tar.extractfile(name)
        assert extracted is not None
        lines = extracted.read().decode().splitlines()
    return [line.removeprefix("Requires-Dist: ") for line in lines if "Requires-Dist" in line]


class Image:
    """A container image: its layer (`packages` and what `sdist` requires, linked from the
    shared venv by `tests.fidelity.vertex.image_layer`) built once, and a fresh container
    for every node start (`container`): a new virtual environment over that layer, so one
    node's pip install never touches another node's files, as each container (or VM disk)
    has its own."""

    def __init__(self, root: Path, sdist: Path, packages: Sequence[str]) -> None:
        self.layer = root / "image-layer"
        image_layer(self.layer, [*packages, *sdist_requires(sdist)])

    def container(self, root: Path) -> Path:
        """A fresh container under `root`; returns the directory for PATH that holds its
        `python3`, `pip` (offline: everything the package requires is in the layer) and
        `torchrun`, as an image's bin directory does."""
        # A plain path, no .pth processing: the shared venv's editable trainstack install
        # stays invisible, so `trainers` comes from the installed sdist only.
        python = venv_over(root / "venv", self.layer)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for name, text in (
            ("python3", PYTHON3_SHIM.format(shared=sys.executable, image=str(python))),
            ("pip", PIP_SHIM),
            ("torchrun", TORCHRUN_SHIM),
        ):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        return bin_dir


def _post(url: str, data: bytes, content_type: str) -> None:
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": content_type}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
BUCKET = "gcp:storage/bucket:Bucket"


def inputs_by_type(plan: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A plan's resource inputs grouped by resource type, in plan order."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for resource in plan["resources"]:
        by_type.setdefault(resource["type"], []).append(resource["inputs"])
    return by_type


def planned_package(by_type: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """What a node needs of the plan's trainer package and buckets: the local `sdist` file,
    its `package_uri`, the `staging_bucket` and the `checkpoint_bucket`."""
    # A tpu or gpu_cluster stack also uploads its supervisor's zip (and a spot slice's
    # supervisor its marker): the trainer package is the one under trainers/ (your code's
    # under code/, trainstack.components.trainer_package).
    packages = ("trainers/", "code/")
    [sdist] = [o for o in by_type[BUCKET_OBJECT] if o["name"].startswith(packages)]
    [checkpoints] = [b for b in by_type[BUCKET] if b["name"].endswith("-checkpoints")]
    return {
        "sdist": REPO_ROOT / sdist["source"]["fileAsset"],
        "package_uri": f"gs://{sdist['bucket']}/{sdist['name']}",
        "staging_bucket": sdist["bucket"],
        "checkpoint_bucket": checkpoints["name"],
    }


def stage_buckets(storage: str, buckets: Sequence[str], package_uri: str, sdist: Path) -> None:
    """Create `buckets` in the GCS emulator at `storage` and upload `sdist` as the plan's
    `package_uri` (`gs://bucket/object`)."""
    for bucket in buckets:
        _post(
            f"{storage}/storage/v1/b?project=p",
            json.dumps({"name": bucket}).encode(),
            "application/json",
        )
    bucket, _, obj = package_uri.removeprefix("gs://").partition("/")
    _post(
        f"{storage}/upload/storage/v1/b/{bucket}/o?uploadType=media"
        f"&name={urllib.parse.quote(obj, safe='')}",
        sdist.read_bytes(),
        "application/gzip",
    )

"""Compute Engine fidelity: the planned managed instance group's nodes, each booting the
startup script the plan renders and running its trainer unit the way systemd would.

The plan is `trainstack.infra.plan.build_plan` of the bundled `prod-a100-gce` stack cut to 2 nodes
(a2-highgpu-8g) and a few small steps of the MLP on digits (DDP, fp32). Every node runs
the instance template's `metadataStartupScript` as root, with what the VM provides: its
per-instance config's name as host name, its `trainstack-node-rank` metadata attribute,
the metadata server's token, Cloud Storage and the Cloud Logging API.

What differs from Compute Engine, and why (nothing else changes behaviour):

- Each VM is a node of `tests.fidelity.nodes`: its own user, mount, UTS and PID namespace,
  the instance name as host name, a hosts file mapping every instance's name and its
  internal DNS name (`<name>.<zone>.c.<project>.internal`) to 127.0.0.<i+1>, and its own
  /var/lib, where the startup script keeps its state (its boot disk; a recreated VM gets a
  fresh one). /root stays this machine's (the shared venv's interpreter lives under it).
- systemd is `SYSTEMD_RUN`, a thin shim: `systemctl is-active` says `inactive`,
  `systemd-run` runs the unit's command in the foreground (the VM's life is the node's
  first process) and applies the unit's restart rule as systemd does for
  `Restart=on-failure`: a non-zero exit restarts the command unless its code is in
  `RestartPreventExitStatus`, at most `StartLimitBurst` starts in `StartLimitIntervalSec`.
  It waits `SHIM_RESTART_SEC`, not the unit's `RestartSec` (30 s), between starts. The
  unit's environment is the test's: PATH with the image's bin directory, and the hosts of
  the fakes (`GCE_METADATA_HOST`, `STORAGE_EMULATOR_HOST`, `TRAINSTACK_LOGGING_ENDPOINT`),
  where a VM reaches Google's.
- The image is `tests.fidelity.nodes.Image`: torch and what the sdist requires, linked from
  the shared venv; each boot gets a fresh virtual environment over it holding `python3`,
  `pip` (offline) and `torchrun`, which the launcher finds on PATH as on the Deep Learning
  VM image.
- GPUs are simulated: `TRAINSTACK_SIMULATED_ACCELERATORS=2`, so each VM runs 2 CPU
  processes on gloo and the world is 2 VMs x 2 = 4.
- Recovery: one VM's processes are SIGKILLed mid-run (a spot preemption or a host error)
  and the VM is booted again with a fresh disk under the same name and metadata, as the
  managed instance group recreates it from its per-instance config.

`examples/own-trainer`'s gce stack runs the same way (slow): its VMs run your code through
`python3 -m trainstack.trainers.node <node_args>` as a world of 4, ship its lines to Cloud Logging and
end with local-run's weights.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import REPO_ROOT
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.metadata_fake import MetadataFake, vm_values
from tests.fidelity.gce_deploy import Provider, Stack, registered
from tests.fidelity.nodes import (
    Image,
    Node,
    events,
    explain,
    inputs_by_type,
    planned_package,
    require_unshare,
    stage_buckets,
    start_node,
    write_hosts,
)
from tests.fidelity.supervisor import (
    check_with_planned_supervisor,
    planned_supervisor,
    read_object,
)
from tests.fidelity.test_vertex import OWN_ARGS, own_node_args
from tests.fidelity.test_vertex import _local_run_digest as local_run_digest
from trainstack.components.gpu_startup import NODE_RANK_ATTRIBUTE
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV
from trainstack.trainers.common.cloud_logging import GCE_NAME_LABEL

STACK = "prod-a100-gce"
TEMPLATE_TYPE = "gcp:compute/instanceTemplate:InstanceTemplate"
NODE_CONFIG_TYPE = "gcp:compute/perInstanceConfig:PerInstanceConfig"
NODES = 2
TRAINER = {
    "strategy": "ddp",
    "model": "mlp",
    "dataset": "digits",
    "precision": "fp32",
    "global_batch_size": 32,
    "grad_accum_steps": 1,
    "log_every": 1,
}
IMAGE_PACKAGES = ["torch", "setuptools"]
SHIM_RESTART_SEC = 1

SYSTEMCTL = """#!/bin/sh
# systemctl of the shim: no unit is running before the startup script starts one.
case "$1" in
  is-active) echo inactive; exit 3 ;;
  *) exit 0 ;;
esac
"""

SYSTEMD_RUN = """#!{python}
# systemd-run of the shim (see the test module's docstring).
import signal, subprocess, sys, time

args, props = sys.argv[1:], {{}}
while args[0].startswith("--"):
    option = args.pop(0)
    if option.startswith("--property="):
        key, _, value = option.removeprefix("--property=").partition("=")
        props[key] = value
    elif option.startswith("--unit="):
        unit = option.removeprefix("--unit=")
assert props["Restart"] == "on-failure", props
prevent = {{int(code) for code in props["RestartPreventExitStatus"].split()}}
burst, interval = int(props["StartLimitBurst"]), float(props["StartLimitIntervalSec"])
starts = []
while True:
    now = time.monotonic()
    starts = [t for t in starts if now - t < interval] + [now]
    if len(starts) > burst:
        print(f"systemd-shim: {{unit}}: start request repeated too quickly", flush=True)
        sys.exit(1)
    status = subprocess.call(args)
    code = 128 - status if status < 0 else status
    print(f"systemd-shim: {{unit}} exited {{code}}", flush=True)
    if code == 0 or code in prevent:
        sys.exit(0)
    time.sleep({restart_sec})
"""


@dataclass(frozen=True)
class PlannedGroup:
    script: str
    names: list[str]
    zone: str
    project: str
    sdist: Path
    package_uri: str
    staging_bucket: str
    checkpoint_bucket: str

    @property
    def stop(self) -> tuple[str, dict[str, Any]]:
        """The supervisor's stop of this group as the Compute Engine fake notes it: its
        planned VMs deleted by name (`deleteInstances`), the group and the body."""
        vms = [f"zones/{self.zone}/instances/{name}" for name in self.names]
        body = {"instances": vms, "skipInstancesOnValidationError": True}
        return f"{self.project}/{self.zone}/{STACK}-a100", body


def _plan(trainer: dict[str, Any]) -> PlannedGroup:
    return _planned(_plan_document(trainer))


def _stack_config(trainer: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    _, config = load_stack(STACK, None)
    if limits:
        config["trainstack:limits"] = limits
    config["trainstack:gpu_cluster"] = {**config["trainstack:gpu_cluster"], "node_count": NODES}
    config["trainstack:trainer"] = {**config["trainstack:trainer"], **TRAINER, **trainer}
    return config


def _plan_document(trainer: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    return build_plan(STACK, _stack_config(trainer, limits))


def _planned(plan: dict[str, Any]) -> PlannedGroup:
    by_type = inputs_by_type(plan)
    [template] = by_type[TEMPLATE_TYPE]
    configs = sorted(
        by_type[NODE_CONFIG_TYPE],
        key=lambda c: int(c["preservedState"]["metadata"][NODE_RANK_ATTRIBUTE]),
    )
    return PlannedGroup(
        script=template["metadataStartupScript"],
        names=[c["name"] for c in configs],
        zone=configs[0]["zone"],
        project=configs[0]["project"],
        **planned_package(by_type),
    )


class Group:
    """The fakes and the image the VMs of one planned group share."""

    def __init__(
        self,
        root: Path,
        planned: PlannedGroup,
        storage: str,
        logging_endpoint: str,
        image: Image | None = None,
        tools: Mapping[str, str] | None = None,
        node_dirs: tuple[str, ...] = (),
        rank_metadata: bool = True,
    ) -> None:
        """`image`: the image built for another group of the same plan, reused. `tools`:
        further programs of the image on the VMs' PATH, by name (their text); `node_dirs`:
        folders of the VM's disk besides /var/lib (each a fresh one per boot);
        `rank_metadata`: whether each VM has its rank attribute (a flex-start group's
        resize request gives none)."""
        self.root, self.planned = root, planned
        self.node_dirs = node_dirs
        self.storage, self.logging_endpoint = storage, logging_endpoint
        root.mkdir(parents=True, exist_ok=True)
        buckets = [planned.staging_bucket, planned.checkpoint_bucket]
        stage_buckets(storage, buckets, planned.package_uri, planned.sdist)
        self.image = image or Image(root, planned.sdist, IMAGE_PACKAGES)
        self.systemd = root / "systemd"
        self.systemd.mkdir()
        for prog, text in (
            ("systemctl", SYSTEMCTL),
            (
                "systemd-run",
                SYSTEMD_RUN.format(python=sys.executable, restart_sec=SHIM_RESTART_SEC),
            ),
            *(tools or {}).items(),
        ):
            (self.systemd / prog).write_text(text)
            (self.systemd / prog).chmod(0o755)
        dns = f"{planned.zone}.c.{planned.project}.internal"
        self.hosts = write_hosts(root / "hosts", {n: [f"{n}.{dns}"] for n in planned.names})
        self.metadata = [
            MetadataFake(
                {
                    **(
                        {f"instance/attributes/{NODE_RANK_ATTRIBUTE}": str(rank)}
                        if rank_metadata
                        else {}
                    ),
                    **vm_values(str(1000 + rank), name, planned.zone, planned.project),
                }
            ).__enter__()
            for rank, name in enumerate(planned.names)
        ]
        self.boots = 0

    def close(self) -> None:
        for metadata in self.metadata:
            metadata.__exit__(None, None, None)

    def boot(
        self,
        rank: int,
        extra_env: dict[str, str] | None = None,
        var_lib: Mapping[str, str] | None = None,
    ) -> Node:
        """Boot the VM of `rank` with a fresh disk: the startup script as root
        (`extra_env`: test hooks in the unit's environment; `var_lib`: files already on the
        disk under /var/lib, by relative path, as an earlier start left them)."""
        self.boots += 1
        disk = self.root / f"vm-{rank}-boot-{self.boots}"
        folders = {path: disk / path.strip("/").replace("/", "-") for path in self.node_dirs}
        for directory in (disk / "var-lib", disk / "tmp", *folders.values()):
            directory.mkdir(parents=True)
        # The node's /proc/stat is this machine's, booted hours ago; a VM that boots now has
        # its own boot time, which the launcher keeps on its disk on the first boot (launch.sh,
        # the flex-start deadline): the VM's record of it, unless the test gives one.
        boot_record = {"trainstack/first-boot": f"{int(time.time())}\n"}
        for path, text in {**boot_record, **(var_lib or {})}.items():
            (disk / "var-lib" / path).parent.mkdir(parents=True, exist_ok=True)
            (disk / "var-lib" / path).write_text(text)
        bin_dir = self.image.container(disk)
        env = {
            "PATH": f"{bin_dir}:{self.systemd}:/usr/bin:/bin",
            "HOME": "/root",
            "TMPDIR": str(disk / "tmp"),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            SIMULATED_ACCELERATORS_ENV: "2",
            "GCE_METADATA_HOST": self.metadata[rank].host,
            "STORAGE_EMULATOR_HOST": self.storage,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "TRAINSTACK_LOGGING_ENDPOINT": self.logging_endpoint,
            **(extra_env or {}),
        }
        return start_node(
            ["bash", "-c", self.planned.script],
            env,
            cwd=disk,
            hostname=self.planned.names[rank],
            hosts=self.hosts,
            log_path=disk / "console.log",
            binds={disk / "var-lib": "/var/lib", **{d: p for p, d in folders.items()}},
        )


@pytest.fixture
def fakes() -> Iterator[tuple[str, LoggingFakeServer]]:
    """The GCS emulator and the Cloud Logging API: (STORAGE_EMULATOR_HOST, logging fake)."""
    require_unshare()
    with running_gcs_emulator() as storage, LoggingFakeServer() as logging_api:
        yield storage, logging_api


def _boot_all(group: Group, timeout_s: float) -> list[Node]:
    vms = [group.boot(rank) for rank in range(NODES)]
    codes = [vm.wait(timeout_s) for vm in vms]
    assert codes == [0] * NODES, explain(vms)
    return vms


def _train_once(group: Group, timeout_s: float) -> list[Node]:
    """Boot every VM of `group` and wait until each trained once to the end: its startup
    installed the planned package, its node launcher started 2 processes and the unit ended
    with exit 0 (so the shim did not restart it)."""
    try:
        vms = _boot_all(group, timeout_s)
    finally:
        group.close()
    for rank, vm in enumerate(vms):
        output = vm.output()
        assert "trainstack-launch: installing " + group.planned.package_uri in output
        assert f"trainstack-node: node {rank} of 2, 2 accelerator(s), 2 process(es): " in output
        assert "systemd-shim: trainstack-trainer exited 0" in output
    return vms


def test_the_planned_startup_script_is_the_same_on_every_node() -> None:
    planned = _plan({"steps": 4})
    assert planned.names == ["prod-a100-gce-a100-0", "prod-a100-gce-a100-1"]
    # The VMs the group creates from the plan (`pulumi up` against the Compute Engine fake)
    # are exactly these, each with the rank the tests below boot it with.
    with ComputeFakeServer(deletion_gets=0) as api:
        Stack(Provider(api.endpoint)).up(registered(_stack_config({"steps": 4})))
        group = f"{planned.project}/{planned.zone}/{STACK}-a100"
        vms = {n: m.metadata for n, m in api.members(group).items()}
    assert vms == {name: {NODE_RANK_ATTRIBUTE: str(r)} for r, name in enumerate(planned.names)}
    assert 'systemd-run --unit="$UNIT"' in planned.script
    assert "\nRESTART_PREVENT='0 1 2 5'\n" in planned.script
    assert f"\nCOORDINATOR={planned.names[0]}\n" in planned.script
    assert f"\nPACKAGE_URI={planned.package_uri}\n" in planned.script


@pytest.mark.trainer
def test_two_vms_of_two_gpus_train_as_one_world_of_four(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    storage, logging_api = fakes
    plan = _plan_document({"steps": 4, "checkpoint_every": 2})
    planned = _planned(plan)
    vms = _train_once(Group(tmp_path, planned, storage, logging_api.endpoint), timeout_s=240)
    for vm in vms:
        assert "trainstack-startup: started trainstack-trainer with " in vm.output()
    starts = events(vms, "start")
    assert sorted((s["rank"], s["node"], s["worker"]) for s in starts) == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert {(s["world_size"], s["per_rank_batch"], s["device"]) for s in starts} == {(4, 8, "cpu")}
    [done] = events(vms, "done")
    assert (done["world_size"], done["step"], done["rank"]) == (4, 4, 0)
    assert done["checkpoint_dir"] == f"gs://{planned.checkpoint_bucket}/checkpoints/{STACK}"
    shipped = [e["jsonPayload"] for e in logging_api.entries if "jsonPayload" in e]
    assert {"done"} <= {p.get("event") for p in shipped}

    # Rank 0's launcher recorded the end; the planned supervisor deletes the group's VMs by
    # name: stopping
    # while the group still deletes its VMs, stopped at the check that finds them gone.
    checked = check_with_planned_supervisor(plan, tmp_path / "supervisor", storage, NODES, 4)
    end_uri = planned_supervisor(plan, tmp_path / "supervisor")["run"]["end_uri"]
    ended = read_object(storage, end_uri)
    assert (ended["outcome"], ended["node_rank"]) == ("done", 0)
    assert [(a["seen"], a["action"], a.get("reason"), a["result"]) for a in checked.answers] == [
        (f"SIZE_{NODES}", "stop", "done", "stopping"),
        (f"DELETING_{NODES}", "none", "done", "stopping"),
        ("STOPPED", "none", "done", "compute stopped"),
        ("STOPPED", "none", None, "stopped"),
    ]
    assert (checked.compute.deletions, checked.compute.resizes) == ([planned.stop], [])


@pytest.mark.trainer
@pytest.mark.slow
# A lost peer makes the survivor exit 4 and its unit restarts it (never counted as a code
# error); VM 0 hosts the rendezvous store, which the restarted VM 1 waits for.
@pytest.mark.parametrize("lost", [1, 0])
def test_a_vm_that_is_preempted_is_recreated_and_the_run_ends_as_an_uninterrupted_one(
    lost: int, tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    storage, logging_api = fakes
    planned = _plan({"steps": 24, "checkpoint_every": 4})
    whole = Group(tmp_path / "whole", planned, storage, logging_api.endpoint)
    try:
        [reference] = events(_boot_all(whole, timeout_s=300), "done")
    finally:
        whole.close()

    with running_gcs_emulator() as storage2:
        group = Group(
            tmp_path / "interrupted", planned, storage2, logging_api.endpoint, whole.image
        )
        vms = [group.boot(rank) for rank in range(NODES)]
        try:
            deadline = time.monotonic() + 240
            # Preempt a VM once a checkpoint exists and training went on past it.
            while not any(r.get("event") == "checkpoint" for r in vms[0].records()) or not any(
                r.get("step", 0) >= 6 for r in vms[1].records()
            ):
                assert time.monotonic() < deadline, explain(vms)
                assert all(vm.proc.poll() is None for vm in vms), explain(vms)
                time.sleep(0.2)
            vms[lost].kill()
            recreated = group.boot(lost)
            survivor = vms[1 - lost]
            codes = [survivor.wait(300), recreated.wait(300)]
        finally:
            for vm in vms:
                if vm.proc.poll() is None:
                    vm.kill()
            group.close()
        everything = [*vms, recreated]
        assert codes == [0, 0], explain(everything)
    assert "systemd-shim: trainstack-trainer exited 4" in survivor.output(), explain(everything)
    [done] = events([survivor, recreated], "done")
    assert done["step"] == reference["step"] == 24
    assert done["params_sha256"] == reference["params_sha256"]
    assert events([survivor, recreated], "resume"), explain(everything)


OWN_TRAINER = REPO_ROOT / "examples" / "own-trainer"
SHIPPED_EVENTS = ("train", "done")


def _plan_own_trainer() -> PlannedGroup:
    """examples/own-trainer's gce stack (2 nodes), its entrypoint cut to a short run."""
    stack = yaml.safe_load((OWN_TRAINER / "Pulumi.gce.yaml").read_text())["config"]
    stack["trainstack:trainer"] = {
        **stack["trainstack:trainer"],
        "source": str(OWN_TRAINER),
        "entrypoint": ["python", "train.py", *OWN_ARGS],
    }
    return _planned(build_plan("fidelity-own", stack))


def _script_value(script: str, name: str) -> list[str]:
    """The words a `NAME=...` line of the planned launcher assigns, as bash reads them."""
    [line] = [line for line in script.splitlines() if line.startswith(f"{name}=")]
    value = line.removeprefix(f"{name}=")
    return shlex.split(value.removeprefix("(").removesuffix(")"))


def _objects(storage: str, bucket: str, prefix: str) -> list[str]:
    query = f"{storage}/storage/v1/b/{bucket}/o?prefix={prefix}"
    with urllib.request.urlopen(query, timeout=10) as response:
        return sorted(item["name"] for item in json.load(response).get("items", []))


@pytest.mark.trainer
@pytest.mark.slow  # about 130 s here: 2 VMs install the code and train, then a local-run
def test_own_trainer_on_two_vms_of_two_gpus_is_a_world_of_four_like_local_run(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer]
) -> None:
    storage, logging_api = fakes
    planned = _plan_own_trainer()
    assert planned.names == ["fidelity-own-a100-0", "fidelity-own-a100-1"]
    checkpoints = f"gs://{planned.checkpoint_bucket}"
    assert _script_value(planned.script, "NODE_ARGV") == own_node_args(checkpoints)
    assert [_script_value(planned.script, n) for n in ("USE_TORCHRUN", "USER_CODE")] == [
        ["1"],
        ["1"],
    ]
    # numpy: the script's weights digest needs it (the Deep Learning VM image has it).
    image = Image(tmp_path / "image", planned.sdist, [*IMAGE_PACKAGES, "numpy"])
    group = Group(tmp_path / "vms", planned, storage, logging_api.endpoint, image)
    vms = _train_once(group, timeout_s=300)
    worlds = [rec for vm in vms for rec in vm.records() if "world" in rec]
    assert worlds == [{"event": "start", "rank": 0, "step": 0, "world": 4}], explain(vms)
    [done] = [rec for vm in vms for rec in vm.records() if "params_sha256" in rec]
    assert _objects(storage, planned.checkpoint_bucket, "checkpoints/") == [
        "checkpoints/fidelity-own/step-12/COMPLETE",
        "checkpoints/fidelity-own/step-12/s.pt",
        "checkpoints/fidelity-own/step-6/COMPLETE",
        "checkpoints/fidelity-own/step-6/s.pt",
    ]
    # What each VM printed of the script's train and done lines reached Cloud Logging as
    # structured entries of that VM.
    printed = [
        (vm.name, rec) for vm in vms for rec in vm.records() if rec.get("event") in SHIPPED_EVENTS
    ]
    assert [(rec["event"], rec["step"]) for _, rec in printed] == [("train", 10), ("done", 12)]
    shipped = [
        (e["labels"][GCE_NAME_LABEL], e["jsonPayload"])
        for e in logging_api.entries
        if e.get("jsonPayload", {}).get("event") in SHIPPED_EVENTS
    ]
    assert shipped == printed
    [name] = {name for name, _ in printed}
    rank = planned.names.index(name)
    resources = {
        (e["logName"], json.dumps(e["resource"], sort_keys=True))
        for e in logging_api.entries
        if e.get("labels", {}).get(GCE_NAME_LABEL) == name
    }
    assert resources == {
        (
            "projects/my-ml-project/logs/trainstack",
            json.dumps(
                {
                    "type": "gce_instance",
                    "labels": {
                        "project_id": "my-ml-project",
                        "instance_id": str(1000 + rank),
                        "zone": "us-central1-c",
                    },
                },
                sort_keys=True,
            ),
        )
    }
    # The same code, steps and world (4 processes) through local-run: the same weights.
    assert local_run_digest(tmp_path, workers=4) == done

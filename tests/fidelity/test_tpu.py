"""A Cloud TPU VM's side of a TPU stack, replayed on this machine: the startup script exactly
as the plan renders it, run with bash the way Compute Engine runs it at boot, against real
TensorFlow.

- The plan: `trainstack.infra.plan.build_plan` of the bundled `dev-tpu-v5e` stack (v5litepod-16, 4
  workers, tpu-vm-tf-2.16.0-pod-pjrt), its trainer section cut to a few small steps so a
  run fits in a test (the global batch still a multiple of the 16 chips); the script is
  the V2Vm's `metadata.startup-script` input, the package the plan's BucketObject file. A single-host PJRT variant of the same stack
  (v5litepod-4, tpu-vm-tf-2.20.0-pjrt) covers the single-host environment.
- The metadata server is tests/fakes/metadata_fake.py over HTTP (the script reads it through
  TRAINSTACK_METADATA_URL, the node launcher's log shipper through GCE_METADATA_HOST), Cloud
  Logging the fake of tests/fakes/logging_server.py, which evaluates the plan's log-based
  metric filters over the entries the launcher wrote; gcloud
  is a fake that copies the plan's sdist for its gs:// URI; gs:// checkpoints go to a GCS
  emulator holding the plan's checkpoint bucket.
- The runtime's Python is a fresh virtual environment whose image layer is the shared
  venv's site-packages as a plain path (no .pth processing, so the shared venv's editable
  trainstack stays invisible and `trainers` comes from the installed sdist only). Its
  TensorFlow is this machine's: TF 2.20 with tf-keras 2.20.1. TF 2.20 is the one
  catalog-accepted TensorFlow that can be tested for real here; the bundled stack's runtime
  names TF 2.16, so the script meets a VM whose TensorFlow differs from the runtime's name,
  reports it and pins tf-keras to the TensorFlow it finds. tests/fidelity/
  test_tpu_released_tf.py (opt-in: it installs from PyPI) runs both bundled TPU stacks on the
  TensorFlow releases their runtimes ship, 2.14.1 and 2.16.1. `python3` on PATH runs that
  environment's python, except `python3 -m pip`, which is recorded: the sdist is installed
  for real (offline, without build isolation: the TPU VM's pip would fetch setuptools), the
  tf-keras pin only recorded (offline: the environment's tf-keras 2.20.1 must satisfy it).
- TPU chips are simulated: `TRAINSTACK_SIMULATED_ACCELERATORS=2` makes strategy 'tpu' run
  its loop over 2 CPU devices instead of TPUStrategy.
- Your own code: examples/own-jax's TPU stack (on a 2-host v4-16) boots both hosts at once;
  `python train.py` runs on each through `trainstack.trainers.node --launcher=node` and
  `trainstack.trainers.user_code`, and `jax.distributed.initialize()` finds the slice with JAX's own
  TPU cluster detection (SIMULATED_TPU_VM stands in for the chips and libtpu; the metadata
  fake serves `tpu-env`, the hosts are loopback addresses).
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fidelity.tpu_vm import (
    CHIPS,
    IPS,
    REPO,
    STACK,
    Planned,
    TpuVm,
    cut_plan,
    planned_stack,
    script_records,
)
from trainstack.infra.plan import load_stack


@pytest.fixture(scope="module")
def pod_plan() -> Planned:
    return cut_plan()


def _objects(gcs: str, bucket: str) -> list[str]:
    with urllib.request.urlopen(f"{gcs}/storage/v1/b/{bucket}/o", timeout=10) as response:
        return sorted(item["name"] for item in json.load(response).get("items", []))


TF_PROBE = ["-c", "import tensorflow as tf; print(tf.__version__)"]
NODE_LAUNCH = ["-m", "trainstack.trainers.node", "--launcher=node"]
KERAS_PIN = [
    "-m",
    "pip",
    "install",
    "--quiet",
    "--disable-pip-version-check",
    "--upgrade",
    "--force-reinstall",
    "--no-deps",
    "tf-keras==2.20.*",
]


def _install_calls(vm: TpuVm, planned: Planned) -> list[dict[str, Any]]:
    sdist = str(vm.state / "packages" / planned.package_uri.rsplit("/", 1)[1])
    return [
        {"prog": "gcloud", "argv": ["storage", "cp", planned.package_uri, sdist], "env": {}},
        {
            "prog": "python3",
            "argv": ["-m", "pip", "freeze", "--disable-pip-version-check"],
            "env": {},
        },
        {
            "prog": "python3",
            "argv": [
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--constraint",
                str(vm.state / "runtime-constraints.txt"),
                sdist,
            ],
            "env": {"PIP_BREAK_SYSTEM_PACKAGES": "1"},
        },
    ]


def _run_clock_call(vm: TpuVm, planned: Planned) -> dict[str, Any]:
    """The node helper reading the run's first start (the stack's limits.max_run_hours)."""
    [clock] = re.findall(r"^readonly TS_RUN_CLOCK_URI=(\S+)$", planned.script, re.MULTILINE)
    helper = str(vm.state / "trainstack_node_helper.py")
    return {"prog": "python3", "argv": [helper, "run-started", clock], "env": {}}


def test_pod_worker_0_installs_the_pinned_tf_keras_and_trains_to_done(
    tmp_path: Path, pod_plan: Planned
) -> None:
    assert pod_plan.runtime == "tpu-vm-tf-2.16.0-pod-pjrt"
    vm = TpuVm(tmp_path, pod_plan)
    # The image has TensorFlow and tf-keras but no trainer until the script installs it.
    assert vm.run_python(
        "import importlib.util as u, tensorflow as tf, tf_keras; "
        "print(tf.__version__, tf_keras.__version__, u.find_spec('trainers'))"
    ).split()[-3:] == ["2.20.0", "2.20.1", "None"]
    with running_gcs_emulator(pod_plan.checkpoint_bucket) as gcs:
        result = vm.boot(0, 4, gcs)
        objects = _objects(gcs, pod_plan.checkpoint_bucket)
    tag = "[trainstack slice=dev-tpu-v5e-tpu worker=0]"
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert vm.calls() == [
        _run_clock_call(vm, pod_plan),
        *_install_calls(vm, pod_plan),
        {
            "prog": "python3",
            "argv": TF_PROBE,
            "env": {"TPU_LOAD_LIBRARY": "0"},
        },
        {"prog": "python3", "argv": KERAS_PIN, "env": {"PIP_BREAK_SYSTEM_PACKAGES": "1"}},
        {
            "prog": "python3",
            "argv": [*NODE_LAUNCH, "trainstack.trainers.tf_multiworker", *pod_plan.trainer_args],
            "env": {
                "TPU_WORKER_ID": "0",
                "TPU_WORKER_HOSTNAMES": ",".join(IPS),
                "TPU_LOAD_LIBRARY": "0",
                "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
                "TRAINSTACK_TPU_NODE_ID": "dev-tpu-v5e-tpu",
            },
        },
    ]
    lines = result.stdout.splitlines()
    assert (
        f"{tag} WARNING: runtime tpu-vm-tf-2.16.0-pod-pjrt names TensorFlow 2.16 but python3 "
        "has TensorFlow 2.20.0; matching Keras to 2.20.0"
    ) in lines
    # The pin the script installed admits the tf-keras this TensorFlow runs with.
    assert (
        vm.run_python(
            "import importlib.metadata as m; from packaging.requirements import Requirement; "
            "print(m.version('tf-keras') in Requirement('tf-keras==2.20.*').specifier)"
        )
        == "True"
    )
    # The trainer ran from the installed sdist and reached its done record on the slice's
    # checkpoint bucket.
    site = vm.run_python("import trainstack.trainers as t; print(t.__file__)")
    assert site.startswith(str(vm.root / "image" / "lib"))
    records = script_records(result.stdout, tag)
    [done] = [r for r in records if r.get("event") == "done"]
    assert (done["step"], done["world_size"], done["resumed_from"]) == (3, CHIPS, 0)
    assert done["checkpoint_dir"] == f"gs://{pod_plan.checkpoint_bucket}/checkpoints/{STACK}"
    assert lines[-1] == f"{tag} trainer finished"
    prefix = f"checkpoints/{STACK}/step-"
    steps = {name.split("/")[2] for name in objects if name.startswith(prefix)}
    assert steps == {"step-00000002", "step-00000003"}
    assert (
        f"{tag} trainstack trainer: strategy 'tpu' simulated on {CHIPS} CPU device(s) "
        "(TRAINSTACK_SIMULATED_ACCELERATORS)"
    ) in lines
    # Every trainer record also reached Cloud Logging as a tpu_worker jsonPayload entry of
    # this slice, and the dashboard's metrics select the train and checkpoint records.
    shipped = [e["jsonPayload"] for e in vm.entries if "jsonPayload" in e]
    assert shipped == records
    assert {json.dumps(e["resource"], sort_keys=True) for e in vm.entries} == {
        json.dumps(
            {
                "type": "tpu_worker",
                "labels": {
                    "project_id": "p-exp-42",
                    "zone": "us-central2-b",
                    "node_id": "dev-tpu-v5e-tpu",
                    "worker_id": "0",
                },
            },
            sort_keys=True,
        )
    }
    trains = [r for r in records if r["event"] == "train"]
    assert len(trains) == 3
    assert [e["jsonPayload"] for e in vm.matching["train/lines"]] == trains
    assert [e["jsonPayload"] for e in vm.matching["train/step_time_s"]] == trains
    assert [e["jsonPayload"] for e in vm.matching["checkpoint/stall_s"]] == [
        r for r in records if r["event"] == "checkpoint"
    ]


def test_pod_worker_3_installs_the_package_and_serves(tmp_path: Path, pod_plan: Planned) -> None:
    vm = TpuVm(tmp_path, pod_plan)
    with running_gcs_emulator(pod_plan.checkpoint_bucket) as gcs:
        result = vm.boot(3, 4, gcs)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert vm.calls() == _install_calls(vm, pod_plan)  # no TensorFlow probe, no trainer
    assert result.stdout.splitlines()[-1] == (
        "[trainstack slice=dev-tpu-v5e-tpu worker=3] serving TPU chips to the trainer on "
        f"worker 0 ({IPS[0]}); nothing to launch here"
    )
    assert vm.run_python("import trainstack.trainers; print('ok')") == "ok"


def test_single_host_pjrt_trains_with_the_pluggable_device_environment(tmp_path: Path) -> None:
    planned = cut_plan(
        {"accelerator_type": "v5litepod-4", "runtime_version": "tpu-vm-tf-2.20.0-pjrt"}
    )
    vm = TpuVm(tmp_path, planned)
    with running_gcs_emulator(planned.checkpoint_bucket) as gcs:
        result = vm.boot(0, 1, gcs)
    tag = "[trainstack slice=dev-tpu-v5e-tpu worker=0]"
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    trainer = vm.calls()[-1]
    assert trainer["argv"] == [
        *NODE_LAUNCH,
        "trainstack.trainers.tf_multiworker",
        *planned.trainer_args,
    ]
    # This image has no libtpu package and no /lib/libtpu.so: the path stays unset, said so.
    assert trainer["env"] == {
        "TPU_NAME": "local",
        "TPU_WORKER_ID": "0",
        "TPU_WORKER_HOSTNAMES": IPS[0],
        "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
        "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
        "TRAINSTACK_TPU_NODE_ID": "dev-tpu-v5e-tpu",
    }
    lines = result.stdout.splitlines()
    assert (
        f"{tag} WARNING: no libtpu.so (no libtpu package for python3, no /lib/libtpu.so); TF_PLUGGABLE_DEVICE_LIBRARY_PATH left unset"
        in lines
    )
    assert not any("names TensorFlow" in line for line in lines)  # 2.20 as the runtime says
    assert [c["argv"] for c in vm.calls() if c["argv"][:1] == ["-m"]][2] == KERAS_PIN
    [done] = [r for r in script_records(result.stdout, tag) if r.get("event") == "done"]
    assert (done["step"], done["world_size"]) == (3, CHIPS)


OWN_JAX = REPO / "examples" / "own-jax"
LOOPBACK = ["127.0.0.1", "127.0.0.2"]
"""The 2 simulated hosts share this machine: worker 0, JAX's coordinator, must be reachable
at the first address of `worker-network-endpoints`."""
SIMULATED_TPU_VM = {"JAX_FORCE_TPU_INIT": "1", "JAX_PLATFORMS": "cpu"}
"""What stands in for the TPU chips (JAX finds none on the PCI bus here) and libtpu:
JAX's own switch for "this is a Cloud TPU VM", which turns on its TPU cluster detection, and
its CPU backend where a TPU VM's JAX would load libtpu (`tpu,cpu`). Finding no chips, JAX sets
TPU_SKIP_MDS_QUERY, which only GceTpuCluster reads; GkeTpuCluster, before it, answers here as
on a real VM, where the script's TPU_WORKER_HOSTNAMES is set as well."""
SOURCE_PROBE = (
    "from trainstack.trainers.user_code import installed_source; print(installed_source())"
)
TPU_ENV = (
    "ACCELERATOR_TYPE: 'v4-16'\nCHIPS_PER_HOST_BOUNDS: '2,2,1'\nHOST_BOUNDS: '1,1,2'\n"
    "NODE_ID: 'tpu-tpu'\nTOPOLOGY: '2x2x2'\nTYPE: 'V4'\nWORKER_ID: '{}'\nZONE: 'us-central2-b'\n"
)
"""A v4-16 worker's `tpu-env` metadata attribute in the format of a real v4 VM's (a subset
of its `KEY: 'value'` lines; a single slice has no MEGASCALE_* keys)."""


@pytest.mark.trainer
@pytest.mark.slow  # 26.5 s here (45 s with the 2 cores busy): 2 installs, 2 JAX processes
def test_own_jax_runs_on_every_host_and_finds_the_slice_through_jax_tpu_detection(
    tmp_path: Path,
) -> None:
    pytest.importorskip("jax", reason="examples/own-jax needs jax (test extras: jax[cpu])")
    name, config = load_stack(None, OWN_JAX / "Pulumi.tpu.yaml")
    config["trainstack:trainer"]["source"] = str(OWN_JAX)
    # v4-16 (2x2x2, 8 chips): the catalog's v4 slice of 2 hosts; the example's v4-32 has 4.
    config["trainstack:tpu"]["accelerator_type"] = "v4-16"
    planned = planned_stack(name, config)
    assert planned.runtime == "tpu-ubuntu2204-base"
    assert planned.trainer_args == [
        "--launcher=node",
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://my-ml-project-tpu-checkpoints/checkpoints/tpu",
        "--env=TRAINSTACK_DATA_DIR=gs://my-ml-project-tpu-data",
        "--env=TRAINSTACK_OUTPUT_DIR=gs://my-ml-project-tpu-checkpoints/outputs/tpu",
        "--env=TRAINSTACK_RUN_NAME=tpu",
        "--",
        "python",
        "train.py",
    ]
    vms = [TpuVm(tmp_path / f"worker-{w}", planned) for w in range(2)]

    def boot(worker: int) -> subprocess.CompletedProcess[str]:
        attributes = {"tpu-env": TPU_ENV.format(worker)}
        return vms[worker].boot(worker, 2, None, LOOPBACK, attributes, SIMULATED_TPU_VM)

    # Both hosts boot at once, as a slice's workers do: each process waits for the other.
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(boot, range(2)))
    for worker, (vm, result) in enumerate(zip(vms, results, strict=True)):
        tag = f"[trainstack slice=tpu-tpu worker={worker}]"
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        # Every host runs your code (no TensorFlow probe, no tf-keras, no TPU_LOAD_LIBRARY).
        assert vm.calls() == [
            *_install_calls(vm, planned),
            {
                "prog": "python3",
                "argv": ["-m", "trainstack.trainers.node", *planned.trainer_args],
                "env": {
                    "TPU_WORKER_ID": str(worker),
                    "TPU_WORKER_HOSTNAMES": ",".join(LOOPBACK),
                    "TRAINSTACK_CLOUD_LOGGING": "tpu_worker",
                    "TRAINSTACK_TPU_NODE_ID": "tpu-tpu",
                },
            },
        ]
        lines = result.stdout.splitlines()
        assert (
            f"{tag} trainstack-node: node {worker} of 2, {CHIPS} accelerator(s), 1 process(es): "
            f"{vm.image} -m trainstack.trainers.user_code -- python train.py"
        ) in lines
        assert lines[-1] == f"{tag} trainer finished"
        # The code ran from the uploaded package's source folder in the runtime's Python.
        source = vm.run_python(SOURCE_PROBE)
        assert source.startswith(str(vm.root / "image" / "lib"))
        assert source.endswith("/trainstack/user_source")
        # The script read its worker and the slice, the log shipper project, zone and token,
        # and JAX's TPU cluster detection `tpu-env` 3 times (MEGASCALE_COORDINATOR_ADDRESS,
        # _NUM_SLICES, _SLICE_ID; none: one slice), taking the process id and hosts from
        # the script's TPU_WORKER_* (GkeTpuCluster, first in JAX's list). Had the node added
        # JAX's or Open MPI's variables, Open MPI's cluster would have answered instead.
        # google-auth (2.63) also pings the server's root and reads the default account's
        # info before its token; the node helper reads a token for each heartbeat (as the
        # script starts and as it installs).
        assert sorted(vm.metadata_paths) == [
            "/",
            "instance/attributes/agent-worker-number",
            *["instance/attributes/tpu-env"] * 3,
            "instance/attributes/worker-network-endpoints",
            "instance/service-accounts/default/",
            *["instance/service-accounts/default/token"] * 3,
            "instance/zone",
            "project/project-id",
        ]
        records = script_records(result.stdout, tag)
        launch = {"event": "launch", "rank": worker, "argv": ["python", "train.py"]}
        if worker == 0:
            # Process 0 prints the one result line: a world of 2 that both hosts joined.
            done = {"event": "done", "rank": 0, "world": 2, "ranks": [0, 1], "devices": 2}
            assert records == [launch, {**done, "run": "tpu"}]
        else:
            assert records == [launch]
        # Every record also reached Cloud Logging as this worker's tpu_worker entry.
        assert [e["jsonPayload"] for e in vm.entries if "jsonPayload" in e] == records
        labels = {"project_id": "p-exp-42", "zone": "us-central2-b", "node_id": "tpu-tpu"}
        resource = {"type": "tpu_worker", "labels": {**labels, "worker_id": str(worker)}}
        assert {json.dumps(e["resource"], sort_keys=True) for e in vm.entries} == {
            json.dumps(resource, sort_keys=True)
        }

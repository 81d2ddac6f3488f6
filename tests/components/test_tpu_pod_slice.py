"""TpuPodSlice: catalog validation (table-driven) and exact registrations under Pulumi mocks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from trainstack.components._discovery import normalize_numbers, validate_body
from trainstack.components._tpu_queued_provider import spec_hash
from trainstack.components.startup.tpu_worker import render_tpu_worker_script
from trainstack.components.tpu_pod_slice import (
    TpuPodSlice,
    reservation_name,
    resource_path,
)
from trainstack.components.trainer_package import TrainerPackage
from trainstack.infra.mocks import run_program

PACKAGE = "gs://p-exp-42-staging/trainers/trainstack_trainers-0123456789abcdef.tar.gz"
CKPT = "gs://p-exp-42-checkpoints/checkpoints"
SA = "exp-42-train@p.iam.gserviceaccount.com"
FLAGS = ["--framework=tensorflow", "--strategy=tpu", "--model=cnn", "--steps=2000"]
NETWORK = "https://www.googleapis.com/compute/v1/projects/p/global/networks/exp-42-net"
SUBNET = (
    "https://www.googleapis.com/compute/v1/projects/p/regions/us-central2/subnetworks/exp-42-subnet"
)
ARGS: dict[str, Any] = {
    "project": "p",
    "zone": "us-central2-b",
    "deployment_name": "exp-42",
    "accelerator_type": "v4-32",
    "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    "network_self_link": NETWORK,
    "subnetwork_self_link": SUBNET,
    "network_tags": ["exp-42-train-node"],
    "service_account_email": SA,
    "package_uri": PACKAGE,
    "checkpoint_dir": CKPT,
    "trainer_args": FLAGS,
    "labels": {"team": "ml"},
}
IPS = ["10.130.0.2", "10.130.0.3", "10.130.0.4", "10.130.0.5"]
# `stack`: the Pulumi stack's name (the mocks' `plan`), the label the policy pack requires.
LABELS = {"component": "tpu-pod-slice", "managed-by": "trainstack", "stack": "plan", "team": "ml"}
VM_TYPE = "gcp:tpu/v2Vm:V2Vm"
QR_TYPE = "pulumi-python:dynamic/tpu:QueuedResource"


def _vm_outputs(_name: str, _inputs: dict[str, Any]) -> dict[str, Any]:
    return {"networkEndpoints": [{"ipAddress": ip, "port": 8470} for ip in IPS]}


def _run(extra: Mapping[str, Any] | None = None, *, preview: bool = True) -> Any:
    # A key of `extra` set to None leaves that argument out (the component refuses None).
    args = {k: v for k, v in {**ARGS, **(extra or {})}.items() if v is not None}

    def program() -> dict[str, Any]:
        tpu = TpuPodSlice("exp-42-tpu", args)  # type: ignore[arg-type]
        return {
            "slice_name": tpu.slice_name,
            "worker_ips": tpu.worker_ips,
            "chips": tpu.chips,
            "hosts": tpu.hosts,
            "console_url": tpu.console_url,
            "checkpoint_dir": tpu.checkpoint_dir,
        }

    return run_program(program, preview=preview, outputs={VM_TYPE: _vm_outputs})


def _script(**overrides: Any) -> str:
    kwargs: dict[str, Any] = {
        "slice_name": "exp-42-tpu",
        "package_uri": PACKAGE,
        "trainer_module": "trainstack.trainers.tf_multiworker",
        "trainer_args": FLAGS,
        "checkpoint_dir": CKPT,
        "expected_hosts": 4,
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
        **overrides,
    }
    return render_tpu_worker_script(**kwargs)


def _vm_inputs(**changes: Any) -> dict[str, Any]:
    inputs = {
        "name": "exp-42-tpu",
        "project": "p",
        "zone": "us-central2-b",
        "description": "trainstack TPU slice v4-32",
        "runtimeVersion": "tpu-vm-tf-2.16.0-pod-pjrt",
        "acceleratorConfig": {"type": "V4", "topology": "2x2x4"},
        "networkConfig": {
            "network": "projects/p/global/networks/exp-42-net",
            "subnetwork": "projects/p/regions/us-central2/subnetworks/exp-42-subnet",
            "enableExternalIps": False,
        },
        "serviceAccount": {
            "email": SA,
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        },
        "shieldedInstanceConfig": {"enableSecureBoot": True},
        "metadata": {"startup-script": _script()},
        "labels": LABELS,
        "tags": ["exp-42-train-node"],
        **changes,
    }
    return {k: v for k, v in inputs.items() if v is not None}


# --------------------------------------------------------------------------------------
# Registrations under mocks
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provisioning", "scheduling"),
    [("on-demand", None), ("spot", {"spot": True}), ("reserved", {"reserved": True})],
)
def test_vm_modes_register_one_v2vm_with_exact_inputs(
    provisioning: str, scheduling: dict[str, bool] | None
) -> None:
    run = _run({"provisioning": provisioning})
    assert [(r.type, r.name, r.parent) for r in run.resources] == [
        ("trainstack:tpu:TpuPodSlice", "exp-42-tpu", None),
        (VM_TYPE, "exp-42-tpu-vm", "exp-42-tpu"),
    ]
    vm = run.named("exp-42-tpu-vm")
    assert vm.inputs == _vm_inputs(schedulingConfig=scheduling)
    # A new startup script must replace the node, and the replacement reuses its name.
    assert vm.delete_before_replace is True
    assert run.outputs == {
        "slice_name": "exp-42-tpu",
        "worker_ips": IPS,
        "chips": 16,
        "hosts": 4,
        "console_url": "https://console.cloud.google.com/compute/tpus/details/us-central2-b/"
        "exp-42-tpu?project=p",
        "checkpoint_dir": CKPT,
    }


def test_startup_script_launches_the_tensorflow_trainer_with_the_run_contract() -> None:
    script = _run().named("exp-42-tpu-vm").inputs["metadata"]["startup-script"]
    assert "readonly TS_TRAINER_MODULE=trainstack.trainers.tf_multiworker\n" in script
    assert (
        "readonly TS_TRAINER_ARGS=(--checkpoint_dir=gs://p-exp-42-checkpoints/checkpoints "
        "--framework=tensorflow --strategy=tpu --model=cnn --steps=2000)\n"
    ) in script
    assert "readonly TS_PACKAGE_URI=" + PACKAGE + "\n" in script
    assert "readonly TS_EXPECTED_HOSTS=4\n" in script


def test_max_run_seconds_reaches_the_startup_script() -> None:
    script = _run({"max_run_seconds": 7200}).named("exp-42-tpu-vm").inputs["metadata"]
    assert script["startup-script"] == _script(max_run_seconds=7200)
    assert "\nreadonly TS_MAX_RUN_SECONDS=7200\n" in script["startup-script"]


def test_queued_registers_the_dynamic_resource_with_the_exact_body() -> None:
    run = _run(
        {
            "provisioning": "queued",
            "reservation": "tpu-v4-res",
            "queued": {"tier": "guaranteed", "min_duration_s": 86400, "valid_until_s": 7200},
        }
    )
    assert [(r.type, r.name, r.parent) for r in run.resources] == [
        ("trainstack:tpu:TpuPodSlice", "exp-42-tpu", None),
        (QR_TYPE, "exp-42-tpu-queued", "exp-42-tpu"),
    ]
    qr = run.named("exp-42-tpu-queued")
    assert qr.delete_before_replace is True
    inputs = {k: v for k, v in qr.inputs.items() if k != "__provider"}
    body = normalize_numbers("tpu.v2", "QueuedResource", inputs.pop("body"))
    assert inputs == {
        "project": "p",
        "zone": "us-central2-b",
        "queued_resource_id": "exp-42-tpu-qr",
        "node_id": "exp-42-tpu",
        "wait_timeout_s": 3600,
    }
    node = {
        "description": "trainstack TPU slice v4-32",
        "runtimeVersion": "tpu-vm-tf-2.16.0-pod-pjrt",
        "acceleratorConfig": {"type": "V4", "topology": "2x2x4"},
        "networkConfig": {
            "network": "projects/p/global/networks/exp-42-net",
            "subnetwork": "projects/p/regions/us-central2/subnetworks/exp-42-subnet",
            "enableExternalIps": False,
        },
        "serviceAccount": {
            "email": SA,
            "scope": ["https://www.googleapis.com/auth/cloud-platform"],
        },
        "metadata": {"startup-script": _script()},
        "labels": LABELS,
        "shieldedInstanceConfig": {"enableSecureBoot": True},
        "tags": ["exp-42-train-node"],
    }
    expected = {
        "tpu": {
            "nodeSpec": [
                {
                    "parent": "projects/p/locations/us-central2-b",
                    "nodeId": "exp-42-tpu",
                    "node": node,
                }
            ]
        },
        "guaranteed": {"minDuration": "86400s"},
        "queueingPolicy": {"validUntilDuration": "7200s"},
        "reservationName": "projects/p/locations/us-central2-b/reservations/tpu-v4-res",
    }
    node["labels"] = {**LABELS, "trainstack_spec": spec_hash(expected)}
    assert body == expected
    assert validate_body("tpu.v2", "QueuedResource", body) == []
    assert run.outputs["worker_ips"] == "(known after deploy)"


def test_queued_spot_with_outputs_from_other_components() -> None:
    def program() -> dict[str, Any]:
        package = TrainerPackage("exp-42-trainer", {"staging_bucket": "p-exp-42-staging"})
        args = {
            **ARGS,
            "provisioning": "queued",
            "queued": {"tier": "spot"},
            "package_uri": package.uri,
        }
        tpu = TpuPodSlice("exp-42-tpu", args)  # type: ignore[arg-type]
        return {"script": tpu.startup_script}

    run = run_program(program)
    obj = run.named("exp-42-trainer-sdist").inputs["name"]
    body = run.named("exp-42-tpu-queued").inputs["body"]
    assert body["spot"] == {} and "guaranteed" not in body and "reservationName" not in body
    script = body["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    assert script == _script(package_uri=f"gs://p-exp-42-staging/{obj}") == run.outputs["script"]


def test_reservation_names_and_resource_paths() -> None:
    z = "us-central2-b"
    assert reservation_name("p", z, "-") == f"projects/p/locations/{z}/reservations/-"
    assert reservation_name("p", z, "r1") == f"projects/p/locations/{z}/reservations/r1"
    shared = f"projects/host/locations/{z}/reservations/r2"
    assert reservation_name("p", z, shared) == shared
    assert resource_path(NETWORK) == "projects/p/global/networks/exp-42-net"
    assert resource_path("projects/p/global/networks/n") == "projects/p/global/networks/n"


def test_single_host_data_disks_and_no_tags() -> None:
    run = _run(
        {
            "accelerator_type": "v4-8",
            "runtime_version": "tpu-vm-tf-2.16.0-pjrt",
            "network_tags": [],
            "data_disks": [{"source_disk": "projects/p/zones/us-central2-b/disks/data"}],
        }
    )
    vm = run.named("exp-42-tpu-vm")
    assert vm.inputs["dataDisks"] == [
        {"sourceDisk": "projects/p/zones/us-central2-b/disks/data", "mode": "READ_WRITE"}
    ]
    assert "tags" not in vm.inputs
    assert vm.inputs["acceleratorConfig"] == {"type": "V4", "topology": "2x2x1"}
    assert vm.inputs["metadata"]["startup-script"] == _script(
        expected_hosts=1, runtime_version="tpu-vm-tf-2.16.0-pjrt"
    )
    # Where the runtime image keeps libtpu.so (single-host PJRT) is unverified: said so.
    assert (
        "WARNING",
        "tpu-vm-tf-2.16.0-pjrt: unverified catalog fact: the startup script points "
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH at the libtpu package's libtpu.so (else "
        "/lib/libtpu.so), where Google's TensorFlow harness keeps it; where tpu-vm-tf runtime "
        "images keep it is not documented",
    ) in run.logs


def test_a_hardware_suffixed_runtime_is_accepted_and_reported_unverified() -> None:
    runtime = "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6"
    run = _run(
        {"accelerator_type": "v5litepod-16", "zone": "us-west4-a", "runtime_version": runtime}
    )
    vm = run.named("exp-42-tpu-vm")
    assert vm.inputs["runtimeVersion"] == runtime
    assert "readonly TS_RUNTIME_TF_MINOR=2.18\n" in vm.inputs["metadata"]["startup-script"]
    assert (
        "WARNING",
        f"{runtime}: unverified catalog fact: tpu-vm-tf-2.18.0-pjrt-v5e-and-v6, "
        "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6 and tpu-vm-tf-2.18.0-pjrt-v5p-and-below, seen in "
        "users' test notes and env files, not in Google's documentation (facts-13 section 3, "
        "V-3p)",
    ) in run.logs


def test_generation_and_topology_form_and_a_checkpoint_flag_override() -> None:
    own = "gs://p-exp-42-checkpoints/run-7"
    run = _run(
        {
            "accelerator_type": None,
            "generation": "v5e",
            "topology": "4x4",
            "zone": "us-west4-a",
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
            "trainer_args": [*FLAGS, f"--checkpoint_dir={own}"],
        }
    )
    vm = run.named("exp-42-tpu-vm")
    assert vm.inputs["acceleratorConfig"] == {"type": "V5LITE_POD", "topology": "4x4"}
    assert run.outputs["checkpoint_dir"] == own
    assert (run.outputs["chips"], run.outputs["hosts"]) == (16, 4)
    # The catalog's v5e multi-host VM count is unverified: the plan says so.
    assert (
        "WARNING",
        "v5litepod-16: unverified catalog fact: 4 chips per VM comes from xpk and ai-on-gke "
        "code, not a Google doc sentence",
    ) in run.logs


def test_secure_boot_can_be_turned_off() -> None:
    vm = _run({"secure_boot": False}).named("exp-42-tpu-vm")
    assert "shieldedInstanceConfig" not in vm.inputs


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"provisioning": "spot", "reservation": "res-1"},
            "reservation: 'res-1' needs provisioning 'queued': a TPU VM created directly "
            "('spot') can only consume any matching reservation, not name one; valid: "
            "provisioning queued, or provisioning reserved without reservation",
        ),
        ({"labels": {"Team": "ml"}}, None),
    ],
)
def test_invalid_args_raise_before_anything_is_registered(
    extra: dict[str, Any], message: str | None
) -> None:
    with pytest.raises(ValueError) as info:
        _run(extra)
    if message is not None:
        prefixed = message if message.startswith("TpuPodSlice.") else f"TpuPodSlice.{message}"
        assert str(info.value) == prefixed

"""What keeps billing after the run supervisor's stop (`Target.still_billing_after_stop`):
GKE's cluster fee and system node until `pulumi destroy`, a reservation the compute consumed
until it is deleted (or, for TPUs, its period ends). `trainstack status` lists it once the
supervisor recorded the stop, read over the storage emulator like its other events; the
plan notes it."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.kube_server import KubeFakeServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.tpu_server import TpuFakeServer
from tests.unit.test_logs import OUTPUTS
from tests.unit.test_status import NOW, P, put
from tests.unit.test_status_recoveries import _upload
from trainstack.infra.cli import app
from trainstack.infra.config import load_stack_config
from trainstack.infra.estimate import still_billing_note
from trainstack.infra.plan import load_stack
from trainstack.infra.targets import StillBilling, target_of

GKE_LINE = (
    "still billing after the stop: GKE cluster fee and system node $0.23/hour (the GKE free "
    "tier's $74.40 monthly credit per billing account may cover one zonal cluster's "
    "$0.10/hour fee) until `pulumi destroy -s dev-a100-gke`"
)
GCE_RESERVATION_LINE = (
    "still billing after the stop: reservation a100-reservation in us-central1-c about "
    "$117.55/hour whatever runs on it (the 4 x a2-highgpu-8g this stack used, at on-demand "
    "list price), until it is deleted (not this stack's)"
)
TPU_RESERVED_LINE = (
    "still billing after the stop: the TPU reservation the slice used (any matching one in "
    "us-west4-a) about $19.20/hour whatever runs on it (the slice's 16 v5e chips at on-demand "
    "list price, the most it costs), until its period ends or it is deleted (not this "
    "stack's) (inferred, not verified)"
)


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator() as url:
        yield url


def _config(stack: str, section: str, **changes: Any) -> dict[str, Any]:
    _, config = load_stack(stack, None)
    config = copy.deepcopy(config)
    config[f"trainstack:{section}"] |= changes
    return config


def _status(
    tmp_path: Path,
    gcs: str,
    stack: str,
    config: dict[str, Any],
    stopped: bool,
    *endpoints: str,
    as_json: bool = False,
    result: str = "ok",
) -> tuple[int, str, str]:
    """`trainstack status --config-file` of `stack` (its file written from `config`), whose
    supervisor recorded the run's end and, when `stopped`, its stop (`result`)."""
    bucket = f"{P}-{stack}-checkpoints"
    put(gcs, bucket)
    event = {
        "time": "2026-11-23T11:40:00Z",
        "resource": f"projects/{P}/zones/z/instanceGroupManagers/{stack}",
        "seen": "RUNNING",
        "action": "stop" if stopped else "request_stop",
        "result": result,
        "attempt": 0,
        "next_allowed": None,
        "reason": "done",
    }
    folder = f"supervisor/{stack}-{stopped}"
    _upload(gcs, bucket, f"{folder}/events.jsonl", json.dumps(event).encode() + b"\n")
    _upload(gcs, bucket, f"{folder}/state.json", b'{"run": {"spend_usd": 40.0}}')
    outputs = {
        **OUTPUTS[stack],
        "checkpoint_url": f"gs://{bucket}",
        "checkpoint_dir": f"gs://{bucket}/checkpoints/{stack}",
        "supervisor_events_uri": f"gs://{bucket}/{folder}/events.jsonl",
    }
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    stack_file = tmp_path / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    argv = ["status", "--config-file", str(stack_file), "--outputs", str(tmp_path / "outputs.json")]
    argv += ["--now", NOW, "--endpoint", f"storage={gcs}/storage/v1/"]
    for endpoint in endpoints:
        argv += ["--endpoint", endpoint]
    result = CliRunner().invoke(app, [*argv, "--json"] if as_json else argv)
    return result.exit_code, result.stdout, result.stderr


def _gke(tmp_path: Path, gcs: str, stopped: bool, as_json: bool = False) -> tuple[int, str, str]:
    _, config = load_stack("dev-a100-gke", None)
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        kube = stack.enter_context(KubeFakeServer())
        kube.jobs["default/dev-a100-gke-train"] = {
            "status": {
                "startTime": "2026-11-23T11:00:00Z",
                "completionTime": "2026-11-23T11:30:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        }
        return _status(
            tmp_path,
            gcs,
            "dev-a100-gke",
            config,
            stopped,
            f"logging={logs.endpoint}",
            f"kubernetes={kube.endpoint}",
            as_json=as_json,
        )


def test_a_stopped_gke_run_still_bills_its_cluster_until_destroy(tmp_path: Path, gcs: str) -> None:
    code, out, err = _gke(tmp_path, gcs, stopped=True)
    assert (code, err) == (0, "")
    assert out.splitlines()[-4:-1] == [
        "finished (done); compute stopped at 2026-11-23T11:40:00Z",
        "spend counted by the supervisor: $40.00",
        GKE_LINE,
    ]


def test_the_json_status_names_what_still_bills(tmp_path: Path, gcs: str) -> None:
    code, out, err = _gke(tmp_path, gcs, stopped=True, as_json=True)
    assert (code, err) == (0, "")
    assert json.loads(out)["still_billing_after_stop"] == [
        {
            "what": "GKE cluster fee and system node",
            "hourly_usd": 0.23,
            "until": "`pulumi destroy -s dev-a100-gke`",
            "ours": True,
            "basis": "the GKE free tier's $74.40 monthly credit per billing account may cover "
            "one zonal cluster's $0.10/hour fee",
            "verified": True,
        }
    ]


def test_a_run_not_yet_stopped_says_nothing_of_after_the_stop(tmp_path: Path, gcs: str) -> None:
    code, out, err = _gke(tmp_path, gcs, stopped=False, as_json=True)
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert (info["supervisor"]["stopped_at"], "still_billing_after_stop" in info) == (None, False)


def test_a_stopped_gce_run_on_a_reservation_says_the_reservation_still_bills(
    tmp_path: Path, gcs: str
) -> None:
    config = _config("prod-a100-gce", "gpu_cluster", reservation="a100-reservation")
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        compute = stack.enter_context(ComputeFakeServer())  # the group deleted the VMs
        code, out, err = _status(
            tmp_path,
            gcs,
            "prod-a100-gce",
            config,
            True,
            f"logging={logs.endpoint}",
            f"compute={compute.endpoint}",
        )
    assert (code, err) == (0, "")
    assert out.splitlines()[-4:-1] == [
        "finished (done); compute stopped at 2026-11-23T11:40:00Z",
        "spend counted by the supervisor: $40.00",
        GCE_RESERVATION_LINE,
    ]


def test_a_stopped_gce_run_without_a_reservation_bills_nothing_after(
    tmp_path: Path, gcs: str
) -> None:
    _, config = load_stack("prod-a100-gce", None)
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        compute = stack.enter_context(ComputeFakeServer())
        code, out, err = _status(
            tmp_path,
            gcs,
            "prod-a100-gce",
            config,
            True,
            f"logging={logs.endpoint}",
            f"compute={compute.endpoint}",
        )
    assert (code, err) == (0, "")
    assert out.splitlines()[-3:-1] == [
        "finished (done); compute stopped at 2026-11-23T11:40:00Z",
        "spend counted by the supervisor: $40.00",
    ]


def test_a_gce_stop_that_failed_names_the_command_deleting_the_stacks_vms(
    tmp_path: Path, gcs: str
) -> None:
    _, config = load_stack("prod-a100-gce", None)
    denied = "error: HTTP 403: Required 'compute.instanceGroupManagers.update' permission"
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        compute = stack.enter_context(ComputeFakeServer())
        code, out, err = _status(
            tmp_path,
            gcs,
            "prod-a100-gce",
            config,
            True,
            f"logging={logs.endpoint}",
            f"compute={compute.endpoint}",
            result=denied,
        )
    assert (code, err) == (0, "")
    # The VMs by the stack's `instance_names` output, as the supervisor deletes them.
    assert out.splitlines()[-3] == (
        "finished (done) but still billing $117.55/hour: the supervisor could not stop it; "
        "run: gcloud compute instance-groups managed delete-instances prod-a100-gce --instances="
        "prod-a100-gce-a100-0,prod-a100-gce-a100-1,prod-a100-gce-a100-2,prod-a100-gce-a100-3 "
        f"--skip-instances-on-validation-error --zone=z --project={P}"
    )


def test_a_deleted_reserved_slice_leaves_its_reservation_billing(tmp_path: Path, gcs: str) -> None:
    config = _config("dev-tpu-v5e", "tpu", provisioning="reserved")
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        tpu = stack.enter_context(TpuFakeServer())  # the supervisor deleted the slice
        code, out, err = _status(
            tmp_path,
            gcs,
            "dev-tpu-v5e",
            config,
            True,
            f"logging={logs.endpoint}",
            f"tpu={tpu.endpoint}",
        )
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == "state: NOT_FOUND"
    assert out.splitlines()[-4:-1] == [
        "finished (done); compute stopped at 2026-11-23T11:40:00Z",
        "spend counted by the supervisor: $40.00",
        TPU_RESERVED_LINE,
    ]


def _after(stack: str, section: str, **changes: Any) -> list[StillBilling]:
    cfg = load_stack_config(_config(stack, section, **changes))
    return target_of(cfg).still_billing_after_stop(cfg, stack)


@pytest.mark.parametrize(
    ("reservation", "what"),
    [
        ("tpu-res", "reservation tpu-res in us-central2-b"),
        (
            "projects/shared/locations/us-central2-b/reservations/r",
            "reservation projects/shared/locations/us-central2-b/reservations/r",
        ),
        (
            "-",
            "the TPU reservation the queued resource used (any of the project's in us-central2-b)",
        ),
    ],
)
def test_a_queued_slice_names_the_reservation_it_consumes(reservation: str, what: str) -> None:
    [item] = _after("prod-tpu-v4-32", "tpu", provisioning="queued", reservation=reservation)
    assert (item.what, item.hourly_usd, item.ours, item.verified) == (what, 51.52, False, False)


@pytest.mark.parametrize(
    ("stack", "section", "changes"),
    [
        ("prod-tpu-v4-32", "tpu", {}),  # on-demand: the slice was all it billed
        ("dev-tpu-v5e", "tpu", {}),  # spot
        ("prod-tpu-v4-32", "tpu", {"provisioning": "queued"}),  # queued without a reservation
        ("prod-a100-gce", "gpu_cluster", {}),
    ],
)
def test_nothing_bills_after_the_stop_without_gke_or_a_reservation(
    stack: str, section: str, changes: dict[str, Any]
) -> None:
    assert _after(stack, section, **changes) == []
    assert still_billing_note(load_stack_config(_config(stack, section, **changes)), stack) is None


def test_a_gke_cluster_on_a_reservation_lists_both() -> None:
    items = _after("dev-a100-gke", "gpu_cluster", spot=False, reservation="r1")
    assert [(i.what, i.hourly_usd, i.ours) for i in items] == [
        ("GKE cluster fee and system node", 0.23, True),
        ("reservation r1 in us-central1-a", 58.77, False),
    ]


def test_the_plan_notes_what_still_bills_after_the_stop() -> None:
    cfg = load_stack_config(_config("prod-a100-gce", "gpu_cluster", reservation="a100-reservation"))
    assert still_billing_note(cfg, "prod-a100-gce") == (
        "the supervisor's stop at the run's end (or a limit) ends the compute's $117.55/hour; "
        "still billing after it, outside its spend count: reservation a100-reservation in "
        "us-central1-c about $117.55/hour whatever runs on it (the 4 x a2-highgpu-8g this stack "
        "used, at on-demand list price), until it is deleted (not this stack's)"
    )


def test_a_target_without_a_supervisor_has_no_note() -> None:
    _, config = load_stack("prod-vertex-rs", None)
    assert still_billing_note(load_stack_config(copy.deepcopy(config)), "prod-vertex-rs") is None

"""`trainstack status`, `logs` and `plan-diff` of the bundled flex-start stack `dev-b200-gce`,
whose VMs its resize request names: status lists the group's VMs (`listManagedInstances`,
against the Compute Engine fake), logs match the group's auto-names, `--worker` is refused,
and a new template says the group is replaced."""

from __future__ import annotations

import copy
import json
from contextlib import ExitStack
from pathlib import Path

from tests.bundled import bundled_plan
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.unit.test_logs import runner
from tests.unit.test_status import NOW, P, checkpoints, gcs, put
from tests.unit.test_status_recoveries import _upload
from trainstack.infra.cli import app
from trainstack.infra.plan_diff import plan_diff

STACK = "dev-b200-gce"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
GROUP = f"{STACK}-a100"
OUTPUTS = {"target": "gpu_cluster", "cluster_name": GROUP, "instance_names": []}


__all__ = ["gcs"]  # the GCS emulator fixture, shared with test_status


def _outputs(tmp_path: Path, **more: str) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**OUTPUTS, **more}))
    return path


def test_status_lists_the_vms_the_resize_request_made(tmp_path: Path, gcs: str) -> None:
    outputs = _outputs(tmp_path, checkpoint_url=checkpoints(gcs, STACK, [], []))
    group = f"{P}/us-central1-b/{GROUP}"
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        compute = stack.enter_context(ComputeFakeServer())
        # The group holds two VMs of its own naming (`<base>-xxxx`), as a resize request
        # leaves it (tests/fakes/compute_server.py).
        compute.groups[group] = {"targetSize": 2, "baseInstanceName": GROUP}
        names = sorted(compute.members(group))
        assert names == [f"{GROUP}-0001", f"{GROUP}-0002"]
        for i, name in enumerate(names):
            compute.instances[f"{P}/us-central1-b/{name}"] = {
                "status": "RUNNING",
                "creationTimestamp": "2026-11-23T11:00:00.000Z",
                "networkInterfaces": [{"networkIP": f"10.0.0.{10 + i}"}],
            }
        argv = ["status", "--stack", STACK, "--outputs", str(outputs), "--now", NOW, "--json"]
        for endpoint in (
            f"logging={logs.endpoint}",
            f"compute={compute.endpoint}",
            f"storage={gcs}/storage/v1/",
        ):
            argv += ["--endpoint", endpoint]
        result = runner.invoke(app, argv)
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    assert json.loads(result.stdout)["hosts"] == [
        {"name": f"{GROUP}-0001", "state": "RUNNING", "address": "10.0.0.10"},
        {"name": f"{GROUP}-0002", "state": "RUNNING", "address": "10.0.0.11"},
    ]


def test_logs_match_the_groups_names_and_refuse_a_worker(tmp_path: Path) -> None:
    outputs = _outputs(tmp_path)
    with LoggingFakeServer() as server:
        argv = ["logs", "--stack", STACK, "--outputs", str(outputs)]
        argv += ["--endpoint", f"logging={server.endpoint}"]
        result = runner.invoke(app, argv)
        assert (result.exit_code, result.stderr) == (0, "")
        assert server.requests[-1][2]["filter"] == (
            'resource.type="gce_instance" AND '
            f'labels."compute.googleapis.com/resource_name"=~"^{GROUP}-[a-z0-9]{{4}}$"'
        )
        result = runner.invoke(app, [*argv, "--worker", "0"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: --worker: not available for stack '{STACK}': its flex-start VMs are named by "
        "the group's resize request and claim their ranks at start; valid: no --worker (every "
        "VM's lines carry its name)\n",
    )


def test_plan_diff_says_a_new_template_replaces_the_flex_start_group() -> None:
    base = bundled_plan(STACK)
    head = copy.deepcopy(base)
    [template] = [r for r in head["resources"] if r["type"] == TEMPLATE]
    template["inputs"]["machineType"] = "a3-ultragpu-8g"
    folder = f"gs://my-ml-project-{STACK}-checkpoints/checkpoints/{STACK}"
    assert plan_diff(base, head).splitlines()[5] == (
        f"  - **group `{STACK}-gpu-group` is replaced (flex-start: a new template replaces the "
        "group, `replace_on_changes` in components/a100_cluster/gce.py, with its VMs and resize "
        "request, and the new request waits for capacity again), which relaunches training; "
        f"resumes from the newest checkpoint in `{folder}`**"
    )


def test_a_failed_stop_names_the_vms_the_group_lists(tmp_path: Path, gcs: str) -> None:
    """The stack's `instance_names` output names no VM (the resize request names them): the
    command status gives after a failed stop names the VMs the group lists."""
    bucket = f"{P}-{STACK}-checkpoints"
    put(gcs, bucket)
    group = f"{P}/us-central1-b/{GROUP}"
    event = {
        "time": "2026-11-23T11:40:00Z",
        "resource": f"projects/{P}/zones/us-central1-b/instanceGroupManagers/{GROUP}",
        "seen": "SIZE_2",
        "action": "stop",
        "result": "error: HTTP 403: Required 'compute.instanceGroupManagers.update' permission",
        "attempt": 0,
        "next_allowed": None,
        "reason": "done",
    }
    _upload(gcs, bucket, "supervisor/events.jsonl", json.dumps(event).encode() + b"\n")
    _upload(gcs, bucket, "supervisor/state.json", b'{"run": {"spend_usd": 4.0}}')
    outputs = _outputs(
        tmp_path,
        checkpoint_url=f"gs://{bucket}",
        checkpoint_dir=f"gs://{bucket}/checkpoints/{STACK}",
        supervisor_events_uri=f"gs://{bucket}/supervisor/events.jsonl",
    )
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        compute = stack.enter_context(ComputeFakeServer())
        compute.groups[group] = {"targetSize": 2, "baseInstanceName": GROUP}
        argv = ["status", "--stack", STACK, "--outputs", str(outputs), "--now", NOW]
        for endpoint in (
            f"logging={logs.endpoint}",
            f"compute={compute.endpoint}",
            f"storage={gcs}/storage/v1/",
        ):
            argv += ["--endpoint", endpoint]
        result = runner.invoke(app, argv)
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("finished")]
    assert line.split("run: ", 1)[1] == (
        f"gcloud compute instance-groups managed delete-instances {GROUP} --instances="
        f"{GROUP}-0001,{GROUP}-0002 --skip-instances-on-validation-error --zone=us-central1-b "
        f"--project={P}"
    )

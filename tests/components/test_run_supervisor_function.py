"""The supervisor stopping a run's compute at its end, as Cloud Functions runs it: Google's
`functions-framework` serving the bundle `build_source` writes (the component's own code
path), against the Compute Engine, GKE and TPU fakes, the metadata server fake and the GCS
emulator (about 30 s). A group whose VMs are deleted, or a pool set to 0, keeps its instances
for a few checks (the fake's `deletion_gets`), as Google's does: the run is "stopping" until
they are gone."""

from __future__ import annotations

import contextlib
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import yaml

from tests import REPO_ROOT
from tests.components.test_tpu_supervisor_function import SA, Function, state_bucket
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.container_server import ContainerFakeServer
from tests.fakes.gcs_emulator import free_port, running_gcs_emulator
from tests.fakes.metadata_fake import MetadataFake
from tests.fakes.tpu_server import TpuFakeServer
from trainstack.components._discovery import validate_body
from trainstack.components.run_supervisor import build_source, supervisor_config
from trainstack.infra.config import load_stack_config
from trainstack.infra.supervision import supervisor_lines, supervisor_status

BUCKET = "p-exp-42-checkpoints"
STATE = "p-exp-42-supervisor"
"""The supervisor's own bucket: its state and events (the training account cannot write it)."""
KEY = "0123456789abcdef"
RUN = {
    "end_uri": f"gs://{BUCKET}/trainstack-run-{KEY}.ended",
    "stop_uri": f"gs://{BUCKET}/trainstack-run-{KEY}.stop",
}
CLOCK = f"{BUCKET}/trainstack-run-{KEY}.started"
"""The run clock the startup scripts keep beside the checkpoints (the supervisor keeps its
own)."""
TRAINER_WRITABLE_STATE = f"{BUCKET}/supervisor/exp-42/state.json"
"""Where the supervisor's state was, in the checkpoint bucket the training account writes."""
MIG = "projects/p/zones/us-central1-a/instanceGroupManagers/exp-42-a100"
GROUP = "p/us-central1-a/exp-42-a100"
VMS = ["exp-42-a100-0", "exp-42-a100-1"]
"""The group's VMs, as `pulumi up` left them (one per-instance config each)."""
DELETE_VMS = {
    "instances": [f"zones/us-central1-a/instances/{name}" for name in VMS],
    "skipInstancesOnValidationError": True,
}
"""The supervisor's stop: its VMs deleted by name (`deleteInstances`)."""
POOL = "projects/p/locations/us-central1-a/clusters/exp-42-gke/nodePools/gpu-pool"
POOL_GROUP = "p/us-central1-a/gke-exp-42-gke-gpu-pool-1a2b3c4d-grp"
NODE = "projects/p/locations/us-west4-a/nodes/exp-42-tpu"
BODY = {
    "runtimeVersion": "v2-alpha-tpuv5-lite",
    "acceleratorConfig": {"type": "V5LITE_POD", "topology": "2x2"},
    "schedulingConfig": {"spot": True},
}


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator(bucket=BUCKET) as url:
        yield url


class World:
    def __init__(
        self,
        function: Function,
        fs: Any,
        fakes: tuple[ComputeFakeServer, ContainerFakeServer, TpuFakeServer],
    ) -> None:
        self.function, self.fs = function, fs
        self.compute, self.container, self.tpu = fakes

    def events(self) -> list[dict[str, Any]]:
        self.fs.invalidate_cache()
        path = f"{STATE}/events.jsonl"
        if not self.fs.exists(path):
            return []
        return [json.loads(line) for line in self.fs.cat_file(path).decode().splitlines()]

    def put(self, uri: str, value: Any) -> None:
        self.fs.pipe_file(uri.removeprefix("gs://"), json.dumps(value).encode())

    def status_lines(
        self, stack: str = "prod-a100-gce", instances: list[str] | None = None
    ) -> list[str]:
        """`trainstack status`'s supervisor lines for the events and state so far (the
        stack's config and name; $58.77/hour; its `instance_names` output)."""
        self.fs.invalidate_cache()
        state = json.loads(self.fs.cat_file(f"{STATE}/state.json"))
        loaded = yaml.safe_load((REPO_ROOT / f"stacks/Pulumi.{stack}.yaml").read_text())
        cfg = load_stack_config(loaded["config"])
        status = supervisor_status(
            self.events(),
            state,
            (cfg.project, cfg.limits.max_total_usd),
            58.77,
            stack,
            None,
            instances,
        )
        return supervisor_lines(status)

    def seed(self, **run: Any) -> None:
        """The supervisor's own state of this run as its earlier checks left it."""
        state = {"attempts": 0, "next_allowed": None, "recreate": False}
        state["run"] = {"id": RUN["end_uri"], **run}
        self.fs.pipe_file(f"{STATE}/state.json", json.dumps(state).encode())

    def read(self, uri: str) -> Any:
        self.fs.invalidate_cache()
        return json.loads(self.fs.cat_file(uri.removeprefix("gs://")))


@contextlib.contextmanager
def _world(
    tmp: Path,
    gcs: str,
    config: dict[str, Any],
    *,
    clean: bool = True,
    deletion_gets: int = 1,
    compute_endpoint: str | None = None,
    storage_endpoint: str | None = None,
) -> Iterator[World]:
    """The bundle of `config` served, its fakes, and the emulator at `gcs` (the function
    reaches it at `storage_endpoint` where given: `tests.fakes.storage_grant`)."""
    bundle = build_source(config, tmp / "build")
    folder = tmp / f"source-{bundle.sha256[:8]}"
    with zipfile.ZipFile(bundle.path) as archive:
        archive.extractall(folder)
    fs = fsspec.filesystem("gcs", endpoint_url=gcs, token="anon")
    for leftover in fs.find(BUCKET) if clean else ():
        fs.rm(leftover)
    if clean:
        state_bucket(fs, STATE)
    values = {"instance/service-accounts/default/": json.dumps({"email": SA, "scopes": []})}
    with (
        ComputeFakeServer(deletion_gets) as compute,
        ContainerFakeServer() as container,
        TpuFakeServer() as tpu,
        MetadataFake(values) as metadata,
    ):
        env = {
            "GCE_METADATA_HOST": metadata.host,
            "GCE_METADATA_IP": metadata.host,
            "STORAGE_EMULATOR_HOST": storage_endpoint or gcs,
            "TRAINSTACK_TPU_API_ENDPOINT": tpu.endpoint,
            "TRAINSTACK_COMPUTE_API_ENDPOINT": compute_endpoint or compute.endpoint,
            "TRAINSTACK_CONTAINER_API_ENDPOINT": container.endpoint,
        }
        function = Function(folder, env)
        world = World(function, fs, (compute, container, tpu))
        try:
            yield world
        finally:
            function.stop()


def _summary(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["seen"], e["action"], e.get("reason"), e["result"]) for e in events]


def test_a_finished_gce_run_is_stopped_once_its_group_holds_no_instances(
    tmp_path: Path, gcs: str
) -> None:
    # $100 a second: every check adds to the spend while the group holds instances.
    run = {**RUN, "hourly_usd": 360000.0}
    config = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    group = GROUP
    with _world(tmp_path, gcs, config, deletion_gets=2) as world:
        world.compute.create_instances(group, VMS)
        running = world.function.call()
        assert (running["seen"], running["action"]) == ("SIZE_2", "none")
        world.put(RUN["end_uri"], {"outcome": "done", "step": 100})
        stop = world.function.call()
        assert (stop["seen"], stop["action"], stop["reason"], stop["result"]) == (
            "SIZE_2",
            "stop",
            "done",
            "stopping",
        )
        # Exactly its VMs, by name: never a resize.
        assert (world.compute.deletions, world.compute.resizes) == ([(group, DELETE_VMS)], [])
        assert (
            validate_body("compute.v1", "InstanceGroupManagersDeleteInstancesRequest", DELETE_VMS)
            == []
        )
        # Google's deleteInstances is DONE once scheduled: size 0, the two VMs still there.
        deleting = world.function.call()
        assert (deleting["seen"], deleting["action"], deleting["result"]) == (
            "DELETING_2",
            "none",
            "stopping",
        )
        assert world.status_lines()[0] == (
            f"finished (done); stopping the compute since {stop['time']} "
            "(2 instance(s) still being deleted)"
        )
        still = world.function.call()
        assert (still["seen"], still["result"], world.compute.gone) == (
            "DELETING_2",
            "stopping",
            {},
        )
        gone = world.function.call()
        assert (gone["seen"], gone["action"], gone["reason"], gone["result"]) == (
            "STOPPED",
            "none",
            "done",
            "compute stopped",
        )
        assert list(world.compute.gone) == [group]
        assert (world.compute.members(group), world.compute.groups[group]["targetSize"]) == (
            {},
            0,
        )
        after = world.function.call()
        assert (after["seen"], after["result"]) == ("STOPPED", "stopped")
        assert len(world.compute.deletions) == 1  # never deleted again
        events = world.events()
        assert _summary(events) == [
            ("SIZE_2", "stop", "done", "stopping"),
            ("DELETING_2", "none", "done", "stopping"),  # one line: the second is the same
            ("STOPPED", "none", "done", "compute stopped"),
        ]
        assert [e["instances_left"] for e in events[:2]] == [2, 2]
        # The spend kept counting until the check that found the instances gone.
        spends = [stop["spend_usd"], deleting["spend_usd"], still["spend_usd"]]
        assert spends == sorted(spends) and len(set(spends)) == 3
        assert gone["spend_usd"] > still["spend_usd"]
        state = json.loads(world.fs.cat_file(f"{STATE}/state.json"))
        assert state["run"]["spend_usd"] == pytest.approx(gone["spend_usd"], abs=0.005)
        assert world.status_lines() == [
            f"finished (done); compute stopped at {gone['time']}",
            f"spend counted by the supervisor: ${gone['spend_usd']:,.2f}",
        ]


def test_a_group_already_emptying_at_the_runs_end_is_waited_for_not_stopped_again(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=RUN, instances=VMS)
    group = GROUP
    with _world(tmp_path, gcs, config) as world:
        world.compute.groups[group] = {"targetSize": 2}
        world.compute.scale(group, 0)  # someone emptied it a moment ago
        world.put(RUN["end_uri"], {"outcome": "done"})
        assert world.function.call()["result"] == "stopping"
        assert world.function.call()["result"] == "compute stopped"
        assert (world.compute.deletions, world.compute.resizes) == ([], [])
        assert _summary(world.events()) == [
            ("DELETING_2", "none", "done", "stopping"),
            ("STOPPED", "none", "done", "compute stopped"),
        ]


def test_a_gke_run_past_max_run_hours_saves_then_its_pool_goes_to_zero(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("node_pool", POOL, None, STATE, run={**RUN, "max_run_seconds": 3600})
    with _world(tmp_path, gcs, config) as world:
        world.compute.groups[POOL_GROUP] = {"targetSize": 2}
        url = f"https://www.googleapis.com/compute/v1/projects/{POOL_GROUP.split('/')[0]}/zones/"
        url += "us-central1-a/instanceGroupManagers/" + POOL_GROUP.rsplit("/", 1)[-1]
        world.container.pools[POOL] = {"instanceGroupUrls": [url]}

        def set_size(name: str, count: int) -> None:
            world.compute.scale(POOL_GROUP, count)  # GKE resizes the pool's group

        world.container.on_set_size = set_size
        world.seed(started=time.time() - 3601)  # its first sight of the pool billing
        request = world.function.call()
        assert (request["seen"], request["action"], request["reason"]) == (
            "SIZE_2",
            "request_stop",
            "max_run_hours",
        )
        assert world.read(RUN["stop_uri"])["reason"] == "max_run_hours"
        waiting = world.function.call()  # no checkpoint yet: the pool keeps its nodes
        assert waiting["result"] == "waiting for the trainer's checkpoint"
        assert world.container.set_sizes == []
        world.put(RUN["end_uri"], {"outcome": "stopped", "step": 40})
        stop = world.function.call()
        assert (stop["action"], stop["reason"], stop["result"]) == ("stop", "stopped", "stopping")
        [(name, body)] = world.container.set_sizes
        assert (name, body) == (POOL, {"nodeCount": 0})
        assert validate_body("container.v1", "SetNodePoolSizeRequest", body) == []
        assert world.function.call()["seen"] == "DELETING_2"  # the group's VMs still there
        assert world.function.call()["seen"] == "STOPPED"
        assert world.function.call()["result"] == "stopped"
        assert len(world.container.set_sizes) == 1
        # The end record says only "stopped"; status names the limit that asked for it.
        [finished] = [x for x in world.status_lines("dev-a100-gke") if x.startswith("finished")]
        assert finished.startswith(
            "finished (stopped at limits.max_run_hours); compute stopped at "
        )
        assert _summary(world.events()) == [
            ("SIZE_2", "request_stop", "max_run_hours", "ok"),
            ("SIZE_2", "stop", "stopped", "stopping"),
            ("DELETING_2", "none", "stopped", "stopping"),
            ("STOPPED", "none", "stopped", "compute stopped"),
        ]


def test_the_spend_cap_stops_a_tpu_run_after_its_checkpoint_and_never_recreates_it(
    tmp_path: Path, gcs: str
) -> None:
    # $100 a second, so two calls a second apart pass a $50 cap.
    run = {**RUN, "hourly_usd": 360000.0, "max_total_usd": 50.0}
    config = supervisor_config("node", NODE, BODY, STATE, run=run)
    with _world(tmp_path, gcs, config) as world:
        world.tpu.nodes[NODE] = {**BODY, "name": NODE, "state": "READY"}
        first = world.function.call()
        assert first["action"] == "none"
        time.sleep(1.0)
        request = world.function.call()
        assert (request["action"], request["reason"]) == ("request_stop", "max_total_usd")
        assert request["spend_usd"] >= 50
        assert world.read(RUN["stop_uri"])["reason"] == "max_total_usd"
        world.put(RUN["end_uri"], {"outcome": "stopped", "step": 40})
        stop = world.function.call()
        assert (stop["seen"], stop["action"], stop["result"]) == ("READY", "stop", "ok")
        assert world.tpu.nodes[NODE]["state"] == "DELETING"
        for _ in range(2):  # gone now: stopped, and not recreated
            assert world.function.call()["result"] == "stopped"
        assert world.tpu.calls("POST") == []
        state = json.loads(world.fs.cat_file(f"{STATE}/state.json"))
        assert state["run"]["stopped"] is not None
        assert state["run"]["spend_usd"] >= 50


def test_a_done_run_whose_slice_is_preempted_is_not_recreated(tmp_path: Path, gcs: str) -> None:
    config = supervisor_config("node", NODE, BODY, STATE, run=RUN)
    with _world(tmp_path, gcs, config) as world:
        world.tpu.nodes[NODE] = {**BODY, "name": NODE, "state": "READY"}
        world.tpu.preempt(NODE)
        assert world.function.call()["action"] == "delete"  # recovery starts
        world.function.call()  # DELETING
        world.put(RUN["end_uri"], {"outcome": "done", "step": 100})
        ended = world.function.call()
        assert (ended["seen"], ended["result"]) == (
            "NOT_FOUND",
            "run ended; compute already stopped",
        )
        assert world.function.call()["result"] == "stopped"
        assert world.tpu.calls("POST") == []


def test_a_run_stopped_by_its_cap_goes_on_once_pulumi_up_raises_it(
    tmp_path: Path, gcs: str
) -> None:
    run = {**RUN, "hourly_usd": 360000.0, "max_total_usd": 50.0}
    capped = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    group = GROUP
    with _world(tmp_path, gcs, capped) as world:
        world.compute.create_instances(group, VMS)
        world.function.call()
        time.sleep(1.0)
        assert world.function.call()["action"] == "request_stop"
        world.put(RUN["end_uri"], {"outcome": "stopped", "reason": "max_total_usd"})
        assert world.function.call()["action"] == "stop"
        assert world.compute.deletions == [(group, DELETE_VMS)]
    # `pulumi up` with a higher cap: a new bundle, the same run, the group at 2 again.
    raised = supervisor_config(
        "mig", MIG, None, STATE, run={**run, "max_total_usd": 10_000_000.0}, instances=VMS
    )
    with _world(tmp_path, gcs, raised, clean=False) as world:
        world.compute.create_instances(group, VMS)  # `pulumi up --refresh`: the configs again
        back = world.function.call()
        assert back["action"] == "none"
        world.fs.invalidate_cache()
        assert not world.fs.exists(RUN["stop_uri"].removeprefix("gs://"))
        assert not world.fs.exists(RUN["end_uri"].removeprefix("gs://"))
        assert world.compute.deletions == []
        assert _summary(world.events())[-1] == (
            "SIZE_2",
            "none",
            None,
            "compute back after a stop; the limits no longer hold: stop request withdrawn",
        )


def test_a_done_run_whose_compute_comes_back_is_stopped_again(tmp_path: Path, gcs: str) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=RUN, instances=VMS)
    group = GROUP
    with _world(tmp_path, gcs, config, deletion_gets=0) as world:
        world.compute.create_instances(group, VMS)
        world.put(RUN["end_uri"], {"outcome": "done"})
        assert world.function.call()["action"] == "stop"
        assert world.function.call()["result"] == "compute stopped"
        # `pulumi up --refresh` with nothing changed: the configs create the VMs again.
        world.compute.create_instances(group, VMS)
        again = world.function.call()
        assert (again["action"], again["reason"]) == ("stop", "done")
        assert world.compute.deletions == [(group, DELETE_VMS)] * 2
        assert world.compute.resizes == []


def test_a_stop_request_left_without_the_trainers_record_is_withdrawn_too(
    tmp_path: Path, gcs: str
) -> None:
    # Stopped after the grace (no `stopped` record came), then `pulumi up` raised the cap.
    run = {**RUN, "hourly_usd": 10.0, "max_total_usd": 1000.0}
    config = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    group = GROUP
    with _world(tmp_path, gcs, config) as world:
        world.seed(
            spend_usd=60.0,
            started=1.0,
            stop_requested=1.0,
            requested_for="max_total_usd",
            stopped=400.0,
            end={"reason": "max_total_usd"},
        )
        world.put(RUN["stop_uri"], {"reason": "max_total_usd"})
        world.compute.create_instances(group, VMS)
        assert world.function.call()["action"] == "none"
        world.fs.invalidate_cache()
        assert not world.fs.exists(RUN["stop_uri"].removeprefix("gs://"))
        assert world.events()[-1]["result"] == (
            "compute back after a stop; the limits no longer hold: stop request withdrawn"
        )
        assert world.compute.deletions == []


ROLE = "projects/my-ml-project/roles/trainstackSupervisor"
NOT_COUNTED = "; the time it could not read the compute counted as last seen"


def _spend(world: Any) -> float:
    world.fs.invalidate_cache()
    return float(json.loads(world.fs.cat_file(f"{STATE}/state.json"))["run"]["spend_usd"])


DENIED_GROUP = f"Required 'compute.instanceGroupManagers.get' permission for '{MIG}'"


def test_a_group_it_cannot_read_is_reported_once_per_change_and_stopped_once_readable(
    tmp_path: Path, gcs: str
) -> None:
    run = {**RUN, "hourly_usd": 360000.0}
    config = supervisor_config("mig", MIG, None, STATE, run=run, instances=VMS)
    group = GROUP
    with _world(tmp_path, gcs, config) as world:
        world.compute.create_instances(group, VMS)
        assert world.function.call()["seen"] == "SIZE_2"
        world.compute.denied = DENIED_GROUP  # the grant is wrong: every GET answers 403
        error = f"error: HTTP 403: {DENIED_GROUP}"
        first = world.function.call(502)
        assert (first["seen"], first["action"], first["result"]) == ("UNKNOWN", "none", error)
        assert world.function.call(502)["result"] == error  # the same error: not recorded again
        cannot = (
            f"the supervisor cannot read {MIG}: HTTP 403: {DENIED_GROUP} since {first['time']}; "
            f"it can neither recover nor stop it; check its role ({ROLE}_prod_a100_gce)"
        )
        # The unread time counts as the group was last seen, billing ($100 a second here).
        spend = _spend(world)
        assert spend > 0
        assert world.status_lines() == [
            cannot,
            f"spend counted by the supervisor: ${spend:,.2f}{NOT_COUNTED}",
        ]
        world.put(RUN["end_uri"], {"outcome": "done", "step": 100})
        ended = world.function.call(502)  # the run's end is news: recorded
        assert (ended["reason"], ended["result"]) == ("done", error)
        assert world.compute.deletions == []
        assert world.status_lines(instances=VMS) == [
            cannot,
            "finished (done) but the compute may still be billing $58.77/hour: the supervisor "
            "cannot read it; run: gcloud compute instance-groups managed delete-instances "
            "exp-42-a100 --instances=exp-42-a100-0,exp-42-a100-1 "
            "--skip-instances-on-validation-error --zone=us-central1-a --project=p",
            f"spend counted by the supervisor: ${_spend(world):,.2f}{NOT_COUNTED}",
        ]
        assert json.loads(world.function.printed()[-1]) == {
            **ended,
            "severity": "WARNING",
            "message": f"supervisor: UNKNOWN -> none: {error}",
        }
        world.compute.denied = None  # the permission is back
        back = world.function.call()
        assert (back["seen"], back["action"], back["reason"], back["result"]) == (
            "SIZE_2",
            "stop",
            "done",
            "stopping",
        )
        assert world.compute.deletions == [(group, DELETE_VMS)]
        assert _summary(world.events()) == [
            ("UNKNOWN", "none", None, error),
            ("UNKNOWN", "none", "done", error),
            ("SIZE_2", "none", None, "read again"),
            ("SIZE_2", "stop", "done", "stopping"),
        ]
        assert world.status_lines() == [
            f"finished (done); stopping the compute since {back['time']} "
            "(2 instance(s) still being deleted)",
            f"spend counted by the supervisor: ${_spend(world):,.2f}{NOT_COUNTED}",
        ]


def test_a_node_pool_it_cannot_read_names_both_roles_and_records_each_new_error(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("node_pool", POOL, None, STATE, run=RUN)
    with _world(tmp_path, gcs, config) as world:
        world.compute.groups[POOL_GROUP] = {"targetSize": 2}
        url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/"
        url += "instanceGroupManagers/" + POOL_GROUP.rsplit("/", 1)[-1]
        world.container.pools[POOL] = {"instanceGroupUrls": [url]}
        pool_denied = f"Permission 'container.clusters.get' denied on resource '{POOL}'"
        world.container.denied = pool_denied
        first = world.function.call(502)
        world.function.call(502)
        world.container.denied = None  # the pool is readable, its instance group is not
        group_denied = f"Required 'compute.instanceGroupManagers.get' permission for '{url}'"
        world.compute.denied = group_denied
        assert world.function.call(502)["result"] == f"error: HTTP 403: {group_denied}"
        assert _summary(world.events()) == [
            ("UNKNOWN", "none", None, f"error: HTTP 403: {pool_denied}"),
            ("UNKNOWN", "none", None, f"error: HTTP 403: {group_denied}"),
        ]
        assert world.status_lines("dev-a100-gke") == [
            f"the supervisor cannot read {POOL}: HTTP 403: {group_denied} since "
            f"{first['time']}; it can neither recover nor stop it; check its roles "
            f"({ROLE}_dev_a100_gke and its condition on the cluster; "
            f"{ROLE}Read_dev_a100_gke for the instance groups)",
            f"spend counted by the supervisor: $0.00{NOT_COUNTED}",
        ]
        world.compute.denied = None
        assert world.function.call()["seen"] == "SIZE_2"
        assert _summary(world.events())[-1] == ("SIZE_2", "none", None, "read again")
        assert world.status_lines("dev-a100-gke") == [
            f"spend counted by the supervisor: $0.00{NOT_COUNTED}"
        ]


def test_a_slice_it_cannot_read_past_max_run_hours_may_still_bill_and_is_stopped_once_read(
    tmp_path: Path, gcs: str
) -> None:
    run = {**RUN, "max_run_seconds": 3600}
    config = supervisor_config("node", NODE, BODY, STATE, run=run)
    with _world(tmp_path, gcs, config) as world:
        world.tpu.nodes[NODE] = {**BODY, "name": NODE, "state": "READY"}
        world.seed(started=time.time() - 3601, billing=True)
        denied = f"Permission 'tpu.nodes.get' denied on '{NODE}'"
        world.tpu.denied = denied
        first = world.function.call(502)
        assert (first["seen"], first["reason"]) == ("UNKNOWN", "max_run_hours")
        world.fs.invalidate_cache()
        assert not world.fs.exists(RUN["stop_uri"].removeprefix("gs://"))  # no request blind
        assert world.status_lines() == [
            f"the supervisor cannot read {NODE}: HTTP 403: {denied} since {first['time']}; it "
            f"can neither recover nor stop it; check its role ({ROLE}_prod_a100_gce)",
            "finished (max_run_hours) but the compute may still be billing $58.77/hour: the "
            "supervisor cannot read it; run: gcloud compute tpus tpu-vm delete exp-42-tpu "
            "--zone=us-west4-a --project=p",
            f"spend counted by the supervisor: $0.00{NOT_COUNTED}",
        ]
        world.tpu.denied = None
        request = world.function.call()
        assert (request["action"], request["reason"]) == ("request_stop", "max_run_hours")
        assert world.read(RUN["stop_uri"])["reason"] == "max_run_hours"
        assert world.status_lines()[0] == (
            "finishing (max_run_hours): the trainer was asked to save and stop; the compute "
            "stops once it has"
        )


def test_a_compute_api_it_cannot_reach_is_recorded_once_as_a_transport_error(
    tmp_path: Path, gcs: str
) -> None:
    config = supervisor_config("mig", MIG, None, STATE, run=RUN, instances=VMS)
    nowhere = f"http://127.0.0.1:{free_port()}/compute/v1/"  # nothing listens there
    with _world(tmp_path, gcs, config, compute_endpoint=nowhere) as world:
        error = "error: ConnectionRefusedError: [Errno 111] Connection refused"
        first = world.function.call(502)
        assert (first["seen"], first["result"]) == ("UNKNOWN", error)
        world.function.call(502)
        assert _summary(world.events()) == [("UNKNOWN", "none", None, error)]

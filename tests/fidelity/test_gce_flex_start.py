"""Compute Engine flex-start: `pulumi up` of the bundled `dev-b200-gce` stack as the engine and
the Terraform provider run it against the Compute Engine fake (`tests.fidelity.gce_deploy`,
`tests.fakes.compute_server`: resize requests as the discovery document and Google's page
describe them), then every VM the request made claims its node rank the way the planned
launcher does (`node_helper.py claim-rank` / `rank-host` against the GCS emulator, with the
metadata server's token), then `pulumi destroy` with the project's refresh option.

Proves: exactly `node_count` VMs, none with a per-instance config or rank metadata, each
with a rank of its own (0 to node_count - 1), a restarted VM keeping its rank, node 0's name
readable by every VM, and no VM beyond node_count getting one."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import REPO_ROOT
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.metadata_fake import MetadataFake, vm_values
from tests.fidelity.gce_deploy import TEMPLATE, Provider, Stack, refresh_option, registered
from trainstack.components.a100_cluster.gce import flex_name_pattern
from trainstack.components.gpu_startup import NODE_HELPER
from trainstack.infra.plan import load_stack

STACK = "dev-b200-gce"
NODES = 3
GROUP = f"my-ml-project/us-central1-b/{STACK}-a100"
REQUEST = f"{STACK}-a100-run"


def _config() -> dict[str, Any]:
    _, config = load_stack(STACK, None)
    config["trainstack:gpu_cluster"] = {**config["trainstack:gpu_cluster"], "node_count": NODES}
    # 3 machines x 8 GPUs: a global batch the world of 24 divides.
    config["trainstack:trainer"] = {**config["trainstack:trainer"], "global_batch_size": 480}
    return config


def _script_value(script: str, name: str) -> str:
    [line] = [line for line in script.splitlines() if line.startswith(f"{name}=")]
    [value] = shlex.split(line.removeprefix(f"{name}="))
    return value


def _create_bucket(storage: str, bucket: str) -> None:
    import urllib.request

    request = urllib.request.Request(
        f"{storage}/storage/v1/b?project=p",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def _helper(metadata: MetadataFake, storage: str, *argv: str) -> subprocess.Popen[str]:
    """The planned launcher's helper on one VM: its metadata server and Cloud Storage."""
    env = {"GCE_METADATA_HOST": metadata.host, "STORAGE_EMULATOR_HOST": storage, "PATH": "/bin"}
    return subprocess.Popen(
        [sys.executable, str(NODE_HELPER), *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )


def test_flex_start_group_has_node_count_vms_each_with_its_own_rank(tmp_path: Path) -> None:
    resources = registered(_config(), stack=STACK)
    [template] = [r for r in resources if r.type == TEMPLATE]
    script = template.inputs["metadataStartupScript"]
    assert _script_value(script, "RANK_CLAIMS") == "1"
    record = _script_value(script, "RUN_RECORD")
    with ComputeFakeServer(deletion_gets=0) as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(resources)
        # The resize request asked for NODES VMs: the group holds exactly them, created by
        # it (none by a per-instance config, so none with rank metadata), waiting for
        # capacity until Dynamic Workload Scheduler finds it.
        [request] = api.resize_requests(GROUP).values()
        assert (request["name"], request["resizeBy"], request["state"]) == (
            REQUEST,
            NODES,
            "ACCEPTED",
        )
        assert request["requestedRunDuration"] == {"seconds": "14400"}
        members = api.members(GROUP)
        assert len(members) == NODES
        assert all(re.fullmatch(flex_name_pattern(f"{STACK}-a100"), n) for n in members)
        assert [(m.metadata, m.creating) for m in members.values()] == [({}, True)] * NODES
        api.fulfil(GROUP, REQUEST)
        names = sorted(api.members(GROUP))
        assert [api.members(GROUP)[n].creating for n in names] == [False] * NODES

        # Each VM's launcher claims a rank under the run's records, all at once.
        bucket = record.removeprefix("gs://").split("/", 1)[0]
        with running_gcs_emulator() as storage:
            _create_bucket(storage, bucket)
            servers = {
                name: MetadataFake(vm_values(str(1000 + i), name, "us-central1-b")).__enter__()
                for i, name in enumerate([*names, f"{STACK}-a100-zzzz"])
            }
            try:
                claims = [
                    _helper(servers[n], storage, "claim-rank", record, str(NODES), n) for n in names
                ]
                ranks = {}
                for name, proc in zip(names, claims, strict=True):
                    out, err = proc.communicate(timeout=60)
                    assert proc.returncode == 0, err
                    ranks[name] = int(out)
                assert sorted(ranks.values()) == list(range(NODES))
                # A restarted VM (same name) keeps its rank.
                again = _helper(servers[names[1]], storage, "claim-rank", record, "3", names[1])
                assert int(again.communicate(timeout=60)[0]) == ranks[names[1]]
                # Node 0's name, which every launcher takes as its rendezvous host.
                [zero] = [n for n, r in ranks.items() if r == 0]
                host = _helper(servers[names[2]], storage, "rank-host", record, "0")
                assert host.communicate(timeout=60)[0].strip() == zero
                # A VM beyond node_count gets no rank.
                extra = f"{STACK}-a100-zzzz"
                late = _helper(servers[extra], storage, "claim-rank", record, str(NODES), extra)
                _, err = late.communicate(timeout=60)
                assert (late.returncode, err.strip()) == (
                    1,
                    f"trainstack-helper: every rank of {NODES} under {record}.ranks/ is another "
                    "VM's",
                )
            finally:
                for server in servers.values():
                    server.__exit__(None, None, None)

        # `pulumi destroy` refreshes first in this project (Pulumi.yaml `refresh: always`):
        # the request read SUCCEEDED is deleted without a cancel, and the group's delete
        # takes its VMs.
        stack.destroy(refresh=refresh_option(REPO_ROOT / "Pulumi.yaml"))
        assert stack.state == {}
        assert GROUP not in api.groups

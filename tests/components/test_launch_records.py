"""The run's records that the shell stages keep for the supervisor
(`trainstack.trainers.common.run_records`): the Compute Engine launcher and the GKE pod
script, run for real with bash against `tests.components.test_gpu_startup`'s fake metadata
server and Cloud Storage. Each writes this node's heartbeat as it starts, and records the
run's end (stage, reason, node rank) only where it gives up for good: the launcher on an
exit its unit never restarts or on the 20th setup failure in a row, the pod on its index's
last attempt (the Job controller's failure-count annotation)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.components.test_gpu_startup import (
    BUCKET,
    OBJECT,
    PACKAGE_URI,
    FakeGoogle,
    _calls,
    _env,
    _launcher,
    _run,
    fakebin,
    google,
)
from trainstack.components._pod_setup import pod_command
from trainstack.components.gpu_startup import GCE_SETUP_ATTEMPTS, node_helper
from trainstack.trainers.common import run_records

__all__ = ["fakebin", "google"]  # the fixtures, used by name

CHECKPOINTS = "acme-ml-exp-42-checkpoints"
PREFIX = f"gs://{CHECKPOINTS}/trainstack-run-0123456789abcdef"
ENDED = (CHECKPOINTS, "trainstack-run-0123456789abcdef.ended")
ISO_SECONDS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def _record(google: FakeGoogle, key: tuple[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(google.objects[key])
    assert re.fullmatch(ISO_SECONDS, record.pop("time")), record
    return record


def _alive(rank: int) -> tuple[str, str]:
    return (CHECKPOINTS, f"trainstack-run-0123456789abcdef.alive/{rank}")


def test_the_helpers_copies_are_the_run_records_names() -> None:
    assert (node_helper.ENDED_SUFFIX, node_helper.ALIVE_SUFFIX, node_helper.STAGES) == (
        run_records.ENDED_SUFFIX,
        run_records.ALIVE_SUFFIX,
        run_records.STAGES,
    )
    assert (run_records.HEARTBEAT_S, run_records.NO_HEARTBEAT_S) == (300, 2700)


# -- Compute Engine: the launcher ----------------------------------------------------------


def test_the_20th_setup_failure_in_a_row_records_the_runs_end_and_the_next_start_idles(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    assert GCE_SETUP_ATTEMPTS == 20
    google.objects.clear()  # the package is gone: every download fails
    counter = tmp_path / "work" / "setup-failures"
    counter.parent.mkdir()
    counter.write_text("18\n")
    launcher = _launcher(tmp_path, run_record=PREFIX)
    env = _env(tmp_path, fakebin, google)
    nineteenth = _run(launcher, env)
    assert nineteenth.returncode == 3, nineteenth.stderr
    assert ENDED not in google.objects
    assert counter.read_text() == "19\n"
    assert _record(google, _alive(3)) == {"node_rank": 3, "stage": "launch"}

    twentieth = _run(launcher, env)
    assert twentieth.returncode == 3, twentieth.stderr
    reason = (
        f"could not download {PACKAGE_URI}: trainstack-helper: download failed: "
        "HTTP Error 404: Not Found"
    )
    assert _record(google, ENDED) == {
        "outcome": "failed",
        "stage": "package_download",
        "reason": reason,
        "node_rank": 3,
    }
    assert twentieth.stderr.splitlines()[-2:] == [
        f"trainstack-launch: {reason}",
        f"trainstack-launch: recorded the run's end (failed: package_download) at {PREFIX}.ended",
    ]

    downloads = len([p for p, _ in google.requests if p.startswith("/storage/")])
    after = _run(launcher, env)
    assert after.returncode == 0, after.stderr
    assert after.stderr.splitlines() == [
        "trainstack-launch: the setup failed 20 times in a row (at most 20); not starting again"
    ]
    assert len([p for p, _ in google.requests if p.startswith("/storage/")]) == downloads


def test_a_gpu_fabric_setup_that_fails_on_the_20th_attempt_records_the_runs_end(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    # A4 / A3 Ultra: the plugin's install comes before the framework's python is found; the
    # helper runs on the image's python3 for the heartbeat and the end record (before, no
    # record and no heartbeat: only no_heartbeat stopped the VMs). Here the signing key's
    # URL answers 404.
    counter = tmp_path / "work" / "setup-failures"
    counter.parent.mkdir()
    counter.write_text("19\n")
    key_url = f"{google.base_url}/apt/doc/apt-key.gpg"
    launcher = _launcher(tmp_path, run_record=PREFIX, nccl_gib=True)
    env = _env(tmp_path, fakebin, google, TRAINSTACK_APT_KEY_URL=key_url)
    result = _run(launcher, env)
    assert result.returncode == 3, result.stderr
    reason = (
        "could not fetch the signing key https://packages.cloud.google.com/apt/doc/apt-key.gpg "
        "into /etc/apt/keyrings/cloud.google.gpg"
    )
    assert _record(google, ENDED) == {
        "outcome": "failed",
        "stage": "launch",
        "reason": reason,
        "node_rank": 3,
    }
    assert _record(google, _alive(3)) == {"node_rank": 3, "stage": "launch"}
    assert result.stderr.splitlines()[-2:] == [
        f"trainstack-launch: {reason}",
        f"trainstack-launch: recorded the run's end (failed: launch) at {PREFIX}.ended",
    ]
    # The next start idles before the fabric's install is tried again.
    key_fetches = [p for p, _ in google.requests if p == "/apt/doc/apt-key.gpg"]
    assert len(key_fetches) == 1
    after = _run(launcher, env)
    assert (after.returncode, after.stderr.splitlines()) == (
        0,
        ["trainstack-launch: the setup failed 20 times in a row (at most 20); not starting again"],
    )
    assert [p for p, _ in google.requests if p == "/apt/doc/apt-key.gpg"] == key_fetches


def test_a_rank_at_or_above_the_node_count_is_a_vm_being_removed_and_exits_0(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    # node_count 4 -> 2 on Compute Engine: a VM of rank 3 that boots before its per-instance
    # config's deletion lands exits 0 (the unit's Restart=on-failure does not restart it),
    # records no end of the run (the new run's, at the same prefix) and no heartbeat.
    google.node_rank = "3"
    result = _run(
        _launcher(tmp_path, run_record=PREFIX, num_nodes=2), _env(tmp_path, fakebin, google)
    )
    assert (result.returncode, result.stderr.splitlines()) == (
        0,
        [
            "trainstack-launch: node rank 3 is not below the node count 2: the group is "
            "removing this VM; not starting"
        ],
    )
    assert [p for p, _ in google.requests if p.startswith("/upload/")] == []
    assert _calls(tmp_path) == []


def test_an_exit_the_unit_never_restarts_records_the_runs_end_at_once(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    launcher = _launcher(tmp_path, run_record=PREFIX, trainer_args=["--steps=0"])
    result = _run(launcher, _env(tmp_path, fakebin, google))
    assert result.returncode == 2, result.stderr
    assert _record(google, ENDED) == {
        "outcome": "failed",
        "stage": "launch",
        "reason": "invalid trainer arguments: --steps=0",
        "node_rank": 3,
    }


def test_a_record_already_there_is_kept(tmp_path: Path, fakebin: Path, google: FakeGoogle) -> None:
    # The node launcher recorded its own end first (here: planted); the launcher keeps it.
    google.objects[ENDED] = b'{"outcome": "failed", "stage": "trainer", "exit": 1}'
    launcher = _launcher(tmp_path, run_record=PREFIX, trainer_args=["--steps=0"])
    result = _run(launcher, _env(tmp_path, fakebin, google))
    assert result.returncode == 2
    assert google.objects[ENDED] == b'{"outcome": "failed", "stage": "trainer", "exit": 1}'
    assert result.stderr.splitlines()[-1] == (
        f"trainstack-launch: the run's end was recorded before at {PREFIX}.ended; kept"
    )


def test_on_the_last_attempt_the_node_launcher_records_its_own_setup_failure_too(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    counter = tmp_path / "work" / "setup-failures"
    counter.parent.mkdir()
    counter.write_text("19\n")
    result = _run(_launcher(tmp_path, run_record=PREFIX), _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr
    [trainer] = [c for c in _calls(tmp_path, "python3") if c["argv"][:1] == ["-m"]]
    assert trainer["env"]["TRAINSTACK_RUN_FINAL_CODES"] == "1 2 5 3"
    # The setup went through: the count starts again.
    assert not counter.exists()
    assert ENDED not in google.objects


def test_without_a_checkpoint_bucket_nothing_is_recorded(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    result = _run(_launcher(tmp_path, trainer_args=["--steps=0"]), _env(tmp_path, fakebin, google))
    assert result.returncode == 2
    assert [p for p, _ in google.requests if p.startswith("/upload/")] == []


# -- GKE: the pod script --------------------------------------------------------------------

# The image's `python3`: pip fails as an unresolvable install does; anything else runs this
# interpreter (the download, the node helper, the "launcher" after `-c`).
POD_PYTHON = """#!{python}
import os, sys
argv = sys.argv[1:]
if argv[:2] == ["-m", "pip"]:
    print("Looking in indexes: nowhere", flush=True)
    if os.environ.get("FAKE_PIP_FAILS"):
        print("ERROR: No matching distribution found for numpy>=9", file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
os.execv({python!r}, [{python!r}, *argv])
"""
SHOW_FINAL_CODES = ["-c", "import os; print('FINAL=' + os.environ['TRAINSTACK_RUN_FINAL_CODES'])"]


def _pod(
    tmp_path: Path, google: FakeGoogle, failures: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    python = tmp_path / "python3"
    python.write_text(POD_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    env = {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmp_path),
        "GCE_METADATA_HOST": google.metadata_host,
        "STORAGE_EMULATOR_HOST": google.base_url,
        "TRAINSTACK_PACKAGE_URI": PACKAGE_URI,
        "TRAINSTACK_RUN_RECORD": PREFIX,
        "TRAINSTACK_RUN_FINAL_CODES": "1 2 5",
        "JOB_COMPLETION_INDEX": "1",
        "TRAINSTACK_BACKOFF_LIMIT_PER_INDEX": "3",
        "TRAINSTACK_INDEX_FAILURES": failures,
        **extra,
    }
    return subprocess.run(
        [*pod_command(), str(python), *SHOW_FINAL_CODES],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("failures", ["0", "2", ""])
def test_a_pod_before_its_index_s_last_attempt_records_no_end(
    tmp_path: Path, google: FakeGoogle, failures: str
) -> None:
    result = _pod(tmp_path, google, failures, FAKE_PIP_FAILS="1")
    assert result.returncode == 3, result.stderr
    assert ENDED not in google.objects
    assert _record(google, _alive(1)) == {"node_rank": 1, "stage": "package_download"}


def test_a_pod_on_its_index_s_last_attempt_records_why_its_setup_failed(
    tmp_path: Path, google: FakeGoogle
) -> None:
    result = _pod(tmp_path, google, "3", FAKE_PIP_FAILS="1")
    assert result.returncode == 3, result.stderr
    reason = (
        f"pip could not install {PACKAGE_URI}: ERROR: No matching distribution found for numpy>=9"
    )
    assert _record(google, ENDED) == {
        "outcome": "failed",
        "stage": "package_install",
        "reason": reason,
        "node_rank": 1,
    }
    assert result.stderr.splitlines()[-2:] == [
        f"trainstack-pod: {reason}",
        f"trainstack-pod: recorded the run's end (failed: package_install) at {PREFIX}.ended",
    ]


def test_a_pod_on_its_last_attempt_lets_the_node_launcher_record_a_setup_failure(
    tmp_path: Path, google: FakeGoogle
) -> None:
    last = _pod(tmp_path / "last", google, "3")
    assert last.returncode == 0, last.stderr
    assert last.stdout.splitlines() == ["FINAL=1 2 5 3"]
    earlier = _pod(tmp_path / "earlier", google, "1")
    assert earlier.stdout.splitlines() == ["FINAL=1 2 5"]
    assert (BUCKET, OBJECT) in google.objects and ENDED not in google.objects


@pytest.mark.parametrize(
    ("slice_id", "rank"),
    [("0", 1), ("1", 3), ("", 1)],
)
def test_a_tpu_pods_heartbeat_is_its_global_rank_not_its_slices_index(
    tmp_path: Path, google: FakeGoogle, slice_id: str, rank: int
) -> None:
    # A JobSet pod of 2 slices x 2 hosts: JOB_COMPLETION_INDEX 1 in each slice's Job; the
    # node launcher beats as slice x hosts + worker (cluster.py), so the pod script must too,
    # or slice 1's hosts would overwrite slice 0's heartbeats and ranks 2, 3 never beat.
    result = _pod(
        tmp_path,
        google,
        "3",
        FAKE_PIP_FAILS="1",
        TPU_WORKER_ID="1",
        TPU_WORKER_HOSTNAMES="h-0,h-1",
        MEGASCALE_SLICE_ID=slice_id,
    )
    assert result.returncode == 3, result.stderr
    assert _record(google, _alive(rank)) == {"node_rank": rank, "stage": "package_download"}
    assert _record(google, ENDED)["node_rank"] == rank

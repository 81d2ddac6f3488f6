"""A flex-start machine's deadline reaches the node launcher (`TRAINSTACK_DEADLINE`,
`trainstack.trainers.common.deadline`) on each launch path, run for real with bash: the
Compute Engine launcher (its VM's first boot plus the template's maxRunDuration, against
`tests.components.test_gpu_startup`'s fake metadata server and Cloud Storage and its fake
node launcher, which records its environment), and the GKE pod script (the node's boot time
plus the run duration the pod spec carries). What the components register for it: the GCE
startup script's duration, the GKE Job's and the TPU JobSet's pod variable, and the Job's
podFailurePolicy for exit 6."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.components.test_a100_cluster import BASE, CLUSTER, POLICY, _cluster_outputs
from tests.components.test_a100_cluster import _policy_outputs as policy_outputs
from tests.components.test_gpu_startup import (
    FakeGoogle,
    _calls,
    _env,
    _launcher,
    _run,
    fakebin,
    google,
)
from trainstack.components._pod_setup import pod_command
from trainstack.components.a100_cluster import GpuCluster
from trainstack.components.kubernetes_training_job import pod_failure_policy
from trainstack.components.tpu_gke_slices import _pod_env
from trainstack.infra.config import load_stack_config
from trainstack.infra.mocks import ProgramRun, run_program
from trainstack.infra.targets import target_of
from trainstack.trainers.common.deadline import boot_time

__all__ = ["fakebin", "google"]  # the fixtures, used by name

TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
JOB = "kubernetes:batch/v1:Job"
WEEK_S = 7 * 24 * 3600


def flex_run(**overrides: Any) -> ProgramRun:
    """A flex-start H100 cluster with training under Pulumi mocks (`overrides`: its args)."""
    args = {**BASE, "machine_type": "a3-megagpu-8g", "zone": "us-central1-a", "spot": False}
    args |= {"flex_start": True, **overrides}

    def program() -> dict[str, Any]:
        GpuCluster("gpu", args)  # type: ignore[arg-type]
        return {}

    return run_program(program, outputs={CLUSTER: _cluster_outputs, POLICY: policy_outputs})


def _node_launcher_env(tmp_path: Path) -> dict[str, str]:
    [call] = [c for c in _calls(tmp_path, "python3") if c["argv"][:1] == ["-m"]]
    env: dict[str, str] = call["env"]
    return env


# -- Compute Engine: the launcher ---------------------------------------------------------


def test_the_gce_launcher_gives_the_node_launcher_its_vms_deadline(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    result = _run(_launcher(tmp_path, capacity_run_seconds=86400), _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr
    assert _node_launcher_env(tmp_path)["TRAINSTACK_DEADLINE"] == str(boot_time() + 86400)
    # Kept on the VM's disk: a reboot does not move the deadline.
    assert (tmp_path / "work" / "first-boot").read_text() == f"{boot_time()}\n"


def test_after_a_reboot_the_gce_deadline_is_the_first_boots(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "first-boot").write_text("1700000000\n")
    result = _run(_launcher(tmp_path, capacity_run_seconds=3600), _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr
    assert _node_launcher_env(tmp_path)["TRAINSTACK_DEADLINE"] == "1700003600"


def test_without_a_run_duration_there_is_no_deadline(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    result = _run(_launcher(tmp_path), _env(tmp_path, fakebin, google))
    assert result.returncode == 0, result.stderr
    assert "TRAINSTACK_DEADLINE" not in _node_launcher_env(tmp_path)
    assert not (tmp_path / "work" / "first-boot").exists()


def test_the_capacity_end_stops_the_unit_with_exit_0(
    tmp_path: Path, fakebin: Path, google: FakeGoogle
) -> None:
    # The node launcher saved and stopped for the capacity's end (6): the unit restarts only
    # on other exits than 0, 1, 2, 5, and the VM is going.
    env = _env(tmp_path, fakebin, google, FAKE_TRAINER_EXIT="6")
    result = _run(_launcher(tmp_path, capacity_run_seconds=3600), env)
    assert result.returncode == 0, result.stderr
    deadline = boot_time() + 3600
    assert result.stderr.splitlines()[-1] == (
        f"trainstack-launch: this VM's flex-start run duration ends at {deadline} (Unix time): "
        "the trainer saved a checkpoint and stopped (launcher exit 6); the unit does not restart"
    )


def test_gce_flex_start_startup_script_carries_the_vms_run_duration() -> None:
    # A3 High has no fabric on gce (refused there); A4 has.
    flex = flex_run(
        backend="gce", machine_type="a4-highgpu-8g", zone="us-central1-b", max_run_seconds=86400
    )
    [template] = flex.of_type(TEMPLATE)
    assert "\nCAPACITY_RUN_SECONDS=86400\n" in template.inputs["metadataStartupScript"]
    plain = flex_run(
        backend="gce",
        machine_type="a4-highgpu-8g",
        zone="us-central1-b",
        max_run_seconds=86400,
        flex_start=False,
        spot=True,
    )
    [template] = plain.of_type(TEMPLATE)
    assert "\nCAPACITY_RUN_SECONDS=''\n" in template.inputs["metadataStartupScript"]


# -- GKE: the pod script --------------------------------------------------------------------

SHOW_DEADLINE = ["-c", "import os; print(os.environ.get('TRAINSTACK_DEADLINE', 'none'))"]


def _pod(tmp_path: Path, google: FakeGoogle, **extra: str) -> subprocess.CompletedProcess[str]:
    """The pod script as the container runs it, with the image's `python3` this interpreter
    and pip a no-op; its args print the deadline the node launcher would get."""
    python = tmp_path / "python3"
    python.write_text(
        f"#!{sys.executable}\nimport os, sys\nargv = sys.argv[1:]\n"
        "if argv[:2] == ['-m', 'pip']:\n    sys.exit(0)\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, *argv])\n"
    )
    python.chmod(0o755)
    env = {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmp_path),
        "GCE_METADATA_HOST": google.metadata_host,
        "STORAGE_EMULATOR_HOST": google.base_url,
        "TRAINSTACK_PACKAGE_URI": "gs://acme-ml-exp-42-staging/trainers/"
        "trainstack_trainers-0123456789abcdef.tar.gz",
        "JOB_COMPLETION_INDEX": "0",
        **extra,
    }
    return subprocess.run(
        [*pod_command(), str(python), *SHOW_DEADLINE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_pod_script_gives_the_node_launcher_its_nodes_deadline(
    tmp_path: Path, google: FakeGoogle
) -> None:
    flex = _pod(tmp_path, google, TRAINSTACK_CAPACITY_RUN_S="604800")
    assert flex.returncode == 0, flex.stderr
    assert flex.stdout.splitlines() == [str(boot_time() + 604800)]
    plain = _pod(tmp_path, google)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == ["none"]


def _job_env(run: Any) -> dict[str, str]:
    [job] = run.of_type(JOB)
    [container] = job.inputs["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_a_gke_flex_start_job_tells_its_pods_the_nodes_run_duration() -> None:
    assert _job_env(flex_run(max_run_seconds=86400))["TRAINSTACK_CAPACITY_RUN_S"] == "86400"
    # No duration set: GKE's flex-start nodes run at most 7 days.
    assert _job_env(flex_run())["TRAINSTACK_CAPACITY_RUN_S"] == str(WEEK_S)
    assert "TRAINSTACK_CAPACITY_RUN_S" not in _job_env(flex_run(flex_start=False))


def test_a_tpu_flex_start_jobsets_pods_get_the_nodes_run_duration() -> None:
    uri = "gs://b/p.tar.gz"
    flex = _pod_env({"provisioning": "flex-start", "max_run_seconds": 3600}, 4, uri, None, [])
    assert flex == {
        "TRAINSTACK_PACKAGE_URI": uri,
        "TRAINSTACK_NUM_NODES": "4",
        "TRAINSTACK_CAPACITY_RUN_S": "3600",
    }
    longest = _pod_env({"provisioning": "flex-start"}, 4, uri, None, [])
    assert longest["TRAINSTACK_CAPACITY_RUN_S"] == str(WEEK_S)
    assert _pod_env({"provisioning": "spot"}, 4, uri, None, []) == {
        "TRAINSTACK_PACKAGE_URI": uri,
        "TRAINSTACK_NUM_NODES": "4",
    }


def test_the_job_replaces_a_pod_whose_capacity_ended_without_counting_a_failure() -> None:
    # Exit 6: saved before the node goes. The replacement holds on that node until it goes
    # (trainstack.trainers.node_capacity), or trains on new capacity.
    [ignore] = [
        r for r in pod_failure_policy()["rules"] if r["action"] == "Ignore" and "onExitCodes" in r
    ]
    assert ignore["onExitCodes"]["values"] == [4, 143, 6]


# -- The plan --------------------------------------------------------------------------------


def _flex_notes(section: dict[str, Any], limits: dict[str, Any]) -> list[str]:
    raw = {
        "gcp:project": "p",
        "gcp:region": "us-central1",
        "trainstack:gpu_cluster": {
            "machine_type": "a3-highgpu-8g",
            "node_count": 2,
            "zone": "us-central1-a",
            "flex_start": True,
            **section,
        },
        "trainstack:limits": limits,
    }
    cfg = load_stack_config(raw)
    notes = target_of(cfg).plan_notes(cfg, "d")
    return [n for n in notes if n.startswith("gpu_cluster.flex_start")]


def test_the_flex_start_notes_say_what_happens_at_the_end_save_then_stop() -> None:
    [gce] = _flex_notes(
        {"backend": "gce", "machine_type": "a4-highgpu-8g", "zone": "us-central1-b"},
        {"max_run_hours": 24},
    )
    assert (
        "each machine is deleted 24 h after it starts (limits.max_run_hours); Compute Engine "
        "deletes the VM then, with no notice Google documents: the trainer saves a checkpoint "
        "trainer.deadline_margin_s (default 600 s) before, from the machine's boot time plus "
        "its run duration (TRAINSTACK_DEADLINE), the run ends capacity_ended (exit 6) and the "
        "supervisor deletes the group's VMs; `pulumi up` asks for new capacity and the run "
        "resumes from that checkpoint once the group's resize request is replaced: its VMs "
        "are spent and `pulumi up` alone does not renew it (`pulumi up --replace` with its "
        "URN, from `pulumi stack --show-urns`), with a higher limits.max_run_hours (it is "
        "each VM's run duration and the run's limit, used up by then); "
    ) in gce
    # One node; a queued pool's end: tests/components/test_gke_queued.py.
    [gke] = _flex_notes({"node_count": 1}, {})
    assert (
        "each node runs at most 168 h (7 days); GKE removes the node then (how, and whether "
        "its pods get a notice, Google does not say): the trainer saves a checkpoint "
        "trainer.deadline_margin_s (default 600 s) before, from the machine's boot time plus "
        "its run duration (TRAINSTACK_DEADLINE), the run ends capacity_ended (exit 6) and the "
        "Job replaces the pod, which holds on a node that is going, and the supervisor sets "
        "the pool's autoscaling to 0 and deletes its VMs through its instance groups; `pulumi up` "
        "asks for new capacity and the run resumes from that checkpoint; "
    ) in gke


def test_the_tpu_flex_start_note_says_the_same() -> None:
    from tests.unit.test_tpu_gke_config import tpu

    cfg = load_stack_config(tpu(provisioning="flex-start"))
    notes = [n for n in target_of(cfg).plan_notes(cfg, "d") if "run duration" in n]
    assert notes == [
        "tpu: at the end of a flex-start node's run duration GKE removes it (how, and whether "
        "its pods get a notice, Google does not say): the node launcher gives the run "
        "TRAINSTACK_DEADLINE (the node's boot time plus its run duration) and sends your code "
        "or the TensorFlow trainer SIGTERM trainer.deadline_margin_s (default 600 s) before it "
        "(save and exit 143); the run ends capacity_ended (exit 6) and the supervisor stops "
        "the pools; `pulumi up` asks for new capacity and the run resumes from the checkpoint"
    ]

"""A program's `RunSupervisor` and its `run`: the plan promises the stop at the run's end only
where `run` carries the run's end record (`supervisor_run`); otherwise it says what the
supervisor does stop on and how to wire `run` (issue 30's trial: a supervisor without `run`
planned "the supervisor's stop at the run's end ... ends the compute's $X/hour")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_program_facts import GKE_MAIN, write_program
from trainstack.components import ArgsError
from trainstack.components.run_supervisor import supervisor_run
from trainstack.infra.program_plan import build_program_plan

WIRED = '"run": supervisor_run(target.run_record, target.node_count, max_run_seconds=14400),'
HOW = (
    'To stop them at the run\'s end, give it `"run": supervisor_run(target.run_record, '
    "target.node_count, ...)` with `target = supervised_compute(args)` "
    "(trainstack.components.run_supervisor): docs/own-program.md"
)


def _notes(tmp_path: Path, run: str) -> list[str]:
    assert WIRED in GKE_MAIN
    folder = write_program(tmp_path / "acme", GKE_MAIN.replace(WIRED, run))
    return build_program_plan(folder, "dev")["notes"]


def test_a_supervisor_without_run_is_not_said_to_stop_at_the_runs_end(tmp_path: Path) -> None:
    notes = _notes(tmp_path, "")
    assert [n for n in notes if n.startswith("the supervisor's stop")] == []
    # Before: "the supervisor's stop at the run's end (or a limit) ends the compute's
    # $23.51/hour; ..." and the run limit's "then the supervisor sets the GPU node pool to 0".
    assert [n for n in notes if n.startswith("run supervisor: the RunSupervisor")] == [
        "run supervisor: the RunSupervisor of A100Cluster acme-gpu (gke) has no `run` with "
        "the run's end record, so it cannot see the run's end; with nothing else in its "
        "`run`, it never stops the machines: they bill until `pulumi destroy`. " + HOW
    ]
    [limit] = [n for n in notes if n.startswith("limits.max_run_hours: ")]
    assert limit == "limits.max_run_hours: GKE Job activeDeadlineSeconds 14400"


def test_a_supervisor_with_only_limits_says_it_stops_at_them(tmp_path: Path) -> None:
    notes = _notes(tmp_path, '"run": {"max_run_seconds": 14400},')
    assert [n for n in notes if n.startswith("run supervisor: the RunSupervisor")] == [
        "run supervisor: the RunSupervisor of A100Cluster acme-gpu (gke) has no `run` with "
        "the run's end record, so it cannot see the run's end; it stops the machines only at "
        "its run limit (run.max_run_seconds); otherwise they bill until `pulumi destroy`. " + HOW
    ]


def test_a_wired_supervisor_facts_say_what_it_stops_on(tmp_path: Path) -> None:
    folder = write_program(tmp_path / "acme", GKE_MAIN + 'pulumi.export("sup", supervisor.facts)\n')
    facts = build_program_plan(folder, "dev")["outputs"]["sup"]
    assert facts["stops_on"] == ["end_uri", "alive_uri", "max_run_seconds"]


def test_supervisor_run_needs_the_hourly_price_for_a_spend_cap() -> None:
    with pytest.raises(ArgsError) as err:
        supervisor_run("gs://b/trainstack-run-1", 2, max_total_usd=50.0)
    assert str(err.value) == (
        "supervisor_run.hourly_usd: missing; the spend cap counts the compute's $/hour; "
        "valid: the supervised compute's, supervised_compute(args).hourly_usd (A100Cluster) "
        "or supervised_slices(args).hourly_usd (TpuGkeSlices)"
    )


CHECKPOINTS = '"checkpoint_url": "gs://acme-checkpoints",'


def test_the_records_grant_names_the_folder_of_a_checkpoint_url_with_a_path(
    tmp_path: Path,
) -> None:
    # The nodes write the run's records under `<checkpoint_url>/` (`run_record_uri`); a grant
    # held to `trainstack-run-*` at the bucket's root made every read of them a 403, which the
    # supervisor took for a passing check (neither the run's end nor no_heartbeat fired).
    assert CHECKPOINTS in GKE_MAIN
    main = GKE_MAIN.replace(CHECKPOINTS, '"checkpoint_url": "gs://acme-checkpoints/team/exp",')
    plan = build_program_plan(write_program(tmp_path / "acme", main), "dev")
    [grant] = [r for r in plan["resources"] if r["name"] == "acme-supervisor-records"]
    assert grant["inputs"]["condition"]["expression"] == (
        'resource.name.startsWith("projects/_/buckets/acme-checkpoints/objects/team/exp/'
        'trainstack-run-")'
    )

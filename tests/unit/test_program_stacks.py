"""Stacks of your own program beside trainstack stacks in one project: what `plan`,
`policy --all` and `stacks` say about a stack file without `trainstack:` keys, and about a
misspelt `trainstack` namespace.

The project is test_program_plan's (its stacks `dev`, a clean program stack, and `broken`,
whose program raises), plus a trainstack stack `loc` and a stack `typo` whose only key is
`trainstak:local`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.unit.test_program_plan import write_project
from trainstack.infra.cli import app
from trainstack.infra.config import (
    ConfigError,
    NotATrainstackStack,
    load_stack_config,
    namespace_typo,
)

runner = CliRunner()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = write_project(tmp_path / "acme").resolve()
    (root / "stacks" / "Pulumi.loc.yaml").write_text(
        "config:\n  trainstack:local:\n    workers: 1\n"
    )
    (root / "stacks" / "Pulumi.typo.yaml").write_text(
        "config:\n  trainstak:local:\n    workers: 1\n"
    )
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("command", ["plan", "policy", "quota"])
def test_a_program_stack_points_to_program(project: Path, command: str) -> None:
    result = runner.invoke(app, [command, "--stack", "dev"])
    # quota has no --program: the hint names plan, which has.
    shown = "policy" if command == "policy" else "plan"
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: stack 'dev' has no `trainstack:` keys, so it is not a trainstack stack; if it "
        f"is a stack of your own Pulumi program, valid: trainstack {shown} --program {project} "
        "--stack dev\n",
    )


def test_a_misspelt_namespace_gets_did_you_mean(project: Path) -> None:
    result = runner.invoke(app, ["plan", "--stack", "typo"])
    assert (result.exit_code, result.stderr) == (
        2,
        "error: stack 'typo': "
        "trainstak:local: unknown namespace `trainstak:`; did you mean `trainstack:`? "
        "valid: trainstack:local\n",
    )


def test_policy_all_checks_every_stack_then_exits_2_for_those_it_could_not(
    project: Path,
) -> None:
    result = runner.invoke(app, ["policy", "--all"])
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        f"stack dev: clean (11 resources, 8 rules; your program, --program {project})",
        "stack loc: clean (2 resources, 8 rules)",
    ]
    assert result.stderr == (
        f"error: stack 'broken' not checked: --program {project}: stack 'broken': "
        "infra/__init__.py:13: ValueError: acme:fail is 'yes'; valid: unset\n"
        "error: stack 'typo': "
        "trainstak:local: unknown namespace `trainstak:`; did you mean `trainstack:`? "
        "valid: trainstack:local\n"
    )


def test_policy_all_clean_with_a_program_stack_exits_0(project: Path) -> None:
    (project / "stacks" / "Pulumi.broken.yaml").unlink()
    (project / "stacks" / "Pulumi.typo.yaml").unlink()
    result = runner.invoke(app, ["policy", "--all", "--json"])
    assert result.exit_code == 0, result.output
    import json

    reports = json.loads(result.stdout)
    assert [(r["stack"], r["resources"], r.get("program")) for r in reports] == [
        ("dev", 11, str(project)),
        ("loc", 2, None),
    ]


def test_stacks_prints_names_only_and_says_which_are_your_programs_on_stderr(
    project: Path,
) -> None:
    # Names only on stdout, one a line: a script (the PR workflow) takes every word for a name.
    result = runner.invoke(app, ["stacks"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "broken\ndev\nloc\ntypo\n",
        f"broken: a stack of your own program (no `trainstack:` keys): trainstack plan --program "
        f"{project} --stack broken\n"
        f"dev: a stack of your own program (no `trainstack:` keys): trainstack plan --program "
        f"{project} --stack dev\n",
    )
    # `typo` is a trainstack stack with a misspelt namespace: `plan --stack typo` says so.
    result = runner.invoke(app, ["stacks", "--trainstack"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "loc\ntypo\n", "")
    result = runner.invoke(app, ["stacks", "--program"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "broken\ndev\n", "")


def test_stacks_says_when_there_are_none(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("loc", "typo"):
        (project / "stacks" / f"Pulumi.{name}.yaml").unlink()
    result = runner.invoke(app, ["stacks", "--trainstack"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "",
        f"no trainstack stacks among the 2 stack files in {project / 'stacks'} (the "
        f"stackConfigDir of {project / 'Pulumi.yaml'})\n",
    )
    for name in ("dev", "broken"):
        (project / "stacks" / f"Pulumi.{name}.yaml").unlink()
    result = runner.invoke(app, ["stacks"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "",
        f"no stacks: no Pulumi.<NAME>.yaml in {project / 'stacks'} (the stackConfigDir of "
        f"{project / 'Pulumi.yaml'})\n",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    result = runner.invoke(app, ["stacks"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "",
        f"no stacks: no Pulumi.<NAME>.yaml in {empty.resolve()} (no Pulumi.yaml there or in a "
        "folder above)\n",
    )
    result = runner.invoke(app, ["stacks", "--trainstack", "--program"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: --trainstack and --program exclude each other; valid: one of them or neither\n",
    )


def test_load_stack_config_without_trainstack_keys() -> None:
    with pytest.raises(NotATrainstackStack) as info:
        load_stack_config({"gcp:project": "p", "acme:prefix": "x"})
    assert str(info.value) == (
        "the stack file has no `trainstack:` keys, so it is not a trainstack stack; valid: a "
        "`trainstack:<target>` key (one of tpu, gpu_cluster, vertex, local), or, for a stack of "
        "your own Pulumi program, `trainstack plan --program DIR --stack NAME`"
    )


def test_a_misspelt_namespace_beside_trainstack_keys_is_not_ignored() -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config({"trainstack:local": {"workers": 1}, "trainstck:limits": {}})
    assert str(info.value) == (
        "trainstck:limits: unknown namespace `trainstck:`; did you mean `trainstack:`? "
        "valid: trainstack:limits"
    )


def test_a_namespace_that_contains_trainstack_is_a_programs_own() -> None:
    with pytest.raises(NotATrainstackStack):
        load_stack_config({"mytrainstack:prefix": "x", "trainstacks:region": "y"})


def test_a_case_variant_of_the_namespace_is_a_misspelling_too() -> None:
    # Pulumi reads `TrainStack:` as another program's namespace: ignored, the stack would
    # plan without the section.
    assert [namespace_typo(k) for k in ("TrainStack:Trainer", "TRAINSTACK:local")] == [
        "TrainStack:Trainer: unknown namespace `TrainStack:`; did you mean `trainstack:`? "
        "valid: trainstack:trainer",
        "TRAINSTACK:local: unknown namespace `TRAINSTACK:`; did you mean `trainstack:`? "
        "valid: trainstack:local",
    ]
    assert [namespace_typo(k) for k in ("MyTrainStack:x", "gcp:project", "acme:x")] == [
        None,
        None,
        None,
    ]
    with pytest.raises(ConfigError) as info:
        load_stack_config(
            {
                "gcp:project": "p",
                "trainstack:local": {"workers": 1},
                "TrainStack:Trainer": {"steps": 5},
            }
        )
    assert info.value.errors == [
        "TrainStack:Trainer: unknown namespace `TrainStack:`; did you mean `trainstack:`? "
        "valid: trainstack:trainer"
    ]

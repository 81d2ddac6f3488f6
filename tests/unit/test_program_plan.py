"""`trainstack plan|policy|plan-diff --program DIR --stack NAME` on a Pulumi project of your own.

The project is written into a temporary folder as a user would have it: Pulumi.yaml, stack
files with its own config keys, a __main__.py that composes trainstack's TrainingBuckets and
TrainingIdentity, and its own `infra/`, `components/` and `tests/` packages (the names
trainstack itself once installed, and the name of trainstack's own test package).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import trainstack.policies
from trainstack.infra.cli import app
from trainstack.infra.plan import load_stack
from trainstack.infra.program_plan import NO_REFRESH_NOTE, PROGRAM_NOTE, build_program_plan
from trainstack.infra.program_run import ProgramError, read_program, stack_config

runner = CliRunner()

MAIN = """\
import os

import pulumi
import pulumi_gcp as gcp

from components import labels
from infra import check, name
from trainstack.components import TrainingBuckets, TrainingIdentity

config = pulumi.Config()
check(config.get("fail"))
project = pulumi.Config("gcp").require("project")
buckets = TrainingBuckets(
    name("buckets"),
    {
        "project": project,
        "location": "US-CENTRAL1",
        "deployment_name": name(),
        "environment": "dev",
        "checkpoint_retention_days": config.get_int("retention_days") or 30,
        "labels": labels(),
    },
)
identity = TrainingIdentity(
    name("identity"),
    {
        "project": project,
        "deployment_name": name(),
        "data_bucket": buckets.data_bucket,
        "checkpoint_bucket": buckets.checkpoint_bucket,
        "staging_bucket": buckets.staging_bucket,
    },
)
if config.get_bool("open_bucket"):
    gcp.storage.Bucket(name("open"), location="US", uniform_bucket_level_access=False)
pulumi.export("checkpoints", buckets.checkpoint_url)
pulumi.export("account", identity.service_account_email)
pulumi.export("cwd", os.getcwd())


def late(url):
    # Imported when the URL resolves, after the program's top level has run.
    from infra.late import tag

    return tag(url, os.getcwd())


pulumi.export("tagged", buckets.checkpoint_url.apply(late))
"""

INFRA = '''\
"""The project's own `infra` package."""

import pulumi


def name(part=None):
    prefix = pulumi.Config().require("prefix")
    return prefix if part is None else f"{prefix}-{part}"


def check(fail):
    if fail:
        raise ValueError(f"acme:fail is {fail!r}; valid: unset")
'''

RESOURCES = [
    ("trainstack:storage:TrainingBuckets", "{p}-buckets", None),
    ("gcp:storage/bucket:Bucket", "{p}-buckets-checkpoints", "{p}-buckets"),
    ("gcp:storage/bucket:Bucket", "{p}-buckets-data", "{p}-buckets"),
    ("gcp:storage/bucket:Bucket", "{p}-buckets-staging", "{p}-buckets"),
    ("trainstack:iam:TrainingIdentity", "{p}-identity", None),
    (
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "{p}-identity-checkpoints-admin",
        "{p}-identity",
    ),
    ("gcp:storage/bucketIAMMember:BucketIAMMember", "{p}-identity-data-viewer", "{p}-identity"),
    ("gcp:projects/iAMMember:IAMMember", "{p}-identity-log-writer", "{p}-identity"),
    ("gcp:projects/iAMMember:IAMMember", "{p}-identity-metric-writer", "{p}-identity"),
    ("gcp:serviceaccount/account:Account", "{p}-identity-sa", "{p}-identity"),
    ("gcp:storage/bucketIAMMember:BucketIAMMember", "{p}-identity-staging-viewer", "{p}-identity"),
]


def expected(prefix: str) -> list[tuple[str, str, str | None]]:
    return [
        (t, n.format(p=prefix), None if parent is None else parent.format(p=prefix))
        for t, n, parent in RESOURCES
    ]


def write_project(root: Path, prefix: str = "exp1", team: str = "acme") -> Path:
    """A project folder of your own, as `pulumi new python` leaves it plus two packages."""
    (root / "infra").mkdir(parents=True)
    (root / "components").mkdir()
    (root / "tests").mkdir()
    (root / "stacks").mkdir()
    (root / "Pulumi.yaml").write_text(
        "name: acme\nstackConfigDir: stacks\nruntime:\n  name: python\n"
        "  options:\n    virtualenv: venv\n"
    )
    (root / "stacks" / "Pulumi.dev.yaml").write_text(
        f"config:\n  gcp:project: acme-ml\n  acme:prefix: {prefix}\n  retention_days: 14\n"
    )
    (root / "stacks" / "Pulumi.broken.yaml").write_text(
        "config:\n  gcp:project: acme-ml\n  acme:prefix: b\n  acme:fail: 'yes'\n"
    )
    (root / "__main__.py").write_text(MAIN)
    (root / "infra" / "__init__.py").write_text(INFRA)
    (root / "infra" / "late.py").write_text(
        "import os\n\ndef tag(url, cwd):\n    return f'{url} {os.path.basename(cwd)}'\n"
    )
    (root / "components" / "__init__.py").write_text(
        f"def labels():\n    return {{'team': {team!r}, 'environment': 'dev'}}\n"
    )
    (root / "tests" / "__init__.py").write_text("")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "acme")


def plan_json(project: Path, *extra: str) -> dict:
    result = runner.invoke(
        app, ["plan", "--program", str(project), "--stack", "dev", "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_json_lists_what_the_program_registers(project: Path) -> None:
    plan = plan_json(project)
    assert list(plan) == ["stack", "project", "resources", "outputs", "notes"]
    assert (plan["stack"], plan["project"]) == ("dev", "acme")
    assert [(r["type"], r["name"], r["parent"]) for r in plan["resources"]] == expected("exp1")
    checkpoints = plan["resources"][1]["inputs"]
    # `retention_days`, a bare key of the stack file, is the project's `acme:retention_days`.
    assert checkpoints["lifecycleRules"][0]["condition"]["age"] == 14
    assert checkpoints["labels"]["team"] == "acme"
    assert plan["outputs"] == {
        "checkpoints": "gs://acme-ml-exp1-checkpoints",
        "account": "exp1-train@acme-ml.iam.gserviceaccount.com",
        # The program runs in its own folder, as under `pulumi up`.
        "cwd": str(project.resolve()),
        "tagged": "gs://acme-ml-exp1-checkpoints acme",
    }
    assert plan["notes"] == [PROGRAM_NOTE]


def test_plan_renders_the_tree_with_the_project_name(project: Path) -> None:
    result = runner.invoke(app, ["plan", "--program", str(project), "--stack", "dev"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "project acme, stack dev"
    assert "exp1-buckets trainstack:storage:TrainingBuckets" in lines[1]
    assert "11 resources" in lines
    assert "Quota needed" not in result.stdout


def test_the_program_imports_its_own_packages_and_leaves_trainstack_loaded(project: Path) -> None:
    import tests
    import trainstack.components.training_buckets as buckets_module

    cwd, path = os.getcwd(), list(sys.path)
    build_program_plan(project, "dev")
    # Its `infra`, `components` (and anything from its folder) are unloaded; the `tests`
    # it would have shadowed is trainstack's own again; trainstack's modules are the same.
    assert not [m for m in sys.modules if m.split(".")[0] in ("infra", "components")]
    assert sys.modules["tests"] is tests
    assert sys.modules["trainstack.components.training_buckets"] is buckets_module
    assert (os.getcwd(), sys.path) == (cwd, path)


def test_two_programs_in_one_process_each_import_their_own(tmp_path: Path) -> None:
    first = build_program_plan(write_project(tmp_path / "a", "alpha", team="red"), "dev")
    second = build_program_plan(write_project(tmp_path / "b", "beta", team="blue"), "dev")
    assert [(r["type"], r["name"], r["parent"]) for r in first["resources"]] == expected("alpha")
    assert [(r["type"], r["name"], r["parent"]) for r in second["resources"]] == expected("beta")
    assert first["resources"][1]["inputs"]["labels"]["team"] == "red"
    assert second["resources"][1]["inputs"]["labels"]["team"] == "blue"


def test_policy_clean_then_a_violation_exits_1(project: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["policy", "--program", str(project), "--stack", "dev", "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)
    assert (report["stack"], report["resources"], report["violations"]) == ("dev", 11, [])
    # A saved plan of the program is checked the same way.
    saved = tmp_path / "plan.json"
    plan_json(project, "--out", str(saved))
    result = runner.invoke(app, ["policy", "--plan", str(saved), "--json"])
    assert (result.exit_code, json.loads(result.stdout)) == (0, [report])
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    stack_file.write_text(stack_file.read_text() + "  open_bucket: true\n")
    result = runner.invoke(app, ["policy", "--program", str(project), "--stack", "dev"])
    assert result.exit_code == 1, result.output
    rule = "[mandatory] [bucket-uniform-access-public-prevention] exp1-open"
    assert result.stdout.splitlines() == [
        "stack dev: 2 violation(s)",
        f"  {rule} (gcp:storage/bucket:Bucket): uniformBucketLevelAccess is false, not true: "
        "object ACLs could grant access around the bucket's IAM policy",
        f"  {rule} (gcp:storage/bucket:Bucket): publicAccessPrevention is unset, not "
        '"enforced": an IAM grant to allUsers could make the bucket public',
        "2 policy violation(s) in 1 of 1 stack(s); mandatory rules block "
        f"`pulumi up --policy-pack {Path(trainstack.policies.__file__).parent}`",
    ]


def test_plan_diff_after_a_config_change(project: Path, tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    plan_json(project, "--out", str(base))
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    stack_file.write_text(stack_file.read_text().replace("retention_days: 14", "retention_days: 7"))
    result = runner.invoke(
        app, ["plan-diff", "--program", str(project), "--stack", "dev", str(base)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "## trainstack plan diff\n\n"
        "### Stack `dev`: 0 to add, 1 to change, 0 to replace, 0 to delete\n\n"
        "- **change** `exp1-buckets-checkpoints` (gcp:storage/bucket:Bucket): updated in place "
        "(the Terraform provider schema)\n"
        "  - `lifecycleRules[0].condition.age`: `14` -> `7`\n\n"
    )
    # Two saved plans of the program diff the same way.
    head = tmp_path / "head.json"
    plan_json(project, "--out", str(head))
    files = runner.invoke(app, ["plan-diff", str(base), str(head)])
    assert (files.exit_code, files.stdout) == (0, result.stdout)


def error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    return line


def test_a_folder_without_pulumi_yaml(tmp_path: Path) -> None:
    assert error_line(["plan", "--program", str(tmp_path), "--stack", "dev"]) == (
        f"error: --program: no Pulumi.yaml in {str(tmp_path)!r}; valid: a Pulumi project "
        "folder (one that holds Pulumi.yaml with `name` and `runtime: python`)"
    )


def test_a_stack_without_a_stack_file(project: Path) -> None:
    for command in ("plan", "policy"):
        assert error_line([command, "--program", str(project), "--stack", "prod"]) == (
            f"error: --stack: no stack file Pulumi.prod.yaml in {str(project / 'stacks')!r} "
            "(where project 'acme' keeps its stack files); valid: broken, dev"
        )
    assert error_line(["plan", "--program", str(project)]) == (
        f"error: --program {project}: give --stack NAME, one of the program's stack files in "
        f"{str(project / 'stacks')!r}; valid: broken, dev"
    )


def test_a_program_that_raises(project: Path) -> None:
    assert error_line(["plan", "--program", str(project), "--stack", "broken"]) == (
        f"error: --program {project}: stack 'broken': infra/__init__.py:13: ValueError: "
        "acme:fail is 'yes'; valid: unset"
    )
    # Nothing of the failed run stays loaded.
    assert not [m for m in sys.modules if m.split(".")[0] in ("infra", "components")]


def test_program_errors_name_what_is_allowed(project: Path, tmp_path: Path) -> None:
    (project / "Pulumi.yaml").write_text("name: acme\nruntime: nodejs\n")
    with pytest.raises(ProgramError) as info:
        build_program_plan(project, "dev")
    assert str(info.value) == (
        f"--program: {project / 'Pulumi.yaml'} has runtime 'nodejs'; valid: python "
        "(`runtime: python` or `runtime: {name: python}`)"
    )
    (project / "Pulumi.yaml").write_text("name: acme\nruntime: python\nmain: src/\n")
    with pytest.raises(ProgramError, match=r"`main: src/` in .* does not exist; valid: a Python"):
        build_program_plan(project, "dev")
    assert error_line(
        ["plan-diff", "--program", str(project), "--stack", "dev", "a.json", "b.json"]
    ) == (
        "error: plan-diff --program: HEAD is the program's plan now, so give BASE.json only "
        "(got 'a.json' and 'b.json')"
    )
    assert error_line(
        ["plan", "--program", str(project), "--stack", "dev", "--config-file", "x.yaml"]
    ) == (
        "error: --program: plans a stack file of the program's own; valid: --program DIR "
        "--stack NAME, without --config-file or --stack-name"
    )


def test_main_names_a_program_in_a_subfolder(project: Path) -> None:
    (project / "src").mkdir()
    (project / "__main__.py").rename(project / "src" / "__main__.py")
    for package in ("infra", "components"):
        (project / package).rename(project / "src" / package)
    (project / "Pulumi.yaml").write_text(
        "name: acme\nstackConfigDir: stacks\nmain: src/\nruntime: python\n"
    )
    plan = build_program_plan(project, "dev")
    assert [(r["type"], r["name"], r["parent"]) for r in plan["resources"]] == expected("exp1")
    assert plan["outputs"]["cwd"] == str((project / "src").resolve())


def test_pulumi_yaml_config_fills_what_the_stack_does_not_set(project: Path) -> None:
    (project / "Pulumi.yaml").write_text(
        "name: acme\nstackConfigDir: stacks\nruntime: python\nconfig:\n"
        "  retention_days: {default: 99}\n  owner: {type: string, default: ml}\n"
        "  gcp:region: us-central1\n  gcp:zone: {value: us-central1-a}\n"
    )
    program = read_program(project)
    assert stack_config(program, "dev", required=True) == {
        "gcp:project": "acme-ml",
        "acme:prefix": "exp1",
        "acme:retention_days": 14,  # the stack file's value wins
        "acme:owner": "ml",
        "gcp:region": "us-central1",
        "gcp:zone": "us-central1-a",
    }
    (project / "Pulumi.yaml").write_text(
        "name: acme\nstackConfigDir: stacks\nruntime: python\nconfig:\n  owner: {type: string}\n"
    )
    assert error_line(["plan", "--program", str(project), "--stack", "dev"]) == (
        "error: --stack: stack 'dev' has no value for 'acme:owner', which Pulumi.yaml's "
        f"`config:` requires; valid: `owner: <value>` under `config:` in "
        f"{project / 'stacks' / 'Pulumi.dev.yaml'}"
    )


def test_a_subfolder_of_the_project_plans_the_project_as_pulumi_does(project: Path) -> None:
    sub = project / "deep" / "sub"
    sub.mkdir(parents=True)
    assert plan_json(sub) == plan_json(project)


def test_a_supervised_gce_group_without_refresh_gets_a_note(tmp_path: Path) -> None:
    # Your own program composing the bundled gce stack: its run supervisor deletes the
    # group's VMs at the run's end, which only a refreshing `pulumi up`/`destroy` sees.
    root = tmp_path / "own"
    root.mkdir()
    _, config = load_stack("prod-a100-gce", None)
    (root / "Pulumi.train.yaml").write_text(yaml.safe_dump({"config": config}))
    (root / "__main__.py").write_text(
        "import pulumi\nfrom trainstack.infra.compose import main_program\n\n"
        "for key, value in main_program().items():\n    pulumi.export(key, value)\n"
    )
    (root / "Pulumi.yaml").write_text("name: own\nruntime: python\noptions:\n  refresh: always\n")
    refreshing = build_program_plan(root, "train")["notes"]
    assert NO_REFRESH_NOTE not in refreshing and PROGRAM_NOTE not in refreshing
    (root / "Pulumi.yaml").write_text("name: own\nruntime: python\n")
    assert build_program_plan(root, "train")["notes"] == [*refreshing, NO_REFRESH_NOTE]

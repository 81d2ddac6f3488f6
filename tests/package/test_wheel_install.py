"""trainstack as a user gets it: the wheel, installed (not editable) into a fresh virtual
environment whose site-packages is read-only, used from a Pulumi project of one's own that has
its own `infra/` and `components/` packages, its own `Pulumi.yaml` and stack files (issue 22,
"Done when").

To stay short the fresh environment gets the wheel only (`pip install --no-deps`); its
dependencies come from this test runner's site-packages through a path file in the fresh
site-packages. That line is a plain path: Python processes `.pth` files only in site
directories, not in a directory a path line adds (https://docs.python.org/3/library/site.html,
"site-specific configuration hook"), so the runner's editable trainstack (a finder that a
`.pth` file there installs) stays out, and `trainstack` imports from the wheel only, which
`test_trainstack_imports_from_the_wheel_beside_your_own_packages` checks.

We run as root, which writes through `chmod a-w`: every path under the fresh site-packages
is recorded (size, mtime) after the install and compared after each command.
PYTHONDONTWRITEBYTECODE keeps Python's own `__pycache__` writes out of that comparison.

Takes 11 to 50 s on 2 cores shared with other jobs (wheel build and install about 4 s, three
program runs about 12 s, the local run about 2 s when the machine is quiet).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from textwrap import dedent

import pytest

from tests.package.wheel import (
    VERSION,
    Argv,
    Installed,
    Snapshot,
    assert_install_untouched,
    ok,
    run,
    snapshot,
    user_env,
)

# ------------------------------------------------------------------------------------------
# A project of one's own
# ------------------------------------------------------------------------------------------

PROJECT_FILES = {
    "Pulumi.yaml": """
        name: acme-train
        runtime:
          name: python
        stackConfigDir: stacks
    """,
    "__main__.py": '''
        """Acme's training infrastructure: its own naming and labels, trainstack's buckets."""
        import pulumi

        from components.labels import team_labels  # this project's own `components`
        from infra.naming import deployment_name  # this project's own `infra`
        from trainstack.components import TrainerPackage, TrainingBuckets

        name = deployment_name(pulumi.get_stack())
        buckets = TrainingBuckets(
            f"{name}-buckets",
            {
                "project": pulumi.Config("gcp").require("project"),
                "location": "US-CENTRAL1",
                "deployment_name": name,
                "environment": "dev",
                "checkpoint_retention_days": pulumi.Config().require_int("retention_days"),
                "labels": team_labels(),
            },
        )
        package = TrainerPackage(
            f"{name}-trainer", {"staging_bucket": buckets.staging_bucket, "labels": team_labels()}
        )
        pulumi.export("package_uri", package.uri)
    ''',
    "infra/__init__.py": '"""Acme\'s own infra helpers (a name trainstack used to install)."""\n',
    "infra/naming.py": """
        def deployment_name(stack: str) -> str:
            return f"acme-{stack}"
    """,
    "components/__init__.py": '"""Acme\'s own components (a name trainstack used to install)."""\n',
    "components/labels.py": """
        def team_labels() -> dict[str, str]:
            return {"team": "acme"}
    """,
    "stacks/Pulumi.dev.yaml": """
        config:
          gcp:project: acme-ml
          acme-train:retention_days: 30
    """,
    # `local` is also a bundled stack's name: this one is the project's own.
    "stacks/Pulumi.local.yaml": """
        config:
          trainstack:local:
            workers: 2
          trainstack:trainer:
            source: .
            entrypoint: [python, write_rank.py]
            launcher: node
    """,
    # Needs no torch: each process writes the rank it was given under its checkpoint folder.
    "write_rank.py": """
        import os
        from pathlib import Path

        checkpoints = Path(os.environ["TRAINSTACK_CHECKPOINT_DIR"])
        checkpoints.mkdir(parents=True, exist_ok=True)
        rank, nodes = os.environ["TRAINSTACK_NODE_RANK"], os.environ["TRAINSTACK_NUM_NODES"]
        (checkpoints / f"rank-{rank}.txt").write_text(f"{rank}/{nodes}\\n")
    """,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "acme-train"
    for rel, text in PROJECT_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text).lstrip("\n"))
    return root


def written(project: Path, before: Snapshot) -> list[str]:
    """Files under `project` that are new or changed since `before`."""
    now = snapshot(project)
    return sorted(p for p in now if now[p] != before.get(p) and (project / p).is_file())


# ------------------------------------------------------------------------------------------
# The tests
# ------------------------------------------------------------------------------------------


def test_the_wheel_installs_only_the_trainstack_namespace(installed: Installed) -> None:
    record = installed.site_packages / f"trainstack-{VERSION}.dist-info" / "RECORD"
    paths = [line.split(",")[0] for line in record.read_text().splitlines()]
    tops = {p.split("/")[0] for p in paths}
    assert tops == {"trainstack", f"trainstack-{VERSION}.dist-info", ".."}
    assert [p for p in paths if p.startswith("..")] == ["../../../bin/trainstack"]
    assert_install_untouched(installed)


def test_trainstack_imports_from_the_wheel_beside_your_own_packages(
    installed: Installed, project: Path
) -> None:
    probe = dedent(
        """
        import json
        import components, infra
        import trainstack, trainstack.components.training_buckets, trainstack.infra.testing
        from trainstack.components import TrainingBuckets
        print(json.dumps({
            "infra": infra.__file__,
            "components": components.__file__,
            "trainstack": list(trainstack.__path__),
            "buckets_module": trainstack.components.training_buckets.__file__,
            "testing": trainstack.infra.testing.__file__,
            "class": TrainingBuckets.__module__,
        }))
        """
    )
    found = json.loads(ok(run([installed.python, "-c", probe], project, user_env(installed))))
    wheel = installed.site_packages / "trainstack"
    assert found == {
        "infra": str(project / "infra" / "__init__.py"),
        "components": str(project / "components" / "__init__.py"),
        "trainstack": [str(wheel)],
        "buckets_module": str(wheel / "components" / "training_buckets.py"),
        "testing": str(wheel / "infra" / "testing.py"),
        "class": "trainstack.components.training_buckets",
    }
    assert_install_untouched(installed)


def test_stacks_lists_your_stacks(installed: Installed, project: Path) -> None:
    stacks = run([installed.trainstack, "stacks"], project, user_env(installed))
    # Names only on stdout, for scripts; `dev` has no trainstack: keys, so stderr names it a
    # stack of the project's own program, with the command that plans it.
    assert ok(stacks) == "dev\nlocal\n"
    assert stacks.stderr == (
        f"dev: a stack of your own program (no `trainstack:` keys): trainstack plan --program "
        f"{project} --stack dev\n"
    )
    assert_install_untouched(installed)


def test_your_program_plans_policies_and_plan_diffs(
    installed: Installed, project: Path, tmp_path: Path
) -> None:
    env = user_env(installed)
    before = snapshot(project)
    program = ["--program", ".", "--stack", "dev"]
    base = json.loads(ok(run([installed.trainstack, "plan", *program, "--json"], project, env)))
    assert base["stack"] == "dev"
    types = sorted({r["type"] for r in base["resources"]})
    assert types == [
        "gcp:storage/bucket:Bucket",
        "gcp:storage/bucketObject:BucketObject",
        "trainstack:storage:TrainerPackage",
        "trainstack:storage:TrainingBuckets",
    ]
    checkpoints = {r["name"]: r for r in base["resources"]}["acme-dev-buckets-checkpoints"]
    assert checkpoints["inputs"]["lifecycleRules"][0]["condition"]["age"] == 30
    assert checkpoints["inputs"]["labels"]["team"] == "acme"

    policy = run([installed.trainstack, "policy", *program, "--json"], project, env)
    [report] = json.loads(ok(policy))
    assert (report["stack"], report["resources"], report["violations"]) == ("dev", 6, [])

    (tmp_path / "base.json").write_text(json.dumps(base))
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    stack_file.write_text(stack_file.read_text().replace("retention_days: 30", "retention_days: 3"))
    # HEAD is the program's plan now.
    diff: Argv = [installed.trainstack, "plan-diff", *program, tmp_path / "base.json"]
    assert ok(run(diff, project, env)) == (
        "## trainstack plan diff\n\n"
        "### Stack `dev`: 0 to add, 1 to change, 0 to replace, 0 to delete\n\n"
        "- **change** `acme-dev-buckets-checkpoints` (gcp:storage/bucket:Bucket): updated in "
        "place (the Terraform provider schema)\n"
        "  - `lifecycleRules[0].condition.age`: `30` -> `3`\n\n"
    )

    # The trainer package is built in the project, once: the same bytes each run.
    [sdist] = [f for f in written(project, before) if f != "stacks/Pulumi.dev.yaml"]
    assert re.fullmatch(r"\.trainstack/build/trainstack_trainers-[0-9a-f]{16}\.tar\.gz", sdist)
    assert_install_untouched(installed)


def test_your_local_stack_runs_your_code_and_keeps_its_state_in_the_project(
    installed: Installed, project: Path
) -> None:
    env = user_env(installed)
    before = snapshot(project)
    ok(run([installed.trainstack, "local-run", "--stack", "local"], project, env))
    files = written(project, before)
    run_root = ".trainstack/local/local/"
    assert [f for f in files if not f.startswith(run_root)] == []
    ranks = sorted(f for f in files if Path(f).name.startswith("rank-"))
    assert [Path(f).name for f in ranks] == ["rank-0.txt", "rank-1.txt"]
    assert Path(ranks[0]).parent == Path(ranks[1]).parent
    assert [(project / f).read_text() for f in ranks] == ["0/2\n", "1/2\n"]
    assert f"{run_root}logs/local.jsonl" in files
    assert_install_untouched(installed)


def test_the_bundled_examples_run_and_build_in_your_project(
    installed: Installed, project: Path
) -> None:
    """An own-code example read from the install and the example program planned from there
    (28 s measured on 2 busy cores, mostly the example's 60 steps on 2 torch processes)."""
    env = user_env(installed)
    before = snapshot(project)
    example = installed.site_packages / "trainstack" / "examples" / "own-trainer"
    done = ok(
        run(
            [installed.trainstack, "local-run", "--stack", "example:own-trainer/local", "--json"],
            project,
            env,
        )
    )
    assert json.loads(done)["step"] == 60
    # The same file by path is the same run: status reads what local-run wrote.
    status = run(
        [installed.trainstack, "status", "--config-file", example / "Pulumi.local.yaml", "--json"],
        project / "stacks",
        env,
    )
    info = json.loads(ok(status))
    run_root = project / ".trainstack" / "local" / "example-own-trainer-local"
    assert (info["state"], info["step"], info["checkpoint_dir"]) == (
        "SUCCEEDED",
        60,
        str(run_root / "checkpoints" / "local"),
    )
    program = installed.site_packages / "trainstack" / "examples" / "tpu-own-bucket"
    ok(run([installed.trainstack, "plan", "--program", program, "--stack", "dev"], project, env))
    files = written(project, before)
    assert [f for f in files if not f.startswith(f"{run_root.relative_to(project)}/")] == [
        f for f in files if f.startswith(".trainstack/build/")
    ]
    [sdist] = [f for f in files if f.startswith(".trainstack/build/")]
    assert re.fullmatch(r"\.trainstack/build/trainstack_trainers-[0-9a-f]{16}\.tar\.gz", sdist)
    assert_install_untouched(installed)


def test_a_trainstack_folder_in_the_working_directory_is_reported(
    installed: Installed, project: Path
) -> None:
    # The project's own package named trainstack (no __init__.py): Python would merge it into
    # the installed namespace package, `trainstack.naming` importable beside trainstack's.
    own = project / "trainstack"
    own.mkdir()
    (own / "naming.py").write_text("PREFIX = 'acme'\n")
    env = user_env(installed)
    wheel = installed.site_packages / "trainstack"
    line = (
        f"ImportError: {own} is a second folder named trainstack on Python's import path (the "
        "working directory, PYTHONPATH or a program's folder), and Python merges it into the "
        f"trainstack package imported from {wheel} (a namespace package), so its modules would "
        "be imported as trainstack's; valid: rename or move that folder, or run from another "
        "folder"
    )
    for module in ("trainstack.components", "trainstack.infra.testing"):
        done = run([installed.python, "-c", f"import {module}"], project, env)
        assert (done.returncode, done.stdout, done.stderr.splitlines()[-1]) == (1, "", line)
    # The CLI does not run from the working directory, but a program's folder is first on
    # sys.path when it runs: a trainstack folder there, package or not, is one error line.
    for init in (False, True):
        if init:
            (own / "__init__.py").write_text("")
        done = run([installed.trainstack, "plan", "--program", ".", "--stack", "dev"], project, env)
        assert (done.returncode, done.stdout, done.stderr) == (
            2,
            "",
            f"error: --program: {own} would be imported as trainstack: the program's folder "
            f"comes first on sys.path (as `pulumi preview` runs it), ahead of the trainstack "
            f"at {wheel}; valid: rename or move it\n",
        )
    # Elsewhere, the same commands work.
    ok(run([installed.python, "-c", "import trainstack.components"], project / "stacks", env))
    assert_install_untouched(installed)

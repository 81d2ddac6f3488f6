"""Paths and state follow your project (`trainstack.infra.project`): stacks are found in the
project of the current folder, bundled ones are `example:NAME`, relative paths start at the
stack's base folder, and each local run has a folder of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.infra.cli import app
from trainstack.infra.config import load_stack_config
from trainstack.infra.local_paths import local_log_path, local_root
from trainstack.infra.plan import example_names, load_stack, stack_place
from trainstack.infra.project import (
    BUNDLED_ROOT,
    Project,
    current_place,
    example_files,
    find_project,
    placed,
)
from trainstack.infra.targets import target_of

runner = CliRunner()
LOCAL = (REPO_ROOT / "stacks" / "Pulumi.local.yaml").read_text()
PROJECT_FILE = "name: mine\nruntime: python\nstackConfigDir: deploy/stacks\n"


def _project(root: Path, **stacks: str) -> Path:
    """A Pulumi project at `root` with its stack files in `deploy/stacks/`."""
    (root / "deploy" / "stacks").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text(PROJECT_FILE)
    for name, text in stacks.items():
        (root / "deploy" / "stacks" / f"Pulumi.{name}.yaml").write_text(text)
    return root


def _own_code(source: str) -> str:
    return yaml.safe_dump(
        {
            "config": {
                "trainstack:local": {"workers": 2},
                "trainstack:trainer": {
                    "source": source,
                    "requirements": "requirements.txt",
                    "entrypoint": ["python", "train.py"],
                },
            }
        }
    )


def test_the_nearest_pulumi_yaml_up_is_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path / "mine")
    nested = root / "src" / "deep"
    nested.mkdir(parents=True)
    found = find_project(nested)
    assert found == Project(root=root, stacks_dir=root / "deploy" / "stacks")
    assert (found.state_dir, found.build_dir) == (root / ".trainstack", root / ".trainstack/build")
    assert found.local_dir("dev") == root / ".trainstack" / "local" / "dev"


def test_without_stack_config_dir_the_stacks_sit_beside_pulumi_yaml(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: flat\nruntime: python\n")
    assert find_project(tmp_path) == Project(root=tmp_path, stacks_dir=tmp_path)


def test_without_a_pulumi_yaml_the_current_folder_is_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_project() == Project(root=tmp_path.resolve(), stacks_dir=tmp_path.resolve())


def test_this_repository_is_a_project_with_its_stacks_in_stacks() -> None:
    assert find_project(REPO_ROOT / "infra") == Project(REPO_ROOT, REPO_ROOT / "stacks")
    assert BUNDLED_ROOT == REPO_ROOT
    # The bundled stacks, then the your-own-code examples (tpu-own-bucket is a program).
    assert example_names() == [
        "dev-a100-gke",
        "dev-b200-gce",
        "dev-h100-gke",
        "dev-tpu-v5e",
        "dev-tpu-v6e-gke",
        "dev-vertex-hpt",
        "local",
        "local-tf",
        "own-jax/local",
        "own-jax/tpu",
        "own-trainer/gce",
        "own-trainer/gke",
        "own-trainer/local",
        "own-trainer/vertex",
        "prod-a100-gce",
        "prod-tpu-v4-32",
        "prod-vertex-rs",
    ]


def test_stacks_lists_the_project_and_examples_lists_the_bundled_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_project(tmp_path, dev=LOCAL, prod=LOCAL) / "deploy")
    assert runner.invoke(app, ["stacks"]).stdout == "dev\nprod\n"
    examples = runner.invoke(app, ["stacks", "--examples"]).stdout.splitlines()
    assert examples == [f"example:{name}" for name in example_names()]
    assert "example:local" in examples


def test_a_bundled_name_missing_from_the_project_points_to_the_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_project(tmp_path, dev=LOCAL))
    result = runner.invoke(app, ["plan", "--stack", "local"])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == (
        f"error: --stack: no stack named 'local' in {tmp_path / 'deploy' / 'stacks'}; the "
        "bundled example is --stack example:local; valid: dev"
    )
    missing = runner.invoke(app, ["plan", "--stack", "example:nope"])
    assert missing.exit_code == 2
    assert missing.stderr.replace("\n", "").startswith(
        "error: --stack: no bundled stack named 'nope'; valid: example:dev-a100-gke, "
    )


def test_an_example_is_planned_under_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    result = runner.invoke(app, ["plan", "--stack", "example:local", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["stack"] == "local"
    # Its run writes into this project, never beside the bundled file.
    assert plan["outputs"]["local_root"] == str(tmp_path / ".trainstack/local/example-local")


def test_relative_source_resolves_against_the_project_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "mine", own=_own_code("code"))
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "code" / "requirements.txt").write_text("numpy\n")
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root / "notebooks")
    result = runner.invoke(app, ["plan", "--stack", "own", "--json"])
    assert result.exit_code == 0, result.output
    code = json.loads(result.stdout)["code"]
    assert (code["source"], code["requirements"]) == ("code", ["numpy"])
    # A stack file outside any project: its own folder is the base.
    outside = tmp_path / "loose"
    (outside / "code").mkdir(parents=True)
    (outside / "code" / "train.py").write_text("print('hi')\n")
    (outside / "code" / "requirements.txt").write_text("pyyaml\n")
    (outside / "Pulumi.loose.yaml").write_text(_own_code("code"))
    loose = runner.invoke(app, ["plan", "--config-file", str(outside / "Pulumi.loose.yaml")])
    assert loose.exit_code == 0, loose.output
    assert "pyyaml" in loose.stdout


def test_a_missing_source_is_named_with_the_folder_it_was_looked_for_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "mine", own=_own_code("nowhere"))
    monkeypatch.chdir(root)
    result = runner.invoke(app, ["plan", "--stack", "own"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: stack 'own': trainer.source: 'nowhere' is not a folder ({root / 'nowhere'}); "
        "valid: a folder relative to the project root, or an absolute path"
    ]


def test_two_projects_and_an_example_never_share_a_run_folder(tmp_path: Path) -> None:
    first, second = _project(tmp_path / "a", local=LOCAL), _project(tmp_path / "b", local=LOCAL)
    roots = []
    for project, stack in ((first, "local"), (first, "example:local"), (second, "local")):
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(project)
            place = stack_place(stack, None)
            name, config = load_stack(stack, None)
            with placed(place):
                cfg = load_stack_config(config)
                given = target_of(cfg).local_run_root(cfg)
                roots.append((local_root(name, given), local_log_path(cfg, name, None, given)))
    assert roots == [
        (first / ".trainstack/local/local", first / ".trainstack/local/local/logs/local.jsonl"),
        (
            first / ".trainstack/local/example-local",
            first / ".trainstack/local/example-local/logs/local.jsonl",
        ),
        (second / ".trainstack/local/local", second / ".trainstack/local/local/logs/local.jsonl"),
    ]
    assert not (BUNDLED_ROOT / "stacks" / ".trainstack").exists()


def test_a_given_local_root_is_relative_to_the_stack_and_the_place_is_left_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = LOCAL.replace("    workers: 2\n", "    workers: 2\n    root: runs/here\n")
    root = _project(tmp_path, mine=text)
    monkeypatch.chdir(root / "deploy")
    result = runner.invoke(app, ["plan", "--stack", "mine", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputs"]["local_root"] == "runs/here"
    assert current_place().base_dir == root  # the command's place ended with it


def test_a_stack_file_without_the_config_wrapper_says_so(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.bare.yaml"
    path.write_text("trainstack:local:\n  workers: 2\ntrainstack:environment: dev\n")
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == (
        f"error: {path}: missing the top-level `config:` key (trainstack:local, "
        "trainstack:environment are at the top level); valid: the stack's keys indented "
        "under `config:`, as Pulumi reads a stack file"
    )


def _ignored(path: Path) -> bool:
    """Run output git ignores (`.trainstack/`, `__pycache__/`) in an example's folder."""
    return any(part.startswith(".") or part == "__pycache__" for part in path.parts[:-1])


def test_the_wheel_ships_the_bundled_stacks_and_examples(tmp_path: Path) -> None:
    """Built from a copy of the tracked files (links kept), never inside the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    source = tmp_path / "src"
    for name in filter(None, (item.decode() for item in listed)):
        origin, copy = REPO_ROOT / name, source / name
        if not origin.exists() and not origin.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        copy.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_symlink():
            copy.symlink_to(os.readlink(origin))
        else:
            shutil.copy2(origin, copy)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = (tmp_path / "dist").glob("trainstack-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    stacks = {
        f"trainstack/{path.relative_to(REPO_ROOT).as_posix()}" for path in example_files().values()
    }
    assert "trainstack/examples/own-trainer/Pulumi.local.yaml" in stacks
    assert stacks <= names
    examples = {
        f"trainstack/{p.relative_to(REPO_ROOT).as_posix()}"
        for p in (REPO_ROOT / "examples").rglob("*")
        if p.is_file() and not _ignored(p.relative_to(REPO_ROOT / "examples"))
    }
    assert examples <= names
    assert {n.split("/", 1)[0] for n in names} == {
        "trainstack",
        wheel.name.split("-py3")[0] + ".dist-info",
    }


def test_an_unreadable_pulumi_yaml_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: [x\n")
    monkeypatch.chdir(tmp_path)
    for args in (["stacks"], ["plan", "--stack", "x"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        assert result.stderr.replace("\n", "") == (
            f"error: {tmp_path / 'Pulumi.yaml'}: not a readable Pulumi project file (expected "
            "',' or ']', but got '<stream end>' at line 2, column 1); valid: a YAML mapping "
            "with `name` and `runtime`"
        )

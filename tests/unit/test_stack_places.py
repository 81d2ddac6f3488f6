"""Where a `--config-file`, an `example:` stack and a program run, read and write
(`trainstack.infra.project`): a file's runs live in its own project whatever the current
folder, a bundled one in the current folder's project, a relative trainer folder is the
stack's, and nothing lands inside an installed trainstack."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.components import _project as components_project
from trainstack.infra import project as project_module
from trainstack.infra.cli import app
from trainstack.infra.config import load_stack_config
from trainstack.infra.local_paths import local_checkpoint_dir, local_log_path, local_root, localized
from trainstack.infra.plan import stack_place
from trainstack.infra.project import (
    BUNDLED_ROOT,
    InstallWriteError,
    StackPlace,
    current_build_dir,
    find_project,
    placed,
    with_local_paths,
)
from trainstack.trainers.common.user_code import StackTrainer

runner = CliRunner()
CODE = """\
import json, os, pathlib
folder = pathlib.Path(os.environ["TRAINSTACK_CHECKPOINT_DIR"])
folder.mkdir(parents=True, exist_ok=True)
(folder / "step-1").write_text("saved")
print(json.dumps({"event": "done", "rank": 0, "step": 1}), flush=True)
"""


def _stack(**trainer: object) -> str:
    body = {"source": "code", "entrypoint": ["python", "train.py"], "launcher": "node"}
    config = {"trainstack:local": {"workers": 1}, "trainstack:trainer": {**body, **trainer}}
    return yaml.safe_dump({"config": config})


def _acme(tmp_path: Path) -> Path:
    """/acme: Pulumi.yaml with `stackConfigDir: stacks`, stacks `local` and `rel`, code/;
    /outside: a stack file and code with no Pulumi.yaml anywhere up."""
    acme = tmp_path / "acme"
    for folder in (acme / "stacks", acme / "code", acme / "deep" / "sub", acme / "trials"):
        folder.mkdir(parents=True)
    (acme / "Pulumi.yaml").write_text("name: acme\nruntime: python\nstackConfigDir: stacks\n")
    (acme / "code" / "train.py").write_text(CODE)
    (acme / "stacks" / "Pulumi.local.yaml").write_text(_stack())
    (acme / "stacks" / "Pulumi.rel.yaml").write_text(_stack(checkpoint_dir="ckpts/rel"))
    (acme / "trials" / "Pulumi.local.yaml").write_text(_stack())
    outside = tmp_path / "outside"
    (outside / "code").mkdir(parents=True)
    (outside / "code" / "train.py").write_text(CODE)
    (outside / "Pulumi.local.yaml").write_text(_stack())
    (outside / "l.yaml").write_text(_stack())
    return acme


def _hex8(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]


def _where(place: StackPlace) -> tuple[Path, Path, Path]:
    return place.base_dir, place.project.root, place.local_dir("local")


def test_a_config_file_runs_in_its_own_project_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = _acme(tmp_path)
    outside = tmp_path / "outside"
    trials = acme / "trials" / "Pulumi.local.yaml"
    expected = {
        # acme's own stack file: acme's stack `local`, as `--stack local` there.
        acme / "stacks" / "Pulumi.local.yaml": (acme, acme, acme / ".trainstack/local/local"),
        # No Pulumi.yaml up: its folder is its project, whose stacks it holds.
        outside / "Pulumi.local.yaml": (outside, outside, outside / ".trainstack/local/local"),
        # In acme but not one of its stacks: acme's paths, a folder of its own.
        trials: (acme, acme, acme / f".trainstack/local/local-{_hex8(trials)}"),
        outside / "l.yaml": (
            outside,
            outside,
            outside / f".trainstack/local/local-{_hex8(outside / 'l.yaml')}",
        ),
    }
    for cwd in (acme, acme / "deep" / "sub", outside, tmp_path):
        monkeypatch.chdir(cwd)
        for path, where in expected.items():
            relative = os.path.relpath(path, cwd)
            assert _where(stack_place(None, relative)) == where, (cwd, path)
    monkeypatch.chdir(acme / "deep")
    assert _where(stack_place("local", None)) == expected[acme / "stacks/Pulumi.local.yaml"]


def test_status_and_logs_of_a_config_file_read_the_same_run_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = _acme(tmp_path)
    trials = acme / "trials" / "Pulumi.local.yaml"
    run = acme / f".trainstack/local/local-{_hex8(trials)}"
    (run / "logs").mkdir(parents=True)
    record = {"event": "done", "rank": 0, "step": 7}
    (run / "logs" / "local.jsonl").write_text(json.dumps(record) + "\n")
    for cwd in (acme, tmp_path / "outside"):
        monkeypatch.chdir(cwd)
        status = runner.invoke(app, ["status", "--config-file", str(trials), "--json"])
        assert status.exit_code == 0, status.output
        info = json.loads(status.stdout)
        assert (info["state"], info["step"], info["checkpoint_dir"]) == (
            "SUCCEEDED",
            7,
            str(run / "checkpoints" / "local"),
        )
        logs = runner.invoke(app, ["logs", "--config-file", str(trials), "--json"])
        assert logs.exit_code == 0, logs.output
        assert [json.loads(line) for line in logs.stdout.splitlines()] == [record]
    # acme's own stack `local` is another run: nothing of it was read or written.
    assert not (acme / ".trainstack/local/local").exists()


def test_relative_trainer_folders_are_the_stacks_urls_and_absolute_ones_stay(
    tmp_path: Path,
) -> None:
    base = _acme(tmp_path)
    trainer = StackTrainer.model_validate(
        {
            "checkpoint_dir": "ckpts/rel",
            "data_path": "../data",
            "model_dir": "gs://bucket/model",
            "tensorboard_dir": "/abs/tb",
        }
    )
    moved = with_local_paths(trainer, base)
    assert (moved.checkpoint_dir, moved.data_path, moved.model_dir, moved.tensorboard_dir) == (
        str(base / "ckpts" / "rel"),
        str(tmp_path / "data"),
        "gs://bucket/model",
        "/abs/tb",
    )
    place = StackPlace(base_dir=base, project=find_project(base))
    config = yaml.safe_load(_stack(checkpoint_dir="ckpts/rel"))["config"]
    config["trainstack:local"]["root"] = "runs"
    with placed(place):
        cfg = localized(load_stack_config(config), "rel", "runs")
        assert (local_root("rel", "runs"), cfg.trainer.checkpoint_dir) == (
            base / "runs",
            str(base / "ckpts" / "rel"),
        )
        raw = load_stack_config(config)  # status reads the same folder from the raw config
        assert local_checkpoint_dir(raw, "rel", None, "runs") == str(base / "ckpts" / "rel")
        assert local_log_path(raw, "rel", None, "runs") == base / "runs" / "logs" / "rel.jsonl"


@pytest.mark.trainer
def test_local_run_from_a_subfolder_writes_a_relative_checkpoint_dir_in_the_project(
    tmp_path: Path,
) -> None:
    """About 2 s: one node launcher and the code it starts."""
    acme = _acme(tmp_path)
    sub = acme / "deep" / "sub"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "local-run", "--stack", "rel"],
        cwd=sub,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (acme / "ckpts" / "rel").iterdir()) == [
        "step-1",
        "trainstack-run.json",
    ]
    assert sorted(p.name for p in (acme / ".trainstack/local/rel/logs").iterdir()) == [
        "rel.config.json",
        "rel.jsonl",
        "rel.stderr.log",
    ]
    assert list(sub.iterdir()) == []
    assert sorted(p.name for p in (acme / "code").iterdir()) == ["train.py"]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`site-packages/trainstack` as the wheel ships it (stacks/ and examples/, no
    Pulumi.yaml), standing in for `BUNDLED_ROOT`."""
    root = tmp_path / "site-packages" / "trainstack"
    root.mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "stacks", root / "stacks")
    ignore = shutil.ignore_patterns(".trainstack", "__pycache__")
    shutil.copytree(REPO_ROOT / "examples", root / "examples", ignore=ignore)
    # Both views of it: the examples (infra.project) and the install guard
    # (components._project).
    monkeypatch.setattr(project_module, "BUNDLED_ROOT", root)
    monkeypatch.setattr(components_project, "BUNDLED_ROOT", root)
    assert project_module.installed()
    return root


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_an_installed_example_reads_the_install_and_runs_in_the_current_project(
    tmp_path: Path, install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = _acme(tmp_path)
    before = _files(install)
    monkeypatch.chdir(acme / "deep")
    run = acme / ".trainstack/local/example-own-trainer-local"
    example = install / "examples" / "own-trainer" / "Pulumi.local.yaml"
    assert _where(stack_place(None, example)) == (install, acme, run)
    assert _where(stack_place("example:own-trainer/local", None)) == (install, acme, run)
    assert _where(stack_place(None, install / "stacks" / "Pulumi.local.yaml")) == (
        install,
        acme,
        acme / ".trainstack/local/example-local",
    )
    listed = runner.invoke(app, ["stacks", "--examples"]).stdout.splitlines()
    assert [line for line in listed if "/" in line] == [
        "example:own-jax/local",
        "example:own-jax/tpu",
        "example:own-trainer/gce",
        "example:own-trainer/gke",
        "example:own-trainer/local",
        "example:own-trainer/vertex",
    ]
    for args in (["--stack", "example:own-trainer/local"], ["--config-file", str(example)]):
        result = runner.invoke(app, ["plan", *args, "--json"])
        assert result.exit_code == 0, result.output
        plan = json.loads(result.stdout)
        assert (plan["code"]["source"], plan["outputs"]["local_root"]) == (
            "examples/own-trainer",
            str(run),
        )
    assert _files(install) == before


def test_a_program_inside_the_install_builds_into_the_current_project(
    tmp_path: Path, install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = _acme(tmp_path)
    before = _files(install)
    monkeypatch.chdir(acme / "deep")
    program = install / "examples" / "tpu-own-bucket"
    result = runner.invoke(app, ["plan", "--program", str(program), "--stack", "dev", "--json"])
    assert result.exit_code == 0, result.output
    (sdist,) = (acme / ".trainstack" / "build").glob("trainstack_trainers-*.tar.gz")
    assert sdist.stat().st_size > 0
    assert _files(install) == before
    monkeypatch.chdir(program)  # run from inside the install: refused, not written there
    with pytest.raises(InstallWriteError) as refused:
        current_build_dir()
    assert str(refused.value) == (
        f"build_dir: {program / '.trainstack' / 'build'} is inside the installed trainstack "
        f"({install}), which is never written to; valid: an absolute folder, or run a copy of "
        "the stack file from your project"
    )


def test_a_bundled_stack_that_would_write_into_the_install_is_refused(
    tmp_path: Path, install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = _acme(tmp_path)
    rooted = install / "examples" / "own-trainer" / "Pulumi.rooted.yaml"
    text = (install / "examples" / "own-trainer" / "Pulumi.local.yaml").read_text()
    rooted.write_text(text.replace("    workers: 2\n", "    workers: 2\n    root: .runs\n"))
    monkeypatch.chdir(acme)
    result = runner.invoke(app, ["status", "--stack", "example:own-trainer/rooted"])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == (
        f"error: stack 'rooted': local.root: {install / '.runs'} is inside "
        f"the installed trainstack ({install}), which is never written to; valid: an absolute "
        "folder, or run a copy of the stack file from your project"
    )


def test_the_checkout_is_a_project_its_stacks_its_own_and_its_examples_bundled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BUNDLED_ROOT == REPO_ROOT and not project_module.installed()
    acme = _acme(tmp_path)
    monkeypatch.chdir(acme)
    assert _where(stack_place(None, REPO_ROOT / "stacks" / "Pulumi.local.yaml")) == (
        REPO_ROOT,
        REPO_ROOT,
        REPO_ROOT / ".trainstack/local/local",
    )
    assert _where(stack_place(None, REPO_ROOT / "examples" / "own-jax" / "Pulumi.local.yaml")) == (
        REPO_ROOT,
        acme,
        acme / ".trainstack/local/example-own-jax-local",
    )


def test_no_bundled_stack_names_a_relative_folder_it_would_write() -> None:
    """A bundled stack's relative paths start in the install (`example:`), where nothing is
    written: its runs keep the default folder in the current project."""
    for path in [*(REPO_ROOT / "stacks").glob("*.yaml"), *(REPO_ROOT / "examples").rglob("*.yaml")]:
        config = yaml.safe_load(path.read_text()).get("config") or {}
        trainer = config.get("trainstack:trainer") or {}
        written = {k: v for k, v in trainer.items() if k.endswith("_dir") and "://" not in v}
        assert ((config.get("trainstack:local") or {}).get("root"), written) == (None, {}), path

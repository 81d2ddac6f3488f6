"""TrainerPackage with your own code (`user_source`): one content-addressed sdist that gives
a machine both the node launcher and your folder, installed and run the way a target does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from trainstack import trainers
from trainstack.components import trainer_package
from trainstack.components.trainer_package import TrainerPackage
from trainstack.infra.mocks import ProgramRun, run_program


@pytest.fixture
def source_root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(
        Path(trainers.__file__).parent,
        root / "trainers",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return root


@pytest.fixture
def code(tmp_path: Path) -> Path:
    folder = tmp_path / "my_project"
    (folder / "lib").mkdir(parents=True)
    (folder / "data-files").mkdir()
    (folder / "train.py").write_text(
        "import json, os, lib.util\n"
        "print(json.dumps({'cwd': os.getcwd(), 'msg': lib.util.MSG,"
        " 'data': open('data-files/a.txt').read(), 'run': os.environ['TRAINSTACK_RUN_NAME']}))\n"
    )
    (folder / "lib" / "util.py").write_text("MSG = 'hello'\n")
    (folder / "data-files" / "a.txt").write_text("payload")
    (folder / "requirements.txt").write_text("numpy>=1.26\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.pyc").write_bytes(b"junk")
    return folder


def _run(source_root: Path, code: Path, **overrides: Any) -> ProgramRun:
    args = {
        "staging_bucket": "my-staging",
        "source_root": str(source_root),
        "user_source": str(code),
        **overrides,
    }

    def program() -> dict[str, Any]:
        package = TrainerPackage("pkg", args)  # type: ignore[arg-type]
        return {"uri": package.uri, "sha256": package.sha256, "local_path": package.local_path}

    return run_program(program)


def test_code_package_is_content_addressed(source_root: Path, code: Path) -> None:
    first = _run(source_root, code, requirements=["numpy>=1.26"]).outputs
    trainer_package._BUILD_CACHE.clear()
    again = _run(source_root, code, requirements=["numpy>=1.26"]).outputs
    assert again == first  # unchanged code: same object, nothing relaunches
    digest = first["sha256"]
    assert first["uri"] == f"gs://my-staging/code/trainstack_code-{digest[:16]}.tar.gz"
    with tarfile.open(first["local_path"], mode="r:gz") as tar:
        names = tar.getnames()
        top = f"trainstack-code-{trainer_package._version()}"
        pyproject = tar.extractfile(f"{top}/pyproject.toml")
        assert pyproject is not None
        text = pyproject.read().decode()

    expected = {f"{top}/trainstack/user_source/train.py", f"{top}/trainstack/trainers/node.py"}
    assert expected <= set(names)
    assert f"{top}/trainstack/user_source/data-files/a.txt" in names
    assert not [n for n in names if "__pycache__" in n]
    assert 'dependencies = [\n  "numpy>=1.26",\n]' in text
    (code / "lib" / "util.py").write_text("MSG = 'changed'\n")
    changed = _run(source_root, code, requirements=["numpy>=1.26"]).outputs
    assert changed["uri"] != first["uri"]


def test_installed_package_runs_your_code_in_its_folder(
    source_root: Path, code: Path, tmp_path: Path
) -> None:
    sdist = Path(_run(source_root, code).outputs["local_path"])
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(sdist),
        ],
        check=True,
        capture_output=True,
    )
    # The way every target starts it: the node launcher from the package, no --source.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.trainers.node",
            "--launcher=node",
            "--env=TRAINSTACK_RUN_NAME=r1",
            "--",
            "python",
            "train.py",
        ],
        cwd=tmp_path,
        env={
            "PYTHONPATH": str(site),
            "PATH": "/usr/bin:/bin",
            "TRAINSTACK_SIMULATED_ACCELERATORS": "1",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[1] == {
        "cwd": str(site / "trainstack" / "user_source"),
        "msg": "hello",
        "data": "payload",
        "run": "r1",
    }

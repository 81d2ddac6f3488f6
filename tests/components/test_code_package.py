"""TrainerPackage with your own code (`user_source`): one content-addressed sdist that gives
a machine both the node launcher and your folder, installed and run the way a target does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
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


def _user_members(local_path: str) -> list[str]:
    top = f"trainstack-code-{trainer_package._version()}/trainstack/user_source/"
    with tarfile.open(local_path, mode="r:gz") as tar:
        return sorted(n.removeprefix(top) for n in tar.getnames() if n.startswith(top))


def test_code_package_leaves_secrets_and_ignored_files_out(
    source_root: Path, code: Path, tmp_path: Path
) -> None:
    (code / ".env").write_text("HF_TOKEN=hf_abc\n")
    (code / "id_rsa").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    # google-auth's service-account key file: `type` and `private_key`
    # (google/auth/_default.py _SERVICE_ACCOUNT_TYPE, google/auth/crypt/base.py).
    (code / "sa-key.json").write_text(
        json.dumps({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\n"})
    )
    (code / "data-files" / "big.npy").write_bytes(b"\0" * 64)
    (code / ".gcloudignore").write_text("*.npy\n")
    (code / "linked.py").symlink_to("train.py")
    first = _run(source_root, code).outputs
    assert _user_members(first["local_path"]) == [
        "data-files/a.txt",
        "lib/util.py",
        "linked.py",
        "requirements.txt",
        "train.py",
    ]
    # What was left out is no part of the package: changing it uploads nothing new.
    (code / ".env").write_text("HF_TOKEN=hf_rotated\n")
    (code / "data-files" / "big.npy").write_bytes(b"\1" * 64)
    assert _run(source_root, code).outputs == first

    outside = tmp_path / "secrets.txt"
    outside.write_text("token\n")
    (code / "lib" / "leak.txt").symlink_to(outside)
    with pytest.raises(ValueError) as error:
        _run(source_root, code)
    assert str(error.value) == (
        f"TrainerPackage.user_source: link 'lib/leak.txt' points to '{outside}', outside the "
        f"folder ({code}); valid: a link to a file inside the folder, a copy of it, or "
        f"'lib/leak.txt' in {code}/.gcloudignore to leave it out"
    )


MARKED = [
    'torch==2.1; python_version < "3.12"',
    "numpy>=1.26",
    'tomli>=2; python_version < "3.11" and platform_system != "Windows"',
    "mypkg @ https://example.com/mypkg-1.0-py3-none-any.whl",
]
"""PEP 508 requirements with environment markers (quoted strings) and a URL: refused before,
since pyproject.toml held each in double quotes unescaped."""


def _requires_dist(text: str) -> list[str]:
    return [
        line[len("Requires-Dist: ") :]
        for line in text.splitlines()
        if line.startswith("Requires-Dist: ")
    ]


def test_requirements_with_markers_reach_the_package_metadata_exactly(
    source_root: Path, code: Path, tmp_path: Path
) -> None:
    sdist = Path(_run(source_root, code, requirements=MARKED).outputs["local_path"])
    top = f"trainstack-code-{trainer_package._version()}"
    with tarfile.open(sdist, mode="r:gz") as tar:
        members = {n: tar.extractfile(f"{top}/{n}") for n in ("PKG-INFO", "pyproject.toml")}
        texts = {n: f.read().decode() for n, f in members.items() if f is not None}
    assert _requires_dist(texts["PKG-INFO"]) == MARKED
    assert tomllib.loads(texts["pyproject.toml"])["project"]["dependencies"] == MARKED
    # What pip installs from: the wheel setuptools builds from the sdist, as on every node.
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(wheels),
            str(sdist),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as built:
        (name,) = [n for n in built.namelist() if n.endswith(".dist-info/METADATA")]
        assert _requires_dist(built.read(name).decode()) == MARKED

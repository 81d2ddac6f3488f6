"""TrainerPackage: a reproducible sdist of the trainers, uploaded under its content hash."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from trainstack import trainers
from trainstack.components import trainer_package
from trainstack.components.trainer_package import TOKEN, TrainerPackage
from trainstack.infra.mocks import ProgramRun, run_program

OBJECT = "gcp:storage/bucketObject:BucketObject"


@pytest.fixture
def source_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the trainers tree, used from a project of its own (the current
    folder), so builds and edits stay inside tmp_path."""
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: mine\nruntime: python\n")
    monkeypatch.chdir(project / "sub")
    root = tmp_path / "repo"
    shutil.copytree(
        Path(trainers.__file__).parent,
        root / "trainers",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return root


def _run(source_root: Path | None, **overrides: Any) -> ProgramRun:
    args: dict[str, Any] = {
        "staging_bucket": "my-staging",
        **({"source_root": str(source_root)} if source_root else {}),
        **overrides,
    }

    def program() -> dict[str, Any]:
        package = TrainerPackage("pkg", args)  # type: ignore[arg-type]
        return {
            "uri": package.uri,
            "object_name": package.object_name,
            "sha256": package.sha256,
            "local_path": package.local_path,
        }

    return run_program(program)


def test_uploads_content_addressed_object(source_root: Path) -> None:
    run = _run(source_root, labels={"team": "ml"})
    assert {(r.type, r.name, r.parent) for r in run.resources} == {
        (TOKEN, "pkg", None),
        (OBJECT, "pkg-sdist", "pkg"),
    }
    local = Path(run.outputs["local_path"])
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    object_name = f"trainers/trainstack_trainers-{digest[:16]}.tar.gz"
    # In the project of the current folder, not beside the trainers' source.
    build = source_root.parent / "project" / ".trainstack" / "build"
    assert local == build / f"trainstack_trainers-{digest[:16]}.tar.gz"
    assert run.outputs == {
        "uri": f"gs://my-staging/{object_name}",
        "object_name": object_name,
        "sha256": digest,
        "local_path": str(local),
    }
    assert run.named("pkg-sdist").delete_before_replace is True
    assert run.named("pkg-sdist").inputs == {
        "bucket": "my-staging",
        "name": object_name,
        "source": {"fileAsset": f".trainstack/build/trainstack_trainers-{digest[:16]}.tar.gz"},
        "contentType": "application/gzip",
        "metadata": {
            "component": "trainer-package",
            "managed-by": "trainstack",
            "team": "ml",
            "sha256": digest,
        },
    }


def test_sdist_layout_is_reproducible(source_root: Path) -> None:
    trainer_package._BUILD_CACHE.clear()
    first = trainer_package._build_sdist(source_root)
    first_bytes = first.path.read_bytes()
    (source_root / "trainers" / "__pycache__").mkdir()
    (source_root / "trainers" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (source_root / "trainers" / "stray.pyc").write_bytes(b"junk")
    trainer_package._BUILD_CACHE.clear()
    second = trainer_package._build_sdist(source_root)
    assert second == first
    assert second.path.read_bytes() == first_bytes

    assert first_bytes[4:8] == b"\0\0\0\0"  # gzip header mtime
    with tarfile.open(fileobj=io.BytesIO(first_bytes), mode="r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    top = names[0].split("/", 1)[0]
    assert top.startswith("trainstack-trainers-")
    assert f"{top}/pyproject.toml" in names
    assert f"{top}/PKG-INFO" in names
    assert f"{top}/trainstack/trainers/common/config.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert {(m.uid, m.gid, m.mtime, m.uname, m.gname) for m in members} == {
        (0, 0, trainer_package._FIXED_MTIME, "", "")
    }


def test_pyproject_excludes_frameworks(source_root: Path) -> None:
    trainer_package._BUILD_CACHE.clear()
    sdist = trainer_package._build_sdist(source_root)
    with tarfile.open(sdist.path, mode="r:gz") as tar:
        name = next(n for n in tar.getnames() if n.endswith("/pyproject.toml"))
        extracted = tar.extractfile(name)
        assert extracted is not None
        pyproject = extracted.read().decode()
    assert 'name = "trainstack-trainers"' in pyproject
    assert 'build-backend = "setuptools.build_meta"' in pyproject
    assert "torch" not in pyproject
    assert "tensorflow" not in pyproject


def test_source_change_changes_hash_and_object(source_root: Path) -> None:
    before = _run(source_root).outputs
    config = source_root / "trainers" / "common" / "config.py"
    config.write_text(config.read_text() + "\n# changed\n")
    after = _run(source_root).outputs
    assert after["sha256"] != before["sha256"]
    assert after["object_name"] != before["object_name"]
    assert after["uri"] != before["uri"]


def test_same_program_registers_identical_inputs(source_root: Path) -> None:
    first = _run(source_root)
    trainer_package._BUILD_CACHE.clear()  # a fresh process rebuilds from scratch
    second = _run(source_root)
    assert {r.name: (r.type, r.inputs) for r in first.resources} == {
        r.name: (r.type, r.inputs) for r in second.resources
    }


def test_build_is_fast_and_cached(source_root: Path) -> None:
    trainer_package._BUILD_CACHE.clear()
    start = time.perf_counter()
    built = trainer_package._build_sdist(source_root)
    cold = time.perf_counter() - start
    mtime = built.path.stat().st_mtime_ns
    assert trainer_package._build_sdist(source_root) is built
    assert built.path.stat().st_mtime_ns == mtime
    assert cold < 1.0


def test_default_source_is_the_installed_trainers_and_build_dir_is_an_argument(
    source_root: Path, tmp_path: Path
) -> None:
    # No source_root: the installed `trainstack.trainers`, which is only read.
    installed = _run(None)
    assert Path(installed.outputs["local_path"]).parent == (
        tmp_path / "project" / ".trainstack" / "build"
    )
    chosen = _run(source_root, build_dir=str(tmp_path / "out"))
    assert Path(chosen.outputs["local_path"]).parent == tmp_path / "out"
    assert not any(Path(trainers.__file__).resolve().parent.rglob("*.tar.gz"))


def test_missing_package_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no trainers/__init__\.py"):
        _run(tmp_path)


def _node_closure(requirements: Iterable[str]) -> set[str]:
    """The distributions `requirements` install, with theirs (normalized names), as far as
    this environment has them installed."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = Requirement(todo.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        with contextlib.suppress(metadata.PackageNotFoundError):
            todo += metadata.requires(name) or []
    return seen


IMAGE_FRAMEWORKS = ("torch", "tensorflow", "tf-keras", "jax")
"""What the platform image brings (the sdist declares no framework: module docstring)."""
LOCAL_ONLY = (
    "trainstack.trainers.local",
    "trainstack.trainers.local_code",
    "trainstack.trainers.local_report",
)
"""`trainstack local-run`'s modules: they run on this machine, beside the whole of
trainstack (rich's progress display), and no node imports them."""

_IMPORT_ALL = """
import importlib, importlib.abc, json, pkgutil, sys
site, blocked = sys.argv[1], json.loads(sys.argv[2])
skip = set(json.loads(sys.argv[3]))

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"No module named {name!r} (not on a node)", name=name)
        return None

sys.meta_path.insert(0, Blocked())
sys.path.insert(0, site)
import trainstack.trainers as package
failed, imported = {}, []
for module in pkgutil.walk_packages(package.__path__, "trainstack.trainers."):
    if module.name.endswith(".__main__") or module.name in skip:
        continue
    try:
        importlib.import_module(module.name)
        imported.append(module.name)
    except Exception as exc:
        failed[module.name] = repr(exc)
print(json.dumps({"path": list(package.__path__), "failed": failed, "imported": imported}))
"""


def test_sdist_modules_import_with_only_the_node_dependencies(
    source_root: Path, tmp_path: Path
) -> None:
    # A node has what the sdist declares (RUNTIME_DEPENDENCIES, with theirs) and the image's
    # framework; everything else trainstack depends on (pulumi, pathspec, typer, ...) and
    # trainstack's other packages are refused on import, and every module of the installed
    # sdist must still import.
    sdist = trainer_package._build_sdist(source_root)
    target = tmp_path / "site"
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
            str(target),
            str(sdist.path),
        ],
        check=True,
        capture_output=True,
    )
    node = _node_closure([*trainer_package.RUNTIME_DEPENDENCIES, *IMAGE_FRAMEWORKS])
    planning = _node_closure(metadata.requires("trainstack") or []) - node
    assert "pathspec" in planning and "pulumi" in planning
    blocked = sorted(
        {
            module
            for module, dists in metadata.packages_distributions().items()
            if any(canonicalize_name(d) in planning for d in dists) and module.isidentifier()
        }
        | {"trainstack.components", "trainstack.infra", "trainstack.policies"}
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _IMPORT_ALL,
            str(target),
            json.dumps(blocked),
            json.dumps(LOCAL_ONLY),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["path"] == [str(target / "trainstack" / "trainers")]
    assert found["failed"] == {}
    # Every module of the sdist was tried: the node launcher, your code's wrapper, both
    # trainers and what they share.
    assert {
        "trainstack.trainers.node",
        "trainstack.trainers.user_code",
        "trainstack.trainers.common.user_code",
        "trainstack.trainers.torch_ddp.train",
        "trainstack.trainers.tf_multiworker.train",
    } <= set(found["imported"])


def _member(path: Path, suffix: str) -> str:
    with tarfile.open(path, mode="r:gz") as tar:
        name = next(n for n in tar.getnames() if n.endswith(suffix))
        extracted = tar.extractfile(name)
        assert extracted is not None
        return extracted.read().decode()


def test_requirements_are_what_the_image_lacks(source_root: Path) -> None:
    plain = _run(source_root).outputs
    tf = _run(source_root, requirements=["tf-keras~=2.17.0"]).outputs
    assert tf["sha256"] != plain["sha256"] and tf["uri"] != plain["uri"]
    requires = [
        line
        for line in _member(Path(tf["local_path"]), "/PKG-INFO").splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    assert requires == [
        "Requires-Dist: pydantic>=2.7,<3",
        "Requires-Dist: numpy>=1.26",
        "Requires-Dist: pyyaml>=6",
        "Requires-Dist: fsspec>=2024.6",
        "Requires-Dist: gcsfs>=2024.6",
        "Requires-Dist: cloudml-hypertune>=0.1.0.dev6",
        "Requires-Dist: tf-keras~=2.17.0",
    ]
    pyproject = _member(Path(tf["local_path"]), "/pyproject.toml")
    assert '  "cloudml-hypertune>=0.1.0.dev6",\n  "tf-keras~=2.17.0",\n]' in pyproject
    assert "tf-keras" not in _member(Path(plain["local_path"]), "/PKG-INFO")


def test_malformed_requirements_are_value_errors(source_root: Path) -> None:
    # The stack's requirements file's one rule (`requirement_problem`): a pip option after a
    # name used to pass here and fail pip on every node.
    with pytest.raises(ValueError) as error:
        _run(
            source_root,
            requirements=[
                "",
                'tf-keras"',
                "pkg --index-url https://example.com/simple",
                'pkg; os_name == "a\x01b"',
            ],
        )
    valid = "valid: a PEP 508 requirement, e.g. 'tf-keras~=2.17.0'"
    assert str(error.value).splitlines() == [
        "TrainerPackage.requirements[0]: '' is not a requirement (Expected package name at the "
        "start of dependency specifier); " + valid,
        "TrainerPackage.requirements[1]: 'tf-keras\"' is not a requirement (Expected semicolon "
        "(after name with no version specifier) or end); " + valid,
        "TrainerPackage.requirements[2]: 'pkg --index-url https://example.com/simple' is not a "
        "requirement (Expected semicolon (after name with no version specifier) or end); " + valid,
        "TrainerPackage.requirements[3]: 'pkg; os_name == \"a\\x01b\"' is not a requirement "
        "(control characters are not supported); " + valid,
    ]

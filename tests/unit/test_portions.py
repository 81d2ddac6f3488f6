"""Which folders named trainstack beside the imported one are reported (trainstack/_portions.py).

The wheel-install tests (tests/package) run the report end to end from a fresh install."""

from __future__ import annotations

from pathlib import Path

from trainstack import _portions


def _folder(root: Path, *files: str) -> Path:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    root.mkdir(parents=True, exist_ok=True)
    return root


def test_only_a_folder_with_modules_trainstack_would_import_is_foreign(tmp_path: Path) -> None:
    own = _folder(tmp_path / "site" / "trainstack", "components/__init__.py")
    # A trainer package installed beside trainstack (pip --target, another site folder).
    trainers = _folder(
        tmp_path / "target" / "trainstack", "trainers/__init__.py", "user_source/train.py"
    )
    data = _folder(tmp_path / "downloads" / "trainstack", "trainstack_trainers-1.tar.gz", "pip.log")
    clone = _folder(tmp_path / "clone" / "trainstack", "infra/__init__.py", "trainers/node.py")
    module = _folder(tmp_path / "project" / "trainstack", "naming.py")
    path = [str(own), str(own), "__editable__.finder.__path_hook__", str(trainers), str(data)]
    assert _portions.foreign([*path, str(clone), str(module)], own) == [clone, module]
    assert _portions.foreign(path, own) == []
    # A regular package replaces trainstack whatever it holds.
    package = _folder(tmp_path / "pkg" / "trainstack", "__init__.py", "trainers/__init__.py")
    assert _portions.importable(package) == ["__init__", "trainers"]
    assert _portions.importable(trainers) == []

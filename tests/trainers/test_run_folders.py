"""One run, one place: `trainstack local-run --fresh` in a project of its own deletes that
run's folder only, and only once every check has passed (the real CLI in a subprocess, your
code under torchrun with 2 CPU processes: about 10 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainers.local_cli import cli_env

pytestmark = pytest.mark.trainer

HELLO = "print('hello from', __import__('os').environ['RANK'])\n"


def _project(root: Path) -> Path:
    """Stacks `a` and `b` run the same code (relative `source`); neither sets local.root."""
    (root / "stacks").mkdir(parents=True)
    (root / "code").mkdir()
    (root / "Pulumi.yaml").write_text("name: runs\nruntime: python\nstackConfigDir: stacks\n")
    (root / "code" / "train.py").write_text(HELLO)
    for name in ("a", "b"):
        (root / "stacks" / f"Pulumi.{name}.yaml").write_text(
            "config:\n"
            "  trainstack:local: {workers: 2}\n"
            "  trainstack:trainer: {source: code, entrypoint: [python, train.py]}\n"
        )
    for key in ("a", "b", "example-a"):
        step = root / ".trainstack" / "local" / key / "checkpoints" / key / "step-1"
        step.mkdir(parents=True)
        # Committed by the code (its marker): `--fresh` deletes only such folders.
        (step / "COMPLETE").write_text("{}")
    return root


def _local_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "local-run", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(),
        timeout=300,
        check=False,
    )


def _steps(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root / ".trainstack" / "local").as_posix()
        for p in (root / ".trainstack" / "local").glob("*/checkpoints/*/step-*")
    )


def test_fresh_deletes_only_its_own_run_folder(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    done = _local_run(root / "code", "--stack", "a", "--fresh")
    assert done.returncode == 0, done.stderr
    assert sorted(line for line in done.stderr.splitlines() if "hello" in line) == [
        "hello from 0",
        "hello from 1",
    ]
    assert _steps(root) == ["b/checkpoints/b/step-1", "example-a/checkpoints/example-a/step-1"]
    assert (root / ".trainstack/local/a/logs/a.jsonl").is_file()


def test_fresh_deletes_nothing_when_a_check_fails(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    before = _steps(root)
    refused = _local_run(root, "--stack", "a", "--fresh", "--steps", "5")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: --steps: the bundled trainer's option; your code takes its own arguments; "
        "valid: your code's own flags in trainer.entrypoint"
    )
    (root / "stacks" / "Pulumi.a.yaml").write_text(
        "config:\n  trainstack:local: {workers: 2}\n"
        "  trainstack:trainer: {source: gone, entrypoint: [python, train.py]}\n"
    )
    invalid = _local_run(root, "--stack", "a", "--fresh")
    assert invalid.returncode == 2
    assert invalid.stderr == (
        f"error: stack 'a': trainer.source: 'gone' is not a folder ({root / 'gone'}); valid: a "
        "folder relative to the project root, or an absolute path\n"
    )
    assert _steps(root) == before

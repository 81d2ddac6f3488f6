"""The Makefile's two newcomer commands: `make run` installs the core and torch only, and
`make test` adds the rest on top of a venv that `make run` made (one stamp file per set).
`make -n` prints the commands without running them, in an empty folder beside the repo's
Makefile."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
VENV_SETUP = [
    "python3 -m venv .venv",
    ".venv/bin/python -m pip install --quiet --upgrade pip setuptools",
    '.venv/bin/python -m pip install --quiet  "torch==2.13.0"',
    '.venv/bin/python -m pip install --quiet -e ".[torch]"',
    "touch .venv/.installed-run",
]
TEST_EXTRAS = [
    '.venv/bin/python -m pip install --quiet -e ".[torch,tensorflow,dev]"',
    "touch .venv/.installed",
]
RUN = ".venv/bin/trainstack local-run --stack local"


def dry_run(folder: Path, target: str) -> list[str]:
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "-f", str(MAKEFILE), "-C", str(folder), target],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")},
    ).stdout
    return out.splitlines()


def stamp(path: Path, mtime: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path, (mtime, mtime))


def test_run_installs_the_core_and_torch_only(tmp_path: Path) -> None:
    stamp(tmp_path / "pyproject.toml", 1_000)
    assert dry_run(tmp_path, "run") == [*VENV_SETUP, RUN]


def test_test_upgrades_a_venv_that_run_made(tmp_path: Path) -> None:
    stamp(tmp_path / "pyproject.toml", 1_000)
    stamp(tmp_path / ".venv" / ".installed-run", 2_000)
    assert dry_run(tmp_path, "unit") == [*TEST_EXTRAS, ".venv/bin/pytest -q"]
    assert dry_run(tmp_path, "run") == [RUN]


def test_run_finds_a_venv_that_test_made_complete(tmp_path: Path) -> None:
    stamp(tmp_path / "pyproject.toml", 1_000)
    stamp(tmp_path / ".venv" / ".installed-run", 2_000)
    stamp(tmp_path / ".venv" / ".installed", 3_000)
    assert dry_run(tmp_path, "run") == [RUN]
    assert dry_run(tmp_path, "unit") == [".venv/bin/pytest -q"]


def test_a_changed_pyproject_reinstalls_both_sets(tmp_path: Path) -> None:
    stamp(tmp_path / ".venv" / ".installed-run", 2_000)
    stamp(tmp_path / ".venv" / ".installed", 3_000)
    stamp(tmp_path / "pyproject.toml", 4_000)
    assert dry_run(tmp_path, "unit") == [*VENV_SETUP, *TEST_EXTRAS, ".venv/bin/pytest -q"]

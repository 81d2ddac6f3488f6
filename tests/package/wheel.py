"""The built wheel in a fresh virtual environment, shared by the tests of tests/package
(`conftest.installed` builds it once per session; test_wheel_install.py's docstring says how).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
TIMEOUT_S = 240
Snapshot = dict[str, tuple[int, int]]
Argv = Sequence[str | os.PathLike[str]]


@dataclass(frozen=True)
class Installed:
    """The fresh virtual environment with the wheel in it."""

    root: Path
    site_packages: Path
    snapshot: Snapshot

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def trainstack(self) -> Path:
        return self.root / "bin" / "trainstack"


def snapshot(root: Path) -> Snapshot:
    """Every path under `root` (folders too: adding a file changes its folder's mtime) with
    its size and mtime in ns."""
    found: Snapshot = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


def user_env(installed: Installed) -> dict[str, str]:
    """A user's shell with the fresh environment first on PATH: nothing of this checkout on
    the import path (PYTHONPATH would put its `trainstack/` folder beside the wheel's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    }
    env["PATH"] = f"{installed.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(installed.root)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(argv: Argv, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that must succeed; its whole output when it did not."""
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}\nstdout:\n{result.stdout}\n"
        f"stderr:\n{result.stderr}"
    )
    return result.stdout


def copy_tracked(source: Path, dest: Path) -> None:
    """The checkout's tracked files as they are in the working tree, links kept as links
    (`trainstack/` holds links to the top-level folders)."""
    listed = subprocess.run(
        ["git", "-C", str(source), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src, dst = source / rel, dest / rel
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the working tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)


def assert_install_untouched(installed: Installed) -> None:
    now = snapshot(installed.site_packages)
    added = sorted(set(now) - set(installed.snapshot))
    changed = sorted(
        p for p in set(now) & set(installed.snapshot) if now[p] != installed.snapshot[p]
    )
    assert (added, changed) == ([], []), "written inside the install (site-packages)"


def build_installed(base: Path) -> Installed:
    """The wheel built from this checkout's tracked files and installed into a fresh
    virtual environment under `base`, its site-packages made read-only (module docstring)."""
    source, dist, venv = base / "source", base / "dist", base / "venv"
    copy_tracked(REPO, source)
    build: Argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    ok(run([*build, "--no-index", "--wheel-dir", dist, source], base, dict(os.environ)))
    wheels = sorted(dist.iterdir())
    assert [w.name for w in wheels] == [f"trainstack-{VERSION}-py3-none-any.whl"]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = site / "site-packages"
    assert site_packages.is_dir()
    runner = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site_packages / "_runner_packages.pth").write_text("".join(f"{p}\n" for p in runner))
    fresh = Installed(venv, site_packages, {})
    # --ignore-installed: the runner's editable trainstack is visible to pip through the path
    # line; pip must neither count it as installed nor try to uninstall it.
    pip: Argv = [
        fresh.python,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "--ignore-installed",
    ]
    ok(run([*pip, wheels[0]], base, user_env(fresh)))
    for folder, _, files in os.walk(site_packages):
        for path in [Path(folder), *(Path(folder) / name for name in files)]:
            path.chmod(path.stat().st_mode & ~0o222)
    return Installed(venv, site_packages, snapshot(site_packages))

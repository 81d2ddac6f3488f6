"""`trainstack local-run` without the framework its trainer needs refuses before anything
starts, naming the extra to install. torch (or TensorFlow) is made missing in a CLI
subprocess by an import hook in a `sitecustomize` on its PYTHONPATH, which the workers would
inherit too, as a venv without the extra behaves; nothing is uninstalled. About 3 s each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKER = """\
import os
import sys

_BLOCKED = tuple(os.environ["TEST_BLOCKED_MODULES"].split(","))


class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Missing())
"""


def local_run(tmp_path: Path, blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(BLOCKER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)]),
        "TEST_BLOCKED_MODULES": blocked,
        "COLUMNS": "500",
    }
    command = [sys.executable, "-m", "trainstack.infra.cli", "local-run", *args]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("stack", "blocked", "needs", "extra"),
    [
        ("example:local", "torch", "torch, which is", "torch"),
        (
            "example:local-tf",
            "tensorflow,tf_keras",
            "tensorflow and tf_keras, which are",
            "tensorflow",
        ),
    ],
)
def test_the_bundled_trainer_without_its_framework(
    tmp_path: Path, stack: str, blocked: str, needs: str, extra: str
) -> None:
    framework = "torch" if extra == "torch" else "tensorflow"
    result = local_run(tmp_path, blocked, "--stack", stack)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"error: local-run: the bundled {framework} trainer needs {needs} not installed in "
        f"{sys.executable}; valid: pip install 'trainstack[{extra}]'\n",
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "hook"]


def test_own_code_under_torchrun_without_torch(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (tmp_path / "train.py").write_text("print('never runs')\n")
    (tmp_path / "Pulumi.mine.yaml").write_text(
        "config:\n  trainstack:local:\n    workers: 2\n  trainstack:trainer:\n"
        "    source: .\n    entrypoint: [python, train.py]\n    launcher: torchrun\n"
    )
    result = local_run(tmp_path, "torch", "--stack", "mine")
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "error: local-run: trainer.launcher: torchrun needs torch, which is not installed in "
        f"{sys.executable}; valid: pip install 'trainstack[torch]', or trainer.launcher: node\n",
    )
    assert not (tmp_path / ".trainstack").exists()

"""The checkpoint folder of a local run: one run in it at a time, and never a folder that
holds the stack's own, the home folder or a system folder (the bundled trainer as your code)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from trainstack.infra.cli import app
from trainstack.trainers.run_lock import FOLDER_LOCK, FolderLock

runner = CliRunner()
TRAINER = "{framework: torch, model: mlp, dataset: synthetic, steps: 10, global_batch_size: 8"

HOLDER = """
import sys
from pathlib import Path
from trainstack.trainers.run_lock import FolderLock
with FolderLock(Path(sys.argv[1]), "other"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _one_error(result: Result, line: str) -> None:
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: {line}\n")
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _stack(folder: Path, checkpoint_dir: str, *, root: Path | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    local = "{workers: 2}" if root is None else "{workers: 2, root: " + str(root) + "}"
    config = folder / "Pulumi.mine.yaml"
    trainer = f"{TRAINER}, checkpoint_dir: '{checkpoint_dir}'}}"
    config.write_text(f"config:\n  trainstack:local: {local}\n  trainstack:trainer: {trainer}\n")
    return config


def test_a_checkpoint_folder_another_live_run_holds_is_refused_and_fresh_deletes_nothing(
    tmp_path: Path,
) -> None:
    """Two stacks naming one checkpoint folder: the second is refused while the first (its own
    process) holds the folder, before `--fresh` deletes anything."""
    shared = tmp_path / "shared"
    (shared / "step-00000010").mkdir(parents=True)
    (shared / "step-00000010" / "COMPLETE").write_text("{}")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(shared)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        record = json.loads((shared / FOLDER_LOCK).read_text())
        assert record["pid"] == holder.pid
        config = _stack(tmp_path / "acme", str(shared), root=tmp_path / "root")
        result = runner.invoke(app, ["local-run", "--config-file", str(config), "--fresh"])
        _one_error(
            result,
            f"trainer.checkpoint_dir: {shared} is in use by local-run pid {holder.pid}, started "
            f"{record['started_at']} (its lock: {shared / FOLDER_LOCK}); run 'mine' would read, "
            "write and prune that run's checkpoints; valid: a checkpoint folder of this run's "
            "own, or wait for that run to end",
        )
        assert sorted(p.name for p in shared.iterdir()) == [FOLDER_LOCK, "step-00000010"]
        assert (shared / "step-00000010" / "COMPLETE").read_text() == "{}"
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL left the record; the next run takes the folder over and says so.
    assert holder.returncode == -signal.SIGKILL
    with FolderLock(shared, "mine") as lock:
        assert lock.took_over_line() == (
            f"took over the lock of {shared} from pid {holder.pid}, started "
            f"{record['started_at']}, which no longer runs"
        )
        assert json.loads((shared / FOLDER_LOCK).read_text())["pid"] == os.getpid()
    assert sorted(p.name for p in shared.iterdir()) == ["step-00000010"]


@pytest.mark.parametrize("given", [".", "..", "file://{base}", "/etc", "~"])
def test_the_bundled_trainer_refuses_a_checkpoint_folder_holding_the_stack_or_the_system(
    tmp_path: Path, given: str
) -> None:
    base = tmp_path / "acme"
    value = given.format(base=base)
    config = _stack(base, value, root=tmp_path / "root")
    # The stack's relative folders reach the run absolute (`localized`), as the line says them.
    held = {
        ".": (str(base), "the stack's folder", base),
        "..": (str(tmp_path), "the stack's folder", base),
        "file://{base}": (value, "the stack's folder", base),
        "/etc": (value, "a system folder", Path("/etc")),
        "~": (str(Path.home()), "the home folder", Path.home()),
    }
    shown, what, inside = held[given]
    result = runner.invoke(app, ["local-run", "--config-file", str(config), "--fresh"])
    _one_error(
        result,
        f"trainer.checkpoint_dir: {shown!r} holds {what} ({inside}); the run writes its "
        "checkpoints there and --fresh clears them; valid: a folder of its own, e.g. "
        "ckpts/<run> or the default under .trainstack/local",
    )
    assert sorted(p.name for p in base.iterdir()) == ["Pulumi.mine.yaml", "Pulumi.yaml"]
    assert not (tmp_path / "root").exists()


def test_pulumi_up_of_the_local_target_refuses_the_same_folders(tmp_path: Path) -> None:
    """`LocalTrainingJob` (`pulumi up -s local`) checks its arguments by the same rule, before
    anything is registered."""
    from trainstack.components.local_training_job import validate_args

    base = tmp_path / "acme"
    base.mkdir()
    args = {"trainer": {"steps": 10, "checkpoint_dir": ".."}, "workers": 2, "root": "r"}
    with pytest.raises(ValueError) as info:
        validate_args(args, base)
    assert str(info.value) == (
        f"trainer.checkpoint_dir: '..' holds the stack's folder ({base}); the run writes its "
        "checkpoints there and --fresh clears them; valid: a folder of its own, e.g. "
        "ckpts/<run> or the default under .trainstack/local"
    )

"""What `local-run --fresh` may delete of your own code's run, and which checkpoint folders
are refused before anything is written or deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainstack.trainers.common.checkpoint import Cleared
from trainstack.trainers.common.user_code import StackTrainer
from trainstack.trainers.local_code import RUN_MARKER, clear_code_run, prepare_code_run
from trainstack.trainers.local_start import checkpoint_dir_problem


def test_fresh_deletes_the_runs_marked_step_folders_and_record_and_keeps_everything_else(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "keep"
    for name in ("step-1", "step-00000020"):
        (folder / name).mkdir(parents=True)
        (folder / name / "COMPLETE").write_text("")  # your code's marker: any content
    (folder / "step-3").mkdir()  # no marker: not a checkpoint your code committed
    (folder / RUN_MARKER).write_text("{}")
    (folder / "file").write_text("mine")
    (folder / "steps-notes").mkdir()
    cleared = clear_code_run(str(folder))
    assert cleared == Cleared(["step-00000020", "step-1", "trainstack-run.json"], ["step-3"])
    assert cleared.left_line(str(folder)) == (
        f"--fresh left step-3 in {folder}: no COMPLETE marker, so not a checkpoint trainstack "
        "wrote; delete it yourself if it is not wanted"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["file", "step-3", "steps-notes"]
    assert clear_code_run(str(tmp_path / "absent")) == Cleared([], [])


@pytest.mark.parametrize("given", [".", "..", "src", "/"])
def test_a_checkpoint_folder_holding_the_project_or_the_source_is_refused(
    tmp_path: Path, given: str
) -> None:
    base = tmp_path / "acme"
    source = base / "src"
    source.mkdir(parents=True)
    folder = (base / given).resolve()
    what, inside = ("trainer.source", source) if given == "src" else ("the stack's folder", base)
    assert checkpoint_dir_problem(str(folder), base, source) == (
        f"trainer.checkpoint_dir: {str(folder)!r} holds {what} ({inside}); the run writes its "
        "checkpoints there and --fresh clears them; valid: a folder of its own, e.g. "
        "ckpts/<run> or the default under .trainstack/local"
    )


def test_a_folder_of_its_own_or_a_bucket_is_accepted(tmp_path: Path) -> None:
    base = tmp_path / "acme"
    source = base / "src"
    assert checkpoint_dir_problem(str(base / "ckpts" / "rel"), base, base) is None
    assert checkpoint_dir_problem(str(source / "ckpts"), base, source) is None
    assert checkpoint_dir_problem("gs://b/checkpoints/run", base, source) is None


def test_the_run_is_refused_before_any_file_is_written(tmp_path: Path) -> None:
    base = tmp_path / "acme"
    base.mkdir()
    (base / "train.py").write_text("print('hi')\n")
    trainer = StackTrainer.model_validate(
        {
            "source": ".",
            "entrypoint": ["python", "train.py"],
            "launcher": "node",
            "checkpoint_dir": str(tmp_path),
        }
    )
    with pytest.raises(ValueError) as refused:
        prepare_code_run(trainer, workers=2, root=base / "run", base_dir=base)
    assert str(refused.value).startswith(
        f"trainer.checkpoint_dir: {str(tmp_path)!r} holds the stack's folder ({base});"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acme"]
    assert sorted(p.name for p in base.iterdir()) == ["train.py"]

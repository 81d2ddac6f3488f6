"""The bundled torch trainer writes its final model to `--model_dir`, outside the run's
checkpoint folder (which the checkpoint bucket's age rule deletes on cloud stacks), and
`--model_dir` wins over Vertex's AIP_MODEL_DIR."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainers.conftest import run_to_end

pytestmark = pytest.mark.trainer

STEPS = 8
ARGS = [
    "--model=mlp",
    "--dataset=digits",
    f"--steps={STEPS}",
    "--global_batch_size=32",
    "--hidden_dim=16",
    "--log_every=4",
    f"--checkpoint_every={STEPS}",
    "--run_name=exp-42",
]


def test_the_final_model_goes_to_model_dir_not_under_checkpoints(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    checkpoints = bucket / "checkpoints" / "exp-42"
    model = bucket / "model" / "exp-42"
    done = run_to_end(
        [*ARGS, f"--checkpoint_dir={checkpoints}", f"--model_dir={model}"],
        workers=1,
        out=tmp_path / "run.log",
        env={"AIP_MODEL_DIR": str(tmp_path / "vertex-model")},
    )
    assert done["model_path"] == str(model / "model.pt")
    saved = torch.load(model / "model.pt", weights_only=True)
    step = torch.load(checkpoints / f"step-{STEPS:08d}" / "state.pt", weights_only=True)
    assert sorted(saved["model"]) == sorted(step["model"])
    for name, tensor in saved["model"].items():
        torch.testing.assert_close(tensor, step["model"][name], rtol=0, atol=0, msg=name)
    assert saved["config"]["model_dir"] == str(model)
    assert not (tmp_path / "vertex-model").exists()
    assert sorted(p.relative_to(bucket).parts[0] for p in bucket.rglob("*.pt")) == [
        "checkpoints",
        "model",
    ]

"""`run_local` argument checks (the successful path runs in test_resume's baseline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.common.config import TrainConfig
from trainers.local import run_local

pytestmark = pytest.mark.trainer


def test_tensorflow_is_not_bundled_yet(tmp_path: Path) -> None:
    cfg = TrainConfig(framework="tensorflow", strategy="multi_worker_mirrored")
    with pytest.raises(ValueError, match=r"trainer.framework 'tensorflow'.*not bundled yet"):
        run_local(cfg, workers=2, root=tmp_path)


def test_workers_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="local.workers must be >= 1"):
        run_local(TrainConfig(), workers=0, root=tmp_path)

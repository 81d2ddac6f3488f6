"""Hyperparameter-tuning trials report the study's metric with cloudml-hypertune."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainstack.trainers.common.metrics import HYPERTUNE_METRIC_ENV, report_hypertune

DONE = {"params_sha256": "ab", "loss": 0.2, "test_loss": 0.25, "test_accuracy": 0.97}


def test_no_study_reports_nothing(tmp_path: Path) -> None:
    assert report_hypertune(DONE, 10, env={}) is None


def test_study_metric_is_written_where_vertex_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics_file = tmp_path / "hypertune" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics_file))
    assert report_hypertune(DONE, 120, env={HYPERTUNE_METRIC_ENV: "accuracy"}) == "test_accuracy"
    [line] = metrics_file.read_text().splitlines()
    record = json.loads(line)
    assert record["accuracy"] == "0.97"
    assert record["global_step"] == "120"


def test_unknown_metric_names_what_is_reportable() -> None:
    with pytest.raises(ValueError) as err:
        report_hypertune(DONE, 1, env={HYPERTUNE_METRIC_ENV: "f1"})
    assert str(err.value) == (
        "TRAINSTACK_HYPERTUNE_METRIC='f1' is not a metric the trainer reports; "
        "valid: accuracy, loss, test_accuracy, test_loss"
    )

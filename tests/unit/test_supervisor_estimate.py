"""The TPU supervisor's cost in the estimate: only for slices Google preempts."""

from __future__ import annotations

import copy

import pytest

from trainstack.infra.config import load_stack_config
from trainstack.infra.estimate import summarize
from trainstack.infra.plan import load_stack
from trainstack.infra.targets.tpu import supervisor_hourly_usd


def _config(provisioning: str) -> dict[str, object]:
    _, config = load_stack("dev-tpu-v5e", None)
    config = copy.deepcopy(config)
    config["trainstack:tpu"]["provisioning"] = provisioning
    return config


def test_the_hourly_figure_is_the_sum_of_its_list_prices() -> None:
    cfg = load_stack_config(_config("spot"))
    assert cfg.tpu is not None
    # 30 calls/hour x 2 s x (0.167 vCPU x $0.000024 + 0.25 GiB x $0.0000025) + 30 x $0.0000004
    # + $0.10 / (31 x 24 hours)
    expected = 30 * (2.0 * (0.167 * 0.000024 + 0.25 * 0.0000025) + 0.0000004) + 0.10 / 744
    assert supervisor_hourly_usd(cfg.tpu) == pytest.approx(expected, rel=1e-12)
    assert summarize(cfg)["supervisor_usd_per_month"] == 0.31


@pytest.mark.parametrize(("provisioning", "monthly"), [("spot", 0.31), ("queued", 0.31)])
def test_spot_and_queued_slices_show_the_supervisor(provisioning: str, monthly: float) -> None:
    assert (
        summarize(load_stack_config(_config(provisioning)))["supervisor_usd_per_month"] == monthly
    )


@pytest.mark.parametrize("provisioning", ["on-demand", "reserved"])
def test_other_slices_have_no_supervisor(provisioning: str) -> None:
    cfg = load_stack_config(_config(provisioning))
    assert cfg.tpu is not None
    assert supervisor_hourly_usd(cfg.tpu) == 0.0
    assert "supervisor_usd_per_month" not in summarize(cfg)

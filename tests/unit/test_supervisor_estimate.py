"""The run supervisor's cost in the estimate (every tpu and gpu_cluster stack has one), and
the list price of the compute it stops, which its spend count adds per hour."""

from __future__ import annotations

import copy

import pytest

from trainstack.infra.config import load_stack_config
from trainstack.infra.estimate import stoppable_hourly_usd, summarize, supervisor_hourly_usd
from trainstack.infra.plan import load_stack


def _config(provisioning: str) -> dict[str, object]:
    _, config = load_stack("dev-tpu-v5e", None)
    config = copy.deepcopy(config)
    config["trainstack:tpu"]["provisioning"] = provisioning
    return config


def test_the_hourly_figure_is_the_sum_of_its_list_prices() -> None:
    # 30 calls/hour x 2 s x (0.167 vCPU x $0.000024 + 0.25 GiB x $0.0000025) + 30 x $0.0000004
    # + $0.10 / (31 x 24 hours)
    expected = 30 * (2.0 * (0.167 * 0.000024 + 0.25 * 0.0000025) + 0.0000004) + 0.10 / 744
    assert supervisor_hourly_usd() == pytest.approx(expected, rel=1e-12)
    assert summarize(load_stack_config(_config("spot")))["supervisor_usd_per_month"] == 0.31


@pytest.mark.parametrize("provisioning", ["spot", "queued", "on-demand", "reserved"])
def test_every_slice_shows_the_supervisor(provisioning: str) -> None:
    assert summarize(load_stack_config(_config(provisioning)))["supervisor_usd_per_month"] == 0.31


@pytest.mark.parametrize(
    ("stack", "supervised", "stoppable"),
    [
        ("dev-tpu-v5e", True, 7.68),
        ("prod-tpu-v4-32", True, 51.52),
        ("prod-a100-gce", True, 117.55),
        # The GPU pool only: the cluster fee and the system node bill until `pulumi destroy`.
        ("dev-a100-gke", True, 23.51),
        ("prod-vertex-rs", False, None),
        ("local", False, None),
    ],
)
def test_supervised_stacks_and_the_price_of_what_they_stop(
    stack: str, supervised: bool, stoppable: float | None
) -> None:
    _, config = load_stack(stack, None)
    cfg = load_stack_config(copy.deepcopy(config))
    assert ("supervisor_usd_per_month" in summarize(cfg)) is supervised
    if stoppable is not None:
        assert stoppable_hourly_usd(cfg) == stoppable

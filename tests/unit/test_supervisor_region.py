"""Where the run supervisor runs (`trainstack.components.catalog.supervisor_region`): the
stack's region only where both Cloud Run functions and Cloud Scheduler are listed, else one
on its continent (Europe, the Middle East) or us-central1; and the plan note's price tier."""

from __future__ import annotations

import copy

import pytest

from trainstack.components.catalog.supervisor_region import (
    price_tier,
    region_problem,
    supervisor_region,
)
from trainstack.infra.config import load_stack_config
from trainstack.infra.estimate import supervisor_note
from trainstack.infra.plan import load_stack


@pytest.mark.parametrize(
    ("stack_region", "region"),
    [
        ("us-central1", "us-central1"),
        ("us-east4", "us-east4"),
        ("northamerica-northeast1", "northamerica-northeast1"),
        # TPU v4: in no Cloud Run functions list.
        ("us-central2", "us-central1"),
        # Cloud Run functions Tier 2, but not among the Cloud Scheduler rows read.
        ("us-west4", "us-central1"),
        ("asia-east1", "us-central1"),
        # Both, per Cloud Scheduler's 2026 release notes.
        ("europe-west4", "europe-west4"),
        ("me-central1", "me-central1"),
        # Not in both: the one on its continent, so a location policy still allows it.
        ("europe-west2", "europe-west4"),
        ("me-central3", "me-west1"),
    ],
)
def test_the_stacks_region_only_where_both_services_are_listed(
    stack_region: str, region: str
) -> None:
    assert supervisor_region(stack_region) == region


def test_price_tier_and_bad_regions() -> None:
    assert (price_tier("us-central1"), price_tier("northamerica-northeast1")) == (1, 2)
    with pytest.raises(ValueError, match=r"^region: 'us-central2' is not a Cloud Run functions"):
        price_tier("us-central2")
    assert region_problem("us-east1", "k") is None
    assert region_problem("us-central2", "k") == (
        "k: 'us-central2' is not a region listed for both Cloud Run functions and Cloud "
        "Scheduler; valid: asia-south2, europe-west12, europe-west4, me-central1, "
        "me-central2, me-west1, northamerica-northeast1, northamerica-northeast2, us-central1, "
        "us-east1, us-east4"
    )


def test_a_tier_2_region_says_the_figure_is_at_tier_1_prices() -> None:
    _, config = load_stack("prod-tpu-v4-32", None)
    cfg = load_stack_config(copy.deepcopy(config))
    cfg = cfg.model_copy(update={"region": "northamerica-northeast1"})
    assert supervisor_note(cfg) == (
        "run supervisor: runs in northamerica-northeast1; supervisor_usd_per_month is at "
        "Cloud Run Tier 1 prices (its region is Tier 2, whose prices are not in the catalog) "
        "and leaves out Artifact Registry storage of its built images and Cloud Build minutes"
    )


def test_no_note_without_a_supervisor() -> None:
    _, config = load_stack("prod-vertex-rs", None)
    assert supervisor_note(load_stack_config(copy.deepcopy(config))) is None

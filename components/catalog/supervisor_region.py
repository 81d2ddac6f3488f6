"""Where the run supervisor (`trainstack.components.run_supervisor`) runs: the regions of
Cloud Run functions (2nd gen) with their price tier, the regions of Cloud Scheduler, and
the one rule that picks the supervisor's region from the stack's `gcp:region`. Each list
with its source; `*_VERIFIED` is True only where the cited source states the fact itself,
`*_COMPLETE` says whether the stored copy showed the whole list.
"""

from __future__ import annotations

from typing import Final, Literal

FUNCTIONS_SOURCE: Final = (
    "https://cloud.google.com/functions/docs/locations ('Cloud Functions locations (2nd "
    "gen)': 'Cloud Functions is available in the following regions with Tier 1 pricing' / "
    "'... with Tier 2 pricing'; the stored copy's Tier 2 table ends at "
    "northamerica-northeast2)"
)
FUNCTIONS_TIER_1: Final = frozenset(
    {
        "asia-east1",
        "asia-northeast1",
        "asia-northeast2",
        "europe-north1",
        "europe-southwest1",
        "europe-west1",
        "europe-west4",
        "europe-west8",
        "europe-west9",
        "me-west1",
        "us-central1",
        "us-east1",
        "us-east4",
        "us-east5",
        "us-south1",
        "us-west1",
    }
)
FUNCTIONS_TIER_2: Final = frozenset(
    {
        "asia-east2",
        "asia-northeast3",
        "asia-southeast1",
        "asia-southeast2",
        "asia-south1",
        "asia-south2",
        "australia-southeast1",
        "australia-southeast2",
        "europe-central2",
        "europe-west2",
        "europe-west3",
        "europe-west6",
        "europe-west10",
        "europe-west12",
        "me-central1",
        "me-central2",
        "northamerica-northeast1",
        "northamerica-northeast2",
    }
)
FUNCTIONS_REGIONS_VERIFIED: Final = True
FUNCTIONS_REGIONS_COMPLETE: Final = False
"""Cloud Run's own list (https://cloud.google.com/run/docs/locations) goes on with
southamerica-east1, southamerica-west1, us-west2, us-west3, us-west4 and africa-south1 in
Tier 2; they are left out because the functions page's copy did not show them. No list
has us-central2 (the TPU v4 region)."""

SCHEDULER_SOURCE: Final = (
    "https://docs.cloud.google.com/scheduler/docs/locations ('The following table lists the "
    "regions in the Americas where Cloud Scheduler is available'; the stored copy is cut "
    "off after us-east4); https://docs.cloud.google.com/scheduler/docs/release-notes ('April "
    "17, 2026 ... Cloud Scheduler is available in the following locations: europe-west4 "
    "(Eemshaven, Netherlands), me-central1, me-central2, me-west1'; 'September 24, 2026 ... "
    "asia-south2, europe-west12, northamerica-northeast2'; 'September 18, 2026 ... "
    "asia-southeast3')"
)
SCHEDULER_REGIONS: Final = frozenset(
    {
        "northamerica-northeast1",
        "northamerica-northeast2",
        "southamerica-east1",
        "us-central1",
        "us-east1",
        "us-east4",
        # The release notes' additions of 2026.
        "europe-west4",
        "me-central1",
        "me-central2",
        "me-west1",
        "asia-south2",
        "asia-southeast3",
        "europe-west12",
    }
)
SCHEDULER_REGIONS_VERIFIED: Final = True
SCHEDULER_REGIONS_COMPLETE: Final = False
"""Only the rows the stored page showed: Cloud Scheduler may well run in other regions
(us-west4 among them), unconfirmed here, so a stack there gets `FALLBACK_REGION`. Live:
`gcloud scheduler locations list`."""

FALLBACK_REGION: Final = "us-central1"
"""In both lists, Tier 1. Nothing ties the supervisor to the compute's region: the APIs it
calls are global endpoints (`tpu.googleapis.com`, `compute.googleapis.com`,
`container.googleapis.com`, and Cloud Storage for its state)."""
CONTINENT_FALLBACKS: Final = {"europe-": "europe-west4", "me-": "me-west1"}
"""A stack in Europe or the Middle East keeps its supervisor there (Tier 1 and in both lists),
so an organization policy that holds resources to those locations still allows it."""


def supervisor_region(stack_region: str) -> str:
    """The region of the supervisor's function and scheduler job: the stack's region where
    both Cloud Run functions (2nd gen) and Cloud Scheduler are listed there, else one on its
    continent (`CONTINENT_FALLBACKS`), else `FALLBACK_REGION`."""
    functions = FUNCTIONS_TIER_1 | FUNCTIONS_TIER_2
    if stack_region in functions and stack_region in SCHEDULER_REGIONS:
        return stack_region
    for prefix, region in CONTINENT_FALLBACKS.items():
        if stack_region.startswith(prefix):
            return region
    return FALLBACK_REGION


def price_tier(region: str) -> Literal[1, 2]:
    """Cloud Run functions' price tier of a region `supervisor_region` returns."""
    if region in FUNCTIONS_TIER_1:
        return 1
    if region in FUNCTIONS_TIER_2:
        return 2
    raise ValueError(
        f"region: {region!r} is not a Cloud Run functions region; valid: one of "
        f"{', '.join(sorted(FUNCTIONS_TIER_1 | FUNCTIONS_TIER_2))}"
    )


def region_problem(region: str, key: str) -> str | None:
    """Why `region` cannot hold the supervisor (`key` names it), or None."""
    if region == supervisor_region(region):
        return None
    both = sorted((FUNCTIONS_TIER_1 | FUNCTIONS_TIER_2) & SCHEDULER_REGIONS)
    return (
        f"{key}: {region!r} is not a region listed for both Cloud Run functions and Cloud "
        f"Scheduler; valid: {', '.join(both)}"
    )

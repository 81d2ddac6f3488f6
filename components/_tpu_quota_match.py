"""Find a TPU quota in the Cloud TPU API's own quota list when the catalog's id is unknown.

Every TPU quota id in the catalog is unverified (`infra/catalog.py` TPU_QUOTAS): several are
guesses. When the Cloud Quotas API does not know one, QuotaGuard lists the quotas the service
really has (`quotaInfos.list`, the `gcp.cloudquota.get_s_quota_infos` invoke,
https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos/list)
and keeps those whose `metric` belongs to the Cloud TPU API (`tpu.googleapis.com/...`) and
whose id names the same TPU family as the catalog's: generation (`V4`, `V5`, `V6`, with or
without `Lite`), tier (`Preemptible` for spot, `Reserved`, neither for on-demand), not a
`Serving` quota, and per zone. One such quota is used in place of the guess (the check then
says which id and metric it read); several or none are listed for the user. No Google page
names these ids or metrics, so the result is still only a warning (TPU preflight never stops
a deployment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

TPU_SERVICE: Final = "tpu.googleapis.com"
_GENERATION = re.compile(r"^TPU(V\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Family:
    generation: str
    lite: bool
    tier: str
    """`preemptible`, `reserved` or `on-demand`."""


def family(quota_id: str) -> Family | None:
    """The TPU family a quota id names; None for an id that is not a per-zone TPU quota or
    serves inference only."""
    match = _GENERATION.match(quota_id)
    lowered = quota_id.lower()
    if match is None or "perzone" not in lowered or "serving" in lowered:
        return None
    tier = next((t for t in ("preemptible", "reserved") if t in lowered), "on-demand")
    return Family(match[1].upper(), "lite" in lowered, tier)


@dataclass(frozen=True)
class Match:
    quota_id: str
    metric: str
    info: Any
    """The quotaInfos entry (its `dimensions_infos` hold the limits)."""


def candidates(quota_id: str, infos: Iterable[Any]) -> list[Match]:
    """The service's quotas of the same TPU family as `quota_id`, by quota id."""
    wanted = family(quota_id)
    if wanted is None:
        return []
    found = [
        Match(str(info.quota_id), str(info.metric), info)
        for info in infos
        if str(getattr(info, "metric", "") or "").startswith(f"{TPU_SERVICE}/")
        and family(str(getattr(info, "quota_id", "") or "")) == wanted
    ]
    return sorted(found, key=lambda m: m.quota_id)

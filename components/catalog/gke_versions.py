"""The GKE versions a cluster must be on for what it runs: one rule, shared by the GPU
cluster (`a100_cluster.validate`) and the TPU slices on GKE (`tpu_gke_slices`), so both say
a too-old `kubernetes_version` in the same words.

A cluster's `kubernetes_version` is a minor (`1.N`, the cluster's `min_master_version`);
GKE creates it at a patch of that minor its release channel offers. A floor Google states
as a patch (`1.32.2-gke.1652000`) is held at its minor: the patches GKE offers of a minor
that late in its life are past the early ones Google names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

_MINOR = re.compile(r"(\d+)\.(\d+)")

GPU_FLEX_START_VERSION: Final = "1.32.2-gke.1652000"
GPU_FLEX_START_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/dws (Requirements: 'To use "
    "flex-start in GKE, your cluster must use version 1.32.2-gke.1652000 or later.')"
)
TPU_FLEX_START_VERSION: Final = "1.33.0-gke.1712000"
TPU_FLEX_START_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model: 'To run "
    "TPUs, use GKE version 1.33.0-gke.1712000 or later.'"
)


def parse_minor(version: object) -> tuple[int, int] | None:
    """`(major, minor)` of a `1.N` (or `1.N.P-gke.B`) version string, None when it is not
    one."""
    if not isinstance(version, str):
        return None
    match = _MINOR.fullmatch(version) or _MINOR.match(version)
    return (int(match[1]), int(match[2])) if match else None


def version_floor_problems(
    version: object, key: str, floors: Sequence[tuple[str, str]]
) -> list[str]:
    """One line for each `(floor, what needs it)` that `version` (a `1.N` minor) is older
    than, naming `key` and the floor's minor; nothing for a version that is not one (the
    caller's own rule reports that)."""
    have = parse_minor(version)
    if have is None:
        return []
    problems = []
    for floor, why in floors:
        need = parse_minor(floor)
        assert need is not None
        if have < need:
            problems.append(
                f"{key}: {version!r} is too old for {why}; valid: {need[0]}.{need[1]} or later"
            )
    return problems

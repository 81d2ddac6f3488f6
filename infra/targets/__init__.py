"""The compute targets, one module each, behind one interface (`base.Target`).

Importing this package registers the built-in targets, in the order their stack sections
are listed in messages: `tpu` and `tpu_gke` (section `tpu`), `gke` and `gce` (section `gpu_cluster`), `vertex`, `local`.
"""

from __future__ import annotations

from trainstack.infra.config_sections import StackView
from trainstack.infra.targets import gce, gke, local, tpu, tpu_gke, vertex
from trainstack.infra.targets.base import (
    CloudTarget,
    ComposeContext,
    RunResource,
    Section,
    StandaloneTarget,
    StillBilling,
    Target,
    by_section,
    claimant,
    image_sections,
    register,
    registered,
    run_resource,
    sections,
    target_of,
    unregister,
)

BUILT_IN: tuple[Target, ...] = (
    tpu.TARGET,
    tpu_gke.TARGET,
    gke.TARGET,
    gce.TARGET,
    vertex.TARGET,
    local.TARGET,
)
"""In the order their sections are listed (`valid: exactly one of tpu, gpu_cluster, ...`)."""
for _target in BUILT_IN:
    register(_target)

__all__ = [
    "BUILT_IN",
    "CloudTarget",
    "ComposeContext",
    "RunResource",
    "Section",
    "StackView",
    "StandaloneTarget",
    "StillBilling",
    "Target",
    "by_section",
    "claimant",
    "image_sections",
    "register",
    "registered",
    "run_resource",
    "sections",
    "target_of",
    "unregister",
]

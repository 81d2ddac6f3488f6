"""What each resource that runs the trainer runs, for the text plan
(`trainstack.infra.plan.render_plan`).

A dynamic resource's first inputs say little: `__provider` is the pickled provider (a secret
in every plan) and the work itself sits in a nested request body. The text plan shows
instead, under the resource, what it starts, read from those same inputs by the target
that registers it (`RunResource.describe` in its target module): the local `TrainingRun`'s
workers and trainer, a Vertex job's worker pools (and trials), the TPU `QueuedResource`'s
accelerator, runtime, node count and tier.

The JSON plan (`--json`) keeps every input as registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainstack.infra.targets import run_resource

PROVIDER_INPUT = "__provider"
"""The input a dynamic resource carries its serialized provider in (pulumi/dynamic)."""


def runs_lines(resource_type: str, inputs: Mapping[str, Any]) -> list[str]:
    """Lines saying what a resource runs (its target's `RunResource.describe`); [] for any
    other resource."""
    resource = run_resource(resource_type)
    if resource is None or resource.describe is None:
        return []
    return resource.describe(inputs)

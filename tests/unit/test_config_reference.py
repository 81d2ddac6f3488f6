"""README's stack config reference names every key of the stack config models.

The keys come from the pydantic models of every stack key (`trainstack.infra.config.stack_schema`:
the generic sections and each registered target's section; nested sections, entries of lists
of models), so a key added to any model fails here until README
documents it as its dotted path in backticks (`vertex.reduction_server.enabled`,
`vertex.hyperparameter_tuning.parameters[].type`)."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from tests import REPO_ROOT
from trainstack.infra.config import stack_schema
from trainstack.trainers.common.config import TF_STRATEGIES

GCP_FIELDS = {"project": "gcp:project", "region": "gcp:region", "zone": "gcp:zone"}


def _models(annotation: Any) -> Iterator[tuple[type[BaseModel], bool]]:
    """The models an annotation holds, and whether each sits in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, False
        return
    origin = get_origin(annotation)
    for arg in get_args(annotation):
        if origin in (list, tuple):
            yield from ((model, True) for model, _ in _models(arg))
        elif origin in (Union, types.UnionType) or origin is not None:
            yield from _models(arg)


def config_keys(model: type[BaseModel] | None = None, prefix: str = "") -> Iterator[str]:
    """Every key of `model` (the whole stack config when None) as its dotted path, nested
    models included."""
    for name, field in (model or stack_schema()).model_fields.items():
        path = GCP_FIELDS.get(name, name) if not prefix else f"{prefix}{name}"
        yield path
        for nested, listed in _models(field.annotation):
            yield from config_keys(nested, f"{path}[]." if listed else f"{path}.")


def readme_reference() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Stack config reference")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_every_config_key_is_in_the_readme_reference() -> None:
    documented = set(re.findall(r"`([^`]+)`", readme_reference()))
    missing = [key for key in config_keys() if key not in documented]
    assert missing == [], f"README's stack config reference lacks: {', '.join(missing)}"


def test_the_walk_reaches_nested_and_listed_models() -> None:
    keys = list(config_keys())
    for key in (
        "gcp:project",
        "limits.max_run_hours",
        "vertex.spot",
        "vertex.image_uri",
        "vertex.timeout_s",
        "vertex.service_account",
        "vertex.region",
        "vertex.reduction_server.replica_count",
        "vertex.hyperparameter_tuning.parameters[].scale_type",
        "gpu_cluster.tier_1_networking",
        "trainer.global_batch_size",
    ):
        assert key in keys
    assert len(keys) == len(set(keys))


def test_the_documented_strategies_are_the_trainers() -> None:
    row = next(line for line in readme_reference().splitlines() if "`trainer.strategy`" in line)
    for strategy in TF_STRATEGIES:
        assert f"`{strategy}`" in row

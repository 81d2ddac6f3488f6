"""The docs' stack key reference names every key of the stack config models, with a meaning.

The keys come from the pydantic models of every stack key (`trainstack.infra.config.stack_schema`:
the generic sections and each registered target's section; nested sections, entries of lists
of models), walked here independently of the generator (docs/hooks.py), so a key the generated
page (docs/reference/stack-keys.md) leaves out, or documents with no meaning (no field
docstring and no entry in docs/stack_keys.yaml), fails here, as does an entry of
docs/stack_keys.yaml for a key that does not exist."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from tests.docs.test_docs import load_hooks
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


def reference() -> str:
    """The generated table of docs/reference/stack-keys.md."""
    return str(load_hooks().stack_keys_markdown())


def reference_rows() -> dict[str, list[str]]:
    """Each row of the reference by its key: [type, default, meaning]."""
    rows = {}
    for line in reference().splitlines()[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_config_key_is_in_the_reference_with_a_meaning() -> None:
    rows = reference_rows()
    assert list(rows) == list(config_keys())
    assert [key for key, (_, _, meaning) in rows.items() if not meaning] == []


def test_a_meaning_for_a_key_that_does_not_exist_fails_the_build(monkeypatch: Any) -> None:
    hooks = load_hooks()
    meanings = hooks.stack_key_meanings()
    monkeypatch.setattr(hooks, "stack_key_meanings", lambda: {**meanings, "tpu.zones": "x"})
    with pytest.raises(hooks.DocsError, match=r"names keys the config has not: tpu.zones"):
        hooks.stack_keys_markdown()


def test_the_reference_gives_types_and_defaults_from_the_models() -> None:
    rows = reference_rows()
    assert rows["tpu.provisioning"][:2] == [
        "`on-demand` \\| `spot` \\| `queued` \\| `reserved` \\| `flex-start`",
        "`on-demand`",
    ]
    assert rows["gpu_cluster.zone"][1] == "required"
    assert rows["local.workers"][:2] == ["integer", "`2`"]


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
    row = next(line for line in reference().splitlines() if "`trainer.strategy`" in line)
    for strategy in TF_STRATEGIES:
        assert f"`{strategy}`" in row

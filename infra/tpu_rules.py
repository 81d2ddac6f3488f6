"""TPU slice rules shared by the stack config and the TpuPodSlice component.

Pure functions over `infra.catalog`: `infra.config` checks `trainstack:tpu` with them
(prefix `tpu.`) and `components.tpu_pod_slice` checks its own arguments with them (no
prefix), so both report a bad slice in the same words without importing each other.
"""

from __future__ import annotations

import re
from typing import Any

from infra import catalog


def tpu_slice_problems(
    *,
    accelerator_type: Any,
    generation: Any,
    topology: Any,
    zone: Any,
    runtime_version: Any,
    prefix: str = "",
) -> tuple[catalog.TpuSlice | None, list[str]]:
    """The catalog slice these arguments name, and every problem with them.

    Messages have the stack config's shape, `<prefix><key>: <problem>; valid: <values>`,
    so with `prefix="tpu."` they read exactly as `infra.config` reports them.
    """
    p = prefix
    problems: list[str] = []
    for key, value in (
        ("accelerator_type", accelerator_type),
        ("generation", generation),
        ("topology", topology),
    ):
        if value is not None and not isinstance(value, str):
            problems.append(f"{p}{key}: expected a string, got {value!r}")
    for key, value in (("zone", zone), ("runtime_version", runtime_version)):
        if not isinstance(value, str) or not value:
            problems.append(f"{p}{key}: required (a non-empty string)")
    if problems:
        return None, problems

    found, problems = _find_slice(accelerator_type, generation, topology, p)
    if found is not None:
        gen = catalog.TPU_GENERATIONS[found.generation]
        if zone not in gen.zones and not problems:
            problems.append(
                f"{p}zone: {zone!r} does not offer {gen.name}; valid: {', '.join(gen.zones)}"
            )
        problems += _runtime_problems(runtime_version, found, p)
    return found, problems


def _find_slice(
    accelerator_type: str | None, generation: str | None, topology: str | None, p: str
) -> tuple[catalog.TpuSlice | None, list[str]]:
    gens = ", ".join(catalog.TPU_GENERATIONS)
    if accelerator_type and (generation or topology):
        message = (
            f"{p}accelerator_type: {accelerator_type!r} given together with "
            f"{p}generation/{p}topology; expected one of the two forms"
        )
        return None, [message]
    if accelerator_type:
        named = catalog.tpu_generation_of(accelerator_type)
        if named is None:
            prefixes = ", ".join(f"{g.type_prefix}-N" for g in catalog.TPU_GENERATIONS.values())
            return None, [
                f"{p}accelerator_type: {accelerator_type!r} is not a TPU type; valid: {prefixes}"
            ]
        found = named.slice(accelerator_type)
        if found is None:
            valid = ", ".join(s.accelerator_type for s in named.slices)
            message = (
                f"{p}accelerator_type: {accelerator_type!r} is not a {named.name} slice; "
                f"valid: {valid}"
            )
            return None, [message]
        return found, []
    if not generation:
        if topology:
            return None, [f"{p}generation: required with {p}topology; valid: {gens}"]
        return None, [f"{p}accelerator_type: required (or {p}generation with {p}topology)"]
    gen = next((g for g in catalog.TPU_GENERATIONS.values() if g.name == generation), None)
    if gen is None:
        return None, [f"{p}generation: {generation!r} is not allowed; valid: {gens}"]
    topologies = ", ".join(s.topology for s in gen.slices)
    if not topology:
        return None, [f"{p}topology: required with {p}generation; valid: {topologies}"]
    found = gen.slice_for_topology(topology)
    if found is None:
        return None, [
            f"{p}topology: {topology!r} is not a {gen.name} topology; valid: {topologies}"
        ]
    return found, []


def _runtime_problems(runtime: str, found: catalog.TpuSlice, p: str) -> list[str]:
    gen = catalog.TPU_GENERATIONS[found.generation]
    match = catalog.tpu_runtime_match(gen.name, runtime)
    if not match.belongs:
        return [
            (
                f"{p}runtime_version: {runtime!r} is not a {gen.name} runtime; "
                f"valid: {gen.runtime_family}"
            )
        ]
    if match.tensorflow and match.pod and not found.multi_host:
        fixed = runtime.replace("-pod", "", 1)
        return [
            (
                f"{p}runtime_version: {runtime!r} is a multi-host (-pod) runtime but "
                f"{found.accelerator_type} is a single host; valid: {fixed}"
            )
        ]
    if match.tensorflow and not match.pod and found.multi_host:
        fixed = re.sub(r"^(tpu-vm-tf-\d+\.\d+\.\d+)", r"\1-pod", runtime)
        return [
            (
                f"{p}runtime_version: {runtime!r} is a single-host runtime but "
                f"{found.accelerator_type} has {found.hosts} hosts; valid: {fixed}"
            )
        ]
    return []


def tensorflow_runtime_family(found: catalog.TpuSlice) -> str:
    """The TensorFlow runtime versions that fit `found` (pod or not, pjrt or not)."""
    gen = catalog.TPU_GENERATIONS[found.generation]
    pod = "-pod" if found.multi_host else ""
    pjrt = "-pjrt" if gen.tf_requires_pjrt else ""
    low = ".".join(str(n) for n in gen.tf_min_version)
    return f"tpu-vm-tf-X.Y.Z{pod}{pjrt} (TF >= {low})"


def tensorflow_runtime_problem(
    runtime: str, found: catalog.TpuSlice, key: str = "runtime_version"
) -> list[str]:
    """A problem when `runtime` ships no TensorFlow, which the bundled TPU trainer needs."""
    if catalog.tpu_runtime_match(found.generation, runtime).tensorflow:
        return []
    message = (
        f"{key}: {runtime!r} ships no TensorFlow, which the tensorflow trainer needs on "
        f"{found.accelerator_type}; valid: {tensorflow_runtime_family(found)}"
    )
    return [message]

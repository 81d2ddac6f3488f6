"""Rules over the Cloud TPU facts: which slice a request names, in which zone, on which
runtime, and how its capacity may be obtained.

Pure functions returning every problem as `<prefix><key>: <problem>; valid: <values>`.
`TpuPodSlice` checks its own arguments with them (no prefix) and the stack config its
`trainstack:tpu` section (prefix `tpu.`), so both report a fault in the same words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from trainstack.components.catalog.problems import (
    nearest_key,
    not_allowed,
    quote,
    unknown_keys,
)
from trainstack.components.catalog.tpu import (
    QUEUED_TIERS,
    TPU_GENERATIONS,
    TPU_PROVISIONING,
    TpuSlice,
    tpu_generation_of,
    tpu_runtime_match,
)
from trainstack.components.catalog.tpu_runtimes import DEVICE_API_REQUIRED_FROM

RESERVATION_NAME: Final = re.compile(
    r"^(-|[a-z]([-a-z0-9]{0,61}[a-z0-9])?|projects/[^/]+/locations/[^/]+/reservations/[^/]+)$"
)
"""A reservation as a queued resource names it: a short name, a full name, or `-` (any
reservation of the project in the zone, gcloud's `--reserved`)."""
QUEUED_KEYS: Final = ("tier", "min_duration_s", "valid_until_s", "wait_timeout_s")


def tpu_slice_problems(
    *,
    accelerator_type: Any,
    generation: Any,
    topology: Any,
    zone: Any,
    runtime_version: Any,
    prefix: str = "",
) -> tuple[TpuSlice | None, list[str]]:
    """The catalog slice these arguments name, and every problem with them.

    A slice is named either by `accelerator_type` or by `generation` with `topology`; the
    zone must offer its generation and the runtime belong to it (a TensorFlow `-pod`
    runtime on a multi-host slice, a plain one on a single host).
    """
    p = prefix
    problems: list[str] = []
    for key, value in (
        ("accelerator_type", accelerator_type),
        ("generation", generation),
        ("topology", topology),
    ):
        if value is not None and not isinstance(value, str):
            problems.append(f"{p}{key}: {quote(value)} is not a string; valid: a string")
    for key, value, valid in (
        ("zone", zone, "a zone with TPUs, e.g. us-central2-b"),
        ("runtime_version", runtime_version, "a TPU software version, e.g. tpu-ubuntu2204-base"),
    ):
        if value is None or value == "":
            problems.append(f"{p}{key}: required; valid: {valid}")
        elif not isinstance(value, str):
            problems.append(f"{p}{key}: {quote(value)} is not a string; valid: {valid}")
    if problems:
        return None, problems

    found, problems = _find_slice(accelerator_type, generation, topology, p)
    if found is not None:
        gen = TPU_GENERATIONS[found.generation]
        if zone not in gen.zones and not problems:
            problems.append(
                f"{p}zone: {zone!r} does not offer {gen.name}; valid: {', '.join(gen.zones)}"
            )
        problems += _runtime_problems(runtime_version, found, p)
    return found, problems


TPU7X_PREFIX: Final = "tpu7x"
TPU7X_SOURCE: Final = (
    "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood: 'Ironwood "
    "(TPU7x) uses a workload policy to configure the physical placement ... when you create "
    "multi-host TPU slice node pools ... This policy replaces the --tpu-topology flag'; "
    "pulumi-gcp 10.2.0 has the fields (compute.ResourcePolicy workload_policy: type "
    "HIGH_THROUGHPUT, accelerator_topology; container.NodePool placement_policy.policy_name; "
    "terraform-provider-google google/services/compute/resource_compute_resource_policy.go "
    "workload_policy, services/container/resource_container_node_pool.go policy_name)"
)
"""Why TPU7x is refused: not for want of the fields (Google documents the workload policy,
pulumi-gcp has it), but because trainstack's TPU catalog has no TPU7x generation yet (its
machine type, zones, prices) and its pools no workload policy."""


def _tpu7x_problem(accelerator_type: str, p: str) -> str:
    prefixes = ", ".join(f"{g.type_prefix}-N" for g in TPU_GENERATIONS.values())
    return (
        f"{p}accelerator_type: {accelerator_type!r} is TPU7x (Ironwood), which trainstack does "
        "not make yet: the Cloud TPU API (backend tpu_vm) does not serve it, and on backend gke "
        "its multi-host node pools need a workload policy in place of a TPU topology, which "
        "Google documents (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/"
        "tpu-ironwood) and pulumi-gcp 10.2.0 has (compute.ResourcePolicy workload_policy, "
        "container.NodePool placement_policy.policy_name) but trainstack's TPU catalog (machine "
        f"type, zones, prices) and pools do not yet; valid: {prefixes}"
    )


def _type_hint(accelerator_type: str) -> str:
    """`; did you mean `x`?` for a type named by its generation (`v5e-16`: v5e's types are
    `v5litepod-N`, https://docs.cloud.google.com/tpu/docs/v5e) or by a misspelt prefix of a
    generation with that size (`v6-8`; not `v3-8`: v3 is a generation of its own), else `;`."""
    prefix, _, size = accelerator_type.rpartition("-")
    offered = {
        gen.type_prefix: gen
        for gen in TPU_GENERATIONS.values()
        if gen.slice(f"{gen.type_prefix}-{size}") is not None
    }
    named = [p for p, gen in offered.items() if gen.name == prefix]
    if named:
        return f"; did you mean `{named[0]}-{size}`?"
    near = nearest_key(prefix, offered)
    return ";" if near is None else f"; did you mean `{near}-{size}`?"


def named_slice(
    *, accelerator_type: Any, generation: Any, topology: Any, zone: Any, prefix: str = ""
) -> tuple[TpuSlice | None, list[str]]:
    """The catalog slice these arguments name and whether the zone offers its generation,
    without a runtime (a GKE TPU node pool has none): the slice rules of
    `tpu_slice_problems`, so a topology the generation lacks reads the same on each backend."""
    p = prefix
    for key, value in (
        ("accelerator_type", accelerator_type),
        ("generation", generation),
        ("topology", topology),
    ):
        if value is not None and not isinstance(value, str):
            return None, [f"{p}{key}: {quote(value)} is not a string; valid: a string"]
    if not isinstance(zone, str) or not zone:
        return None, [f"{p}zone: required; valid: a zone with TPUs, e.g. us-east5-b"]
    found, problems = _find_slice(accelerator_type, generation, topology, p)
    if found is not None and not problems:
        gen = TPU_GENERATIONS[found.generation]
        if zone not in gen.zones:
            problems.append(
                f"{p}zone: {zone!r} does not offer {gen.name}; valid: {', '.join(gen.zones)}"
            )
    return found, problems


def _find_slice(
    accelerator_type: str | None, generation: str | None, topology: str | None, p: str
) -> tuple[TpuSlice | None, list[str]]:
    if accelerator_type and (generation or topology):
        message = (
            f"{p}accelerator_type: {accelerator_type!r} given together with "
            f"{p}generation/{p}topology; valid: one of the two forms"
        )
        return None, [message]
    if accelerator_type:
        named = tpu_generation_of(accelerator_type)
        if named is None and accelerator_type.startswith(f"{TPU7X_PREFIX}-"):
            return None, [_tpu7x_problem(accelerator_type, p)]
        if named is None:
            prefixes = ", ".join(f"{g.type_prefix}-N" for g in TPU_GENERATIONS.values())
            hint = _type_hint(accelerator_type)
            message = (
                f"{p}accelerator_type: {accelerator_type!r} is not a TPU type{hint} "
                f"valid: {prefixes}"
            )
            return None, [message]
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
            return None, [
                f"{p}generation: required with {p}topology; valid: {', '.join(TPU_GENERATIONS)}"
            ]
        return None, [f"{p}accelerator_type: required (or {p}generation with {p}topology)"]
    gen = next((g for g in TPU_GENERATIONS.values() if g.name == generation), None)
    if gen is None:
        return None, [not_allowed(f"{p}generation", generation, TPU_GENERATIONS)]
    topologies = ", ".join(s.topology for s in gen.slices)
    if not topology:
        return None, [f"{p}topology: required with {p}generation; valid: {topologies}"]
    found = gen.slice_for_topology(topology)
    if found is None:
        return None, [
            f"{p}topology: {topology!r} is not a {gen.name} topology; valid: {topologies}"
        ]
    return found, []


def _runtime_problems(runtime: str, found: TpuSlice, p: str) -> list[str]:
    gen = TPU_GENERATIONS[found.generation]
    match = tpu_runtime_match(gen.name, runtime)
    rt = match.tf
    if (
        rt is not None
        and not gen.tf_requires_pjrt
        and rt.device_api is None
        and rt.hardware is None
        and rt.version >= DEVICE_API_REQUIRED_FROM
    ):
        return [
            (
                f"{p}runtime_version: {runtime!r} names no device API, which {gen.name} "
                f"runtimes carry from TF 2.15.0 on; valid: {runtime}-pjrt, {runtime}-se"
            )
        ]
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


def tensorflow_runtime_family(found: TpuSlice) -> str:
    """The TensorFlow runtime versions that fit `found` (pod or not, pjrt or not)."""
    gen = TPU_GENERATIONS[found.generation]
    pod = "-pod" if found.multi_host else ""
    low = ".".join(str(n) for n in gen.tf_min_version)
    if gen.tf_requires_pjrt:
        return f"tpu-vm-tf-X.Y.Z{pod}-pjrt (TF >= {low})"
    return (
        f"tpu-vm-tf-X.Y.Z{pod}-pjrt, tpu-vm-tf-X.Y.Z{pod}-se (TF >= 2.15.0), "
        f"tpu-vm-tf-X.Y.Z{pod} (TF {low} to 2.14.x)"
    )


def tensorflow_runtime_problems(runtime: str, found: TpuSlice, prefix: str = "") -> list[str]:
    """A problem when `runtime` ships no TensorFlow, which the bundled TPU trainer needs."""
    if tpu_runtime_match(found.generation, runtime).tensorflow:
        return []
    message = (
        f"{prefix}runtime_version: {runtime!r} ships no TensorFlow, which the tensorflow "
        f"trainer needs on {found.accelerator_type}; valid: {tensorflow_runtime_family(found)}"
    )
    return [message]


def tpu_capacity_problems(
    provisioning: Any, reservation: Any, queued: Any, prefix: str = ""
) -> list[str]:
    """Problems with how the slice's capacity is obtained.

    Only a queued resource can name a reservation: a TPU VM created directly (on-demand,
    spot, reserved) consumes any matching reservation, and `reserved` says only that it must.
    """
    p = prefix
    problems: list[str] = []
    if provisioning not in TPU_PROVISIONING:
        problems.append(not_allowed(f"{p}provisioning", provisioning, TPU_PROVISIONING))
    if reservation is not None:
        if not isinstance(reservation, str) or not RESERVATION_NAME.match(reservation):
            problems.append(
                f"{p}reservation: {quote(reservation)} is not a reservation name; valid: a "
                "name, projects/P/locations/ZONE/reservations/R, or '-' (any reservation)"
            )
        elif provisioning != "queued" and provisioning in TPU_PROVISIONING:
            problems.append(
                f"{p}reservation: {quote(reservation)} needs provisioning 'queued': a TPU VM "
                f"created directly ({quote(provisioning)}) can only consume any matching "
                "reservation, not name one; valid: provisioning queued, or provisioning "
                f"reserved without {p}reservation"
            )
    if queued is not None:
        problems += _queued_problems(queued, provisioning, reservation, p)
    return problems


def _queued_problems(queued: Any, provisioning: Any, reservation: Any, p: str) -> list[str]:
    if provisioning != "queued":
        return [f"{p}queued: only used with provisioning 'queued', not {quote(provisioning)}"]
    if not isinstance(queued, Mapping):
        return [f"{p}queued: expected a mapping with keys {', '.join(QUEUED_KEYS)}"]
    problems = unknown_keys(f"{p}queued.", queued, QUEUED_KEYS)
    tier = queued.get("tier", "on-demand")
    if tier not in QUEUED_TIERS:
        problems.append(not_allowed(f"{p}queued.tier", tier, QUEUED_TIERS))
    for key in ("min_duration_s", "valid_until_s", "wait_timeout_s"):
        value = queued.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            problems.append(f"{p}queued.{key}: got {value!r}; valid: an integer >= 1")
    if queued.get("min_duration_s") is not None and tier != "guaranteed":
        problems.append(
            f"{p}queued.min_duration_s: only used with queued.tier 'guaranteed', not {tier!r}; "
            "valid: remove it, or queued.tier: guaranteed"
        )
    if reservation is not None and tier == "spot":
        problems.append(
            f"{p}queued.tier: 'spot' cannot be combined with reservation {reservation!r}; "
            "valid: on-demand, guaranteed"
        )
    return problems

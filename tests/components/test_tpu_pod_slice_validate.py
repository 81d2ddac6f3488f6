"""TpuPodSlice validation, table-driven: every valid slice of every generation registers, and
every invalid argument gets its exact message, the same through the stack config.
Registrations: test_tpu_pod_slice.py."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components.catalog.tpu_rules import tpu_slice_problems
from trainstack.components.tpu_pod_slice import validate_args
from trainstack.infra.config import ConfigError, load_stack_config

# --------------------------------------------------------------------------------------
# Validation tables
# --------------------------------------------------------------------------------------

# (accelerator_type, generation, topology, chips, hosts): the fact sheet's tables 1.1-1.2.
VALID_SLICES = [
    ("v4-8", "v4", "2x2x1", 4, 1),
    ("v4-16", "v4", "2x2x2", 8, 2),
    ("v4-32", "v4", "2x2x4", 16, 4),
    ("v4-64", "v4", "2x4x4", 32, 8),
    ("v4-128", "v4", "4x4x4", 64, 16),
    ("v4-256", "v4", "4x4x8", 128, 32),
    ("v4-512", "v4", "4x8x8", 256, 64),
    ("v4-1024", "v4", "8x8x8", 512, 128),
    ("v4-1536", "v4", "8x8x12", 768, 192),
    ("v4-2048", "v4", "8x8x16", 1024, 256),
    ("v4-4096", "v4", "8x16x16", 2048, 512),
    ("v5litepod-1", "v5e", "1x1", 1, 1),
    ("v5litepod-4", "v5e", "2x2", 4, 1),
    ("v5litepod-8", "v5e", "2x4", 8, 1),
    ("v5litepod-16", "v5e", "4x4", 16, 4),
    ("v5litepod-32", "v5e", "4x8", 32, 8),
    ("v5litepod-64", "v5e", "8x8", 64, 16),
    ("v5litepod-128", "v5e", "8x16", 128, 32),
    ("v5litepod-256", "v5e", "16x16", 256, 64),
    ("v5p-8", "v5p", "2x2x1", 4, 1),
    ("v5p-16", "v5p", "2x2x2", 8, 2),
    ("v5p-32", "v5p", "2x2x4", 16, 4),
    ("v5p-64", "v5p", "2x4x4", 32, 8),
    ("v5p-128", "v5p", "4x4x4", 64, 16),
    ("v5p-256", "v5p", "4x4x8", 128, 32),
    ("v5p-512", "v5p", "4x8x8", 256, 64),
    ("v5p-1024", "v5p", "8x8x8", 512, 128),
    ("v5p-2048", "v5p", "8x8x16", 1024, 256),
    ("v5p-4096", "v5p", "8x16x16", 2048, 512),
    ("v5p-8192", "v5p", "16x16x16", 4096, 1024),
    ("v5p-12288", "v5p", "16x16x24", 6144, 1536),
    ("v6e-1", "v6e", "1x1", 1, 1),
    ("v6e-4", "v6e", "2x2", 4, 1),
    ("v6e-8", "v6e", "2x4", 8, 1),
    ("v6e-16", "v6e", "4x4", 16, 4),
    ("v6e-32", "v6e", "4x8", 32, 8),
    ("v6e-64", "v6e", "8x8", 64, 16),
    ("v6e-128", "v6e", "8x16", 128, 32),
    ("v6e-256", "v6e", "16x16", 256, 64),
]
ZONES = {"v4": "us-central2-b", "v5e": "us-west4-a", "v5p": "us-east5-a", "v6e": "europe-west4-a"}
API_TYPES = {"v4": "V4", "v5e": "V5LITE_POD", "v5p": "V5P", "v6e": "V6E"}


def _tf_runtime(generation: str, hosts: int) -> str:
    pod = "-pod" if hosts > 1 else ""
    return f"tpu-vm-tf-2.16.0{pod}-pjrt"


def _args(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "zone": "us-central2-b",
        "accelerator_type": "v4-32",
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    }
    return {k: v for k, v in {**base, **overrides}.items() if v is not None}


@pytest.mark.parametrize(
    ("accelerator_type", "generation", "topology", "chips", "hosts"), VALID_SLICES
)
def test_every_valid_size_of_every_generation(
    accelerator_type: str, generation: str, topology: str, chips: int, hosts: int
) -> None:
    runtime = _tf_runtime(generation, hosts)
    by_name = validate_args(
        _args(accelerator_type=accelerator_type, zone=ZONES[generation], runtime_version=runtime)
    )
    by_shape = validate_args(
        _args(
            accelerator_type=None,
            generation=generation,
            topology=topology,
            zone=ZONES[generation],
            runtime_version=runtime,
        )
    )
    assert by_name == by_shape
    found = by_name.slice
    assert (found.accelerator_type, found.topology, found.chips, found.hosts) == (
        accelerator_type,
        topology,
        chips,
        hosts,
    )
    assert by_name.generation.api_type == API_TYPES[generation]
    assert by_name.secure_boot is True
    # The base runtime of the generation is valid too (it only lacks TensorFlow).
    base = by_name.generation.base_runtime
    slice_only = tpu_slice_problems(
        accelerator_type=accelerator_type,
        generation=None,
        topology=None,
        zone=ZONES[generation],
        runtime_version=base,
    )
    assert slice_only == (found, [])


V4_SIZES = "v4-8, v4-16, v4-32, v4-64, v4-128, v4-256, v4-512, v4-1024, v4-1536, v4-2048, v4-4096"
V5E_TOPOLOGIES = "1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"

INVALID = [
    (
        {"accelerator_type": "v4-12"},
        f"accelerator_type: 'v4-12' is not a v4 slice; valid: {V4_SIZES}",
    ),
    (
        {"accelerator_type": "v3-8"},
        "accelerator_type: 'v3-8' is not a TPU type; valid: v4-N, v5litepod-N, v5p-N, v6e-N",
    ),
    (
        {"accelerator_type": "v5e-16"},
        "accelerator_type: 'v5e-16' is not a TPU type; did you mean `v5litepod-16`? valid: "
        "v4-N, v5litepod-N, v5p-N, v6e-N",
    ),
    (
        {"accelerator_type": "v5litepod-12", "zone": "us-west4-a"},
        "accelerator_type: 'v5litepod-12' is not a v5e slice; valid: v5litepod-1, "
        "v5litepod-4, v5litepod-8, v5litepod-16, v5litepod-32, v5litepod-64, "
        "v5litepod-128, v5litepod-256",
    ),
    (
        {"accelerator_type": None, "generation": "v5e", "topology": "3x3"},
        f"topology: '3x3' is not a v5e topology; valid: {V5E_TOPOLOGIES}",
    ),
    (
        {"generation": "v4", "topology": "2x2x4"},
        "accelerator_type: 'v4-32' given together with generation/topology; valid: one "
        "of the two forms",
    ),
    (
        {"accelerator_type": None, "generation": "v5e"},
        f"topology: required with generation; valid: {V5E_TOPOLOGIES}",
    ),
    (
        {"accelerator_type": None, "topology": "4x4"},
        "generation: required with topology; valid: v4, v5e, v5p, v6e",
    ),
    (
        {"accelerator_type": None, "generation": "v7", "topology": "4x4"},
        "generation: 'v7' is not allowed; valid: v4, v5e, v5p, v6e",
    ),
    (
        {"accelerator_type": None},
        "accelerator_type: required (or generation with topology)",
    ),
    (
        {"zone": "us-central1-a"},
        "zone: 'us-central1-a' does not offer v4; valid: us-central2-b",
    ),
    (
        {"accelerator_type": "v6e-16", "zone": "us-central2-b", "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt"},
        "zone: 'us-central2-b' does not offer v6e; valid: us-central1-b, us-east1-d, "
        "us-east5-a, us-east5-b, europe-west4-a, us-central1-ai1a, us-south1-ai1b, "
        "asia-northeast1-b",
    ),
    (
        {"accelerator_type": "v5litepod-16", "zone": "us-west4-a", "runtime_version": "tpu-ubuntu2204-base"},
        "runtime_version: 'tpu-ubuntu2204-base' is not a v5e runtime; valid: "
        "v2-alpha-tpuv5-lite, tpu-vm-tf-X.Y.Z[-pod]-pjrt (TF >= 2.15.0), "
        "tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5e-and-v6 (TF >= 2.18.0)",
    ),
    (
        {"accelerator_type": "v5p-32", "zone": "us-east5-a", "runtime_version": "tpu-vm-tf-2.16.0-pod"},
        "runtime_version: 'tpu-vm-tf-2.16.0-pod' is not a v5p runtime; valid: "
        "v2-alpha-tpuv5, tpu-vm-tf-X.Y.Z[-pod]-pjrt (TF >= 2.15.0), "
        "tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5p-and-below (TF >= 2.18.0)",
    ),
    (
        {"accelerator_type": "v6e-16", "zone": "us-east5-b", "runtime_version": "v2-alpha-tpuv5"},
        "runtime_version: 'v2-alpha-tpuv5' is not a v6e runtime; valid: v2-alpha-tpuv6e, "
        "tpu-vm-tf-X.Y.Z[-pod]-pjrt (TF >= 2.15.0), tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5e-and-v6 "
        "(TF >= 2.18.0)",
    ),
    (
        {"accelerator_type": "v4-8"},
        "runtime_version: 'tpu-vm-tf-2.16.0-pod-pjrt' is a multi-host (-pod) runtime but "
        "v4-8 is a single host; valid: tpu-vm-tf-2.16.0-pjrt",
    ),
    (
        {"runtime_version": "tpu-vm-tf-2.16.0-pjrt"},
        "runtime_version: 'tpu-vm-tf-2.16.0-pjrt' is a single-host runtime but v4-32 has 4 "
        "hosts; valid: tpu-vm-tf-2.16.0-pod-pjrt",
    ),
    (
        {"runtime_version": "tpu-vm-tf-2.16.0-pod"},
        "runtime_version: 'tpu-vm-tf-2.16.0-pod' names no device API, which v4 runtimes carry "
        "from TF 2.15.0 on; valid: tpu-vm-tf-2.16.0-pod-pjrt, tpu-vm-tf-2.16.0-pod-se",
    ),
    (
        {"runtime_version": "tpu-vm-tf-2.14.1-pod-pjrt"},
        "runtime_version: 'tpu-vm-tf-2.14.1-pod-pjrt' is not a v4 runtime; valid: "
        "tpu-ubuntu2204-base, tpu-vm-tf-X.Y.Z[-pod]-pjrt, tpu-vm-tf-X.Y.Z[-pod]-se "
        "(TF >= 2.15.0), tpu-vm-tf-X.Y.Z[-pod] (TF 2.10.1 to 2.14.x), "
        "tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5p-and-below (TF >= 2.18.0), tpu-vm-tf-X.Y.Z[-pod]-v4 "
        "(TF <= 2.10.0)",
    ),
    (
        {"runtime_version": "tpu-ubuntu2204-base"},
        "runtime_version: 'tpu-ubuntu2204-base' ships no TensorFlow, which the tensorflow "
        "trainer needs on v4-32; valid: tpu-vm-tf-X.Y.Z-pod-pjrt, tpu-vm-tf-X.Y.Z-pod-se "
        "(TF >= 2.15.0), tpu-vm-tf-X.Y.Z-pod (TF 2.10.1 to 2.14.x)",
    ),
    (
        {"accelerator_type": "v6e-4", "zone": "us-central1-b", "runtime_version": "v2-alpha-tpuv6e"},
        "runtime_version: 'v2-alpha-tpuv6e' ships no TensorFlow, which the tensorflow "
        "trainer needs on v6e-4; valid: tpu-vm-tf-X.Y.Z-pjrt (TF >= 2.15.0)",
    ),
    (
        {"provisioning": "preemptible"},
        "provisioning: 'preemptible' is not allowed; valid: on-demand, spot, queued, reserved",
    ),
    (
        {"provisioning": "spot", "reservation": "res-1"},
        "reservation: 'res-1' needs provisioning 'queued': a TPU VM created directly ('spot') "
        "can only consume any matching reservation, not name one; valid: provisioning queued, "
        "or provisioning reserved without reservation",
    ),
    (
        {"provisioning": "reserved", "reservation": "res-1"},
        "reservation: 'res-1' needs provisioning 'queued': a TPU VM created directly "
        "('reserved') can only consume any matching reservation, not name one; valid: "
        "provisioning queued, or provisioning reserved without reservation",
    ),
    (
        {"provisioning": "queued", "reservation": "Res 1"},
        "reservation: 'Res 1' is not a reservation name; valid: a name, "
        "projects/P/locations/ZONE/reservations/R, or '-' (any reservation)",
    ),
    (
        {"provisioning": "spot", "queued": {"tier": "spot"}},
        "queued: only used with provisioning 'queued', not 'spot'",
    ),
    (
        {"provisioning": "queued", "queued": {"tier": "best-effort"}},
        "queued.tier: 'best-effort' is not allowed; valid: on-demand, spot, guaranteed",
    ),
    (
        {"provisioning": "queued", "queued": {"tier": "spot", "min_duration_s": 3600}},
        "queued.min_duration_s: only used with queued.tier 'guaranteed', not 'spot'; valid: "
        "remove it, or queued.tier: guaranteed",
    ),
    (
        {"provisioning": "queued", "queued": {"wait_timeout_s": 0}},
        "queued.wait_timeout_s: got 0; valid: an integer >= 1",
    ),
    (
        {"provisioning": "queued", "queued": {"valid_until": "1h"}},
        "queued.valid_until: unknown key; did you mean `valid_until_s`? valid: tier, "
        "min_duration_s, valid_until_s, wait_timeout_s",
    ),
    (
        {"provisioning": "queued", "reservation": "-", "queued": {"tier": "spot"}},
        "queued.tier: 'spot' cannot be combined with reservation '-'; valid: on-demand, "
        "guaranteed",
    ),
    (
        {"data_disks": [{"source_disk": "projects/p/zones/us-central2-b/disks/d", "mode": "READ_WRITE"}]},
        "data_disks[0].mode: 'READ_WRITE' attaches a disk to one VM but every one of the 4 "
        "workers of v4-32 attaches it; valid: READ_ONLY",
    ),
    (
        {"data_disks": [{"mode": "READ_ONLY"}]},
        "data_disks[0].source_disk: required; valid: a disk, projects/P/zones/Z/disks/NAME",
    ),
    (
        {"trainer_args": ["--db_password=hunter2"]},
        "trainer_args[0]: '--db_password' looks like a credential; the startup script is "
        "instance metadata, readable by anyone who can view the TPU node. Give the trainer a "
        "Secret Manager name instead and let it read the value with its service account",
    ),
    (
        {"secure_boot": "yes"},
        "secure_boot: got 'yes'; valid: true or false",
    ),
    ({"max_run_seconds": 0}, "max_run_seconds: got 0; valid: an integer >= 1"),
    ({"max_run_seconds": "3600"}, "max_run_seconds: got '3600'; valid: an integer >= 1"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "message"), INVALID)
def test_invalid_args_have_exact_messages(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_args(_args(**overrides))
    assert str(info.value) == message


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ValueError) as info:
        validate_args(_args(accelerator_type="v4-12", provisioning="x", secure_boot="yes"))
    assert str(info.value).splitlines() == [
        f"accelerator_type: 'v4-12' is not a v4 slice; valid: {V4_SIZES}",
        "provisioning: 'x' is not allowed; valid: on-demand, spot, queued, reserved",
        "secure_boot: got 'yes'; valid: true or false",
    ]


@pytest.mark.parametrize(
    "tpu",
    [
        {"accelerator_type": "v4-12"},
        {"accelerator_type": "v3-8"},
        {"generation": "v5e", "topology": "3x3"},
        {"generation": "v5e"},
        {"topology": "4x4"},
        {"accelerator_type": "v4-32", "zone": "us-central1-a"},
        {"accelerator_type": "v5litepod-16", "runtime_version": "tpu-ubuntu2204-base"},
        {"accelerator_type": "v4-8", "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt"},
        {"accelerator_type": "v4-32", "runtime_version": "tpu-vm-tf-2.16.0-pjrt"},
        {"accelerator_type": "v4-32", "runtime_version": "tpu-vm-tf-2.16.0-pod"},
    ],
)
def test_slice_messages_match_the_stack_config(tpu: dict[str, Any]) -> None:
    """Users importing the component and stack files get the same words for the same fault."""
    section = {"zone": "us-central2-b", "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt", **tpu}
    with pytest.raises(ConfigError) as info:
        load_stack_config(
            {
                "gcp:project": "p",
                "gcp:region": section["zone"].rsplit("-", 1)[0],
                "trainstack:tpu": section,
                "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
            }
        )
    _, problems = tpu_slice_problems(
        accelerator_type=section.get("accelerator_type"),
        generation=section.get("generation"),
        topology=section.get("topology"),
        zone=section["zone"],
        runtime_version=section["runtime_version"],
        prefix="tpu.",
    )
    assert problems == info.value.errors

"""The catalogs against their sources (the team's fact sheet, `FACT_SHEET`) and the reducer sizing rule:
`trainstack.components.catalog` (facts the components need) and `trainstack.infra.catalog` (quotas and prices)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainstack.components import catalog
from trainstack.components.catalog import tpu_runtimes
from trainstack.components.catalog.gpus import VERTEX_GPU_ENUMS
from trainstack.components.catalog.tpu import tpu_runtime_match, tpu_slice
from trainstack.components.catalog.tpu_runtimes import parse_tf_runtime
from trainstack.components.catalog.vertex import reducers_needed
from trainstack.infra import catalog as plan_catalog


@pytest.mark.parametrize(
    ("accelerator_type", "generation", "topology", "chips", "hosts", "verified"),
    [
        ("v4-8", "v4", "2x2x1", 4, 1, True),
        ("v4-16", "v4", "2x2x2", 8, 2, True),
        ("v4-32", "v4", "2x2x4", 16, 4, True),
        ("v4-1024", "v4", "8x8x8", 512, 128, True),
        ("v5litepod-1", "v5e", "1x1", 1, 1, True),
        ("v5litepod-4", "v5e", "2x2", 4, 1, True),
        ("v5litepod-8", "v5e", "2x4", 8, 1, False),
        ("v5litepod-16", "v5e", "4x4", 16, 4, False),
        ("v5litepod-256", "v5e", "16x16", 256, 64, False),
        ("v5p-8", "v5p", "2x2x1", 4, 1, True),
        ("v5p-32", "v5p", "2x2x4", 16, 4, True),
        ("v5p-128", "v5p", "4x4x4", 64, 16, True),
        ("v5p-12288", "v5p", "16x16x24", 6144, 1536, True),
        ("v6e-1", "v6e", "1x1", 1, 1, True),
        ("v6e-8", "v6e", "2x4", 8, 1, False),
        ("v6e-16", "v6e", "4x4", 16, 4, True),
        ("v6e-256", "v6e", "16x16", 256, 64, True),
    ],
)
def test_tpu_slices(
    accelerator_type: str, generation: str, topology: str, chips: int, hosts: int, verified: bool
) -> None:
    s = tpu_slice(accelerator_type)
    assert s is not None
    assert (s.generation, s.topology, s.chips, s.hosts, s.verified) == (
        generation,
        topology,
        chips,
        hosts,
        verified,
    )


@pytest.mark.parametrize("name", ["v4-12", "v4-4", "v5litepod-2", "v5p-4", "v6e-2", "v3-8", "x"])
def test_unknown_tpu_slices(name: str) -> None:
    assert tpu_slice(name) is None


def test_tpu_naming_rule() -> None:
    # v4/v5p: N counts TensorCores (2 per chip); v5e/v6e: N counts chips.
    for gen in catalog.TPU_GENERATIONS.values():
        for s in gen.slices:
            n = int(s.accelerator_type.rsplit("-", 1)[1])
            per_chip = 2 if gen.name_counts == "tensorcores" else 1
            assert n == s.chips * per_chip
            assert s.chips_per_host in (1, 4, 8)


@pytest.mark.parametrize(
    ("gen", "api_type", "hbm", "base_runtime", "zones"),
    [
        ("v4", "V4", 32, "tpu-ubuntu2204-base", ["us-central2-b"]),
        ("v5e", "V5LITE_POD", 16, "v2-alpha-tpuv5-lite", ["us-central1-a", "europe-west4-b"]),
        ("v5p", "V5P", 95, "v2-alpha-tpuv5", ["us-central1-a", "us-east5-a"]),
        ("v6e", "V6E", 32, "v2-alpha-tpuv6e", ["us-central1-b", "europe-west4-a"]),
    ],
)
def test_tpu_generations(
    gen: catalog.TpuGenerationName, api_type: str, hbm: int, base_runtime: str, zones: list[str]
) -> None:
    g = catalog.TPU_GENERATIONS[gen]
    assert (g.api_type, g.hbm_gb_per_chip, g.base_runtime) == (api_type, hbm, base_runtime)
    assert all(g.zones[z] for z in zones)


def test_unverified_zone_marked() -> None:
    assert catalog.TPU_GENERATIONS["v6e"].zones["asia-northeast1-b"] is False


@pytest.mark.parametrize(
    ("gen", "runtime", "belongs", "pod"),
    [
        ("v4", "tpu-ubuntu2204-base", True, False),
        ("v4", "tpu-vm-tf-2.14.1", True, False),
        ("v4", "tpu-vm-tf-2.14.1-pod", True, True),
        ("v4", "tpu-vm-tf-2.10.0-v4", True, False),
        ("v4", "tpu-vm-tf-2.10.0-pod-v4", True, True),
        ("v4", "tpu-vm-tf-2.10.0", False, False),
        # From TF 2.15.0 a v4 runtime names its device API; before it, none (stream executor).
        ("v4", "tpu-vm-tf-2.16.1-pjrt", True, False),
        ("v4", "tpu-vm-tf-2.16.1-pod-se", True, True),
        ("v4", "tpu-vm-tf-2.16.0-pod", False, True),
        ("v4", "tpu-vm-tf-2.14.1-pjrt", False, False),
        ("v4", "tpu-vm-tf-2.10.0-pjrt-v4", False, False),
        ("v4", "tpu-vm-tf-2.18.0-pjrt-v5p-and-below", True, False),
        ("v4", "v2-alpha-tpuv5", False, False),
        ("v5e", "v2-alpha-tpuv5-lite", True, False),
        ("v5e", "tpu-vm-tf-2.16.0-pjrt", True, False),
        ("v5e", "tpu-vm-tf-2.16.0-pod-pjrt", True, True),
        ("v5e", "tpu-vm-tf-2.16.0-pod", False, True),
        ("v5e", "tpu-vm-tf-2.14.0-pjrt", False, False),
        ("v5e", "tpu-vm-tf-2.16.1-se", False, False),
        ("v5e", "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", True, False),
        ("v5e", "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6", True, True),
        ("v5e", "tpu-vm-tf-2.17.0-pjrt-v5e-and-v6", False, False),
        ("v5e", "tpu-vm-tf-2.18.0-pjrt-v5p-and-below", False, False),
        ("v5e", "tpu-vm-tf-nightly-pjrt", False, False),
        ("v5p", "v2-alpha-tpuv5", True, False),
        ("v5p", "v2-alpha-tpuv5-lite", False, False),
        ("v5p", "tpu-vm-tf-2.18.0-pjrt-v5p-and-below", True, False),
        ("v5p", "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6", False, True),
        ("v6e", "v2-alpha-tpuv6e", True, False),
        ("v6e", "tpu-vm-tf-2.18.0-pod-pjrt", True, True),
        ("v6e", "tpu-vm-tf-2.19.0-pod-pjrt", True, True),
        ("v6e", "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6", True, True),
        ("v6e", "tpu-ubuntu2204-base", False, False),
    ],
)
def test_runtime_versions(
    gen: catalog.TpuGenerationName, runtime: str, belongs: bool, pod: bool
) -> None:
    m = tpu_runtime_match(gen, runtime)
    assert (m.belongs, m.pod) == (belongs, pod)


@pytest.mark.parametrize(
    ("runtime", "version", "pod", "device_api", "hardware", "pin"),
    [
        ("tpu-vm-tf-2.10.0-pod-v4", (2, 10, 0), True, None, "v4", None),
        ("tpu-vm-tf-2.14.1-pod", (2, 14, 1), True, None, None, None),
        ("tpu-vm-tf-2.15.1-se", (2, 15, 1), False, "se", None, None),
        ("tpu-vm-tf-2.16.0-pod-pjrt", (2, 16, 0), True, "pjrt", None, "tf-keras==2.16.*"),
        ("tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", (2, 18, 0), False, "pjrt", "v5e-and-v6", "tf-keras==2.18.*"),
        ("tpu-vm-tf-2.20.0-pod-pjrt", (2, 20, 0), True, "pjrt", None, "tf-keras==2.20.*"),
    ],
)  # fmt: skip
def test_a_tf_runtime_name_gives_its_tensorflow_and_keras(
    runtime: str,
    version: tuple[int, int, int],
    pod: bool,
    device_api: str | None,
    hardware: str | None,
    pin: str | None,
) -> None:
    rt = parse_tf_runtime(runtime)
    assert rt is not None
    assert (rt.version, rt.pod, rt.device_api, rt.hardware) == (version, pod, device_api, hardware)
    assert rt.tf_minor == f"{version[0]}.{version[1]}"
    assert rt.tf_keras_requirement == pin
    assert rt.verified is (hardware != "v5e-and-v6")


def test_every_accepted_tf_runtime_has_a_tensorflow_version_and_keras_rule() -> None:
    names = [
        f"tpu-vm-tf-2.{minor}.{patch}{pod}{api}{hw}"
        for minor in range(9, 22)
        for patch in (0, 1)
        for pod in ("", "-pod")
        for api in ("", "-pjrt", "-se")
        for hw in ("", "-v4", "-v5e-and-v6", "-v5p-and-below")
    ]
    accepted = 0
    for gen in catalog.TPU_GENERATIONS:
        for name in names:
            m = tpu_runtime_match(gen, name)
            if not m.belongs:
                continue
            accepted += 1
            assert m.tensorflow and m.tf is not None and m.tf.name == name
            minor = m.tf.version[:2]
            expected = f"tf-keras=={minor[0]}.{minor[1]}.*" if minor >= (2, 16) else None
            assert m.tf.tf_keras_requirement == expected
    assert accepted == 228  # v4 96 (6 -v4, 18 plain, 56 pjrt|se, 16 suffixed), 44 each other
    assert parse_tf_runtime("tpu-vm-tf-nightly-pod") is None
    assert parse_tf_runtime("tpu-ubuntu2204-base") is None


def test_the_trainer_and_the_catalog_agree_where_tf_keras_starts() -> None:
    from trainstack.trainers.tf_multiworker import keras_setup

    assert keras_setup.TF_KERAS_FROM == tpu_runtimes.TF_KERAS_FROM == (2, 16)
    assert keras_setup.tf_keras_pin("2.17.1") == tpu_runtimes.tf_keras_requirement(2, 17)


def test_tpu_environment_facts_carry_google_sources() -> None:
    env = {f.name: f for f in tpu_runtimes.TPU_TF_ENVIRONMENT}
    assert {name: (f.value, f.applies, f.verified) for name, f in env.items()} == {
        "TPU_NAME": ("local", "single-host", True),
        "NEXT_PLUGGABLE_DEVICE_USE_C_API": ("true", "single-host-pjrt", True),
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": (
            "libtpu.so of the libtpu package the runtime's Python imports, else /lib/libtpu.so",
            "single-host-pjrt",
            False,
        ),
        "TPU_LOAD_LIBRARY": ("0", "multi-host", True),
    }
    for fact in env.values():
        assert fact.source.startswith("GoogleCloudPlatform/ml-auto-solutions@7eda193b ")
    assert tpu_runtimes.TF_KERAS_VERIFIED and tpu_runtimes.TF_RUNTIME_NAMES_VERIFIED
    assert not tpu_runtimes.HARDWARE_SUFFIX_VERIFIED
    assert not tpu_runtimes.TF_KERAS_PREINSTALLED_VERIFIED
    assert tpu_runtimes.TF_KERAS_PIP_FLAGS == ("--upgrade", "--force-reinstall", "--no-deps")


@pytest.mark.parametrize(
    ("name", "gpus", "model", "vcpus", "memory_gb", "gbps"),
    [
        ("a2-highgpu-1g", 1, "A100 40GB", 12, 85, 24),
        ("a2-highgpu-2g", 2, "A100 40GB", 24, 170, 32),
        ("a2-highgpu-4g", 4, "A100 40GB", 48, 340, 50),
        ("a2-highgpu-8g", 8, "A100 40GB", 96, 680, 100),
        ("a2-megagpu-16g", 16, "A100 40GB", 96, 1360, 100),
        ("a2-ultragpu-1g", 1, "A100 80GB", 12, 170, 24),
        ("a2-ultragpu-8g", 8, "A100 80GB", 96, 1360, 100),
        ("n1-highcpu-16", 0, None, 16, 14.4, 32),
        ("n2-highcpu-16", 0, None, 16, 16, 32),
    ],
)
def test_machines(
    name: str, gpus: int, model: str | None, vcpus: int, memory_gb: float, gbps: int
) -> None:
    m = catalog.MACHINES[name]
    assert (m.gpus, m.gpu_model, m.vcpus, m.memory_gb, m.egress_gbps) == (
        gpus,
        model,
        vcpus,
        memory_gb,
        gbps,
    )


def test_no_a2_ultragpu_16g() -> None:
    assert "a2-ultragpu-16g" not in catalog.MACHINES
    assert catalog.A2_MACHINES["a2-ultragpu-8g"].local_ssd_gib == 3000


def test_accelerator_names() -> None:
    names = catalog.GPU_ACCELERATOR_NAMES
    assert tuple(n.vertex for n in names.values()) == VERTEX_GPU_ENUMS
    assert (names["A100 40GB"].compute, names["A100 40GB"].vertex) == (
        "nvidia-tesla-a100",
        "NVIDIA_TESLA_A100",
    )
    assert (names["A100 80GB"].compute, names["A100 80GB"].vertex) == (
        "nvidia-a100-80gb",
        "NVIDIA_A100_80GB",
    )


@pytest.mark.parametrize(
    ("worker", "replicas", "reducer", "expected"),
    [
        ("a2-megagpu-16g", 8, "n1-highcpu-16", 25),  # Google's example: 800 / 32
        ("a2-highgpu-8g", 5, "n1-highcpu-16", 16),  # 5 x 100 Gbps -> 16 (Google's V100 example)
        ("a2-highgpu-8g", 4, "n1-highcpu-16", 13),  # 400 / 32 = 12.5
        ("a2-highgpu-2g", 1, "n1-highcpu-16", 1),  # 32 / 32 exactly
        ("a2-highgpu-1g", 2, "n2-highcpu-16", 2),  # 48 / 32
    ],
)
def test_reducers_needed(worker: str, replicas: int, reducer: str, expected: int) -> None:
    assert reducers_needed(worker, replicas, reducer) == expected


def test_reducers_needed_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"^replica_count: 0 is below 1; valid: >= 1$"):
        reducers_needed("a2-highgpu-8g", 0)
    with pytest.raises(ValueError) as caught:
        reducers_needed("x", 1)
    assert str(caught.value) == (
        f"worker_machine_type: 'x' is not in the catalog; valid: {', '.join(catalog.MACHINES)}"
    )


def test_quota_ids() -> None:
    assert plan_catalog.COMPUTE_QUOTAS[("A100 40GB", True)].quota_id == (
        "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region"
    )
    assert plan_catalog.COMPUTE_QUOTAS[("A100 80GB", False)].verified is True
    # Cloud Quotas quotaIds (CamelCase), not the metric names; on-demand ids are Google's own.
    assert {k: (q.quota_id, q.verified) for k, q in plan_catalog.VERTEX_GPU_QUOTAS.items()} == {
        ("A100 40GB", False): ("CustomModelTrainingA100GPUsPerProjectPerRegion", True),
        ("A100 80GB", False): ("CustomModelTrainingA10080GBGPUsPerProjectPerRegion", True),
        ("A100 40GB", True): ("CustomModelTrainingPreemptibleA100GPUsPerProjectPerRegion", False),
        ("A100 80GB", True): (
            "CustomModelTrainingPreemptibleA10080GBGPUsPerProjectPerRegion",
            False,
        ),
        # GoogleCloudPlatform/vertex-ai-samples @cc0d791 notebook_util/common_util.py
        # get_quota_id accelerator_map: H100GPUs, H100MEGAGPUs (capitals), H200GPUs,
        # B200GPUs; the Preemptible ids are its Dynamic Workload Scheduler ids (that Spot
        # draws on them is not sourced, as for A100).
        ("H100 80GB", False): ("CustomModelTrainingH100GPUsPerProjectPerRegion", True),
        ("H100 80GB", True): ("CustomModelTrainingPreemptibleH100GPUsPerProjectPerRegion", False),
        ("H100 Mega 80GB", False): ("CustomModelTrainingH100MEGAGPUsPerProjectPerRegion", True),
        ("H100 Mega 80GB", True): (
            "CustomModelTrainingPreemptibleH100MEGAGPUsPerProjectPerRegion",
            False,
        ),
        ("H200 141GB", False): ("CustomModelTrainingH200GPUsPerProjectPerRegion", True),
        ("H200 141GB", True): ("CustomModelTrainingPreemptibleH200GPUsPerProjectPerRegion", False),
        ("B200", False): ("CustomModelTrainingB200GPUsPerProjectPerRegion", True),
        ("B200", True): ("CustomModelTrainingPreemptibleB200GPUsPerProjectPerRegion", False),
    }
    assert {k: (q.quota_id, q.verified) for k, q in plan_catalog.VERTEX_CPU_QUOTAS.items()} == {
        "n1": ("CustomModelTrainingCPUsPerProjectPerRegion", False),
        "e2": ("CustomModelTrainingCPUsPerProjectPerRegion", False),
        "n2": ("CustomModelTrainingN2CPUsPerProjectPerRegion", False),
    }
    assert {k: q.quota_id for k, q in plan_catalog.TPU_QUOTAS.items()} == {
        ("v4", "on-demand"): "TPUV4sPodPerProjectPerZoneForTPUAPI",
        ("v4", "spot"): "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI",
        ("v4", "reserved"): "TPUV4sReservedPodPerProjectPerZoneForTPUAPI",
        ("v5e", "on-demand"): "TPUV5sLitepodPerProjectPerZoneForTPUAPI",
        ("v5e", "spot"): "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI",
        ("v5e", "reserved"): "TPUV5sReservedLitepodPerProjectPerZoneForTPUAPI",
        ("v5p", "on-demand"): "TPUV5PPerProjectPerZoneForTPUAPI",
        ("v5p", "spot"): "TPUV5PPreemptiblePerProjectPerZoneForTPUAPI",
        ("v5p", "reserved"): "TPUV5PReservedPerProjectPerZoneForTPUAPI",
        ("v6e", "on-demand"): "TPUV6EPerProjectPerZoneForTPUAPI",
        ("v6e", "spot"): "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI",
        ("v6e", "reserved"): "TPUV6EReservedPerProjectPerZoneForTPUAPI",
    }
    # No Google page names a TPU quota id: every one is third-party evidence or a guess.
    assert {(q.service, q.dimension, q.verified) for q in plan_catalog.TPU_QUOTAS.values()} == {
        ("tpu.googleapis.com", "zone", False)
    }
    assert plan_catalog.TPU_QUOTAS[("v4", "on-demand")].note.startswith(
        "id guessed from the ids of the other tiers; "
    )
    assert all(q.source for q in plan_catalog.TPU_QUOTAS.values())


def test_prices_are_marked_estimates() -> None:
    assert plan_catalog.PRICES_VERIFIED is False
    assert "ESTIMATES" in plan_catalog.PRICES_SOURCE
    assert plan_catalog.MACHINE_PRICES["a2-highgpu-8g"].on_demand == pytest.approx(29.39, abs=0.01)
    assert plan_catalog.TPU_CHIP_PRICES["v4"].spot == pytest.approx(3.22 * 0.4)
    assert set(plan_catalog.MACHINE_PRICES) == set(catalog.MACHINES)
    for table in plan_catalog.TABLES:
        assert table.source and table.as_of.startswith("20")


@pytest.mark.parametrize(
    "module",
    [
        "trainstack.components.catalog",
        "trainstack.components.tpu_pod_slice",
        "trainstack.components.vertex_training_job",
        "trainstack.components.training_buckets",
        "trainstack.components.kubernetes_training_job",
    ],
)
def test_components_load_no_stack_config_layer(module: str) -> None:
    """An outside program importing a component (or the catalog) gets no `infra` modules:
    facts and rules live below the components."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('infra')))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out == "[]\n"

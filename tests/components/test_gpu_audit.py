"""The outside audit of issue 32 (A3 / A4 families and flex-start on `gpu_cluster` and
Vertex): each finding's exact values, by the rule the stack config and the components share.
Sources are cited next to the catalog facts (`catalog.gpu_families`, `catalog.images`,
`catalog.gke_versions`); the tests hold the code to them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.components.test_a100_cluster import BASE, CLUSTER, POLICY, _cluster_outputs
from tests.components.test_a100_cluster import _policy_outputs as policy_outputs
from trainstack.components._discovery import validate_body
from trainstack.components._vertex_body import custom_job_body
from trainstack.components.a100_cluster import A100Cluster
from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.components.catalog.gpu_families import GPU_FAMILIES
from trainstack.components.tpu_gke_slices import tpu_gke_slices_problems
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.mocks import ProgramRun, run_program
from trainstack.infra.targets.gke import TARGET as GKE
from trainstack.infra.targets.gpu_cluster import flex_start_note
from trainstack.infra.targets.vertex_image import vertex_plan_notes

NODE_POOL = "gcp:container/nodePool:NodePool"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
JOB = "kubernetes:batch/v1:Job"
PROJECT = {"gcp:project": "p", "gcp:region": "us-central1"}
ZONES = {
    "a2-highgpu-8g": "us-central1-a",
    "a3-highgpu-8g": "us-central1-a",
    "a3-megagpu-8g": "us-central1-a",
    "a3-ultragpu-8g": "us-central1-b",
    "a4-highgpu-8g": "us-central1-b",
}
CUDA12 = "pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
CUDA13 = "pytorch/pytorch@sha256:db80a41f8428644cebcb3d75b0b62df334ab6c0e75785951eb25f48bfbd42407"


def _stack(
    machine: str = "a3-megagpu-8g",
    trainer: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    **section: Any,
) -> dict[str, Any]:
    gpu = {"machine_type": machine, "node_count": 2, "zone": ZONES[machine], **section}
    raw: dict[str, Any] = {**PROJECT, "trainstack:gpu_cluster": gpu}
    if trainer is not None:
        raw["trainstack:trainer"] = trainer
    if limits is not None:
        raw["trainstack:limits"] = limits
    return raw


def _errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    return info.value.errors


def _run(machine: str, **overrides: Any) -> ProgramRun:
    args = {**BASE, "machine_type": machine, "zone": ZONES[machine], "node_count": 2}
    args |= {"spot": False, **overrides}

    def program() -> dict[str, Any]:
        A100Cluster("gpu", args)  # type: ignore[arg-type]
        return {}

    return run_program(program, outputs={CLUSTER: _cluster_outputs, POLICY: policy_outputs})


def _job_spec(run: ProgramRun) -> dict[str, Any]:
    [job] = run.of_type(JOB)
    spec: dict[str, Any] = job.inputs["spec"]
    return spec


# ------------------------------------------------------------------ A: boot disk


@pytest.mark.parametrize(
    ("machine", "disk"),
    [
        ("a4-highgpu-8g", "hyperdisk-balanced"),
        ("a3-ultragpu-8g", "hyperdisk-balanced"),
        ("a3-megagpu-8g", "pd-ssd"),
        ("a3-highgpu-8g", "pd-ssd"),
        ("a2-highgpu-8g", "pd-ssd"),
    ],
)
def test_gke_gpu_pool_boot_disk_is_the_familys(machine: str, disk: str) -> None:
    pool = _run(machine).named("gpu-gpu-pool").inputs
    assert pool["nodeConfig"]["diskType"] == disk


def test_gce_a4_template_boots_from_hyperdisk() -> None:
    [template] = _run("a4-highgpu-8g", backend="gce").of_type(TEMPLATE)
    assert [d["diskType"] for d in template.inputs["disks"]] == ["hyperdisk-balanced"]


@pytest.mark.parametrize(
    ("machine", "accelerator", "disk"),
    [
        ("a4-highgpu-8g", "NVIDIA_B200", "hyperdisk-balanced"),
        ("a3-ultragpu-8g", "NVIDIA_H200_141GB", "hyperdisk-balanced"),
        ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", "pd-ssd"),
    ],
)
def test_vertex_replicas_boot_disk_is_the_familys(
    machine: str, accelerator: str, disk: str
) -> None:
    body = custom_job_body(
        display_name="d",
        region="us-central1",
        machine_type=machine,
        replica_count=2,
        accelerator_type=accelerator,
        accelerator_count=8,
        package_uri="gs://b/p.tar.gz",
    )
    validate_body("aiplatform.v1", "GoogleCloudAiplatformV1CustomJob", body)
    specs = body["jobSpec"]["workerPoolSpecs"]
    assert [s["diskSpec"] for s in specs] == [{"bootDiskType": disk, "bootDiskSizeGb": 100}] * 2


# ------------------------------------------------------------------ B: compact placement


MEGA_COMPACT_FLEX = (
    "gpu_cluster.compact_placement: true cannot be used with gpu_cluster.flex_start on "
    "a3-megagpu-8g (GKE gives flex-start pools compact placement on A3 Ultra and A4 only: "
    "GoogleCloudPlatform/cluster-toolkit @1047080 modules/compute/gke-node-pool/main.tf); "
    "valid: compact_placement: false (the default with flex_start here), or machine_type "
    "a3-ultragpu-8g, a4-highgpu-8g"
)


def test_explicit_compact_placement_with_flex_start_is_refused_on_a3_mega() -> None:
    assert _errors(_stack(flex_start=True, compact_placement=True)) == [MEGA_COMPACT_FLEX]


def test_component_refuses_it_in_the_same_words() -> None:
    args = {**BASE, "machine_type": "a3-megagpu-8g", "zone": "us-central1-a", "spot": False}
    args |= {"flex_start": True, "compact_placement": True}
    assert a100_cluster_problems(args, prefix="") == [MEGA_COMPACT_FLEX.replace("gpu_cluster.", "")]


@pytest.mark.parametrize(
    ("machine", "placement"),
    [("a3-megagpu-8g", None), ("a3-highgpu-8g", None), ("a4-highgpu-8g", {"type": "COMPACT"})],
)
def test_flex_start_pool_placement_defaults_by_family(machine: str, placement: Any) -> None:
    # One node: across nodes a queued pool has no compact placement (test_gke_queued.py).
    cfg = load_stack_config(_stack(machine, flex_start=True, node_count=1))
    assert cfg.compute.compact_placement is (placement is not None)
    pool = _run(machine, flex_start=True, node_count=1).named("gpu-gpu-pool").inputs
    assert pool.get("placementPolicy") == placement


def test_gce_flex_start_keeps_its_placement_policy() -> None:
    # No Google source refuses compact placement to Compute Engine flex-start VMs.
    run = _run("a4-highgpu-8g", backend="gce", flex_start=True, max_run_seconds=3600)
    assert [r.inputs["name"] for r in run.of_type(POLICY)] == ["exp-42-a100-placement"]


# ------------------------------------------------------------------ D: images and CUDA floors


def test_hopper_cuda_floor_is_11_8() -> None:
    floors = {model: family.cuda_floor for model, family in GPU_FAMILIES.items()}
    assert floors == {
        "A100 40GB": "11.0",
        "A100 80GB": "11.0",
        "H100 80GB": "11.8",
        "H100 Mega 80GB": "11.8",
        "H200 141GB": "11.8",
        "B200": "12.8",
    }


@pytest.mark.parametrize(
    ("machine", "image"),
    [("a4-highgpu-8g", CUDA13), ("a3-ultragpu-8g", CUDA12), ("a3-megagpu-8g", CUDA12)],
)
def test_gke_torch_pods_run_the_image_with_the_gpus_code(machine: str, image: str) -> None:
    pod = _job_spec(_run(machine))["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == [image]


def test_tensorflow_trainer_is_refused_on_b200() -> None:
    trainer = {
        "framework": "tensorflow",
        "strategy": "multi_worker_mirrored",
        "model": "mlp",
        "steps": 10,
        "global_batch_size": 64,
    }
    assert _errors(_stack("a4-highgpu-8g", trainer=trainer)) == [
        "trainer.framework: the bundled tensorflow image tensorflow/tensorflow:2.17.0-gpu ships "
        "CUDA 12.3, older than CUDA 12.8, the first with native code for the B200; valid: "
        "framework torch (its image for the B200 is "
        "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime), or your own code in an image with "
        "CUDA 12.8 or later"
    ]


A4_IMAGE_NOTE = (
    f"the bundled torch trainer runs on {CUDA13} "
    "(pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime, CUDA 13.0): the B200 needs CUDA 12.8 or "
    "later and the default pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime (CUDA 12.6) has no "
    "kernels for it; torch 2.13 has no CUDA 12.8 build (pytorch/pytorch#187075). CUDA 13 "
    "needs an NVIDIA driver >= 580 on the machines"
)


def test_gke_plan_says_which_image_and_why() -> None:
    cfg = load_stack_config(_stack("a4-highgpu-8g"))
    notes = [n for n in GKE.plan_notes(cfg, "d") if "bundled torch trainer" in n]
    assert notes == [
        f"gpu_cluster: {A4_IMAGE_NOTE} (GKE installs gpu_driver_version LATEST; not checked "
        "offline)"
    ]
    assert GKE.torch_image(cfg.compute) == ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", None)


def _vertex(**overrides: Any) -> dict[str, Any]:
    section = {
        "machine_type": "a4-highgpu-8g",
        "accelerator_type": "NVIDIA_B200",
        "accelerator_count": 8,
        "replica_count": 2,
        **overrides,
    }
    return {**PROJECT, "trainstack:vertex": section}


def test_vertex_a4_runs_the_cuda13_image() -> None:
    body = custom_job_body(
        display_name="d",
        region="us-central1",
        machine_type="a4-highgpu-8g",
        replica_count=1,
        accelerator_type="NVIDIA_B200",
        accelerator_count=8,
        package_uri="gs://b/p.tar.gz",
        image_mirror="us-central1-docker.pkg.dev/p/hub",
    )
    [pool] = body["jobSpec"]["workerPoolSpecs"]
    assert pool["containerSpec"]["imageUri"] == (
        "us-central1-docker.pkg.dev/p/hub/pytorch/pytorch@"
        "sha256:db80a41f8428644cebcb3d75b0b62df334ab6c0e75785951eb25f48bfbd42407"
    )
    cfg = load_stack_config(_vertex())
    notes = [n for n in vertex_plan_notes(cfg, "d") if "bundled torch trainer" in n]
    assert notes == [f"vertex: {A4_IMAGE_NOTE} (the driver Vertex installs; not checked offline)"]


def test_vertex_tensorflow_on_b200_is_refused() -> None:
    raw = _vertex()
    raw["trainstack:trainer"] = {
        "framework": "tensorflow",
        "strategy": "multi_worker_mirrored",
        "model": "mlp",
        "steps": 10,
        "global_batch_size": 64,
    }
    assert _errors(raw) == [
        "trainer.framework: the bundled tensorflow image tensorflow/tensorflow:2.17.0-gpu ships "
        "CUDA 12.3, older than CUDA 12.8, the first with native code for the B200; valid: "
        "framework torch (its image for the B200 is "
        "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime), or your own code in an image with "
        "CUDA 12.8 or later"
    ]


# ------------------------------------------------------------------ E: queued provisioning


def test_multi_node_flex_start_note_says_all_nodes_come_at_once() -> None:
    note = flex_start_note("gke", 4, 2)
    assert note.startswith(
        "gpu_cluster.flex_start: the node pool has queued provisioning: the training Job's "
        "ProvisioningRequest asks for all 2 nodes at once, and GKE adds them together, in one "
        "zone, when Dynamic Workload Scheduler finds the capacity for all of them, with no "
        "bound on the wait; no node bills before then, and the Job's pods, waiting already, "
        "start on them at once (nodes no pod uses within 10 minutes are removed; without "
        "training the pool gets no request and stays empty) "
        "(https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest); each "
        "machine is deleted 4 h after it starts (limits.max_run_hours)"
    )
    assert flex_start_note("gke", 4, 1).startswith(
        "gpu_cluster.flex_start: the node pool has no nodes until the training pods ask for "
        "them; GKE adds them when Dynamic Workload Scheduler finds the capacity, with no bound "
        "on the wait; each machine is deleted 4 h after it starts"
    )


# ------------------------------------------------------------------ F: the Job's deadline


def test_flex_start_job_has_no_deadline_the_nodes_have_the_run_limit() -> None:
    run = _run("a3-megagpu-8g", flex_start=True, max_run_seconds=14400)
    assert "activeDeadlineSeconds" not in _job_spec(run)
    # Two nodes: the ProvisioningRequest carries it (tests/components/test_gke_queued.py).
    [request] = run.of_type("kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest")
    assert request.inputs["spec"]["parameters"] == {"maxRunDurationSeconds": "14400"}
    # Without flex-start the Job keeps its deadline.
    assert _job_spec(_run("a3-megagpu-8g", max_run_seconds=14400))["activeDeadlineSeconds"] == (
        14400
    )


def test_flex_start_run_limit_text() -> None:
    cfg = load_stack_config(_stack(flex_start=True, limits={"max_run_hours": 4}))
    assert GKE.run_limit(cfg, 14400) == (
        True,
        "each flex-start node's max_run_duration 14400s (no Job activeDeadlineSeconds: the Job "
        "waits for its nodes, and the wait must not count); then the supervisor sets the GPU "
        "node pool to 0 nodes",
    )


# ------------------------------------------------------------------ G: GKE version floors


def _gke_args(machine: str, version: str, **overrides: Any) -> dict[str, Any]:
    args = {**BASE, "machine_type": machine, "zone": ZONES[machine], "spot": False}
    return {**args, "kubernetes_version": version, **overrides}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            _gke_args("a3-megagpu-8g", "1.31"),
            [
                "kubernetes_version: '1.31' is too old for A3 Mega (a3-megagpu-8g) on GKE (the "
                "oldest version a Cluster Toolkit blueprint runs it on); valid: 1.32 or later"
            ],
        ),
        (
            _gke_args("a4-highgpu-8g", "1.34"),
            [
                "kubernetes_version: '1.34' is too old for A4 (a4-highgpu-8g) on GKE (the "
                "oldest version a Cluster Toolkit blueprint runs it on); valid: 1.35 or later"
            ],
        ),
        (
            _gke_args("a2-highgpu-8g", "1.31", flex_start=True),
            [
                "kubernetes_version: '1.31' is too old for GPU flex-start (GKE: "
                "1.32.2-gke.1652000 or later); valid: 1.32 or later"
            ],
        ),
        (_gke_args("a3-ultragpu-8g", "1.32", flex_start=True), []),
    ],
)
def test_gke_version_floors(args: dict[str, Any], expected: list[str]) -> None:
    assert a100_cluster_problems(args, prefix="") == expected


def test_tpu_flex_start_version_floor() -> None:
    args = {
        "accelerator_type": "v6e-16",
        "zone": "us-east5-b",
        "provisioning": "flex-start",
        "kubernetes_version": "1.32",
    }
    assert tpu_gke_slices_problems(args, "tpu.") == [
        "tpu.kubernetes_version: '1.32' is too old for TPU flex-start (GKE: 1.33.0-gke.1712000 "
        "or later); valid: 1.33 or later"
    ]
    assert tpu_gke_slices_problems({**args, "kubernetes_version": "1.33"}, "tpu.") == []


# ------------------------------------------------------------------ I: the nodes' subnet


def test_subnet_overlapping_the_fabric_is_refused() -> None:
    args = {**_gke_args("a3-megagpu-8g", "1.35"), "subnet_cidr": "192.168.16.0/20"}
    assert a100_cluster_problems(args, prefix="") == [
        "subnet_cidr: '192.168.16.0/20' overlaps the GPUDirect-TCPXO subnets of a3-megagpu-8g "
        "(192.168.0.0/17), and a node's network interfaces need ranges that do not overlap "
        "(https://cloud.google.com/vpc/docs/create-use-multiple-interfaces); valid: a range "
        "outside 192.168.0.0/17, e.g. 10.128.0.0/20"
    ]
    assert a100_cluster_problems({**args, "subnet_cidr": "192.168.128.0/20"}, prefix="") == []
    # A machine without a rendered fabric has no second network to clash with.
    a2 = {**_gke_args("a2-highgpu-8g", "1.35"), "subnet_cidr": "192.168.16.0/20"}
    assert a100_cluster_problems(a2, prefix="") == []

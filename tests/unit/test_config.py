"""Stack config validation: exact messages per key, and the plan estimates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainstack.infra.config import ConfigError, StackConfig, load_stack_config
from trainstack.infra.estimate import quota_needs, summarize

PROJECT = {"gcp:project": "p", "gcp:region": "us-central1"}
TF_TPU = {"trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"}}
V4 = {
    "gcp:project": "p",
    "gcp:region": "us-central2",
    "trainstack:tpu": {
        "accelerator_type": "v4-32",
        "zone": "us-central2-b",
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
        "provisioning": "spot",
    },
    **TF_TPU,
}
GPU = {
    **PROJECT,
    "trainstack:gpu_cluster": {
        "machine_type": "a2-highgpu-8g",
        "node_count": 2,
        "zone": "us-central1-a",
        "spot": True,
    },
}
VERTEX = {
    **PROJECT,
    "trainstack:vertex": {
        "machine_type": "a2-highgpu-8g",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 8,
        "replica_count": 4,
        "reduction_server": {"enabled": True, "replica_count": "auto"},
    },
}
LOCAL = {"trainstack:local": {"workers": 2}}


def with_(base: dict[str, Any], key: str, **changes: Any) -> dict[str, Any]:
    """`base` with `changes` merged into section `key` (None deletes a sub-key)."""
    section = {**base.get(key, {}), **changes}
    return {**base, key: {k: v for k, v in section.items() if v is not None}}


def errors_of(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


@pytest.mark.parametrize("raw", [V4, GPU, VERTEX, LOCAL], ids=["tpu", "gpu", "vertex", "local"])
def test_valid_targets(raw: dict[str, Any]) -> None:
    cfg = load_stack_config(raw)
    assert cfg.target == next(
        k.split(":")[1] for k in raw if k.startswith("trainstack:") and k != "trainstack:trainer"
    )


def test_defaults() -> None:
    cfg = load_stack_config(GPU)
    assert cfg.environment == "dev"
    assert cfg.labels == {}
    assert cfg.buckets.location == "US-CENTRAL1"
    assert cfg.buckets.checkpoint_retention_days == 30
    assert cfg.buckets.delete_data_on_destroy is False
    assert cfg.quotas.request_increases is False
    assert cfg.gpu_cluster is not None
    assert (cfg.gpu_cluster.backend, cfg.gpu_cluster.compact_placement) == ("gke", True)
    assert cfg.gpu_cluster.tier_1_networking is False
    local = load_stack_config({"trainstack:local": {}})
    assert local.local is not None
    assert (local.local.workers, local.local.root) == (2, None)  # the run's own folder
    assert local.buckets.location is None


def test_json_strings_as_the_engine_passes_them() -> None:
    raw = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in V4.items()}
    raw["trainstack:environment"] = "staging"
    raw["aws:region"] = "ignored"
    cfg = load_stack_config(raw)
    assert cfg.tpu is not None and cfg.tpu.slice.hosts == 4
    assert cfg.environment == "staging"


def test_generation_and_topology_form() -> None:
    raw = with_(V4, "trainstack:tpu", accelerator_type=None, generation="v4", topology="2x2x4")
    cfg = load_stack_config(raw)
    assert cfg.tpu is not None and cfg.tpu.slice.accelerator_type == "v4-32"


def test_runtime_config_is_read_when_raw_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import pulumi.runtime.config as rc

    monkeypatch.setattr(
        rc,
        "get_config_env",
        # 3 workers: the default batch of 256 does not split, 192 does.
        lambda: {
            "trainstack:local": '{"workers": 3}',
            "trainstack:trainer": '{"global_batch_size": 192}',
        },
    )
    cfg = load_stack_config()
    assert cfg.local is not None and cfg.local.workers == 3


def test_reducer_count() -> None:
    cfg = load_stack_config(VERTEX)
    assert cfg.vertex is not None and cfg.vertex.reducer_count() == 13
    fixed = with_(
        VERTEX, "trainstack:vertex", reduction_server={"enabled": True, "replica_count": 5}
    )
    vx = load_stack_config(fixed).vertex
    assert vx is not None and vx.reducer_count() == 5
    off = with_(VERTEX, "trainstack:vertex", reduction_server={"enabled": False})
    vx = load_stack_config(off).vertex
    assert vx is not None and vx.reducer_count() == 0


V4_SIZES = "v4-8, v4-16, v4-32, v4-64, v4-128, v4-256, v4-512, v4-1024, v4-1536, v4-2048, v4-4096"
A2 = (
    "a2-highgpu-1g, a2-highgpu-2g, a2-highgpu-4g, a2-highgpu-8g, a2-megagpu-16g, "
    "a2-ultragpu-1g, a2-ultragpu-2g, a2-ultragpu-4g, a2-ultragpu-8g, a3-highgpu-8g, "
    "a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g"
)
TPU_KEYS = (
    "accelerator_type, generation, topology, zone, runtime_version, provisioning, reservation, "
    "backend, slices"
)
GPU_KEYS = (
    "backend, machine_type, node_count, zone, spot, reservation, compact_placement, "
    "tier_1_networking, flex_start, master_authorized_cidrs"
)
TARGETS = "valid: exactly one of tpu, gpu_cluster, vertex, local"

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    # --- top level
    (
        "no target",
        {**PROJECT, "trainstack:environment": "dev"},
        [f"trainstack: no compute target given; {TARGETS}"],
    ),
    ("two targets", {**GPU, **LOCAL}, [f"trainstack: 2 compute targets given (gpu_cluster, local); {TARGETS}"]),
    ("unknown key", {**LOCAL, "trainstack:foo": 1}, ["foo: unknown key; valid: environment, labels, buckets, quotas, limits, tpu, gpu_cluster, vertex, local, trainer"]),
    ("no namespace", {**LOCAL, "tpu": {}}, ["tpu: config key without a namespace; valid: trainstack:tpu or gcp:tpu"]),
    ("environment", {**LOCAL, "trainstack:environment": "qa"}, ["environment: 'qa' is not allowed; valid: dev, staging, prod"]),
    ("project", {k: v for k, v in GPU.items() if k != "gcp:project"}, ["gcp:project: required for a gpu_cluster target; valid: a Google Cloud project id, e.g. my-ml-project"]),
    ("region", {k: v for k, v in VERTEX.items() if k != "gcp:region"}, ["gcp:region: required for a vertex target; valid: a Google Cloud region, e.g. us-central1"]),
    ("labels key", {**LOCAL, "trainstack:labels": {"Team": "ml"}}, ["labels: 'Team' is not a valid label key; valid: a lowercase letter then up to 62 of a-z, 0-9, '_', '-'"]),
    ("labels value", {**LOCAL, "trainstack:labels": {"team": "ML"}}, ["labels.team: 'ML' is not a valid label value; valid: up to 63 of a-z, 0-9, '_', '-'"]),
    ("labels long key", {**LOCAL, "trainstack:labels": {"a" * 64: "x"}}, [f"labels: '{'a' * 64}' is not a valid label key; valid: a lowercase letter then up to 62 of a-z, 0-9, '_', '-'"]),
    ("labels type", {**LOCAL, "trainstack:labels": {"team": 3}}, ["labels.team: 3 is not a string; valid: a string"]),
    # The stack sets `stack` and `environment` on every resource (infra/compose.py): a user's
    # would be overwritten without a word.
    ("labels stack", {**LOCAL, "trainstack:labels": {"stack": "prod-a100-gce"}}, ["labels: 'stack' is reserved by trainstack: the stack sets it on every resource; valid: a key other than component, environment, managed-by, stack"]),
    ("labels environment", {**LOCAL, "trainstack:labels": {"environment": "prod"}}, ["labels: 'environment' is reserved by trainstack: the stack sets it on every resource; valid: a key other than component, environment, managed-by, stack"]),
    # "No more than 64 labels can be associated with a given resource" (cloudresourcemanager.v3
    # discovery document): 59 and trainstack's 5 fit, 60 do not.
    ("labels over 64", {**GPU, "trainstack:labels": {f"k{i}": "v" for i in range(60)}}, ["labels: 60 labels plus the 5 trainstack sets on a resource (component, environment, managed-by, stack, and a Vertex job's or queued TPU's own) make 65, over the 64 Google Cloud allows on one resource; valid: at most 59 labels"]),
    # --- buckets
    ("retention", {**LOCAL, "trainstack:buckets": {"checkpoint_retention_days": 0}}, ["buckets.checkpoint_retention_days: 0 is too small; valid: >= 1"]),
    ("retention type", {**LOCAL, "trainstack:buckets": {"checkpoint_retention_days": "x"}}, ["buckets.checkpoint_retention_days: 'x' is not an integer; valid: a whole number"]),
    ("prod delete", {**LOCAL, "trainstack:environment": "prod", "trainstack:buckets": {"delete_data_on_destroy": True}}, ["buckets.delete_data_on_destroy: true is not allowed in prod; valid: false"]),
    ("bool", {**LOCAL, "trainstack:buckets": {"delete_data_on_destroy": "maybe"}}, ["buckets.delete_data_on_destroy: 'maybe' is not a boolean; valid: true, false"]),
    ("suffix", {**LOCAL, "trainstack:buckets": {"name_suffix": "-X"}}, ["buckets.name_suffix: '-X' is not a valid bucket name suffix; valid: 1-16 of a-z, 0-9 and '-', not starting or ending with '-'"]),
    ("buckets unknown", {**LOCAL, "trainstack:buckets": {"class": "x"}}, ["buckets.class: unknown key; valid: location, checkpoint_retention_days, delete_data_on_destroy, name_suffix"]),
    ("buckets type", {**LOCAL, "trainstack:buckets": 5}, ["buckets: 5 is not a mapping; valid: a mapping with keys: location, checkpoint_retention_days, delete_data_on_destroy, name_suffix"]),
    # --- quotas
    ("contact required", {**LOCAL, "trainstack:quotas": {"request_increases": True}}, ["quotas.contact_email: required when quotas.request_increases is true; valid: an email address (name@domain)"]),
    ("contact format", {**LOCAL, "trainstack:quotas": {"contact_email": "ops"}}, ["quotas.contact_email: 'ops' is not an email address; valid: name@domain"]),
    # --- tpu
    ("tpu size", with_(V4, "trainstack:tpu", accelerator_type="v4-12"), [f"tpu.accelerator_type: 'v4-12' is not a v4 slice; valid: {V4_SIZES}"]),
    ("tpu type", with_(V4, "trainstack:tpu", accelerator_type="v3-8"), ["tpu.accelerator_type: 'v3-8' is not a TPU type; valid: v4-N, v5litepod-N, v5p-N, v6e-N"]),
    ("tpu type by generation", with_(V4, "trainstack:tpu", accelerator_type="v5e-16"), ["tpu.accelerator_type: 'v5e-16' is not a TPU type; did you mean `v5litepod-16`? valid: v4-N, v5litepod-N, v5p-N, v6e-N"]),
    ("tpu type misspelt", with_(V4, "trainstack:tpu", accelerator_type="v6-8"), ["tpu.accelerator_type: 'v6-8' is not a TPU type; did you mean `v6e-8`? valid: v4-N, v5litepod-N, v5p-N, v6e-N"]),
    ("tpu type far", with_(V4, "trainstack:tpu", accelerator_type="v9-3"), ["tpu.accelerator_type: 'v9-3' is not a TPU type; valid: v4-N, v5litepod-N, v5p-N, v6e-N"]),
    ("tpu both forms", with_(V4, "trainstack:tpu", generation="v4"), ["tpu.accelerator_type: 'v4-32' given together with tpu.generation/tpu.topology; valid: one of the two forms"]),
    ("tpu no form", with_(V4, "trainstack:tpu", accelerator_type=None), ["tpu.accelerator_type: required (or tpu.generation with tpu.topology)"]),
    ("tpu topology", with_(V4, "trainstack:tpu", accelerator_type=None, generation="v4", topology="3x3x3"), ["tpu.topology: '3x3x3' is not a v4 topology; valid: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x8x12, 8x8x16, 8x16x16"]),
    ("tpu topology missing", with_(V4, "trainstack:tpu", accelerator_type=None, generation="v6e"), ["tpu.topology: required with tpu.generation; valid: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"]),
    ("tpu generation missing", with_(V4, "trainstack:tpu", accelerator_type=None, topology="2x2"), ["tpu.generation: required with tpu.topology; valid: v4, v5e, v5p, v6e"]),
    ("tpu generation enum", with_(V4, "trainstack:tpu", accelerator_type=None, generation="v7", topology="2x2"), ["tpu.generation: 'v7' is not allowed; valid: v4, v5e, v5p, v6e"]),
    ("tpu zone region", with_(V4, "trainstack:tpu", zone="us-east1-d"), ["tpu.zone: 'us-east1-d' is not in gcp:region 'us-central2'; valid: a zone named us-central2-<zone>"]),
    ("tpu zone offer", with_(V4, "trainstack:tpu", accelerator_type="v5litepod-16", zone="us-central2-b", runtime_version="v2-alpha-tpuv5-lite"), ["tpu.zone: 'us-central2-b' does not offer v5e; valid: us-central1-a, us-south1-a, us-west1-c, us-west4-a, europe-west4-b"]),
    ("tpu zone missing", with_(V4, "trainstack:tpu", zone=None), ["tpu.zone: required"]),
    ("tpu runtime family", with_(V4, "trainstack:tpu", runtime_version="v2-alpha-tpuv5"), ["tpu.runtime_version: 'v2-alpha-tpuv5' is not a v4 runtime; valid: tpu-ubuntu2204-base, tpu-vm-tf-X.Y.Z[-pod]-pjrt, tpu-vm-tf-X.Y.Z[-pod]-se (TF >= 2.15.0), tpu-vm-tf-X.Y.Z[-pod] (TF 2.10.1 to 2.14.x), tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5p-and-below (TF >= 2.18.0), tpu-vm-tf-X.Y.Z[-pod]-v4 (TF <= 2.10.0)"]),
    ("tpu runtime v5e", {**PROJECT, **TF_TPU, "trainstack:tpu": {"accelerator_type": "v5litepod-4", "zone": "us-central1-a", "runtime_version": "tpu-vm-tf-2.16.0"}}, ["tpu.runtime_version: 'tpu-vm-tf-2.16.0' is not a v5e runtime; valid: v2-alpha-tpuv5-lite, tpu-vm-tf-X.Y.Z[-pod]-pjrt (TF >= 2.15.0), tpu-vm-tf-X.Y.Z[-pod]-pjrt-v5e-and-v6 (TF >= 2.18.0)"]),
    ("tpu runtime needs pod", with_(V4, "trainstack:tpu", runtime_version="tpu-vm-tf-2.16.0-pjrt"), ["tpu.runtime_version: 'tpu-vm-tf-2.16.0-pjrt' is a single-host runtime but v4-32 has 4 hosts; valid: tpu-vm-tf-2.16.0-pod-pjrt"]),
    ("tpu runtime no pod", with_(V4, "trainstack:tpu", accelerator_type="v4-8", runtime_version="tpu-vm-tf-2.16.0-pod-pjrt"), ["tpu.runtime_version: 'tpu-vm-tf-2.16.0-pod-pjrt' is a multi-host (-pod) runtime but v4-8 is a single host; valid: tpu-vm-tf-2.16.0-pjrt"]),
    ("tpu runtime device api", with_(V4, "trainstack:tpu", runtime_version="tpu-vm-tf-2.16.0-pod"), ["tpu.runtime_version: 'tpu-vm-tf-2.16.0-pod' names no device API, which v4 runtimes carry from TF 2.15.0 on; valid: tpu-vm-tf-2.16.0-pod-pjrt, tpu-vm-tf-2.16.0-pod-se"]),
    ("tpu runtime empty", with_(V4, "trainstack:tpu", runtime_version=""), ["tpu.runtime_version: required; valid: a TPU software version, e.g. tpu-ubuntu2204-base"]),
    ("tpu provisioning", with_(V4, "trainstack:tpu", provisioning="cheap"), ["tpu.provisioning: 'cheap' is not allowed; valid: on-demand, spot, queued, reserved, flex-start"]),
    ("tpu spot reservation", with_(V4, "trainstack:tpu", reservation="r1"), ["tpu.reservation: 'r1' needs provisioning 'queued': a TPU VM created directly ('spot') can only consume any matching reservation, not name one; valid: provisioning queued, or provisioning reserved without tpu.reservation"]),
    ("tpu reserved names reservation", with_(V4, "trainstack:tpu", reservation="r1", provisioning="reserved"), ["tpu.reservation: 'r1' needs provisioning 'queued': a TPU VM created directly ('reserved') can only consume any matching reservation, not name one; valid: provisioning queued, or provisioning reserved without tpu.reservation"]),
    ("tpu runtime without tensorflow", with_(V4, "trainstack:tpu", runtime_version="tpu-ubuntu2204-base"), ["tpu.runtime_version: 'tpu-ubuntu2204-base' ships no TensorFlow, which the tensorflow trainer needs on v4-32; valid: tpu-vm-tf-X.Y.Z-pod-pjrt, tpu-vm-tf-X.Y.Z-pod-se (TF >= 2.15.0), tpu-vm-tf-X.Y.Z-pod (TF 2.10.1 to 2.14.x)"]),
    ("tpu unknown", with_(V4, "trainstack:tpu", foo=1), [f"tpu.foo: unknown key; valid: {TPU_KEYS}"]),
    ("tpu torch", {**V4, "trainstack:trainer": {"framework": "torch"}}, ["trainer.framework: 'torch' is not supported on a tpu target (TPU runs the tensorflow trainer with TPUStrategy); valid: tensorflow"]),
    ("tpu strategy", {**V4, "trainstack:trainer": {"framework": "tensorflow", "strategy": "mirrored"}}, ["trainer.strategy: 'mirrored' is not supported on a tpu target; valid: tpu"]),
    # --- gpu_cluster
    ("gpu nodes", with_(GPU, "trainstack:gpu_cluster", nodes=2), [f"gpu_cluster.nodes: unknown key; did you mean `node_count`? valid: {GPU_KEYS}"]),
    ("gpu machine", with_(GPU, "trainstack:gpu_cluster", machine_type="a2-ultragpu-16g"), [f"gpu_cluster.machine_type: 'a2-ultragpu-16g' is not a known GPU machine type; did you mean `a2-ultragpu-1g`? valid: {A2}"]),
    ("gpu zone region", with_(GPU, "trainstack:gpu_cluster", zone="us-east1-b"), ["gpu_cluster.zone: 'us-east1-b' is not in gcp:region 'us-central1'; valid: a zone named us-central1-<zone>"]),
    ("gpu zone offer", with_(GPU, "trainstack:gpu_cluster", machine_type="a2-ultragpu-8g", zone="us-central1-b"), ["gpu_cluster.zone: 'us-central1-b' does not offer A100 80GB (a2-ultragpu-8g); valid: asia-southeast1-c, europe-west4-a, us-central1-a, us-central1-c, us-east4-c, us-east5-b"]),
    ("gpu backend", with_(GPU, "trainstack:gpu_cluster", backend="slurm"), ["gpu_cluster.backend: 'slurm' is not allowed; valid: gke, gce"]),
    ("gpu nodes", with_(GPU, "trainstack:gpu_cluster", node_count=0), ["gpu_cluster.node_count: 0 is too small; valid: >= 1"]),
    ("gpu spot reservation", with_(GPU, "trainstack:gpu_cluster", reservation="r1"), ["gpu_cluster.reservation: 'r1' cannot be used with spot: true; valid: spot: false, or no reservation"]),
    ("gpu node limit", with_(GPU, "trainstack:gpu_cluster", node_count=1501), ["gpu_cluster.node_count: 1501 is too large; valid: <= 1000"]),
    ("gpu missing", {**PROJECT, "trainstack:gpu_cluster": {}}, ["gpu_cluster.machine_type: required", "gpu_cluster.zone: required"]),
    ("gpu tpu strategy", {**GPU, "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"}}, ["trainer.strategy: 'tpu' needs a tpu target; valid: mirrored, multi_worker_mirrored, parameter_server"]),
    # --- vertex
    ("vx machine", with_(VERTEX, "trainstack:vertex", machine_type="a3-edgegpu-8g"), ["vertex.machine_type: 'a3-edgegpu-8g' is not a known machine type; valid: " + A2 + ", n1-highcpu-16, n2-highcpu-16, n1-standard-4, n1-standard-8, e2-standard-4"]),
    ("vx h100 accel", with_(VERTEX, "trainstack:vertex", machine_type="a3-highgpu-8g"), ["vertex.accelerator_type: 'NVIDIA_TESLA_A100' does not match a3-highgpu-8g (H100 80GB); valid: NVIDIA_H100_80GB"]),
    ("vx accel type", with_(VERTEX, "trainstack:vertex", accelerator_type="NVIDIA_A100_80GB"), ["vertex.accelerator_type: 'NVIDIA_A100_80GB' does not match a2-highgpu-8g (A100 40GB); valid: NVIDIA_TESLA_A100"]),
    ("vx accel enum", with_(VERTEX, "trainstack:vertex", accelerator_type="nvidia-tesla-a100"), ["vertex.accelerator_type: 'nvidia-tesla-a100' is not allowed; valid: NVIDIA_TESLA_A100, NVIDIA_A100_80GB, NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB, NVIDIA_H200_141GB, NVIDIA_B200"]),
    ("vx accel count", with_(VERTEX, "trainstack:vertex", accelerator_count=4), ["vertex.accelerator_count: 4 does not match a2-highgpu-8g; valid: 8"]),
    ("vx cpu accel", with_(VERTEX, "trainstack:vertex", machine_type="n1-standard-8", accelerator_count=None, reduction_server=None), ["vertex.accelerator_type: 'NVIDIA_TESLA_A100' cannot attach to CPU machine type 'n1-standard-8'; valid: no accelerator_type (A100s come with a2-* machine types)"]),
    ("vx rs cpu", with_(VERTEX, "trainstack:vertex", machine_type="n1-standard-8", accelerator_type=None, accelerator_count=None), ["vertex.reduction_server.enabled: true needs GPU workers but 'n1-standard-8' has no GPUs; valid: false"]),
    ("vx rs single", with_(VERTEX, "trainstack:vertex", replica_count=1), ["vertex.reduction_server.enabled: true needs at least 2 worker machines (vertex.replica_count is 1); valid: false"]),
    ("vx rs machine", with_(VERTEX, "trainstack:vertex", reduction_server={"enabled": True, "machine_type": "a2-highgpu-1g"}), ["vertex.reduction_server.machine_type: 'a2-highgpu-1g' is not a Reduction Server machine type; valid: n1-highcpu-16, n2-highcpu-16"]),
    ("vx rs count", with_(VERTEX, "trainstack:vertex", reduction_server={"enabled": True, "replica_count": 0}), ["vertex.reduction_server.replica_count: 0 is not allowed; valid: 'auto' or an integer 1-9007199254740992"]),
    ("vx replicas", with_(VERTEX, "trainstack:vertex", replica_count=0), ["vertex.replica_count: 0 is too small; valid: >= 1"]),
    ("vx timeout", with_(VERTEX, "trainstack:vertex", timeout_s=0), ["vertex.timeout_s: 0 is too small; valid: > 0"]),
    ("vx hp parallel", with_(VERTEX, "trainstack:vertex", hyperparameter_tuning={"metric_id": "loss", "goal": "MINIMIZE", "max_trial_count": 2, "parallel_trial_count": 4, "parameters": [{"parameter_id": "learning_rate", "type": "double", "min_value": 0.1, "max_value": 0.01}]}), [
        "vertex.hyperparameter_tuning.parallel_trial_count: 4 exceeds max_trial_count 2; valid: <= 2",
        "vertex.hyperparameter_tuning.parameters[0].min_value: 0.1 is not below max_value 0.01; valid: min_value < max_value",
    ]),
    ("vx hp param", with_(VERTEX, "trainstack:vertex", hyperparameter_tuning={"metric_id": "loss", "goal": "LOWER", "max_trial_count": 2, "parallel_trial_count": 1, "parameters": [{"parameter_id": "lr", "type": "double", "bogus": 1}]}), [
        "vertex.hyperparameter_tuning.goal: 'LOWER' is not allowed; valid: MAXIMIZE, MINIMIZE",
        "vertex.hyperparameter_tuning.parameters[0].bogus: unknown key; valid: parameter_id, type, min_value, max_value, values, scale_type",
    ]),
    ("vx hp grid", with_(VERTEX, "trainstack:vertex", hyperparameter_tuning={"metric_id": "loss", "goal": "MINIMIZE", "algorithm": "GRID_SEARCH", "max_trial_count": 2, "parallel_trial_count": 1, "parameters": [{"parameter_id": "steps", "type": "categorical"}, {"parameter_id": "learning_rate", "type": "double", "min_value": 0.001, "max_value": 0.1}]}), [
        "vertex.hyperparameter_tuning.parameters[0].values: required for a categorical parameter; valid: a list of strings",
        "vertex.hyperparameter_tuning.algorithm: 'GRID_SEARCH' cannot search double parameter 'learning_rate'; valid: ALGORITHM_UNSPECIFIED, RANDOM_SEARCH",
    ]),
    ("vx hp empty", with_(VERTEX, "trainstack:vertex", hyperparameter_tuning={"metric_id": "loss", "goal": "MINIMIZE", "max_trial_count": 2, "parallel_trial_count": 1, "parameters": []}), ["vertex.hyperparameter_tuning.parameters: [] is too short; valid: at least 1 item(s)"]),
    # --- local and trainer
    ("local workers", {"trainstack:local": {"workers": 0}}, ["local.workers: 0 is too small; valid: >= 1"]),
    ("local unknown", {"trainstack:local": {"procs": 2}}, ["local.procs: unknown key; valid: workers, root"]),
    ("trainer steps", {**LOCAL, "trainstack:trainer": {"steps": 0}}, ["trainer.steps: 0 is too small; valid: > 0"]),
    ("trainer framework", {**LOCAL, "trainstack:trainer": {"framework": "jax"}}, ["trainer.framework: 'jax' is not allowed; valid: torch, tensorflow"]),
    ("trainer strategy", {**LOCAL, "trainstack:trainer": {"strategy": "mirrored"}}, ["trainer.strategy: 'mirrored' is not a torch strategy; valid: ddp, fsdp"]),
    ("trainer data_path", {**LOCAL, "trainstack:trainer": {"dataset": "files"}}, ["trainer.data_path: required when dataset is 'files'"]),
    ("trainer unknown", {**LOCAL, "trainstack:trainer": {"epochs": 3}}, ["trainer.epochs: unknown key; valid: " + ", ".join([*__import__("trainstack.trainers.common.config", fromlist=["TrainConfig"]).TrainConfig.model_fields, "source", "image", "requirements", "entrypoint", "launcher", "env", "secret_env"])]),
    # --- several at once
    ("collects all", {**PROJECT, "trainstack:environment": "qa", "trainstack:local": {"workers": 0}, "trainstack:quotas": {"request_increases": True}}, [
        "environment: 'qa' is not allowed; valid: dev, staging, prod",
        "local.workers: 0 is too small; valid: >= 1",
        "quotas.contact_email: required when quotas.request_increases is true; valid: an email address (name@domain)",
    ]),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_errors(raw: dict[str, Any], expected: list[str]) -> None:
    assert errors_of(raw) == expected


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ValueError, match="trainstack: no compute target given"):
        StackConfig()


SUMMARIES: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = [
    (
        "v4-32 spot",
        V4,
        {"tpu_chips": 16, "gpus": 0, "machines": 4, "hourly_usd": 20.61, "supervisor_usd_per_month": 0.31},
        [{"service": "tpu.googleapis.com", "quota_id": "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI", "dimensions": {"zone": "us-central2-b"}, "needed": 16, "verified": False}],
    ),
    (
        "v5e 4x4 on-demand",
        {**PROJECT, **TF_TPU, "trainstack:tpu": {"generation": "v5e", "topology": "4x4", "zone": "us-central1-a", "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt"}},
        {"tpu_chips": 16, "gpus": 0, "machines": 4, "hourly_usd": 19.2, "supervisor_usd_per_month": 0.31},
        [{"service": "tpu.googleapis.com", "quota_id": "TPUV5sLitepodPerProjectPerZoneForTPUAPI", "dimensions": {"zone": "us-central1-a"}, "needed": 16, "verified": False}],
    ),
    (
        "2 x a2-highgpu-8g spot gke",
        GPU,
        {"tpu_chips": 0, "gpus": 16, "machines": 3, "hourly_usd": 23.74, "supervisor_usd_per_month": 0.31},
        [
            {"service": "compute.googleapis.com", "quota_id": "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region", "dimensions": {"region": "us-central1"}, "needed": 16, "verified": True},
            {"service": "compute.googleapis.com", "quota_id": "GPUS-ALL-REGIONS-per-project", "dimensions": {}, "needed": 16, "verified": True},
            {"service": "compute.googleapis.com", "quota_id": "A2-CPUS-per-project-region", "dimensions": {"region": "us-central1"}, "needed": 192, "verified": False},
            {"service": "compute.googleapis.com", "quota_id": "CPUS-per-project-region", "dimensions": {"region": "us-central1"}, "needed": 4, "verified": False},
        ],
    ),
    (
        "1 x a2-ultragpu-8g gce",
        with_(GPU, "trainstack:gpu_cluster", backend="gce", machine_type="a2-ultragpu-8g", node_count=1, spot=False),
        {"tpu_chips": 0, "gpus": 8, "machines": 1, "hourly_usd": 40.55, "supervisor_usd_per_month": 0.31},
        [
            {"service": "compute.googleapis.com", "quota_id": "NVIDIA-A100-80GB-GPUS-per-project-region", "dimensions": {"region": "us-central1"}, "needed": 8, "verified": True},
            {"service": "compute.googleapis.com", "quota_id": "GPUS-ALL-REGIONS-per-project", "dimensions": {}, "needed": 8, "verified": True},
            {"service": "compute.googleapis.com", "quota_id": "A2-CPUS-per-project-region", "dimensions": {"region": "us-central1"}, "needed": 96, "verified": False},
        ],
    ),
    (
        "vertex 4 x a2-highgpu-8g + 13 reducers",
        VERTEX,
        {"tpu_chips": 0, "gpus": 32, "machines": 17, "hourly_usd": 143.65},
        [
            {"service": "aiplatform.googleapis.com", "quota_id": "CustomModelTrainingA100GPUsPerProjectPerRegion", "dimensions": {"region": "us-central1"}, "needed": 32, "verified": True},
            {"service": "aiplatform.googleapis.com", "quota_id": "CustomModelTrainingCPUsPerProjectPerRegion", "dimensions": {"region": "us-central1"}, "needed": 208, "verified": False},
        ],
    ),
    (
        "vertex cpu",
        {**PROJECT, "trainstack:vertex": {"machine_type": "n1-standard-8", "replica_count": 2}},
        {"tpu_chips": 0, "gpus": 0, "machines": 2, "hourly_usd": 0.87},
        [{"service": "aiplatform.googleapis.com", "quota_id": "CustomModelTrainingCPUsPerProjectPerRegion", "dimensions": {"region": "us-central1"}, "needed": 16, "verified": False}],
    ),
    (
        "local",
        {"trainstack:local": {"workers": 3}, "trainstack:trainer": {"global_batch_size": 192}},
        {"tpu_chips": 0, "gpus": 0, "machines": 3, "hourly_usd": 0.0},
        [],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "summary", "quota"), [s[1:] for s in SUMMARIES], ids=[s[0] for s in SUMMARIES]
)
def test_summarize_and_quota(
    raw: dict[str, Any], summary: dict[str, Any], quota: list[dict[str, Any]]
) -> None:
    cfg = load_stack_config(raw)
    assert summarize(cfg) == summary
    needs = quota_needs(cfg)
    assert [{k: v for k, v in n.items() if k != "source"} for n in needs] == quota
    assert all(n["source"] for n in needs)

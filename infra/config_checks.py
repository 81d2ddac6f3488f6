"""The stack config's cross-key and catalog checks (`trainstack.infra.config.load_stack_config` runs them
once each section parsed): one compute target, project and region for a cloud target,
labels, buckets and quotas, the target section against the catalog, your own code's keys, the
trainer against its target and image, and the global batch against the world size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.components.catalog.batch import (
    WorldSize,
    batch_problem,
    gpu_world_size,
    local_world_size,
    tpu_world_size,
)
from trainstack.components.catalog.images import (
    DEFAULT_EXECUTOR_IMAGE,
    DLVM_IMAGE,
    KUBERNETES_IMAGES,
)
from trainstack.components.catalog.names import label_problems, zone_in_region_problems
from trainstack.components.catalog.problems import quote as _q
from trainstack.components.catalog.torch_versions import fsdp_problem
from trainstack.components.catalog.tpu import default_tpu_runtime
from trainstack.components.tpu_pod_slice import tpu_pod_slice_problems, tpu_trainer_problems
from trainstack.components.tpu_supervisor import max_total_usd_problem
from trainstack.components.training_buckets import training_buckets_problems
from trainstack.components.vertex_training_job import vertex_job_spec_problems
from trainstack.infra.config import (
    _EMAIL,
    NAMESPACE,
    PROJECT_ROOT,
    TARGETS,
    BucketsConfig,
    GpuClusterConfig,
    QuotasConfig,
    TpuConfig,
    VertexConfig,
)
from trainstack.trainers.common.config import TF_STRATEGIES, TrainConfig
from trainstack.trainers.common.contract import TORCH_MODULE
from trainstack.trainers.common.user_code import StackTrainer, user_code_problems


def semantic_errors(parts: Mapping[str, Any], given: list[str]) -> list[str]:
    """Cross-key and catalog checks. `parts` holds only sections that parsed cleanly."""
    errors: list[str] = []
    if len(given) == 0:
        errors.append(
            f"{NAMESPACE}: no compute target given; valid: exactly one of {', '.join(TARGETS)}"
        )
    elif len(given) > 1:
        errors.append(
            f"{NAMESPACE}: {len(given)} compute targets given ({', '.join(given)}); "
            f"valid: exactly one of {', '.join(TARGETS)}"
        )
    target = given[0] if len(given) == 1 else None
    region: str | None = parts.get("region")
    if target is not None and target != "local":
        for key in ("project", "region"):
            if not parts.get(key) and key in parts:
                errors.append(f"gcp:{key}: required for a {target} target")

    if parts.get("labels") is not None:
        errors += label_problems(parts["labels"], "labels")
    errors += _check_buckets_quotas(parts)

    trainer: StackTrainer | None = parts.get("trainer")
    target_errors: list[str] = []
    if target == "tpu" and parts.get("tpu") is not None:
        own_code = trainer is not None and trainer.user_code is not None
        target_errors = _check_tpu(parts["tpu"], region, own_code)
    if target == "gpu_cluster" and parts.get("gpu_cluster") is not None:
        target_errors = check_gpu_cluster(parts["gpu_cluster"], region)
    if target == "vertex" and parts.get("vertex") is not None:
        # Tuning your own code may search any of its flags, not only the bundled trainer's.
        bundled = trainer is None or trainer.user_code is None
        target_errors = vertex_job_spec_problems(parts["vertex"].job_args(), "vertex.", bundled)
    errors += target_errors
    cap = getattr(parts.get("limits"), "max_total_usd", None)
    problem = max_total_usd_problem(cap, "limits.max_total_usd", target) if cap else None
    errors += [problem] if problem and target else []
    if trainer is not None and target is not None:
        errors += user_code_problems(trainer, target, PROJECT_ROOT)
        errors += _gce_image_problems(trainer, target, parts.get("gpu_cluster"))
    if trainer is not None and target is not None and trainer.user_code is None:
        trainer_errors = _check_trainer(trainer, target, parts.get("gpu_cluster"))
        image = _torch_image(parts, target) if trainer.framework == "torch" else None
        if image is not None:
            fsdp = fsdp_problem(image[0], trainer.strategy, "trainer.", image_key=image[1])
            trainer_errors += [fsdp] if fsdp else []
        errors += trainer_errors
        # The world size is only known once the target section and the strategy are valid.
        world = None if target_errors or trainer_errors else _world_size(parts, target, trainer)
        if world is not None:
            problem = batch_problem(trainer.global_batch_size, trainer.grad_accum_steps, world)
            errors += [problem] if problem else []
            if target == "vertex" and parts["vertex"].hyperparameter_tuning is not None:
                errors += _tuned_batch_problems(parts["vertex"], trainer, world)
    return errors


_BATCH_KEYS = ("global_batch_size", "grad_accum_steps")


def _tuned_batch_problems(vx: VertexConfig, trainer: TrainConfig, world: WorldSize) -> list[str]:
    """Every tuned global_batch_size / grad_accum_steps value checked as the fixed one is
    (`batch_problem`), since each trial runs with it; a range is refused because its values
    cannot be listed and most would not split."""
    assert vx.hyperparameter_tuning is not None
    at = "vertex.hyperparameter_tuning.parameters"
    tried: dict[str, list[tuple[int, str]]] = {}
    errors: list[str] = []
    for i, param in enumerate(vx.hyperparameter_tuning.parameters):
        if param.parameter_id not in _BATCH_KEYS:
            continue
        if param.type in ("integer", "double"):
            errors.append(
                f"{at}[{i}].type: {_q(param.type)} searches a range of trainer."
                f"{param.parameter_id}, whose every value must split over the world size "
                f"{world.size} ({world.how}); valid: discrete or categorical, listing the values"
            )
            continue
        for value in param.values or []:
            number = float(value) if _is_number_text(value) else None
            if number is None or not number.is_integer() or number < 1:
                shown = int(value) if isinstance(value, float) and value.is_integer() else value
                errors.append(
                    f"{at}[{i}].values: {_q(shown)} is not a whole number >= 1; valid: whole "
                    f"numbers for trainer.{param.parameter_id}"
                )
            else:
                tried.setdefault(param.parameter_id, []).append((int(number), f"{at}[{i}].values"))
    if not tried:
        return errors  # no listed value: the fixed ones are checked already
    sizes = tried.get("global_batch_size") or [(trainer.global_batch_size, "")]
    steps = tried.get("grad_accum_steps") or [(trainer.grad_accum_steps, "")]
    for size, size_key in sizes:
        for accum, accum_key in steps:
            problem = batch_problem(size, accum, world)
            if problem:
                errors.append(f"{size_key or accum_key}: a trial would fail: {problem}")
    return errors


def _is_number_text(value: float | str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return not isinstance(value, bool)


def _world_size(parts: Mapping[str, Any], target: str, trainer: TrainConfig) -> WorldSize | None:
    """The replicas the target's trainer splits the global batch over
    (`trainstack.components.catalog.batch`)."""
    framework, strategy = trainer.framework, trainer.strategy
    if target == "tpu" and parts.get("tpu") is not None:
        tpu: TpuConfig = parts["tpu"]
        return tpu_world_size(tpu.slice.accelerator_type, tpu.slice.chips)
    if target == "gpu_cluster" and parts.get("gpu_cluster") is not None:
        gpu: GpuClusterConfig = parts["gpu_cluster"]
        return gpu_world_size(
            framework, strategy, machines=gpu.node_count, gpus_per_machine=gpu.machine.gpus
        )
    if target == "vertex" and parts.get("vertex") is not None:
        vx: VertexConfig = parts["vertex"]
        return gpu_world_size(
            framework, strategy, machines=vx.replica_count, gpus_per_machine=vx.gpus_per_replica
        )
    if target == "local" and parts.get("local") is not None:
        return local_world_size(framework, strategy, parts["local"].workers)
    return None


def _check_buckets_quotas(parts: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    buckets: BucketsConfig | None = parts.get("buckets")
    if buckets is not None:
        args = {
            **buckets.model_dump(exclude_none=True),
            "environment": parts.get("environment", "dev"),
        }
        errors += training_buckets_problems(args, "buckets.")
    quotas: QuotasConfig | None = parts.get("quotas")
    if quotas is not None:
        if quotas.request_increases and not quotas.contact_email:
            errors.append("quotas.contact_email: required when quotas.request_increases is true")
        if quotas.contact_email and not _EMAIL.fullmatch(quotas.contact_email):
            errors.append(
                f"quotas.contact_email: {_q(quotas.contact_email)} is not an email address; "
                "expected name@domain"
            )
    return errors


def _check_zone_in_region(section: str, zone: str, region: str | None) -> list[str]:
    return zone_in_region_problems(zone, region, f"{section}.zone")


def _check_tpu(tpu: TpuConfig, region: str | None, own_code: bool = False) -> list[str]:
    errors = _check_zone_in_region("tpu", tpu.zone, region)
    args = tpu.model_dump(exclude_none=True)
    if tpu.runtime_version is None:
        # Unset after `with_default_runtime` only when the slice is unknown; with no slice no
        # runtime is checked, so a stand-in lets the slice's own problem be reported.
        filled = tpu.with_default_runtime("tensorflow").runtime_version
        args["runtime_version"] = filled or default_tpu_runtime("v4", "tensorflow", False)
    # Your code brings its own framework (JAX on a base runtime): no TensorFlow needed.
    problems = tpu_pod_slice_problems(args, "tpu.", user_code=own_code)
    # A zone outside the region is already reported; do not report the zone twice.
    return errors + [p for p in problems if not (errors and p.startswith("tpu.zone: "))]


def check_gpu_cluster(gpu: GpuClusterConfig, region: str | None) -> list[str]:
    errors = _check_zone_in_region("gpu_cluster", gpu.zone, region)
    problems = a100_cluster_problems(gpu.model_dump(), prefix="gpu_cluster.", shape_only=True)
    # A zone outside the region is already reported; do not report the zone twice.
    return errors + [p for p in problems if not (errors and p.startswith("gpu_cluster.zone: "))]


def _torch_image(parts: Mapping[str, Any], target: str) -> tuple[str, str | None] | None:
    """The image the torch trainer runs in on `target`, and the key that picks another."""
    vx: VertexConfig | None = parts.get("vertex")
    if target == "vertex" and vx is not None:
        return vx.image_uri or DEFAULT_EXECUTOR_IMAGE, "vertex.image_uri"
    gpu: GpuClusterConfig | None = parts.get("gpu_cluster")
    if target == "gpu_cluster" and gpu is not None:
        return (DLVM_IMAGE if gpu.backend == "gce" else KUBERNETES_IMAGES[TORCH_MODULE]), None
    return None


def _gce_image_problems(
    trainer: StackTrainer, target: str, gpu: GpuClusterConfig | None
) -> list[str]:
    if trainer.image is None or target != "gpu_cluster" or gpu is None or gpu.backend != "gce":
        return []
    return [
        (
            "trainer.image: not supported on gpu_cluster backend 'gce' (its VMs boot the Deep "
            "Learning VM image and run no container); valid: trainer.source, or "
            "gpu_cluster.backend gke"
        )
    ]


def _check_trainer(
    trainer: TrainConfig, target: str, gpu: GpuClusterConfig | None = None
) -> list[str]:
    if gpu is not None and gpu.backend == "gce" and trainer.framework == "tensorflow":
        return [
            (
                "trainer.framework: 'tensorflow' is not supported on gpu_cluster backend 'gce' "
                "(its Deep Learning VM image carries PyTorch only); valid: torch, or "
                "gpu_cluster.backend gke"
            )
        ]
    if target == "tpu":
        return tpu_trainer_problems(trainer.framework, trainer.strategy, "trainer.")
    if trainer.strategy == "tpu":
        valid = ", ".join(s for s in TF_STRATEGIES if s != "tpu")
        return [f"trainer.strategy: 'tpu' needs a tpu target; valid: {valid}"]
    return []

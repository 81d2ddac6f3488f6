"""Stack configuration: the `trainstack:*` keys of a stack file, validated once.

`load_stack_config()` reads the flat stack config (`gcp:project`, `gcp:region`,
`trainstack:tpu`, ...), checks structure with pydantic and facts against
`infra.catalog`, and raises one `ConfigError` listing every problem, one per line, each as
`<dotted.key.path>: <what is wrong>; valid: <allowed values>`. Nothing is registered with
Pulumi before this returns, so a bad stack fails in `trainstack plan` and in
`pulumi preview` with the same message.

Example::

    cfg = load_stack_config({"gcp:project": "p", "gcp:region": "us-central2",
                             "trainstack:tpu": {"accelerator_type": "v4-32",
                                                "zone": "us-central2-b",
                                                "runtime_version": "tpu-vm-tf-2.16.0-pod",
                                                "provisioning": "spot"},
                             "trainstack:trainer": {"framework": "tensorflow",
                                                    "strategy": "tpu"}})
    cfg.target  # "tpu"
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from components.a100_cluster.validate import a100_cluster_problems
from infra import catalog
from infra.tpu_rules import tensorflow_runtime_problem, tpu_slice_problems
from trainers.common.config import TF_STRATEGIES, TrainConfig

NAMESPACE = "trainstack"
GCP_KEYS = ("gcp:project", "gcp:region", "gcp:zone")
TARGETS: tuple[str, ...] = ("tpu", "gpu_cluster", "vertex", "local")
Target = Literal["tpu", "gpu_cluster", "vertex", "local"]

_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_NAME_SUFFIX = re.compile(r"[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class ConfigError(ValueError):
    """Invalid stack config. `str()` is the full message, one problem per line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors: list[str] = list(errors)
        """One line per problem: `<dotted.key.path>: <what is wrong>[; valid: ...]`."""
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


def _q(value: Any) -> str:
    """Quote a bad value the way the user wrote it (YAML-ish for non-strings)."""
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _auto_or_count(value: Any) -> Any:
    # A plain `int | Literal["auto"]` makes pydantic report one error per union member.
    if value == "auto":
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) >= 1:
        return int(value)
    raise PydanticCustomError(
        "trainstack",
        "{value} is not allowed; valid: 'auto' or an integer >= 1",
        {"value": _q(value)},
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BucketsConfig(_Model):
    """`trainstack:buckets`: the checkpoint/data buckets."""

    location: str | None = None
    """GCS location; defaults to gcp:region upper-cased (same region as the compute)."""
    checkpoint_retention_days: int = Field(default=30, ge=1)
    """Checkpoint objects older than this are deleted by a lifecycle rule."""
    delete_data_on_destroy: bool = False
    """Let `pulumi destroy` delete non-empty buckets (force_destroy). Rejected in prod."""
    name_suffix: str | None = None
    """Opt-in suffix for the global bucket namespace (1-16 of a-z, 0-9, '-')."""


class QuotasConfig(_Model):
    """`trainstack:quotas`: quota preflight and increase requests."""

    request_increases: bool = False
    """Create Cloud Quotas preferences for what the stack needs."""
    contact_email: str | None = None
    """Required by Cloud Quotas for increase requests."""
    skip_preflight: bool = False
    """Skip the quota check (capacity comes from a specific reservation)."""


class TpuConfig(_Model):
    """`trainstack:tpu`: a Cloud TPU slice. Give `accelerator_type` or generation+topology."""

    accelerator_type: str | None = None
    """e.g. `v4-32`, `v5litepod-16`, `v5p-8`, `v6e-4`."""
    generation: catalog.TpuGenerationName | None = None
    topology: str | None = None
    """Chip topology with `generation`, e.g. `2x2x4`."""
    zone: str
    runtime_version: str
    """Required: runtime versions drift, so there is no default."""
    provisioning: Literal["on-demand", "spot", "queued", "reserved"] = "on-demand"
    reservation: str | None = None
    """Reservation name; only with provisioning `reserved` or `queued`."""

    @property
    def slice(self) -> catalog.TpuSlice:
        """The catalog slice this config names (valid after `load_stack_config`)."""
        found: catalog.TpuSlice | None = None
        if self.accelerator_type:
            found = catalog.tpu_slice(self.accelerator_type)
        elif self.generation and self.topology:
            found = catalog.TPU_GENERATIONS[self.generation].slice_for_topology(self.topology)
        if found is None:
            raise ValueError("tpu: no valid slice; validate with load_stack_config first")
        return found

    @property
    def spot(self) -> bool:
        """Spot capacity (preemptible quota and price)."""
        return self.provisioning == "spot"


class GpuClusterConfig(_Model):
    """`trainstack:gpu_cluster`: A100 machines on GKE or plain Compute Engine."""

    backend: Literal["gke", "gce"] = "gke"
    machine_type: str
    """An A2 machine type, e.g. `a2-highgpu-8g`."""
    node_count: int = Field(default=1, ge=1)
    zone: str
    spot: bool = False
    reservation: str | None = None
    """Specific reservation to consume; not with spot."""
    compact_placement: bool = True
    tier_1_networking: bool = False

    @property
    def machine(self) -> catalog.MachineType:
        """Catalog entry of `machine_type`."""
        return catalog.A2_MACHINES[self.machine_type]

    @property
    def total_gpus(self) -> int:
        """GPUs across all nodes."""
        return self.machine.gpus * self.node_count


class ReductionServerConfig(_Model):
    """`trainstack:vertex.reduction_server`: Vertex Reduction Server (worker pool 2)."""

    enabled: bool = False
    replica_count: Annotated[int | Literal["auto"], BeforeValidator(_auto_or_count)] = "auto"
    """`auto` sizes reducers so their egress covers the workers' (catalog.reducers_needed)."""
    machine_type: str = catalog.DEFAULT_REDUCER_MACHINE


class HyperparameterConfig(_Model):
    """One searched trainer key; values arrive as `--<parameter_id>=<value>` flags."""

    parameter_id: str
    type: Literal["double", "integer", "categorical", "discrete"]
    min_value: float | None = None
    max_value: float | None = None
    values: list[float | str] | None = None
    scale_type: Literal["UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"] | None = (
        None
    )


class HyperparameterTuningConfig(_Model):
    """`trainstack:vertex.hyperparameter_tuning`: run a HyperparameterTuningJob instead."""

    metric_id: str
    goal: Literal["MAXIMIZE", "MINIMIZE"]
    parameters: list[HyperparameterConfig] = Field(min_length=1)
    algorithm: Literal["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"] = (
        "ALGORITHM_UNSPECIFIED"
    )
    max_trial_count: int = Field(ge=1)
    parallel_trial_count: int = Field(ge=1)
    max_failed_trial_count: int = Field(default=0, ge=0)
    """0 lets Vertex decide."""


class VertexConfig(_Model):
    """`trainstack:vertex`: a Vertex AI CustomJob (optionally with Reduction Server)."""

    machine_type: str
    accelerator_type: Literal["NVIDIA_TESLA_A100", "NVIDIA_A100_80GB"] | None = None
    """Vertex enum; defaults to the GPU of an A2 machine type."""
    accelerator_count: int | None = Field(default=None, ge=1)
    """Defaults to the GPU count of an A2 machine type."""
    replica_count: int = Field(default=1, ge=1)
    """Machines including the chief (pool 0 has 1, pool 1 the rest)."""
    reduction_server: ReductionServerConfig = ReductionServerConfig()
    spot: bool = False
    region: str | None = None
    """Vertex location; defaults to gcp:region."""
    service_account: str | None = None
    image_uri: str | None = None
    """Training container; None lets the job component pick its prebuilt image."""
    timeout_s: int | None = Field(default=None, gt=0)
    """Job timeout; None keeps Vertex's default (7 days)."""
    hyperparameter_tuning: HyperparameterTuningConfig | None = None

    @property
    def machine(self) -> catalog.MachineType:
        """Catalog entry of `machine_type`."""
        return catalog.MACHINES[self.machine_type]

    @property
    def gpus_per_replica(self) -> int:
        """GPUs on each replica (0 for CPU machines)."""
        return self.machine.gpus

    @property
    def vertex_accelerator_type(self) -> str | None:
        """The Vertex accelerator enum for the machine, None for CPU machines."""
        model = self.machine.gpu_model
        return catalog.GPU_ACCELERATOR_NAMES[model].vertex if model else None

    def reducer_count(self) -> int:
        """Reduction Server replicas: 0 when disabled, `auto` resolved from the catalog."""
        rs = self.reduction_server
        if not rs.enabled:
            return 0
        if rs.replica_count == "auto":
            return catalog.reducers_needed(self.machine_type, self.replica_count, rs.machine_type)
        return rs.replica_count


class LocalConfig(_Model):
    """`trainstack:local`: run the trainer as processes on this machine."""

    workers: int = Field(default=2, ge=1)
    root: str = ".trainstack/local"
    """Holds the local stand-ins for the buckets."""


class StackConfig(_Model):
    """The whole validated stack config. Build it with `load_stack_config`."""

    project: str | None = None
    """`gcp:project`."""
    region: str | None = None
    """`gcp:region`."""
    zone: str | None = None
    """`gcp:zone` (provider default; targets carry their own zone)."""
    environment: Literal["dev", "staging", "prod"] = "dev"
    labels: dict[str, str] = {}
    buckets: BucketsConfig = BucketsConfig()
    quotas: QuotasConfig = QuotasConfig()
    tpu: TpuConfig | None = None
    gpu_cluster: GpuClusterConfig | None = None
    vertex: VertexConfig | None = None
    local: LocalConfig | None = None
    trainer: TrainConfig = TrainConfig()

    @property
    def target(self) -> Target:
        """The one compute target this stack runs on."""
        for name in TARGETS:
            if getattr(self, name) is not None:
                return name  # type: ignore[return-value]
        raise ValueError("no compute target; build StackConfig with load_stack_config")

    @model_validator(mode="before")
    @classmethod
    def _default_bucket_location(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("region"):
            return data
        buckets = data.get("buckets")
        location = str(data["region"]).upper()
        if buckets is None:
            return {**data, "buckets": {"location": location}}
        if isinstance(buckets, BucketsConfig) and buckets.location is None:
            return {**data, "buckets": buckets.model_copy(update={"location": location})}
        if isinstance(buckets, dict) and buckets.get("location") is None:
            return {**data, "buckets": {**buckets, "location": location}}
        return data

    @model_validator(mode="after")
    def _semantics(self) -> StackConfig:
        parts = {name: getattr(self, name) for name in type(self).model_fields}
        given = [t for t in TARGETS if parts[t] is not None]
        errors = _semantic_errors(parts, given)
        if errors:
            raise ValueError("\n".join(errors))
        return self


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------


def _section_field(key: str) -> str:
    # Stack keys and model fields share names, except the gcp:* provider keys.
    return {"gcp:project": "project", "gcp:region": "region", "gcp:zone": "zone"}.get(key, key)


def _decode(value: Any) -> Any:
    """The Pulumi engine passes objects as JSON strings; stack files as parsed objects."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _runtime_config() -> dict[str, Any]:
    import pulumi.runtime.config as runtime_config

    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


@cache
def _adapter(field: str) -> TypeAdapter[Any]:
    info = StackConfig.model_fields[field]
    return TypeAdapter(cast(Any, info.annotation))


def load_stack_config(raw: Mapping[str, Any] | None = None) -> StackConfig:
    """Validate a flat stack config mapping and return the `StackConfig`.

    `raw` is the stack file's `config:` mapping (`{"gcp:project": "p", "trainstack:tpu":
    {...}}`); values may be parsed objects or JSON strings. With None, every key is read
    from the Pulumi runtime. Keys of other namespaces are ignored except `gcp:project`,
    `gcp:region` and `gcp:zone`; unknown `trainstack:*` keys are errors. Raises
    `ConfigError` listing every problem found.
    """
    if raw is None:
        raw = _runtime_config()
    errors: list[str] = []
    values: dict[str, Any] = {}
    section_names = [f for f in StackConfig.model_fields if f not in ("project", "region", "zone")]
    for key, value in raw.items():
        if key in GCP_KEYS:
            values[_section_field(key)] = value
            continue
        namespace, sep, name = key.partition(":")
        if not sep:
            errors.append(
                f"{key}: config key without a namespace; expected {NAMESPACE}:{key} or gcp:{key}"
            )
        elif namespace == NAMESPACE:
            if name in section_names:
                values[name] = _decode(value)
            else:
                errors.append(f"{name}: unknown key; valid: {', '.join(section_names)}")

    parts: dict[str, Any] = {}
    failed: set[str] = set()
    for name in StackConfig.model_fields:
        if name not in values:
            parts[name] = StackConfig.model_fields[name].get_default(call_default_factory=True)
            continue
        try:
            parts[name] = _adapter(name).validate_python(values[name])
        except ValidationError as exc:
            failed.add(name)
            errors.extend(convert_error(name, e) for e in exc.errors())
    given = [t for t in TARGETS if values.get(t) is not None]
    errors.extend(_semantic_errors({k: v for k, v in parts.items() if k not in failed}, given))
    if errors:
        raise ConfigError(errors)
    return StackConfig.model_validate(parts)


# ------------------------------------------------------------------------------------------
# pydantic error -> "<path>: <message>; valid: ..."
# ------------------------------------------------------------------------------------------


def _find_model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    origin = get_origin(tp)
    if origin in (Union, types.UnionType, list, Annotated):
        for arg in get_args(tp):
            found = _find_model(arg)
            if found is not None:
                return found
    return None


def _model_at(section: str, loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    model = _find_model(StackConfig.model_fields[section].annotation)
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        model = _find_model(info.annotation) if info else None
    return model


def _path(section: str, loc: tuple[int | str, ...]) -> str:
    path = section
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def convert_error(section: str, err: ErrorDetails) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    path = _path(section, loc)
    if kind == "missing":
        return f"{path}: required"
    if kind == "extra_forbidden":
        parent = _model_at(section, loc[:-1])
        valid = ", ".join(parent.model_fields) if parent else "(none)"
        return f"{path}: unknown key; valid: {valid}"
    if kind == "literal_error":
        allowed = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return f"{path}: {_q(value)} is not allowed; valid: {allowed}"
    if kind == "value_error" and section == "trainer" and not loc:
        return _trainer_model_error(str(ctx.get("error", err["msg"])))
    simple = {
        "int_type": "is not an integer",
        "int_parsing": "is not an integer",
        "int_from_float": "is not an integer",
        "float_type": "is not a number",
        "float_parsing": "is not a number",
        "string_type": "is not a string",
        "list_type": "is not a list",
    }
    if kind in simple:
        return f"{path}: {_q(value)} {simple[kind]}"
    if kind in ("bool_type", "bool_parsing"):
        return f"{path}: {_q(value)} is not a boolean; valid: true, false"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        model = _model_at(section, loc)
        keys = f"; expected a mapping with keys: {', '.join(model.model_fields)}" if model else ""
        return f"{path}: {_q(value)} is not a mapping{keys}"
    bounds = {
        "greater_than_equal": ("ge", "is too small", ">="),
        "greater_than": ("gt", "is too small", ">"),
        "less_than_equal": ("le", "is too large", "<="),
        "less_than": ("lt", "is too large", "<"),
    }
    if kind in bounds:
        key, what, op = bounds[kind]
        return f"{path}: {_q(value)} {what}; expected {op} {ctx.get(key)}"
    if kind == "too_short":
        return (
            f"{path}: {_q(value)} is too short; expected at least {ctx.get('min_length')} item(s)"
        )
    if kind == "trainstack":
        return f"{path}: {err['msg']}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{path}: {msg} (got {_q(value)})"


def _trainer_model_error(message: str) -> str:
    # TrainConfig's cross-field checks start with the field name: "strategy 'x' is not ...".
    head, _, rest = message.partition(" ")
    if head in TrainConfig.model_fields and rest:
        return f"trainer.{head}: {rest.removeprefix('is ')}"
    return f"trainer: {message}"


# ------------------------------------------------------------------------------------------
# Checks against the catalog
# ------------------------------------------------------------------------------------------


def _semantic_errors(parts: Mapping[str, Any], given: list[str]) -> list[str]:
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

    errors += _check_labels(parts.get("labels"))
    errors += _check_buckets_quotas(parts)

    trainer: TrainConfig | None = parts.get("trainer")
    if target == "tpu" and parts.get("tpu") is not None:
        errors += _check_tpu(parts["tpu"], region, trainer.framework if trainer else None)
    if target == "gpu_cluster" and parts.get("gpu_cluster") is not None:
        errors += check_gpu_cluster(parts["gpu_cluster"], region)
    if target == "vertex" and parts.get("vertex") is not None:
        errors += _check_vertex(parts["vertex"])
    if trainer is not None and target is not None:
        errors += _check_trainer(trainer, target, parts.get("gpu_cluster"))
    return errors


def _check_buckets_quotas(parts: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    buckets: BucketsConfig | None = parts.get("buckets")
    if buckets is not None:
        if buckets.delete_data_on_destroy and parts.get("environment") == "prod":
            errors.append(
                "buckets.delete_data_on_destroy: true is not allowed in prod; valid: false"
            )
        if buckets.name_suffix is not None and not _NAME_SUFFIX.fullmatch(buckets.name_suffix):
            errors.append(
                f"buckets.name_suffix: {_q(buckets.name_suffix)} is not a valid bucket name "
                "suffix; expected 1-16 of a-z, 0-9 and '-', not starting or ending with '-'"
            )
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


def _check_labels(labels: Mapping[str, str] | None) -> list[str]:
    errors: list[str] = []
    for key, value in (labels or {}).items():
        if not _LABEL_KEY.fullmatch(key):
            errors.append(
                f"labels: {_q(key)} is not a valid label key; expected a lowercase letter "
                "then up to 62 of a-z, 0-9, '_', '-'"
            )
        if not _LABEL_VALUE.fullmatch(value):
            errors.append(
                f"labels.{key}: {_q(value)} is not a valid label value; expected up to 63 "
                "of a-z, 0-9, '_', '-'"
            )
    return errors


def _check_zone_in_region(section: str, zone: str, region: str | None) -> list[str]:
    if region and not zone.startswith(region + "-"):
        return [
            (
                f"{section}.zone: {_q(zone)} is not in gcp:region {_q(region)}; "
                f"valid: a zone named {region}-<zone>"
            )
        ]
    return []


def _check_tpu(tpu: TpuConfig, region: str | None, framework: str | None) -> list[str]:
    errors = _check_zone_in_region("tpu", tpu.zone, region)
    slice_, problems = tpu_slice_problems(
        accelerator_type=tpu.accelerator_type,
        generation=tpu.generation,
        topology=tpu.topology,
        zone=tpu.zone,
        runtime_version=tpu.runtime_version,
        prefix="tpu.",
    )
    # A zone outside the region is already reported; do not report the zone twice.
    errors += [p for p in problems if not (errors and p.startswith("tpu.zone: "))]
    if slice_ is not None and not errors and framework == "tensorflow":
        errors += tensorflow_runtime_problem(tpu.runtime_version, slice_, "tpu.runtime_version")
    if tpu.reservation is not None and tpu.provisioning != "queued":
        errors.append(
            f"tpu.reservation: {_q(tpu.reservation)} needs provisioning 'queued': a TPU VM "
            f"created directly ({_q(tpu.provisioning)}) can only consume any matching "
            "reservation, not name one; valid: provisioning queued, or provisioning reserved "
            "without tpu.reservation"
        )
    return errors


def check_gpu_cluster(gpu: GpuClusterConfig, region: str | None) -> list[str]:
    errors = _check_zone_in_region("gpu_cluster", gpu.zone, region)
    problems = a100_cluster_problems(gpu.model_dump(), prefix="gpu_cluster.", shape_only=True)
    # A zone outside the region is already reported; do not report the zone twice.
    return errors + [p for p in problems if not (errors and p.startswith("gpu_cluster.zone: "))]


def _check_vertex(vx: VertexConfig) -> list[str]:
    errors: list[str] = []
    machine = catalog.MACHINES.get(vx.machine_type)
    if machine is None:
        return [
            (
                f"vertex.machine_type: {_q(vx.machine_type)} is not a known machine type; "
                f"valid: {', '.join(catalog.MACHINES)}"
            )
        ]
    if machine.gpu_model is not None:
        expected = catalog.GPU_ACCELERATOR_NAMES[machine.gpu_model].vertex
        if vx.accelerator_type is not None and vx.accelerator_type != expected:
            errors.append(
                f"vertex.accelerator_type: {_q(vx.accelerator_type)} does not match "
                f"{vx.machine_type} ({machine.gpu_model}); valid: {expected}"
            )
        if vx.accelerator_count is not None and vx.accelerator_count != machine.gpus:
            errors.append(
                f"vertex.accelerator_count: {vx.accelerator_count} does not match "
                f"{vx.machine_type}; valid: {machine.gpus}"
            )
    else:
        if vx.accelerator_type is not None:
            errors.append(
                f"vertex.accelerator_type: {_q(vx.accelerator_type)} cannot attach to CPU "
                f"machine type {_q(vx.machine_type)}; expected no accelerator_type (A100s come "
                "with a2-* machine types)"
            )
        if vx.accelerator_count is not None:
            errors.append(
                f"vertex.accelerator_count: {vx.accelerator_count} cannot attach to CPU "
                f"machine type {_q(vx.machine_type)}; expected no accelerator_count"
            )
    rs = vx.reduction_server
    if rs.enabled:
        if machine.gpus == 0:
            errors.append(
                f"vertex.reduction_server.enabled: true needs GPU workers but "
                f"{_q(vx.machine_type)} has no GPUs; valid: false"
            )
        elif vx.replica_count < 2:
            errors.append(
                "vertex.reduction_server.enabled: true needs at least 2 worker machines "
                f"(vertex.replica_count is {vx.replica_count}); valid: false"
            )
        if rs.machine_type not in catalog.REDUCTION_SERVER_MACHINES:
            errors.append(
                f"vertex.reduction_server.machine_type: {_q(rs.machine_type)} is not a "
                f"Reduction Server machine type; valid: "
                f"{', '.join(catalog.REDUCTION_SERVER_MACHINES)}"
            )
    if vx.hyperparameter_tuning is not None:
        errors += _check_hp(vx.hyperparameter_tuning)
    return errors


def _check_hp(hp: HyperparameterTuningConfig) -> list[str]:
    base = "vertex.hyperparameter_tuning"
    errors: list[str] = []
    if hp.parallel_trial_count > hp.max_trial_count:
        errors.append(
            f"{base}.parallel_trial_count: {hp.parallel_trial_count} exceeds max_trial_count "
            f"{hp.max_trial_count}; expected <= {hp.max_trial_count}"
        )
    for i, p in enumerate(hp.parameters):
        at = f"{base}.parameters[{i}]"
        if p.parameter_id not in TrainConfig.model_fields:
            errors.append(
                f"{at}.parameter_id: {_q(p.parameter_id)} is not a trainer key; "
                f"valid: {', '.join(TrainConfig.model_fields)}"
            )
        if p.type in ("double", "integer"):
            for key in ("min_value", "max_value"):
                if getattr(p, key) is None:
                    errors.append(f"{at}.{key}: required for a {p.type} parameter")
            if p.min_value is not None and p.max_value is not None and p.min_value >= p.max_value:
                errors.append(
                    f"{at}.min_value: {_q(p.min_value)} is not below max_value "
                    f"{_q(p.max_value)}; expected min_value < max_value"
                )
            if p.values is not None:
                errors.append(f"{at}.values: not used by a {p.type} parameter; expected none")
        else:
            if not p.values:
                errors.append(f"{at}.values: required for a {p.type} parameter")
            if p.min_value is not None or p.max_value is not None:
                errors.append(
                    f"{at}.min_value: not used by a {p.type} parameter; expected values instead"
                )
        if hp.algorithm == "GRID_SEARCH" and p.type == "double":
            errors.append(
                f"{base}.algorithm: 'GRID_SEARCH' cannot search double parameter "
                f"{_q(p.parameter_id)}; valid: ALGORITHM_UNSPECIFIED, RANDOM_SEARCH"
            )
    return errors


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
        if trainer.framework != "tensorflow":
            return [
                (
                    f"trainer.framework: {_q(trainer.framework)} is not supported on a tpu target "
                    "(TPU runs the tensorflow trainer with TPUStrategy); valid: tensorflow"
                )
            ]
        if trainer.strategy != "tpu":
            return [
                (
                    f"trainer.strategy: {_q(trainer.strategy)} is not supported on a tpu target; "
                    "valid: tpu"
                )
            ]
    elif trainer.strategy == "tpu":
        valid = ", ".join(s for s in TF_STRATEGIES if s != "tpu")
        return [f"trainer.strategy: 'tpu' needs a tpu target; valid: {valid}"]
    return []

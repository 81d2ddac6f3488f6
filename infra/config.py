"""Stack configuration: the `trainstack:*` keys of a stack file, validated once.

`load_stack_config()` reads the flat stack config (`gcp:project`, `gcp:region`,
`trainstack:tpu`, ...), checks structure with pydantic and everything else with the rules
the components check their own arguments with (`tpu_pod_slice_problems`,
`vertex_job_spec_problems`, `training_buckets_problems`, `label_problems`, over the facts in
`trainstack.components.catalog`), called with the section's key prefix (`tpu.`, `vertex.`,
`buckets.`). It raises one `ConfigError` listing every problem, one per line, each as
`<dotted.key.path>: <what is wrong>; valid: <allowed values>`. Nothing is registered with
Pulumi before this returns, so a bad stack fails in `trainstack plan` and in
`pulumi preview` with the same message, and a component built directly with the same
values fails with the same words.

Example::

    cfg = load_stack_config({"gcp:project": "p", "gcp:region": "us-central2",
                             "trainstack:tpu": {"accelerator_type": "v4-32",
                                                "zone": "us-central2-b",
                                                "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
                                                "provisioning": "spot"},
                             "trainstack:trainer": {"framework": "tensorflow",
                                                    "strategy": "tpu"}})
    cfg.target  # "tpu"
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from trainstack.components import catalog
from trainstack.components.a100_cluster.validate import A100Shape, cidr_problem
from trainstack.components.catalog.gpus import VertexAcceleratorType
from trainstack.components.catalog.problems import pydantic_problem, unknown_key
from trainstack.components.catalog.tpu import (
    TpuGenerationName,
    TpuProvisioning,
    TpuSlice,
    default_tpu_runtime,
    tpu_slice,
)
from trainstack.components.catalog.vertex import (
    DEFAULT_MEASUREMENT_SELECTION,
    DEFAULT_REDUCER_MACHINE,
    Algorithm,
    Goal,
    MeasurementSelectionType,
    ParameterType,
    ScaleType,
    reducer_count,
    reducer_count_problem,
    reducer_count_value,
    vertex_accelerators,
)
from trainstack.components.tpu_supervisor import max_total_usd_problem
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.user_code import StackTrainer

NAMESPACE = "trainstack"
GCP_KEYS = ("gcp:project", "gcp:region", "gcp:zone")
TARGETS: tuple[str, ...] = ("tpu", "gpu_cluster", "vertex", "local")
Target = Literal["tpu", "gpu_cluster", "vertex", "local"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""Beside Pulumi.yaml: relative `trainer.source` and `local.root` paths start here."""

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class ConfigError(ValueError):
    """Invalid stack config. `str()` is the full message, one problem per line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors: list[str] = list(errors)
        """One line per problem: `<dotted.key.path>: <what is wrong>[; valid: ...]`."""
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


def _auto_or_count(value: Any) -> Any:
    # A plain `int | Literal["auto"]` makes pydantic report one error per union member.
    count = reducer_count_value(value)
    if count is None:
        raise PydanticCustomError(
            "trainstack", "{problem}", {"problem": reducer_count_problem(value)}
        )
    return count


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BucketsConfig(_Model):
    """`trainstack:buckets`: the checkpoint/data buckets (`TrainingBuckets` arguments)."""

    location: str | None = None
    """GCS location; defaults to gcp:region upper-cased (same region as the compute)."""
    checkpoint_retention_days: int = 30
    """Checkpoint objects older than this are deleted by a lifecycle rule (1-3650)."""
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
    """`trainstack:tpu`: a Cloud TPU slice (`TpuPodSlice` arguments). Give
    `accelerator_type` or generation+topology."""

    accelerator_type: str | None = None
    """e.g. `v4-32`, `v5litepod-16`, `v5p-8`, `v6e-4`."""
    generation: TpuGenerationName | None = None
    topology: str | None = None
    """Chip topology with `generation`, e.g. `2x2x4`."""
    zone: str
    runtime_version: str | None = None
    """Default: the newest runtime the catalog knows for the generation and the trainer's
    framework (`trainstack.components.catalog.tpu.default_tpu_runtime`); the plan names it."""
    provisioning: TpuProvisioning = "on-demand"
    reservation: str | None = None
    """Reservation name; only with provisioning `queued`."""

    @property
    def slice(self) -> TpuSlice:
        """The catalog slice this config names (valid after `load_stack_config`)."""
        found: TpuSlice | None = None
        if self.accelerator_type:
            found = tpu_slice(self.accelerator_type)
        elif self.generation and self.topology:
            found = catalog.TPU_GENERATIONS[self.generation].slice_for_topology(self.topology)
        if found is None:
            raise ValueError("tpu: no valid slice; validate with load_stack_config first")
        return found

    @property
    def spot(self) -> bool:
        """Spot capacity (preemptible quota and price)."""
        return self.provisioning == "spot"

    def with_default_runtime(self, framework: str) -> TpuConfig:
        """This section with `runtime_version` filled in when not given and the slice is
        known (`trainstack.components.catalog.tpu.default_tpu_runtime`); else unchanged."""
        if self.runtime_version is not None:
            return self
        try:
            found = self.slice
        except ValueError:
            return self  # the slice problem is reported; there is no runtime to pick
        runtime = default_tpu_runtime(found.generation, framework, found.multi_host)
        return self.model_copy(update={"runtime_version": runtime})


def _cidr(value: Any) -> str:
    """One authorized-network block, by the component's own rule (`cidr_problem`)."""
    problem = cidr_problem(value)
    if problem:
        raise PydanticCustomError("trainstack", problem.replace("{", "{{").replace("}", "}}"))
    return str(value)


class GpuClusterConfig(A100Shape):
    """`trainstack:gpu_cluster`: A100 machines on GKE or plain Compute Engine; the section is
    the A100Cluster component's own shape (so the stack config and the component parse the
    machines alike) plus `master_authorized_cidrs`."""

    master_authorized_cidrs: list[Annotated[str, BeforeValidator(_cidr)]] | None = None
    """gke: the only networks that may reach the cluster's public control-plane endpoint
    (GKE authorized networks,
    https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks); unset, any
    address may try, and only IAM authentication stands in the way."""

    @field_validator("master_authorized_cidrs")
    @classmethod
    def _gke_only(cls, cidrs: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if cidrs == []:
            raise PydanticCustomError(
                "trainstack",
                "[] names no network (the cluster would stay open to any address); list at "
                "least one CIDR block or remove the key",
            )
        backend = info.data.get("backend")
        if cidrs is not None and backend != "gke":
            raise PydanticCustomError(
                "trainstack",
                "applies to backend 'gke' only (the GKE control plane); backend {backend} has "
                "none: remove the key",
                {"backend": repr(backend)},
            )
        return cidrs


class ReductionServerConfig(_Model):
    """`trainstack:vertex.reduction_server`: Vertex Reduction Server (worker pool 2)."""

    enabled: bool = False
    replica_count: Annotated[int | Literal["auto"], BeforeValidator(_auto_or_count)] = "auto"
    """`auto` sizes reducers so their egress covers the workers'
    (`trainstack.components.catalog.vertex.reducers_needed`)."""
    machine_type: str = DEFAULT_REDUCER_MACHINE


class HyperparameterConfig(_Model):
    """One searched trainer key, in the REST `ParameterSpec` vocabulary that
    `VertexTrainingJob` takes; values arrive as `--<parameter_id>=<value>` flags."""

    parameter_id: str
    type: ParameterType
    min_value: float | None = None
    max_value: float | None = None
    values: list[float | str] | None = None
    scale_type: ScaleType | None = None


class HyperparameterTuningConfig(_Model):
    """`trainstack:vertex.hyperparameter_tuning`: run a HyperparameterTuningJob instead."""

    metric_id: str
    goal: Goal
    parameters: list[HyperparameterConfig] = Field(min_length=1)
    algorithm: Algorithm = "ALGORITHM_UNSPECIFIED"
    max_trial_count: int = Field(ge=1)
    parallel_trial_count: int = Field(ge=1)
    max_failed_trial_count: int = Field(default=0, ge=0)
    """0 lets Vertex decide."""
    measurement_selection_type: MeasurementSelectionType = DEFAULT_MEASUREMENT_SELECTION
    """Which measurement of a trial counts: the best (default, as Google's SDK sends) or
    the last (Vertex's choice when unset); your code may report every epoch."""


class VertexConfig(_Model):
    """`trainstack:vertex`: a Vertex AI CustomJob (optionally with Reduction Server)."""

    machine_type: str
    accelerator_type: VertexAcceleratorType | None = None
    """Vertex enum; optional where the machine type fixes it (A2), checked when given."""
    accelerator_count: int | None = Field(default=None, ge=1)
    """Optional where the machine type fixes it (A2), checked when given."""
    replica_count: int = Field(default=1, ge=1)
    """Machines including the chief (pool 0 has 1, pool 1 the rest)."""
    reduction_server: ReductionServerConfig = ReductionServerConfig()
    spot: bool = False
    region: str | None = None
    """Vertex location; defaults to gcp:region."""
    service_account: str | None = None
    image_uri: str | None = None
    """The image the bundled trainer runs in (the trainer package is installed into its
    python3 at start); None: the framework's image (`trainstack.components.catalog.images`)."""
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
        return vertex_accelerators(self.machine_type)[1]

    def reducer_count(self) -> int:
        """Reduction Server replicas: 0 when disabled, `auto` resolved from the catalog."""
        rs = self.reduction_server.model_dump()
        return reducer_count(rs, self.machine_type, self.replica_count)

    def job_args(self) -> dict[str, Any]:
        """The `VertexTrainingJob` arguments this section gives, under their own names."""
        return self.model_dump(
            exclude_none=True, exclude={"region", "service_account", "image_uri"}
        )


class LocalConfig(_Model):
    """`trainstack:local`: run the trainer as processes on this machine."""

    workers: int = Field(default=2, ge=1)
    root: str = ".trainstack/local"
    """Holds the local stand-ins for the buckets."""


class LimitsConfig(_Model):
    """`trainstack:limits`: guardrails on what a stack may cost and how long it may run."""

    max_hourly_usd: float | None = Field(default=None, gt=0)
    """`trainstack plan` and `pulumi preview` fail when the stack's estimated $/hour
    (`trainstack.infra.estimate.summarize`) is above this."""
    max_run_hours: float | None = Field(default=None, gt=0)
    """Training ends after this long, by the platform's own means (Vertex `timeout`, the GKE
    Job's `activeDeadlineSeconds`, the GCE and TPU run limit), and on tpu and gpu_cluster
    stacks the supervisor then stops the compute; the plan says how, per target."""
    max_total_usd: float | None = None
    """The run's spend cap at list price (tpu and gpu_cluster stacks): the supervisor counts
    the compute's spend across restarts and recoveries, asks the trainer to save and stop
    once it is reached, then stops the compute (`trainstack.components.tpu_supervisor`)."""

    @field_validator("max_total_usd", mode="before")
    @classmethod
    def _spend_cap(cls, value: Any) -> Any:
        problem = None if value is None else max_total_usd_problem(value, "max_total_usd")
        if problem:
            raise PydanticCustomError("trainstack", problem.split(": ", 1)[1])
        return value

    @property
    def max_run_seconds(self) -> int | None:
        """`max_run_hours` in whole seconds (at least 1), or None."""
        if self.max_run_hours is None:
            return None
        return max(1, round(self.max_run_hours * 3600))


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
    limits: LimitsConfig = LimitsConfig()
    tpu: TpuConfig | None = None
    gpu_cluster: GpuClusterConfig | None = None
    vertex: VertexConfig | None = None
    local: LocalConfig | None = None
    trainer: StackTrainer = StackTrainer()
    """The bundled trainer's keys, or your own code's (`trainer.entrypoint`)."""

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
        from trainstack.infra.config_checks import (
            semantic_errors,  # it imports this module's models
        )

        errors = semantic_errors(parts, given)
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
                errors.append(unknown_key(name, name, section_names))

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
    if parts.get("tpu") is not None and "tpu" not in failed:
        trainer = parts["trainer"] if "trainer" not in failed else TrainConfig()
        # Your own code gets the generation's base runtime: it brings its own framework.
        own = getattr(trainer, "user_code", None) is not None
        parts["tpu"] = parts["tpu"].with_default_runtime("own" if own else trainer.framework)
    given = [t for t in TARGETS if values.get(t) is not None]
    from trainstack.infra.config_checks import semantic_errors  # it imports this module's models

    errors.extend(semantic_errors({k: v for k, v in parts.items() if k not in failed}, given))
    if errors:
        raise ConfigError(errors)
    cfg = StackConfig.model_validate(parts)
    # The estimate needs a valid stack, so the cost limit is checked last.
    from trainstack.infra.estimate import (
        limit_problems,  # trainstack.infra.estimate imports this module
    )

    problems = limit_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


# ------------------------------------------------------------------------------------------
# pydantic error -> "<path>: <message>; valid: ..."
# ------------------------------------------------------------------------------------------


def convert_error(section: str, err: ErrorDetails) -> str:
    """One pydantic error of stack section `section` as a problem line."""
    if err["type"] == "value_error" and section == "trainer" and not err["loc"]:
        return _trainer_model_error(str((err.get("ctx") or {}).get("error", err["msg"])))
    return pydantic_problem(err, section, StackConfig.model_fields[section].annotation)


def _trainer_model_error(message: str) -> str:
    # TrainConfig's cross-field checks start with the field name: "strategy 'x' is not ...".
    head, _, rest = message.partition(" ")
    if head in TrainConfig.model_fields and rest:
        return f"trainer.{head}: {rest.removeprefix('is ')}"
    return f"trainer: {message}"


# ------------------------------------------------------------------------------------------
# Checks against the catalog, with the components' rules
# ------------------------------------------------------------------------------------------

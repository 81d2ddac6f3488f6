"""Stack configuration: the `trainstack:*` keys of a stack file, validated once.

`load_stack_config()` reads the flat stack config (`gcp:project`, `gcp:region`,
`trainstack:tpu`, ...), checks structure with pydantic and everything else with the rules
the components check their own arguments with (`tpu_pod_slice_problems`,
`vertex_job_spec_problems`, `training_buckets_problems`, `label_problems`, over the facts in
`trainstack.components.catalog`), called with the section's key prefix (`tpu.`, `vertex.`,
`buckets.`); each compute target's section is parsed with its target module's model and
checked by it (`trainstack.infra.targets`). It raises one `ConfigError` listing every problem, one per line, each as
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

import difflib
import json
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    TypeAdapter,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import ErrorDetails

from trainstack.components.catalog.problems import pydantic_problem, unknown_key
from trainstack.infra import targets
from trainstack.infra.config_checks import NAMESPACE, semantic_errors
from trainstack.infra.config_secrets import pulumi_secrets
from trainstack.infra.config_sections import BucketsConfig, LimitsConfig, QuotasConfig
from trainstack.infra.estimate import limit_problems
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.user_code import StackTrainer

GCP_KEYS = ("gcp:project", "gcp:region", "gcp:zone")


class ConfigError(ValueError):
    """Invalid stack config. `str()` is the full message, one problem per line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors: list[str] = list(errors)
        """One line per problem: `<dotted.key.path>: <what is wrong>[; valid: ...]`."""
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


class NotATrainstackStack(ConfigError):
    """A stack config with no `trainstack:*` key at all: most likely a stack of the user's
    own Pulumi program, which `trainstack plan --program DIR --stack NAME` plans."""

    def __init__(self) -> None:
        line = (
            f"the stack file has no `{NAMESPACE}:` keys, so it is not a trainstack stack; "
            f"valid: a `{NAMESPACE}:<target>` key (one of {', '.join(targets.sections())}), or, for a "
            "stack of your own Pulumi program, `trainstack plan --program DIR --stack NAME`"
        )
        super().__init__([line])


_TYPO_RATIO = 0.85
"""How near a namespace must be to `trainstack` to be called a misspelling (difflib's
ratio): one letter dropped, added, changed or swapped (`trainstak` 0.95, `trainstcak` 0.9);
another program's namespace is rarely this near."""


def namespace_typo(key: str) -> str | None:
    """`trainstak:local: unknown namespace; did you mean `trainstack:`? ...` for a key whose
    namespace is a near miss of `trainstack` (which would otherwise be ignored as another
    program's key), else None."""
    namespace, sep, name = key.partition(":")
    # Case counts: Pulumi reads `TrainStack:` as another namespace, which this program never
    # sees, so a case variant is a misspelling too (and its keys are lower case).
    lowered = namespace.lower()
    if not sep or namespace in (NAMESPACE, "gcp"):
        return None
    if NAMESPACE in lowered and lowered != NAMESPACE:
        return None  # `mytrainstack:` is a project's own namespace, not a misspelling
    if difflib.SequenceMatcher(None, lowered, NAMESPACE).ratio() < _TYPO_RATIO:
        return None
    return (
        f"{key}: unknown namespace `{namespace}:`; did you mean `{NAMESPACE}:`? "
        f"valid: {NAMESPACE}:{name.lower()}"
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


GENERIC_SECTIONS = ("environment", "labels", "buckets", "quotas", "limits")
"""Stack sections before the compute target's; `trainer` comes after it."""


class StackConfig(_Model):
    """The whole validated stack config. Build it with `load_stack_config`.

    The compute target's section is in `sections` under its stack key, exactly one after
    validation; `compute` is it and `target` its key, `trainstack.infra.targets.target_of`
    the target it selects. `cfg.<key>` reads a registered section's key (None when the stack
    runs on another target), so `cfg.tpu.zone` works for scripts and tests. The target hooks
    take it as a `trainstack.infra.config_sections.StackView` (they sit below this module).
    """

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
    trainer: StackTrainer = StackTrainer()
    """The bundled trainer's keys, or your own code's (`trainer.entrypoint`)."""
    secrets: frozenset[str] = frozenset()
    """The keys whose values are Pulumi secrets (`trainer.env.NAME`,
    `trainstack.infra.config_secrets`): everything derived from them is registered secret."""
    sections: dict[str, Any] = {}
    """Stack key -> the compute target's parsed section (its target module's model)."""

    @property
    def target(self) -> str:
        """The stack key of the one compute target this stack runs on (`tpu`,
        `gpu_cluster`, `vertex`, `local`, or a registered target's)."""
        for name in self.sections:
            return name
        raise ValueError("no compute target; build StackConfig with load_stack_config")

    @property
    def compute(self) -> Any:
        """The compute target's section (the model of its target module)."""
        return self.sections[self.target]

    def __getattr__(self, name: str) -> Any:
        if name in targets.sections():
            return self.__dict__.get("sections", {}).get(name)
        return BaseModel.__getattr__(self, name)  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _gather_sections(cls, data: Any) -> Any:
        # A section given by its stack key (`StackConfig(tpu=...)`, the loader's parts).
        if not isinstance(data, dict):
            return data
        keys = targets.sections()
        given = {k: v for k, v in data.items() if k in keys and v is not None}
        rest = {k: v for k, v in data.items() if k not in keys}
        if given:
            rest["sections"] = {**rest.get("sections", {}), **given}
        return rest

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
        parts.update({key: self.sections.get(key) for key in targets.sections()})
        errors = semantic_errors(parts, list(self.sections))
        if errors:
            raise ValueError("\n".join(errors))
        return self


def section_names() -> list[str]:
    """The `trainstack:*` keys a stack may set, in the order messages list them."""
    return [*GENERIC_SECTIONS, *targets.sections(), "trainer"]


def stack_schema() -> type[BaseModel]:
    """A model with every stack key as a field (`gcp:` keys as project, region, zone), in
    message order: what the README's reference and the error messages walk."""
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in StackConfig.model_fields.items()
    }
    fields.pop("sections")
    fields.pop("secrets")  # not a key: which keys hold Pulumi secrets
    trainer = fields.pop("trainer")
    for key, model in targets.sections().items():
        fields[key] = (model | None, None)
    fields["trainer"] = trainer
    return cast(type[BaseModel], create_model("StackSchema", __base__=_Model, **fields))


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


def _engine_secrets(raw: Mapping[str, Any]) -> list[str]:
    """The keys of `raw` this loader reads that the engine marked secret
    (`trainstack.infra.config_secrets`): sections by name (`trainer`), provider keys as
    written (`gcp:project`)."""
    import pulumi.runtime

    found = []
    for key in raw:
        namespace, _, name = key.partition(":")
        if (key in GCP_KEYS or namespace == NAMESPACE) and pulumi.runtime.is_config_secret(key):
            found.append(name if namespace == NAMESPACE else key)
    return found


def _annotation(name: str) -> Any:
    """The type of stack section `name`: a generic field's, or a target's section model."""
    found = targets.sections().get(name)
    return found | None if found is not None else StackConfig.model_fields[name].annotation


@cache
def _cached_adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def _adapter(name: str) -> TypeAdapter[Any]:
    return _cached_adapter(_annotation(name))


def _by_section(raw: Mapping[str, Any], names: list[str], errors: list[str]) -> dict[str, Any]:
    """The values of `raw` by section name (`gcp:` keys as project, region, zone), objects
    decoded; a key without a namespace or an unknown `trainstack:` key adds to `errors`."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in GCP_KEYS:
            values[_section_field(key)] = value
            continue
        namespace, sep, name = key.partition(":")
        if not sep:
            errors.append(
                f"{key}: config key without a namespace; valid: {NAMESPACE}:{key} or gcp:{key}"
            )
        elif namespace == NAMESPACE:
            if name in names:
                values[name] = _decode(value)
            else:
                errors.append(unknown_key(name, name, names))
    return values


def load_stack_config(raw: Mapping[str, Any] | None = None) -> StackConfig:
    """Validate a flat stack config mapping and return the `StackConfig`.

    `raw` is the stack file's `config:` mapping (`{"gcp:project": "p", "trainstack:tpu":
    {...}}`); values may be parsed objects or JSON strings. With None, every key is read
    from the Pulumi runtime. Keys of other namespaces are ignored except `gcp:project`,
    `gcp:region` and `gcp:zone`; unknown `trainstack:*` keys are errors, and so is a
    namespace one typo away from `trainstack` (`trainstak:local`). Raises `ConfigError`
    listing every problem found; `NotATrainstackStack` when no key is a `trainstack:*` one.
    """
    engine_secret: list[str] = []
    if raw is None:
        raw = _runtime_config()
        engine_secret = _engine_secrets(raw)
    errors: list[str] = []
    names = section_names()
    typos = [line for line in map(namespace_typo, raw) if line is not None]
    if not any(key.partition(":")[0] == NAMESPACE for key in raw):
        # Only the misspelt keys are worth a line: "no compute target" would follow from them.
        raise ConfigError(typos) if typos else NotATrainstackStack()
    errors.extend(typos)
    values = _by_section(raw, names, errors)
    values, secrets, secret_problems = pulumi_secrets(values, engine_secret)
    if secret_problems:
        raise ConfigError([*errors, *secret_problems])
    parts: dict[str, Any] = {"secrets": secrets}
    failed: set[str] = set()
    compute = targets.sections()
    for name in ["project", "region", "zone", *names]:
        if name not in values:
            field = None if name in compute else StackConfig.model_fields[name]
            parts[name] = None if field is None else field.get_default(call_default_factory=True)
            continue
        try:
            parts[name] = _adapter(name).validate_python(values[name])
        except ValidationError as exc:
            failed.add(name)
            errors.extend(convert_error(name, e) for e in exc.errors())
    trainer = parts["trainer"] if "trainer" not in failed else TrainConfig()
    for key in compute:
        if parts.get(key) is not None and key not in failed:
            parts[key] = targets.claimant(key, parts[key]).prepare(parts[key], trainer)
    given = [t for t in compute if values.get(t) is not None]
    errors.extend(semantic_errors({k: v for k, v in parts.items() if k not in failed}, given))
    if errors:
        raise ConfigError(errors)
    cfg = StackConfig.model_validate(parts)
    # The estimate needs a valid stack, so the cost limit is checked last.
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
    return pydantic_problem(err, section, _annotation(section))


def _trainer_model_error(message: str) -> str:
    # TrainConfig's cross-field checks start with the field name: "strategy 'x' is not ...".
    head, _, rest = message.partition(" ")
    if head in TrainConfig.model_fields and rest:
        return f"trainer.{head}: {rest.removeprefix('is ')}"
    return f"trainer: {message}"

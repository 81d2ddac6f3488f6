"""The compute-target interface and its registry.

A target is everything one kind of compute means to trainstack: its stack config section
and cross-key checks, what it adds to the world size and the image checks, its cost, quota
and run limit, how it composes its components, what your code runs on there, its plan
notes, and where its status and logs come from. Generic code (config loading, compose,
plan, estimate, status, logs, CLI) asks the registry (`target_of`, `by_section`) and never
names a target.

Two kinds:

- `CloudTarget`: runs in a Google Cloud project. The generic program registers the quota
  guard, APIs, buckets, identity, trainer package and (`own_network`) the network, then
  calls `compose` for the compute and its dashboard scope. `status` and `log_filter` read
  the deployed stack through Google's APIs.
- `StandaloneTarget`: runs on this machine (`local`); it composes, reports status and
  names its log file itself.

Several targets may share one stack section (`gke` and `gce` share `gpu_cluster`, told
apart by `gpu_cluster.backend`): `claims` says which one a parsed section is.

Adding a target is one module: subclass one of the two, set `name`, `section` and `model`,
implement the abstract methods, and `register` an instance (ARCHITECTURE.md, "Adding a
target").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pulumi
from pydantic import BaseModel, ConfigDict

from trainstack.components.catalog.batch import WorldSize
from trainstack.components.code_summary import NODE_ENV
from trainstack.trainers.common.config import TF_STRATEGIES, TrainConfig
from trainstack.trainers.common.user_code import DEFAULT_LAUNCHER, CodeRules, UserLauncher

if TYPE_CHECKING:
    from trainstack.components.trainer_package import TrainerPackage
    from trainstack.components.training_buckets import TrainingBuckets
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.components.training_identity import TrainingIdentity, TrainingIdentityArgs
    from trainstack.components.training_network import TrainingNetwork
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode


class Section(BaseModel):
    """Base of every stack section model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class RunResource:
    """A resource type a target registers whose creation starts its trainer: `trainstack
    plan` says what it runs and `plan-diff` that replacing it relaunches training."""

    type: str
    """The Pulumi type token, e.g. `pulumi-python:dynamic/vertex:CustomJob`."""
    provider: tuple[str, str, Mapping[str, Any]] | None = None
    """A dynamic resource's provider (module, class, constructor arguments): plan-diff asks
    its own `diff`, as the engine does."""
    describe: Callable[[Mapping[str, Any]], list[str]] | None = None
    """The text plan's lines saying what it runs, read from its inputs."""
    checkpoint_dir: Callable[[Mapping[str, Any]], str | None] | None = None
    """Where its run keeps the checkpoints it resumes from, read from its inputs: used when
    no `--checkpoint_dir` flag or `TRAINSTACK_CHECKPOINT_DIR` in them says (alone with
    `checkpoint_first`)."""
    checkpoint_first: bool = False
    """`checkpoint_dir` alone answers (its inputs hold the whole trainer config)."""
    settings: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None
    """The run's trainer config as a mapping, where its inputs carry one (plan-diff compares
    the fingerprinted settings from it)."""
    tuned: Callable[[Mapping[str, Any]], set[str]] | None = None
    """A tuning job: the keys each trial sets itself (left out of the compared settings;
    plan-diff's note speaks of trials)."""


@dataclass(frozen=True)
class StillBilling:
    """Something of a stack that keeps billing after its run supervisor has stopped the
    compute (`Target.still_billing_after_stop`). The supervisor itself (about $0.31 a month)
    is not listed."""

    what: str
    """What bills, e.g. `GKE cluster fee and system node`, `reservation r1 in us-central1-a`."""
    hourly_usd: float
    """Its $/hour at list price, rounded to cents."""
    until: str
    """What ends it, e.g. `` `pulumi destroy -s dev-a100-gke` ``, `it is deleted`."""
    ours: bool = True
    """The stack created it; else it is not the stack's (a reservation it consumed), bills
    whatever runs on it, and `hourly_usd` is an estimate (`basis`)."""
    basis: str = ""
    """How `hourly_usd` was counted, or what may lower it, where that needs saying."""
    verified: bool = True
    """The catalog's source says itself that this bills (`*_VERIFIED`); else inferred."""

    def phrase(self) -> str:
        """What bills, its $/hour and what ends it, in words."""
        price = f"${self.hourly_usd:,.2f}/hour"
        basis = f" ({self.basis})" if self.basis else ""
        if self.ours:
            text = f"{self.what} {price}{basis} until {self.until}"
        else:
            text = (
                f"{self.what} about {price} whatever runs on it{basis}, until {self.until} "
                "(not this stack's)"
            )
        return text if self.verified else f"{text} (inferred, not verified)"

    def line(self) -> str:
        """`trainstack status`'s line for it."""
        return f"still billing after the stop: {self.phrase()}"


@dataclass(frozen=True)
class ComposeContext:
    """What the generic program registered before a cloud target's compute, for `compose`."""

    cfg: StackView
    deployment: str
    labels: Mapping[str, str]
    package: TrainerPackage
    buckets: TrainingBuckets
    identity: TrainingIdentity
    network: TrainingNetwork | None
    """The private network (`CloudTarget.own_network`), else None."""
    after_grants: pulumi.ResourceOptions
    """Depends on the APIs and every grant of the training account."""
    node_args: pulumi.Output[list[str]] | None
    """Your code's node launcher arguments (`trainer.entrypoint`), else None."""
    extras: Mapping[str, Any]
    """What the target's `before_identity` returned."""
    secret_env_names: tuple[str, ...] = ()
    """The `--env` names of `node_args` whose values are Pulumi secrets (`secure:` trainer.env
    values): the compute component's `secret_env_names`, so no run key or request id hashes
    their values (`trainstack.components._node_args.keyed_node_args`)."""


class Target(ABC):
    """One compute target. Section-level hooks take the parsed section (the loader calls
    them before a `StackConfig` exists); stack-level hooks take the validated stack as a
    `StackView` (a `StackConfig`: this package sits below `config`), whose `compute` is this
    target's section."""

    name: ClassVar[str]
    """The target's own name: `tpu`, `gke`, `gce`, `vertex`, `local`."""
    section: ClassVar[str]
    """The stack config key (`trainstack:<section>`) that selects it."""
    model: ClassVar[type[BaseModel]]
    """The pydantic model of that section."""
    managed_hosts: ClassVar[str | None] = None
    """`trainstack status` says this instead of listing hosts (the platform manages them)."""
    launchers: ClassVar[tuple[UserLauncher, ...]] = ("torchrun", "node")
    """The launchers your code may use here (`trainer.launcher`)."""
    default_launcher: ClassVar[UserLauncher] = DEFAULT_LAUNCHER
    """Your code's launcher when `trainer.launcher` is unset."""
    run_resources: ClassVar[tuple[RunResource, ...]] = ()
    """The resource types it registers whose creation starts the trainer."""
    reads_jobs: ClassVar[bool] = False
    """`trainstack status --job` reads this target's jobs by resource name (Vertex AI)."""
    runs_image: ClassVar[bool] = False
    """Its machines run a container, so your code may come as `trainer.image`."""
    supervised: ClassVar[bool] = False
    """A run supervisor (`trainstack.infra.supervision`) stops this target's compute at the
    run's end, `limits.max_run_hours` and `limits.max_total_usd`: its `compose` registers
    one, compose enables its APIs, the plan adds its cost, and only such a target accepts
    `limits.max_total_usd`."""
    pulumi_secrets: ClassVar[bool] = False
    """It takes Pulumi secrets (`secure:`) as `trainer.env` values: its launch registers them
    as secrets (`trainstack.infra.config_secrets`). A target on this machine does not: its
    runs record their env in the run folder."""

    def claims(self, section: Any) -> bool:
        """Whether a parsed section of `self.section` is this target's (several targets may
        share a section)."""
        return True

    # ------------------------------------------------------------------ config

    def prepare(self, section: Any, trainer: Any) -> Any:
        """The section with defaults that depend on the trainer filled in (the trainer may
        have failed to parse: then a default `TrainConfig`)."""
        return section

    @abstractmethod
    def section_problems(self, section: Any, region: str | None, trainer: Any) -> list[str]:
        """The section's cross-key and catalog problems (`trainer` may be None)."""

    def limits_problems(self, section: Any, limits: Any) -> list[str]:
        """Problems of the section taken with `trainstack:limits` (a `LimitsConfig`, or None
        when it did not parse); default none."""
        return []

    def flex_start_run_seconds(self, section: Any, limits: Any) -> int | None:
        """How long the target's flex-start machines run when the stack sets it (a run's
        `TRAINSTACK_DEADLINE` is a node's boot plus this), else None; default none."""
        return None

    def code_rules(self) -> CodeRules:
        """What your code may use here, as the trainers' checks take it
        (`trainstack.trainers.common.user_code.user_code_problems`)."""
        return CodeRules(
            self.section,
            self.launchers,
            self.default_launcher,
            self.runs_image,
            image_sections(),
            pulumi_secrets=self.pulumi_secrets,
        )

    def code_problems(self, section: Any, trainer: StackTrainer) -> list[str]:
        """Your code's keys that this target cannot run."""
        return []

    def code_source_problems(self, section: Any, trainer: StackTrainer, base: Path) -> list[str]:
        """What your code's source (under `base`, known good) needs that the target's
        machines do not have."""
        return []

    def trainer_problems(self, section: Any, trainer: TrainConfig) -> list[str]:
        """The bundled trainer's framework and strategy on this target."""
        if trainer.strategy == "tpu":
            valid = ", ".join(s for s in TF_STRATEGIES if s != "tpu")
            return [f"trainer.strategy: 'tpu' needs a tpu target; valid: {valid}"]
        return []

    def torch_image(self, section: Any) -> tuple[str, str | None] | None:
        """The image the torch trainer runs in here, and the key that picks another (None:
        no image fixes the torch version)."""
        return None

    @abstractmethod
    def world_size(self, section: Any, trainer: TrainConfig) -> WorldSize:
        """The replicas the bundled trainer splits the global batch over."""

    def batch_problems(self, section: Any, trainer: TrainConfig, world: WorldSize) -> list[str]:
        """Further global-batch problems (e.g. values a tuning job tries)."""
        return []

    # ------------------------------------------------------------------ estimate and plan

    @abstractmethod
    def summary(self, cfg: StackView) -> dict[str, Any]:
        """`tpu_chips`, `gpus`, `machines`, `hourly_usd` (unrounded) and any extras."""

    @abstractmethod
    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        """Whether `limits.max_run_hours` is enforced here, and how (the plan's words)."""

    def stoppable_hourly_usd(self, cfg: StackView) -> float:
        """$/hour at list price of what a `supervised` target's supervisor stops at the
        run's end, rounded to cents: what its spend count for `limits.max_total_usd` adds per
        hour of billing (by default all of `summary`'s)."""
        return round(float(self.summary(cfg)["hourly_usd"]), 2)

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        """What of stack `stack` keeps billing after a `supervised` target's supervisor has
        stopped what `stoppable_hourly_usd` counts (by default nothing): the plan notes it
        and `trainstack status` lists it once the compute is stopped."""
        return []

    @abstractmethod
    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        """Where your code runs: the image or the machine."""

    @abstractmethod
    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        """Processes that run your code."""

    def node_launcher_env(self, cfg: StackView) -> list[str]:
        """The variables `launcher: node` gives every process of your code here, beyond the
        run contract (the plan's `launcher_env`)."""
        return list(NODE_ENV)

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        """Notes the plan adds for this target."""
        return []

    def image_problems(self, cfg: StackView, today: date) -> tuple[list[str], list[str]]:
        """(errors, warnings) about the image the target runs on `today`."""
        return [], []

    def plan_defaults(self, cfg: StackView, given: Any) -> dict[str, Any]:
        """Values the stack did not give (`given`: the raw section) that trainstack picked,
        by dotted key."""
        return {}

    def run_contract(self, cfg: StackView, contract: dict[str, str]) -> dict[str, str]:
        """The run-contract folders your code's node launcher gets here."""
        return contract

    def package_requirements(self, cfg: StackView) -> list[str]:
        """What the trainer package adds to the image the bundled trainer runs in."""
        return []

    def local_run_root(self, cfg: StackView) -> str | None:
        """The folder `trainstack local-run` keeps this stack's run in (None: the default,
        `.trainstack/local/<stack>`)."""
        return None

    def local_run_workers(self, cfg: StackView) -> int | None:
        """The processes `trainstack local-run` starts without `--workers` (None: 2)."""
        return None


class CloudTarget(Target):
    """A target in a Google Cloud project (needs `gcp:project` and `gcp:region`)."""

    own_network: ClassVar[bool] = False
    """Its machines join the stack's private network (`TrainingNetwork`)."""
    pulumi_secrets: ClassVar[bool] = True

    @abstractmethod
    def services(self, cfg: StackView) -> list[str]:
        """The target's own APIs, enabled after the base ones."""

    def extra_services(self, cfg: StackView) -> list[str]:
        """APIs that depend on the target's options, enabled last."""
        return []

    @abstractmethod
    def quota(self, cfg: StackView) -> list[dict[str, Any]]:
        """Quota needs: `service`, `quota_id`, `dimensions`, `needed`, `verified`, `source`."""

    def before_identity(
        self,
        cfg: StackView,
        deployment: str,
        labels: Mapping[str, str],
        after_apis: pulumi.ResourceOptions,
        identity_args: TrainingIdentityArgs,
    ) -> dict[str, Any]:
        """Register what the training account must be granted, add the grant's keys to
        `identity_args`; the result reaches `compose` as `ComposeContext.extras`."""
        return {}

    @abstractmethod
    def compose(self, ctx: ComposeContext) -> tuple[dict[str, Any], DashboardScope]:
        """Register the compute; its stack outputs and its dashboard scope."""

    @abstractmethod
    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        """`state`, `hosts`, `started`, `ended` of the deployed compute."""

    def recoveries(
        self, cfg: StackView, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> list[dict[str, Any]] | None:
        """What the platform did to keep the run going, oldest first, for `trainstack status`
        (None: the stack records none): by default the run supervisor's events, for a stack
        that has one (`supervisor_events_uri`)."""
        from trainstack.infra.google_reads import gcs_json_lines
        from trainstack.infra.outputs import OUTPUT_SUPERVISOR_EVENTS

        uri = outputs.get(OUTPUT_SUPERVISOR_EVENTS)
        return gcs_json_lines(str(uri), endpoints) if uri else None

    @abstractmethod
    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        """The Cloud Logging query of the stack's trainer entries (one machine's with
        `worker`)."""


class StandaloneTarget(Target):
    """A target on this machine: no project, buckets or quota."""

    @abstractmethod
    def compose_alone(
        self, cfg: StackView, deployment: str, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        """Register the run; its stack outputs."""

    @abstractmethod
    def status_alone(
        self, cfg: StackView, stack: str, outputs: dict[str, Any] | None
    ) -> dict[str, Any]:
        """`state`, `hosts`, `started`, `ended`, `step`, `checkpoint`, `checkpoint_dir`."""

    @abstractmethod
    def log_file(
        self, cfg: StackView, stack: str, outputs_file: Path | None, worker: int | None
    ) -> Path:
        """The JSON-lines log of the run (after checking `worker`; the deployed stack's
        outputs in `outputs_file` when given)."""


# ---------------------------------------------------------------------------- registry

_REGISTRY: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add `target` to the registry (replacing one of the same name); returns it."""
    _REGISTRY[target.name] = target
    return target


def unregister(name: str) -> None:
    """Remove a target (tests that register their own)."""
    _REGISTRY.pop(name, None)


def registered() -> list[Target]:
    """Every target, in registration order."""
    return list(_REGISTRY.values())


def sections() -> dict[str, type[BaseModel]]:
    """Stack section key -> its model, in registration order."""
    out: dict[str, type[BaseModel]] = {}
    for target in _REGISTRY.values():
        out.setdefault(target.section, target.model)
    return out


def image_sections() -> tuple[str, ...]:
    """The stack sections whose targets run a container, in registration order."""
    return tuple(dict.fromkeys(t.section for t in _REGISTRY.values() if t.runs_image))


def run_resource(type_: str) -> RunResource | None:
    """What a registered target declares about resource type `type_` (None: not a resource
    that runs the trainer)."""
    for target in _REGISTRY.values():
        for resource in target.run_resources:
            if resource.type == type_:
                return resource
    return None


def by_section(section: str) -> list[Target]:
    """The targets that share stack section `section`."""
    return [t for t in _REGISTRY.values() if t.section == section]


def claimant(section: str, value: Any) -> Target:
    """The target a parsed section belongs to."""
    for target in by_section(section):
        if target.claims(value):
            return target
    raise LookupError(f"no registered target claims section {section!r}")


def target_of(cfg: StackView) -> Target:
    """The target a validated stack runs on."""
    return claimant(cfg.target, cfg.compute)

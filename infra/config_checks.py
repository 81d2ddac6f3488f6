"""The stack config's cross-key and catalog checks (`trainstack.infra.config.load_stack_config` runs them
once each section parsed): one compute target, project and region for a cloud target,
labels, buckets and quotas, the target section against the catalog, your own code's keys, the
trainer against its target and image, and the global batch against the world size."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainstack.components.catalog.batch import batch_problem
from trainstack.components.catalog.checkpoint_paths import checkpoint_place_problem
from trainstack.components.catalog.names import label_problems
from trainstack.components.catalog.problems import quote as _q
from trainstack.components.catalog.torch_versions import fsdp_problem
from trainstack.components.trainer_package import source_problems
from trainstack.components.training_buckets import training_buckets_problems
from trainstack.infra.config_secrets import (
    credential_problems,
    requirement_credential_problems,
    secret_env_names,
)
from trainstack.infra.project import current_place
from trainstack.infra.targets import (
    CloudTarget,
    Target,
    by_section,
    claimant,
    registered,
    sections,
)
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S
from trainstack.trainers.common.user_code import user_code_problems

if TYPE_CHECKING:
    from trainstack.infra.config_sections import BucketsConfig, QuotasConfig
    from trainstack.trainers.common.user_code import CodeRules, StackTrainer

NAMESPACE = "trainstack"
_GCP_VALID = {
    "project": "a Google Cloud project id, e.g. my-ml-project",
    "region": "a Google Cloud region, e.g. us-central1",
}
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def semantic_errors(parts: Mapping[str, Any], given: list[str]) -> list[str]:
    """Cross-key and catalog checks. `parts` holds only sections that parsed cleanly;
    `given` names the compute target sections the stack sets."""
    errors: list[str] = []
    keys = list(sections())
    if len(given) == 0:
        errors.append(
            f"{NAMESPACE}: no compute target given; valid: exactly one of {', '.join(keys)}"
        )
    elif len(given) > 1:
        errors.append(
            f"{NAMESPACE}: {len(given)} compute targets given ({', '.join(given)}); "
            f"valid: exactly one of {', '.join(keys)}"
        )
    key = given[0] if len(given) == 1 else None
    section = parts.get(key) if key is not None else None
    target: Target | None = claimant(key, section) if key and section is not None else None
    region: str | None = parts.get("region")
    # A section that failed to parse has no target yet: its key's targets stand in.
    candidates = [target] if target is not None else by_section(key) if key else []
    if any(isinstance(t, CloudTarget) for t in candidates):
        for gcp_key in ("project", "region"):
            if not parts.get(gcp_key) and gcp_key in parts:
                errors.append(
                    f"gcp:{gcp_key}: required for a {key} target; valid: {_GCP_VALID[gcp_key]}"
                )

    if parts.get("labels") is not None:
        errors += label_problems(parts["labels"], "labels", stack=True)
    errors += _check_buckets_quotas(parts)

    trainer: StackTrainer | None = parts.get("trainer")
    target_errors: list[str] = []
    coded: Target | None = None
    if target is not None:
        target_errors = target.section_problems(section, region, trainer)
        # Your code's checks depend on the backend: only a valid section settles it.
        coded = None if target_errors else target
        target_errors += target.limits_problems(section, parts.get("limits"))
        target_errors += _deadline_margin_problems(target, section, parts.get("limits"), trainer)
    errors += target_errors
    errors += _spend_cap_problems(parts, key, candidates)
    secrets: frozenset[str] = parts.get("secrets") or frozenset()
    if trainer is not None and key is not None:
        base = current_place().base_dir
        rules = _code_rules(coded, key)
        own = user_code_problems(trainer, rules, base, secret_env=secret_env_names(secrets))
        own += source_problems(trainer, base)
        own += credential_problems(trainer, secrets, rules.pulumi_secrets)
        own += requirement_credential_problems(trainer, base)
        own += _secrets_on_this_machine(secrets, candidates)
        if coded is not None and not own:
            # Read once the source and requirements are known good.
            own = coded.code_source_problems(section, trainer, base)
        errors += own
        errors += coded.code_problems(section, trainer) if coded is not None else []
    if trainer is not None and candidates and trainer.checkpoint_dir:
        cloud = isinstance(candidates[0], CloudTarget)
        where = "trainer.checkpoint_dir"
        place = checkpoint_place_problem(trainer.checkpoint_dir, where, cloud=cloud)
        errors += [place] if place else []
    if trainer is not None and candidates and trainer.user_code is None:
        trainer_errors = candidates[0].trainer_problems(section, trainer)
        image = None
        if target is not None and trainer.framework == "torch":
            image = target.torch_image(section)
        if image is not None:
            fsdp = fsdp_problem(image[0], trainer.strategy, "trainer.", image_key=image[1])
            trainer_errors += [fsdp] if fsdp else []
        errors += trainer_errors
        # The world size is only known once the target section and the strategy are valid.
        if target is not None and not (target_errors or trainer_errors):
            world = target.world_size(section, trainer)
            problem = batch_problem(trainer.global_batch_size, trainer.grad_accum_steps, world)
            errors += [problem] if problem else []
            errors += target.batch_problems(section, trainer, world)
    return errors


def _code_rules(target: Target | None, key: str) -> CodeRules:
    """What your code may use: the target's rules, or, where its section did not parse or
    failed its checks (so its backend is not settled), what any target of the section
    allows, so that no line blames the code for the section's fault (a `tpu` section with
    a bad `slices` is not a reason to refuse `trainer.image`, which backend gke takes)."""
    if target is not None:
        return target.code_rules()
    rules = [t.code_rules() for t in by_section(key)]
    if len(rules) == 1:
        return rules[0]
    return replace(
        rules[0],
        launchers=tuple(dict.fromkeys(launcher for r in rules for launcher in r.launchers)),
        runs_image=any(r.runs_image for r in rules),
        pulumi_secrets=any(r.pulumi_secrets for r in rules),
        no_image=None,
    )


def _deadline_margin_problems(
    target: Target, section: Any, limits: Any, trainer: StackTrainer | None
) -> list[str]:
    """A flex-start run stops its margin before its nodes' run duration ends
    (`trainstack.trainers.common.deadline`; the margin: the bundled trainer's
    `deadline_margin_s`, `DEFAULT_MARGIN_S` for your code, `trainers.node_capacity.
    deadline_for`): a margin as long as the run duration stops it before its first step."""
    run_s = target.flex_start_run_seconds(section, limits)
    if trainer is None or run_s is None:
        return []
    own = trainer.user_code is not None
    margin = DEFAULT_MARGIN_S if own else trainer.deadline_margin_s
    if margin < run_s:
        return []
    if own:
        problem = (
            f"limits.max_run_hours: {run_s} s of flex-start run is not longer than the "
            f"{margin:g} s before its end at which your code is stopped (the default "
            "trainer.deadline_margin_s, which your code cannot change), so the run would stop "
            f"before it trains; valid: limits.max_run_hours of at least "
            f"{math.ceil(margin / 36) / 100:g} (over {margin:g} s)"
        )
        return [problem]
    problem = (
        f"trainer.deadline_margin_s: {margin:g} s is not shorter than the flex-start run "
        f"duration limits.max_run_hours sets ({run_s} s), so the run would stop before it "
        f"trains; valid: trainer.deadline_margin_s below {run_s} s, or a longer "
        "limits.max_run_hours"
    )
    return [problem]


def _secrets_on_this_machine(secrets: frozenset[str], candidates: list[Target]) -> list[str]:
    """Pulumi secrets on a target that runs on this machine (local): its runs record their
    env in the run folder, so the secret would land on disk in clear."""
    if not secrets or not candidates or candidates[0].pulumi_secrets:
        return []
    return [
        f"{key}: a Pulumi secret (`secure:`) is not used on a {candidates[0].section} target, "
        "whose runs record their env in the run folder on this machine; valid: "
        f"trainer.secret_env.{key.rsplit('.', 1)[-1]} (a local run reads it from this "
        "environment), or a plain value"
        for key in sorted(secrets)
    ]


SPEND_CAP_PROBLEM = (
    "limits.max_total_usd: not enforced on a {where} target (no supervisor stops its "
    "compute); valid: a {enforced} target, or no limits.max_total_usd"
)
"""The one wording of the refusal: `where` and `enforced` name targets by `_kind`."""


def _kind(target: Target) -> str:
    """A target by its section (every target of a section is `supervised` alike)."""
    return target.section


def _spend_cap_problems(
    parts: Mapping[str, Any], key: str | None, candidates: list[Target]
) -> list[str]:
    """`limits.max_total_usd` on a target whose compute no run supervisor stops
    (`Target.supervised`): refused, since nothing would enforce it."""
    cap = getattr(parts.get("limits"), "max_total_usd", None)
    if cap is None or key is None or not candidates or any(t.supervised for t in candidates):
        return []
    enforced = list(dict.fromkeys(_kind(t) for t in registered() if t.supervised))
    where = _kind(candidates[0]) if len(candidates) == 1 else key
    return [SPEND_CAP_PROBLEM.format(where=where, enforced=" or ".join(enforced))]


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
            errors.append(
                "quotas.contact_email: required when quotas.request_increases is true; valid: "
                "an email address (name@domain)"
            )
        if quotas.contact_email and not _EMAIL.fullmatch(quotas.contact_email):
            errors.append(
                f"quotas.contact_email: {_q(quotas.contact_email)} is not an email address; "
                "valid: name@domain"
            )
    return errors

"""`trainstack policy`: the rules of `policies/rules/` run offline over a stack's plan.

The same rules run in `pulumi preview --policy-pack policies/`; here they run over what the
stack program registers under Pulumi mocks, the same registrations `trainstack plan`
shows, so a stack is checked with no credentials and no Pulumi CLI:

    report = check_stack("prod-vertex-rs", config)   # config: the stack file's `config:`
    report.violations                                 # [] when clean

`check_plan` checks JSON plans written by `trainstack plan --json` (one plan or a list),
e.g. a plan kept from CI or a hand-written one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainstack.infra.compose import main_program
from trainstack.infra.config import load_stack_config
from trainstack.infra.mocks import run_program
from trainstack.infra.plan import plan_resources
from trainstack.policies.rules import RULES, Context, Resource, Violation, evaluate

ENFORCEMENT = "mandatory"
"""Every rule blocks a deployment (the pack registers them all as mandatory)."""


class PlanFileError(ValueError):
    """A JSON document that is not a trainstack plan (or a list of plans)."""


@dataclass(frozen=True)
class StackReport:
    """The policy verdict for one stack."""

    stack: str
    resources: int
    violations: list[Violation]

    @property
    def clean(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "resources": self.resources,
            "rules": [rule.name for rule in RULES],
            "violations": [
                {
                    "rule": v.rule,
                    "enforcement": ENFORCEMENT,
                    "type": v.resource_type,
                    "name": v.resource_name,
                    "message": v.message,
                }
                for v in self.violations
            ],
        }


def check_stack(stack: str, config: Mapping[str, Any]) -> StackReport:
    """Run the stack program offline and check what it registers.

    Raises `trainstack.infra.config.ConfigError` before anything is registered when the config is
    invalid. The rules see exactly the plan's resource entries (inputs and `protect`), in
    the plan's order, so reports read like `trainstack plan` and agree with `check_plan`.
    """
    cfg = load_stack_config(config)
    run = run_program(main_program, config=config, stack=stack)
    return check_resources(stack, plan_resources(run.resources), cfg.environment)


def check_resources(
    stack: str, entries: Sequence[Any], environment: str | None = None
) -> StackReport:
    """Check plan resource entries (`plan_resources` output, or a plan file's); without an
    `environment`, the rules read the resources' `environment` labels."""
    resources = [_plan_resource(stack, i, e) for i, e in enumerate(entries)]
    violations = evaluate(resources, Context(environment=environment))
    return StackReport(stack, len(resources), violations)


def _plan_resource(stack: str, index: int, entry: Any) -> Resource:
    if not (
        isinstance(entry, Mapping)
        and isinstance(entry.get("type"), str)
        and isinstance(entry.get("name"), str)
        and isinstance(entry.get("inputs"), Mapping)
    ):
        raise PlanFileError(
            f"plan {stack!r}: resources[{index}] is not a plan resource; "
            'valid: {"type": str, "name": str, "inputs": {...}}'
        )
    protect = entry.get("protect", False)
    if not isinstance(protect, bool):
        raise PlanFileError(
            f"plan {stack!r}: resources[{index}].protect must be true or false, got {protect!r}; "
            "valid: true, false"
        )
    return Resource(entry["type"], entry["name"], entry["inputs"], protect=protect)


def check_plan(document: Any) -> list[StackReport]:
    """Check one JSON plan or a list of them (`trainstack plan --json` output).

    A plan resource may carry `"protect": true`; one without it counts as unprotected. The
    stack's environment is read from the resources' `environment` labels.
    """
    plans: Sequence[Any] = document if isinstance(document, list) else [document]
    reports = []
    for i, plan in enumerate(plans):
        if not (
            isinstance(plan, Mapping)
            and isinstance(plan.get("stack"), str)
            and isinstance(plan.get("resources"), list)
        ):
            raise PlanFileError(
                f"plan {i}: expected a JSON plan with a `stack` name and a `resources` list; "
                "valid: what `trainstack plan --json` writes, or a list of those"
            )
        reports.append(check_resources(plan["stack"], plan["resources"]))
    return reports

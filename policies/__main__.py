"""trainstack's CrossGuard policy pack: every rule of `rules/`, mandatory.

    pulumi preview --policy-pack policies/        # or `pulumi up --policy-pack policies/`

Pulumi runs this directory as a program in its own virtualenv (`requirements.txt`); the
rules are the same functions `trainstack policy` runs offline. Resource-scope rules become
`ResourceValidationPolicy`s and the stack-scope rule (prod data protection, which reads the
stack's environment from all its resources) a `StackValidationPolicy`.

Optional config (`--policy-pack-config config.json`):

    {"accelerators-labelled": {"required_labels": ["environment", "stack", "team"]},
     "prod-data-protected": {"environment": "prod"}}
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_policy.policy as _policy_module
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyPack,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties as _deserialize_properties
from pulumi_policy.proxy import UnknownValueError

if TYPE_CHECKING:
    from trainstack.policies import rules
else:
    # Pulumi runs the pack as a directory (`rules` is a top-level package beside this file);
    # the repository imports it as the package `policies`.
    rules = importlib.import_module(f"{__package__}.rules" if __package__ else "rules")

PACK_NAME = "trainstack-security"

_UNKNOWN_SENTINELS = frozenset(
    {
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # boolean
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
        "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
        "e48ece36-62e2-4504-bad9-02848725956a",  # archive
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
    }
)
"""pulumi_policy's markers for values unknown during a preview (`pulumi_policy.proxy`)."""


def plain(value: Any) -> Any:
    """Resource properties as the rules read them: secrets become `rules.SECRET`, values
    unknown during a preview `rules.UNKNOWN`, assets their path or text."""
    if isinstance(value, Secret):
        return rules.SECRET
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in value:
            try:
                out[key] = plain(value[key])
            except UnknownValueError:  # the unknown-checking proxy raises on access
                out[key] = rules.UNKNOWN
        return out
    if isinstance(value, Sequence) and not isinstance(value, str):
        items: list[Any] = []
        for i in range(len(value)):
            try:
                items.append(plain(value[i]))
            except UnknownValueError:
                items.append(rules.UNKNOWN)
        return items
    if isinstance(value, str) and value in _UNKNOWN_SENTINELS:
        return rules.UNKNOWN
    if isinstance(value, pulumi.FileAsset):
        return {"fileAsset": str(value.path)}
    if isinstance(value, pulumi.StringAsset):
        return {"stringAsset": value.text}
    return value


def _unproxy(value: Any) -> Any:
    """Plain dicts and lists (secrets still wrapped in `Secret`) from pulumi_policy's
    secret-preserving proxies, whose `"__target"` key returns what they wrap."""
    if isinstance(value, Secret):
        return Secret(_unproxy(value.value))
    if isinstance(value, Mapping):
        target = value if isinstance(value, dict) else value["__target"]
        return {key: _unproxy(item) for key, item in target.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        items = value if isinstance(value, list) else value["__target"]  # type: ignore[call-overload]
        return [_unproxy(item) for item in items]
    return value


def deserialize_keeping_secrets(
    props: dict[str, Any], proxy_secrets: bool = False
) -> dict[str, Any]:
    """pulumi_policy's `deserialize_properties`, except that secrets stay `Secret` objects.

    pulumi-policy 1.21 unwraps secrets before a validation sees the properties, so every
    Pulumi secret would reach `secrets-as-secrets` as plaintext; the engine does send them
    marked (`KeepSecrets`), so keeping the mark is all it takes.
    """
    if proxy_secrets:  # remediation's own secret-preserving mode, unchanged
        return _deserialize_properties(props, True)
    # Read the proxy's raw target: its item access would unwrap top-level secrets.
    target = _deserialize_properties(props, True)["__target"]
    return {key: _unproxy(value) for key, value in target.items()}


def install_secret_marking() -> None:
    """Make the pack's analyzer deserialize properties with `deserialize_keeping_secrets`."""
    if not hasattr(_policy_module, "deserialize_properties"):
        raise RuntimeError(
            "pulumi_policy.policy.deserialize_properties is gone: this pulumi-policy version "
            "is not supported by the trainstack pack (requirements.txt pins the tested range)"
        )
    _policy_module.deserialize_properties = deserialize_keeping_secrets


def _resource(resource_type: str, name: str, props: Any, protect: bool, urn: str) -> rules.Resource:
    return rules.Resource(resource_type, name, plain(props), protect=bool(protect), urn=urn)


def _schema(rule: rules.Rule) -> PolicyConfigSchema | None:
    return PolicyConfigSchema(properties=dict(rule.config)) if rule.config else None


def resource_policy(rule: rules.Rule) -> ResourceValidationPolicy:
    """A mandatory `ResourceValidationPolicy` running one resource-scope rule."""
    check = rule.resource_check
    assert check is not None, f"{rule.name} is a stack-scope rule"

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource = _resource(args.resource_type, args.name, args.props, args.opts.protect, args.urn)
        for message in check(resource, rules.context_from_config(args.get_config())):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=_schema(rule),
    )


def stack_policy(rule: rules.Rule) -> StackValidationPolicy:
    """A mandatory `StackValidationPolicy` running one stack-scope rule."""
    check = rule.stack_check
    assert check is not None, f"{rule.name} is a resource-scope rule"

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack: list[PolicyResource] = list(args.resources)
        resources = [
            _resource(r.resource_type, r.name, r.props, r.opts.protect, r.urn) for r in stack
        ]
        for resource, message in check(resources, rules.context_from_config(args.get_config())):
            report_violation(message, resource.urn)

    return StackValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=_schema(rule),
    )


POLICIES: list[Policy] = [
    resource_policy(rule) if rule.scope == "resource" else stack_policy(rule)
    for rule in rules.RULES
]
"""One policy per rule, in the rules' order."""


if __name__ == "__main__":
    install_secret_marking()
    # Serves the pack to the Pulumi engine over gRPC until the engine stops it.
    PolicyPack(
        name=PACK_NAME,
        policies=POLICIES,
        enforcement_level=EnforcementLevel.MANDATORY,
    )

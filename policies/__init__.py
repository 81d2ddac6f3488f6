"""trainstack's security policies.

`trainstack.policies.rules` holds the rules as plain Python over resource inputs; `policies/__main__.py`
serves them as a Pulumi CrossGuard policy pack (`pulumi preview --policy-pack policies/`),
and `trainstack policy` runs the same rules offline over a stack's plan (`trainstack.infra.policy`).
"""

if __name__ != "trainstack.policies":  # one import name per module: two would copy every class
    raise ImportError(f"import trainstack.policies, not {__name__}")

"""trainstack's security policies.

`policies.rules` holds the rules as plain Python over resource inputs; `policies/__main__.py`
serves them as a Pulumi CrossGuard policy pack (`pulumi preview --policy-pack policies/`),
and `trainstack policy` runs the same rules offline over a stack's plan (`infra.policy`).
"""

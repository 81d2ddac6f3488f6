"""The Pulumi program: validate the stack config, compose the stack, export its outputs.

It lives beside Pulumi.yaml (which has no `main`) rather than in infra/, so that the Python
language host and the dynamic-provider plugin resolve `virtualenv: .venv` against the same
folder; Pulumi.yaml cites the lines. `trainstack plan` and the tests run the same
`trainstack.infra.compose.main_program` under mocks.
"""

import pulumi

from trainstack.infra.compose import main_program

for _key, _value in main_program().items():
    pulumi.export(_key, _value)

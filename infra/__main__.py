"""Pulumi entry point (`main: infra/` in Pulumi.yaml): validate, compose, export."""

import pulumi

from infra.compose import main_program

for _key, _value in main_program().items():
    pulumi.export(_key, _value)

"""ProjectServices under Pulumi mocks."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainstack.components.project_services import TOKEN, ProjectServices
from trainstack.infra.mocks import ProgramRun, run_program

SERVICE = "gcp:projects/service:Service"


def _run(services: Any) -> ProgramRun:
    def program() -> dict[str, Any]:
        apis = ProjectServices("apis", {"project": "my-project", "services": services})
        return {"services": apis.services}

    return run_program(program)


def test_enables_each_service_and_keeps_it_on_destroy() -> None:
    run = _run(["tpu.googleapis.com", "compute.googleapis.com", "cloudquotas.googleapis.com"])
    assert {(r.type, r.name, r.parent) for r in run.resources} == {
        (TOKEN, "apis", None),
        (SERVICE, "apis-compute", "apis"),
        (SERVICE, "apis-tpu", "apis"),
        (SERVICE, "apis-cloudquotas", "apis"),
    }
    assert len(run.resources) == 4
    assert run.named("apis-tpu").inputs == {
        "project": "my-project",
        "service": "tpu.googleapis.com",
        "disableOnDestroy": False,
        "disableDependentServices": False,
    }
    assert run.outputs == {
        "services": [
            "cloudquotas.googleapis.com",
            "compute.googleapis.com",
            "tpu.googleapis.com",
        ]
    }


@pytest.mark.parametrize(
    ("services", "message"),
    [
        (
            [],
            "services: [] is not a non-empty list; valid: a non-empty list of service names, "
            "e.g. [compute.googleapis.com]",
        ),
        (
            "compute.googleapis.com",
            "ProjectServices.services: 'compute.googleapis.com' is not a list",
        ),
        (
            ["compute"],
            "services: 'compute' is not a service name; valid: a name like compute.googleapis.com",
        ),
        (
            ["tpu.googleapis.com", "tpu.googleapis.com"],
            "services: 'tpu.googleapis.com' is listed twice; valid: once",
        ),
    ],
)
def test_validation_errors(services: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _run(services)


def test_same_program_registers_identical_inputs() -> None:
    services = ["compute.googleapis.com", "storage.googleapis.com"]
    first, second = _run(services), _run(services)
    assert {r.name: (r.type, r.inputs) for r in first.resources} == {
        r.name: (r.type, r.inputs) for r in second.resources
    }

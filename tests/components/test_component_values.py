"""A component given a value its shared validator refuses (the stack config's rules) fails
like a wrong type or an unknown key does: one `ArgsError`, each line under
`<Component>.`, with "did you mean" where the catalog has a near value, and nothing
registered. The base arguments are test_component_args's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.components.test_component_args import COMPONENTS
from trainstack.components._args import ArgsError
from trainstack.infra.mocks import run_program

A2 = (
    "a2-highgpu-1g, a2-highgpu-2g, a2-highgpu-4g, a2-highgpu-8g, a2-megagpu-16g, "
    "a2-ultragpu-1g, a2-ultragpu-2g, a2-ultragpu-4g, a2-ultragpu-8g, a3-highgpu-8g, "
    "a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g"
)
V4 = "v4-8, v4-16, v4-32, v4-64, v4-128, v4-256, v4-512, v4-1024, v4-1536, v4-2048, v4-4096"

# A refused value per component and the exact line it gets.
BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    (
        "TrainingBuckets",
        {"environment": "production"},
        "TrainingBuckets.environment: 'production' is not allowed; valid: dev, staging, prod",
    ),
    (
        "A100Cluster",
        {"machine_type": "a2-higpu-1g"},
        "A100Cluster.machine_type: 'a2-higpu-1g' is not a known GPU machine type; did you mean "
        f"`a2-highgpu-1g`? valid: {A2}",
    ),
    (
        "TpuPodSlice",
        {"accelerator_type": "v4-31"},
        f"TpuPodSlice.accelerator_type: 'v4-31' is not a v4 slice; valid: {V4}",
    ),
    (
        "VertexTrainingJob",
        {"replica_count": 0},
        "VertexTrainingJob.replica_count: 0 is too small; valid: >= 1",
    ),
    (
        "TrainingIdentity",
        {"extra_project_roles": ["viewer"]},
        "TrainingIdentity.extra_project_roles: 'viewer' is not a role name; valid: roles/<id>, "
        "projects/<project>/roles/<id> or organizations/<org>/roles/<id>",
    ),
    (
        "LocalTrainingJob",
        {"workers": 0},
        "LocalTrainingJob.workers: got 0; valid: an integer 1-512",
    ),
    (
        "KubernetesTrainingJob",
        {"gpus_per_node": 0},
        "KubernetesTrainingJob.gpus_per_node: 0 is not an integer >= 1; valid: an integer >= 1",
    ),
    (
        "ProjectServices",
        {"services": ["compute"]},
        "ProjectServices.services: 'compute' is not a service name; valid: a name like "
        "compute.googleapis.com",
    ),
    (
        "ImageMirror",
        {"labels": {"component": "x"}},
        "ImageMirror.labels: 'component' is reserved by trainstack; valid: a key other than "
        "component, managed-by",
    ),
    (
        "TrainerPackage",
        {"requirements": [""]},
        "TrainerPackage.requirements[0]: '' is not a requirement (Expected package name at the "
        "start of dependency specifier); valid: a PEP 508 requirement, e.g. 'tf-keras~=2.17.0'",
    ),
    (
        "RunSupervisor",
        {"kind": "gke"},
        "RunSupervisor.kind: 'gke' is not allowed; valid: node, queued, mig, node_pool, node_pools",
    ),
    (
        "QuotaGuard",
        {"request_increases": True},
        "QuotaGuard.contact_email: required when request_increases is true; valid: an email "
        "address",
    ),
]


def _refused(component: str, override: dict[str, Any]) -> tuple[list[BaseException], int]:
    cls, _, base = COMPONENTS[component]
    raised: list[BaseException] = []

    def program() -> None:
        try:
            cls("exp", {**base, **override})
        except ValueError as exc:
            raised.append(exc)

    return raised, len(run_program(program).resources)


@pytest.mark.parametrize(("component", "override", "message"), BAD_VALUES)
def test_a_refused_value_is_an_args_error_under_the_component(
    component: str, override: dict[str, Any], message: str
) -> None:
    raised, registered = _refused(component, override)
    assert [(type(e), str(e)) for e in raised] == [(ArgsError, message)]
    # Not chained to the validator's ValueError: `--program` shows the innermost exception.
    assert (raised[0].__cause__, raised[0].__context__) == (None, None)
    assert registered == 0


def test_a_required_field_with_a_fixed_set_names_it() -> None:
    base = dict(COMPONENTS["TrainingBuckets"][2])
    del base["environment"]
    cls = COMPONENTS["TrainingBuckets"][0]
    errors: list[str] = []

    def program() -> None:
        try:
            cls("exp", base)
        except ArgsError as exc:
            errors.append(str(exc))

    assert run_program(program).resources == []
    assert errors == ["TrainingBuckets.environment: required; valid: dev, staging, prod"]


def test_a_retention_of_the_wrong_type_names_its_range() -> None:
    raised, _ = _refused("TrainingBuckets", {"checkpoint_retention_days": "3"})
    assert [str(e) for e in raised] == [
        "TrainingBuckets.checkpoint_retention_days: '3' is not an integer; valid: an integer 1-3650"
    ]


def test_no_suggestion_when_two_values_are_as_near() -> None:
    raised, _ = _refused("A100Cluster", {"machine_type": "a2-highgpu-3g"})
    assert [str(e) for e in raised] == [
        f"A100Cluster.machine_type: 'a2-highgpu-3g' is not a known GPU machine type; valid: {A2}"
    ]

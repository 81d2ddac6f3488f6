"""QuotaGuard against a Cloud Quotas fake over real HTTP, its invoke answered as the
pulumi-gcp provider answers it (`tests.fakes.quota_server.provider_invoke`): a verified id the
API does not know stops the stack, an unverified one (and a
shortfall on one) only warns, a refused read only warns, and no quota preference is filed
for an unverified id."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.quota_server import QuotaFakeServer, provider_invoke
from trainstack.components.quota_guard import (
    QuotaGuard,
    QuotaShortfallError,
    UnknownQuotaIdError,
    check_needs,
)
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import InvokeFailure, ProgramRun, run_program

INVOKE = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
PREFERENCE = "gcp:cloudquota/sQuotaPreference:SQuotaPreference"
PROJECT = "acme-ml"
A100 = "CustomModelTrainingA100GPUsPerProjectPerRegion"
SPOT_A100 = "CustomModelTrainingPreemptibleA100GPUsPerProjectPerRegion"
VERTEX_CPUS = "CustomModelTrainingCPUsPerProjectPerRegion"
V4_ON_DEMAND = "TPUV4sPodPerProjectPerZoneForTPUAPI"

TPU_STACK: dict[str, Any] = {
    "gcp:project": PROJECT,
    "gcp:region": "us-central2",
    "trainstack:tpu": {
        "accelerator_type": "v4-32",
        "zone": "us-central2-b",
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    },
    "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
}
VERTEX_STACK: dict[str, Any] = {
    "gcp:project": PROJECT,
    "gcp:region": "us-central1",
    "trainstack:quotas": {"request_increases": True, "contact_email": "ops@acme.dev"},
    "trainstack:vertex": {
        "machine_type": "a2-highgpu-8g",
        "replica_count": 4,
        "reduction_server": {"enabled": True, "replica_count": 2},
        # A reduction server needs an image with Google's reduction-server package.
        "image_uri": "us-docker.pkg.dev/acme-ml/train/rs:1",
    },
}


def _deploy(config: dict[str, Any], fake: QuotaFakeServer, caught: list[str]) -> ProgramRun:
    def program() -> dict[str, Any]:
        try:
            return main_program()
        except (QuotaShortfallError, UnknownQuotaIdError) as exc:
            caught.append(f"{type(exc).__name__}: {exc}")
            return {}

    invokes = {INVOKE: provider_invoke(fake, PROJECT)}
    return run_program(program, config=config, stack="exp", invokes=invokes)


def _served(fake: QuotaFakeServer) -> list[str]:
    return [p.rsplit("/", 1)[-1] for p in fake.requests]


def test_a_verified_id_the_api_does_not_know_stops_the_stack_before_anything_exists() -> None:
    caught: list[str] = []
    config = {**VERTEX_STACK, "trainstack:quotas": {}}
    with QuotaFakeServer(limits={VERTEX_CPUS: [({}, "1000")]}, usage={}) as fake:
        run = _deploy(config, fake, caught)
    assert sorted(_served(fake)) == [A100, VERTEX_CPUS]
    assert run.resources == []
    assert caught == [
        "UnknownQuotaIdError: quota preflight: 1 quota id(s) unknown to the Cloud Quotas API "
        "in project 'acme-ml':\n"
        f"  - aiplatform.googleapis.com {A100} (region=us-central1): not found (an id; the "
        "stack needs 32); list the real ids with `gcloud beta quotas info list "
        "--service=aiplatform.googleapis.com --project=acme-ml`\n"
        "Nothing was created. Correct the id (trainstack: infra/catalog.py), or set "
        "trainstack:quotas {skip_preflight: true} to deploy without the quota check."
    ]


def _warnings(run: ProgramRun) -> list[str]:
    """The guard's warnings (each starts "quota"), in order; the Vertex stack's reduction
    server adds a note on its image of its own."""
    return [m for level, m in run.logs if level == "WARNING" and m.startswith("quota")]


def test_an_unverified_id_the_api_does_not_know_only_warns() -> None:
    caught: list[str] = []
    with QuotaFakeServer(limits={}, usage={}) as fake:
        run = _deploy(TPU_STACK, fake, caught)
    assert (caught, _served(fake)) == ([], [V4_ON_DEMAND])
    assert run.of_type("gcp:storage/bucket:Bucket")
    assert _warnings(run) == [
        f"quota tpu.googleapis.com {V4_ON_DEMAND} (zone=us-central2-b) is unknown to the "
        "Cloud Quotas API and the id is unverified (infra/catalog.py), so it was not "
        "checked; the stack needs 16. List the real ids with `gcloud beta quotas info list "
        "--service=tpu.googleapis.com --project=acme-ml`"
    ]


def test_a_shortfall_on_an_unverified_id_only_warns_without_request_increases() -> None:
    caught: list[str] = []
    with QuotaFakeServer(limits={V4_ON_DEMAND: [({}, "8")]}, usage={}) as fake:
        run = _deploy(TPU_STACK, fake, caught)
    assert caught == []
    assert run.of_type("gcp:storage/bucket:Bucket")
    assert run.of_type(PREFERENCE) == []
    assert _warnings(run) == [
        f"quota tpu.googleapis.com {V4_ON_DEMAND} (zone=us-central2-b): need 16, limit 8 "
        "(current usage not readable for this quota), but the id is unverified "
        "(infra/catalog.py), so the deployment goes on; if it is the quota this stack draws "
        "on, raise the limit to 16 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=tpu.googleapis.com&metric={V4_ON_DEMAND}"
    ]


def test_a_verified_shortfall_still_fails_and_names_only_the_verified_id() -> None:
    caught: list[str] = []
    config = {**VERTEX_STACK, "trainstack:quotas": {}}
    limits = {A100: [({}, "8")], VERTEX_CPUS: [({}, "4")]}
    with QuotaFakeServer(limits, {}) as fake:
        run = _deploy(config, fake, caught)
    assert run.resources == []
    assert caught == [
        "QuotaShortfallError: quota preflight: 1 shortfall(s) in project 'acme-ml':\n"
        f"  - aiplatform.googleapis.com {A100} (region=us-central1): need 32, limit 8 "
        "(current usage not readable for this quota); raise the limit to at least 32 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=aiplatform.googleapis.com&metric={A100}\n"
        "Nothing was created or changed. Raise the quota, or set trainstack:quotas "
        "{request_increases: true, contact_email: ...} to file the requests with pulumi up."
    ]


def test_skip_preflight_deploys_without_reading_the_unknown_id() -> None:
    caught: list[str] = []
    config = {**TPU_STACK, "trainstack:quotas": {"skip_preflight": True}}
    with QuotaFakeServer(limits={}, usage={}) as fake:
        run = _deploy(config, fake, caught)
    assert (caught, fake.requests) == ([], [])
    assert run.of_type("gcp:storage/bucket:Bucket")


def test_a_refused_read_warns_and_the_verified_shortfall_is_requested() -> None:
    caught: list[str] = []
    limits = {A100: [({}, "0"), ({"region": "us-central1"}, "8")]}
    with QuotaFakeServer(limits, {}, forbidden=frozenset({VERTEX_CPUS})) as fake:
        run = _deploy(VERTEX_STACK, fake, caught)
    assert caught == []
    assert sorted(_served(fake)) == [A100, VERTEX_CPUS]
    assert _warnings(run) == [
        f"quota aiplatform.googleapis.com {VERTEX_CPUS} (region=us-central1) could not be "
        "read: invoke of gcp:cloudquota/getSQuotaInfo:getSQuotaInfo failed: Error when reading "
        'or editing CloudQuotasQuotaInfo "": googleapi: Error 403: Permission '
        f"'cloudquotas.quotas.get' denied on {VERTEX_CPUS} (); the stack needs 32. Check it at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=aiplatform.googleapis.com&metric={VERTEX_CPUS}",
        # A preview only warns: `pulumi up` files the preference, then raises.
        "quota preflight: 1 shortfall(s) in project 'acme-ml'; quota preference(s) to file:\n"
        f"  - aiplatform.googleapis.com {A100} (region=us-central1): need 32, limit 8 (current "
        "usage not readable for this quota); asked for a limit of 32 (track it at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=aiplatform.googleapis.com&metric={A100})\n"
        "pulumi up files them, then stops with an error before creating or changing anything "
        "else; run it again once Google grants them.",
    ]
    [pref] = run.of_type(PREFERENCE)
    assert pref.inputs == {
        "parent": "projects/acme-ml",
        "name": pref.inputs["name"],
        "service": "aiplatform.googleapis.com",
        "quotaId": A100,
        "dimensions": {"region": "us-central1"},
        "quotaConfig": {"preferredValue": "32"},
        "contactEmail": "ops@acme.dev",
        "justification": (
            f"trainstack stack 'exp' needs 32 of {A100} (region=us-central1) for distributed "
            "training; current limit 8."
        ),
    }
    # The preview registers the compute as `pulumi up` will once the quota is granted.
    assert len(run.of_type("trainstack:vertex:VertexTrainingJob")) == 1


def test_no_preference_is_filed_for_an_unverified_id() -> None:
    """Even with request_increases, a shortfall on a guessed id only warns: it is neither
    filed nor allowed to stop the deployment."""
    caught: list[str] = []
    vertex = {**VERTEX_STACK["trainstack:vertex"], "spot": True}
    limits = {SPOT_A100: [({}, "8")], VERTEX_CPUS: [({}, "1000")]}
    with QuotaFakeServer(limits, {}) as fake:
        run = _deploy({**VERTEX_STACK, "trainstack:vertex": vertex}, fake, caught)
    assert caught == []
    assert run.of_type(PREFERENCE) == []
    assert _warnings(run) == [
        f"quota aiplatform.googleapis.com {SPOT_A100} (region=us-central1): need 32, limit 8 "
        "(current usage not readable for this quota), but the id is unverified "
        "(infra/catalog.py), so the deployment goes on and no quota preference was filed for "
        "it; if it is the quota this stack draws on, raise the limit to 32 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=aiplatform.googleapis.com&metric={SPOT_A100}"
    ]


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        ("googleapi: Error 404: Quota TPUV9 does not exist, notFound", "not_found"),
        ("rpc error: code = NotFound desc = NOT_FOUND", "not_found"),
        ("googleapi: Error 403: The caller does not have permission, forbidden", "unknown"),
        ("googleapi: Error 503: backend unavailable", "unknown"),
    ],
)
def test_read_failures_are_told_apart(failure: str, status: str) -> None:
    def refuse(args: dict[str, Any]) -> dict[str, Any]:
        raise InvokeFailure(failure)

    need = {"service": "tpu.googleapis.com", "quota_id": "TPUV9", "dimensions": {}, "needed": 1}
    checks: list[Any] = []
    run_program(_collect(lambda: check_needs(PROJECT, [need]), checks), invokes={INVOKE: refuse})
    assert [c.status for c in checks] == [status]


def test_an_empty_answer_is_an_unknown_id() -> None:
    """The provider's answer for a 404 (see provider_invoke), without the fake."""
    need = {"service": "tpu.googleapis.com", "quota_id": "TPUV9", "dimensions": {}, "needed": 1}
    checks: list[Any] = []
    run_program(_collect(lambda: check_needs(PROJECT, [need]), checks), invokes={INVOKE: dict})
    assert [(c.status, c.detail) for c in checks] == [
        ("not_found", "the Cloud Quotas API does not know this quota id")
    ]


def test_an_unknown_verified_id_fails_even_with_request_increases() -> None:
    args: Any = {
        "project": PROJECT,
        "deployment_name": "exp",
        "request_increases": True,
        "contact_email": "ops@acme.dev",
        "needs": [
            {"service": "tpu.googleapis.com", "quota_id": "X", "dimensions": {}, "needed": 1}
        ],
    }
    with pytest.raises(UnknownQuotaIdError, match=r"^quota preflight: 1 quota id\(s\) unknown"):
        run_program(lambda: {"g": QuotaGuard("g", args)}, invokes={INVOKE: dict})


def _collect(fn: Callable[[], list[Any]], into: list[Any]) -> Callable[[], dict[str, Any]]:
    def program() -> dict[str, Any]:
        into.extend(fn())
        return {}

    return program

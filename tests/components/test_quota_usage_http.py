"""QuotaGuard counts what the project already uses, and asks for a total limit.

Over real HTTP: the Cloud Quotas fake answers the limit invoke (as the pulumi-gcp provider
does) and Compute Engine's `regions.get` / `projects.get` usage
(`TRAINSTACK_COMPUTE_ENDPOINT`). A need fits when it is at most limit minus usage; a filed
quota preference's `preferredValue` is `max(limit, usage + need)`, the new total limit
(https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.quotaPreferences).
TPU quota ids are all unverified, so a TPU shortfall only warns, even with request_increases.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.quota_guard import COMPUTE_ENDPOINT_ENV, QuotaShortfallError
from infra.compose import main_program
from infra.mocks import ProgramRun, run_program
from tests.fakes.quota_server import QuotaFakeServer, provider_invoke
from tests.stacks import GPU_STACK

INVOKE = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
PREFERENCE = "gcp:cloudquota/sQuotaPreference:SQuotaPreference"
PROJECT = "acme-ml"
SPOT_A100 = "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region"
ALL_GPUS = "GPUS-ALL-REGIONS-per-project"
A2_CPUS = "A2-CPUS-per-project-region"
CPUS = "CPUS-per-project-region"
V4_ON_DEMAND = "TPUV4sPodPerProjectPerZoneForTPUAPI"
REQUEST = {"request_increases": True, "contact_email": "ops@acme.dev"}
# 24 spot A100s already in use in us-central1; the stack needs 16 more.
USAGE = {
    "us-central1": [
        ("PREEMPTIBLE_NVIDIA_A100_GPUS", 32.0, 24.0),
        ("A2_CPUS", 1000.0, 0.0),
        ("CPUS", 1000.0, 0.0),
    ],
    "global": [("GPUS_ALL_REGIONS", 100.0, 24.0)],
}
ROOMY = {A2_CPUS: [({}, "1000")], CPUS: [({}, "1000")], ALL_GPUS: [({}, "100")]}


def _deploy(
    config: dict[str, Any], fake: QuotaFakeServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[ProgramRun, list[str]]:
    caught: list[str] = []

    def program() -> dict[str, Any]:
        try:
            return main_program()
        except QuotaShortfallError as exc:
            caught.append(str(exc))
            return {}

    monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, fake.endpoint)
    invokes = {INVOKE: provider_invoke(fake, PROJECT)}
    return run_program(program, config=config, stack="exp", invokes=invokes), caught


def test_a_need_within_the_limit_but_not_within_what_is_left_is_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {SPOT_A100: [({"region": "us-central1"}, "32")], **ROOMY}
    with QuotaFakeServer(limits, USAGE) as fake:
        run, caught = _deploy(GPU_STACK, fake, monkeypatch)
        compute = [p for p in fake.requests if p.startswith("/compute/")]
    assert sorted(compute) == [
        "/compute/v1/projects/acme-ml",
        "/compute/v1/projects/acme-ml/regions/us-central1",
    ]
    assert run.resources == []
    assert caught == [
        "quota preflight: 1 shortfall(s) in project 'acme-ml':\n"
        f"  - compute.googleapis.com {SPOT_A100} (region=us-central1): need 16, limit 32, "
        "in use 24: 8 left; raise the limit to 40 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=compute.googleapis.com&metric={SPOT_A100}\n"
        "Nothing was created. Raise the quota, or set trainstack:quotas "
        "{request_increases: true, contact_email: ...} to file the requests with pulumi up."
    ]


def test_the_preference_asks_for_usage_plus_need_as_the_new_total(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {SPOT_A100: [({"region": "us-central1"}, "32")], **ROOMY}
    config = {**GPU_STACK, "trainstack:quotas": REQUEST}
    with QuotaFakeServer(limits, USAGE) as fake:
        run, caught = _deploy(config, fake, monkeypatch)
    assert caught == []
    [pref] = run.of_type(PREFERENCE)
    assert pref.inputs["quotaId"] == SPOT_A100
    assert pref.inputs["quotaConfig"] == {"preferredValue": "40"}
    assert pref.inputs["justification"] == (
        f"trainstack stack 'exp' needs 16 of {SPOT_A100} (region=us-central1) for distributed "
        "training; current limit 32, 24 in use."
    )
    assert run.outputs["quota_blocked"] is True


def test_a_need_that_fits_what_is_left_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {SPOT_A100: [({"region": "us-central1"}, "64")], **ROOMY}
    usage = {**USAGE, "us-central1": [("PREEMPTIBLE_NVIDIA_A100_GPUS", 64.0, 24.0)]}
    with QuotaFakeServer(limits, usage) as fake:
        run, caught = _deploy(GPU_STACK, fake, monkeypatch)
    assert caught == []
    assert run.of_type(PREFERENCE) == []
    assert run.of_type("gcp:container/cluster:Cluster")


def test_tpu_preflight_only_warns_even_with_request_increases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {
        "gcp:project": PROJECT,
        "gcp:region": "us-central2",
        "trainstack:quotas": REQUEST,
        "trainstack:tpu": {
            "accelerator_type": "v4-32",
            "zone": "us-central2-b",
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
        },
        "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
    }
    with QuotaFakeServer({V4_ON_DEMAND: [({}, "8")]}, {}) as fake:
        run, caught = _deploy(config, fake, monkeypatch)
        compute = [p for p in fake.requests if p.startswith("/compute/")]
    assert (caught, compute) == ([], [])  # no Compute usage for a TPU API quota
    assert run.of_type(PREFERENCE) == []
    assert run.of_type("gcp:tpu/v2Vm:V2Vm")
    warnings = [m for level, m in run.logs if level == "WARNING"]
    assert warnings == [
        f"quota tpu.googleapis.com {V4_ON_DEMAND} (zone=us-central2-b): need 16, limit 8 "
        "(current usage not readable for this quota), but the id is unverified "
        "(infra/catalog.py), so the deployment goes on and no quota preference was filed for "
        "it; if it is the quota this stack draws on, raise the limit to 16 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        f"&service=tpu.googleapis.com&metric={V4_ON_DEMAND}"
    ]

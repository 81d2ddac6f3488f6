"""QuotaGuard under mocks: invoke results carry the limits, as the Cloud Quotas API would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.stacks import GPU_STACK
from trainstack.components.quota_guard import QuotaGuard, QuotaGuardArgs, QuotaShortfallError
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import InvokeFailure, run_program

INVOKE = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
PREEMPTIBLE_A100 = "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region"


def limits(table: Mapping[str, list[tuple[dict[str, str], str]]]):
    """An invoke handler answering getSQuotaInfo from {quota_id: [(dimensions, value)]}."""

    def answer(args: dict[str, Any]) -> dict[str, Any]:
        assert args["parent"] == "projects/acme-ml"
        entries = table.get(args["quotaId"], [({}, "1000000")])
        return {
            "quotaId": args["quotaId"],
            "service": args["service"],
            "dimensionsInfos": [
                {"dimensions": dims, "details": [{"value": value}], "applicableLocations": []}
                for dims, value in entries
            ],
        }

    return {INVOKE: answer}


def guarded(args: QuotaGuardArgs, caught: list[str]):
    def program() -> dict[str, Any]:
        try:
            guard = QuotaGuard("g", args)
        except QuotaShortfallError as exc:
            caught.append(str(exc))
            return {}
        return {"preferences": len(guard.preferences), "checks": [c.status for c in guard.checks]}

    return program


NEEDS: QuotaGuardArgs = {
    "project": "acme-ml",
    "deployment_name": "dev-gpu",
    "needs": [
        {
            "service": "compute.googleapis.com",
            "quota_id": PREEMPTIBLE_A100,
            "dimensions": {"region": "us-central1"},
            "needed": 16,
        },
        {
            "service": "compute.googleapis.com",
            "quota_id": "A2-CPUS-per-project-region",
            "dimensions": {"region": "us-central1"},
            "needed": 192,
        },
    ],
}


def test_shortfall_fails_the_stack_before_anything_is_registered() -> None:
    caught: list[str] = []

    def program() -> dict[str, Any]:
        try:
            return main_program()
        except QuotaShortfallError as exc:
            caught.append(str(exc))
            return {}

    invokes = limits(
        {
            PREEMPTIBLE_A100: [({"region": "us-central1"}, "8"), ({}, "0")],
            "A2-CPUS-per-project-region": [({}, "96")],
        }
    )
    run = run_program(program, config=GPU_STACK, stack="dev-gpu", invokes=invokes)
    assert run.resources == []
    assert caught == [
        # A2-CPUS (need 192, limit 96) is unverified: without request_increases its
        # shortfall warns and is not part of the error.
        "quota preflight: 1 shortfall(s) in project 'acme-ml':\n"
        "  - compute.googleapis.com PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region "
        "(region=us-central1): need 16, limit 8 (current usage not readable for this quota); "
        "raise the limit to at least 16 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        "&service=compute.googleapis.com&metric=PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region\n"
        "Nothing was created or changed. Raise the quota, or set trainstack:quotas "
        "{request_increases: true, contact_email: ...} to file the requests with pulumi up."
    ]


def test_enough_quota_passes_and_the_stack_is_built() -> None:
    invokes = limits({PREEMPTIBLE_A100: [({"region": "us-central1"}, "64")]})
    run = run_program(main_program, config=GPU_STACK, stack="dev-gpu", invokes=invokes)
    assert "quota_blocked" not in run.outputs
    guard = run.named("dev-gpu-quota")
    assert guard.type == "trainstack:quota:QuotaGuard"
    assert sorted(b.name for b in run.of_type("gcp:storage/bucket:Bucket")) == [
        "dev-gpu-buckets-checkpoints",
        "dev-gpu-buckets-data",
        "dev-gpu-buckets-staging",
        "dev-gpu-supervisor-state",
    ]
    asked = sorted(a["quotaId"] for token, a in run.invokes if token == INVOKE)
    assert asked == [
        "A2-CPUS-per-project-region",
        "CPUS-per-project-region",
        "GPUS-ALL-REGIONS-per-project",
        PREEMPTIBLE_A100,
    ]


def test_most_specific_dimensions_win_and_minus_one_is_unlimited() -> None:
    invokes = limits(
        {
            PREEMPTIBLE_A100: [({}, "0"), ({"region": "us-central1"}, "16")],
            "A2-CPUS-per-project-region": [({"region": "europe-west4"}, "0"), ({}, "-1")],
        }
    )
    caught: list[str] = []
    run = run_program(guarded(NEEDS, caught), invokes=invokes)
    assert caught == []
    assert run.outputs == {"preferences": 0, "checks": ["ok", "ok"]}


def test_request_increases_files_exact_preferences_retained_on_destroy() -> None:
    args: QuotaGuardArgs = {**NEEDS, "request_increases": True, "contact_email": "ops@acme.dev"}
    invokes = limits(
        {
            PREEMPTIBLE_A100: [({"region": "us-central1"}, "8")],
            "A2-CPUS-per-project-region": [({}, "500")],
        }
    )
    caught: list[str] = []
    # As `pulumi up` runs it: the preference is registered, then the guard raises.
    run = run_program(guarded(args, caught), invokes=invokes, preview=False)
    assert caught == [
        "quota preflight: 1 shortfall(s) in project 'acme-ml'; quota preference(s) filed:\n"
        "  - compute.googleapis.com PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region "
        "(region=us-central1): need 16, limit 8 (current usage not readable for this quota); "
        "asked for a limit of 16 (track it at "
        "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
        "&service=compute.googleapis.com&metric=PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region)\n"
        "Nothing else was created or changed. Run pulumi up again once Google grants them."
    ]
    assert run.outputs == {}
    [pref] = run.of_type("gcp:cloudquota/sQuotaPreference:SQuotaPreference")
    assert pref.parent == "g"
    assert pref.retain_on_delete is True
    assert pref.inputs == {
        "parent": "projects/acme-ml",
        "name": "dev-gpu-preemptible-nvidia-a100-gpus-per-project-regio-ddd60b62",
        "service": "compute.googleapis.com",
        "quotaId": PREEMPTIBLE_A100,
        "dimensions": {"region": "us-central1"},
        "quotaConfig": {"preferredValue": "16"},
        "contactEmail": "ops@acme.dev",
        "justification": (
            "trainstack stack 'dev-gpu' needs 16 of PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-"
            "region (region=us-central1) for distributed training; current limit 8."
        ),
    }


def test_unreadable_quota_is_a_warning_not_a_pass() -> None:
    def broken(args: dict[str, Any]) -> dict[str, Any]:
        raise InvokeFailure("PERMISSION_DENIED: cloudquotas.quotas.get")

    caught: list[str] = []
    run = run_program(guarded(NEEDS, caught), invokes={INVOKE: broken})
    assert caught == []
    assert run.outputs == {"preferences": 0, "checks": ["unknown", "unknown"]}
    warnings = [m for level, m in run.logs if level == "WARNING"]
    assert len(warnings) == 2
    assert warnings[0].startswith(
        "quota compute.googleapis.com PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region "
        "(region=us-central1) could not be read:"
    )
    assert "the stack needs 16" in warnings[0]


def test_preflight_off_reads_nothing() -> None:
    caught: list[str] = []
    run = run_program(guarded({**NEEDS, "preflight": False}, caught))
    assert run.outputs == {"preferences": 0, "checks": ["skipped", "skipped"]}
    assert run.invokes == []


def test_request_increases_needs_a_contact() -> None:
    with pytest.raises(
        ValueError,
        match="^QuotaGuard.contact_email: required when request_increases is true; valid: an email address$",
    ):
        run_program(lambda: {"g": QuotaGuard("g", {**NEEDS, "request_increases": True})})

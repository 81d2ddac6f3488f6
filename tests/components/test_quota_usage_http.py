"""QuotaGuard reads what the project already uses, and never lets it block (audit-21 B1).

Over real HTTP: the Cloud Quotas fake answers the limit invoke (as the pulumi-gcp provider
does) and Compute Engine's `regions.get` / `projects.get` usage
(`TRAINSTACK_COMPUTE_ENDPOINT`). That usage is the whole project's and, once a stack is
deployed, includes its own GPUs. So only need > limit blocks; need > limit - usage warns and
files nothing; a filed quota preference's `preferredValue` (the new total limit,
https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.quotaPreferences)
is the need; and a shortfall raises, on `pulumi up` after filing, rather than finishing the
program without the compute (which would make the engine delete it).
TPU quota ids are all unverified, so a TPU shortfall only warns, even with request_increases.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.quota_server import QuotaFakeServer, provider_invoke
from tests.stacks import GPU_STACK
from trainstack.components.quota_guard import (
    COMPUTE_ENDPOINT_ENV,
    QuotaGuard,
    QuotaGuardArgs,
    QuotaShortfallError,
)
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import ProgramRun, run_program

INVOKE = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
PREFERENCE = "gcp:cloudquota/sQuotaPreference:SQuotaPreference"
CLUSTER = "gcp:container/cluster:Cluster"
PROJECT = "acme-ml"
SPOT_A100 = "PREEMPTIBLE-NVIDIA-A100-GPUS-per-project-region"
ALL_GPUS = "GPUS-ALL-REGIONS-per-project"
A2_CPUS = "A2-CPUS-per-project-region"
CPUS = "CPUS-per-project-region"
V4_ON_DEMAND = "TPUV4sPodPerProjectPerZoneForTPUAPI"
REQUEST = {"request_increases": True, "contact_email": "ops@acme.dev"}
CONSOLE = (
    "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
    f"&service=compute.googleapis.com&metric={SPOT_A100}"
)
ROOMY = {A2_CPUS: [({}, "1000")], CPUS: [({}, "1000")], ALL_GPUS: [({}, "100")]}


def _usage(limit: float, used: float) -> dict[str, list[tuple[str, float, float]]]:
    """Compute Engine's answer: `used` spot A100s in us-central1 (and in the global count)."""
    return {
        "us-central1": [
            ("PREEMPTIBLE_NVIDIA_A100_GPUS", limit, used),
            ("A2_CPUS", 1000.0, 0.0),
            ("CPUS", 1000.0, 0.0),
        ],
        "global": [("GPUS_ALL_REGIONS", 100.0, used)],
    }


def _limits(spot_a100: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    return {SPOT_A100: [({"region": "us-central1"}, spot_a100)], **ROOMY}


def _deploy(
    config: dict[str, Any],
    fake: QuotaFakeServer,
    monkeypatch: pytest.MonkeyPatch,
    preview: bool = True,
) -> tuple[ProgramRun, list[str]]:
    """Runs the stack program; a QuotaShortfallError is recorded, so the run shows what was
    registered before it."""
    caught: list[str] = []

    def program() -> dict[str, Any]:
        try:
            return main_program()
        except QuotaShortfallError as exc:
            caught.append(str(exc))
            return {}

    monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, fake.endpoint)
    invokes = {INVOKE: provider_invoke(fake, PROJECT)}
    run = run_program(program, config=config, stack="exp", invokes=invokes, preview=preview)
    return run, caught


def _warnings(run: ProgramRun) -> list[str]:
    return [m for level, m in run.logs if level == "WARNING"]


def _tight_warning(limit: int, used: int) -> str:
    return (
        f"quota compute.googleapis.com {SPOT_A100} (region=us-central1): need 16, limit "
        f"{limit}, in use {used}: {limit - used} left. The usage is the whole project's and "
        "may include this stack's own machines from an earlier pulumi up, so the deployment "
        "goes on and nothing is requested; if it is other workloads', the stack's machines "
        f"start only once 16 are free or the limit is raised to {used + 16} at {CONSOLE}"
    )


@pytest.mark.parametrize("quotas", [{}, REQUEST])
def test_a_deployed_stack_that_fills_its_quota_redeploys_and_requests_nothing(
    monkeypatch: pytest.MonkeyPatch, quotas: dict[str, Any]
) -> None:
    """The audit's case: need 16, limit 16, and the stack's own 16 GPUs in use."""
    config = {**GPU_STACK, "trainstack:quotas": quotas}
    with QuotaFakeServer(_limits("16"), _usage(16.0, 16.0)) as fake:
        run, caught = _deploy(config, fake, monkeypatch)
        compute = sorted(p for p in fake.requests if p.startswith("/compute/"))
    assert compute == [
        "/compute/v1/projects/acme-ml",
        "/compute/v1/projects/acme-ml/regions/us-central1",
    ]
    assert caught == []
    assert run.of_type(PREFERENCE) == []
    assert len(run.of_type(CLUSTER)) == 1
    pools = sorted(r.name for r in run.of_type("gcp:container/nodePool:NodePool"))
    assert pools == ["exp-gpu-gpu-pool", "exp-gpu-system-pool"]
    assert _warnings(run) == [_tight_warning(16, 16)]


def test_up_of_a_deployed_stack_files_nothing_and_does_not_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same case as `pulumi up` runs it (not a preview), on the guard alone: the mocks
    cannot run the whole GKE program outside a preview (the cluster's master_auth comes
    from the provider)."""
    args: QuotaGuardArgs = {
        "project": PROJECT,
        "deployment_name": "exp",
        "needs": [
            {
                "service": "compute.googleapis.com",
                "quota_id": SPOT_A100,
                "dimensions": {"region": "us-central1"},
                "needed": 16,
            }
        ],
        "request_increases": True,
        "contact_email": "ops@acme.dev",
    }
    with QuotaFakeServer(_limits("16"), _usage(16.0, 16.0)) as fake:
        monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, fake.endpoint)
        invokes = {INVOKE: provider_invoke(fake, PROJECT)}
        statuses: list[str] = []

        def program() -> dict[str, Any]:
            statuses.extend(c.status for c in QuotaGuard("g", args).checks)
            return {}

        run = run_program(program, invokes=invokes, preview=False)
    assert statuses == ["tight"]
    assert [r.type for r in run.resources] == ["trainstack:quota:QuotaGuard"]
    assert _warnings(run) == [_tight_warning(16, 16)]


def test_a_need_within_the_limit_but_not_within_what_is_left_only_warns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with QuotaFakeServer(_limits("32"), _usage(32.0, 24.0)) as fake:
        run, caught = _deploy(GPU_STACK, fake, monkeypatch)
    assert caught == []
    assert len(run.of_type(CLUSTER)) == 1
    assert _warnings(run) == [_tight_warning(32, 24)]


def test_a_need_above_the_limit_stops_the_stack_in_one_line_per_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with QuotaFakeServer(_limits("8"), _usage(8.0, 8.0)) as fake:
        run, caught = _deploy(GPU_STACK, fake, monkeypatch, preview=False)
    assert run.resources == []
    assert caught == [
        "quota preflight: 1 shortfall(s) in project 'acme-ml':\n"
        f"  - compute.googleapis.com {SPOT_A100} (region=us-central1): need 16, limit 8, "
        f"in use 8: 0 left; raise the limit to at least 16 at {CONSOLE}\n"
        "Nothing was created or changed. Raise the quota, or set trainstack:quotas "
        "{request_increases: true, contact_email: ...} to file the requests with pulumi up."
    ]


def test_up_with_request_increases_files_the_need_and_still_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {**GPU_STACK, "trainstack:quotas": REQUEST}
    with QuotaFakeServer(_limits("8"), _usage(8.0, 8.0)) as fake:
        run, caught = _deploy(config, fake, monkeypatch, preview=False)
    # The guard and its preference only: nothing else is registered, so nothing else changes.
    assert [r.type for r in run.resources] == ["trainstack:quota:QuotaGuard", PREFERENCE]
    [pref] = run.of_type(PREFERENCE)
    assert pref.inputs["quotaId"] == SPOT_A100
    # The need, not usage + need: the 8 in use may be this stack's own GPUs.
    assert pref.inputs["quotaConfig"] == {"preferredValue": "16"}
    assert pref.inputs["justification"] == (
        f"trainstack stack 'exp' needs 16 of {SPOT_A100} (region=us-central1) for distributed "
        "training; current limit 8, 8 in use."
    )
    assert caught == [
        "quota preflight: 1 shortfall(s) in project 'acme-ml'; quota preference(s) filed:\n"
        f"  - compute.googleapis.com {SPOT_A100} (region=us-central1): need 16, limit 8, "
        f"in use 8: 0 left; asked for a limit of 16 (track it at {CONSOLE})\n"
        "Nothing else was created or changed. Run pulumi up again once Google grants them."
    ]


def test_preview_with_request_increases_warns_so_that_up_can_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pulumi up` previews first and stops on a failed preview, so the preview must pass."""
    config = {**GPU_STACK, "trainstack:quotas": REQUEST}
    with QuotaFakeServer(_limits("8"), _usage(8.0, 8.0)) as fake:
        run, caught = _deploy(config, fake, monkeypatch, preview=True)
    assert caught == []
    [pref] = run.of_type(PREFERENCE)
    assert pref.inputs["quotaConfig"] == {"preferredValue": "16"}
    assert len(run.of_type(CLUSTER)) == 1
    assert _warnings(run) == [
        "quota preflight: 1 shortfall(s) in project 'acme-ml'; quota preference(s) to file:\n"
        f"  - compute.googleapis.com {SPOT_A100} (region=us-central1): need 16, limit 8, "
        f"in use 8: 0 left; asked for a limit of 16 (track it at {CONSOLE})\n"
        "pulumi up files them, then stops with an error before creating or changing anything "
        "else; run it again once Google grants them."
    ]


@pytest.mark.parametrize("quotas", [{}, REQUEST])
def test_the_stack_program_raises_rather_than_finishing_without_compute(
    monkeypatch: pytest.MonkeyPatch, quotas: dict[str, Any]
) -> None:
    """Uncaught, as `__main__.py` runs it: the error reaches the engine, which then bails
    without deleting (trainstack.components.quota_guard docstring cites the engine)."""
    config = {**GPU_STACK, "trainstack:quotas": quotas}
    with QuotaFakeServer(_limits("8"), _usage(8.0, 0.0)) as fake:
        monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, fake.endpoint)
        invokes = {INVOKE: provider_invoke(fake, PROJECT)}
        with pytest.raises(QuotaShortfallError, match=r"^quota preflight: 1 shortfall\(s\)"):
            run_program(main_program, config=config, stack="exp", invokes=invokes, preview=False)


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
        run, caught = _deploy(config, fake, monkeypatch, preview=False)
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

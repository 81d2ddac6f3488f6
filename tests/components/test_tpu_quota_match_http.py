"""A TPU quota id the Cloud Quotas API does not know (every TPU id is unverified, several are
guesses) is looked up among the Cloud TPU API's own quotas: `quotaInfos.list` of
tpu.googleapis.com, entries whose `metric` is the TPU API's and whose id names the same
generation and tier. Over real HTTP against the Cloud Quotas fake, both invokes answered as
the pulumi-gcp provider answers them. The ids and metric names of the fake's quotas are
illustrative: no Google page lists them."""

from __future__ import annotations

from typing import Any

from tests.fakes.quota_server import QuotaFakeServer, provider_invoke, provider_list_invoke
from trainstack.components._tpu_quota_match import Family, family
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import ProgramRun, run_program

INVOKE = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
LIST_INVOKE = "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos"
PROJECT = "acme-ml"
GUESSED = "TPUV4sPodPerProjectPerZoneForTPUAPI"  # the catalog's v4 on-demand guess
REAL = "TPUV4PodPerProjectPerZoneForTPUAPI"
SPOT = "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI"
CONSOLE = (
    "https://console.cloud.google.com/iam-admin/quotas?project=acme-ml"
    f"&service=tpu.googleapis.com&metric={GUESSED}"
)
STACK: dict[str, Any] = {
    "gcp:project": PROJECT,
    "gcp:region": "us-central2",
    "trainstack:tpu": {
        "accelerator_type": "v4-32",
        "zone": "us-central2-b",
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    },
    "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
}


def _deploy(fake: QuotaFakeServer) -> ProgramRun:
    invokes = {
        INVOKE: provider_invoke(fake, PROJECT),
        LIST_INVOKE: provider_list_invoke(fake, PROJECT),
    }
    return run_program(main_program, config=STACK, stack="exp", invokes=invokes)


def _warnings(run: ProgramRun) -> list[str]:
    return [m for level, m in run.logs if level == "WARNING"]


def test_the_one_quota_of_the_same_family_is_read_instead_of_the_guess() -> None:
    limits = {
        REAL: [({"zone": "us-central2-b"}, "8"), ({}, "0")],
        SPOT: [({}, "64")],
        "TPUV5sLitepodServingPerProjectPerZoneForTPUAPI": [({}, "4")],
    }
    metrics = {
        REAL: "tpu.googleapis.com/v4_pod_chips",
        SPOT: "tpu.googleapis.com/v4_pod_preemptible_chips",
        "TPUV5sLitepodServingPerProjectPerZoneForTPUAPI": "tpu.googleapis.com/v5e_serving",
    }
    with QuotaFakeServer(limits, {}, metrics=metrics) as fake:
        run = _deploy(fake)
        served = [p.rsplit("/", 1)[-1] for p in fake.requests]
    assert served == [GUESSED, "quotaInfos"]
    assert run.of_type("gcp:tpu/v2Vm:V2Vm")  # TPU preflight only warns
    assert _warnings(run) == [
        f"quota tpu.googleapis.com {GUESSED} (zone=us-central2-b): need 16, limit 8 (current "
        "usage not readable for this quota) [the catalog's id is unknown; read "
        f"{REAL} (metric tpu.googleapis.com/v4_pod_chips), the one Cloud TPU API quota of the "
        "same generation and tier], but the id is unverified (infra/catalog.py), so the "
        "deployment goes on; if it is the quota this stack draws on, raise the limit to 16 at "
        f"{CONSOLE}"
    ]


def test_several_quotas_of_the_family_are_listed_not_guessed() -> None:
    other = "TPUV4PodChipsPerProjectPerZoneForTPUAPI"
    limits = {REAL: [({}, "8")], other: [({}, "32")]}
    metrics = {REAL: "tpu.googleapis.com/v4_pod", other: "tpu.googleapis.com/v4_chips"}
    with QuotaFakeServer(limits, {}, metrics=metrics) as fake:
        run = _deploy(fake)
    assert _warnings(run) == [
        f"quota tpu.googleapis.com {GUESSED} (zone=us-central2-b) is unknown to the Cloud "
        "Quotas API and the id is unverified (infra/catalog.py), so it was not checked; the "
        "stack needs 16. The service has quotas of the same TPU family: "
        f"{other} (tpu.googleapis.com/v4_chips), {REAL} (tpu.googleapis.com/v4_pod). List "
        "the real ids with `gcloud beta quotas info list --service=tpu.googleapis.com "
        "--project=acme-ml`"
    ]


def test_families() -> None:
    assert family(GUESSED) == Family("V4", False, "on-demand")
    assert family(SPOT) == Family("V4", False, "preemptible")
    assert family("TPUV5sLitepodPerProjectPerZoneForTPUAPI") == Family("V5", True, "on-demand")
    assert family("TPUV5PPreemptiblePerProjectPerZoneForTPUAPI") == Family(
        "V5", False, "preemptible"
    )
    assert family("TPUV6EReservedPerProjectPerZoneForTPUAPI") == Family("V6", False, "reserved")
    assert family("TPUV5sLitepodServingPerProjectPerZoneForTPUAPI") is None
    assert family("TPUV4sPodPerProjectPerRegion") is None

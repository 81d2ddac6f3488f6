"""`trainstack:tpu` with `backend` and `slices` (issue 31): each bad input is one line naming
the key, by the same rule for the stack config and the `TpuGkeSlices` component, and
`trainstack plan` exits 2 on it before anything is registered."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.bundled import bundled_plan
from trainstack.components._args import ArgsError
from trainstack.components.catalog.tpu_gke import (
    FLEX_START_SOURCE,
    JAX_TPU_IMAGE,
    JOBSET_WEBHOOK_NOTE,
)
from trainstack.components.tpu_gke_slices import (
    TpuGkeSlices,
    tpu_gke_slices_problems,
    with_code,
)
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.plan import build_plan, load_stack
from trainstack.infra.targets import target_of
from trainstack.infra.targets.tpu_gke import JOBSET_TYPE

REPO = Path(__file__).resolve().parents[2]
OWN_JAX = {
    "image": "us-docker.pkg.dev/p/jax/tpu:1",
    "source": str(REPO / "examples" / "own-jax"),
    "entrypoint": ["python", "train.py"],
    "launcher": "node",
}
GKE = {
    "gcp:project": "p",
    "gcp:region": "us-east5",
    "trainstack:tpu": {
        "backend": "gke",
        "accelerator_type": "v6e-16",
        "zone": "us-east5-b",
        "slices": 2,
        "provisioning": "spot",
    },
    "trainstack:trainer": OWN_JAX,
}
ON_TPU_VM = {
    **{k: v for k, v in OWN_JAX.items() if k != "image"},
    "requirements": "requirements-tpu.txt",
}
"""examples/own-jax where no container runs (tpu_vm): jax[tpu] from its requirements."""
FLEX = FLEX_START_SOURCE.split(" (")[0]


def tpu(**changes: Any) -> dict[str, Any]:
    section = {**GKE["trainstack:tpu"], **changes}
    return {**GKE, "trainstack:tpu": {k: v for k, v in section.items() if v is not None}}


def errors_of(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    return info.value.errors


def test_backend_gke_is_its_own_target_and_tpu_vm_stays_the_default() -> None:
    cfg = load_stack_config(GKE)
    assert (target_of(cfg).name, cfg.compute.slices) == ("tpu_gke", 2)
    v4 = {
        "gcp:project": "p",
        "gcp:region": "us-central2",
        "trainstack:tpu": {"accelerator_type": "v4-8", "zone": "us-central2-b"},
        "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
    }
    cfg = load_stack_config(v4)
    assert (target_of(cfg).name, cfg.compute.backend, cfg.compute.slices) == ("tpu", "tpu_vm", 1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            tpu(slices=0),
            "tpu.slices: 0 is not a slice count; valid: an integer >= 1",
        ),
        (
            tpu(accelerator_type="v6e-4"),
            "tpu.slices: v6e-4 is a single-host slice and GKE multislice supports multi-host "
            "TPU slice node pools only (https://cloud.google.com/kubernetes-engine/docs/how-to/"
            'tpu-multislice: Multislice "only supports multi-host TPU slice node pools"); '
            "valid: 1, or a slice of more than 4 chips",
        ),
        (
            tpu(backend="tpu_vm", runtime_version="v2-alpha-tpuv6e"),
            "tpu.slices: 2 slices (multislice) need backend 'gke' (one TPU node pool per "
            "slice, a JobSet over them); backend 'tpu_vm' makes one slice; valid: 1, or "
            "tpu.backend: gke",
        ),
        (
            tpu(provisioning="queued"),
            "tpu.provisioning: 'queued' is a Cloud TPU API queued resource, which backend "
            "'gke' does not use; valid: on-demand, spot, reserved, flex-start, or tpu.backend: "
            "tpu_vm",
        ),
        (
            tpu(provisioning="flex-start", zone="europe-west4-a", slices=1),
            "tpu.provisioning: 'flex-start' is not offered for v6e in europe-west4-a (Google "
            "lists v6e in asia-northeast1-b, us-east5-a, us-east5-b; v5e in us-west4-a; v5p in "
            f"us-east5-a: {FLEX}); valid: on-demand, spot, reserved, or a listed generation "
            "and zone",
        ),
        (
            tpu(generation="v6e", topology="3x3", accelerator_type=None),
            "tpu.topology: '3x3' is not a v6e topology; valid: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, "
            "8x16, 16x16",
        ),
        (
            # Before: "'tpu7x-8' is not a TPU type", as for a misspelt one.
            tpu(accelerator_type="tpu7x-8", slices=1),
            "tpu.accelerator_type: 'tpu7x-8' is TPU7x (Ironwood), which trainstack does not "
            "make yet: the Cloud TPU API (backend tpu_vm) does not serve it, and on backend gke "
            "its multi-host node pools need a workload policy in place of a TPU topology, which "
            "Google documents (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/"
            "tpu-ironwood) and pulumi-gcp 10.2.0 has (compute.ResourcePolicy "
            "workload_policy, container.NodePool placement_policy.policy_name) but trainstack's "
            "TPU catalog (machine type, zones, prices) and pools do not yet; valid: v4-N, "
            "v5litepod-N, v5p-N, v6e-N",
        ),
    ],
    ids=["slices-0", "single-host", "tpu_vm", "queued", "flex-zone", "topology", "tpu7x"],
)
def test_each_bad_input_is_one_line(raw: dict[str, Any], expected: str) -> None:
    if "europe-west4" in str(raw):
        raw = {**raw, "gcp:region": "europe-west4"}
    if raw["trainstack:tpu"]["backend"] == "tpu_vm":  # it runs no container
        raw = {**raw, "trainstack:trainer": ON_TPU_VM}
    assert errors_of(raw) == [expected]


def test_flex_start_on_tpu_vm_needs_gke() -> None:
    raw = tpu(backend="tpu_vm", slices=1, provisioning="flex-start")
    raw["trainstack:tpu"]["runtime_version"] = "v2-alpha-tpuv6e"
    raw["trainstack:trainer"] = ON_TPU_VM
    assert errors_of(raw) == [
        "tpu.provisioning: 'flex-start' needs backend 'gke' (GKE flex-start node pools; the "
        "Cloud TPU API's flex-start is alpha only); valid: on-demand, spot, queued, reserved, "
        "or tpu.backend: gke"
    ]


def test_the_bundled_trainer_is_refused_on_gke() -> None:
    bundled = {**GKE, "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"}}
    assert errors_of(bundled) == [
        "trainer.framework: the bundled tensorflow trainer has no maintained TPU container "
        "image (Google publishes JAX's, none with TensorFlow for TPUs) to run on backend "
        "'gke'; valid: your own code (trainer.entrypoint, on trainer.image or the default "
        f"{JAX_TPU_IMAGE}), or tpu.backend: tpu_vm"
    ]


def test_your_code_without_an_image_runs_on_googles_jax_ai_image() -> None:
    # Before: "trainer.image: required on tpu.backend 'gke'", exit 2.
    assert JAX_TPU_IMAGE == "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.2-rev1"
    _, config = load_stack("dev-tpu-v6e-gke", None)
    del config["trainstack:trainer"]["image"]
    plan = build_plan("dev-tpu-v6e-gke", config)
    (jobset,) = [r["inputs"] for r in plan["resources"] if r["type"] == JOBSET_TYPE]
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert (pod["containers"][0]["image"], plan["code"]["runs_on"]) == (JAX_TPU_IMAGE,) * 2
    assert [n for n in plan["notes"] if JAX_TPU_IMAGE in n] == [
        f"tpu: your code runs on {JAX_TPU_IMAGE}, Google's JAX AI image for TPUs (the "
        "backend's default without trainer.image), pulled by tag: its digest is unverified "
        "(GoogleCloudPlatform/cluster-toolkit@1047080 docs/gcluster_job_guide.md:678)"
    ]
    # Your own image: no such note.
    assert [n for n in bundled_plan("dev-tpu-v6e-gke")["notes"] if "JAX AI image" in n] == []
    # The component by the same rule: `image`, else `code`'s, else Google's.
    args = {"deployment_name": "d", "node_args": ["--", "python", "t.py"]}
    assert with_code(args)["image"] == JAX_TPU_IMAGE
    assert with_code({**args, "image": "mine:1"})["image"] == "mine:1"


def test_the_component_refuses_by_the_same_rule() -> None:
    args = {"zone": "us-east5-b", "accelerator_type": "v6e-4", "slices": 2}
    expected = tpu_gke_slices_problems(args)
    assert expected[0].startswith("slices: v6e-4 is a single-host slice")
    with pytest.raises(ArgsError) as info:
        TpuGkeSlices(
            "t",
            {  # type: ignore[typeddict-item]
                **args,
                "project": "p",
                "deployment_name": "d",
                "image": "i",
                "node_args": ["--", "python", "t.py"],
                "package_uri": "gs://b/o",
                "network_self_link": "n",
                "subnetwork_self_link": "s",
                "node_tag": "t",
                "service_account_email": "a@p.iam.gserviceaccount.com",
            },
        )
    assert str(info.value).splitlines() == [f"TpuGkeSlices.{line}" for line in expected]


def test_plan_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": tpu(provisioning="queued")}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: stack 'bad': "
        "tpu.provisioning: 'queued' is a Cloud TPU API queued resource, which backend 'gke' "
        "does not use; valid: on-demand, spot, reserved, flex-start, or tpu.backend: tpu_vm\n",
    )


LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
"""k8s.io/apimachinery pkg/util/validation IsValidLabelValue: at most 63 characters of this."""


def _coordinator_label(jobset: dict[str, Any]) -> str:
    """The `jobset.sigs.k8s.io/coordinator` label JobSet's controller puts on every pod, as
    kubernetes-sigs/jobset@v0.12.0 computes it: pkg/controllers/jobset_controller.go
    CoordinatorEndpoint (L1373: `fmt.Sprintf("%s-%s-%d-%d.%s", js.Name, ReplicatedJob,
    JobIndex, PodIndex, GetSubdomain(js))`, set as a label at L1056) and GetSubdomain
    (spec.network.subdomain, else the JobSet name)."""
    name = jobset["metadata"]["name"]
    spec = jobset["spec"]
    c = spec["coordinator"]
    subdomain = (spec.get("network") or {}).get("subdomain") or name
    return f"{name}-{c['replicatedJob']}-{int(c['jobIndex'])}-{int(c['podIndex'])}.{subdomain}"


def test_a_long_deployment_name_keeps_the_coordinator_label_valid() -> None:
    # JobSet's webhook refuses a JobSet whose coordinator label is not a valid label value
    # (pkg/webhooks/jobset_webhook.go validateCoordinatorLabelValue, L526-532): at `pulumi
    # up`, after the cluster and the node pools exist.
    long = "team-ml-experiment-long-deployment-name"
    _, config = load_stack("dev-tpu-v6e-gke", None)
    plan = build_plan(long, config)
    (jobset,) = [r["inputs"] for r in plan["resources"] if r["type"] == JOBSET_TYPE]
    label = _coordinator_label(jobset)
    name = jobset["metadata"]["name"]
    assert (name, len(name), len(label)) == ("team-ml-experimen-1fb42a47", 26, 63)
    assert LABEL_VALUE.fullmatch(label)
    # Its pods' names stay RFC 1035 labels too (jobset_webhook.go ValidateCreate:
    # placement.GenPodName of the last job and pod index + "-abcde", at most 63).
    job = jobset["spec"]["replicatedJobs"][0]
    last = f"{int(job['replicas']) - 1}-{int(job['template']['spec']['completions']) - 1}"
    assert f"{name}-{job['name']}-{last}-abcde" == "team-ml-experimen-1fb42a47-slice-1-3-abcde"


def test_a_short_deployment_name_keeps_its_jobset_name() -> None:
    plan = bundled_plan("dev-tpu-v6e-gke")
    (jobset,) = [r["inputs"] for r in plan["resources"] if r["type"] == JOBSET_TYPE]
    assert (jobset["metadata"]["name"], _coordinator_label(jobset)) == (
        "dev-tpu-v6e-gke-tpu",
        "dev-tpu-v6e-gke-tpu-slice-0-0.dev-tpu-v6e-gke-tpu",
    )


def test_the_spend_cap_is_enforced_by_the_slices_supervisor() -> None:
    # Backend gke has a run supervisor now (kind node_pools): the cap is no longer refused.
    cfg = load_stack_config({**GKE, "trainstack:limits": {"max_total_usd": 100}})
    assert (target_of(cfg).supervised, cfg.limits.max_total_usd) == (True, 100)
    plan = bundled_plan("dev-tpu-v6e-gke")
    [grant] = [r["inputs"] for r in plan["resources"] if r["name"].endswith("-supervisor-grant")]
    cluster = "projects/my-ml-project/locations/us-east5-b/clusters/dev-tpu-v6e-gke-tpu"
    assert grant["condition"]["title"] == "only cluster dev-tpu-v6e-gke-tpu"
    zonal = cluster.replace("/locations/", "/zones/")
    assert grant["condition"]["expression"] == (
        f'resource.name == "{cluster}" || resource.name == "{zonal}" || '
        f'resource.name.startsWith("{cluster}/nodePools/") || '
        f'resource.name.startsWith("{zonal}/nodePools/")'
    )
    assert [n for n in plan["notes"] if "no run supervisor" in n] == []


def test_the_multislice_note_cites_jax_and_leaves_the_port_to_libtpu() -> None:
    notes = bundled_plan("dev-tpu-v6e-gke")["notes"]
    assert [n for n in notes if n.startswith("tpu: MEGASCALE_")] == [
        "tpu: MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID and MEGASCALE_COORDINATOR_ADDRESS are set "
        "on every pod from JobSet's pod labels (replicatedjob-replicas, job-index, coordinator: "
        "the recipe of kubernetes-sigs/jobset#787 and XPK's Pathways template), because no "
        "Google or JobSet source says GKE sets them; JAX takes MEGASCALE_COORDINATOR_ADDRESS as "
        "the host with process id 0 (jax/_src/clusters/cloud_tpu_cluster.py "
        "get_coordinator_address: 'For both GCE via QueuedResources and GKE via JobSet, the "
        "Megascale coordinator address is set as the host with process id = 0'); "
        "MEGASCALE_PORT is left to libtpu's default (unverified); verify on a real two-slice "
        "run that GKE does not set different values"
    ]


@pytest.mark.parametrize(("hours", "errors"), [(1, []), (0.1, "refused")])
def test_flex_start_run_longer_than_the_save_margin(hours: float, errors: Any) -> None:
    # trainers/node_capacity.py deadline_for: your code is sent SIGTERM DEFAULT_MARGIN_S
    # (600 s) before the nodes' run duration (the pools' max_run_duration, the run limit)
    # ends; a run limit no longer than that stops it before it trains.
    raw = {**tpu(provisioning="flex-start", zone="us-east5-b")}
    raw["trainstack:limits"] = {"max_run_hours": hours}
    if errors == []:
        assert load_stack_config(raw).limits.max_run_hours == hours
        return
    assert errors_of(raw) == [
        "limits.max_run_hours: 360 s of flex-start run is not longer than the 600 s before its "
        "end at which your code is stopped (the default trainer.deadline_margin_s, which your "
        "code cannot change), so the run would stop before it trains; valid: "
        "limits.max_run_hours of at least 0.17 (over 600 s)"
    ]


def test_the_plan_says_what_is_unverified_about_the_jobset_controller() -> None:
    # Before: the manifest's URL without a word on its digest, and nothing on the webhook port.
    notes = [n for n in bundled_plan("dev-tpu-v6e-gke")["notes"] if "JobSet's webhook" in n]
    assert notes == [JOBSET_WEBHOOK_NOTE]
    assert JOBSET_WEBHOOK_NOTE.startswith(
        "tpu: not verified: whether the cluster's control plane reaches JobSet's webhook on "
        "the system node's tcp:9443 "
    )
    url = "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"
    assert [n for n in bundled_plan("dev-tpu-v6e-gke")["notes"] if url in n] == [
        f"tpu: the JobSet controller is applied from its release URL ({url}) at `pulumi up`, "
        "not from a vendored copy, and its digest is not checked: sha256 "
        "a41aaf12dd0b7b0a3d626b8d6107f32c3dc889d7e7830adc46b8cdb77a8963bb is one public pin "
        f"of it, unverified here; compare `curl -sL {url} | sha256sum` before deploying"
    ]

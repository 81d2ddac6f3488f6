"""Flex-start with queued provisioning on a multi-node GKE GPU pool: the pool as Google
creates it, the PodTemplate and ProvisioningRequest the component registers, the training
pods that consume it, the stack's plan. Sources are cited in
`trainstack.components.a100_cluster.gke_queued`."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.components.test_a100_cluster import BASE
from tests.components.test_gpu_audit import JOB, _run
from tests.components.test_kubernetes_training_job import VERSIONS, _integers
from trainstack.components._kubernetes_job_manifests import manifests
from trainstack.components.a100_cluster.gke_queued import queued_manifests
from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.plan import build_plan, load_stack

POD_TEMPLATE = "kubernetes:core/v1:PodTemplate"
REQUEST = "kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest"
MEGA_IMAGE = (
    "pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
)
REQUEST_NAME = "exp-42-train-cf3cf829"
"""The Job's name and the digest of its arguments (`gke_queued.request_name`)."""
LABELS = {"component": "a100-cluster", "managed-by": "trainstack", "team": "ml"}
TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {
        "key": "cloud.google.com/gke-queued",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    },
]
EXPECTED_POD_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PodTemplate",
    "metadata": {
        "name": REQUEST_NAME,
        "namespace": "default",
        "labels": {**LABELS, "cloud.google.com/apply-warden-policies": "true"},
    },
    "template": {
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb",
                "cloud.google.com/gke-flex-start": "true",
                "cloud.google.com/gke-nodepool": "a100",
            },
            "tolerations": TOLERATIONS,
            "containers": [
                {
                    "name": "trainer",
                    "image": MEGA_IMAGE,
                    "resources": {
                        "limits": {"nvidia.com/gpu": "8"},
                        "requests": {"nvidia.com/gpu": "8"},
                    },
                }
            ],
            "restartPolicy": "Never",
        }
    },
}
EXPECTED_REQUEST: dict[str, Any] = {
    "apiVersion": "autoscaling.x-k8s.io/v1",
    "kind": "ProvisioningRequest",
    "metadata": {"name": REQUEST_NAME, "namespace": "default", "labels": LABELS},
    "spec": {
        "provisioningClassName": "queued-provisioning.gke.io",
        "parameters": {"maxRunDurationSeconds": "14400"},
        "podSets": [{"count": 2, "podTemplateRef": {"name": REQUEST_NAME}}],
    },
}

# The v1 spec schema of the ProvisioningRequest CRD as kubernetes/autoscaler ships it
# (@55c37cd5 cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml,
# descriptions and the immutability rules left out): what the API server validates.
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
REQUEST_SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["podSets", "provisioningClassName"],
    "additionalProperties": False,
    "properties": {
        "parameters": {
            "type": "object",
            "maxProperties": 100,
            "additionalProperties": {"type": "string", "maxLength": 255},
        },
        "podSets": {
            "type": "array",
            "minItems": 1,
            "maxItems": 32,
            "items": {
                "type": "object",
                "required": ["count", "podTemplateRef"],
                "additionalProperties": False,
                "properties": {
                    "count": {"type": "integer", "minimum": 1},
                    "podTemplateRef": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "maxLength": 253, "pattern": _NAME}
                        },
                    },
                },
            },
        },
        "provisioningClassName": {"type": "string", "maxLength": 253, "pattern": _NAME},
    },
}


def _queued_run(machine: str = "a3-megagpu-8g", **overrides: Any) -> Any:
    return _run(machine, flex_start=True, max_run_seconds=14400, **overrides)


def _deps(resource: Any) -> set[str]:
    return {urn.split("::")[-1] for urn in resource.dependencies}


def test_a_multi_node_flex_start_pool_has_queued_provisioning() -> None:
    # A4 flex-start pools otherwise get compact placement; queued ones may not on GPUs.
    pool = _queued_run("a4-highgpu-8g").named("gpu-gpu-pool").inputs
    assert pool["queuedProvisioning"] == {"enabled": True}
    assert pool.get("placementPolicy") is None
    assert pool.get("nodeCount") is None
    assert pool["initialNodeCount"] == 0
    assert pool["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 2, "locationPolicy": "ANY"}
    assert pool["management"] == {"autoRepair": False, "autoUpgrade": True}
    config = pool["nodeConfig"]
    assert config["flexStart"] is True
    assert config["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    # The request bounds the nodes' run, not the pool.
    assert config.get("maxRunDuration") is None


A4_QUEUED_COMPACT = (
    "gpu_cluster.compact_placement: true cannot be used with gpu_cluster.flex_start on 2 "
    "nodes (across nodes the pool has queued provisioning, which has no compact placement on "
    "GPUs: GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf, "
    "'placement_policy cannot be COMPACT when enable_queued_provisioning is true, unless using "
    "TPUs'); valid: compact_placement: false (the default with flex_start across nodes), or "
    "node_count: 1"
)


def test_across_nodes_compact_placement_defaults_off_and_is_refused_when_asked() -> None:
    section = {"machine_type": "a4-highgpu-8g", "zone": "us-central1-b", "flex_start": True}
    raw = {"gcp:project": "p", "gcp:region": "us-central1"}
    cfg = load_stack_config({**raw, "trainstack:gpu_cluster": {**section, "node_count": 2}})
    assert cfg.compute.compact_placement is False
    cfg = load_stack_config({**raw, "trainstack:gpu_cluster": {**section, "node_count": 1}})
    assert cfg.compute.compact_placement is True
    gpu = {**section, "node_count": 2, "compact_placement": True}
    with pytest.raises(ConfigError) as info:
        load_stack_config({**raw, "trainstack:gpu_cluster": gpu})
    assert info.value.errors == [A4_QUEUED_COMPACT]
    args = {**BASE, **gpu, "spot": False}
    assert a100_cluster_problems(args, prefix="") == [A4_QUEUED_COMPACT.replace("gpu_cluster.", "")]


def test_the_component_registers_the_pod_template_and_the_request() -> None:
    run = _queued_run()
    [template] = run.of_type(POD_TEMPLATE)
    [request] = run.of_type(REQUEST)
    assert (template.name, template.parent) == ("gpu-pod-template", "gpu")
    assert (request.name, request.parent) == ("gpu-provisioning-request", "gpu")
    assert _integers(template.inputs) == EXPECTED_POD_TEMPLATE
    assert _integers(request.inputs) == EXPECTED_REQUEST
    # A changed request is a new one (its spec is immutable), the old one deleted first.
    assert request.replace_on_changes == ("spec",)
    assert request.delete_before_replace is True
    # The pool exists first; the request follows its template; the Job follows the request
    # (and is deleted before it).
    assert {"gpu-gpu-pool", "gpu-system-pool"} <= _deps(template)
    assert {"gpu-gpu-pool", "gpu-pod-template"} <= _deps(request)
    [job] = run.of_type(JOB)
    assert "gpu-provisioning-request" in _deps(job)


def test_the_training_pods_consume_the_request() -> None:
    [job] = _queued_run().of_type(JOB)
    template = job.inputs["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["autoscaling.x-k8s.io/consume-provisioning-request"] == REQUEST_NAME
    assert annotations["autoscaling.x-k8s.io/provisioning-class-name"] == (
        "queued-provisioning.gke.io"
    )
    # The A3 Mega fabric's annotations stay beside them.
    assert annotations["networking.gke.io/default-interface"] == "eth0"
    assert template["spec"]["tolerations"] == TOLERATIONS
    # The PodTemplate asks for what each pod asks for, on the same nodes.
    [container] = [c for c in template["spec"]["containers"] if c["name"] == "trainer"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert container["image"] == MEGA_IMAGE
    assert template["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb",
        "cloud.google.com/gke-nodepool": "a100",
    }


def _request_and_consumer(run: Any) -> tuple[str, str, str]:
    [template] = run.of_type(POD_TEMPLATE)
    [request] = run.of_type(REQUEST)
    [job] = run.of_type(JOB)
    annotations = job.inputs["spec"]["template"]["metadata"]["annotations"]
    return (
        template.inputs["metadata"]["name"],
        request.inputs["metadata"]["name"],
        annotations["autoscaling.x-k8s.io/consume-provisioning-request"],
    )


def test_a_new_trainer_package_gets_a_new_request_and_the_same_one_keeps_it() -> None:
    # A new package changes the pods' TRAINSTACK_PACKAGE_URI, so the Job is replaced; the
    # old request's nodes are spent, so its pods need a new request, under a new name.
    same = _request_and_consumer(_queued_run())
    assert same == (REQUEST_NAME, REQUEST_NAME, REQUEST_NAME)
    training = {**BASE["training"], "package_uri": "gs://exp-42-artifacts/trainer-2.tar.gz"}
    new = _request_and_consumer(_queued_run(training=training))
    assert new == ("exp-42-train-e1d7e28d",) * 3
    # The same run keeps its request: `pulumi up` changes nothing.
    assert _request_and_consumer(_queued_run()) == same


@pytest.mark.parametrize("nodes", [1, 2])
def test_flex_start_pools_keep_googles_upgrade_strategy(nodes: int) -> None:
    # GKE's SHORT_LIVED strategy is for these pools, and the provider can only send SURGE or
    # BLUE_GREEN (`gke.create_gke`'s comment): no upgradeSettings at all.
    pool = _queued_run(node_count=nodes).named("gpu-gpu-pool").inputs
    assert pool.get("upgradeSettings") is None
    on_demand = _run("a3-megagpu-8g").named("gpu-gpu-pool").inputs
    assert on_demand["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}


def test_one_node_keeps_the_plain_flex_start_pool() -> None:
    run = _run("a3-megagpu-8g", node_count=1, flex_start=True, max_run_seconds=14400)
    pool = run.named("gpu-gpu-pool").inputs
    assert pool.get("queuedProvisioning") is None
    assert pool["nodeConfig"]["maxRunDuration"] == "14400s"
    assert run.of_type(REQUEST) == []
    assert run.of_type(POD_TEMPLATE) == []
    [job] = run.of_type(JOB)
    meta = job.inputs["spec"]["template"]["metadata"]
    assert "autoscaling.x-k8s.io/consume-provisioning-request" not in meta.get("annotations", {})


def test_no_request_without_flex_start() -> None:
    run = _run("a3-megagpu-8g")
    assert run.of_type(REQUEST) == []
    assert run.named("gpu-gpu-pool").inputs.get("queuedProvisioning") is None


def test_without_a_run_limit_the_request_leaves_googles_default() -> None:
    plain = queued_manifests(
        name="j",
        namespace="default",
        node_count=4,
        gpus_per_node=8,
        image="img:1",
        node_selector={"a": "b"},
        labels={"team": "ml"},
        max_run_seconds=None,
    )
    assert plain["provisioning_request"]["spec"] == {
        "provisioningClassName": "queued-provisioning.gke.io",
        "podSets": [{"count": 4, "podTemplateRef": {"name": "j"}}],
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_the_pod_template_validates_for_the_cluster_versions(version: str) -> None:
    [template] = _queued_run().of_type(POD_TEMPLATE)
    kubernetes_validate.validate(_integers(template.inputs), version, strict=True)


def test_the_request_validates_against_the_crd_schema() -> None:
    [request] = _queued_run().of_type(REQUEST)
    jsonschema.validate(_integers(request.inputs)["spec"], REQUEST_SPEC_SCHEMA)
    # The schema is not vacuous: a count of 0 or a string is refused.
    for count in (0, "2"):
        bad = copy.deepcopy(EXPECTED_REQUEST["spec"])
        bad["podSets"][0]["count"] = count
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, REQUEST_SPEC_SCHEMA)


def test_pod_annotations_go_beside_the_fabrics() -> None:
    plain = manifests(
        job_name="j",
        node_count=2,
        gpus_per_node=8,
        image="img:1",
        package_uri="gs://b/t.tar.gz",
        args=["x"],
        labels={},
        pod_annotations={"z": "1", "a": "2"},
    )
    assert plain["job"]["spec"]["template"]["metadata"] == {
        "labels": {
            "app.kubernetes.io/instance": "j",
            "app.kubernetes.io/name": "trainstack-trainer",
        },
        "annotations": {"a": "2", "z": "1"},
    }


def test_the_stack_plan_has_the_request_and_says_all_nodes_come_at_once() -> None:
    name, config = load_stack("dev-h100-gke", None)
    section = config["trainstack:gpu_cluster"]
    del section["spot"]
    section["flex_start"] = True
    plan = build_plan(name, config)
    types = [r["type"] for r in plan["resources"]]
    assert (types.count(POD_TEMPLATE), types.count(REQUEST)) == (1, 1)
    [note] = [n for n in plan["notes"] if n.startswith("gpu_cluster.flex_start")]
    assert note.startswith(
        "gpu_cluster.flex_start: the node pool has queued provisioning: the training Job's "
        "ProvisioningRequest asks for all 2 nodes at once, and GKE adds them together, in one "
        "zone, when Dynamic Workload Scheduler finds the capacity for all of them, with no "
        "bound on the wait; no node bills before then, and the Job's pods, waiting already, "
        "start on them at once (nodes no pod uses within 10 minutes are removed; without "
        "training the pool gets no request and stays empty) "
        "(https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest); each "
        "machine is deleted 4 h after it starts (limits.max_run_hours)"
    )
    assert "one by one" not in note
    assert (
        "the run ends capacity_ended (exit 6) and the Job replaces the pod, which holds on a "
        "node that is going, and the supervisor sets the pool's autoscaling to 0 and deletes "
        "its VMs through its instance groups; `pulumi up` "
        "asks for new capacity and the run resumes from that checkpoint once the "
        "ProvisioningRequest is new: a changed run (trainer package, arguments, image) gets "
        "a new one, but with nothing changed `pulumi up` keeps the spent one (its nodes are "
        "gone and its spec cannot change); renew it with `pulumi up --replace` and its URN, "
        "from `pulumi stack --show-urns`; "
    ) in note

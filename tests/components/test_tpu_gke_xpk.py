"""`TpuGkeSlices`' node pools and JobSet against what XPK renders for the same shapes
(AI-Hypercomputer/xpk@367c838): `src/xpk/core/nodepool.py` (gcloud node-pools create:
`--machine-type`, `--num-nodes=<vms_per_slice>`, `--placement-type=COMPACT
--tpu-topology=<t>` only when vms_per_slice > 1) and `recipes/Workload_create.md` (the golden
JobSet for v5p-8, one slice: exclusive-topology annotation, parallelism = completions = 1,
backoffLimit 0, nodeSelector tpu-v5p-slice / 2x2x1, google.com/tpu: 4, toleration
google.com/tpu, hostNetwork, dnsPolicy ClusterFirstWithHostNet, privileged, FailJobSet on
PodFailurePolicy).

Deliberate differences (docs/guides/tpu-gke.md, "Compared with XPK"): XPK fails the set on
every exit but 42 and 128..255 (`NotIn`) and never restarts (maxRestarts 0); trainstack fails
it on the GPU Job's code and config exits (`In` 1, 2, 5) and restarts the set on anything
else, up to 10 times. XPK's pools get `--max-pods-per-node 15` (nodepool.py), its pods a
memory `emptyDir` at /dev/shm (`dshm-2`, `medium: Memory`) and a 30 s grace period (the
golden JobSet); trainstack's get none of the first two and 60 s."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainstack.components._tpu_jobset import jobset_manifest
from trainstack.components.catalog.tpu import TPU_GENERATIONS, tpu_slice
from trainstack.components.catalog.tpu_gke import (
    gke_chips_per_vm,
    gke_machine_type,
    gke_vms,
)
from trainstack.components.tpu_gke_slices import cluster_args, node_pool_args


def _jobset(accelerator_type: str, slices: int) -> dict[str, Any]:
    found = tpu_slice(accelerator_type)
    assert found is not None
    return jobset_manifest(
        name="w",
        namespace="default",
        slices=slices,
        vms=gke_vms(found),
        chips_per_vm=gke_chips_per_vm(found),
        accelerator=TPU_GENERATIONS[found.generation].gke_accelerator,
        topology=found.topology,
        image="i",
        command=["bash"],
        args=[],
        env=[],
        labels={},
        service_account="w",
    )


@pytest.mark.parametrize(
    ("accelerator_type", "machine", "nodes", "placement"),
    [
        # xpk: v5p-8 = ct5p-hightpu-4t, 2x2x1, vms_per_slice 1: no placement flags.
        ("v5p-8", "ct5p-hightpu-4t", 1, None),
        # xpk: v6e-16 = ct6e-standard-4t, 4x4, vms_per_slice 4: COMPACT + --tpu-topology=4x4.
        ("v6e-16", "ct6e-standard-4t", 4, {"type": "COMPACT", "tpu_topology": "4x4"}),
    ],
)
def test_node_pools_agree_with_xpk(
    accelerator_type: str, machine: str, nodes: int, placement: dict[str, str] | None
) -> None:
    found = tpu_slice(accelerator_type)
    assert found is not None
    shape = node_pool_args(found, "spot", None)
    got = shape["pool"].get("placement_policy")
    assert (gke_machine_type(found), shape["pool"]["node_count"]) == (machine, nodes)
    assert (None if got is None else {"type": got.type, "tpu_topology": got.tpu_topology}) == (
        placement
    )
    assert shape["config"]["spot"] is True  # xpk --spot


V6E_CLUSTER: dict[str, Any] = {
    "datapath_provider": "ADVANCED_DATAPATH",
    "enable_multi_networking": True,
}
DRA_LABEL = {"cloud.google.com/gke-networking-dra-driver": "true"}


@pytest.mark.parametrize(
    ("accelerator_type", "profile", "node_labels", "cluster"),
    [
        # xpk: supports_accelerator_network_profile=False for v5p (and v4, v5e): no flags.
        ("v5p-8", None, None, {}),
        # xpk: True for every v6e shape: --accelerator-network-profile=auto
        # --node-labels=cloud.google.com/gke-networking-dra-driver=true, on a cluster created
        # --enable-dataplane-v2 --enable-multi-networking (src/xpk/commands/cluster.py).
        ("v6e-16", "auto", DRA_LABEL, V6E_CLUSTER),
        ("v6e-1", "auto", DRA_LABEL, V6E_CLUSTER),
    ],
)
def test_accelerator_network_profile_agrees_with_xpk(
    accelerator_type: str,
    profile: str | None,
    node_labels: dict[str, str] | None,
    cluster: dict[str, Any],
) -> None:
    found = tpu_slice(accelerator_type)
    assert found is not None
    shape = node_pool_args(found, "on-demand", None)
    network = shape["pool"].get("network_config")
    # pulumi-gcp NodePoolNetworkConfigArgs.accelerator_network_profile: terraform-provider-
    # google resource_container_node_pool.go network_config.accelerator_network_profile
    # (ForceNew), sent as NodeNetworkConfig.AcceleratorNetworkProfile.
    got = None if network is None else network.accelerator_network_profile
    assert (got, shape["config"].get("labels"), cluster_args(found)) == (
        profile,
        node_labels,
        cluster,
    )


def test_v5p_8_pod_template_agrees_with_xpks_golden() -> None:
    jobset = _jobset("v5p-8", 1)
    assert jobset["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    job = jobset["spec"]["replicatedJobs"][0]
    spec = job["template"]["spec"]
    pod = spec["template"]["spec"]
    assert (job["replicas"], spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (
        1,
        1,
        1,
        0,
    )
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x1",
    }
    assert pod["containers"][0]["resources"] == {"limits": {"google.com/tpu": "4"}}
    assert pod["containers"][0]["securityContext"] == {"privileged": True}
    assert (pod["hostNetwork"], pod["dnsPolicy"], pod["restartPolicy"]) == (
        True,
        "ClusterFirstWithHostNet",
        "Never",
    )
    assert pod["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert jobset["spec"]["failurePolicy"]["rules"][0] == {
        "name": "failOnCodeOrConfigExit",
        "action": "FailJobSet",
        "onJobFailureReasons": ["PodFailurePolicy"],
    }
    assert pod["containers"][0]["env"] == []  # one slice: no MEGASCALE_*


def test_v6e_16_two_slices_gets_multislice_env_from_jobset_labels() -> None:
    jobset = _jobset("v6e-16", 2)
    job = jobset["spec"]["replicatedJobs"][0]
    pod = job["template"]["spec"]["template"]["spec"]
    assert (job["replicas"], job["template"]["spec"]["parallelism"]) == (2, 4)
    assert jobset["spec"]["coordinator"] == {"replicatedJob": "slice", "jobIndex": 0, "podIndex": 0}
    assert pod["containers"][0]["env"] == [
        {
            "name": "MEGASCALE_NUM_SLICES",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"
                }
            },
        },
        {
            "name": "MEGASCALE_SLICE_ID",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}
            },
        },
        {
            "name": "MEGASCALE_COORDINATOR_ADDRESS",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}
            },
        },
    ]


RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
"""kubernetes-sigs/jobset@v0.12.0 pkg/webhooks/jobset_webhook.go ruleNameFmt."""


def test_failure_policy_rules_carry_their_own_names() -> None:
    # The CRD requires `name` (config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml:
    # required: [action, name]); without one JobSet's defaulting webhook fills
    # failurePolicyRule<index> (jobset_webhook.go Default, L141-146), which the planned
    # spec would then diff against.
    rules = _jobset("v6e-16", 2)["spec"]["failurePolicy"]["rules"]
    assert rules == [
        {
            "name": "failOnCodeOrConfigExit",
            "action": "FailJobSet",
            "onJobFailureReasons": ["PodFailurePolicy"],
        },
        {
            "name": "restartOnOtherFailure",
            "action": "RestartJobSet",
            "onJobFailureReasons": ["BackoffLimitExceeded"],
        },
    ]
    assert [bool(RULE_NAME.fullmatch(r["name"])) for r in rules] == [True, True]


def test_the_listed_differences_from_xpk_hold() -> None:
    # docs/guides/tpu-gke.md lists these; a change to any of them changes that list.
    pod = _jobset("v5p-8", 1)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    spec = pod["spec"]
    assert spec["terminationGracePeriodSeconds"] == 60  # XPK's golden JobSet: 30
    assert ("volumes" in spec, "volumeMounts" in spec["containers"][0]) == (False, False)
    found = tpu_slice("v5p-8")
    assert found is not None
    shape = node_pool_args(found, "spot", None)
    assert "max_pods_per_node" not in shape["pool"]  # XPK: --max-pods-per-node 15

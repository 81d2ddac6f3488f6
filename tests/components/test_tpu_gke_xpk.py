"""`TpuGkeSlices`' node pools and JobSet against what XPK renders for the same shapes
(AI-Hypercomputer/xpk@367c838): `src/xpk/core/nodepool.py` (gcloud node-pools create:
`--machine-type`, `--num-nodes=<vms_per_slice>`, `--placement-type=COMPACT
--tpu-topology=<t>` only when vms_per_slice > 1) and `recipes/Workload_create.md` (the golden
JobSet for v5p-8, one slice: exclusive-topology annotation, parallelism = completions = 1,
backoffLimit 0, nodeSelector tpu-v5p-slice / 2x2x1, google.com/tpu: 4, toleration
google.com/tpu, hostNetwork, dnsPolicy ClusterFirstWithHostNet, privileged, FailJobSet on
PodFailurePolicy).

Deliberate differences (README): XPK fails the set on every exit but 42 and 128..255
(`NotIn`) and never restarts (maxRestarts 0); trainstack fails it on the GPU Job's code and
config exits (`In` 1, 2, 5) and restarts the set on anything else, up to 10 times."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components._tpu_jobset import jobset_manifest
from trainstack.components.catalog.tpu import TPU_GENERATIONS, tpu_slice
from trainstack.components.catalog.tpu_gke import (
    gke_chips_per_vm,
    gke_machine_type,
    gke_vms,
)
from trainstack.components.tpu_gke_slices import node_pool_args


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

"""Issue 32's "Done when", planned the way a user plans: `trainstack plan --config-file` (typer's
CliRunner) on the H100/H200/B200 families' configs. Each plan's fabric and capacity note lines
and its machine rows (the GPU node pools, instance templates, groups, placement or workload
policies, resize requests and Vertex worker pools, as the plan's resources give them) are
asserted exactly; each invalid config exits 2 with one line naming the key.

The expected notes are the catalog's texts for these configs (their sources are cited where
each note is built: `catalog.gpu_fabric`, `catalog.gpu_fabric_gce`, `infra.targets.gpu_cluster`
and `infra.targets.vertex`); a change to one shows here as a reviewed diff."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.infra.cli import app

runner = CliRunner()

TRAINER: Final = {
    "framework": "torch",
    "strategy": "ddp",
    "model": "gpt",
    "dataset": "synthetic",
    "steps": 100,
    "global_batch_size": 512,
    "precision": "bf16",
}
GCP: Final = {
    "gcp:project": "acme-ml",
    "gcp:region": "us-central1",
    "trainstack:environment": "dev",
}


def _gpu(section: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    base = {"backend": "gke", "machine_type": "a3-ultragpu-8g", "node_count": 2}
    cfg = {**GCP, "trainstack:gpu_cluster": {**base, "zone": "us-central1-b", **section}}
    cfg["trainstack:trainer"] = TRAINER
    if limits is not None:
        cfg["trainstack:limits"] = limits
    return cfg


def _vertex(accelerator: str) -> dict[str, Any]:
    section = {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": accelerator,
        "accelerator_count": 8,
        "flex_start": True,
    }
    return {**GCP, "trainstack:vertex": section, "trainstack:trainer": TRAINER}


PLANS: Final[dict[str, dict[str, Any]]] = {
    "a3-mega-gke": _gpu({"machine_type": "a3-megagpu-8g", "zone": "us-central1-a"}),
    "a3-ultra-gke": _gpu({}),
    "a4-gke": _gpu({"machine_type": "a4-highgpu-8g"}),
    "a4-gce": _gpu({"backend": "gce", "machine_type": "a4-highgpu-8g"}),
    "flex-gke": _gpu({"flex_start": True}, {"max_run_hours": 4}),
    "flex-gce": _gpu(
        {"backend": "gce", "machine_type": "a4-highgpu-8g", "flex_start": True},
        {"max_run_hours": 4},
    ),
    "flex-vertex": _vertex("NVIDIA_H100_80GB"),
}
NOTES: Final[dict[str, list[str]]] = {
    "a3-mega-gke": [
        (
            "gpu_cluster: a3-megagpu-8g uses GPUDirect-TCPXO on GKE as Cluster Toolkit renders it"
            " (GoogleCloudPlatform/cluster-toolkit @1047080): networks a3-mega-gke-gpunet-0 (MTU "
            "8244, 1 subnet), a3-mega-gke-gpunet-1 (MTU 8244, 1 subnet), a3-mega-gke-gpunet-2 "
            "(MTU 8244, 1 subnet), a3-mega-gke-gpunet-3 (MTU 8244, 1 subnet), "
            "a3-mega-gke-gpunet-4 (MTU 8244, 1 subnet), a3-mega-gke-gpunet-5 (MTU 8244, 1 "
            "subnet), a3-mega-gke-gpunet-6 (MTU 8244, 1 subnet), a3-mega-gke-gpunet-7 (MTU 8244, "
            "1 subnet); plugin installer us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plug"
            "in-gpudirecttcpx-dev:v1.0.15; each training pod attaches eth1..eth8 to vpc1..vpc8 "
            "(networking.gke.io/interfaces), runs the tcpxo-daemon receive-datapath sidecar "
            "(tcpgpudmarxd-dev:v1.0.21, given the GPUs by the NRI device injector DaemonSet) and "
            "mounts the installer's libraries at /usr/local/nvidia; NCCL gets the FasTrak "
            "settings of the installer's release (NCCL_FASTRAK_CTRL_DEV=eth0, "
            "NCCL_FASTRAK_IFNAME=eth1..eth8, NCCL_SOCKET_IFNAME=eth0, NCCL_CROSS_NIC=0, "
            "NCCL_PROTO=Simple,LL128, the tuner and guest config in /usr/local/nvidia/lib64; CEA "
            "gpudirect-tcpxo/README.md, Jan 9, 2026). Rendered as Google's and XPK's manifests do"
            " it, not run on the hardware here"
        ),
    ],
    "a3-ultra-gke": [
        (
            "gpu_cluster: a3-ultragpu-8g uses GPUDirect-RDMA on GKE as Cluster Toolkit renders it"
            " (GoogleCloudPlatform/cluster-toolkit @1047080): networks a3-ultra-gke-net-1 (MTU "
            "8896, 1 subnet), a3-ultra-gke-rdma-net (MTU 8896, 8 subnets); plugin installer "
            "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0; each training "
            "pod attaches eth2..eth9 to rdma-0..rdma-7 (networking.gke.io/interfaces), mounts the"
            " installer's /home/kubernetes/bin/gib at /usr/local/gib and sources "
            "/usr/local/gib/scripts/set_nccl_env.sh before the launcher, with NCCL_NET=gIB (CEA "
            "gpudirect-rdma/nccl-test.yaml, CTK nccl-jobset-example.yaml). Rendered as Google's "
            "and XPK's manifests do it, not run on the hardware here"
        ),
    ],
    "a4-gke": [
        (
            "gpu_cluster: a4-highgpu-8g uses GPUDirect-RDMA on GKE as Cluster Toolkit renders it "
            "(GoogleCloudPlatform/cluster-toolkit @1047080): networks a4-gke-net-1 (MTU 8896, 1 "
            "subnet), a4-gke-rdma-net (MTU 8896, 8 subnets); plugin installer "
            "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0; each training "
            "pod attaches eth2..eth9 to rdma-0..rdma-7 (networking.gke.io/interfaces), mounts the"
            " installer's /home/kubernetes/bin/gib at /usr/local/gib and sources "
            "/usr/local/gib/scripts/set_nccl_env.sh before the launcher, with NCCL_NET=gIB (CEA "
            "gpudirect-rdma/nccl-test.yaml, CTK nccl-jobset-example.yaml). Rendered as Google's "
            "and XPK's manifests do it, not run on the hardware here"
        ),
    ],
    "a4-gce": [
        (
            "gpu_cluster: a4-highgpu-8g (A4) on Compute Engine uses GPUDirect RDMA over RoCE as "
            "GoogleCloudPlatform/cluster-toolkit @1047080 "
            "examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml renders it: 10 NICs per VM, "
            "in order the stack's network (gVNIC, eth0), a4-gce-net-1 (gVNIC, MTU 8896, eth1) and"
            " 8 MRDMA NICs on a4-gce-rdma-net (network profile us-central1-b-vpc-roce, MTU 8896, "
            "one subnet per GPU); boot image projects/ubuntu-os-accelerator-images/global/images/"
            "ubuntu-accelerator-2204-amd64-with-nvidia-570-v20260210 (hyperdisk-balanced); at "
            "first boot the launcher installs nccl-gib from Google's apt repository 'deb "
            "[signed-by=/etc/apt/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt"
            " gpudirect-gib-apt main' and, where the image has no torchrun, torch==2.9.1 with "
            "pip; every rank's NCCL gets `source /usr/local/gib/scripts/set_nccl_env.sh` and "
            "/usr/local/gib/lib64 first on LD_LIBRARY_PATH, so NCCL loads the gIB net plugin "
            "(https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms); the values are "
            "the installed package's, not pinned by trainstack"
        ),
    ],
    "flex-gke": [
        (
            "gpu_cluster: a3-ultragpu-8g uses GPUDirect-RDMA on GKE as Cluster Toolkit renders it"
            " (GoogleCloudPlatform/cluster-toolkit @1047080): networks flex-gke-net-1 (MTU 8896, "
            "1 subnet), flex-gke-rdma-net (MTU 8896, 8 subnets); plugin installer "
            "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0; each training "
            "pod attaches eth2..eth9 to rdma-0..rdma-7 (networking.gke.io/interfaces), mounts the"
            " installer's /home/kubernetes/bin/gib at /usr/local/gib and sources "
            "/usr/local/gib/scripts/set_nccl_env.sh before the launcher, with NCCL_NET=gIB (CEA "
            "gpudirect-rdma/nccl-test.yaml, CTK nccl-jobset-example.yaml). Rendered as Google's "
            "and XPK's manifests do it, not run on the hardware here"
        ),
        (
            "gpu_cluster.flex_start: the node pool has queued provisioning: the training Job's "
            "ProvisioningRequest asks for all 2 nodes at once, and GKE adds them together, in one"
            " zone, when Dynamic Workload Scheduler finds the capacity for all of them, with no "
            "bound on the wait; no node bills before then, and the Job's pods, waiting already, "
            "start on them at once (nodes no pod uses within 10 minutes are removed; without "
            "training the pool gets no request and stays empty) "
            "(https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest); each "
            "machine is deleted 4 h after it starts (limits.max_run_hours); GKE removes the node "
            "then (how, and whether its pods get a notice, Google does not say): the trainer "
            "saves a checkpoint trainer.deadline_margin_s (default 600 s) before, from the "
            "machine's boot time plus its run duration (TRAINSTACK_DEADLINE), the run ends "
            "capacity_ended (exit 6) and the Job replaces the pod, which holds on a node that is "
            "going, and the supervisor sets the pool's autoscaling to 0 and deletes its VMs "
            "through its instance groups; `pulumi up` asks for new"
            " capacity and the run resumes from that checkpoint once the ProvisioningRequest is "
            "new: a changed run (trainer package, arguments, image) gets a new one, but with "
            "nothing changed `pulumi up` keeps the spent one (its nodes are gone and its spec "
            "cannot change); renew it with `pulumi up --replace` and its URN, from `pulumi stack "
            "--show-urns`; flex-start is billed at "
            "Dynamic Workload Scheduler prices, 'discounts (up to 53%)' on vCPU and GPU "
            "(https://cloud.google.com/kubernetes-engine/docs/concepts/dws); no per-machine "
            "flex-start price is in a stored source, so the plan counts on-demand price (an upper"
            " bound); flex-start draws on the preemptible GPU quota (frontier.md 5.2, Compute "
            "Engine; taken to hold on GKE too, unverified)"
        ),
    ],
    "flex-gce": [
        (
            "gpu_cluster: a4-highgpu-8g (A4) on Compute Engine uses GPUDirect RDMA over RoCE as "
            "GoogleCloudPlatform/cluster-toolkit @1047080 "
            "examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml renders it: 10 NICs per VM, "
            "in order the stack's network (gVNIC, eth0), flex-gce-net-1 (gVNIC, MTU 8896, eth1) "
            "and 8 MRDMA NICs on flex-gce-rdma-net (network profile us-central1-b-vpc-roce, MTU "
            "8896, one subnet per GPU); boot image projects/ubuntu-os-accelerator-images/global/i"
            "mages/ubuntu-accelerator-2204-amd64-with-nvidia-570-v20260210 (hyperdisk-balanced); "
            "at first boot the launcher installs nccl-gib from Google's apt repository 'deb "
            "[signed-by=/etc/apt/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt"
            " gpudirect-gib-apt main' and, where the image has no torchrun, torch==2.9.1 with "
            "pip; every rank's NCCL gets `source /usr/local/gib/scripts/set_nccl_env.sh` and "
            "/usr/local/gib/lib64 first on LD_LIBRARY_PATH, so NCCL loads the gIB net plugin "
            "(https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms); the values are "
            "the installed package's, not pinned by trainstack"
        ),
        (
            "gpu_cluster.flex_start: the group's resize request asks for all node_count VMs at "
            "once and waits ACCEPTED until Dynamic Workload Scheduler finds them ('If you lack "
            "quota for the requested resources or the resources are temporarily unavailable, then"
            " the DWS persists the request until you have sufficient quota and the resources "
            "become available'; 'You don't incur charges when you create, cancel, or delete "
            "resize requests', "
            "https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig), "
            "with no bound on the wait: `pulumi up` returns once the request is accepted, nothing"
            " bills before the VMs exist, and the run starts when they boot; the VMs bill from "
            "their creation until the MIG deletes them at the end of the requested run duration; "
            "each machine is deleted 4 h after it starts (limits.max_run_hours); Compute Engine "
            "deletes the VM then, with no notice Google documents: the trainer saves a checkpoint"
            " trainer.deadline_margin_s (default 600 s) before, from the machine's boot time plus"
            " its run duration (TRAINSTACK_DEADLINE), the run ends capacity_ended (exit 6) and "
            "the supervisor deletes the group's VMs; `pulumi up` asks for new capacity and the "
            "run resumes from that checkpoint once the group's resize request is replaced: its "
            "VMs are spent and `pulumi up` alone does not renew it (`pulumi up --replace` with "
            "its URN, from `pulumi stack --show-urns`), with a higher limits.max_run_hours (it is"
            " each VM's run duration and the run's limit, used up by then); after the supervisor "
            "deletes the VMs for a failure or a hang, `pulumi up` with the same config changes "
            "nothing (the resize request has succeeded and stays): ask again with `pulumi up "
            "--replace` and the resize request's URN, from `pulumi stack --show-urns`; flex-start"
            " is billed at Dynamic Workload Scheduler prices, 'discounts (up to 53%)' on vCPU and"
            " GPU (https://cloud.google.com/kubernetes-engine/docs/concepts/dws); no per-machine "
            "flex-start price is in a stored source, so the plan counts on-demand price (an upper"
            " bound); flex-start draws on the preemptible GPU quota (frontier.md 5.2, Compute "
            "Engine; taken to hold on GKE too, unverified)"
        ),
    ],
    "flex-vertex": [
        (
            "vertex: flex-start (scheduling.strategy FLEX_START): the job queues up to 24 hours "
            "(maxWaitDuration 86400s) for all its GPUs at once, then runs at most its "
            "scheduling.timeout (7 days at most), where Vertex AI ends it; what its replicas get "
            "then (a SIGTERM, a grace) Google does not say, so the run gets no deadline: its "
            "newest checkpoint is the last trainer.checkpoint_every step; flex-start is billed at"
            " Dynamic Workload Scheduler prices, 'discounts (up to 53%)' on vCPU and GPU "
            "(https://cloud.google.com/kubernetes-engine/docs/concepts/dws); no per-machine "
            "flex-start price is in a stored source, so the plan counts on-demand price (an upper"
            " bound); Vertex flex-start draws on Vertex AI preemptible GPU quota (Google's sample"
            " GoogleCloudPlatform/vertex-ai-samples notebook_util/common_util.py get_quota_id: a "
            "training job with is_dynamic_workload_scheduler gets "
            "CustomModelTrainingPreemptible<GPU>PerProjectPerRegion)"
        ),
    ],
}
MACHINES: Final[dict[str, list[tuple[str, str, dict[str, Any]]]]] = {
    "a3-mega-gke": [
        (
            "NodePool",
            "a3-mega-gke-gpu-gpu-pool",
            {
                "machineType": "a3-megagpu-8g",
                "guestAccelerators": [
                    {
                        "type": "nvidia-h100-mega-80gb",
                        "count": 8.0,
                        "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
                    }
                ],
                "spot": False,
                "nodeCount": 2.0,
                "placementPolicy": {"type": "COMPACT"},
            },
        ),
        (
            "NodePool",
            "a3-mega-gke-gpu-system-pool",
            {"machineType": "e2-standard-4", "nodeCount": 1.0},
        ),
    ],
    "a3-ultra-gke": [
        (
            "NodePool",
            "a3-ultra-gke-gpu-gpu-pool",
            {
                "machineType": "a3-ultragpu-8g",
                "guestAccelerators": [
                    {
                        "type": "nvidia-h200-141gb",
                        "count": 8.0,
                        "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
                    }
                ],
                "spot": False,
                "nodeCount": 2.0,
                "placementPolicy": {"type": "COMPACT"},
            },
        ),
        (
            "NodePool",
            "a3-ultra-gke-gpu-system-pool",
            {"machineType": "e2-standard-4", "nodeCount": 1.0},
        ),
    ],
    "a4-gke": [
        (
            "NodePool",
            "a4-gke-gpu-gpu-pool",
            {
                "machineType": "a4-highgpu-8g",
                "guestAccelerators": [
                    {
                        "type": "nvidia-b200",
                        "count": 8.0,
                        "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
                    }
                ],
                "spot": False,
                "nodeCount": 2.0,
                "placementPolicy": {"type": "COMPACT"},
            },
        ),
        ("NodePool", "a4-gke-gpu-system-pool", {"machineType": "e2-standard-4", "nodeCount": 1.0}),
    ],
    "a4-gce": [
        (
            "InstanceGroupManager",
            "a4-gce-gpu-group",
            {
                "resourcePolicies": {"workloadPolicy": "(known after deploy)"},
                "instanceLifecyclePolicy": {
                    "defaultActionOnFailure": "REPAIR",
                    "forceUpdateOnRepair": "YES",
                },
            },
        ),
        (
            "ResourcePolicy",
            "a4-gce-gpu-placement",
            {
                "workloadPolicy": {"type": "HIGH_THROUGHPUT"},
                "region": "us-central1",
                "name": "a4-gce-a100-placement",
            },
        ),
        (
            "InstanceTemplate",
            "a4-gce-gpu-template",
            {
                "machineType": "a4-highgpu-8g",
                "scheduling": {
                    "automaticRestart": True,
                    "onHostMaintenance": "TERMINATE",
                    "provisioningModel": "STANDARD",
                    "preemptible": False,
                },
            },
        ),
    ],
    "flex-gke": [
        (
            "NodePool",
            "flex-gke-gpu-gpu-pool",
            {
                "machineType": "a3-ultragpu-8g",
                "guestAccelerators": [
                    {
                        "type": "nvidia-h200-141gb",
                        "count": 8.0,
                        "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
                    }
                ],
                "spot": False,
                "flexStart": True,
                "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"},
                "initialNodeCount": 0.0,
                "autoscaling": {"locationPolicy": "ANY", "minNodeCount": 0.0, "maxNodeCount": 2.0},
                "queuedProvisioning": {"enabled": True},
            },
        ),
        (
            "ProvisioningRequest",
            "flex-gke-gpu-provisioning-request",
            {
                "provisioningClassName": "queued-provisioning.gke.io",
                "parameters": {"maxRunDurationSeconds": "14400"},
                "podSets": [
                    {"podTemplateRef": {"name": "flex-gke-train-<args digest>"}, "count": 2.0}
                ],
            },
        ),
        (
            "NodePool",
            "flex-gke-gpu-system-pool",
            {"machineType": "e2-standard-4", "nodeCount": 1.0},
        ),
    ],
    "flex-gce": [
        (
            "InstanceGroupManager",
            "flex-gce-gpu-group",
            {
                "resourcePolicies": {"workloadPolicy": "(known after deploy)"},
                "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
            },
        ),
        (
            "ResourcePolicy",
            "flex-gce-gpu-placement",
            {
                "workloadPolicy": {"type": "HIGH_THROUGHPUT"},
                "region": "us-central1",
                "name": "flex-gce-a100-placement",
            },
        ),
        (
            "ResizeRequest",
            "flex-gce-gpu-resize",
            {
                "requestedRunDuration": {"seconds": "14400"},
                "resizeBy": 2.0,
                "zone": "us-central1-b",
                "instanceGroupManager": "flex-gce-a100",
                "name": "flex-gce-a100-run",
            },
        ),
        (
            "InstanceTemplate",
            "flex-gce-gpu-template",
            {
                "machineType": "a4-highgpu-8g",
                "scheduling": {
                    "automaticRestart": False,
                    "onHostMaintenance": "TERMINATE",
                    "maxRunDuration": {"seconds": 14400.0},
                    "provisioningModel": "FLEX_START",
                    "instanceTerminationAction": "DELETE",
                },
                "reservationAffinity": {"type": "NO_RESERVATION"},
            },
        ),
    ],
    "flex-vertex": [
        (
            "CustomJob",
            "flex-vertex-job-job",
            {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {
                            "acceleratorCount": 8.0,
                            "machineType": "a3-highgpu-8g",
                            "acceleratorType": "NVIDIA_H100_80GB",
                        },
                        "replicaCount": "1",
                    }
                ],
                "scheduling": {
                    "strategy": "FLEX_START",
                    "maxWaitDuration": "86400s",
                    "restartJobOnWorkerRestart": False,
                },
            },
        )
    ],
}

REFUSED: Final[list[tuple[str, dict[str, Any], str]]] = [
    (
        "flex-spot",
        _gpu({"flex_start": True, "spot": True}),
        "gpu_cluster.flex_start: cannot be used with spot (flex-start is its own capacity, "
        "Dynamic Workload Scheduler); valid: flex_start: false, or remove spot",
    ),
    (
        "flex-reservation",
        _gpu({"flex_start": True, "reservation": "blocks-1"}),
        "gpu_cluster.flex_start: cannot be used with reservation (flex-start is its own "
        "capacity, Dynamic Workload Scheduler); valid: flex_start: false, or remove reservation",
    ),
    (
        "flex-gce-no-limit",
        _gpu({"flex_start": True, "backend": "gce", "machine_type": "a4-highgpu-8g"}),
        "limits.max_run_hours: required with gpu_cluster.flex_start on backend gce (Compute "
        "Engine flex-start VMs need a run duration); valid: up to 168 hours (7 days)",
    ),
    (
        "flex-8-days",
        _gpu({"flex_start": True}, {"max_run_hours": 192}),
        "limits.max_run_hours: 192 hours is longer than flex-start allows; valid: up to 168 "
        "hours (7 days), or flex_start: false",
    ),
    (
        "zone",
        _gpu({"zone": "us-central1-a"}),
        "gpu_cluster.zone: 'us-central1-a' does not offer H200 141GB (a3-ultragpu-8g); valid: "
        "asia-south1-b, asia-south2-c, europe-west1-b, europe-west4-a, us-central1-b, "
        "us-east4-b, us-east5-a, us-south1-b, us-west1-c",
    ),
    (
        "mega-gce",
        _gpu({"backend": "gce", "machine_type": "a3-megagpu-8g", "zone": "us-central1-a"}),
        "gpu_cluster.backend: gce does not render the GPUDirect-TCPXO fabric a3-megagpu-8g "
        "needs (Cluster Toolkit builds A3 Mega nodes only for Slurm, on a custom image adding "
        "gpudirect-tcpxo-apt and the rxdm receive-datapath manager started by Slurm's prolog); "
        "valid: backend: gke, or on gce a machine whose fabric it renders: a3-ultragpu-8g, "
        "a4-highgpu-8g",
    ),
    (
        "vertex-accelerator",
        _vertex("NVIDIA_B200"),
        "vertex.accelerator_type: 'NVIDIA_B200' does not match a3-highgpu-8g (H100 80GB); "
        "valid: NVIDIA_H100_80GB",
    ),
]


def _invoke(tmp_path: Path, name: str, config: dict[str, Any]) -> Any:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return runner.invoke(app, ["plan", "--config-file", str(path), "--json"])


def _machine_rows(plan: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The plan's machine rows: what each GPU-bearing resource asks Google for."""
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for r in sorted(plan["resources"], key=lambda r: r["name"]):
        kind, i = r["type"].rsplit(":", 1)[-1], r["inputs"]
        if kind == "NodePool":
            node = i["nodeConfig"]
            keys = (
                "machineType",
                "guestAccelerators",
                "spot",
                "flexStart",
                "maxRunDuration",
                "reservationAffinity",
            )
            row = {k: node[k] for k in keys if k in node}
            pool_keys = (
                "nodeCount",
                "initialNodeCount",
                "autoscaling",
                "placementPolicy",
                "queuedProvisioning",
            )
            row |= {k: i[k] for k in pool_keys if k in i}
        elif kind == "InstanceTemplate":
            keys = ("machineType", "scheduling", "reservationAffinity", "resourcePolicies")
            row = {k: i[k] for k in keys if k in i}
        elif kind in ("ResizeRequest", "ResourcePolicy"):
            row = {k: v for k, v in i.items() if k not in ("project", "description")}
        elif kind == "InstanceGroupManager":
            row = {k: i[k] for k in ("resourcePolicies", "instanceLifecyclePolicy") if k in i}
        elif kind == "ProvisioningRequest":
            # The template's name ends in a digest of the Job's arguments, the trainer
            # package's hash among them, which changes with every edit of trainers/: the row
            # holds that it names a PodTemplate of this plan, and the name's stem.
            row = json.loads(json.dumps(i["spec"]))
            templates = {
                t["inputs"]["metadata"]["name"]
                for t in plan["resources"]
                if t["type"].endswith(":PodTemplate")
            }
            for pod_set in row["podSets"]:
                ref = pod_set["podTemplateRef"]
                assert ref["name"] in templates, (ref["name"], templates)
                ref["name"] = re.sub(r"-[0-9a-f]{8}$", "-<args digest>", ref["name"])
        elif kind == "CustomJob":
            spec = i["body"]["jobSpec"]
            pools = [
                {k: w[k] for k in ("machineSpec", "replicaCount")} for w in spec["workerPoolSpecs"]
            ]
            row = {"workerPoolSpecs": pools, "scheduling": spec.get("scheduling")}
        else:
            continue
        rows.append((kind, r["name"], row))
    return rows


@pytest.mark.parametrize("name", list(PLANS))
def test_family_plan_notes_and_machines(tmp_path: Path, name: str) -> None:
    result = _invoke(tmp_path, name, PLANS[name])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    notes = [
        n
        for n in plan["notes"]
        if n.startswith(("gpu_cluster: ", "gpu_cluster.flex_start", "vertex: flex-start"))
        and "bundled torch trainer" not in n
    ]
    assert notes == NOTES[name]
    assert _machine_rows(plan) == MACHINES[name]


@pytest.mark.parametrize(("name", "config", "line"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_config_exits_2_with_one_line(
    tmp_path: Path, name: str, config: dict[str, Any], line: str
) -> None:
    result = _invoke(tmp_path, name, config)
    assert (result.exit_code, result.stderr) == (2, f"error: stack '{name}': {line}\n")

"""Defaults, allowed values and names shared by the A100Cluster validator and both backends."""

from __future__ import annotations

import os
from typing import Final

from trainstack.components import catalog
from trainstack.components._naming import gcp_name

KUBERNETES_VERSION: Final = "1.35"
KUBERNETES_VERSION_VERIFIED: Final = False
"""Default `min_master_version`, also the version the Job manifests are checked against.
Assumed offered by GKE's REGULAR channel in late 2026 (GKE versions are not in the fact
sheet); TO VERIFY with `gcloud container get-server-config`."""
MIN_KUBERNETES_VERSION: Final = (1, 29)
"""Oldest version whose Job API has everything the training Job uses, enabled by default:
backoffLimitPerIndex and podReplacementPolicy (beta in 1.29, GA 1.33/1.34),
podFailurePolicy (GA 1.31)."""
RELEASE_CHANNELS: Final = ("RAPID", "REGULAR", "STABLE")
DEFAULT_RELEASE_CHANNEL: Final = "REGULAR"
GPU_DRIVER_VERSIONS: Final = ("DEFAULT", "LATEST")
"""`gpu_driver_installation_config.gpu_driver_version` values that make GKE install the
driver (fact sheet 2.5); the API's unset value installs none."""
DEFAULT_GPU_DRIVER_VERSION: Final = "LATEST"
"""The newest COS driver: the default images are built for CUDA 12.8."""
DEFAULT_SYSTEM_MACHINE_TYPE: Final = catalog.GKE_SYSTEM_NODE_MACHINE
"""One on-demand node for kube-dns and the other add-ons (they cannot run on GPU nodes)."""
ENVIRONMENTS: Final = ("dev", "staging", "prod")
DEFAULT_ENVIRONMENT: Final = "dev"

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
RESERVATION_KEY: Final = "compute.googleapis.com/reservation-name"
BOOT_DISK_TYPE: Final = "pd-ssd"
DEFAULT_BOOT_DISK_GB: Final = 200
MIN_BOOT_DISK_GB: Final = 50


def region_of(zone: str) -> str:
    """`us-central1` for `us-central1-a`."""
    return zone.rsplit("-", 1)[0]


def job_name_for(deployment: str, node_count: int) -> str:
    """The Job's name: `<deployment>-train`, cut so pod `<job>-<last index>` fits 63."""
    return gcp_name(deployment, "train", max_len=63 - 1 - len(str(node_count - 1)))


def instance_names(deployment: str, node_count: int) -> list[str]:
    """Physical names of the gce instances; index i is node rank i."""
    return [gcp_name(deployment, f"a100-{i}") for i in range(node_count)]


def instance_name_pattern(names: list[str]) -> str:
    """A regular expression for log filters that matches these instance names: their shared
    prefix when each name is that prefix plus its rank, else the names themselves (a name
    shortened with a hash suffix by `gcp_name` does not end in its rank)."""
    prefix = os.path.commonprefix(names) if len(names) > 1 else names[0].rstrip("0123456789")
    if all(name[len(prefix) :].isdigit() for name in names):
        return f"^{prefix}"
    return "^(" + "|".join(names) + ")$"


GKE_SPOT_POD_GRACE_S: Final = 15
"""Seconds the pods of a preempted GKE Spot node get after SIGTERM, whatever their
terminationGracePeriodSeconds says: the VM stops 30 s after the notice, and on a best-effort
basis the kubelet's graceful node shutdown gives non-system Pods 15 s of it, then system
Pods the other 15 s (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms,
https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms)."""
SPOT_GRACE_MARGIN_S: Final = 3
"""Of those 15 s, what the launcher and torchrun need after the trainer's save to exit."""


def gke_spot_grace_note(preemption_grace_s: float) -> str:
    """The plan's note on a spot GKE cluster: whether the trainer's save after SIGTERM
    (`trainer.preemption_grace_s`) fits the time GKE gives a preempted node's pods."""
    budget = GKE_SPOT_POD_GRACE_S - SPOT_GRACE_MARGIN_S
    head = (
        f"gpu_cluster.spot: GKE gives the pods of a preempted Spot node {GKE_SPOT_POD_GRACE_S} s "
        "to stop (the rest of the 30 s notice is for system pods), whatever their "
        "terminationGracePeriodSeconds says "
        "(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/spot-vms); "
    )
    grace = f"{preemption_grace_s:g}"
    if preemption_grace_s <= budget:
        return head + (
            f"trainer.preemption_grace_s ({grace} s) fits: the trainer saves within {grace} s "
            f"and exits before then, if its checkpoint writes in time (see write_s of its "
            "checkpoint_written records)"
        )
    return head + (
        f"trainer.preemption_grace_s ({grace} s) does NOT fit: a save after a preemption "
        f"that takes longer than {budget} s is cut off and the run resumes from the "
        f"checkpoint before; set trainer.preemption_grace_s to at most {budget}"
    )

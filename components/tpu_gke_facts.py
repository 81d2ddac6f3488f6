"""What TPU slices on GKE (`TpuGkeSlices`, target `tpu_gke`) cost, draw and are told in a plan.

The stack config's target (`trainstack.infra.targets.tpu_gke`) and the component's own
`facts` (`trainstack.components.tpu_gke_slices`) call these functions, so a program and a
stack of the same slices plan the same totals, quota and notes
(`trainstack.components.facts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from trainstack.components.catalog import prices
from trainstack.components.catalog.machines import GKE_SYSTEM_NODE_MACHINE, MACHINES
from trainstack.components.catalog.tpu import TpuSlice
from trainstack.components.catalog.tpu_gke import (
    DEFAULT_MAX_RESTARTS,
    FLEX_START_SOURCE,
    JOBSET_MANIFESTS_NOTE,
    JOBSET_SOURCE,
    JOBSET_VERSION,
    JOBSET_WEBHOOK_NOTE,
    MULTISLICE_NOTE,
    gke_vms,
    tpu_gke_image_note,
)
from trainstack.components.facts import (
    SUPERVISOR_STOPS,
    gke_cluster_after_stop,
    gke_extra_hourly_usd,
    make_facts,
    region_of,
)
from trainstack.components.training_dashboard.targets import gke_filter_text
from trainstack.trainers.common.deadline import DEFAULT_MARGIN_S

TARGET: Final = "tpu_gke"
"""The `target` of a `TpuGkeSlices`' facts (the stack target's name)."""
JOBSET_NAMESPACE: Final = "default"
"""The namespace of the JobSet and its ServiceAccount."""
TPU_GKE_QUOTA_NOTE: Final = (
    "tpu: the TPU chips' quota is not checked: no Google page read names the quota GKE TPU "
    "node pools draw on (Cluster Toolkit's validator counts Compute Engine <VER>_TPUS / "
    "PREEMPTIBLE_<VER>_TPUS metrics, pkg/validators/quota.go; the Cloud TPU API's ids do not "
    "apply); the preflight checks the system node's CPUs only"
)
BACKEND_NOTE: Final = (
    "tpu: backend gke, Google's supported path for TPUs after the Cloud TPU API's freeze "
    "(bug fixes and security updates only; TPU7x and later only on Compute Engine or GKE): one "
    "GKE node pool per slice and a JobSet (JobSet controller {version}, {source}) over them"
)


def slices_hourly_usd(found: TpuSlice, slices: int, provisioning: str) -> float:
    """$/hour of the slices' TPU nodes at list price, unrounded: spot at the catalog's spot
    estimate; flex-start and reserved at the on-demand list price, the most they cost
    (flex-start: "discounts (up to 53%)", FLEX_START_SOURCE)."""
    price = prices.TPU_CHIP_PRICES[found.generation].hourly(provisioning == "spot")
    return found.chips * slices * price


def tpu_gke_summary(found: TpuSlice, slices: int, provisioning: str) -> dict[str, Any]:
    """`tpu_chips`, `gpus`, `machines` (the TPU VMs and the cluster's system node) and
    `hourly_usd` (the slices, the cluster fee and the system node)."""
    return {
        "tpu_chips": found.chips * slices,
        "gpus": 0,
        "machines": gke_vms(found) * slices + 1,
        "hourly_usd": slices_hourly_usd(found, slices, provisioning) + gke_extra_hourly_usd(),
    }


def tpu_gke_quota(region: str) -> list[dict[str, Any]]:
    """The quota checked: the system node's vCPUs (TPU_GKE_QUOTA_NOTE: not the chips')."""
    system = MACHINES[GKE_SYSTEM_NODE_MACHINE]
    return [prices.quota_need(prices.CPUS_QUOTA, {"region": region}, system.vcpus)]


def tpu_gke_notes(
    slices: int,
    provisioning: str,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    image: str | None = None,
) -> list[str]:
    """The plan's notes on the slices themselves (their supervisor's come with it); `image`
    the pods', named when it is the backend's default."""
    notes = [
        BACKEND_NOTE.format(version=JOBSET_VERSION, source=JOBSET_SOURCE.split(" (")[0]),
        JOBSET_MANIFESTS_NOTE,
        JOBSET_WEBHOOK_NOTE,
        (
            f"tpu: recovery: a preempted or repaired host fails its slice's Job and the "
            f"JobSet restarts every slice from the newest checkpoint, at most "
            f"{max_restarts} times; exits 1, 2 and 5 (code, config, missing "
            "accelerators) fail it for good"
        ),
        TPU_GKE_QUOTA_NOTE,
    ]
    image_note = None if image is None else tpu_gke_image_note(image)
    if image_note is not None:
        notes.append(image_note)
    if slices > 1:
        notes.append(MULTISLICE_NOTE)
    if provisioning == "flex-start":
        notes.append(
            "tpu: flex-start priced at the on-demand list price, the most it costs "
            f"(Google: DWS discounts up to 53%; {FLEX_START_SOURCE.split(' (')[0]})"
        )
        notes.append(
            "tpu: at the end of a flex-start node's run duration GKE removes it (how, and "
            "whether its pods get a notice, Google does not say): the node launcher gives "
            "the run TRAINSTACK_DEADLINE (the node's boot time plus its run duration) and "
            "sends your code or the TensorFlow trainer SIGTERM trainer.deadline_margin_s "
            f"(default {DEFAULT_MARGIN_S:g} s) before it (save and exit 143); the run "
            "ends capacity_ended (exit 6) and the supervisor stops the pools; `pulumi up` "
            "asks for new capacity and the run resumes from the checkpoint"
        )
    return notes


def tpu_gke_run_limit_own(provisioning: str, seconds: int) -> str:
    """What the slices themselves do at a run limit of `seconds` (the component's
    `max_run_seconds`, a stack's `limits.max_run_hours`): flex-start pools end their nodes;
    nothing else does, a JobSet restarting its child Jobs."""
    if provisioning == "flex-start":
        return f"flex-start node pools' max_run_duration {seconds}s (at most 7 days)"
    return f"no Job deadline stops the run at {seconds}s (the JobSet restarts its child Jobs)"


def tpu_gke_run_limit(provisioning: str, seconds: int) -> str:
    """How a run limit is enforced on supervised slices, in the plan's words."""
    return f"{tpu_gke_run_limit_own(provisioning, seconds)}; {SUPERVISOR_STOPS[TARGET]}"


def tpu_gke_after_stop(stack: str) -> list[dict[str, Any]]:
    """What bills after the supervisor set the slices' pools to 0 nodes: the cluster and its
    system node, as on target gke (billing.GKE_CLUSTER_BILLS_UNTIL_DELETED)."""
    return [gke_cluster_after_stop(stack)]


def tpu_gke_slices_facts(
    found: TpuSlice,
    plain: Mapping[str, Any],
    stack: str,
    values: Sequence[Any],
    name: str | None = None,
    code: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A `TpuGkeSlices`' facts (`trainstack.components.facts`), from its validated arguments
    `plain` (`values`: project, cluster name, JobSet name, your code's checkpoint folder);
    `name`: the component's Pulumi name; `code`: the plan's entry of its `code`."""
    project, cluster, jobset, checkpoint_dir = values
    slices = int(plain.get("slices", 1))
    provisioning = str(plain.get("provisioning", "on-demand"))
    seconds = plain.get("max_run_seconds")
    vms = gke_vms(found)
    return make_facts(
        "TpuGkeSlices",
        TARGET,
        name=name,
        **tpu_gke_summary(found, slices, provisioning),
        quota=tpu_gke_quota(region_of(str(plain["zone"]))),
        notes=tpu_gke_notes(
            slices,
            provisioning,
            int(plain.get("max_restarts", DEFAULT_MAX_RESTARTS)),
            plain.get("image"),
        ),
        run_limit=tpu_gke_run_limit_own(provisioning, seconds) if seconds else None,
        # The supervisor empties the slices' pools only: the cluster and its system node
        # bill on.
        stoppable_hourly_usd=round(slices_hourly_usd(found, slices, provisioning), 2),
        after_stop=tpu_gke_after_stop(stack),
        status={
            "project": project,
            "zone": plain["zone"],
            "cluster": cluster,
            "namespace": JOBSET_NAMESPACE,
            "jobset": jobset,
            "checkpoint_dir": checkpoint_dir,
            # Always your code: its checkpoint folders are its own (status takes its marker's
            # word).
            "own_code": True,
        },
        logs={
            "platform": "gke",
            "scope": gke_filter_text(cluster)[0],
            "workers": vms * slices,
            "vms_per_slice": vms,
        },
        code=code,
    )

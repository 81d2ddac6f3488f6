"""TPU slices on GKE: the facts (machine types, node labels, taint, flex-start zones, the
JobSet release, its restart default and multislice note) and the rules over them that the
stack config (`trainstack:tpu` with `backend: gke`) and `TpuGkeSlices` share, so both
report a fault in the same words.

Each rule returns every problem as `<prefix><key>: <problem>; valid: <values>`: the
component raises on them (no prefix), the stack config reports them (prefix `tpu.`).
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from trainstack.components.catalog.gpu_families import (
    GKE_FLEX_START_MAX_RUN_SOURCE,
    flex_start_run_problems,
)
from trainstack.components.catalog.problems import not_allowed, quote
from trainstack.components.catalog.tpu import TPU_GENERATIONS, TpuSlice

TpuBackend = Literal["tpu_vm", "gke"]
"""`tpu_vm`: the Cloud TPU API (`TpuPodSlice`); `gke`: TPU node pools in a GKE cluster
running a JobSet (`TpuGkeSlices`)."""
TPU_BACKENDS: Final[tuple[str, ...]] = get_args(TpuBackend)
GkeTpuProvisioning = Literal["on-demand", "spot", "reserved", "flex-start"]
"""How a GKE TPU node pool gets its VMs. `queued` (a Cloud TPU queued resource) is the TPU
API's and stays with backend tpu_vm."""
GKE_TPU_PROVISIONING: Final[tuple[str, ...]] = get_args(GkeTpuProvisioning)
AnyTpuProvisioning = Literal["on-demand", "spot", "queued", "reserved", "flex-start"]
"""`tpu.provisioning` over both backends (each backend's rule says which it takes)."""

# --------------------------------------------------------------------------------------
# Node pools
# --------------------------------------------------------------------------------------

GKE_TPU_SOURCE: Final = (
    "AI-Hypercomputer/xpk@367c838 src/xpk/core/system_characteristics.py "
    "(get_tpu_system_characteristics_map: ct6e-standard-1t for v6e 1x1, ct6e-standard-4t from "
    "2x2; ct5lp-hightpu-4t for v5e 2x4 and up; ct5p-hightpu-4t, ct4p-hightpu-4t; "
    "compute_chips_per_vm: 1 chip for 1x1, else 4) and src/xpk/core/nodepool.py "
    "(--num-nodes=<vms_per_slice>; '--tpu-topology should not be set for single-host node "
    "pools'; --placement-type=COMPACT --tpu-topology=<t> for multi-host); "
    "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus (ct5lp-hightpu-1t for "
    "v5e 1x1)"
)
SINGLE_CHIP_MACHINES: Final[dict[str, str]] = {
    "v5e": "ct5lp-hightpu-1t",
    "v6e": "ct6e-standard-1t",
}
"""The one-chip machine of a generation with a 1x1 topology (GKE_TPU_SOURCE)."""
CHIPS_PER_VM: Final = 4
"""Chips on each TPU VM of a GKE TPU node pool above one chip (xpk compute_chips_per_vm)."""

TPU_ACCELERATOR_LABEL: Final = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL: Final = "cloud.google.com/gke-tpu-topology"
NODEPOOL_LABEL: Final = "cloud.google.com/gke-nodepool"
SPOT_LABEL: Final = "cloud.google.com/gke-spot"
TPU_RESOURCE: Final = "google.com/tpu"
TPU_TAINT: Final = {"key": TPU_RESOURCE, "value": "present", "effect": "NO_SCHEDULE"}
"""The taint Cluster Toolkit puts on TPU pools (GoogleCloudPlatform/cluster-toolkit
modules/internal/tpu-definition); XPK's pods tolerate `google.com/tpu` (its golden
JobSet, recipes/Workload_create.md). Put here explicitly so CPU pods never land on TPU VMs
whether or not GKE adds it itself."""
TPU_TOLERATION: Final = {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
ACCELERATOR_NETWORK_PROFILE: Final = "auto"
NETWORKING_DRA_LABEL: Final = "cloud.google.com/gke-networking-dra-driver"
ACCELERATOR_NETWORK_PROFILE_GENERATIONS: Final[tuple[str, ...]] = ("v6e",)
"""The generations whose pools get GKE's accelerator network profile, as XPK creates them
(AI-Hypercomputer/xpk@367c838 src/xpk/core/nodepool.py: `if
system.supports_accelerator_network_profile: command += ' --accelerator-network-profile=auto'
' --node-labels=cloud.google.com/gke-networking-dra-driver=true'`; system_characteristics.py:
supports_accelerator_network_profile=True for every v6e shape, False for v4, v5e, v5p). Its
clusters are created `--enable-dataplane-v2 --enable-multi-networking` (src/xpk/commands/
cluster.py), and terraform-provider-google's acceptance test of the profile runs it on a
cluster with `datapath_provider = "ADVANCED_DATAPATH"` (google/services/container/
resource_container_node_pool_test.go testAccContainerNodePool_acceleratorNetworkProfile), so
a cluster with such pools gets both."""
MAX_SLICES: Final = 199
"""The most slices a stack plans. Google documents no maximum slice count for multislice
(https://cloud.google.com/tpu/docs/multislice-introduction, the GKE how-to/tpu-multislice
page: none found); each slice is its own node pool, and GKE says "Clusters that have more than
200 total node pools might have increased latency during autoscaling"
(https://cloud.google.com/kubernetes-engine/docs/how-to/node-auto-provisioning,
Limitations): 199 slices and the system pool are 200. Also keeps an absurd count from planning
for minutes (one pool and its supervision per slice)."""
MAX_SLICES_SOURCE: Final = (
    "one node pool per slice; GKE: 'Clusters that have more than 200 total node pools might "
    "have increased latency during autoscaling' (https://cloud.google.com/kubernetes-engine/"
    "docs/how-to/node-auto-provisioning), and Google documents no multislice maximum"
)
MULTISLICE_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice: Multislice "
    '"only supports multi-host TPU slice node pools"'
)

FLEX_START_SOURCE: Final = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model (read "
    "through retrosearch.org and the zh-cn copy): 'To run TPUs, use GKE version "
    "1.33.0-gke.1712000 or later. Flex-start supports the following version and zones: "
    "[v6e] asia-northeast1-b, us-east5-a, and us-east5-b. [v5e] us-west4-a. [v5p] us-east5-a. "
    "TPU v3 and v4 are not supported.'"
)
FLEX_START_ZONES: Final[dict[str, tuple[str, ...]]] = {
    "v6e": ("asia-northeast1-b", "us-east5-a", "us-east5-b"),
    "v5e": ("us-west4-a",),
    "v5p": ("us-east5-a",),
}
"""The generations and zones where GKE offers flex-start TPUs (FLEX_START_SOURCE)."""
FLEX_START_MAX_RUN_S: Final = 7 * 24 * 3600
"""'If you don't specify a value for the maxRunDurationSeconds parameter, the default is
seven days' (FLEX_START_SOURCE): nodes are reclaimed after it."""


def gke_vms(found: TpuSlice) -> int:
    """TPU VMs (GKE nodes) of one slice: 1 for a single chip, else 4 chips each."""
    return 1 if found.chips <= CHIPS_PER_VM else found.chips // CHIPS_PER_VM


def gke_chips_per_vm(found: TpuSlice) -> int:
    return found.chips // gke_vms(found)


def gke_machine_type(found: TpuSlice) -> str:
    """The GKE machine type of the slice's nodes (GKE_TPU_SOURCE)."""
    if found.chips == 1 and found.generation in SINGLE_CHIP_MACHINES:
        return SINGLE_CHIP_MACHINES[found.generation]
    return TPU_GENERATIONS[found.generation].gke_machine_type


# --------------------------------------------------------------------------------------
# The workload: JobSet
# --------------------------------------------------------------------------------------

JOBSET_VERSION: Final = "v0.12.0"
JOBSET_MANIFESTS: Final = (
    f"https://github.com/kubernetes-sigs/jobset/releases/download/{JOBSET_VERSION}/manifests.yaml"
)
JOBSET_SOURCE: Final = (
    "kubernetes-sigs/jobset@08dfbdf site/content/en/docs/installation/_index.md ('kubectl "
    "apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/"
    '$VERSION/manifests.yaml\'), site/hugo.toml (version = "v0.12.0", the newest release tag)'
)
JOBSET_MANIFESTS_SHA256: Final = "a41aaf12dd0b7b0a3d626b8d6107f32c3dc889d7e7830adc46b8cdb77a8963bb"
"""The sha256 one public repository pins for JOBSET_MANIFESTS and checks at download (a GKE
bootstrap script found by find_string "releases/download/v0.12.0/manifests.yaml", stored
file id 69117601904: `if digest != metadata["sha256"]: raise RuntimeError(...)`). Unverified
here: the release asset is not in the stored jobset snapshot (a git snapshot has no release
assets), and a single third-party pin is not a second source; so the stack applies the URL
as it is and its plan says so (JOBSET_MANIFESTS_NOTE)."""
JOBSET_MANIFESTS_NOTE: Final = (
    f"tpu: the JobSet controller is applied from its release URL ({JOBSET_MANIFESTS}) at "
    "`pulumi up`, not from a vendored copy, and its digest is not checked: sha256 "
    f"{JOBSET_MANIFESTS_SHA256} is one public pin of it, unverified here; compare `curl -sL "
    f"{JOBSET_MANIFESTS} | sha256sum` before deploying"
)
JOBSET_WEBHOOK_PORT: Final = 9443
"""The port JobSet's webhook Service sends to (kubernetes-sigs/jobset@v0.12.0
config/components/webhook/service.yaml: `port: 443`, `targetPort: 9443`)."""
JOBSET_WEBHOOK_NOTE: Final = (
    "tpu: not verified: whether the cluster's control plane reaches JobSet's webhook on the "
    f"system node's tcp:{JOBSET_WEBHOOK_PORT} (jobset config/components/webhook/service.yaml). "
    "The cluster has private nodes and no master_ipv4_cidr_block, which a VPC-peering "
    "private cluster takes (components/a100_cluster/gke.py gke_cluster); Google's pages that "
    "open a webhook port on a "
    "private cluster (Cloud Service Mesh 'Open ports on a private cluster', "
    "https://cloud.google.com/service-mesh/docs/private-cluster-open-port: a rule from the "
    "'master-ipv4-cidr' source range, as the control plane's default rule allows only tcp:443 "
    "and tcp:10250) describe VPC-peering clusters, and no Google page found says what a PSC "
    "cluster's control plane may reach; if creating the JobSet times out calling "
    "jobset-webhook-service, add an ingress rule for tcp:9443 from the control plane"
)
JOBSET_API: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_MAX: Final = 26
"""The longest JobSet name whose `coordinator` label JobSet accepts. Its controller sets the
label to `"%s-%s-%d-%d.%s"` (JobSet name, replicated job, job index, pod index, subdomain,
which defaults to the JobSet name) (kubernetes-sigs/jobset@v0.12.0
pkg/controllers/jobset_controller.go CoordinatorEndpoint, GetSubdomain), and its webhook
refuses the JobSet when that is not a valid label value (pkg/webhooks/jobset_webhook.go
validateCoordinatorLabelValue: "spec will lead to invalid label value ... for coordinator
label"), at most 63 characters: `<name>-slice-0-0.<name>` is 2N + 11, so N <= 26."""
EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
"""One child Job per node pool, i.e. per slice (api/jobset/v1alpha2/jobset_types.go)."""
DEFAULT_MAX_RESTARTS: Final = 10
"""Whole-set restarts (preemptions, host maintenance, lost hosts) before the JobSet fails:
`TpuGkeSlices`' `max_restarts` when not given."""
MULTISLICE_NOTE: Final = (
    "tpu: MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID and MEGASCALE_COORDINATOR_ADDRESS are set "
    "on every pod from JobSet's pod labels (replicatedjob-replicas, job-index, coordinator: "
    "the recipe of kubernetes-sigs/jobset#787 and XPK's Pathways template), because no Google "
    "or JobSet source says GKE sets them; JAX takes MEGASCALE_COORDINATOR_ADDRESS as the host "
    "with process id 0 (jax/_src/clusters/cloud_tpu_cluster.py get_coordinator_address: 'For "
    "both GCE via QueuedResources and GKE via JobSet, the Megascale coordinator address is set "
    "as the host with process id = 0'); MEGASCALE_PORT is left to libtpu's default "
    "(unverified); verify on a real two-slice run that GKE does not set different values"
)
"""The plan's note on a JobSet of more than one slice: its pods' MEGASCALE_* variables come
from JobSet's pod labels (`TpuGkeSlices` sets them so), a recipe no Google source confirms."""

# --------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------


def tpu_backend_problem(backend: Any, prefix: str = "") -> list[str]:
    if backend not in TPU_BACKENDS:
        return [not_allowed(f"{prefix}backend", backend, TPU_BACKENDS)]
    return []


def tpu_slices_problems(
    slices: Any, found: TpuSlice | None, backend: Any, prefix: str = ""
) -> list[str]:
    """`slices` is a count >= 1; above 1 only on backend gke with multi-host slices."""
    p = prefix
    if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
        return [f"{p}slices: {quote(slices)} is not a slice count; valid: an integer >= 1"]
    if slices > MAX_SLICES:
        return [
            (
                f"{p}slices: {slices} is more slices than a cluster takes "
                f"({MAX_SLICES_SOURCE}); valid: 1 to {MAX_SLICES}"
            )
        ]
    if slices == 1:
        return []
    if backend != "gke":
        return [
            (
                f"{p}slices: {slices} slices (multislice) need backend 'gke' (one TPU node pool "
                f"per slice, a JobSet over them); backend {quote(backend)} makes one slice; "
                f"valid: 1, or {p}backend: gke"
            )
        ]
    if found is not None and gke_vms(found) == 1:
        return [
            (
                f"{p}slices: {found.accelerator_type} is a single-host slice and GKE multislice "
                f"supports multi-host TPU slice node pools only ({MULTISLICE_SOURCE}); valid: 1, or "
                f"a slice of more than {CHIPS_PER_VM} chips"
            )
        ]
    return []


def tpu_provisioning_problems(
    provisioning: Any, backend: Any, found: TpuSlice | None, zone: Any, prefix: str = ""
) -> list[str]:
    """The provisioning values each backend has, and flex-start where Google offers it."""
    p = prefix
    if backend != "gke":
        if provisioning == "flex-start":
            return [
                (
                    f"{p}provisioning: 'flex-start' needs backend 'gke' (GKE flex-start node pools; "
                    "the Cloud TPU API's flex-start is alpha only); valid: on-demand, spot, "
                    f"queued, reserved, or {p}backend: gke"
                )
            ]
        return []
    if provisioning == "queued":
        return [
            (
                f"{p}provisioning: 'queued' is a Cloud TPU API queued resource, which backend "
                f"'gke' does not use; valid: {', '.join(GKE_TPU_PROVISIONING)}, or {p}backend: "
                "tpu_vm"
            )
        ]
    if provisioning not in GKE_TPU_PROVISIONING:
        return [not_allowed(f"{p}provisioning", provisioning, GKE_TPU_PROVISIONING)]
    if provisioning == "flex-start" and found is not None:
        zones = FLEX_START_ZONES.get(found.generation, ())
        if zone not in zones:
            offered = "; ".join(f"{g} in {', '.join(z)}" for g, z in FLEX_START_ZONES.items())
            return [
                (
                    f"{p}provisioning: 'flex-start' is not offered for {found.generation} in "
                    f"{zone} (Google lists {offered}: {FLEX_START_SOURCE.split(' (')[0]}); valid: "
                    "on-demand, spot, reserved, or a listed generation and zone"
                )
            ]
    return []


def tpu_flex_start_run_problems(
    provisioning: Any, run_seconds: Any, run_key: str, prefix: str = ""
) -> list[str]:
    """A flex-start slice's run (`run_key`) of at most 7 days: its pools' max_run_duration
    cannot be longer (gpu_families.flex_start_run_problems, the rule the GPU flex-start path
    holds to)."""
    if provisioning != "flex-start" or not isinstance(run_seconds, int):
        return []
    return flex_start_run_problems(
        run_seconds,
        run_key,
        f"{prefix}provisioning flex-start",
        f"{prefix}provisioning on-demand, spot or reserved",
        GKE_FLEX_START_MAX_RUN_SOURCE,
    )


def tpu_gke_only_problems(
    backend: Any, runtime_version: Any, reservation: Any, provisioning: Any, prefix: str = ""
) -> list[str]:
    """Keys that mean something else (or nothing) on backend gke."""
    if backend != "gke":
        return []
    p = prefix
    problems: list[str] = []
    if runtime_version is not None:
        problems.append(
            f"{p}runtime_version: {quote(runtime_version)} is a Cloud TPU VM runtime; on "
            "backend 'gke' the TPU software comes with the GKE node image and your container; "
            "valid: remove it"
        )
    if reservation is not None and provisioning != "reserved":
        problems.append(
            f"{p}reservation: {quote(reservation)} is used with provisioning 'reserved' on "
            f"backend 'gke', not {quote(provisioning)}; valid: remove it, or "
            f"{p}provisioning: reserved"
        )
    return problems


JAX_TPU_IMAGE: Final = "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.2-rev1"
"""Google's JAX AI image for TPUs, the default image of your code on backend gke (your
`trainer.image` / `image` wins). Pinned by a tag Google publishes, not `latest`; pulled by
tag, its digest unverified (no stored source ties a digest to this tag): the tag can move,
as `catalog.images` says of its other tag-only pins (JAX_TPU_IMAGE_SOURCE)."""
JAX_TPU_IMAGE_SOURCE: Final = (
    "GoogleCloudPlatform/cluster-toolkit@1047080 docs/gcluster_job_guide.md:678 (the TPU7x "
    "MaxText Dockerfile: 'FROM us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:"
    "jax0.8.2-rev1', then 'RUN pip install ...'; :429 the v6e one FROM ...:jax0.6.1-rev1); "
    "Google's GKE TPU examples run the same image at :latest: cluster-toolkit "
    "examples/gke-tpu-v6e/tpu-multislice.yaml:44 ('Based on: https://cloud.google.com/"
    "kubernetes-engine/docs/how-to/tpu-multislice#standard'), kubernetes-sigs/jobset "
    "site/static/examples/tpu-multislice/v6e-jax-workload.yaml:34; digest unverified"
)
GKE_TPU_IMAGE_SOURCE: Final = (
    "Google's GKE TPU image is the JAX AI image (JAX_TPU_IMAGE_SOURCE); no Google source "
    "found publishes a container image with TensorFlow for TPUs: "
    "https://docs.cloud.google.com/tpu/docs/run-in-container builds your own"
)


def tpu_gke_code_problems(user_code: bool, prefix: str = "trainer.") -> list[str]:
    """The code a GKE TPU slice can run: your own, in your image or by default Google's JAX
    AI image for TPUs (JAX_TPU_IMAGE).

    The bundled TPU trainer (TensorFlow with TPUStrategy) has no maintained TPU container
    image to run in (GKE_TPU_IMAGE_SOURCE): Google's TPU image carries JAX."""
    p = prefix
    if not user_code:
        return [
            (
                f"{p}framework: the bundled tensorflow trainer has no maintained TPU container "
                "image (Google publishes JAX's, none with TensorFlow for TPUs) to run on backend "
                f"'gke'; valid: your own code ({p}entrypoint, on {p}image or the default "
                f"{JAX_TPU_IMAGE}), or tpu.backend: tpu_vm"
            )
        ]
    return []


def tpu_gke_image(image: str | None) -> str:
    """The image the pods run: `image` when given, else JAX_TPU_IMAGE."""
    return image or JAX_TPU_IMAGE


def tpu_gke_image_note(image: str) -> str | None:
    """The plan's note on the default image (None for an image you named)."""
    if image != JAX_TPU_IMAGE:
        return None
    return (
        f"tpu: your code runs on {JAX_TPU_IMAGE}, Google's JAX AI image for TPUs (the "
        "backend's default without trainer.image), pulled by tag: its digest is unverified "
        f"({JAX_TPU_IMAGE_SOURCE.split(' (')[0]})"
    )

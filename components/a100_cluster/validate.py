"""Every rule for an A100 cluster, in one function: `a100_cluster_problems`.

The component checks its arguments with it (no prefix) and `trainstack.infra.config` checks a stack's
`trainstack:gpu_cluster` section with it (prefix `gpu_cluster.`, `shape_only=True`), so
both report a problem in the same words, `<prefix><key>: <what is wrong>; valid: <values>`,
without the component needing the stack config.

    a100_cluster_problems({"machine_type": "a2-highgpu-3g", "zone": "us-central1-a"},
                          prefix="gpu_cluster.", shape_only=True)
    # ["gpu_cluster.machine_type: 'a2-highgpu-3g' is not a known A2 machine type; valid: ..."]
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainstack.components import catalog
from trainstack.components._node_args import secret_env_names_problems, validate_node_args
from trainstack.components.a100_cluster._common import (
    DEFAULT_BOOT_DISK_GB,
    DEFAULT_ENVIRONMENT,
    DEFAULT_GPU_DRIVER_VERSION,
    DEFAULT_RELEASE_CHANNEL,
    DEFAULT_SYSTEM_MACHINE_TYPE,
    ENVIRONMENTS,
    GPU_DRIVER_VERSIONS,
    KUBERNETES_VERSION,
    MIN_BOOT_DISK_GB,
    MIN_KUBERNETES_VERSION,
    RELEASE_CHANNELS,
)
from trainstack.components.catalog.batch import gpu_world_size, trainer_args_batch_problem
from trainstack.components.catalog.gke_versions import (
    GPU_FLEX_START_VERSION,
    version_floor_problems,
)
from trainstack.components.catalog.gpu_fabric import gke_fabric
from trainstack.components.catalog.gpu_fabric_gce import (
    GCE_FABRIC_MACHINES,
    GCE_UNRENDERED,
    RESIZE_REQUEST_MIN_SECONDS,
    fabric_kind,
)
from trainstack.components.catalog.gpu_families import (
    COMPACT_FLEX_START_SOURCE,
    FLEX_START_MAX_HOURS,
    GPU_FAMILIES,
    cuda_floor_of,
    flex_start_run_problems,
    machine_family,
)
from trainstack.components.catalog.gpus import GPU_ZONES
from trainstack.components.catalog.images import (
    KUBERNETES_IMAGES,
    cuda_floor_problem,
    vertex_training_image,
)
from trainstack.components.catalog.machines import GPU_MACHINES
from trainstack.components.catalog.problems import did_you_mean, pydantic_problem
from trainstack.components.gpu_startup import check_trainer, uses_torchrun
from trainstack.components.kubernetes_training_job import DEFAULT_MODULE
from trainstack.components.training_network import subnet_zone_problems
from trainstack.components.user_code import CodeRules, args_with_code

SHAPE_KEYS: Final = (
    "backend",
    "machine_type",
    "node_count",
    "zone",
    "spot",
    "reservation",
    "compact_placement",
    "tier_1_networking",
    "flex_start",
)
"""The arguments that fix the machines: exactly the keys of a stack's `gpu_cluster` section."""
GKE_ONLY_KEYS: Final = (
    "kubernetes_version",
    "release_channel",
    "gpu_driver_version",
    "system_machine_type",
    "master_authorized_cidrs",
)
_VERSION = re.compile(r"(\d+)\.(\d+)")


class A100Shape(BaseModel):
    """The machines of an A100 cluster: its `SHAPE_KEYS`, parsed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["gke", "gce"] = "gke"
    machine_type: str
    """An A2 machine type, e.g. `a2-highgpu-8g`."""
    node_count: int = Field(default=1, ge=1, le=catalog.MAX_NODES)
    """Machines, in one zone: a GKE node pool or a zonal managed instance group
    (`trainstack.components.catalog.gpus.MAX_NODES`)."""
    zone: str
    spot: bool = False
    reservation: str | None = None
    """Specific reservation to consume; not with spot."""
    compact_placement: bool = True
    """Default true, but false for a gke flex-start pool of a family GKE does not place
    compactly on flex-start, or of more than one node (queued provisioning;
    `_flex_start_placement`)."""
    tier_1_networking: bool = False
    flex_start: bool = False
    """Dynamic Workload Scheduler flex-start capacity (gke: the node pool's `flex_start`;
    gce: one resize request of the instance group for `node_count` `FLEX_START` VMs, run for
    `limits.max_run_hours`, at least 10 minutes); not with spot or a reservation, at most
    `catalog.gpu_families.FLEX_START_MAX_HOURS`."""

    @model_validator(mode="before")
    @classmethod
    def _flex_start_placement(cls, data: Any) -> Any:
        """No COMPACT placement by default on a gke flex-start pool of a family GKE does
        not place compactly on flex-start (`catalog.gpu_families.COMPACT_FLEX_START_SOURCE`);
        an explicit `compact_placement: true` there is refused (`_compact_flex_problems`)."""
        if not isinstance(data, Mapping) or "compact_placement" in data:
            return data
        if data.get("flex_start") is not True or data.get("backend", "gke") != "gke":
            return data
        if data.get("machine_type") in GPU_MACHINES and not compact_with_flex(
            str(data["machine_type"])
        ):
            return {**data, "compact_placement": False}
        nodes = data.get("node_count", 1)
        if isinstance(nodes, int) and nodes > 1:
            # Across nodes the pool has queued provisioning (`_compact_flex_problems`).
            return {**data, "compact_placement": False}
        return data

    @property
    def machine(self) -> catalog.MachineType:
        """Catalog entry of `machine_type`."""
        return GPU_MACHINES[self.machine_type]

    @property
    def total_gpus(self) -> int:
        """GPUs across all nodes."""
        return self.machine.gpus * self.node_count


def compact_with_flex(machine_type: str) -> bool:
    """Whether GKE places a flex-start pool of `machine_type` compactly."""
    return machine_family(machine_type).compact_with_flex_start


GpuShape = A100Shape
"""The same model under the name for any GPU family (A2, A3, A4)."""


def parse_version(version: object) -> tuple[int, int] | None:
    """`(major, minor)` of a `1.N` version string, None when it is not one."""
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    return (int(match[1]), int(match[2])) if match else None


def a100_cluster_problems(
    args: Mapping[str, Any], *, prefix: str, shape_only: bool = False
) -> list[str]:
    """Every problem with `A100Cluster` arguments, one line each, `<prefix><key>: ...`.

    `prefix` is the dotted path the caller reports under: "" for the component's own
    arguments, `gpu_cluster.` for a stack's section. With `shape_only`, `args` holds only
    `SHAPE_KEYS` (a stack's section): the component's other arguments, `deployment_name`
    included, are then neither required nor checked. Arguments that are pulumi Outputs, or a
    shape that does not parse, are reported alone: the other checks need the values.
    """
    outputs = [
        f"{prefix}{key}: must be a plain value, not a pulumi Output (it shapes the resources "
        "and is checked before any is registered)"
        for key in (*SHAPE_KEYS, "deployment_name")
        if isinstance(args.get(key), pulumi.Output)
    ]
    if outputs:
        return outputs
    try:
        shape = A100Shape.model_validate({key: args[key] for key in SHAPE_KEYS if key in args})
    except ValidationError as exc:
        return [pydantic_problem(err, prefix.rstrip("."), A100Shape) for err in exc.errors()]
    problems = _shape_problems(shape, prefix)
    if shape_only:
        return problems
    problems += _component_problems(args, prefix)
    run = args.get("max_run_seconds")
    if run is None or (isinstance(run, int) and not isinstance(run, bool)):
        problems += flex_start_problems(shape, run, f"{prefix}max_run_seconds")
    if shape.backend == "gke":
        problems += _gke_problems(args, prefix, shape)
    else:
        problems += [
            f"{prefix}{key}: only used with backend gke" for key in GKE_ONLY_KEYS if key in args
        ]
    if "training" in args:
        problems += _training_problems(args["training"], shape, prefix)
    return problems


GPU_CODE: Final = {
    "gke": CodeRules("gpu_cluster", runs_image=True, pulumi_secrets=True),
    "gce": CodeRules("gpu_cluster", pulumi_secrets=True, no_image=("backend gce", "backend gke")),
}
"""What your code may use on each backend: either launcher (default torchrun); a container
image on gke only (gce's VMs run none): the `gke` and `gce` targets' own `code_rules`."""


def with_code(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """`args` with `training.code` as what the nodes run: `node_args` with the run contract's
    folders in `training.checkpoint_url` / `data_url`, and on gke the code's `image`.
    ValueError, one line per problem, when the code does not fit (`trainstack:trainer`'s
    rules on this backend)."""
    training = args.get("training")
    if not isinstance(training, Mapping) or training.get("code") is None:
        return args
    backend = args.get("backend", "gke")
    rules = GPU_CODE.get(str(backend), GPU_CODE["gke"])
    out = args_with_code(training, rules, args["deployment_name"], prefix="training.")
    return {**args, "training": out}


def validate_args(args: Mapping[str, Any]) -> A100Shape:
    """Check the component's plain arguments; return their shape.

    Raises ValueError listing every problem `a100_cluster_problems` finds, one per line.
    """
    problems = a100_cluster_problems(args, prefix="")
    if problems:
        raise ValueError("\n".join(problems))
    return A100Shape.model_validate({key: args[key] for key in SHAPE_KEYS if key in args})


# --------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------


def _shape_problems(shape: A100Shape, p: str) -> list[str]:
    """Machine type known, zone offers its GPU, spot versus reservation, placement limit."""
    problems: list[str] = []
    machine = GPU_MACHINES.get(shape.machine_type)
    if machine is None:
        problems.append(
            f"{p}machine_type: {shape.machine_type!r} is not a known GPU machine type"
            f"{did_you_mean(shape.machine_type, GPU_MACHINES)} "
            f"valid: {', '.join(GPU_MACHINES)}"
        )
    elif machine.gpu_model is not None:
        zones = GPU_ZONES[machine.gpu_model]
        if shape.zone not in zones:
            problems.append(
                f"{p}zone: {shape.zone!r} does not offer {machine.gpu_model} "
                f"({shape.machine_type}); valid: {', '.join(zones)}"
            )
    problems += _fabric_backend_problems(shape, p)
    if shape.spot and shape.reservation is not None:
        problems.append(
            f"{p}reservation: {shape.reservation!r} cannot be used with spot: true; "
            "valid: spot: false, or no reservation"
        )
    for key, value in (("spot", shape.spot), ("reservation", shape.reservation)):
        if shape.flex_start and value not in (False, None):
            problems.append(
                f"{p}flex_start: cannot be used with {key} (flex-start is its own capacity, "
                f"Dynamic Workload Scheduler); valid: flex_start: false, or remove {key}"
            )
    problems += _compact_flex_problems(shape, p)
    limit = catalog.COMPACT_PLACEMENT_MAX_NODES
    if shape.compact_placement and shape.node_count > limit:
        problems.append(
            f"{p}node_count: {shape.node_count} exceeds the compact placement limit of "
            f"{limit} nodes; valid: 1 to {limit}, or compact_placement: false"
        )
    return problems


def _compact_flex_problems(shape: A100Shape, p: str) -> list[str]:
    """COMPACT placement on a gke flex-start pool only where GKE offers it."""
    if not (shape.backend == "gke" and shape.flex_start and shape.compact_placement):
        return []
    if shape.machine_type not in GPU_MACHINES:
        return []
    if compact_with_flex(shape.machine_type):
        if shape.node_count == 1:
            return []
        queued = (
            f"{p}compact_placement: true cannot be used with {p}flex_start on "
            f"{shape.node_count} nodes (across nodes the pool has queued provisioning, which "
            "has no compact placement on GPUs: GoogleCloudPlatform/cluster-toolkit modules/"
            "compute/gke-node-pool/main.tf, 'placement_policy cannot be COMPACT when "
            "enable_queued_provisioning is true, unless using TPUs'); valid: "
            "compact_placement: false (the default with flex_start across nodes), or "
            "node_count: 1"
        )
        return [queued]
    allowed = ", ".join(
        m.name
        for m in GPU_MACHINES.values()
        if m.gpu_model is not None and GPU_FAMILIES[m.gpu_model].compact_with_flex_start
    )
    problem = (
        f"{p}compact_placement: true cannot be used with {p}flex_start on "
        f"{shape.machine_type} (GKE gives flex-start pools compact placement on A3 Ultra and "
        f"A4 only: {COMPACT_FLEX_START_SOURCE.split(', precondition')[0]}); valid: "
        f"compact_placement: false (the default with flex_start here), or machine_type "
        f"{allowed}"
    )
    return [problem]


def _fabric_backend_problems(shape: A100Shape, p: str) -> list[str]:
    """A3 High and A3 Mega scale only over their GPUDirect fabric (TCPX, TCPXO), which the gce
    backend does not render (`catalog.gpu_fabric_gce.GCE_UNRENDERED` says why); A4 and A3
    Ultra get theirs there (`gpu_fabric_gce.gce_fabric`)."""
    if shape.backend != "gce" or shape.machine_type not in GPU_MACHINES:
        return []
    kind = fabric_kind(shape.machine_type)
    if kind not in GCE_UNRENDERED:
        return []
    problem = (
        f"{p}backend: gce does not render the GPUDirect-{kind.upper()} fabric "
        f"{shape.machine_type} needs ({GCE_UNRENDERED[kind]}); valid: backend: gke, or on gce "
        f"a machine whose fabric it renders: {', '.join(GCE_FABRIC_MACHINES)}"
    )
    return [problem]


def flex_start_problems(shape: A100Shape, run_seconds: int | None, run_key: str) -> list[str]:
    """Flex-start's run duration, `run_key` naming where it comes from (the component's
    `max_run_seconds`, a stack's `limits.max_run_hours`): required on gce, whose
    `FLEX_START` VMs need `maxRunDuration` ("provisioningModel: FLEX_START ... with
    maxRunDuration or terminationTime", frontier.md 5.2, DISC:compute.v1.json#Scheduling),
    and at most 7 days on either backend (frontier.md 5.1, 5.2); on gce at least the 10
    minutes a resize request's run lasts (`RESIZE_REQUEST_MIN_SECONDS`)."""
    if not shape.flex_start:
        return []
    hours = FLEX_START_MAX_HOURS
    if run_seconds is None:
        if shape.backend != "gce":
            return []
        problem = (
            f"{run_key}: required with gpu_cluster.flex_start on backend gce (Compute Engine "
            f"flex-start VMs need a run duration); valid: up to {hours} hours (7 days)"
        )
        return [problem]
    if shape.backend == "gce" and run_seconds < RESIZE_REQUEST_MIN_SECONDS:
        problem = (
            f"{run_key}: {run_seconds / 3600:g} hours is shorter than a flex-start resize "
            f"request's run allows; valid: {RESIZE_REQUEST_MIN_SECONDS // 60} minutes to "
            f"{hours} hours (7 days)"
        )
        return [problem]
    return flex_start_run_problems(run_seconds, run_key, "flex-start", "flex_start: false")


def _component_problems(args: Mapping[str, Any], p: str) -> list[str]:
    """The arguments every backend takes besides the shape."""
    problems: list[str] = []
    deployment = args.get("deployment_name")
    if not isinstance(deployment, str) or not deployment:
        problems.append(
            f"{p}deployment_name: {deployment!r} is not a non-empty string; valid: the stack's "
            "name, e.g. pulumi.get_stack()"
        )
    problems += subnet_zone_problems(args.get("zone"), args.get("subnetwork_self_link"), f"{p}zone")
    problems += _subnet_overlap_problems(args, p)
    environment = args.get("environment", DEFAULT_ENVIRONMENT)
    if environment not in ENVIRONMENTS:
        problems.append(
            f"{p}environment: {environment!r} is not allowed; valid: {', '.join(ENVIRONMENTS)}"
        )
    disk = args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB)
    if isinstance(disk, bool) or not isinstance(disk, int) or disk < MIN_BOOT_DISK_GB:
        problems.append(
            f"{p}boot_disk_size_gb: {disk!r} is too small; valid: an integer >= {MIN_BOOT_DISK_GB}"
        )
    return problems


MULTI_NIC_SOURCE: Final = (
    "https://cloud.google.com/vpc/docs/create-use-multiple-interfaces: 'A network interface "
    "must connect to a subnet that has an IP address range that does not overlap with the IP "
    "address range of another interface on the same instance.'"
)


def _subnet_overlap_problems(args: Mapping[str, Any], p: str) -> list[str]:
    """The nodes' own subnet against the fabric's: each NIC on a range of its own
    (`MULTI_NIC_SOURCE`)."""
    cidr, machine = args.get("subnet_cidr"), args.get("machine_type")
    if cidr is None or args.get("backend", "gke") != "gke" or machine not in GPU_MACHINES:
        return []
    fabric = gke_fabric(str(machine), "", str(args.get("zone")))
    if fabric is None:
        return []
    try:
        own = ipaddress.ip_network(cidr, strict=True)
    except (TypeError, ValueError):
        return [f"{p}subnet_cidr: {cidr!r} is not a CIDR block; valid: e.g. 10.128.0.0/20"]
    ranges = [ipaddress.IPv4Network(r) for net in fabric.networks for _, r in net.subnets]
    if not any(own.overlaps(r) for r in ranges):
        return []
    taken = ", ".join(str(r) for r in ipaddress.collapse_addresses(ranges))
    problem = (
        f"{p}subnet_cidr: {cidr!r} overlaps the GPUDirect-{fabric.fabric.upper()} subnets of "
        f"{machine} ({taken}), and a node's network interfaces need ranges that do not "
        f"overlap ({MULTI_NIC_SOURCE.split(': ')[0]}); valid: a range outside {taken}, e.g. "
        "10.128.0.0/20"
    )
    return [problem]


def _gke_problems(args: Mapping[str, Any], p: str, shape: A100Shape) -> list[str]:
    problems: list[str] = []
    version = args.get("kubernetes_version", KUBERNETES_VERSION)
    parsed = parse_version(version)
    floor = ".".join(map(str, MIN_KUBERNETES_VERSION))
    if parsed is None:
        problems.append(f"{p}kubernetes_version: {version!r} is not a version; valid: 1.N")
    elif parsed < MIN_KUBERNETES_VERSION:
        problems.append(
            f"{p}kubernetes_version: {version!r} is too old for the training Job; valid: >= {floor}"
        )
    else:
        problems += version_floor_problems(version, f"{p}kubernetes_version", _floors(shape))
    channel = args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
    if channel not in RELEASE_CHANNELS:
        problems.append(
            f"{p}release_channel: {channel!r} is not allowed; valid: {', '.join(RELEASE_CHANNELS)}"
        )
    driver = args.get("gpu_driver_version", DEFAULT_GPU_DRIVER_VERSION)
    if driver not in GPU_DRIVER_VERSIONS:
        problems.append(
            f"{p}gpu_driver_version: {driver!r} is not allowed; "
            f"valid: {', '.join(GPU_DRIVER_VERSIONS)}"
        )
    system = args.get("system_machine_type", DEFAULT_SYSTEM_MACHINE_TYPE)
    if system not in catalog.CPU_MACHINES:
        problems.append(
            f"{p}system_machine_type: {system!r} is not a known CPU machine type; "
            f"valid: {', '.join(catalog.CPU_MACHINES)}"
        )
    for cidr in args.get("master_authorized_cidrs") or []:
        problem = cidr_problem(cidr)
        if problem:
            problems.append(f"{p}master_authorized_cidrs: {problem}")
    return problems


def _floors(shape: A100Shape) -> list[tuple[str, str]]:
    """The GKE versions the cluster's machines and capacity need (`catalog.gke_versions`)."""
    if shape.machine_type not in GPU_MACHINES:
        return []  # reported by the machine type's own rule
    family = machine_family(shape.machine_type)
    why = (
        f"{family.name} ({shape.machine_type}) on GKE (the oldest version a Cluster Toolkit "
        "blueprint runs it on)"
    )
    floors = [(family.gke_version_floor, why)]
    if shape.flex_start:
        floors.append(
            (GPU_FLEX_START_VERSION, f"GPU flex-start (GKE: {GPU_FLEX_START_VERSION} or later)")
        )
    return floors


def cidr_problem(value: Any) -> str | None:
    """What is wrong with one authorized-network block, None when it is an IPv4 CIDR block
    with the host bits zero (the stack key and the component share this rule). IPv6 is
    refused: the provider validates `cidr_block` with `validation.IsCIDRNetwork(0, 32)`
    (hashicorp/terraform-provider-google, google/services/container/
    resource_container_cluster.go, `cidrBlockConfig`), so an IPv6 block would pass the plan
    and fail at `pulumi preview`."""
    try:
        if not isinstance(value, str):
            raise TypeError(value)
        network = ipaddress.ip_network(value, strict=True)
    except (TypeError, ValueError):
        return (
            f"{value!r} is not a CIDR block; valid: an address/prefix with the host bits zero, "
            "e.g. 203.0.113.0/24 or 198.51.100.7/32"
        )
    if network.version != 4:
        return (
            f"{value!r} is IPv6; valid: an IPv4 block (the GKE provider takes IPv4 only), "
            "e.g. 203.0.113.0/24"
        )
    return None


def _training_problems(training: Any, shape: A100Shape, p: str) -> list[str]:
    backend = shape.backend
    if not isinstance(training, Mapping):
        return [
            (
                f"{p}training: {training!r} is not a mapping with package_uri; valid: "
                "{package_uri: TrainerPackage.uri, ...}"
            )
        ]
    problems: list[str] = []
    if training.get("package_uri") is None:
        problems.append(f"{p}training.package_uri: required; valid: TrainerPackage.uri")
    module = training.get("trainer_module", DEFAULT_MODULE)
    user_code = "node_args" in training
    try:
        if not user_code:
            check_trainer(module, training.get("trainer_args", []))
        elif "trainer_module" in training or "trainer_args" in training:
            raise ValueError(
                "node_args: runs your own code, which takes no trainer_module or "
                "trainer_args; valid: remove them"
            )
        elif isinstance(training["node_args"], list | tuple):  # an Output: checked when known
            validate_node_args(training["node_args"])
    except ValueError as exc:
        problems.append(f"{p}training.{exc}")
        return problems
    if not user_code:
        # The global batch against the nodes' world size, as a stack's trainer section.
        batch = trainer_args_batch_problem(
            module,
            training.get("trainer_args", []),
            lambda framework, strategy: gpu_world_size(
                framework, strategy, machines=shape.node_count, gpus_per_machine=shape.machine.gpus
            ),
            f"{p}training.trainer_args --",
        )
        problems += [batch] if batch else []
    problems += secret_env_names_problems(training, f"{p}training.")
    if backend == "gce":
        if "image" not in training and not user_code and not uses_torchrun(module):
            problems.append(
                f"{p}training.image: required on gce for trainer_module {module!r}; the "
                "default Deep Learning VM image has PyTorch only; valid: an image with the "
                "trainer's framework"
            )
        problems += [
            f"{p}training.{key}: only used with backend gke; valid: remove it"
            for key in ("wait_for_completion", "timeout_s")
            if key in training
        ]
    else:
        if not user_code and "image" not in training:
            problems += bundled_image_problems(module, shape.machine_type, f"{p}training.image")
        if training.get("wait_for_completion") and "timeout_s" not in training:
            problems.append(
                f"{p}training.timeout_s: required when wait_for_completion is true; "
                "valid: seconds > 0"
            )
    return problems


def bundled_image_problems(module: str, machine_type: str, key: str) -> list[str]:
    """The GKE pods' bundled image of `module` against the CUDA floor of the machine's GPU
    family (`catalog.gpu_families`): the torch trainer gets an image that reaches it
    (`catalog.images.vertex_training_image`), the TensorFlow one has none past CUDA 12.3."""
    floor = cuda_floor_of(machine_type)
    if floor is None or module not in KUBERNETES_IMAGES:
        return []
    image = vertex_training_image(module, floor)
    gpu = GPU_MACHINES[machine_type].gpu_model
    problem = cuda_floor_problem(image, str(gpu), floor, key)
    return [problem] if problem else []

"""Google Cloud facts the components need, and the rules over them, as plain data.

Nothing here calls a cloud API or imports Pulumi: these tables let a component (and
`trainstack plan`, through the stack config) reject a bad request offline, before any
resource is registered. Every table carries its source (`*_SOURCE`) and the date it was
compiled (`*_AS_OF`); facts the team's fact sheet (`reference/gcp-facts.md`) marks as
unverified carry `verified=False` or a `*_VERIFIED = False` marker and a note.

| module       | holds                                                                  |
|--------------|------------------------------------------------------------------------|
| `tpu`        | TPU generations, slice shapes, zones, runtimes, provisioning, Secure Boot |
| `tpu_rules`  | which slice a request names, its zone, runtime and capacity (problems)  |
| `machines`   | Compute Engine machine shapes (A2 GPU and CPU machines)                |
| `gpus`       | GPU model names per API, A100 zones, compact placement limit            |
| `vertex`     | Vertex machine/accelerator and Reduction Server rules, tuning enums    |
| `images`     | every pinned image (Vertex, Reduction Server, GKE pods, Deep Learning VM) |
| `names`      | label and zone naming rules, trainstack's reserved label keys           |
| `batch`      | each target's world size, and the global-batch divisibility rule        |
| `torch_versions` | the torch an image carries (from its name); fsdp needs torch >= 2.6 |
| `problems`   | the one wording of a problem line, and pydantic errors in that wording  |

Import a module (`from components.catalog.tpu import TPU_GENERATIONS`) or the package
(`from components import catalog`; `catalog.TPU_GENERATIONS`): every fact and rule is
re-exported here. Prices and quota ids are not facts a component needs; they stay with
the offline plan in `infra.catalog`.
"""

from components.catalog.gpus import (
    A100_ZONES,
    A100_ZONES_AS_OF,
    A100_ZONES_SOURCE,
    A100_ZONES_VERIFIED,
    ACCELERATOR_NAMES_AS_OF,
    ACCELERATOR_NAMES_SOURCE,
    COMPACT_PLACEMENT_MAX_NODES,
    COMPACT_PLACEMENT_VERIFIED,
    GPU_ACCELERATOR_NAMES,
    VERTEX_GPU_ENUMS,
    GpuAcceleratorNames,
    GpuModel,
    VertexAcceleratorType,
)
from components.catalog.images import (
    DEFAULT_EXECUTOR_IMAGE,
    DLVM_IMAGE,
    DLVM_IMAGE_SOURCE,
    DLVM_IMAGE_VERIFIED,
    DLVM_PYTHON_BIN,
    DLVM_PYTHON_BIN_VERIFIED,
    KUBERNETES_IMAGES,
    KUBERNETES_IMAGES_SOURCE,
    KUBERNETES_IMAGES_VERIFIED,
    PREBUILT_IMAGES_SOURCE,
    PREBUILT_IMAGES_VERIFIED,
    PYTORCH_GPU_IMAGES,
    REDUCTION_SERVER_IMAGES,
    REDUCTION_SERVER_IMAGES_SOURCE,
    reduction_server_image,
)
from components.catalog.machines import (
    A2_MACHINES,
    CPU_MACHINES,
    GKE_SYSTEM_NODE_MACHINE,
    MACHINES,
    MACHINES_AS_OF,
    MACHINES_SOURCE,
    MachineType,
)
from components.catalog.names import (
    LABEL_KEY,
    LABEL_VALUE,
    MANAGED_BY,
    RESERVED_LABEL_KEYS,
    label_problems,
    zone_in_region_problems,
)
from components.catalog.sources import (
    FACT_SHEET,
)
from components.catalog.tpu import (
    DISK_MODES,
    QUEUED_TIERS,
    READ_ONLY_MULTI_HOST_SOURCE,
    SECURE_BOOT_GENERATIONS,
    SECURE_BOOT_SOURCE,
    SECURE_BOOT_VERIFIED,
    TPU_AS_OF,
    TPU_GENERATIONS,
    TPU_PROVISIONING,
    TPU_RUNTIME_AS_OF,
    TPU_RUNTIME_SOURCE,
    TPU_SOURCE,
    TPU_ZONES_AS_OF,
    TPU_ZONES_SOURCE,
    QueuedTier,
    RuntimeMatch,
    TpuGeneration,
    TpuGenerationName,
    TpuProvisioning,
    TpuSlice,
    tpu_generation_of,
    tpu_runtime_match,
    tpu_slice,
)
from components.catalog.tpu_rules import (
    QUEUED_KEYS,
    RESERVATION_NAME,
    tensorflow_runtime_family,
    tensorflow_runtime_problems,
    tpu_capacity_problems,
    tpu_slice_problems,
)
from components.catalog.vertex import (
    ALGORITHMS,
    DEFAULT_REDUCER_MACHINE,
    GOALS,
    GRID_SEARCH_TYPES,
    PARAMETER_TYPES,
    REDUCER_COUNT_VALID,
    REDUCTION_SERVER_MACHINES,
    REDUCTION_SERVER_MIN_WORKERS,
    SCALE_TYPES,
    Algorithm,
    Goal,
    ParameterType,
    ScaleType,
    reducer_count,
    reducer_count_problem,
    reducer_count_value,
    reducers_needed,
    reduction_server_enabled,
    reduction_server_problems,
    vertex_accelerators,
    vertex_machine_problems,
)

__all__ = [
    "A2_MACHINES",
    "A100_ZONES",
    "A100_ZONES_AS_OF",
    "A100_ZONES_SOURCE",
    "A100_ZONES_VERIFIED",
    "ACCELERATOR_NAMES_AS_OF",
    "ACCELERATOR_NAMES_SOURCE",
    "ALGORITHMS",
    "COMPACT_PLACEMENT_MAX_NODES",
    "COMPACT_PLACEMENT_VERIFIED",
    "CPU_MACHINES",
    "DEFAULT_EXECUTOR_IMAGE",
    "DEFAULT_REDUCER_MACHINE",
    "DISK_MODES",
    "DLVM_IMAGE",
    "DLVM_IMAGE_SOURCE",
    "DLVM_IMAGE_VERIFIED",
    "DLVM_PYTHON_BIN",
    "DLVM_PYTHON_BIN_VERIFIED",
    "FACT_SHEET",
    "GKE_SYSTEM_NODE_MACHINE",
    "GOALS",
    "GPU_ACCELERATOR_NAMES",
    "GRID_SEARCH_TYPES",
    "KUBERNETES_IMAGES",
    "KUBERNETES_IMAGES_SOURCE",
    "KUBERNETES_IMAGES_VERIFIED",
    "LABEL_KEY",
    "LABEL_VALUE",
    "MACHINES",
    "MACHINES_AS_OF",
    "MACHINES_SOURCE",
    "MANAGED_BY",
    "PARAMETER_TYPES",
    "PREBUILT_IMAGES_SOURCE",
    "PREBUILT_IMAGES_VERIFIED",
    "PYTORCH_GPU_IMAGES",
    "QUEUED_KEYS",
    "QUEUED_TIERS",
    "READ_ONLY_MULTI_HOST_SOURCE",
    "REDUCER_COUNT_VALID",
    "REDUCTION_SERVER_IMAGES",
    "REDUCTION_SERVER_IMAGES_SOURCE",
    "REDUCTION_SERVER_MACHINES",
    "REDUCTION_SERVER_MIN_WORKERS",
    "RESERVATION_NAME",
    "RESERVED_LABEL_KEYS",
    "SCALE_TYPES",
    "SECURE_BOOT_GENERATIONS",
    "SECURE_BOOT_SOURCE",
    "SECURE_BOOT_VERIFIED",
    "TPU_AS_OF",
    "TPU_GENERATIONS",
    "TPU_PROVISIONING",
    "TPU_RUNTIME_AS_OF",
    "TPU_RUNTIME_SOURCE",
    "TPU_SOURCE",
    "TPU_ZONES_AS_OF",
    "TPU_ZONES_SOURCE",
    "VERTEX_GPU_ENUMS",
    "Algorithm",
    "Goal",
    "GpuAcceleratorNames",
    "GpuModel",
    "MachineType",
    "ParameterType",
    "QueuedTier",
    "RuntimeMatch",
    "ScaleType",
    "TpuGeneration",
    "TpuGenerationName",
    "TpuProvisioning",
    "TpuSlice",
    "VertexAcceleratorType",
    "label_problems",
    "reducer_count",
    "reducer_count_problem",
    "reducer_count_value",
    "reducers_needed",
    "reduction_server_enabled",
    "reduction_server_image",
    "reduction_server_problems",
    "tensorflow_runtime_family",
    "tensorflow_runtime_problems",
    "tpu_capacity_problems",
    "tpu_generation_of",
    "tpu_runtime_match",
    "tpu_slice",
    "tpu_slice_problems",
    "vertex_accelerators",
    "vertex_machine_problems",
    "zone_in_region_problems",
]

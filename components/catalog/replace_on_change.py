"""Which input changes make the Pulumi engine replace a pulumi-gcp or Kubernetes resource
that trainstack registers, per resource type, each with its source.

`trainstack plan-diff` reads these tables; a changed input found in none of them is shown as
"change (may replace)", never as a plain change.

Three sources, kept apart because they differ in how much they cover:

- GCP_DOCSTRING_REPLACES: the properties whose docs in the installed pulumi_gcp package say
  that changing them forces a new resource (DOCSTRING_PATTERN). Generated once with
  `derive_docstring_replaces(GCP_TYPES)`; tests/unit/test_plan_diff_replace.py re-derives it
  from the installed package and asserts equality. The docs carry that sentence for few
  properties (most ForceNew fields say nothing), so this table alone is far from complete.
- GCP_SCHEMA_REPLACES / GCP_SCHEMA_IN_PLACE: top-level fields read from the Terraform
  provider schema pulumi-gcp bridges (`ForceNew: true`; pulumi-terraform-bridge replaces on
  exactly those), for the types read whole (GCP_SCHEMA_SOURCE): the TPU VM, the GCE instance
  template, group and per-instance config, the buckets and their objects, the placement
  policy, the dashboard and the alert policies. Other types' fields stay "change (may
  replace)".
- KUBERNETES_REPLACES: pulumi-kubernetes' own force-new table, the one its Diff uses.

Paths are dotted Pulumi input names (camelCase); a path replaces when it or any path under
it changes (`spec.template` covers `spec.template.spec.containers[0].image`).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

PULUMI_GCP_VERSION: Final = "10.2.0"
"""The pulumi_gcp release GCP_DOCSTRING_REPLACES was derived from."""

DOCSTRING_PATTERN: Final = re.compile(
    r"forces? (?:a )?new|forces? recreation|must be recreated|cause the instance to recreate"
    r"|deleting/ recreating",
    re.IGNORECASE,
)
"""The phrasings pulumi_gcp's property docs use for "changing this forces a new resource"
(also "... forces a new service account to be created", "The resource must be recreated to
modify this field", "Changing this will force recreation of the resource")."""

GCP_TYPES: Final = (
    "gcp:artifactregistry/repository:Repository",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
    "gcp:cloudfunctionsv2/function:Function",
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
    "gcp:cloudscheduler/job:Job",
    "gcp:compute/firewall:Firewall",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
    "gcp:compute/instanceTemplate:InstanceTemplate",
    "gcp:compute/network:Network",
    "gcp:compute/perInstanceConfig:PerInstanceConfig",
    "gcp:compute/resizeRequest:ResizeRequest",
    "gcp:compute/resourcePolicy:ResourcePolicy",
    "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:container/cluster:Cluster",
    "gcp:container/nodePool:NodePool",
    "gcp:logging/metric:Metric",
    "gcp:monitoring/alertPolicy:AlertPolicy",
    "gcp:monitoring/dashboard:Dashboard",
    "gcp:projects/iAMCustomRole:IAMCustomRole",
    "gcp:projects/iAMMember:IAMMember",
    "gcp:projects/service:Service",
    "gcp:serviceaccount/account:Account",
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:storage/bucket:Bucket",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:storage/bucketObject:BucketObject",
    "gcp:tpu/v2Vm:V2Vm",
)
"""Every pulumi-gcp type in the pinned plans (tests/plans/*.json)."""

DOCSTRING_SOURCE: Final = (
    f"pulumi_gcp {PULUMI_GCP_VERSION} property docstrings (<Type>Args getters and the nested "
    "input types they name, in pulumi_gcp/<module>/*.py and _inputs.py)"
)

GCP_DOCSTRING_REPLACES: Final[dict[str, tuple[str, ...]]] = {
    "gcp:compute/instanceTemplate:InstanceTemplate": ("resourcePolicies",),
    "gcp:compute/network:Network": ("description",),
    "gcp:compute/subnetwork:Subnetwork": ("externalIpv6Prefix", "ipCollection", "ipv6AccessType"),
    "gcp:container/nodePool:NodePool": ("initialNodeCount",),
    "gcp:serviceaccount/account:Account": ("accountId",),
}
"""derive_docstring_replaces(GCP_TYPES); types with no such property are left out."""

_TF_BETA: Final = "github.com/hashicorp/terraform-provider-google-beta@93c65b2d60fe"

GCP_SCHEMA_SOURCE: Final[dict[str, str]] = {
    "gcp:tpu/v2Vm:V2Vm": (
        f"{_TF_BETA} google-beta/services/tpuv2/resource_tpu_v2_vm.go lines 191-607 "
        "(ResourceTpuV2Vm Schema: ForceNew per top-level field)"
    ),
    "gcp:compute/instanceTemplate:InstanceTemplate": (
        f"{_TF_BETA} google-beta/services/compute/resource_compute_instance_template.go "
        "lines 97-1366 (ResourceComputeInstanceTemplate Schema: every field ForceNew but "
        "labels and partner_metadata)"
    ),
    "gcp:storage/bucket:Bucket": (
        f"{_TF_BETA} google-beta/services/storage/resource_storage_bucket.go lines 131-743 "
        "(ResourceStorageBucket Schema: ForceNew name, location, project, "
        "enable_object_retention, hierarchical_namespace, custom_placement_config's "
        "data_locations)"
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": (
        f"{_TF_BETA} google-beta/services/compute/resource_compute_resource_policy.go lines "
        "150-529 (Schema: ForceNew region, project, group_placement_policy's gpu_topology "
        "and tpu_topology, disk_consistency_group_policy, workload_policy) and 784-915 "
        "(Update PATCHes group_placement_policy, so vm_count changes in place, since "
        "hashicorp/terraform-provider-google-beta#7692, 2024-07)"
    ),
    "gcp:compute/instanceGroupManager:InstanceGroupManager": (
        f"{_TF_BETA} google-beta/services/compute/resource_compute_instance_group_manager.go "
        "lines 60-648 (Schema: ForceNew base_instance_name, name, zone, project, params)"
    ),
    "gcp:compute/perInstanceConfig:PerInstanceConfig": (
        "github.com/hashicorp/terraform-provider-google@e03b7622a2 google/services/compute/"
        "resource_compute_per_instance_config.go lines 149-320 (Schema: ForceNew "
        "instance_group_manager, name, zone, project)"
    ),
    "gcp:compute/resizeRequest:ResizeRequest": (
        "github.com/hashicorp/terraform-provider-google@e03b7622a2 google/services/compute/"
        "resource_compute_resize_request.go lines 146-205 and 539-544 (Schema: every field "
        "ForceNew but deletion_policy, the one Update changes)"
    ),
    "gcp:monitoring/dashboard:Dashboard": (
        f"{_TF_BETA} google-beta/services/monitoring/resource_monitoring_dashboard.go lines "
        "98-120 (Schema: ForceNew project only)"
    ),
    "gcp:monitoring/alertPolicy:AlertPolicy": (
        f"{_TF_BETA} google-beta/services/monitoring/resource_monitoring_alert_policy.go "
        "lines 144-1327 (Schema: ForceNew project only)"
    ),
    "gcp:storage/bucketObject:BucketObject": (
        f"{_TF_BETA} google-beta/services/storage/resource_storage_bucket_object.go lines "
        "63-374 (Schema: ForceNew on every content field, metadata included)"
    ),
    "gcp:container/nodePool:NodePool": (
        "github.com/hashicorp/terraform-provider-google@e03b7622a2 google/services/container/"
        "resource_container_node_pool.go lines 239-258 (ForceNew project, cluster, location), "
        "364-407 (placement_policy and queued_provisioning blocks ForceNew), 463-468 "
        "(initial_node_count), 510-516 (name), 559-563 (network_config's "
        "accelerator_network_profile); node_config.go lines 316-320 (guest_accelerator), "
        "560-564 (oauth_scopes), 583-615 (reservation_affinity), 616-622 (spot), 624-630 "
        "(service_account), 646-650 (shielded_instance_config), 1431-1442 (max_run_duration, "
        'flex_start). Only the fields trainstack sets; the rest stay "change (may replace)"'
    ),
    "gcp:secretmanager/secretVersion:SecretVersion": (
        "github.com/hashicorp/terraform-provider-google@e03b7622a2 google/services/"
        "secretmanager/resource_secret_manager_secret_version.go lines 159-240 (Schema: "
        "ForceNew secret_data, secret_data_wo_version, secret, project, "
        "is_secret_data_base64; enabled and deletion_policy in place)"
    ),
}
"""Read at the provider's newest commit (2026-08-21), not at the exact upstream version
pulumi_gcp 10.2.0 pins; Terraform names mapped to Pulumi's (disk -> disks,
network_interface -> networkInterfaces)."""

GCP_SCHEMA_REPLACES: Final[dict[str, tuple[str, ...]]] = {
    "gcp:tpu/v2Vm:V2Vm": (
        "acceleratorConfig",
        "acceleratorType",
        "cidrBlock",
        "name",
        "networkConfig",
        "networkConfigs",
        "project",
        "runtimeVersion",
        "schedulingConfig",
        "serviceAccount",
        "shieldedInstanceConfig",
        "zone",
    ),
    "gcp:compute/instanceTemplate:InstanceTemplate": (
        "advancedMachineFeatures",
        "canIpForward",
        "confidentialInstanceConfig",
        "description",
        "disks",
        "enableDisplay",
        "guestAccelerators",
        "instanceDescription",
        "machineType",
        "metadata",
        "metadataStartupScript",
        "minCpuPlatform",
        "name",
        "namePrefix",
        "networkInterfaces",
        "networkPerformanceConfig",
        "project",
        "region",
        "reservationAffinity",
        "resourceManagerTags",
        "resourcePolicies",
        "scheduling",
        "serviceAccount",
        "shieldedInstanceConfig",
        "tags",
    ),
    "gcp:storage/bucket:Bucket": (
        "customPlacementConfig",
        "enableObjectRetention",
        "hierarchicalNamespace",
        "location",
        "name",
        "project",
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": (
        "diskConsistencyGroupPolicy",
        "groupPlacementPolicy.gpuTopology",
        "groupPlacementPolicy.tpuTopology",
        "project",
        "region",
        "workloadPolicy",
    ),
    "gcp:compute/instanceGroupManager:InstanceGroupManager": (
        "baseInstanceName",
        "name",
        "params",
        "project",
        "zone",
    ),
    "gcp:compute/perInstanceConfig:PerInstanceConfig": (
        "instanceGroupManager",
        "name",
        "project",
        "zone",
    ),
    "gcp:compute/resizeRequest:ResizeRequest": (
        "description",
        "instanceGroupManager",
        "name",
        "project",
        "requestedRunDuration",
        "resizeBy",
        "zone",
    ),
    "gcp:container/nodePool:NodePool": (
        "cluster",
        "initialNodeCount",
        "location",
        "name",
        "networkConfig.acceleratorNetworkProfile",
        "nodeConfig.flexStart",
        "nodeConfig.guestAccelerators",
        "nodeConfig.maxRunDuration",
        "nodeConfig.oauthScopes",
        "nodeConfig.reservationAffinity",
        "nodeConfig.serviceAccount",
        "nodeConfig.shieldedInstanceConfig",
        "nodeConfig.spot",
        "project",
        "queuedProvisioning",
    ),
    "gcp:monitoring/dashboard:Dashboard": ("project",),
    "gcp:monitoring/alertPolicy:AlertPolicy": ("project",),
    "gcp:storage/bucketObject:BucketObject": (
        "bucket",
        "cacheControl",
        "contentDisposition",
        "contentEncoding",
        "contentLanguage",
        "contentType",
        "customerEncryption",
        "forceEmptyContentType",
        "kmsKeyName",
        "metadata",
        "name",
        "source",
        "storageClass",
    ),
    "gcp:secretmanager/secretVersion:SecretVersion": (
        "isSecretDataBase64",
        "project",
        "secret",
        "secretData",
        "secretDataWoVersion",
    ),
}

GCP_SCHEMA_IN_PLACE: Final[dict[str, tuple[str, ...]]] = {
    "gcp:tpu/v2Vm:V2Vm": (
        "dataDisks",
        "deletionPolicy",
        "description",
        "labels",
        "metadata",
        "tags",
    ),
    "gcp:compute/instanceTemplate:InstanceTemplate": ("labels", "partnerMetadata"),
    "gcp:storage/bucket:Bucket": (
        "autoclass",
        "cors",
        "defaultEventBasedHold",
        "encryption",
        "forceDestroy",
        "ipFilter",
        "labels",
        "lifecycleRules",
        "logging",
        "publicAccessPrevention",
        "requesterPays",
        "rpo",
        "softDeletePolicy",
        "storageClass",
        "uniformBucketLevelAccess",
        "versioning",
        "website",
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": (
        "description",
        "groupPlacementPolicy",
        "instanceSchedulePolicy",
        "snapshotSchedulePolicy",
    ),
    "gcp:compute/instanceGroupManager:InstanceGroupManager": (
        "allInstancesConfig",
        "autoHealingPolicies",
        "description",
        "instanceLifecyclePolicy",
        "namedPorts",
        "targetPools",
        "targetSize",
        "updatePolicy",
        "versions",
        "waitForInstances",
        "waitForInstancesStatus",
    ),
    "gcp:compute/perInstanceConfig:PerInstanceConfig": (
        "deletionPolicy",
        "minimalAction",
        "mostDisruptiveAllowedAction",
        "preservedState",
        "removeInstanceOnDestroy",
        "removeInstanceStateOnDestroy",
    ),
    "gcp:compute/resizeRequest:ResizeRequest": ("deletionPolicy",),
    # resource_container_node_pool.go resourceContainerNodePoolUpdate -> nodePoolUpdate
    # (autoscaling line 1771, node_count 1825 setSize, management 1858, upgrade_settings
    # 1945) and node_config.go nodePoolNodeConfigUpdate (machine_type, disk_size_gb and
    # disk_type 3932-4004, the nodes recreated by GKE's upgrade strategy; taint 4007, tags
    # 4063, resource_labels 4157, labels 4195, workload_metadata_config 4265, gvnic 4333,
    # image_type 4479).
    "gcp:container/nodePool:NodePool": (
        "autoscaling",
        "management",
        "nodeConfig.diskSizeGb",
        "nodeConfig.diskType",
        "nodeConfig.gvnic",
        "nodeConfig.imageType",
        "nodeConfig.labels",
        "nodeConfig.machineType",
        "nodeConfig.resourceLabels",
        "nodeConfig.tags",
        "nodeConfig.taints",
        "nodeConfig.workloadMetadataConfig",
        "nodeCount",
        "upgradeSettings",
    ),
    "gcp:monitoring/dashboard:Dashboard": ("dashboardJson",),
    "gcp:monitoring/alertPolicy:AlertPolicy": (
        "alertStrategy",
        "combiner",
        "conditions",
        "displayName",
        "documentation",
        "enabled",
        "notificationChannels",
        "severity",
        "userLabels",
    ),
    "gcp:storage/bucketObject:BucketObject": (
        "contexts",
        "detectMd5hash",
        "eventBasedHold",
        "retention",
        "sourceMd5hash",
        "temporaryHold",
    ),
    "gcp:secretmanager/secretVersion:SecretVersion": ("deletionPolicy", "enabled"),
}
"""The fields of the same schemas without ForceNew: updated in place (a bucket's
`retentionPolicy` is left out: it replaces only once locked, ForceNewIfChange at line 80;
a resource policy's `name` too: the schema PATCHes it, the API's rename is unverified)."""

GCP_SCHEMA_REPLACE_BLOCKS: Final[dict[str, tuple[str, ...]]] = {
    "gcp:container/nodePool:NodePool": ("nodeConfig", "placementPolicy"),
}
"""Blocks whose own schema is ForceNew while some fields inside are not (node_config.go line
284, resource_container_node_pool.go line 369): adding or removing the block replaces, a
change inside it only by its field's own entry (a placement's `type` or `tpuTopology` are not
ForceNew). github.com/hashicorp/terraform-plugin-sdk helper/schema/schema.go
`schemaMap.diffList`: the block's count `k.#` is diffed with `ForceNew: schema.ForceNew`,
each field inside with its own schema."""


KUBERNETES_SOURCE: Final = (
    "github.com/pulumi/pulumi-kubernetes@94977969d641 provider/pkg/provider/diff.go lines "
    "158-160 (Service), 164-169 (DaemonSet), 178-186 (Job), 207-212 (metadata); the Job's pod template is "
    "immutable in the Kubernetes API: "
    "https://kubernetes.io/docs/concepts/workloads/controllers/job/#mutable-scheduling-directives"
)

_METADATA: Final = ("metadata.name", "metadata.namespace")
KUBERNETES_REPLACES: Final[dict[str, tuple[str, ...]]] = {
    "kubernetes:batch/v1:Job": (
        *_METADATA,
        "spec.completions",
        "spec.parallelism",
        "spec.selector",
        "spec.template",
    ),
    "kubernetes:core/v1:Service": (*_METADATA, "spec.clusterIP"),
    "kubernetes:core/v1:ServiceAccount": _METADATA,
    # A kind diff.go has no table for replaces on its metadata alone (lines 207-212); the
    # JobSet's spec replaces through TpuGkeSlices' `replace_on_changes` (JobSet's webhook
    # refuses changes to a running JobSet's spec.replicatedJobs: kubernetes-sigs/jobset@v0.12.0
    # pkg/webhooks/jobset_webhook.go ValidateUpdate), which plan-diff reads from the plan.
    "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet": _METADATA,
    # A component (yaml/v2 renders its objects as children, each diffed by its own kind):
    # nothing of its own replaces.
    "kubernetes:yaml/v2:ConfigFile": (),
    # The GPUDirect fabric's objects. DaemonSet: its selector too (diff.go lines 164-169,
    # `daemonset`, matchLabels and matchExpressions included); the GKE network kinds have no
    # table (metadata alone).
    "kubernetes:apps/v1:DaemonSet": (*_METADATA, "spec.selector"),
    "kubernetes:networking.gke.io/v1:GKENetworkParamSet": _METADATA,
    "kubernetes:networking.gke.io/v1:Network": _METADATA,
    # A queued GKE pool's request (`a100_cluster.gke_queued`): diff.go's `core` table has no
    # PodTemplate and no table has the CRD, so metadata alone; the request's spec replaces
    # through its own `replace_on_changes` (the CRD's spec is immutable).
    "kubernetes:core/v1:PodTemplate": _METADATA,
    "kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest": _METADATA,
}

DELETE_FIRST_SOURCE: Final[dict[str, str]] = {
    "gcp": (
        "github.com/pulumi/pulumi-terraform-bridge pkg/tfbridge/provider.go Diff: "
        "deleteBeforeReplace when an autonamed property (`name`) is set explicitly "
        "(nameRequiresDeleteBeforeReplace)"
    ),
    "kubernetes": (
        "github.com/pulumi/pulumi-kubernetes@94977969d641 provider/pkg/provider/provider.go "
        "lines 1645-1660: delete first when metadata.name is set and unchanged"
    ),
}


def replace_paths(type_: str) -> tuple[tuple[str, ...], str] | None:
    """(the input paths whose change replaces a `type_` resource, a short name of their
    source for the diff), or None when no table covers the type."""
    if type_ in KUBERNETES_REPLACES:
        return KUBERNETES_REPLACES[type_], "pulumi-kubernetes' force-new table"
    if type_ in GCP_SCHEMA_REPLACES:
        paths = GCP_SCHEMA_REPLACES[type_] + GCP_DOCSTRING_REPLACES.get(type_, ())
        return tuple(sorted(set(paths))), "the Terraform provider schema"
    if type_ in GCP_DOCSTRING_REPLACES:
        return GCP_DOCSTRING_REPLACES[type_], "pulumi_gcp's docs"
    return None


def replace_blocks(type_: str) -> tuple[str, ...]:
    """Input blocks whose addition or removal replaces a `type_` resource
    (GCP_SCHEMA_REPLACE_BLOCKS)."""
    return GCP_SCHEMA_REPLACE_BLOCKS.get(type_, ())


def in_place_paths(type_: str) -> tuple[str, ...]:
    """Input paths a schema read whole marks as updated in place (empty when unknown)."""
    return GCP_SCHEMA_IN_PLACE.get(type_, ())


def _walk(args: type, inputs: Any, prefix: str, seen: frozenset[str], out: list[str]) -> None:
    from pulumi._types import _py_properties  # the SDK's own list of a type's properties

    for _, name, prop in _py_properties(args):
        path = prefix + name
        if DOCSTRING_PATTERN.search(" ".join((prop.fget.__doc__ or "").split())):
            out.append(path)
        # Nested input types are named in the getter's annotation: ForwardRef('XArgs').
        annotation = str(prop.fget.__annotations__.get("return", ""))
        for nested in re.findall(r"'(\w+Args)'", annotation):
            cls = getattr(inputs, nested, None)
            if cls is not None and nested not in seen:
                _walk(cls, inputs, path + ".", seen | {nested}, out)


def derive_docstring_replaces(types: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """{type: input paths whose pulumi_gcp docs match DOCSTRING_PATTERN}, from the installed
    pulumi_gcp, leaving out types with none."""
    table: dict[str, tuple[str, ...]] = {}
    for type_ in types:
        _, module, name = type_.split(":")
        package = importlib.import_module(f"pulumi_gcp.{module.split('/')[0]}")
        resource = getattr(package, name)
        module_ = sys.modules[resource.__module__]
        if f"'{type_}'" not in Path(str(module_.__file__)).read_text():
            raise ValueError(f"{type_}: pulumi_gcp's {name} registers another type token")
        args = getattr(module_, f"{name}Args")
        inputs = importlib.import_module(f"{package.__name__}._inputs")
        found: list[str] = []
        _walk(args, inputs, "", frozenset(), found)
        if found:
            table[type_] = tuple(sorted(found))
    return table


if __name__ == "__main__":
    for key, paths in derive_docstring_replaces(GCP_TYPES).items():
        print(f"{key!r}: {paths!r},")

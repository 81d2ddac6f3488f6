"""The gke backend of `A100Cluster`: cluster, system and GPU node pools, the Kubernetes
provider and, with `training`, the `KubernetesTrainingJob` (see the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_gcp import container

from trainstack.components import catalog
from trainstack.components._job_launch import job_run_record
from trainstack.components.a100_cluster import gke_queued
from trainstack.components.a100_cluster._common import (
    CLOUD_PLATFORM_SCOPE,
    DEFAULT_BOOT_DISK_GB,
    DEFAULT_ENVIRONMENT,
    DEFAULT_GPU_DRIVER_VERSION,
    DEFAULT_RELEASE_CHANNEL,
    DEFAULT_SYSTEM_MACHINE_TYPE,
    KUBERNETES_VERSION,
    RESERVATION_KEY,
    A100ClusterArgs,
    A100TrainingArgs,
    job_name_for,
)
from trainstack.components.a100_cluster.gke_fabric import (
    CLUSTER_EXTRA,
    create_fabric_networks,
    create_fabric_objects,
    fabric_for,
    pod_fabric_for,
)
from trainstack.components.a100_cluster.validate import A100Shape
from trainstack.components.catalog.gpu_families import (
    FLEX_START_MAX_HOURS,
    boot_disk_type,
    cuda_floor_of,
)
from trainstack.components.catalog.images import kubernetes_image
from trainstack.components.kubernetes_training_job import (
    DEFAULT_MODULE,
    KubernetesTrainingJob,
    KubernetesTrainingJobArgs,
)
from trainstack.components.naming import gcp_name
from trainstack.trainers.common.contract import CAPACITY_RUN_ENV

NODE_IMAGE_TYPE: Final = "COS_CONTAINERD"
SYSTEM_POOL_NAME: Final = "system"
GPU_POOL_NAME: Final = "a100"
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
"""The taint GKE itself puts on GPU pools next to CPU pools (fact sheet 2.6)."""
GKE_ACCELERATOR_LABEL: Final = "cloud.google.com/gke-accelerator"
GKE_NODEPOOL_LABEL: Final = "cloud.google.com/gke-nodepool"
POD_RANGE: Final = "/14"
SERVICE_RANGE: Final = "/20"
"""Netmasks of the pod and Service ranges GKE allocates (secondary ranges of the subnet)."""
CLUSTER_NAME_MAX: Final = 40
NODE_UPGRADE_EXCLUSION: Final = "trainstack-no-node-upgrades"
NODE_UPGRADE_EXCLUSION_SCOPE: Final = "NO_MINOR_OR_NODE_UPGRADES"
"""A node upgrade (`maxSurge 0`) takes GPU nodes down one by one, each a lost peer for the
run. This maintenance exclusion scope "excludes all minor upgrades for the cluster, and also
exclude[s] all node pool upgrades. Only control plane patches are allowed" (GKE API
MaintenanceExclusionOptions.Scope, https://cloud.google.com/dotnet/docs/reference/
Google.Cloud.Container.V1/latest/Google.Cloud.Container.V1.MaintenanceExclusionOptions.Types
.Scope); node auto-upgrade itself cannot be turned off in a release channel ("Node
auto-upgrade is enabled (and cannot be disabled)", CIS GKE benchmark 5.5.x quoting
https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels), and GKE still
upgrades past the version's end of support and for critical security fixes
(https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions)."""
NODE_UPGRADE_EXCLUSION_END: Final = "UNTIL_END_OF_SUPPORT"
"""The exclusion lasts as long as the cluster's minor version is supported, so a run of any
length is covered (pulumi_gcp `exclusion_options.end_time_behavior`)."""
NODE_UPGRADE_EXCLUSION_START: Final = "2026-01-01T00:00:00Z"
"""A fixed start, so the plan (and `pulumi up`) do not change with the day; the exclusion is
in force from then. UNVERIFIED: that GKE accepts a start in the past (gcloud's
`--add-maintenance-exclusion-start` defaults to now)."""
MAINTENANCE_WINDOW_START: Final = "03:00"
"""Daily window (UTC) for what the exclusion still allows (control-plane patches); the
provider documents a window as required next to exclusions in beta."""


@dataclass(frozen=True)
class GkeCluster:
    """What `create_gke` registered, and the outputs the component exposes from it."""

    cluster: container.Cluster
    system_pool: container.NodePool
    gpu_pool: container.NodePool
    kubeconfig: pulumi.Output[str]
    k8s_provider: k8s.Provider
    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    node_pool_name: pulumi.Output[str]
    console_url: pulumi.Output[str]
    training_job: KubernetesTrainingJob | None


def kubeconfig(*, project: str, zone: str, cluster: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig for the cluster that authenticates with `gke-gcloud-auth-plugin`, as
    `gcloud container clusters get-credentials` writes it (context `gke_<p>_<zone>_<name>`)."""
    context = f"gke_{project}_{zone}_{cluster}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": f"https://{endpoint}",
                    "certificate-authority-data": ca_certificate,
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
        "users": [
            {
                "name": context,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "gke-gcloud-auth-plugin",
                        "installHint": (
                            "Install gke-gcloud-auth-plugin: gcloud components install "
                            "gke-gcloud-auth-plugin"
                        ),
                        "provideClusterInfo": True,
                    }
                },
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def gke_console_url(project: str, zone: str, cluster: str) -> str:
    """Cloud console page of a GKE cluster."""
    return (
        f"https://console.cloud.google.com/kubernetes/clusters/details/{zone}/{cluster}/details"
        f"?project={project}"
    )


def create_gke(
    name: str,
    args: A100ClusterArgs,
    gpu: A100Shape,
    labels: pulumi.Input[Mapping[str, str]],
    parent: pulumi.Resource,
    depends_on: Sequence[Any] = (),
) -> GkeCluster:
    """Register the gke backend's resources as children of `parent` (the component `name`)."""
    project = pulumi.Output.from_input(args["project"])
    zone = gpu.zone
    account = args["service_account_email"]
    tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
    fabric = fabric_for(gpu.machine_type, args["deployment_name"], zone)
    nets = (
        create_fabric_networks(name, fabric, args["deployment_name"], project, zone, parent)
        if fabric
        else None
    )
    cluster = gke_cluster(
        name, args, project, zone, labels, parent, extra=CLUSTER_EXTRA if nets else None
    )
    cluster_name = cluster.name
    system_pool = gke_system_pool(name, args, project, zone, cluster_name, labels, parent)
    shielded = container.NodePoolNodeConfigShieldedInstanceConfigArgs(
        enable_secure_boot=True, enable_integrity_monitoring=True
    )
    metadata_mode = container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA")
    machine = gpu.machine
    assert machine.gpu_model is not None  # A2 machines all carry GPUs
    accelerator = catalog.GPU_ACCELERATOR_NAMES[machine.gpu_model].compute
    reservation = (
        container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key=RESERVATION_KEY,
            values=[gpu.reservation],
        )
        if gpu.reservation
        else None
    )
    flex = _flex_start_pool(gpu, args.get("max_run_seconds"))
    if flex is not None:
        reservation = container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="NO_RESERVATION"
        )
    gpu_pool = container.NodePool(
        f"{name}-gpu-pool",
        project=project,
        location=zone,
        cluster=cluster_name,
        name=GPU_POOL_NAME,
        node_count=None if flex else gpu.node_count,
        initial_node_count=0 if flex else None,
        autoscaling=flex.autoscaling if flex else None,
        management=container.NodePoolManagementArgs(auto_repair=not flex, auto_upgrade=True),
        # Upgrades wait for the cluster's maintenance exclusion (`_maintenance_policy`); one
        # that GKE forces goes one node at a time without a surge node: no GPUs beyond quota.
        # Flex-start pools keep GKE's own: "SHORT_LIVED is the dedicated upgrade strategy for
        # QueuedProvisioning and flex start node pools" (container.v1 discovery,
        # UpgradeSettings.strategy), which the provider cannot set (terraform-provider-google
        # resource_container_node_pool.go: strategy "SURGE" or "BLUE_GREEN", block Optional
        # and Computed, sent only when given).
        upgrade_settings=(
            None
            if flex
            else container.NodePoolUpgradeSettingsArgs(
                strategy="SURGE", max_surge=0, max_unavailable=1
            )
        ),
        placement_policy=(
            container.NodePoolPlacementPolicyArgs(type="COMPACT") if gpu.compact_placement else None
        ),
        queued_provisioning=(
            container.NodePoolQueuedProvisioningArgs(enabled=True) if flex and flex.queued else None
        ),
        network_config=_pool_network_config(
            gpu, nets.additional_node_network_configs if nets else None
        ),
        node_config=container.NodePoolNodeConfigArgs(
            machine_type=gpu.machine_type,
            guest_accelerators=[
                container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=accelerator,
                    count=machine.gpus,
                    gpu_driver_installation_config=(
                        container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                            gpu_driver_version=args.get(
                                "gpu_driver_version", DEFAULT_GPU_DRIVER_VERSION
                            )
                        )
                    ),
                )
            ],
            image_type=NODE_IMAGE_TYPE,
            gvnic=container.NodePoolNodeConfigGvnicArgs(enabled=True),
            spot=gpu.spot,
            flex_start=True if flex else None,
            max_run_duration=flex.max_run_duration if flex else None,
            reservation_affinity=reservation,
            taints=[container.NodePoolNodeConfigTaintArgs(**GPU_TAINT)],
            service_account=account,
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            workload_metadata_config=metadata_mode,
            shielded_instance_config=shielded,
            disk_type=boot_disk_type(gpu.machine_type),
            disk_size_gb=args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB),
            resource_labels=labels,
            tags=tags,
        ),
        # The GPU nodes bill: after what the component waits for (the stack's grants and its
        # run supervisor), so they never run unsupervised, and on destroy before it.
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )

    config, provider = gke_provider(name, project, zone, cluster, parent)
    fabric_objects = (
        create_fabric_objects(name, fabric, accelerator, machine.gpus, parent, provider)
        if fabric
        else []
    )
    training = args.get("training")
    training_job = None
    if training is not None:
        pools = [system_pool, gpu_pool, *fabric_objects, *depends_on]
        if flex is not None and flex.queued:
            job = job_args_for(args, training, gpu, accelerator)
            fields = gke_queued.queued_fields(job, args.get("max_run_seconds"))
            queued = gke_queued.create_queued_request(name, fields, labels, parent, provider, pools)
            # The request is made before the Job and withdrawn after it.
            pools.append(queued.provisioning_request)
        training_job = _training_job(
            name,
            args,
            training,
            gpu,
            accelerator,
            parent,
            provider,
            # Its pods read the buckets as the training account: after the grants too.
            pools,
        )
    return GkeCluster(
        cluster=cluster,
        system_pool=system_pool,
        gpu_pool=gpu_pool,
        kubeconfig=config,
        k8s_provider=provider,
        cluster_name=cluster_name,
        endpoint=cluster.endpoint,
        node_pool_name=gpu_pool.name,
        console_url=pulumi.Output.all(project, cluster_name).apply(
            lambda v: gke_console_url(v[0], zone, v[1])
        ),
        training_job=training_job,
    )


def _pool_network_config(
    gpu: A100Shape, additional: list[dict[str, pulumi.Output[str]]] | None
) -> container.NodePoolNetworkConfigArgs | None:
    """Tier 1 egress and, with a fabric, its networks in NIC order (CTK
    modules/compute/gke-node-pool/main.tf `additional_node_network_configs`)."""
    tier_1 = (
        container.NodePoolNetworkConfigNetworkPerformanceConfigArgs(
            total_egress_bandwidth_tier="TIER_1"
        )
        if gpu.tier_1_networking
        else None
    )
    if tier_1 is None and not additional:
        return None
    return container.NodePoolNetworkConfigArgs(
        network_performance_config=tier_1,
        additional_node_network_configs=(
            [
                container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(**c)
                for c in additional
            ]
            if additional
            else None
        ),
    )


@dataclass(frozen=True)
class FlexStartPool:
    """What a flex-start GPU pool sets beyond an on-demand one."""

    autoscaling: container.NodePoolAutoscalingArgs
    max_run_duration: str | None
    queued: bool
    """All nodes at once through a ProvisioningRequest, which bounds their run instead."""


def _flex_start_pool(gpu: A100Shape, max_run_seconds: int | None) -> FlexStartPool | None:
    """A flex-start pool as XPK creates one (AI-Hypercomputer/xpk src/xpk/core/capacity.py
    `get_capacity_arguments_from_capacity_type`, CapacityType.FLEX_START: "--flex-start
    --enable-autoscaling --location-policy=ANY --reservation-affinity=none
    --no-enable-autorepair --max-nodes={max_nodes}", and src/xpk/core/nodepool.py: GPU pools
    "--num-nodes=0"): no nodes until the training pods ask for them, then up to
    `node_count`, each running at most `max_run_seconds` ("The runtime of each node in the
    node pool in seconds", pulumi_gcp NodePoolNodeConfigArgs.max_run_duration). Across
    nodes, queued provisioning as Google creates it (`gke_queued.QUEUED_POOL_SOURCE`)."""
    if not gpu.flex_start:
        return None
    queued = gke_queued.is_queued(gpu.flex_start, gpu.node_count)
    return FlexStartPool(
        autoscaling=container.NodePoolAutoscalingArgs(
            min_node_count=0, max_node_count=gpu.node_count, location_policy="ANY"
        ),
        max_run_duration=(
            f"{max_run_seconds}s" if max_run_seconds is not None and not queued else None
        ),
        queued=queued,
    )


def gke_system_pool(
    name: str,
    args: Mapping[str, Any],
    project: pulumi.Output[str],
    zone: str,
    cluster_name: pulumi.Input[str],
    labels: pulumi.Input[Mapping[str, str]],
    parent: pulumi.Resource,
) -> container.NodePool:
    """The one on-demand CPU node that runs the cluster's system pods (DNS, controllers),
    so they survive a spot reclaim of the accelerator nodes. `args`: the keys
    `service_account_email`, `node_tag` and `system_machine_type` of `A100ClusterArgs`."""
    tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
    return container.NodePool(
        f"{name}-system-pool",
        project=project,
        location=zone,
        cluster=cluster_name,
        name=SYSTEM_POOL_NAME,
        node_count=1,
        management=container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
        node_config=container.NodePoolNodeConfigArgs(
            machine_type=args.get("system_machine_type", DEFAULT_SYSTEM_MACHINE_TYPE),
            image_type=NODE_IMAGE_TYPE,
            service_account=args["service_account_email"],
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            workload_metadata_config=container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                mode="GKE_METADATA"
            ),
            shielded_instance_config=container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True
            ),
            resource_labels=labels,
            tags=tags,
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def gke_provider(
    name: str,
    project: pulumi.Output[str],
    zone: str,
    cluster: container.Cluster,
    parent: pulumi.Resource,
) -> tuple[pulumi.Output[str], k8s.Provider]:
    """The cluster's kubeconfig (a secret) and a Kubernetes provider on it."""
    auth = cluster.master_auth
    config: pulumi.Output[str] = pulumi.Output.secret(
        pulumi.Output.all(
            project, cluster.name, cluster.endpoint, auth.cluster_ca_certificate
        ).apply(
            lambda v: kubeconfig(
                project=v[0], zone=zone, cluster=v[1], endpoint=v[2], ca_certificate=v[3]
            )
        )
    )
    provider = k8s.Provider(
        f"{name}-k8s",
        kubeconfig=config,
        # A cluster deleted outside Pulumi must not leave destroy stuck on its objects.
        delete_unreachable=True,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return config, provider


def gke_cluster(
    name: str,
    args: Mapping[str, Any],
    project: pulumi.Output[str],
    zone: str,
    labels: pulumi.Input[Mapping[str, str]],
    parent: pulumi.Resource,
    suffix: str = "a100",
    extra: Mapping[str, Any] | None = None,
) -> container.Cluster:
    """The private, VPC-native zonal cluster with Workload Identity and no node upgrades
    during a run, named `<deployment>-<suffix>`. `args`: the keys `deployment_name`,
    `service_account_email`, `network_self_link`, `subnetwork_self_link`,
    `master_authorized_cidrs`, `release_channel`, `kubernetes_version` and `environment`
    of `A100ClusterArgs` (`TpuGkeSlicesArgs` has the same). `extra`: further
    `container.Cluster` arguments (the TPU backend's networking)."""
    account = args["service_account_email"]
    authorized = args.get("master_authorized_cidrs")
    return container.Cluster(
        f"{name}-cluster",
        project=project,
        location=zone,
        name=gcp_name(args["deployment_name"], suffix, max_len=CLUSTER_NAME_MAX),
        network=args["network_self_link"],
        subnetwork=args["subnetwork_self_link"],
        networking_mode="VPC_NATIVE",
        ip_allocation_policy=container.ClusterIpAllocationPolicyArgs(
            cluster_ipv4_cidr_block=POD_RANGE, services_ipv4_cidr_block=SERVICE_RANGE
        ),
        private_cluster_config=container.ClusterPrivateClusterConfigArgs(
            enable_private_nodes=True, enable_private_endpoint=False
        ),
        master_authorized_networks_config=(
            container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=[
                    container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                        cidr_block=cidr, display_name=f"authorized-{i}"
                    )
                    for i, cidr in enumerate(authorized)
                ]
            )
            if authorized
            else None
        ),
        workload_identity_config=container.ClusterWorkloadIdentityConfigArgs(
            workload_pool=project.apply(lambda p: f"{p}.svc.id.goog")
        ),
        release_channel=container.ClusterReleaseChannelArgs(
            channel=args.get("release_channel", DEFAULT_RELEASE_CHANNEL)
        ),
        min_master_version=args.get("kubernetes_version", KUBERNETES_VERSION),
        maintenance_policy=_maintenance_policy(),
        deletion_protection=args.get("environment", DEFAULT_ENVIRONMENT) == "prod",
        remove_default_node_pool=True,
        initial_node_count=1,
        # The default pool lives only until it is removed, but it must not fall back to
        # the default compute service account (often disabled or over-privileged).
        node_config=container.ClusterNodeConfigArgs(
            service_account=account,
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            workload_metadata_config=container.ClusterNodeConfigWorkloadMetadataConfigArgs(
                mode="GKE_METADATA"
            ),
        ),
        resource_labels=labels,
        # The removed default pool's node_config would otherwise diff (and replace the
        # cluster) on every refresh.
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["node_config"]),
        **(extra or {}),
    )


def _maintenance_policy() -> container.ClusterMaintenancePolicyArgs:
    """No node upgrades while the run lives (see NODE_UPGRADE_EXCLUSION_SCOPE)."""
    options = container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
        scope=NODE_UPGRADE_EXCLUSION_SCOPE, end_time_behavior=NODE_UPGRADE_EXCLUSION_END
    )
    return container.ClusterMaintenancePolicyArgs(
        daily_maintenance_window=container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time=MAINTENANCE_WINDOW_START
        ),
        maintenance_exclusions=[
            container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                exclusion_name=NODE_UPGRADE_EXCLUSION,
                start_time=NODE_UPGRADE_EXCLUSION_START,
                exclusion_options=options,
            )
        ],
    )


def job_args_for(
    args: A100ClusterArgs, training: A100TrainingArgs, gpu: A100Shape, accelerator: str
) -> KubernetesTrainingJobArgs:
    """The training Job's arguments (`accelerator`: the GPU nodes' label value)."""
    job_args: KubernetesTrainingJobArgs = {
        "job_name": job_name_for(args["deployment_name"], gpu.node_count),
        "node_count": gpu.node_count,
        "gpus_per_node": gpu.machine.gpus,
        "package_uri": training["package_uri"],
        "project": args["project"],
        "gcp_service_account_email": args["service_account_email"],
        "node_selector": {
            GKE_ACCELERATOR_LABEL: accelerator,
            GKE_NODEPOOL_LABEL: GPU_POOL_NAME,
        },
    }
    if "node_args" in training:
        job_args["node_args"] = training["node_args"]
        if training.get("secret_env_names"):
            job_args["secret_env_names"] = list(training["secret_env_names"])
    else:
        job_args["trainer_module"] = training.get("trainer_module", DEFAULT_MODULE)
        job_args["trainer_args"] = list(training.get("trainer_args", []))
    for key in ("checkpoint_url", "image", "wait_for_completion", "timeout_s"):
        if key in training:
            job_args[key] = training[key]
    family_image = _family_image(training, gpu.machine_type)
    if family_image is not None:
        job_args["image"] = family_image
    if "checkpoint_url" in training:
        # The run's end record and the supervisor's stop request, beside the checkpoints.
        job_args["run_records"] = True
    if "labels" in args:
        job_args["labels"] = args["labels"]
    # The pods' network names do not depend on the deployment's.
    fabric = fabric_for(gpu.machine_type, "", gpu.zone)
    if fabric is not None:
        job_args["fabric"] = pod_fabric_for(fabric, gpu.machine.gpus)
    if "max_run_seconds" in args and not gpu.flex_start:
        # Not on flex-start: the Job is created before its nodes exist, and the deadline
        # would count the wait for capacity (kubernetes pkg/controller/job/job_controller.go:
        # syncJob sets status.startTime on the Job's first sync, pods pending or not, and
        # pastActiveDeadline measures from it). Each flex-start node's max_run_duration (the
        # pool's, `_flex_start_pool`) and the supervisor's limit, counted from the first
        # node billing, bound the run there.
        cast(dict[str, object], job_args)["active_deadline_seconds"] = args["max_run_seconds"]
    if gpu.flex_start:
        # The pods learn their node's run duration (the pool's max_run_duration, else GKE's
        # 7 days), from which the pod script derives TRAINSTACK_DEADLINE.
        run_s = args.get("max_run_seconds") or FLEX_START_MAX_HOURS * 3600
        job_args["env"] = {**job_args.get("env", {}), CAPACITY_RUN_ENV: str(run_s)}
    if gke_queued.is_queued(gpu.flex_start, gpu.node_count):
        job_args["tolerations"] = gke_queued.job_tolerations()
        # Last: the pods consume the request that brings all the nodes, named from all the
        # Job's other arguments (`gke_queued.request_name`).
        job_args["pod_annotations"] = gke_queued.request_name(job_args).apply(
            gke_queued.pod_annotations
        )
    return job_args


def _family_image(training: A100TrainingArgs, machine_type: str) -> str | None:
    """The bundled torch image that has the machine's GPU code, where it is not the one the
    Job defaults to (B200: CUDA 13, `catalog.images.TORCH_CUDA13_IMAGE`); None where the
    default serves or an image is given. Your code without an image runs in the torch one."""
    if "image" in training:
        return None
    module = DEFAULT_MODULE if "node_args" in training else training.get("trainer_module")
    module = module or DEFAULT_MODULE
    chosen = kubernetes_image(module, cuda_floor_of(machine_type))
    return chosen if chosen != kubernetes_image(module) else None


def gke_run_record(args: A100ClusterArgs, gpu: A100Shape) -> pulumi.Output[str] | None:
    """The run's record prefix of the Job's pods, before the cluster is registered (None
    without training and a checkpoint bucket); the GPU label does not change it."""
    training = args.get("training")
    if training is None or "checkpoint_url" not in training:
        return None
    return job_run_record(job_args_for(args, training, gpu, ""))


def _training_job(
    name: str,
    args: A100ClusterArgs,
    training: A100TrainingArgs,
    gpu: A100Shape,
    accelerator: str,
    parent: pulumi.Resource,
    provider: k8s.Provider,
    pools: list[Any],
) -> KubernetesTrainingJob:
    return KubernetesTrainingJob(
        f"{name}-training",
        job_args_for(args, training, gpu, accelerator),
        opts=pulumi.ResourceOptions(
            parent=parent,
            providers={"kubernetes": provider},
            # Destroy deletes the Job (and waits for its pods) before the nodes go.
            depends_on=pools,
        ),
    )

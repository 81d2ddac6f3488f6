"""The gce backend of `A100Cluster`: A2 instances in one compact placement policy, each
running the trainer from its startup script (see the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
from pulumi_gcp import compute

from components._naming import gcp_name
from components.a100_cluster._common import (
    BOOT_DISK_TYPE,
    CLOUD_PLATFORM_SCOPE,
    DEFAULT_BOOT_DISK_GB,
    RESERVATION_KEY,
    instance_name_pattern,
    instance_names,
    region_of,
)
from components.a100_cluster.validate import A100Shape
from components.catalog.images import DLVM_IMAGE
from components.gpu_startup import (
    DLVM_PYTHON_BIN,
    NODE_RANK_ATTRIBUTE,
    gce_startup_script,
    uses_torchrun,
    with_checkpoint_dir,
)
from components.kubernetes_training_job import DEFAULT_MODULE

if TYPE_CHECKING:
    from components.a100_cluster import A100ClusterArgs, A100TrainingArgs

"""PyTorch + CUDA + NVIDIA driver image for the gce backend (the torch trainer only)."""


@dataclass(frozen=True)
class GceInstances:
    """What `create_gce` registered, and the outputs the component exposes from it."""

    placement_policy: compute.ResourcePolicy | None
    """With compact placement and at least 2 nodes."""
    instances: list[compute.Instance]
    """By node rank."""
    cluster_name: pulumi.Output[str]
    instance_names: pulumi.Output[list[str]]
    name_pattern: str
    """Regular expression matching exactly these instances' names (`instance_name_pattern`)."""
    console_url: pulumi.Output[str]


def gce_console_url(project: str) -> str:
    """Cloud console list of the project's VM instances."""
    return f"https://console.cloud.google.com/compute/instances?project={project}"


def create_gce(
    name: str,
    args: A100ClusterArgs,
    gpu: A100Shape,
    labels: pulumi.Input[Mapping[str, str]],
    parent: pulumi.Resource,
) -> GceInstances:
    """Register the gce backend's resources as children of `parent` (the component `name`)."""
    project = pulumi.Output.from_input(args["project"])
    zone = gpu.zone
    deployment = args["deployment_name"]
    names = instance_names(deployment, gpu.node_count)
    placement_policy = None
    if gpu.compact_placement and gpu.node_count >= 2:
        # A placement group holds 2 or more VMs; one VM has nothing to be close to.
        placement_policy = compute.ResourcePolicy(
            f"{name}-placement",
            project=project,
            region=region_of(zone),
            name=gcp_name(deployment, "a100-placement"),
            description="trainstack: A100 nodes of one training cluster, collocated",
            group_placement_policy=compute.ResourcePolicyGroupPlacementPolicyArgs(
                collocation="COLLOCATED", vm_count=gpu.node_count
            ),
            opts=pulumi.ResourceOptions(parent=parent),
        )

    training = args.get("training")
    script: pulumi.Output[str] | None = None
    image = DLVM_IMAGE
    if training is not None:
        image = training.get("image", DLVM_IMAGE)
        script = _startup_script(training, gpu, names)
    reservation = (
        compute.InstanceReservationAffinityArgs(
            type="SPECIFIC_RESERVATION",
            specific_reservation=compute.InstanceReservationAffinitySpecificReservationArgs(
                key=RESERVATION_KEY, values=[gpu.reservation]
            ),
        )
        if gpu.reservation
        else None
    )
    tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
    instances = [
        compute.Instance(
            f"{name}-{i}",
            project=project,
            zone=zone,
            name=physical,
            machine_type=gpu.machine_type,
            boot_disk=compute.InstanceBootDiskArgs(
                auto_delete=True,
                initialize_params=compute.InstanceBootDiskInitializeParamsArgs(
                    image=image,
                    size=args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB),
                    type=BOOT_DISK_TYPE,
                    labels=labels,
                ),
            ),
            # No access_configs: no external IP (egress through the network's NAT).
            network_interfaces=[
                compute.InstanceNetworkInterfaceArgs(
                    network=args["network_self_link"],
                    subnetwork=args["subnetwork_self_link"],
                    nic_type="GVNIC",
                )
            ],
            network_performance_config=(
                compute.InstanceNetworkPerformanceConfigArgs(total_egress_bandwidth_tier="TIER_1")
                if gpu.tier_1_networking
                else None
            ),
            scheduling=_scheduling(gpu.spot),
            reservation_affinity=reservation,
            # One self link, not a list, in pulumi_gcp 10 (at most one policy).
            resource_policies=placement_policy.self_link if placement_policy else None,
            service_account=compute.InstanceServiceAccountArgs(
                email=args["service_account_email"], scopes=[CLOUD_PLATFORM_SCOPE]
            ),
            metadata={NODE_RANK_ATTRIBUTE: str(i), "enable-oslogin": "TRUE"},
            # Changing the startup script replaces the instance, which is what runs a new
            # trainer package or new flags.
            metadata_startup_script=script,
            tags=tags,
            labels=labels,
            allow_stopping_for_update=True,
            opts=pulumi.ResourceOptions(
                parent=parent,
                # Fixed names, and a placement group sized for exactly node_count.
                delete_before_replace=True,
            ),
        )
        for i, physical in enumerate(names)
    ]
    return GceInstances(
        placement_policy=placement_policy,
        instances=instances,
        cluster_name=pulumi.Output.from_input(gcp_name(deployment, "a100")),
        instance_names=pulumi.Output.all(*(inst.name for inst in instances)),
        name_pattern=instance_name_pattern(names),
        console_url=project.apply(gce_console_url),
    )


def _startup_script(
    training: A100TrainingArgs, gpu: A100Shape, names: list[str]
) -> pulumi.Output[str]:
    """The same script for every instance; each finds its rank in its own metadata."""
    module = training.get("trainer_module", DEFAULT_MODULE)
    flags = list(training.get("trainer_args", []))
    return pulumi.Output.all(training["package_uri"], training.get("checkpoint_url")).apply(
        lambda v: gce_startup_script(
            package_uri=v[0],
            module=module,
            trainer_args=with_checkpoint_dir(flags, v[1]),
            num_nodes=gpu.node_count,
            procs_per_node=gpu.machine.gpus if uses_torchrun(module) else 1,
            coordinator=names[0],
            extra_path=DLVM_PYTHON_BIN,
            worker_hosts=names,
        )
    )


def _scheduling(spot: bool) -> compute.InstanceSchedulingArgs:
    if spot:
        return compute.InstanceSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="STOP",
        )
    return compute.InstanceSchedulingArgs(
        provisioning_model="STANDARD",
        preemptible=False,
        automatic_restart=True,
        # GPU VMs cannot live-migrate (fact sheet 2.4).
        on_host_maintenance="TERMINATE",
    )

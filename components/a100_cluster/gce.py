"""The gce backend of `A100Cluster`: A2 instances of a zonal managed instance group in one
compact placement policy, each running the trainer from its startup script (see the
package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_gcp import compute

from trainstack.components._naming import gcp_name
from trainstack.components.a100_cluster._common import (
    BOOT_DISK_TYPE,
    CLOUD_PLATFORM_SCOPE,
    DEFAULT_BOOT_DISK_GB,
    RESERVATION_KEY,
    A100ClusterArgs,
    A100TrainingArgs,
    instance_name_pattern,
    instance_names,
    region_of,
)
from trainstack.components.a100_cluster.validate import A100Shape
from trainstack.components.catalog.images import DLVM_IMAGE
from trainstack.components.gpu_startup import (
    DLVM_PYTHON_BIN,
    NODE_RANK_ATTRIBUTE,
    gce_run_key,
    gce_startup_script,
    node_args_use_torchrun,
    run_record_uri,
    uses_torchrun,
    with_checkpoint_dir,
)
from trainstack.components.kubernetes_training_job import DEFAULT_MODULE

"""PyTorch + CUDA + NVIDIA driver image for the gce backend (the torch trainer only)."""


@dataclass(frozen=True)
class GceInstances:
    """What `create_gce` registered, and the outputs the component exposes from it."""

    placement_policy: compute.ResourcePolicy | None
    """With compact placement and at least 2 nodes."""
    template: compute.InstanceTemplate
    """What every node is made from (machine, disk, spot or reservation, startup script)."""
    group: compute.InstanceGroupManager
    """Zonal managed instance group: it recreates a preempted, stopped or lost node. It has
    no target size of its own: its nodes are the per-instance configs' VMs."""
    node_configs: list[compute.PerInstanceConfig]
    """By node rank: each creates the node's VM and pins its name and rank metadata across
    recreation."""
    cluster_name: pulumi.Output[str]
    instance_names: pulumi.Output[list[str]]
    name_pattern: str
    """Regular expression matching exactly these instances' names (`instance_name_pattern`)."""
    console_url: pulumi.Output[str]
    run_record: pulumi.Output[str] | None
    """The run's record prefix (`run_record_uri`), with training and a checkpoint bucket."""


def gce_console_url(project: str) -> str:
    """Cloud console list of the project's VM instances."""
    return f"https://console.cloud.google.com/compute/instances?project={project}"


def create_gce(
    name: str,
    args: A100ClusterArgs,
    gpu: A100Shape,
    labels: pulumi.Input[Mapping[str, str]],
    parent: pulumi.Resource,
    depends_on: Sequence[Any] = (),
) -> GceInstances:
    """Register the gce backend's resources as children of `parent` (the component `name`).

    A zonal managed instance group (`trainstack.components.catalog.recovery`) owns the nodes: its instance
    lifecycle policy repairs a VM that stops running (a spot preemption with termination
    action STOP, a host error) by recreating it from the template. The group is created
    empty; one per-instance config per node creates that node's VM (`createInstances`,
    which adds the VM to the group's target size) and keeps its name (node 0's host name is
    the rendezvous endpoint) and its `trainstack-node-rank` metadata across every
    recreation, so the group holds exactly `node_count` VMs, each with its rank.
    """
    project = pulumi.Output.from_input(args["project"])
    zone = gpu.zone
    deployment = args["deployment_name"]
    names = instance_names(deployment, gpu.node_count)
    child = pulumi.ResourceOptions(parent=parent)
    placement_policy = None
    if gpu.compact_placement and gpu.node_count >= 2:
        # A placement group holds 2 or more VMs; one VM has nothing to be close to.
        placement_policy = compute.ResourcePolicy(
            f"{name}-placement",
            project=project,
            region=region_of(zone),
            name=gcp_name(deployment, "a100-placement"),
            description="trainstack: A100 nodes of one training cluster, collocated",
            # No vm_count (`catalog.recovery.COMPACT_PLACEMENT_WITHOUT_VM_COUNT_SOURCE`): with
            # it, "exactly vm_count instances must be created at the same time", but the
            # group creates its VMs one `createInstances` call each, REPAIR recreates one at
            # a time and a new node_count would PATCH the count of a policy running VMs use.
            # Without it VMs join the policy one by one, Google's recommended way.
            group_placement_policy=compute.ResourcePolicyGroupPlacementPolicyArgs(
                collocation="COLLOCATED"
            ),
            opts=child,
        )

    training = args.get("training")
    script: pulumi.Output[str] | None = None
    run_record: pulumi.Output[str] | None = None
    image = DLVM_IMAGE
    if training is not None:
        image = training.get("image", DLVM_IMAGE)
        launch = _startup_script(training, gpu, names, args.get("max_run_seconds"))
        script = launch.apply(lambda v: v[0])
        if training.get("checkpoint_url") is not None:
            run_record = launch.apply(lambda v: v[1])
    reservation = (
        compute.InstanceTemplateReservationAffinityArgs(
            type="SPECIFIC_RESERVATION",
            specific_reservation=compute.InstanceTemplateReservationAffinitySpecificReservationArgs(
                key=RESERVATION_KEY, values=[gpu.reservation]
            ),
        )
        if gpu.reservation
        else None
    )
    tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
    group_name = gcp_name(deployment, "a100")
    template = compute.InstanceTemplate(
        f"{name}-template",
        project=project,
        # Templates are immutable: a new script or image is a new template (the prefix keeps
        # the name unique), which the group rolls out by recreating the nodes.
        name_prefix=f"{group_name}-",
        description="trainstack: A100 training node",
        machine_type=gpu.machine_type,
        disks=[
            compute.InstanceTemplateDiskArgs(
                boot=True,
                auto_delete=True,
                source_image=image,
                disk_size_gb=args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB),
                disk_type=BOOT_DISK_TYPE,
                labels=labels,
            )
        ],
        # No access_configs: no external IP (egress through the network's NAT).
        network_interfaces=[
            compute.InstanceTemplateNetworkInterfaceArgs(
                network=args["network_self_link"],
                subnetwork=args["subnetwork_self_link"],
                nic_type="GVNIC",
            )
        ],
        network_performance_config=(
            compute.InstanceTemplateNetworkPerformanceConfigArgs(
                total_egress_bandwidth_tier="TIER_1"
            )
            if gpu.tier_1_networking
            else None
        ),
        scheduling=_scheduling(gpu.spot, gpu.flex_start, args.get("max_run_seconds")),
        reservation_affinity=reservation,
        # One self link, not a list, in pulumi_gcp 10 (at most one policy).
        resource_policies=placement_policy.self_link if placement_policy else None,
        service_account=compute.InstanceTemplateServiceAccountArgs(
            email=args["service_account_email"], scopes=[CLOUD_PLATFORM_SCOPE]
        ),
        metadata={"enable-oslogin": "TRUE"},
        metadata_startup_script=script,
        tags=tags,
        labels=labels,
        opts=child,
    )
    group = compute.InstanceGroupManager(
        f"{name}-group",
        project=project,
        zone=zone,
        name=group_name,
        description="trainstack: A100 training nodes, recreated when one stops",
        base_instance_name=group_name,
        versions=[
            compute.InstanceGroupManagerVersionArgs(
                name="trainer", instance_template=template.self_link_unique
            )
        ],
        # No target_size: the provider creates the group with `targetSize: 0` when it is
        # unset, and each per-instance config below is a `createInstances` call that adds
        # its VM and grows the target size by one (terraform-provider-google
        # resource_compute_instance_group_manager.go Create; resource_compute_per_instance_
        # config.go Create). A target size of its own would add as many auto-named VMs
        # without a rank: twice the VMs (hashicorp/terraform-provider-google#15911, #20662;
        # the provider's own acceptance group, testAccComputePerInstanceConfig_igm, has
        # none). Unset and Computed, it is never resized by `pulumi up`, so a refresh after
        # the supervisor's stop (size 0) changes nothing here.
        instance_lifecycle_policy=compute.InstanceGroupManagerInstanceLifecyclePolicyArgs(
            default_action_on_failure="REPAIR", force_update_on_repair="YES"
        ),
        # A new template replaces every node at once, keeping the names (a training run
        # cannot mix two trainer packages).
        update_policy=compute.InstanceGroupManagerUpdatePolicyArgs(
            type="PROACTIVE",
            minimal_action="REPLACE",
            replacement_method="RECREATE",
            max_surge_fixed=0,
            max_unavailable_fixed=gpu.node_count,
        ),
        wait_for_instances=False,
        # The nodes (its configs create them after it) read the buckets at boot: after the
        # grants. A replacement keeps the name, and a cluster never holds its GPUs twice
        # (the quota preflight counts node_count VMs): the old group and its VMs go first.
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=list(depends_on), delete_before_replace=True
        ),
    )
    node_configs = [
        compute.PerInstanceConfig(
            f"{name}-{i}",
            project=project,
            zone=zone,
            instance_group_manager=group.name,
            name=physical,
            preserved_state=compute.PerInstanceConfigPreservedStateArgs(
                metadata={NODE_RANK_ATTRIBUTE: str(i)}
            ),
            minimal_action="REPLACE",
            most_disruptive_allowed_action="REPLACE",
            # Destroying the config deletes its VM (`deleteInstances`, which drops the
            # config with it and lowers the target size by one), and waits until it is gone.
            remove_instance_on_destroy=True,
            # A replacement names the same VM: created first, `createInstances` would ask
            # for a name the group still holds. Delete, then create.
            opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True),
        )
        for i, physical in enumerate(names)
    ]
    return GceInstances(
        placement_policy=placement_policy,
        template=template,
        group=group,
        node_configs=node_configs,
        cluster_name=pulumi.Output.from_input(group_name),
        instance_names=pulumi.Output.all(*(c.name for c in node_configs)),
        name_pattern=instance_name_pattern(names),
        console_url=project.apply(gce_console_url),
        run_record=run_record,
    )


def gce_run_record(args: A100ClusterArgs, gpu: A100Shape) -> pulumi.Output[str] | None:
    """The run's record prefix of the group's VMs, before the group is registered (None
    without training and a checkpoint bucket)."""
    training = args.get("training")
    if training is None or training.get("checkpoint_url") is None:
        return None
    names = instance_names(args["deployment_name"], gpu.node_count)
    return _startup_script(training, gpu, names, args.get("max_run_seconds")).apply(lambda v: v[1])


def _startup_script(
    training: A100TrainingArgs, gpu: A100Shape, names: list[str], max_run_seconds: int | None
) -> pulumi.Output[tuple[str, str]]:
    """(The same script for every instance, the run's record prefix `run_record_uri`); each
    instance finds its rank in its own metadata. The run limit is the launcher's (`trainstack.components.gpu_startup`): a VM's maxRunDuration would only
    make the group recreate the VM (`trainstack.components.catalog.recovery`)."""
    module = training.get("trainer_module", DEFAULT_MODULE)
    flags = list(training.get("trainer_args", []))
    secret = tuple(training.get("secret_env_names") or ())

    def render(values: list[Any]) -> tuple[str, str]:
        package_uri, checkpoint_url, node_args = values
        if node_args is not None:
            # Your own code: the run contract's folders are in node_args already.
            launch: dict[str, Any] = {
                "module": None,
                "trainer_args": [],
                "node_args": node_args,
                "secret_env_names": secret,
            }
            torchrun = node_args_use_torchrun(node_args)
        else:
            launch = {"module": module, "trainer_args": with_checkpoint_dir(flags, checkpoint_url)}
            torchrun = uses_torchrun(module)
        keyed = {
            "package_uri": package_uri,
            **launch,
            "num_nodes": gpu.node_count,
            "procs_per_node": gpu.machine.gpus if torchrun else 1,
            "coordinator": names[0],
            "worker_hosts": names,
        }
        script = gce_startup_script(
            **keyed,
            accelerators_per_node=gpu.machine.gpus,
            extra_path=DLVM_PYTHON_BIN,
            max_run_seconds=max_run_seconds,
            checkpoint_url=checkpoint_url,
            # Flex-start: the VM's maxRunDuration (`_scheduling`) gives the run its deadline.
            capacity_run_seconds=max_run_seconds if gpu.flex_start else None,
        )
        record = run_record_uri(checkpoint_url, gce_run_key(**keyed)) if checkpoint_url else ""
        return script, record

    return pulumi.Output.all(
        training["package_uri"], training.get("checkpoint_url"), training.get("node_args")
    ).apply(render)


def _scheduling(
    spot: bool, flex_start: bool = False, max_run_seconds: int | None = None
) -> compute.InstanceTemplateSchedulingArgs:
    if flex_start:
        # Compute Engine flex-start: provisioningModel FLEX_START with maxRunDuration
        # (DISC:compute.v1.json#Scheduling; frontier.md 5.2); "If specified, the instance
        # termination action will be performed at the end of the run duration" (same doc,
        # Scheduling.maxRunDuration): DELETE, so nothing is left billing its disks. The
        # validator requires the duration here (validate.flex_start_problems).
        assert max_run_seconds is not None
        return compute.InstanceTemplateSchedulingArgs(
            provisioning_model="FLEX_START",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="DELETE",
            max_run_duration=compute.InstanceTemplateSchedulingMaxRunDurationArgs(
                seconds=max_run_seconds
            ),
        )
    if spot:
        # STOP leaves a TERMINATED VM, which the group's REPAIR action recreates.
        return compute.InstanceTemplateSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="STOP",
        )
    return compute.InstanceTemplateSchedulingArgs(
        provisioning_model="STANDARD",
        preemptible=False,
        automatic_restart=True,
        # GPU VMs cannot live-migrate (fact sheet 2.4).
        on_host_maintenance="TERMINATE",
    )

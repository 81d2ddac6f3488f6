"""The gce backend of `A100Cluster`: GPU instances of a zonal managed instance group in one
compact placement policy, each running the trainer from its startup script (see the
package docstring). A4 and A3 Ultra get their GPUDirect RDMA fabric (`gce_fabric`); a
flex-start group gets its VMs from one resize request (`_flex_start_group`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_gcp import compute

from trainstack.components.a100_cluster._common import (
    CLOUD_PLATFORM_SCOPE,
    DEFAULT_BOOT_DISK_GB,
    RESERVATION_KEY,
    A100ClusterArgs,
    A100TrainingArgs,
    instance_name_pattern,
    instance_names,
    region_of,
)
from trainstack.components.a100_cluster.gce_fabric import GceFabricResources, create_gce_fabric
from trainstack.components.a100_cluster.validate import A100Shape
from trainstack.components.catalog import gpu_fabric_gce
from trainstack.components.catalog.gpu_fabric_gce import GceFabric, fabric_kind, gce_fabric
from trainstack.components.catalog.gpu_families import boot_disk_type
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
from trainstack.components.naming import gcp_name

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
    recreation. None with flex-start (`resize_request` creates the VMs)."""
    resize_request: compute.ResizeRequest | None
    """Flex-start: the request for `node_count` VMs for the run's duration."""
    fabric: GceFabricResources | None
    """A4, A3 Ultra: the GPUDirect RDMA fabric's networks."""
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

    Flex-start takes another path (`_flex_start_group`): Google creates flex-start VMs in a
    MIG only through a resize request.
    """
    project = pulumi.Output.from_input(args["project"])
    zone = gpu.zone
    deployment = args["deployment_name"]
    names = instance_names(deployment, gpu.node_count)
    group_name = gcp_name(deployment, "a100")
    child = pulumi.ResourceOptions(parent=parent)
    spec = gce_fabric(gpu.machine_type, deployment, zone)
    family = "A100" if spec is None else spec.family
    fabric = (
        create_gce_fabric(name, spec, deployment, project, zone, parent)
        if spec is not None
        else None
    )
    placement_policy = None
    if gpu.compact_placement and gpu.node_count >= 2:
        # A placement group holds 2 or more VMs; one VM has nothing to be close to.
        placement_policy = compute.ResourcePolicy(
            f"{name}-placement",
            project=project,
            region=region_of(zone),
            name=gcp_name(deployment, "a100-placement"),
            description=f"trainstack: {family} nodes of one training cluster, collocated",
            **_placement_kind(spec is not None),
            opts=child,
        )
    # A3 Ultra and A4 take theirs on the group, A2 on the template (`_placement_kind`).
    workload_policy = placement_policy if spec is not None else None
    template_policy = placement_policy if spec is None else None

    training = args.get("training")
    script: pulumi.Output[str] | None = None
    run_record: pulumi.Output[str] | None = None
    default_image = DLVM_IMAGE if spec is None else gpu_fabric_gce.ACCELERATOR_IMAGE
    image = default_image
    if training is not None:
        image = training.get("image", default_image)
        launch = _startup_script(training, gpu, names, args.get("max_run_seconds"), group_name)
        script = launch.apply(lambda v: v[0])
        if training.get("checkpoint_url") is not None:
            run_record = launch.apply(lambda v: v[1])
    tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
    primary = compute.InstanceTemplateNetworkInterfaceArgs(
        network=args["network_self_link"],
        subnetwork=args["subnetwork_self_link"],
        nic_type="GVNIC",
    )
    template = compute.InstanceTemplate(
        f"{name}-template",
        project=project,
        # Templates are immutable: a new script or image is a new template (the prefix keeps
        # the name unique), which the group rolls out by recreating the nodes.
        name_prefix=f"{group_name}-",
        description=f"trainstack: {family} training node",
        machine_type=gpu.machine_type,
        disks=[
            compute.InstanceTemplateDiskArgs(
                boot=True,
                auto_delete=True,
                source_image=image,
                disk_size_gb=args.get("boot_disk_size_gb", DEFAULT_BOOT_DISK_GB),
                disk_type=boot_disk_type(gpu.machine_type),
                labels=labels,
            )
        ],
        # No access_configs: no external IP (egress through the network's NAT). The fabric's
        # NICs follow the primary in CTK's order (`catalog.gpu_fabric_gce`).
        network_interfaces=[primary, *(fabric.nics if fabric is not None else [])],
        network_performance_config=(
            compute.InstanceTemplateNetworkPerformanceConfigArgs(
                total_egress_bandwidth_tier="TIER_1"
            )
            if gpu.tier_1_networking
            else None
        ),
        scheduling=_scheduling(gpu, spec, args.get("max_run_seconds")),
        reservation_affinity=_reservation_affinity(gpu),
        # One self link, not a list, in pulumi_gcp 10 (at most one policy).
        resource_policies=template_policy.self_link if template_policy else None,
        service_account=compute.InstanceTemplateServiceAccountArgs(
            email=args["service_account_email"], scopes=[CLOUD_PLATFORM_SCOPE]
        ),
        metadata={"enable-oslogin": "TRUE"},
        metadata_startup_script=script,
        tags=tags,
        labels=labels,
        opts=child,
    )
    if gpu.flex_start:
        run_seconds = args.get("max_run_seconds")
        assert run_seconds is not None  # validate.flex_start_problems
        group, request = _flex_start_group(
            name,
            project,
            zone,
            group_name,
            family,
            template,
            gpu,
            run_seconds,
            parent,
            depends_on,
            workload_policy,
        )
        return GceInstances(
            placement_policy=placement_policy,
            template=template,
            group=group,
            node_configs=[],
            resize_request=request,
            fabric=fabric,
            cluster_name=pulumi.Output.from_input(group_name),
            # The request names its VMs itself: none is known before they exist.
            instance_names=pulumi.Output.from_input([]),
            name_pattern=flex_name_pattern(group_name),
            console_url=project.apply(gce_console_url),
            run_record=run_record,
        )
    group = compute.InstanceGroupManager(
        f"{name}-group",
        project=project,
        zone=zone,
        name=group_name,
        description=f"trainstack: {family} training nodes, recreated when one stops",
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
        update_policy=_update_policy("PROACTIVE", gpu.node_count),
        resource_policies=_group_policies(workload_policy),
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
        resize_request=None,
        fabric=fabric,
        cluster_name=pulumi.Output.from_input(group_name),
        instance_names=pulumi.Output.all(*(c.name for c in node_configs)),
        name_pattern=instance_name_pattern(names),
        console_url=project.apply(gce_console_url),
        run_record=run_record,
    )


def _placement_kind(workload: bool) -> dict[str, Any]:
    """The policy's kind. A2: a compact placement policy, applied through the template. A3
    Ultra and A4: a workload policy of type HIGH_THROUGHPUT, applied to the group. Google:
    "To place compute instances closer together, you can apply compact placement policies to
    compute instances or workload policies to MIGs", compact placement policies being for
    "standalone compute instances, or compute instances created in bulk"
    (https://cloud.google.com/ai-hypercomputer/docs/placement-policy-and-workload-policy);
    "You can only apply workload policies to MIGs that use A4X Max, A4X, A4, A3 Ultra, A3
    Mega, A3 High (8 GPUs), H4D ... To control the placement of compute instances that use
    other machine series, use placement policies"
    (https://cloud.google.com/compute/docs/instance-groups/about-workload-policies). The
    provider's A4 group tests do the same (terraform-provider-google
    resource_compute_instance_group_manager_test.go testAccInstanceGroupManager_
    resourcePoliciesWorkloadPolicy: `workload_policy { type = "HIGH_THROUGHPUT" }` on the
    policy, `resource_policies { workload_policy = ... }` on the group). No
    max_topology_distance: without it Google places best-effort, as the A2 policy without
    vm_count does."""
    if workload:
        return {"workload_policy": compute.ResourcePolicyWorkloadPolicyArgs(type="HIGH_THROUGHPUT")}
    # No vm_count (`catalog.recovery.COMPACT_PLACEMENT_WITHOUT_VM_COUNT_SOURCE`): with it,
    # "exactly vm_count instances must be created at the same time", but the group creates
    # its VMs one `createInstances` call each, REPAIR recreates one at a time and a new
    # node_count would PATCH the count of a policy running VMs use. Without it VMs join the
    # policy one by one, Google's recommended way.
    return {
        "group_placement_policy": compute.ResourcePolicyGroupPlacementPolicyArgs(
            collocation="COLLOCATED"
        )
    }


def _group_policies(
    policy: compute.ResourcePolicy | None,
) -> compute.InstanceGroupManagerResourcePoliciesArgs | None:
    # resource_compute_instance_group_manager.go `resource_policies.workload_policy`: "The
    # URL of the workload policy that is specified for this managed instance group".
    if policy is None:
        return None
    return compute.InstanceGroupManagerResourcePoliciesArgs(workload_policy=policy.self_link)


def flex_name_pattern(group_name: str) -> str:
    """The names a flex-start group gives its VMs: its base instance name, a hyphen and four
    characters (the provider's `base_instance_name`: "The base instance name to use for
    instances in this group. ... A random four-character string will be appended to the base
    instance name", resource_compute_instance_group_manager.go)."""
    return f"^{group_name}-[a-z0-9]{{4}}$"


def _update_policy(kind: str, node_count: int) -> compute.InstanceGroupManagerUpdatePolicyArgs:
    return compute.InstanceGroupManagerUpdatePolicyArgs(
        type=kind,
        minimal_action="REPLACE",
        replacement_method="RECREATE",
        max_surge_fixed=0,
        max_unavailable_fixed=node_count,
    )


def _flex_start_group(
    name: str,
    project: pulumi.Output[str],
    zone: str,
    group_name: str,
    family: str,
    template: compute.InstanceTemplate,
    gpu: A100Shape,
    run_seconds: int,
    parent: pulumi.Resource,
    depends_on: Sequence[Any],
    workload_policy: compute.ResourcePolicy | None,
) -> tuple[compute.InstanceGroupManager, compute.ResizeRequest]:
    """A flex-start group: empty, and one resize request for `node_count` VMs for the run.

    Google obtains flex-start capacity for a MIG through resize requests only ("specify the
    flex-start provisioning model: Create a standalone VM, Create MIGs with resize requests,
    ...", https://cloud.google.com/ai-hypercomputer/docs/obtain-capacity), and "When you
    create a resize request, you must specify ... resizeBy ... requestedRunDuration ... At
    the end of the run duration, the MIG deletes the created VMs"
    (https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig). The
    provider's `google_compute_resize_request` takes `resize_by` only (no names, no
    per-instance state: resource_compute_resize_request.go schema), so the VMs carry no rank
    metadata: each claims its rank at start (`gpu_startup`, `rank_claims`). As in the
    provider's own example (website/docs/r/compute_resize_request.html.markdown: the group
    with `default_action_on_failure = "DO_NOTHING"`, the template with
    `reservation_affinity { type = "NO_RESERVATION" }`) and CTK's Slurm flex-start path
    (community/modules/scheduler/schedmd-slurm-gcp-v6-controller/modules/slurm_files/
    scripts/mig_flex.py resume_flex_chunk: `targetSize=0`, `defaultActionOnFailure:
    DO_NOTHING`, then `regionInstanceGroupManagerResizeRequests().insert`), the group
    repairs nothing: a VM the request made is not recreated outside it."""
    group = compute.InstanceGroupManager(
        f"{name}-group",
        project=project,
        zone=zone,
        name=group_name,
        description=f"trainstack: {family} flex-start training nodes of one resize request",
        base_instance_name=group_name,
        versions=[
            compute.InstanceGroupManagerVersionArgs(
                name="trainer", instance_template=template.self_link_unique
            )
        ],
        instance_lifecycle_policy=compute.InstanceGroupManagerInstanceLifecyclePolicyArgs(
            default_action_on_failure="DO_NOTHING"
        ),
        # OPPORTUNISTIC: "MIG will apply new configurations to existing VMs only when you
        # selectively target" them (compute.v1 discovery, InstanceGroupManagerUpdatePolicy.
        # type): no update recreates a flex-start VM. A new template replaces the group
        # instead (`replace_on_changes`), its VMs and request with it, and a new request
        # asks for the capacity again.
        update_policy=_update_policy("OPPORTUNISTIC", gpu.node_count),
        resource_policies=_group_policies(workload_policy),
        wait_for_instances=False,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(depends_on),
            delete_before_replace=True,
            replace_on_changes=["versions"],
        ),
    )
    request = compute.ResizeRequest(
        f"{name}-resize",
        project=project,
        zone=zone,
        instance_group_manager=group.name,
        name=gcp_name(group_name, "run"),
        description=f"trainstack: {gpu.node_count} flex-start {family} nodes for the run",
        resize_by=gpu.node_count,
        requested_run_duration=compute.ResizeRequestRequestedRunDurationArgs(
            seconds=str(run_seconds)
        ),
        # Every field forces a new request under the same name: the old one goes first.
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True),
    )
    return group, request


def gce_run_record(args: A100ClusterArgs, gpu: A100Shape) -> pulumi.Output[str] | None:
    """The run's record prefix of the group's VMs, before the group is registered (None
    without training and a checkpoint bucket)."""
    training = args.get("training")
    if training is None or training.get("checkpoint_url") is None:
        return None
    names = instance_names(args["deployment_name"], gpu.node_count)
    group_name = gcp_name(args["deployment_name"], "a100")
    launch = _startup_script(training, gpu, names, args.get("max_run_seconds"), group_name)
    return launch.apply(lambda v: v[1])


def _startup_script(
    training: A100TrainingArgs,
    gpu: A100Shape,
    names: list[str],
    max_run_seconds: int | None,
    group_name: str,
) -> pulumi.Output[tuple[str, str]]:
    """(The same script for every instance, the run's record prefix `run_record_uri`); each
    instance finds its rank in its own metadata, or, in a flex-start group, claims one
    (`rank_claims`: the resize request names the VMs). The run limit is the launcher's
    (`trainstack.components.gpu_startup`): a VM's maxRunDuration would only make the group
    recreate the VM (`trainstack.components.catalog.recovery`). A4 and A3 Ultra install
    Google's NCCL/gIB plugin and source its settings (`nccl_gib`)."""
    nccl_gib = fabric_kind(gpu.machine_type) == "rdma"
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
            # Flex-start: the rank-0 VM's claimed name replaces the group's base name.
            "coordinator": group_name if gpu.flex_start else names[0],
            "worker_hosts": [] if gpu.flex_start else names,
        }
        script = gce_startup_script(
            **keyed,
            accelerators_per_node=gpu.machine.gpus,
            extra_path=DLVM_PYTHON_BIN,
            max_run_seconds=max_run_seconds,
            checkpoint_url=checkpoint_url,
            nccl_gib=nccl_gib,
            rank_claims=gpu.flex_start,
            # Flex-start: the VM's maxRunDuration (`_scheduling`) gives the run its deadline.
            capacity_run_seconds=max_run_seconds if gpu.flex_start else None,
        )
        record = run_record_uri(checkpoint_url, gce_run_key(**keyed)) if checkpoint_url else ""
        return script, record

    return pulumi.Output.all(
        training["package_uri"], training.get("checkpoint_url"), training.get("node_args")
    ).apply(render)


def _reservation_affinity(gpu: A100Shape) -> compute.InstanceTemplateReservationAffinityArgs | None:
    if gpu.reservation:
        return compute.InstanceTemplateReservationAffinityArgs(
            type="SPECIFIC_RESERVATION",
            specific_reservation=compute.InstanceTemplateReservationAffinitySpecificReservationArgs(
                key=RESERVATION_KEY, values=[gpu.reservation]
            ),
        )
    if gpu.flex_start:
        # Flex-start capacity is its own: the provider's resize-request example template
        # (website/docs/r/compute_resize_request.html.markdown) and CTK's flex-start nodes
        # (schedmd-slurm-gcp-v6-controller/partition.tf `reservation_affinity =
        # local.no_reservation_affinity`) consume no reservation.
        return compute.InstanceTemplateReservationAffinityArgs(type="NO_RESERVATION")
    return None


def _scheduling(
    gpu: A100Shape, fabric: GceFabric | None, max_run_seconds: int | None = None
) -> compute.InstanceTemplateSchedulingArgs:
    if gpu.flex_start:
        # Compute Engine flex-start: provisioningModel FLEX_START with maxRunDuration
        # (DISC:compute.v1.json#Scheduling; frontier.md 5.2); "If specified, the instance
        # termination action will be performed at the end of the run duration" (same doc,
        # Scheduling.maxRunDuration): DELETE, so nothing is left billing its disks. CTK's
        # flex-start template sets the same three (schedmd-slurm-gcp-v6-controller/
        # partition.tf `provisioning_model = "FLEX_START"`, `max_run_duration`;
        # schedmd-slurm-gcp-v6-nodeset/main.tf `termination_action = "DELETE"`). The
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
    if gpu.spot:
        # STOP leaves a TERMINATED VM, which the group's REPAIR action recreates.
        return compute.InstanceTemplateSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="STOP",
        )
    if fabric is not None and gpu.reservation:
        # CTK a4high-vm.yaml / a3ultra-vm.yaml: `provisioning_model: RESERVATION_BOUND` with
        # `reservation_name`, `automatic_restart: true`, `on_host_maintenance: TERMINATE`.
        return compute.InstanceTemplateSchedulingArgs(
            provisioning_model="RESERVATION_BOUND",
            automatic_restart=True,
            on_host_maintenance="TERMINATE",
        )
    return compute.InstanceTemplateSchedulingArgs(
        provisioning_model="STANDARD",
        preemptible=False,
        automatic_restart=True,
        # GPU VMs cannot live-migrate (fact sheet 2.4).
        on_host_maintenance="TERMINATE",
    )

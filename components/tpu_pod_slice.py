"""A Cloud TPU VM slice (v4, v5e, v5p, v6e) that boots, installs the trainer and trains.

    from trainstack.components.tpu_pod_slice import TpuPodSlice

    tpu = TpuPodSlice(
        "exp-42-tpu",
        {
            "project": "my-project",
            "zone": "us-central2-b",
            "deployment_name": "exp-42",
            "accelerator_type": "v4-32",  # or "generation": "v4", "topology": "2x2x4"
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
            "provisioning": "spot",  # on-demand | spot | reserved | queued
            "network_self_link": net.network_self_link,
            "subnetwork_self_link": net.subnetwork_self_link,
            "network_tags": [net.node_tag],
            "service_account_email": identity.service_account_email,
            "package_uri": package.uri,
            "checkpoint_dir": buckets.checkpoint_url.apply(lambda u: f"{u}/checkpoints"),
            "trainer_args": ["--framework=tensorflow", "--strategy=tpu", "--steps=1000"],
        },
    )
    # tpu.slice_name, tpu.worker_ips, tpu.chips, tpu.hosts, tpu.console_url, tpu.checkpoint_dir

Your own code instead of the trainer (examples/own-program): `code` with the run contract's
buckets, and the package built from the same code, in place of `checkpoint_dir` and
`trainer_args`:

    code = UserCode(source="train", entrypoint=["python", "train.py"])
    package = TrainerPackage("exp-42-code", {"staging_bucket": buckets.staging_bucket, "code": code})
    TpuPodSlice("exp-42-tpu", {..., "runtime_version": "tpu-ubuntu2204-base",
                               "package_uri": package.uri, "package": package, "code": code,
                               "checkpoint_url": buckets.checkpoint_url, "data_url": buckets.data_url})

Validation happens before anything is registered, against `trainstack.components.catalog`, with
`tpu_pod_slice_problems` (`trainstack.components._tpu_args`), the function the stack config checks
`trainstack:tpu` with: the slice exists for its generation, the zone offers the generation,
the runtime version belongs to the generation, a TensorFlow `-pod` runtime goes with a
multi-host slice and a plain one with a single host, and the bundled trainer gets a
TensorFlow runtime. The bundled trainer is the tensorflow trainer (TPUStrategy) only; your
own code (`node_args`) brings its framework (JAX, PyTorch/XLA) and runs on every worker.

Provisioning:
- on-demand, spot, reserved: one `gcp.tpu.V2Vm` (`scheduling_config` spot/reserved) with no
  external IPs (the network gives Private Google Access and Cloud NAT), the given service
  account (cloud-platform scope; IAM limits it), Secure Boot, labels, network tags, data
  disks, and the startup script in metadata.
- queued: a Cloud TPU queued resource through the REST API (`trainstack.components._tpu_queued_provider`;
  pulumi-gcp's `V2QueuedResource` lacks the tiers and the node's metadata), with the same
  node plus a tier (`spot` or `guaranteed`), an optional queueing deadline and reservation.
  `pulumi up` waits until it is ACTIVE (`queued.wait_timeout_s`). Its exact REST body is the
  resource's `body` input, so previews and plan diffs show it.

The startup script (`components/startup/tpu_worker.sh`) runs on every worker at every boot:
it installs the trainer package from the staging bucket, reads its worker id and worker 0's
IP from the metadata server, and on worker 0 runs
`python3 -m <trainer_module> --checkpoint_dir=<checkpoint_dir> <trainer_args>` (TensorFlow
TPUStrategy; the other workers serve their chips). With `node_args` (your own code,
`trainstack.trainers.common.user_code.node_args`) every worker runs `python3 -m trainstack.trainers.node
<node_args>` instead (JAX and PyTorch/XLA run one process per host), on any runtime
version: no TensorFlow runtime is required. `max_run_seconds` (the stack's run limit) is
enforced by the same script, since the GA Cloud TPU API has no run limit: the run's first
start is recorded once in the checkpoint bucket, and once the limit has passed since then
the trainer gets SIGTERM (it checkpoints) and is not relaunched; a later boot exits at once
(`trainstack.components.startup.tpu_worker`). A change to the script (new package,
other trainer flags) replaces the slice: the script only runs at boot, so an in-place
metadata update would leave the old run going.

Naming: the TPU node is `<deployment_name>-tpu` and the queued resource
`<deployment_name>-tpu-qr` (see `trainstack.components.naming`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import pulumi
from pulumi_gcp import tpu

from trainstack.components._args import check_args, component_check
from trainstack.components._options import inherited_depends_on
from trainstack.components._tpu_args import (
    DEFAULT_TRAINER_MODULE,
    TPU_CODE,
    DataDiskArgs,
    QueuedArgs,
    SlicePlan,
    TpuPodSliceArgs,
    tpu_pod_slice_problems,
    tpu_trainer_problems,
    validate_args,
    with_code,
)
from trainstack.components._tpu_launch import (
    API,
    COMPONENT_LABEL,
    SCOPES,
    node_body,
    queued_body,
    queued_resource_body,
    reservation_name,
    resource_path,
    slice_launch,
)
from trainstack.components._tpu_queued_provider import (
    QueuedResource,
    QueuedResourceProvider,
    console_url,
)
from trainstack.components.catalog.tpu import CLOUD_TPU_API_NOTE, TPU_ZONES_SOURCE
from trainstack.components.catalog.tpu_runtimes import HARDWARE_SUFFIX_SOURCE, parse_tf_runtime
from trainstack.components.code_summary import (
    TPU_WORKER_ENV,
    component_code_summary,
    tpu_vm_runs_on,
)
from trainstack.components.facts import (
    checkpoint_dir_of,
    deployed_facts,
    make_facts,
    run_limit_own_text,
    tpu_after_stop,
    tpu_quota,
    tpu_summary,
)
from trainstack.components.naming import gcp_name, labels_input, name_input, stack_labels
from trainstack.components.startup.tpu_worker import effective_checkpoint_dir
from trainstack.components.training_dashboard.targets import (
    DashboardScope,
    tpu_filter_text,
    tpu_filters,
)
from trainstack.components.user_code import UserCode

# `TpuPodSliceArgs` is defined beside its checks (`_tpu_args`), below the launch helpers
# that read it too (`_tpu_launch`), so the three import in one direction.
__all__ = [
    "API",
    "COMPONENT_LABEL",
    "DEFAULT_TRAINER_MODULE",
    "SCOPES",
    "DataDiskArgs",
    "QueuedArgs",
    "SlicePlan",
    "TpuPodSlice",
    "TpuPodSliceArgs",
    "node_body",
    "queued_resource_body",
    "reservation_name",
    "resource_path",
    "tpu_pod_slice_problems",
    "tpu_trainer_problems",
    "validate_args",
]

TOKEN: Final = "trainstack:tpu:TpuPodSlice"


# --------------------------------------------------------------------------------------
# Component
# --------------------------------------------------------------------------------------


def slice_checkpoint_dir(trainer_args: Sequence[str], values: Sequence[Any]) -> str:
    """Where the trainer writes its checkpoints (`values`: the `checkpoint_dir` argument and
    `node_args`): your code's run-contract folder (`TRAINSTACK_CHECKPOINT_DIR` in `node_args`,
    `<checkpoint_url>/checkpoints/<run>`), else the bundled trainer's `--checkpoint_dir`."""
    default, node_args = values
    if node_args is not None:
        return checkpoint_dir_of(node_args) or default
    return effective_checkpoint_dir(trainer_args, default)


def tpu_pod_slice_facts(
    plan: SlicePlan,
    zone: str,
    reservation: str | None,
    values: Sequence[Any],
    name: str | None = None,
    code: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A slice's facts (`trainstack.components.facts`), from its validated arguments
    (`values`: deployment name, project, slice name, checkpoint folder); `name`: the
    component's Pulumi name; `code`: the plan's entry for the `code` it runs (`slice_code`)."""
    deployment, project, slice_name, checkpoint_dir = values
    queued = gcp_name(deployment, "tpu-qr") if plan.provisioning == "queued" else None
    seconds = plan.max_run_seconds
    summary = tpu_summary(plan.slice, plan.provisioning)
    return make_facts(
        "TpuPodSlice",
        "tpu",
        name=name,
        **summary,
        quota=tpu_quota(plan.slice, plan.provisioning, zone),
        notes=[CLOUD_TPU_API_NOTE],
        run_limit=run_limit_own_text("tpu", seconds) if seconds else None,
        # A supervisor deletes the whole slice.
        stoppable_hourly_usd=round(summary["hourly_usd"], 2),
        after_stop=tpu_after_stop(plan.slice, plan.provisioning, reservation, zone),
        status={
            "project": project,
            "zone": zone,
            "node": slice_name,
            "queued_resource": queued,
            "provisioning": plan.provisioning,
            "checkpoint_dir": checkpoint_dir,
            # Your code's checkpoint folders are its own: status takes its marker's word.
            "own_code": plan.user_code,
        },
        logs={
            "platform": "tpu",
            "scope": tpu_filter_text(slice_name)[0],
            "workers": plan.slice.hosts,
            "worker_label": "worker_id",
        },
        code=code,
    )


def slice_code(code: UserCode | None, plan: SlicePlan) -> dict[str, Any] | None:
    """The plan's "Your code" entry for the slice's `code` (None without): one node launcher
    per TPU host, on the slice's runtime (`trainstack.components.code_summary`)."""
    if code is None:
        return None
    return component_code_summary(
        code,
        "TpuPodSlice",
        default_launcher=TPU_CODE.default_launcher,
        runs_on=tpu_vm_runs_on(plan.runtime_version),
        world_size=plan.slice.hosts,
        node_env=TPU_WORKER_ENV,
    )


class TpuPodSlice(pulumi.ComponentResource):
    """A TPU VM slice running the bundled trainer; see the module docstring."""

    slice_name: pulumi.Output[str]
    """The TPU node's name."""
    worker_ips: pulumi.Output[list[str]]
    """Internal IPs of the workers, worker 0 (the trainer) first."""
    chips: int
    """TPU chips in the slice (catalog)."""
    hosts: int
    """Worker VMs in the slice (catalog; the startup script logs a mismatch with reality)."""
    accelerator_type: str
    """Canonical slice type, e.g. `v4-32`."""
    topology: str
    """Chip topology, e.g. `2x2x4`."""
    console_url: pulumi.Output[str]
    """Cloud console page of the TPU node."""
    checkpoint_dir: pulumi.Output[str]
    """Where the trainer writes its checkpoints."""
    startup_script: pulumi.Output[str]
    """The exact startup script every worker runs."""
    run_record: pulumi.Output[str]
    """The run's record prefix, `gs://<bucket>/trainstack-run-<key>` (its run clock, end
    record and stop request; `trainstack.trainers.common.run_records`)."""
    vm: tpu.V2Vm | None
    """The node, for provisioning on-demand, spot and reserved (else None)."""
    facts: dict[str, Any]
    """What `trainstack plan|plan-diff|quota|status|logs --program` read from this slice
    (`trainstack.components.facts`; also a registered output): chips, hosts, $/hour at list
    price (spot price when spot), the TPU quota it draws, its plan notes, where its state is
    read (`status`: project, zone, node and queued resource names, for the Cloud TPU API) and
    its trainer's Cloud Logging scope (`logs`). Export it to read a deployed program's status:
    `pulumi.export("tpu", tpu.facts)`. Plain values but `status` and `logs`, Outputs
    known once deployed (`trainstack.components.facts.deployed_facts`)."""
    queued_resource: QueuedResource | None
    """The queued resource, for provisioning queued (else None)."""

    def __init__(
        self, name: str, args: TpuPodSliceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("TpuPodSlice", TpuPodSliceArgs, args)
        code = args.get("code")
        # Your code (`code`) becomes the node launcher's arguments, checked first.
        args = component_check("TpuPodSlice", with_code, args)  # type: ignore[assignment]
        plan = component_check("TpuPodSlice", validate_args, args)
        code_entry = slice_code(code, plan)
        labels = component_check(
            "TpuPodSlice", labels_input, stack_labels(args.get("labels")), COMPONENT_LABEL
        )
        deployment = args["deployment_name"]
        slice_name = name_input(gcp_name, deployment, "tpu")
        super().__init__(TOKEN, name, None, opts)
        # The slice's VMs read the staging and checkpoint buckets from their first boot.
        self._deps = inherited_depends_on(opts)
        self._warn_unverified(plan, args["zone"])

        found = plan.slice
        trainer_args = list(plan.trainer_args)
        # The slice's launch comes from its arguments alone (`slice_launch`): its run
        # supervisor, registered first, recreates it with the same script and record.
        launch = slice_launch(args, plan)
        self.startup_script = launch.apply(lambda v: v[0])
        self.run_record = launch.apply(lambda v: v[1])
        self._keyed_script = launch.apply(lambda v: v[2])
        self.vm = None
        self.queued_resource = None
        if plan.provisioning == "queued":
            self.worker_ips = self._create_queued(name, args, plan, slice_name, labels)
        else:
            self.worker_ips = self._create_vm(name, args, plan, slice_name, labels)

        zone = args["zone"]
        self.slice_name = pulumi.Output.from_input(slice_name)
        self.chips = found.chips
        self.hosts = found.hosts
        self.accelerator_type = found.accelerator_type
        self.topology = found.topology
        self.console_url = pulumi.Output.all(args["project"], slice_name).apply(
            lambda v: console_url(v[0], zone, v[1])
        )
        self.checkpoint_dir = pulumi.Output.all(
            args["checkpoint_dir"], args.get("node_args")
        ).apply(lambda v: slice_checkpoint_dir(trainer_args, v))
        log_filter, resource_filter = tpu_filters(self.slice_name)
        self.dashboard_scope: DashboardScope = {
            "target": "tpu",
            # The TensorFlow TPU program runs on worker 0 only; the others serve the TPU.
            # Your own code runs on every worker.
            "worker_count": found.hosts if plan.user_code else 1,
            "log_filter": log_filter,
            "resource_filter": resource_filter,
        }
        project = args["project"]
        self.facts = deployed_facts(
            lambda v: tpu_pod_slice_facts(plan, zone, args.get("reservation"), v, name, code_entry),
            [deployment, project, self.slice_name, self.checkpoint_dir],
            [deployment, "", "", ""],
        )
        self.register_outputs(
            {
                "facts": self.facts,
                "slice_name": self.slice_name,
                "worker_ips": self.worker_ips,
                "chips": self.chips,
                "hosts": self.hosts,
                "accelerator_type": self.accelerator_type,
                "topology": self.topology,
                "console_url": self.console_url,
                "checkpoint_dir": self.checkpoint_dir,
                "startup_script": self.startup_script,
                "run_record": self.run_record,
                "vm": self.vm,
                "queued_resource": self.queued_resource,
            }
        )

    def _warn_unverified(self, plan: SlicePlan, zone: str) -> None:
        found = plan.slice
        if not found.verified:
            pulumi.log.warn(
                f"{found.accelerator_type}: unverified catalog fact: {found.note}", resource=self
            )
        runtime = parse_tf_runtime(plan.runtime_version)
        if runtime is not None and not runtime.verified:
            pulumi.log.warn(
                f"{plan.runtime_version}: unverified catalog fact: {HARDWARE_SUFFIX_SOURCE}",
                resource=self,
            )
        if runtime is not None and runtime.pjrt and not found.multi_host and not plan.user_code:
            pulumi.log.warn(
                f"{plan.runtime_version}: unverified catalog fact: the startup script points "
                "TF_PLUGGABLE_DEVICE_LIBRARY_PATH at the libtpu package's libtpu.so (else "
                "/lib/libtpu.so), where Google's TensorFlow harness keeps it; where tpu-vm-tf "
                "runtime images keep it is not documented",
                resource=self,
            )
        if not plan.generation.zones.get(zone, True):
            pulumi.log.warn(
                f"{zone}: the catalog's {plan.generation.name} zone list marks it unverified "
                f"(source: {TPU_ZONES_SOURCE})",
                resource=self,
            )

    def _create_vm(
        self,
        name: str,
        args: TpuPodSliceArgs,
        plan: SlicePlan,
        slice_name: pulumi.Input[str],
        labels: pulumi.Input[Mapping[str, str]],
    ) -> pulumi.Output[list[str]]:
        scheduling: tpu.V2VmSchedulingConfigArgs | None = None
        if plan.provisioning == "spot":
            scheduling = tpu.V2VmSchedulingConfigArgs(spot=True)
        elif plan.provisioning == "reserved":
            scheduling = tpu.V2VmSchedulingConfigArgs(reserved=True)
        disks = [
            tpu.V2VmDataDiskArgs(source_disk=disk["source_disk"], mode=mode)
            for disk, mode in zip(args.get("data_disks", ()), plan.disk_modes, strict=True)
        ]
        tags = list(args.get("network_tags", ()))
        self.vm = tpu.V2Vm(
            f"{name}-vm",
            name=slice_name,
            project=args["project"],
            zone=args["zone"],
            description=f"trainstack TPU slice {plan.slice.accelerator_type}",
            runtime_version=args["runtime_version"],
            accelerator_config=tpu.V2VmAcceleratorConfigArgs(
                type=plan.generation.api_type, topology=plan.slice.topology
            ),
            scheduling_config=scheduling,
            network_config=tpu.V2VmNetworkConfigArgs(
                network=pulumi.Output.from_input(args["network_self_link"]).apply(resource_path),
                subnetwork=pulumi.Output.from_input(args["subnetwork_self_link"]).apply(
                    resource_path
                ),
                enable_external_ips=False,
            ),
            service_account=tpu.V2VmServiceAccountArgs(
                email=args["service_account_email"], scopes=list(SCOPES)
            ),
            shielded_instance_config=(
                tpu.V2VmShieldedInstanceConfigArgs(enable_secure_boot=True)
                if plan.secure_boot
                else None
            ),
            metadata={"startup-script": self.startup_script},
            labels=labels,
            tags=tags or None,
            data_disks=disks or None,
            # The script only runs at boot: a new one must replace the node, and the new
            # node reuses the name and the quota, so the old one goes first.
            opts=pulumi.ResourceOptions(
                parent=self,
                replace_on_changes=["metadata"],
                delete_before_replace=True,
                depends_on=self._deps,
            ),
        )
        return self.vm.network_endpoints.apply(
            lambda endpoints: [e.ip_address for e in endpoints or [] if e.ip_address]
        )

    def _create_queued(
        self,
        name: str,
        args: TpuPodSliceArgs,
        plan: SlicePlan,
        slice_name: pulumi.Input[str],
        labels: pulumi.Input[Mapping[str, str]],
    ) -> pulumi.Output[list[str]]:
        zone = args["zone"]
        qr_id = name_input(gcp_name, args["deployment_name"], "tpu-qr")
        self.queued_resource = QueuedResource(
            f"{name}-queued",
            project=args["project"],
            zone=zone,
            queued_resource_id=qr_id,
            node_id=slice_name,
            body=queued_body(args, plan, self.startup_script, labels, self._keyed_script),
            wait_timeout_s=plan.wait_timeout_s,
            api_endpoint=args.get("api_endpoint"),
            provider=QueuedResourceProvider(),
            opts=pulumi.ResourceOptions(
                parent=self, delete_before_replace=True, depends_on=self._deps
            ),
        )
        return self.queued_resource.worker_ips

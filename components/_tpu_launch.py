"""What a `TpuPodSlice` launches, from its arguments alone: the startup script, the run's
record prefix and the exact REST bodies (Node, QueuedResource). The component registers them;
`slice_target` gives them to the slice's run supervisor, which is registered before the slice
(`trainstack.infra.targets.tpu`), so the slice never runs unsupervised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import pulumi

from trainstack.components._discovery import validate_body
from trainstack.components._node_args import keyed_node_args
from trainstack.components._tpu_args import SlicePlan, TpuPodSliceArgs, validate_args
from trainstack.components._tpu_queued_provider import with_spec_label
from trainstack.components.naming import gcp_name, labels_input, name_input, stack_labels
from trainstack.components.startup.tpu_worker import render_tpu_worker_script, slice_run_record

COMPONENT_LABEL: Final = "tpu-pod-slice"
API: Final = "tpu.v2"
SCOPES: Final = ("https://www.googleapis.com/auth/cloud-platform",)
"""Access scope of the node's service account; its IAM roles are what limit it."""

_COMPUTE_API_PREFIXES: Final = (
    "https://www.googleapis.com/compute/v1/",
    "https://compute.googleapis.com/compute/v1/",
)


def resource_path(link: str) -> str:
    """`projects/P/...` for a Compute self link (the TPU API's examples use that form);
    anything else unchanged."""
    for api_prefix in _COMPUTE_API_PREFIXES:
        if link.startswith(api_prefix):
            return link[len(api_prefix) :]
    return link


def reservation_name(project: str, zone: str, reservation: str) -> str:
    """The queued resource's `reservationName` for a short name, `-` or a full name."""
    if reservation.startswith("projects/"):
        return reservation
    return f"projects/{project}/locations/{zone}/reservations/{reservation}"


def node_body(
    *,
    plan: SlicePlan,
    runtime_version: str,
    description: str,
    network: str,
    subnetwork: str,
    service_account_email: str,
    startup_script: str,
    labels: Mapping[str, str],
    network_tags: Sequence[str],
    data_disks: Sequence[str],
) -> dict[str, Any]:
    """The `Node` of a queued resource (REST field names), as the V2Vm path builds it."""
    node: dict[str, Any] = {
        "description": description,
        "runtimeVersion": runtime_version,
        "acceleratorConfig": {
            "type": plan.generation.api_type,
            "topology": plan.slice.topology,
        },
        "networkConfig": {
            "network": resource_path(network),
            "subnetwork": resource_path(subnetwork),
            "enableExternalIps": False,
        },
        "serviceAccount": {"email": service_account_email, "scope": list(SCOPES)},
        "metadata": {"startup-script": startup_script},
        "labels": dict(sorted(labels.items())),
    }
    if plan.secure_boot:
        node["shieldedInstanceConfig"] = {"enableSecureBoot": True}
    if network_tags:
        node["tags"] = list(network_tags)
    if data_disks:
        node["dataDisks"] = [
            {"sourceDisk": disk, "mode": mode}
            for disk, mode in zip(data_disks, plan.disk_modes, strict=True)
        ]
    return node


def queued_resource_body(
    *,
    project: str,
    zone: str,
    node_id: str,
    node: Mapping[str, Any],
    tier: str = "on-demand",
    min_duration_s: int | None = None,
    valid_until_s: int | None = None,
    reservation: str | None = None,
    spec_node: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The exact `QueuedResource` REST body, node labels carrying `trainstack_spec`: the hash
    of this body, or of it with `spec_node` as its node (the node with secret values left
    out of its startup script, `slice_launch`)."""
    body: dict[str, Any] = {
        "tpu": {
            "nodeSpec": [
                {
                    "parent": f"projects/{project}/locations/{zone}",
                    "nodeId": node_id,
                    "node": dict(node),
                }
            ]
        }
    }
    if tier == "spot":
        body["spot"] = {}
    elif tier == "guaranteed":
        body["guaranteed"] = {"minDuration": f"{min_duration_s}s"} if min_duration_s else {}
    if valid_until_s is not None:
        body["queueingPolicy"] = {"validUntilDuration": f"{valid_until_s}s"}
    if reservation is not None:
        body["reservationName"] = reservation_name(project, zone, reservation)
    hashed = None
    if spec_node is not None:
        spec = {**body["tpu"]["nodeSpec"][0], "node": dict(spec_node)}
        hashed = {**body, "tpu": {"nodeSpec": [spec]}}
    return with_spec_label(body, hashed)


def slice_launch(args: TpuPodSliceArgs, plan: SlicePlan) -> pulumi.Output[tuple[str, str, str]]:
    """(The startup script every worker runs, the run's record prefix, the script as hashes
    see it: secret `--env` values left out, `keyed_node_args`) of a slice built from `args`
    (`plan`: `validate_args(args)`)."""
    slice_name = name_input(gcp_name, args["deployment_name"], "tpu")
    trainer_args = list(plan.trainer_args)
    secret = tuple(args.get("secret_env_names") or ())

    def script_of(node_id: str, package_uri: str, checkpoint_dir: str, node_args: Any) -> str:
        return render_tpu_worker_script(
            slice_name=node_id,
            package_uri=package_uri,
            trainer_module=plan.trainer_module,
            trainer_args=trainer_args,
            checkpoint_dir=checkpoint_dir,
            expected_hosts=plan.slice.hosts,
            runtime_version=args["runtime_version"],
            node_args=node_args,
            max_run_seconds=plan.max_run_seconds,
            secret_env_names=secret if node_args is not None else (),
        )

    def render(values: list[Any]) -> tuple[str, str, str]:
        node_id, package_uri, checkpoint_dir, node_args = values
        script = script_of(node_id, package_uri, checkpoint_dir, node_args)
        keyed = script
        if secret and node_args is not None:
            keyed = script_of(
                node_id, package_uri, checkpoint_dir, keyed_node_args(node_args, secret)
            )
        record = slice_run_record(
            slice_name=node_id,
            package_uri=package_uri,
            trainer_module=plan.trainer_module,
            trainer_args=trainer_args,
            checkpoint_dir=checkpoint_dir,
            node_args=node_args,
            secret_env_names=secret if node_args is not None else (),
        )
        return script, record, keyed

    launch = (slice_name, args["package_uri"], args["checkpoint_dir"], args.get("node_args"))
    return pulumi.Output.all(*launch).apply(render)


def _node_inputs(
    args: TpuPodSliceArgs, startup_script: pulumi.Input[str], labels: pulumi.Input[Any]
) -> pulumi.Output[dict[str, Any]]:
    return pulumi.Output.from_input(
        {
            "project": args["project"],
            "node_id": name_input(gcp_name, args["deployment_name"], "tpu"),
            "network": args["network_self_link"],
            "subnetwork": args["subnetwork_self_link"],
            "service_account_email": args["service_account_email"],
            "startup_script": startup_script,
            "labels": labels,
            "network_tags": list(args.get("network_tags", ())),
            "data_disks": [d["source_disk"] for d in args.get("data_disks", ())],
        }
    )


def _node(plan: SlicePlan, runtime_version: str, v: Mapping[str, Any]) -> dict[str, Any]:
    return node_body(
        plan=plan,
        runtime_version=runtime_version,
        description=f"trainstack TPU slice {plan.slice.accelerator_type}",
        network=v["network"],
        subnetwork=v["subnetwork"],
        service_account_email=v["service_account_email"],
        startup_script=v["startup_script"],
        labels=v["labels"],
        network_tags=v["network_tags"],
        data_disks=v["data_disks"],
    )


def queued_body(
    args: TpuPodSliceArgs,
    plan: SlicePlan,
    startup_script: pulumi.Input[str],
    labels: pulumi.Input[Any],
    keyed_script: pulumi.Input[str] | None = None,
) -> pulumi.Output[dict[str, Any]]:
    """The exact REST body of the slice's queued resource, checked against tpu.v2; its spec
    label hashes the body with `keyed_script` (`slice_launch`'s third value) in place of the
    script, so no secret `--env` value reaches the label."""
    queued = args.get("queued") or {}

    def build(v: dict[str, Any]) -> dict[str, Any]:
        keyed = v.get("keyed_script")
        body = queued_resource_body(
            project=v["project"],
            zone=args["zone"],
            node_id=v["node_id"],
            node=_node(plan, args["runtime_version"], v),
            tier=plan.queued_tier,
            min_duration_s=queued.get("min_duration_s"),
            valid_until_s=queued.get("valid_until_s"),
            reservation=args.get("reservation"),
            spec_node=(
                _node(plan, args["runtime_version"], {**v, "startup_script": keyed})
                if keyed is not None
                else None
            ),
        )
        errors = validate_body(API, "QueuedResource", body)
        if errors:
            raise ValueError("QueuedResource body is invalid: " + "; ".join(errors))
        return body

    inputs = _node_inputs(args, startup_script, labels)
    if keyed_script is None:
        return inputs.apply(build)
    return pulumi.Output.all(inputs, keyed_script).apply(
        lambda v: build({**v[0], "keyed_script": v[1]})
    )


def spot_node_body(node: dict[str, Any]) -> dict[str, Any]:
    """A Spot `Node` REST body (what `gcp.tpu.V2Vm` with `scheduling_config.spot` creates)
    from `node_body`, checked against the tpu.v2 discovery document."""
    body = {**node, "schedulingConfig": {"spot": True}}
    errors = validate_body(API, "Node", body)
    if errors:
        raise ValueError("Node body is invalid: " + "; ".join(errors))
    return body


@dataclass(frozen=True)
class SupervisedSlice:
    """What the run supervisor of a slice built from given arguments looks after."""

    kind: Literal["node", "queued"]
    resource_name: pulumi.Output[str]
    body: pulumi.Output[dict[str, Any]]
    """The exact REST body: the queued resource, or the Spot node as `gcp.tpu.V2Vm`
    creates it."""
    run_record: pulumi.Output[str]
    """The run's record prefix (`TpuPodSlice.run_record`)."""


def slice_target(args: TpuPodSliceArgs) -> SupervisedSlice:
    """The slice a `TpuPodSlice` built from `args` registers, before it is registered."""
    plan = validate_args(args)
    labels = labels_input(stack_labels(args.get("labels")), COMPONENT_LABEL)
    launch = slice_launch(args, plan)
    script, record = launch.apply(lambda v: v[0]), launch.apply(lambda v: v[1])
    keyed = launch.apply(lambda v: v[2])
    location = pulumi.Output.concat("projects/", args["project"], "/locations/", args["zone"])
    deployment = args["deployment_name"]
    if plan.provisioning == "queued":
        qr_id = name_input(gcp_name, deployment, "tpu-qr")
        name = pulumi.Output.concat(location, "/queuedResources/", qr_id)
        body = queued_body(args, plan, script, labels, keyed)
        return SupervisedSlice("queued", name, body, record)
    runtime = args["runtime_version"]
    body = _node_inputs(args, script, labels).apply(
        lambda v: spot_node_body(_node(plan, runtime, v))
    )
    name = pulumi.Output.concat(location, "/nodes/", name_input(gcp_name, deployment, "tpu"))
    return SupervisedSlice("node", name, body, record)

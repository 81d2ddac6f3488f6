"""The run supervisor (`trainstack.components.run_supervisor`) as a `supervised` target
(`trainstack.infra.targets.base.Target.supervised`) registers it before its compute (the
compute depends on it, so it never runs unsupervised), and what `trainstack status` says of
it.

Every `tpu`, `gke` and `gce` stack gets one: it stops the compute at the run's end (rank 0's
`done`, a failure the target never retries or a stage's last failure, no node reporting for
`NO_HEARTBEAT_S`, `limits.max_run_hours`, `limits.max_total_usd`, a flex-start machine's
run duration: `capacity_ended`); on a Spot or queued slice
it also recreates a preempted slice. Its spend count is at the
list price of the compute it can stop (`Target.stoppable_hourly_usd`). The target modules
build its arguments (`trainstack.infra.targets.tpu`, `.gpu_cluster`); nothing here names a
target.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pulumi

from trainstack.components.catalog.supervisor_iam import earlier_role_id
from trainstack.components.run_supervisor import RunSupervisor, RunSupervisorArgs, supervisor_run
from trainstack.infra.logs import UNREADABLE, ended_text
from trainstack.infra.outputs import OUTPUT_SUPERVISOR_EVENTS, OUTPUT_SUPERVISOR_ROLES
from trainstack.trainers.common.contract import EVENT_CAPACITY_ENDED as CAPACITY_ENDED
from trainstack.trainers.common.run_records import (
    NO_HEARTBEAT_S,
)

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView


def run_settings(
    cfg: StackView, hourly_usd: float, run_record: pulumi.Input[str] | None, node_count: int
) -> dict[str, Any]:
    """The supervisor's `run` (`supervisor_run`): the run's objects (prefix `run_record`: its
    end record, the heartbeats of its `node_count` nodes and stop request), the limits and
    the compute's list price (`hourly_usd`, the target's `stoppable_hourly_usd`). The run's
    clock is the supervisor's own."""
    return supervisor_run(
        run_record,
        node_count,
        hourly_usd=hourly_usd,
        max_run_seconds=cfg.limits.max_run_seconds,
        max_total_usd=cfg.limits.max_total_usd,
    )


def register_supervisor(
    deployment: str, args: dict[str, Any], after_grants: pulumi.ResourceOptions
) -> tuple[RunSupervisor, dict[str, Any]]:
    """Register the stack's supervisor (`RunSupervisorArgs` in `args`), before its compute:
    the supervisor and its stack outputs. The compute then depends on `RunSupervisor.ready`,
    so `pulumi destroy` removes it before the supervisor (which recovers a slice only while
    its marker says Pulumi holds it, `RunSupervisor.arm`)."""
    supervisor = RunSupervisor(
        f"{deployment}-supervisor", cast(RunSupervisorArgs, args), opts=after_grants
    )
    outputs = {
        OUTPUT_SUPERVISOR_EVENTS: supervisor.events_uri,
        OUTPUT_SUPERVISOR_ROLES: supervisor.roles,
    }
    return supervisor, outputs


def after_supervisor(
    after_grants: pulumi.ResourceOptions, supervisor: RunSupervisor
) -> pulumi.ResourceOptions:
    """The compute's options: after its grants and after its supervisor."""
    return after_grants.merge(pulumi.ResourceOptions(depends_on=supervisor.ready))


def stop_command(resource: str, instances: Sequence[str] | None = None) -> str:
    """The gcloud command that stops what the supervisor could not (its resource name; a
    group's VMs by name, `instances`, as the supervisor deletes them: "gcloud compute
    instance-groups managed delete-instances NAME --instances=INSTANCE,[INSTANCE,...]
    [--skip-instances-on-validation-error] [--region=REGION|--zone=ZONE]",
    https://cloud.google.com/sdk/gcloud/reference/compute/instance-groups/managed/
    delete-instances)."""
    parts = resource.split("/")
    if "/instanceGroupManagers/" in resource:
        return (
            f"gcloud compute instance-groups managed delete-instances {parts[-1]} "
            f"--instances={','.join(instances or [])} --skip-instances-on-validation-error "
            f"--zone={parts[3]} --project={parts[1]}"
        )
    if "/clusters/" in resource and "/nodePools/" not in resource:
        # A TPU stack's slices, one pool each (`instances`: the pools' ids). A flex-start
        # pool's autoscaler may add nodes back while its pods wait; its pods are then the
        # JobSet's to delete (`kubectl delete jobset`).
        return " && ".join(
            f"gcloud container clusters resize {parts[5]} --node-pool={pool} "
            f"--num-nodes=0 --zone={parts[3]} --project={parts[1]}"
            for pool in instances or []
        )
    if "/nodePools/" in resource:
        return (
            f"gcloud container clusters resize {parts[5]} --node-pool={parts[7]} "
            f"--num-nodes=0 --zone={parts[3]} --project={parts[1]}"
        )
    if "/queuedResources/" in resource:
        return (
            f"gcloud compute tpus queued-resources delete {parts[-1]} --force "
            f"--zone={parts[3]} --project={parts[1]}"
        )
    return f"gcloud compute tpus tpu-vm delete {parts[-1]} --zone={parts[3]} --project={parts[1]}"


def supervisor_roles(
    project: str | None, stack: str, resource: str, roles: Sequence[str] | None = None
) -> str:
    """The custom role(s) whose grants let the supervisor read `resource` (for `status`):
    `roles`, the stack's `supervisor_roles` output (ids carry its account's unique id), else
    the ids a stack deployed before that output had (`earlier_role_id`)."""
    if roles:
        role, read = roles[0], (roles[1] if len(roles) > 1 else None)
    else:
        role = f"projects/{project}/roles/{earlier_role_id(stack)}"
        read = f"projects/{project}/roles/{earlier_role_id(stack, 'Read')}"
    if "/clusters/" not in resource:
        return f"its role ({role})"
    # A node pool's supervisor reads the pool under a role granted on a condition, and the
    # pool's instance groups under a second role (`supervisor_iam.READ_PERMISSIONS`).
    return f"its roles ({role} and its condition on the cluster; {read} for the instance groups)"


def _unreadable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest events while the supervisor cannot read the compute (seen `UNREADABLE`),
    oldest first; none once a check read it again."""
    trail: list[dict[str, Any]] = []
    for event in reversed(events):
        if event.get("seen") != UNREADABLE:
            break
        trail.insert(0, event)
    return trail


PULUMI_UP = "`pulumi up`"
"""What asks for a stopped run's capacity again on most targets (`end_text`'s `resume`)."""


def end_text(event: dict[str, Any], asked: list[str], resume: str = PULUMI_UP) -> str:
    """Why the run ended, in words, from the supervisor's event of it (`asked`: the limits it
    asked the trainer to stop for; `resume`: what asks for new capacity after a
    `capacity_ended` end, the target's `capacity_resume`)."""
    reason = str(event["reason"])
    if reason == "stopped" and asked:
        # The trainer's end record says only that it stopped; the request names the limit
        # (main.py asks only for max_run_hours and max_total_usd, keys of `limits`).
        return f"stopped at limits.{asked[-1]}"
    if reason == "no_heartbeat":
        return f"no_heartbeat: no node reported for {NO_HEARTBEAT_S // 60} min"
    if reason == CAPACITY_ENDED:
        # `pulumi up` asks for new capacity and the supervisor lets the run go on from its
        # checkpoint (components/supervisor/main.py, `_back`), unless a limit holds: on gce
        # limits.max_run_hours is each VM's run duration too, so it is used up by then.
        return (
            f"{ended_text(event)}; {resume} to continue (raise limits.max_run_hours "
            "first if the run used it up)"
        )
    return ended_text(event)


def supervisor_status(
    events: list[dict[str, Any]],
    state: dict[str, Any],
    limits: tuple[str | None, float | None],
    hourly_usd: float,
    stack: str,
    roles: Sequence[str] | None = None,
    instances: Sequence[str] | None = None,
    resume: str = PULUMI_UP,
) -> dict[str, Any]:
    """What `trainstack status` says of the run's end from the supervisor's events and
    state (components/supervisor/main.py): whether its compute was stopped and when (not
    while a group's instances are still being deleted: `compute_stopping`), or what still
    bills (`hourly_usd`, the target's `stoppable_hourly_usd`) and the command
    that stops it (a group's VMs: `instances`, the stack's `instance_names` output); whether it cannot read the compute now (`unreadable`: since when, the
    error, the roles to check; the compute may still bill then, and the spend it counts
    counts the time it could not see as it last saw it); and the spend against the cap
    (`limits`: the project and `limits.max_total_usd`). `resume`: what asks for new capacity
    after a `capacity_ended` end (`end_text`)."""
    project, max_total_usd = limits
    trail = _unreadable(events)
    # An unreadable check that knew the run had ended counts only while nothing was read
    # since: once a check reads the compute again, it acts and records that.
    start = len(events) - len(trail)
    ended = [
        e
        for i, e in enumerate(events)
        if (e.get("reason") and (e.get("seen") != UNREADABLE or i >= start))
        or e.get("result") == "compute back after a stop"
    ]
    last = ended[-1] if ended else None
    out: dict[str, Any] = {
        "spend_usd": round(float((state.get("run") or {}).get("spend_usd") or 0.0), 2),
        "max_total_usd": max_total_usd,
        "finished": False,
        "stopped_at": None,
        "still_billing_usd_per_hour": None,
        "stop_command": None,
        "unreadable": None,
        "spend_counts_unread_time_as_last_seen": any(e.get("seen") == UNREADABLE for e in events),
    }
    if trail:
        resource = str(trail[-1]["resource"])
        out["unreadable"] = {
            "resource": resource,
            "error": str(trail[-1]["result"]).removeprefix("error: "),
            "since": trail[0]["time"],
            "check": supervisor_roles(project, stack, resource, roles),
        }
    if last is None or last.get("result") == "compute back after a stop":
        return out
    out["finished"] = True
    out["reason"] = end_text(
        last, [e["reason"] for e in ended if e.get("action") == "request_stop"], resume
    )
    if last["action"] in ("stop", "none") and last["result"] in (
        "ok",
        "run ended; compute already stopped",
        "compute stopped",
    ):
        out["stopped_at"] = last["time"]
    elif last["result"] == "stopping":
        # A group or pool being emptied still holds instances (they bill until gone).
        since = [e["time"] for e in ended if (e["action"], e["result"]) == ("stop", "stopping")]
        out["compute_stopping"] = {
            "since": since[-1] if since else last["time"],
            "instances_left": last.get("instances_left"),
        }
    elif last["action"] == "request_stop":
        out["stopping"] = True  # waiting for the trainer's checkpoint
    else:  # the stop failed, or the compute cannot be read after the run's end
        out["still_billing_usd_per_hour"] = hourly_usd
        out["stop_command"] = stop_command(str(last["resource"]), instances)
    return out


def supervisor_lines(status: dict[str, Any]) -> list[str]:
    """`trainstack status`'s lines for `supervisor_status`."""
    lines = []
    unreadable = status.get("unreadable")
    if unreadable:
        lines.append(
            f"the supervisor cannot read {unreadable['resource']}: {unreadable['error']} "
            f"since {unreadable['since']}; it can neither recover nor stop it; check "
            f"{unreadable['check']}"
        )
    if status["stopped_at"]:
        lines.append(f"finished ({status['reason']}); compute stopped at {status['stopped_at']}")
    elif status.get("compute_stopping"):
        stopping = status["compute_stopping"]
        lines.append(
            f"finished ({status['reason']}); stopping the compute since {stopping['since']} "
            f"({stopping['instances_left']} instance(s) still being deleted)"
        )
    elif status.get("stopping"):
        lines.append(
            f"finishing ({status['reason']}): the trainer was asked to save and stop; the "
            "compute stops once it has"
        )
    elif status["still_billing_usd_per_hour"] is not None and unreadable:
        lines.append(
            f"finished ({status['reason']}) but the compute may still be billing "
            f"${status['still_billing_usd_per_hour']:,.2f}/hour: the supervisor cannot read "
            f"it; run: {status['stop_command']}"
        )
    elif status["still_billing_usd_per_hour"] is not None:
        lines.append(
            f"finished ({status['reason']}) but still billing "
            f"${status['still_billing_usd_per_hour']:,.2f}/hour: the supervisor could not "
            f"stop it; run: {status['stop_command']}"
        )
    cap = status["max_total_usd"]
    against = f" of the ${cap:,.2f} cap (limits.max_total_usd)" if cap is not None else ""
    unseen = (
        "; the time it could not read the compute counted as last seen"
        if status.get("spend_counts_unread_time_as_last_seen")
        else ""
    )
    lines.append(f"spend counted by the supervisor: ${status['spend_usd']:,.2f}{against}{unseen}")
    return lines

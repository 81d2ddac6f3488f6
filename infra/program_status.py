"""`trainstack status|logs --program DIR --stack NAME`: a program's compute, from its facts.

The program's components say where their state and logs are (`trainstack.components.facts`,
read back by `trainstack.infra.program_state`); this module reads them with the functions a
trainstack stack's status and logs use (`trainstack.infra.compute_status`, the checkpoint
and step reads of `trainstack.infra.status`, `trainstack.infra.supervision`), so the same
compute answers the same lines: state, step, checkpoint, hosts, the supervisor's actions,
whether the run's end stopped the compute and what still bills, the cost so far.

What a program must let status see: the component's facts (in a `pulumi stack export`, or
exported), and for a GKE cluster its kubeconfig (`pulumi.export("kubeconfig",
cluster.kubeconfig)`, or the export's A100Cluster or TpuGkeSlices outputs), as a stack's
`kubeconfig` output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from trainstack.infra.compute_status import (
    gce_log_filter,
    gce_state,
    gke_job_state,
    gke_log_filter,
    jobset_log_filter,
    jobset_state,
    tpu_log_filter,
    tpu_state,
)
from trainstack.infra.google_reads import gcs_json_lines
from trainstack.infra.logs import CloudLogs, any_of, supervisor_query
from trainstack.infra.program_facts import facts_summary
from trainstack.infra.program_state import ENCRYPTED, ProgramState
from trainstack.infra.stack_outputs import OutputsError
from trainstack.infra.status import gcs_checkpoint, newest_step, status_info
from trainstack.infra.supervision import supervisor_status
from trainstack.infra.targets import StillBilling, registered

READ_TARGETS = frozenset({"tpu", "tpu_gke", "gke", "gce"})
"""The compute `status|logs --program` read (`trainstack.infra.compute_status`)."""
KUBECONFIG_HINT = (
    'export the cluster\'s kubeconfig, pulumi.export("kubeconfig", cluster.kubeconfig) (a '
    "secret: save the outputs with --show-secrets), or pass --state FILE with `pulumi stack "
    "export --show-secrets`"
)


def _named(compute: list[dict[str, Any]]) -> str:
    return ", ".join(f"{f.get('name') or '(no name)'} ({f['component']})" for f in compute)


def the_compute(state: ProgramState, stack: str, component: str | None = None) -> dict[str, Any]:
    """The program's compute component's facts: its one, or the one `component` names (its
    Pulumi name, the facts' `name`); one error line otherwise."""
    compute = state.compute
    if component is not None:
        picked = [f for f in compute if f.get("name") == component]
        if not picked:
            raise OutputsError(
                f"--component: stack {stack!r} has no compute component named {component!r}; "
                f"valid: {_named(compute) or '(none)'}"
            )
        compute = picked
    if compute and compute[0]["target"] == "vertex":
        raise OutputsError(
            f"stack {stack!r}: its compute is a Vertex AI job, whose name its facts cannot "
            "know before it is created; valid: trainstack status --job <its job_name output>"
        )
    if compute and compute[0]["target"] not in READ_TARGETS:
        raise OutputsError(
            f"stack {stack!r}: its compute is a {compute[0]['component']}, which status and "
            "logs --program do not read; valid: a program with a TpuPodSlice, TpuGkeSlices or "
            "A100Cluster"
        )
    if len(compute) > 1:
        raise OutputsError(
            f"stack {stack!r} has {len(compute)} compute components ({_named(compute)}); "
            "status and logs read one; valid: --component NAME, one of them"
        )
    return compute[0]


def _section(target: str) -> str:
    """The stack section of a target (`gke`, `gce` -> `gpu_cluster`), as a stack's status
    names it."""
    return next((t.section for t in registered() if t.name == target), target)


def _kubeconfig(state: ProgramState, stack: str) -> Callable[[], str]:
    def read() -> str:
        if state.kubeconfig is ENCRYPTED:
            raise OutputsError(
                f"stack {stack!r}: the cluster's kubeconfig in {state.source} is encrypted; "
                "valid: `pulumi stack export --show-secrets`"
            )
        if not state.kubeconfig:
            raise OutputsError(
                f"stack {stack!r}: status of a GKE Job reads it from the cluster, and "
                f"{state.source} has no kubeconfig; {KUBECONFIG_HINT}"
            )
        return str(state.kubeconfig)

    return read


def compute_state(
    state: ProgramState, facts: Mapping[str, Any], stack: str, endpoints: Mapping[str, str]
) -> dict[str, Any]:
    """`state`, `hosts`, `started`, `ended` of the compute, as its stack target reads them."""
    where = facts["status"]
    if facts["target"] == "tpu":
        return tpu_state(
            where["project"], where["zone"], where["node"], where["queued_resource"], endpoints
        )
    if facts["target"] == "gke":
        return gke_job_state(_kubeconfig(state, stack), where["job"], endpoints, where["namespace"])
    if facts["target"] == "tpu_gke":
        kubeconfig = _kubeconfig(state, stack)
        return jobset_state(kubeconfig, where["jobset"], endpoints, where["namespace"])
    return gce_state(where["project"], where["zone"], where["instances"], endpoints)


def trainer_filter(facts: Mapping[str, Any], worker: int | None, stack: str) -> str:
    """The Logging query of the compute's trainer entries (one machine's with `worker`)."""
    logs, where = facts["logs"], facts["status"]
    if facts["target"] == "tpu":
        return tpu_log_filter(logs["scope"], logs["workers"], worker, stack)
    if facts["target"] == "gke":
        return gke_log_filter(logs["scope"], where["job"], logs["workers"], worker, stack)
    if facts["target"] == "tpu_gke":
        vms = logs["vms_per_slice"]
        slices = logs["workers"] // vms
        return jobset_log_filter(logs["scope"], where["jobset"], vms, slices, worker, stack)
    return gce_log_filter(logs["scope"], logs["instances"], worker, stack)


def supervisors_of(state: ProgramState, facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The supervisors that stop this compute (their facts' `stops` is its target); all of
    them where their facts do not say (older facts)."""
    stops = [f for f in state.supervisors if f.get("stops") == facts["target"]]
    if any("stops" in f for f in state.supervisors):
        return stops
    return state.supervisors


def program_log_source(
    state: ProgramState, stack: str, worker: int | None, component: str | None = None
) -> CloudLogs:
    """Where the program's trainer logs are; without `worker`, its supervisors' joined."""
    facts = the_compute(state, stack, component)
    query = trainer_filter(facts, worker, stack)
    supervisors = supervisors_of(state, facts)
    if worker is None and supervisors:
        functions = [supervisor_query(f["logs"]["function_name"]) for f in supervisors]
        query = any_of(query, *functions)
    return CloudLogs(facts["status"]["project"], query)


def _supervised(
    state: ProgramState, facts: Mapping[str, Any], stack: str, endpoints: Mapping[str, str]
) -> dict[str, Any]:
    """The supervisor's part of the status (`trainstack.infra.status.stack_status`'s)."""
    [supervisor] = supervisors_of(state, facts)[:1]
    where = supervisor["status"]
    events_uri = str(where["events_uri"])
    actions = gcs_json_lines(events_uri, endpoints)
    run_state = gcs_json_lines(events_uri.rsplit("/", 1)[0] + "/state.json", endpoints)
    part: dict[str, Any] = {"recoveries": actions}
    part["supervisor"] = supervisor_status(
        actions,
        (run_state or [{}])[0],
        (where.get("project"), where.get("max_total_usd")),
        facts["stoppable_hourly_usd"],
        stack,
        state.roles,
        where.get("instances"),
    )
    if part["supervisor"]["stopped_at"]:
        after = [StillBilling(**item) for item in facts.get("after_stop", [])]
        part["still_billing_after_stop"] = [asdict(item) for item in after]
    return part


def program_status(
    state: ProgramState,
    stack: str,
    endpoints: dict[str, str],
    now: datetime | None = None,
    component: str | None = None,
) -> dict[str, Any]:
    """The status of a deployed program's compute (the one `component` names) as plain data
    (the `--json` document)."""
    now = now or datetime.now(UTC)
    facts = the_compute(state, stack, component)
    where = facts["status"]
    part = compute_state(state, facts, stack, endpoints)
    part["step"] = newest_step(where["project"], trainer_filter(facts, None, stack), endpoints)
    ckpt_dir = where.get("checkpoint_dir")
    part["checkpoint_dir"] = ckpt_dir
    part["checkpoint"] = (
        gcs_checkpoint(str(ckpt_dir), endpoints, strict=not where.get("own_code"))
        if ckpt_dir
        else None
    )
    if supervisors_of(state, facts):
        part |= _supervised(state, facts, stack, endpoints)
    hourly = float(facts_summary(state.facts)["hourly_usd"])
    return status_info(stack, _section(facts["target"]), part, hourly, now)

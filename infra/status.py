"""`trainstack status --stack NAME`: where a deployed stack's training stands, on every target.

Each target's module reads its own part (`CloudTarget.status`, `StandaloneTarget.status_alone`
in `trainstack.infra.targets`); this module adds the step, checkpoint, recoveries and cost.

- state: the Vertex job state; the TPU node state (or its queued resource's while no node
  exists); the GKE Job's (`SUCCEEDED`, `FAILED`, `RUNNING` with active pods, else
  `PENDING`); the GCE instances' status when they agree, else `MIXED`; local: `SUCCEEDED`
  once the log has the done record, `RUNNING` while a worker process lives, else `STOPPED`.
- step: the newest `train` or `done` record (Cloud Logging, with `trainstack logs`' filter;
  the log file on `local`).
- checkpoint: the newest step directory with its `COMPLETE` marker under the checkpoint
  folder (GCS JSON API `objects.list`; the local folder); for the bundled trainers the newest
  complete one: its marker read (`objects.get`, media) and the file sizes it records matched
  against the listing (`trainstack.trainers.common.checkpoint.payload_problem`), so an empty
  marker or a truncated file is passed over.
- hosts: TPU workers (network endpoints), GKE pods (Kubernetes API with the `kubeconfig`
  output), GCE instances (Compute `instances.get`), local worker processes; Vertex AI manages
  its machines itself.
- recoveries (a stack with a `supervisor_events_uri` output: every `supervised` target's):
  the supervisor's actions, the JSON lines of that object (GCS JSON API `objects.get`,
  media), newest last; with its `state.json`, whether the run finished and its compute was
  stopped (or what still bills, at the target's `stoppable_hourly_usd`, and the command that
  stops it) and the spend it counted against `limits.max_total_usd`
  (`trainstack.infra.supervision.supervisor_status`); once it stopped the compute, what still
  bills after that stop and what ends it (`Target.still_billing_after_stop`: GKE's cluster
  fee and system node, a reservation the compute consumed).
- cost so far: the plan's list-price $/hour (`trainstack.infra.estimate.summarize`: every machine,
  spot price when spot) times the hours since the start (Vertex job start, node or instance
  creation, GKE Job start) until its end or now.

Every Google call takes an endpoint override (`--endpoint API=URL`; an `http://` one is
called without credentials), so tests run against local fakes.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.components._google_api import ApiError, NotFoundError, build_client, execute
from trainstack.infra.estimate import summarize
from trainstack.infra.google_reads import POLICY, gcs_json_lines, get_or_none
from trainstack.infra.local_paths import run_name
from trainstack.infra.log_source import cloud_filter
from trainstack.infra.logs import (
    Endpoints,
    LogsError,
    format_time,
    list_entries,
    logging_client,
    parse_time,
    supervisor_event_text,
)
from trainstack.infra.stack_outputs import read_outputs, require
from trainstack.infra.supervision import PULUMI_UP, supervisor_lines, supervisor_status
from trainstack.infra.targets import (
    CloudTarget,
    StandaloneTarget,
    StillBilling,
    by_section,
    target_of,
)
from trainstack.trainers.common.checkpoint import (
    MARKED_STEP_RE,
    MARKER,
    UnreadableMarker,
    payload_problem,
    read_marker,
)
from trainstack.trainers.common.contract import EVENT_DONE, EVENT_TRAIN, FIELD_EVENT, FIELD_STEP

if TYPE_CHECKING:
    from trainstack.infra.config import StackConfig

FAILED_STATES = frozenset(
    {"JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED", "FAILED"}
)
"""States `status` exits 1 for."""
UP_STATES = frozenset({"READY", "RUNNING", "Running"})
"""Host states counted as up: TPU node READY, GCE instance RUNNING, pod phase Running."""


# ------------------------------------------------------------------------------ progress


def newest_step(project: str, trainers: str, ep: Endpoints) -> int | None:
    """The step of the newest `train` or `done` record among the `trainers` query's entries."""
    query = trainers
    query += f' AND (jsonPayload.{FIELD_EVENT}="{EVENT_TRAIN}" OR jsonPayload.{FIELD_EVENT}="{EVENT_DONE}")'
    for entry in list_entries(logging_client(ep), project, query, order="timestamp desc", limit=1):
        step = entry.get("jsonPayload", {}).get(FIELD_STEP)
        return int(step) if isinstance(step, int | float) else None
    return None


def gcs_checkpoint(url: str, ep: Endpoints, *, strict: bool) -> tuple[int, str] | None:
    """The newest `step-<N>` folder under `url` with its `COMPLETE` marker, as (N, name);
    `strict` (the bundled trainers'): the newest complete one, its marker read and the
    sizes it records compared with the listing's
    (`trainstack.trainers.common.checkpoint.payload_problem`)."""
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/")
    objects = build_client("storage.v1", api_endpoint=ep.get("storage")).objects()
    markers: dict[tuple[int, str], str] = {}
    sizes: dict[str, dict[str, int]] = {}
    crcs: dict[str, dict[str, str]] = {}
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {
            "bucket": bucket,
            "prefix": f"{prefix}/step-" if prefix else "step-",
        }
        if token:
            kwargs["pageToken"] = token
        page = get_or_none(objects.list(**kwargs)) or {}
        for item in page.get("items", []):
            inside = str(item["name"]).removeprefix(f"{prefix}/" if prefix else "")
            name, _, leaf = inside.partition("/")
            match = MARKED_STEP_RE.fullmatch(name)
            if not match or not leaf:
                continue
            sizes.setdefault(name, {})[leaf] = int(item.get("size", 0))
            if item.get("crc32c"):
                crcs.setdefault(name, {})[leaf] = str(item["crc32c"])
            if leaf == MARKER:
                markers[(int(match[1]), name)] = str(item["name"])
        token = page.get("nextPageToken")
        if not token:
            break
    for step, name in sorted(markers, reverse=True):
        found = (sizes[name], crcs.get(name, {}))
        if not strict or _complete(objects, bucket, markers[(step, name)], step, found):
            return step, name
    return None


def _complete(
    objects: Any, bucket: str, marker: str, step: int, found: tuple[dict[str, int], dict[str, str]]
) -> bool:
    """Whether the marker object `marker` reads as `step`'s record its folder's listing
    (`found`: sizes and CRC32Cs) matches."""
    sizes, crcs = found
    if not sizes.get(MARKER):
        return False  # empty: its write was cut short
    try:
        text = execute(objects.get_media(bucket=bucket, object=marker), POLICY)
    except NotFoundError:
        return False  # deleted since the listing
    except ApiError as exc:
        raise LogsError(f"cannot read gs://{bucket}/{marker}: {exc.message}") from None
    try:
        record = read_marker(text if isinstance(text, bytes) else str(text).encode(), step)
    except UnreadableMarker:
        return False
    return payload_problem(record, sizes, crcs) is None


RECOVERIES_SHOWN = 5
"""How many of the supervisor's newest actions the text output lists."""


def stack_status(
    cfg: StackConfig,
    stack: str,
    outputs_file: Path | None,
    endpoints: Endpoints,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The status of a deployed stack as plain data (the `--json` document)."""
    now = now or datetime.now(UTC)
    hourly = float(summarize(cfg)["hourly_usd"])
    target = target_of(cfg)
    if isinstance(target, StandaloneTarget):
        outputs = read_outputs(stack, outputs_file) if outputs_file else None
        part = target.status_alone(cfg, stack, outputs)
    else:
        assert isinstance(target, CloudTarget)
        outputs = read_outputs(stack, outputs_file)
        part = target.status(cfg, stack, outputs, endpoints)
        ckpt_dir = str(
            outputs.get("checkpoint_dir")
            or cfg.trainer.checkpoint_dir
            or f"{require(outputs, stack, 'checkpoint_url')}/checkpoints/{run_name(cfg, stack)}"
        )
        assert cfg.project is not None
        part["step"] = newest_step(cfg.project, cloud_filter(cfg, stack, outputs, None), endpoints)
        # The bundled trainers' folders count once complete; your code's marker is its own.
        strict = cfg.trainer.user_code is None
        part["checkpoint"] = gcs_checkpoint(ckpt_dir, endpoints, strict=strict)
        part["checkpoint_dir"] = ckpt_dir
        actions = target.recoveries(cfg, outputs, endpoints)
        if actions is not None:
            part["recoveries"] = actions
        if outputs.get("supervisor_events_uri"):
            # state.json beside the events: one JSON line, read as the events are.
            uri = str(outputs["supervisor_events_uri"]).rsplit("/", 1)[0] + "/state.json"
            state = gcs_json_lines(uri, endpoints)
            part["supervisor"] = supervisor_status(
                actions or [],
                (state or [{}])[0],
                (cfg.project, cfg.limits.max_total_usd),
                target.stoppable_hourly_usd(cfg),
                stack,
                outputs.get("supervisor_roles"),
                _stoppable_instances(outputs.get("instance_names"), part["hosts"]),
                part.get("capacity_resume", PULUMI_UP),
            )
            if part["supervisor"]["stopped_at"]:
                after = target.still_billing_after_stop(cfg, stack)
                part["still_billing_after_stop"] = [asdict(item) for item in after]
    return status_info(stack, cfg.target, part, hourly, now)


def _stoppable_instances(names: Any, hosts: list[dict[str, Any]]) -> Any:
    """The group's VMs a stop command names: the stack's `instance_names` output, or, where
    it names none (a flex-start group, whose resize request names its VMs), the VMs the
    group lists now (`hosts`)."""
    if names == []:
        return [str(h["name"]) for h in hosts]
    return names


def status_info(
    stack: str, target: str, part: dict[str, Any], hourly: float, now: datetime
) -> dict[str, Any]:
    """The `--json` document of a stack's (or a program's) compute from what its target read
    (`part`: state, hosts, start and end, step, checkpoint, the supervisor's part), its
    $/hour and the time now."""
    hours = None
    if part["started"]:
        end = parse_time(part["ended"]) if part["ended"] else now
        hours = max(0.0, (end - parse_time(part["started"])).total_seconds() / 3600)
    hosts = part["hosts"]
    newest = part["checkpoint"]
    supervised = ("recoveries", "supervisor", "still_billing_after_stop")
    recoveries: dict[str, Any] = {k: part[k] for k in supervised if k in part}
    return {
        "stack": stack,
        "target": target,
        "state": part["state"],
        "step": part["step"],
        "checkpoint_step": None if newest is None else newest[0],
        "checkpoint_dir": part["checkpoint_dir"],
        # The folder's own name: the bundled trainers pad the step, your code may not.
        "checkpoint_path": None if newest is None else f"{part['checkpoint_dir']}/{newest[1]}",
        "hosts_up": sum(1 for h in hosts if h["state"] in UP_STATES or h["state"] == "running"),
        "hosts": hosts,
        "started": part["started"],
        "ended": part["ended"],
        "hourly_usd": hourly,
        "hours": None if hours is None else round(hours, 4),
        "cost_usd": None if hours is None else round(hourly * hours, 2),
        "as_of": format_time(now),
        **recoveries,
    }


def render_status(info: dict[str, Any]) -> list[str]:
    """The text `trainstack status --stack NAME` prints."""
    checkpoint = (
        "none yet"
        if info["checkpoint_step"] is None
        else f"step {info['checkpoint_step']} ({info['checkpoint_path']})"
    )
    lines = [
        f"stack: {info['stack']} ({info['target']})",
        f"state: {info['state']}",
        f"step: {'-' if info['step'] is None else info['step']}",
        f"checkpoint: {checkpoint}",
    ]
    managed = next((t.managed_hosts for t in by_section(info["target"]) if t.managed_hosts), None)
    if managed is not None:
        lines.append(f"hosts: {managed}")
    else:
        lines.append(f"hosts: {info['hosts_up']}/{len(info['hosts'])} up")
        lines += [f"  {h['name']}: {h['state']} {h['address'] or '-'}" for h in info["hosts"]]
    if "recoveries" in info:
        events = info["recoveries"]
        lines.append(
            f"supervisor: {len(events)} action(s) recorded (recoveries, stops, what it saw)"
        )
        # The wording `trainstack logs` shows them with.
        lines += [f"  {e['time']} {supervisor_event_text(e)}" for e in events[-RECOVERIES_SHOWN:]]
    lines += supervisor_lines(info["supervisor"]) if "supervisor" in info else []
    lines += [StillBilling(**item).line() for item in info.get("still_billing_after_stop", [])]
    if "resume" in info:
        lines.append(
            "stopped before its last step (its checkpoints are kept); run the same command to "
            f"resume: {info['resume']}"
        )
    if info["target"] == "local":
        # A local run's processes have no start time in the outputs and cost nothing billed.
        lines.append("cost so far: $0.00 (a local run: this machine, no Google Cloud resources)")
    elif "supervisor" in info:
        # The supervisor's count (above) is the run's, across recoveries and restarts; this
        # compute's own age restarts with every recreated slice.
        if info["cost_usd"] is None:
            lines.append(
                f"this compute: not running now (${info['hourly_usd']:.2f}/hour at list price "
                "when it is); the run's spend is the supervisor's count above"
            )
        else:
            lines.append(
                f"this compute: ${info['cost_usd']:.2f} at list price "
                f"(${info['hourly_usd']:.2f}/hour x {info['hours']:.2f} h since "
                f"{info['started']}); the run's spend is the supervisor's count above"
            )
    elif info["cost_usd"] is None:
        lines.append(f"cost so far: - (not started; ${info['hourly_usd']:.2f}/hour at list price)")
    else:
        lines.append(
            f"cost so far: ${info['cost_usd']:.2f} at list price (${info['hourly_usd']:.2f}/hour "
            f"x {info['hours']:.2f} h since {info['started']})"
        )
    return lines

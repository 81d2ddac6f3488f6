"""`trainstack status --stack NAME`: where a deployed stack's training stands, on every target.

- state: the Vertex job state; the TPU node state (or its queued resource's while no node
  exists); the GKE Job's (`SUCCEEDED`, `FAILED`, `RUNNING` with active pods, else
  `PENDING`); the GCE instances' status when they agree, else `MIXED`; local: `SUCCEEDED`
  once the log has the done record, `RUNNING` while a worker process lives, else `STOPPED`.
- step: the newest `train` or `done` record (Cloud Logging, with `trainstack logs`' filter;
  the log file on `local`).
- checkpoint: the newest step directory with its `COMPLETE` marker under the checkpoint
  folder (GCS JSON API `objects.list`; the local folder).
- hosts: TPU workers (network endpoints), GKE pods (Kubernetes API with the `kubeconfig`
  output), GCE instances (Compute `instances.get`), local worker processes; Vertex AI manages
  its machines itself.
- recoveries (tpu and gpu_cluster stacks): the supervisor's actions, the JSON lines of its
  `supervisor_events_uri` output (GCS JSON API `objects.get`, media), newest last; with its
  `state.json`, whether the run finished and its compute was stopped (or what still bills
  and the command that stops it) and the spend it counted against `limits.max_total_usd`
  (`trainstack.infra.supervision.supervisor_status`).
- cost so far: the plan's list-price $/hour (`trainstack.infra.estimate.summarize`: every machine,
  spot price when spot) times the hours since the start (Vertex job start, node or instance
  creation, GKE Job start) until its end or now.

Every Google call takes an endpoint override (`--endpoint API=URL`; an `http://` one is
called without credentials), so tests run against local fakes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from trainstack.components._google_api import (
    ApiError,
    NotFoundError,
    RetryPolicy,
    build_client,
    execute,
)
from trainstack.components._naming import gcp_name
from trainstack.infra.config import StackConfig
from trainstack.infra.estimate import summarize
from trainstack.infra.local_paths import local_checkpoint_dir, local_log_path, run_name
from trainstack.infra.logs import (
    Endpoints,
    FileLogs,
    LogsError,
    cloud_filter,
    file_lines,
    format_time,
    line_record,
    list_entries,
    logging_client,
    parse_time,
)
from trainstack.infra.stack_outputs import read_outputs, require
from trainstack.infra.supervision import supervisor_lines, supervisor_status
from trainstack.trainers.common.checkpoint import MARKED_STEP_RE, MARKER, newest_marked
from trainstack.trainers.common.contract import (
    EVENT_DONE,
    EVENT_EXIT,
    EVENT_FAILED,
    EVENT_LAUNCH,
    EVENT_RESUME,
    EVENT_START,
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_STEP,
)
from trainstack.trainers.common.exit_codes import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from trainstack.trainers.local_report import running_pid_file

FAILED_STATES = frozenset(
    {"JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED", "FAILED"}
)
"""States `status` exits 1 for."""
_POLICY = RetryPolicy(max_attempts=3)
_VERTEX_JOB = re.compile(
    r"projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/"
    r"(?:customJobs|hyperparameterTuningJobs)/[^/]+"
)
_VERTEX_FORMS = (
    "projects/PROJECT/locations/REGION/customJobs/ID or "
    "projects/PROJECT/locations/REGION/hyperparameterTuningJobs/ID"
)
K8S_NAMESPACE = "default"
K8S_TIMEOUT_S = 30


def _get(request: Any) -> dict[str, Any] | None:
    """The resource, or None when the API answers 404."""
    try:
        answer: dict[str, Any] = execute(request, _POLICY)
    except NotFoundError:
        return None
    except ApiError as exc:
        raise LogsError(f"cannot read {request.uri.split('?')[0]}: {exc.message}") from None
    return answer


# ------------------------------------------------------------------------------ per target


def _vertex(cfg: StackConfig, stack: str, outputs: dict[str, Any], ep: Endpoints) -> dict[str, Any]:
    from trainstack.components._vertex_provider import job_status

    assert cfg.project is not None
    job = str(require(outputs, stack, "job_name"))
    match = _VERTEX_JOB.fullmatch(job)
    if match is None:
        raise LogsError(
            f"stack {stack!r} output job_name: {job!r} is not a Vertex AI job resource name; "
            f"valid: {_VERTEX_FORMS}"
        )
    try:
        info = job_status(match["project"], match["region"], job, api_endpoint=ep.get("aiplatform"))
    except ApiError as exc:
        raise LogsError(f"cannot read {job}: {exc.message}") from None
    return {
        "state": info["state"],
        "hosts": [],
        "started": info.get("start_time"),
        "ended": info.get("end_time"),
    }


def _tpu(cfg: StackConfig, stack: str, outputs: dict[str, Any], ep: Endpoints) -> dict[str, Any]:
    assert cfg.tpu is not None and cfg.project is not None
    parent = f"projects/{cfg.project}/locations/{cfg.tpu.zone}"
    locations = build_client("tpu.v2", api_endpoint=ep.get("tpu")).projects().locations()
    node = _get(
        locations.nodes().get(name=f"{parent}/nodes/{require(outputs, stack, 'slice_name')}")
    )
    if node is None:
        state = "NOT_FOUND"
        if cfg.tpu.provisioning == "queued":
            qr_name = f"{parent}/queuedResources/{gcp_name(stack, 'tpu-qr')}"
            queued = _get(locations.queuedResources().get(name=qr_name))
            if queued is not None:
                state = f"QUEUED {queued.get('state', {}).get('state', 'UNKNOWN')}"
        return {"state": state, "hosts": [], "started": None, "ended": None}
    state = str(node.get("state", "UNKNOWN"))
    hosts = [
        {"name": f"worker {i}", "state": state, "address": point.get("ipAddress")}
        for i, point in enumerate(node.get("networkEndpoints", []))
    ]
    return {"state": state, "hosts": hosts, "started": node.get("createTime"), "ended": None}


def _gce(cfg: StackConfig, stack: str, outputs: dict[str, Any], ep: Endpoints) -> dict[str, Any]:
    assert cfg.gpu_cluster is not None and cfg.project is not None
    instances = build_client("compute.v1", api_endpoint=ep.get("compute")).instances()
    hosts, starts = [], []
    for name in require(outputs, stack, "instance_names"):
        found = _get(instances.get(project=cfg.project, zone=cfg.gpu_cluster.zone, instance=name))
        if found is None:
            hosts.append({"name": name, "state": "NOT_FOUND", "address": None})
            continue
        interfaces = found.get("networkInterfaces") or [{}]
        hosts.append(
            {"name": name, "state": found.get("status"), "address": interfaces[0].get("networkIP")}
        )
        start = found.get("lastStartTimestamp") or found.get("creationTimestamp")
        if start:
            starts.append(start)
    states = {h["state"] for h in hosts}
    state = states.pop() if len(states) == 1 else "MIXED"
    started = min(starts, key=parse_time) if starts else None
    return {"state": state, "hosts": hosts, "started": started, "ended": None}


def _kube_get(outputs: dict[str, Any], stack: str, ep: Endpoints, path: str) -> dict[str, Any]:
    """GET `path` from the cluster's API server (the kubeconfig output's), authenticated
    with an access token from Application Default Credentials as gke-gcloud-auth-plugin
    would; an `http://` endpoint override is called without one."""
    import requests

    server, verify = ep.get("kubernetes"), None
    headers: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if server is None or not server.startswith("http://"):
            config = yaml.safe_load(str(require(outputs, stack, "kubeconfig")))
            cluster = config["clusters"][0]["cluster"]
            server = server or str(cluster["server"])
            ca = Path(scratch) / "ca.pem"
            ca.write_bytes(base64.b64decode(cluster.get("certificate-authority-data", "")))
            verify = str(ca)
            import google.auth
            import google.auth.transport.requests

            credentials, _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
            credentials.refresh(google.auth.transport.requests.Request())
            headers["Authorization"] = f"Bearer {credentials.token}"
        url = server.rstrip("/") + path
        try:
            answer = requests.get(
                url, headers=headers, verify=verify or True, timeout=K8S_TIMEOUT_S
            )
        except requests.RequestException as exc:
            raise LogsError(f"cannot reach the cluster's API server {server}: {exc}") from None
    if answer.status_code != 200:
        message = answer.text[:200]
        with contextlib.suppress(ValueError):
            message = str(answer.json().get("message", message))
        raise LogsError(
            f"cannot read {path} from the cluster: HTTP {answer.status_code}: {message}"
        )
    body: dict[str, Any] = answer.json()
    return body


def _gke(cfg: StackConfig, stack: str, outputs: dict[str, Any], ep: Endpoints) -> dict[str, Any]:
    job = str(require(outputs, stack, "job_name"))
    base = f"/apis/batch/v1/namespaces/{K8S_NAMESPACE}/jobs/{job}"
    status = _kube_get(outputs, stack, ep, base).get("status", {})
    pods = _kube_get(
        outputs,
        stack,
        ep,
        f"/api/v1/namespaces/{K8S_NAMESPACE}/pods?labelSelector=job-name%3D{job}",
    )
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
    if conditions.get("Complete") == "True":
        state = "SUCCEEDED"
    elif conditions.get("Failed") == "True":
        state = "FAILED"
    else:
        state = "RUNNING" if status.get("active") else "PENDING"
    hosts = [
        {
            "name": pod["metadata"]["name"],
            "state": pod.get("status", {}).get("phase"),
            "address": pod.get("status", {}).get("podIP"),
        }
        for pod in sorted(pods.get("items", []), key=lambda p: p["metadata"]["name"])
    ]
    return {
        "state": state,
        "hosts": hosts,
        "started": status.get("startTime"),
        "ended": status.get("completionTime"),
    }


UP_STATES = frozenset({"READY", "RUNNING", "Running"})
"""Host states counted as up: TPU node READY, GCE instance RUNNING, pod phase Running."""


# ------------------------------------------------------------------------------ progress


def _cloud_step(cfg: StackConfig, stack: str, outputs: dict[str, Any], ep: Endpoints) -> int | None:
    assert cfg.project is not None
    query = cloud_filter(cfg, stack, outputs, None)
    query += f' AND (jsonPayload.{FIELD_EVENT}="{EVENT_TRAIN}" OR jsonPayload.{FIELD_EVENT}="{EVENT_DONE}")'
    for entry in list_entries(
        logging_client(ep), cfg.project, query, order="timestamp desc", limit=1
    ):
        step = entry.get("jsonPayload", {}).get(FIELD_STEP)
        return int(step) if isinstance(step, int | float) else None
    return None


def _gcs_checkpoint(url: str, ep: Endpoints) -> tuple[int, str] | None:
    """The newest `step-<N>` folder under `url` with its `COMPLETE` marker, as (N, name)."""
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/")
    objects = build_client("storage.v1", api_endpoint=ep.get("storage")).objects()
    steps: list[tuple[int, str]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {
            "bucket": bucket,
            "prefix": f"{prefix}/step-" if prefix else "step-",
        }
        if token:
            kwargs["pageToken"] = token
        page = _get(objects.list(**kwargs)) or {}
        for item in page.get("items", []):
            directory, _, leaf = str(item["name"]).rpartition("/")
            name = directory.rsplit("/", 1)[-1]
            match = MARKED_STEP_RE.fullmatch(name)
            if leaf == MARKER and match:
                steps.append((int(match[1]), name))
        token = page.get("nextPageToken")
        if not token:
            return max(steps) if steps else None


RECOVERIES_SHOWN = 5
"""How many of the supervisor's newest actions the text output lists."""


def _supervisor_events(uri: str, ep: Endpoints) -> list[dict[str, Any]]:
    """The TPU supervisor's events (components/supervisor/main.py), oldest first."""
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    objects = build_client("storage.v1", api_endpoint=ep.get("storage")).objects()
    try:
        raw = execute(objects.get_media(bucket=bucket, object=name), _POLICY)
    except NotFoundError:
        return []  # no action recorded yet
    except ApiError as exc:
        raise LogsError(f"cannot read {uri}: {exc.message}") from None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _local(cfg: StackConfig, stack: str, outputs: dict[str, Any] | None) -> dict[str, Any]:
    assert cfg.local is not None
    log = local_log_path(cfg, stack, outputs)
    step, done, failed, exit_code = None, False, False, None
    if log.is_file():
        # The log keeps every run of the stack: only the newest attempt's records count.
        for line in file_lines(FileLogs(log, None), follow=False, poll_s=0):
            record = line_record(line)
            if not isinstance(record, dict):
                continue
            event = record.get(FIELD_EVENT)
            if event in (EVENT_START, EVENT_RESUME, EVENT_LAUNCH):
                done, failed, exit_code = False, False, None
            elif event in (EVENT_TRAIN, EVENT_DONE):
                step = record.get(FIELD_STEP, step)
                done = done or event == EVENT_DONE
            elif event == EVENT_FAILED:
                failed = True
            elif event == EVENT_EXIT and isinstance(record.get("exit_code"), int):
                exit_code = record["exit_code"]
    ckpt_dir = local_checkpoint_dir(cfg, stack, outputs)
    pids = [int(p) for p in (outputs or {}).get("local_pids") or [] if str(p).isdigit()]
    hosts = [
        {
            "name": f"worker {i}",
            "state": "running" if _alive(p) else "exited",
            "address": f"pid {p}",
        }
        for i, p in enumerate(pids)
    ]
    pid_file = running_pid_file(log)
    launcher = pid_file.read_text().strip() if pid_file.is_file() else ""
    if launcher.isdigit() and _alive(int(launcher)):
        # `trainstack local-run`: one launcher process supervising the workers.
        hosts.append({"name": "local-run", "state": "running", "address": f"pid {launcher}"})
    running = any(h["state"] == "running" for h in hosts)
    if running:
        state = "RUNNING"
    elif exit_code is not None:
        # `local-run` said how the attempt ended: 143/130 stopped (resumable), others failed.
        stopped = exit_code in (PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE)
        state = "SUCCEEDED" if exit_code == 0 else "STOPPED" if stopped else "FAILED"
    elif failed:
        state = "FAILED"
    else:
        state = "SUCCEEDED" if done else "STOPPED" if log.is_file() else "NOT_STARTED"
    return {
        "state": state,
        "hosts": hosts,
        "started": None,
        "ended": None,
        "step": step,
        "checkpoint": newest_marked(ckpt_dir),
        "checkpoint_dir": ckpt_dir,
    }


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
    if cfg.target == "local":
        outputs = read_outputs(stack, outputs_file) if outputs_file else None
        part = _local(cfg, stack, outputs)
    else:
        outputs = read_outputs(stack, outputs_file)
        if cfg.target == "vertex":
            part = _vertex(cfg, stack, outputs, endpoints)
        elif cfg.target == "tpu":
            part = _tpu(cfg, stack, outputs, endpoints)
        elif cfg.gpu_cluster is not None and cfg.gpu_cluster.backend == "gke":
            part = _gke(cfg, stack, outputs, endpoints)
        else:
            part = _gce(cfg, stack, outputs, endpoints)
        ckpt_dir = str(
            outputs.get("checkpoint_dir")
            or cfg.trainer.checkpoint_dir
            or f"{require(outputs, stack, 'checkpoint_url')}/checkpoints/{run_name(cfg, stack)}"
        )
        part["step"] = _cloud_step(cfg, stack, outputs, endpoints)
        part["checkpoint"] = _gcs_checkpoint(ckpt_dir, endpoints)
        part["checkpoint_dir"] = ckpt_dir
        if outputs.get("supervisor_events_uri"):
            uri = str(outputs["supervisor_events_uri"])
            part["recoveries"] = _supervisor_events(uri, endpoints)
            # state.json beside the events: one JSON line, read the same way.
            state = _supervisor_events(uri.rsplit("/", 1)[0] + "/state.json", endpoints)
            part["supervisor"] = supervisor_status(part["recoveries"], (state or [{}])[0], cfg)
    hours = None
    if part["started"]:
        end = parse_time(part["ended"]) if part["ended"] else now
        hours = max(0.0, (end - parse_time(part["started"])).total_seconds() / 3600)
    hosts = part["hosts"]
    newest = part["checkpoint"]
    recoveries: dict[str, Any] = {k: part[k] for k in ("recoveries", "supervisor") if k in part}
    return {
        "stack": stack,
        "target": cfg.target,
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
    if info["target"] == "vertex":
        lines.append("hosts: managed by Vertex AI")
    else:
        lines.append(f"hosts: {info['hosts_up']}/{len(info['hosts'])} up")
        lines += [f"  {h['name']}: {h['state']} {h['address'] or '-'}" for h in info["hosts"]]
    if "recoveries" in info:
        events = info["recoveries"]
        lines.append(f"recoveries: {len(events)} supervisor action(s) recorded")
        lines += [
            f"  {e['time']} {e['seen']}: {e['action']} ({e['result']})"
            for e in events[-RECOVERIES_SHOWN:]
        ]
    lines += supervisor_lines(info["supervisor"]) if "supervisor" in info else []
    if info["cost_usd"] is None:
        lines.append(f"cost so far: - (not started; ${info['hourly_usd']:.2f}/hour at list price)")
    else:
        lines.append(
            f"cost so far: ${info['cost_usd']:.2f} at list price (${info['hourly_usd']:.2f}/hour "
            f"x {info['hours']:.2f} h since {info['started']})"
        )
    return lines

"""`trainstack status --stack NAME` on every target, over real HTTP against local fakes of
Cloud Logging, Vertex AI, Cloud TPU, Compute Engine, the Kubernetes API and GCS (the
storage emulator). Cost is list price x hours since the start, at a fixed `--now`."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.kube_server import KubeFakeServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.tpu_server import TpuFakeServer
from tests.fakes.vertex_server import VertexFakeServer
from tests.unit.test_logs import (
    GCE_NAMES,
    OUTPUTS,
    VERTEX_JOB,
    entry,
    gce_entry,
    gke_resource,
    local_config,
    tpu_resource,
    train,
    vertex_resource,
)
from trainstack.infra.cli import app

runner = CliRunner()
NOW = "2026-11-23T12:00:00Z"
P = "my-ml-project"


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator() as url:
        yield url


def put(gcs: str, bucket: str, *names: str, data: dict[str, bytes] | None = None) -> None:
    """Create `bucket` (if new) and an object at each name (holding `{}`, or its `data`),
    through the JSON API."""
    request = urllib.request.Request(
        f"{gcs}/storage/v1/b?project={P}",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(request).close()
    except urllib.error.HTTPError as exc:
        assert exc.code == 409  # already there
    for name in [*names, *(data or {})]:
        body = (data or {}).get(name, b"{}")
        # A multipart upload (metadata, then the bytes): the emulator drops the connection
        # on a media upload of no bytes, and an empty object is what a cut-short write is.
        multipart = (
            b"--B\r\nContent-Type: application/json\r\n\r\n"
            + json.dumps({"name": name}).encode()
            + b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n"
            + body
            + b"\r\n--B--\r\n"
        )
        upload = urllib.request.Request(
            f"{gcs}/upload/storage/v1/b/{bucket}/o?uploadType=multipart",
            data=multipart,
            headers={"Content-Type": "multipart/related; boundary=B"},
        )
        urllib.request.urlopen(upload).close()


def checkpoints(gcs: str, stack: str, complete: list[int], partial: list[int]) -> str:
    bucket = f"{P}-{stack}-checkpoints"
    # Each run's folder: the stack's name (the bundled stacks set no run_name).
    markers = {
        f"checkpoints/{stack}/step-{s:08d}/COMPLETE": json.dumps(
            {"step": s, "committed_at": 1.0}
        ).encode()
        for s in complete
    }
    names = [f"checkpoints/{stack}/step-{s:08d}/model.pt" for s in complete + partial]
    put(gcs, bucket, *names, data=markers)
    return f"gs://{bucket}"


def run_status(
    stack: str, tmp_path: Path, outputs: dict[str, Any], *endpoints: str, as_json: bool = False
) -> tuple[int, str, str]:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**OUTPUTS[stack], **outputs}))
    argv = ["status", "--stack", stack, "--outputs", str(path), "--now", NOW]
    for endpoint in endpoints:
        argv += ["--endpoint", endpoint]
    result = runner.invoke(app, argv + (["--json"] if as_json else []))
    return result.exit_code, result.stdout, result.stderr


def test_vertex_status(tmp_path: Path, gcs: str) -> None:
    url = checkpoints(gcs, "prod-vertex-rs", [500, 1000], [1500])
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        vertex = stack.enter_context(VertexFakeServer())
        vertex.jobs[VERTEX_JOB] = {
            "name": VERTEX_JOB,
            "displayName": "prod-vertex-rs",
            "state": "JOB_STATE_RUNNING",
            "createTime": "2026-11-23T09:55:00Z",
            "startTime": "2026-11-23T10:00:00Z",
        }
        logs.add(
            entry(1, vertex_resource("workerpool0-0"), train(1600, 0, 0)),
            entry(2, vertex_resource("workerpool1-0"), train(1620, 1, 8)),
            entry(3, vertex_resource("workerpool1-0"), {"event": "checkpoint", "step": 1700}),
        )
        result = run_status(
            "prod-vertex-rs",
            tmp_path,
            {"checkpoint_url": url},
            f"logging={logs.endpoint}",
            f"aiplatform={vertex.endpoint}",
            f"storage={gcs}/storage/v1/",
        )
    assert result == (
        0,
        "stack: prod-vertex-rs (vertex)\n"
        "state: JOB_STATE_RUNNING\n"
        "step: 1620\n"
        f"checkpoint: step 1000 ({url}/checkpoints/prod-vertex-rs/step-00001000)\n"
        "hosts: managed by Vertex AI\n"
        "cost so far: $287.30 at list price ($143.65/hour x 2.00 h since 2026-11-23T10:00:00Z)\n",
        "",
    )


def test_tpu_status_json(tmp_path: Path, gcs: str) -> None:
    url = checkpoints(gcs, "dev-tpu-v5e", [100], [])
    node = f"projects/{P}/locations/us-west4-a/nodes/dev-tpu-v5e-tpu"
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        tpu = stack.enter_context(TpuFakeServer())
        tpu.nodes[node] = {
            "name": node,
            "state": "READY",
            "createTime": "2026-11-23T11:30:00Z",
            "networkEndpoints": [
                {"ipAddress": f"10.130.0.{2 + i}", "port": 8470} for i in range(4)
            ],
        }
        logs.add(entry(1, tpu_resource(2), train(120, 2, 2)))
        code, out, err = run_status(
            "dev-tpu-v5e",
            tmp_path,
            {"checkpoint_dir": f"{url}/checkpoints/dev-tpu-v5e"},
            f"logging={logs.endpoint}",
            f"tpu={tpu.endpoint}",
            f"storage={gcs}/storage/v1/",
            as_json=True,
        )
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "stack": "dev-tpu-v5e",
        "target": "tpu",
        "state": "READY",
        "step": 120,
        "checkpoint_step": 100,
        "checkpoint_dir": f"{url}/checkpoints/dev-tpu-v5e",
        "checkpoint_path": f"{url}/checkpoints/dev-tpu-v5e/step-00000100",
        "hosts_up": 4,
        "hosts": [
            {"name": f"worker {i}", "state": "READY", "address": f"10.130.0.{2 + i}"}
            for i in range(4)
        ],
        "started": "2026-11-23T11:30:00Z",
        "ended": None,
        "hourly_usd": 7.68,
        "hours": 0.5,
        "cost_usd": 3.84,
        "as_of": "2026-11-23T12:00:00.000000Z",
    }


def test_cloud_status_names_the_newest_complete_checkpoint(tmp_path: Path, gcs: str) -> None:
    """The bundled trainer's marker records its files' sizes and CRC32Cs: an empty marker (a
    write cut short), a file shorter than recorded and one whose listed crc32c is not the
    recorded one are not complete checkpoints; a marker of an older trainstack (no sizes) is."""
    folder = "checkpoints/broken"
    files = {"state.pt": 5}
    marker = json.dumps({"step": 300, "committed_at": 1.0, "files": files}).encode()
    put(
        gcs,
        f"{P}-dev-tpu-v5e-checkpoints",
        data={
            f"{folder}/step-00000100/COMPLETE": b"{}",
            f"{folder}/step-00000200/COMPLETE": json.dumps(
                {"step": 200, "committed_at": 1.0, "files": files}
            ).encode(),
            f"{folder}/step-00000200/state.pt": b"12345",
            # Sizes match, content not: the listing's crc32c is not the one recorded.
            f"{folder}/step-00000250/COMPLETE": json.dumps(
                {
                    "step": 250,
                    "committed_at": 1.0,
                    "files": files,
                    "crc32c": {"state.pt": "AAAAAA=="},
                }
            ).encode(),
            f"{folder}/step-00000250/state.pt": b"12345",
            f"{folder}/step-00000300/COMPLETE": marker,
            f"{folder}/step-00000300/state.pt": b"123",
            f"{folder}/step-00000400/COMPLETE": b"",
            f"{folder}/step-00000400/state.pt": b"12345",
        },
    )
    url = f"gs://{P}-dev-tpu-v5e-checkpoints/{folder}"
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        tpu = stack.enter_context(TpuFakeServer())
        code, out, err = run_status(
            "dev-tpu-v5e",
            tmp_path,
            {"checkpoint_dir": url},
            f"logging={logs.endpoint}",
            f"tpu={tpu.endpoint}",
            f"storage={gcs}/storage/v1/",
            as_json=True,
        )
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert (info["checkpoint_step"], info["checkpoint_path"]) == (200, f"{url}/step-00000200")


def _pod(index: int, phase: str, ip: str) -> dict[str, Any]:
    labels = {
        "job-name": "dev-a100-gke-train",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    name = f"dev-a100-gke-train-{index}-x{index}k2p"
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": phase, "podIP": ip}}


def test_gke_status(tmp_path: Path, gcs: str) -> None:
    url = checkpoints(gcs, "dev-a100-gke", [], [50])
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        kube = stack.enter_context(KubeFakeServer())
        kube.jobs["default/dev-a100-gke-train"] = {
            "metadata": {"name": "dev-a100-gke-train"},
            "status": {"active": 1, "startTime": "2026-11-23T11:00:00Z"},
        }
        other = {"metadata": {"name": "web-1", "labels": {"job-name": "web"}}, "status": {}}
        kube.pods["default"] = [_pod(1, "Pending", ""), _pod(0, "Running", "10.4.0.7"), other]
        logs.add(entry(1, gke_resource("dev-a100-gke-train-0-x0k2p"), train(60, 0, 0)))
        result = run_status(
            "dev-a100-gke",
            tmp_path,
            {"checkpoint_url": url},
            f"logging={logs.endpoint}",
            f"kubernetes={kube.endpoint}",
            f"storage={gcs}/storage/v1/",
        )
    assert result == (
        0,
        "stack: dev-a100-gke (gpu_cluster)\n"
        "state: RUNNING\n"
        "step: 60\n"
        "checkpoint: none yet\n"
        "hosts: 1/2 up\n"
        "  dev-a100-gke-train-0-x0k2p: Running 10.4.0.7\n"
        "  dev-a100-gke-train-1-x1k2p: Pending -\n"
        "cost so far: $23.74 at list price ($23.74/hour x 1.00 h since 2026-11-23T11:00:00Z)\n",
        "",
    )


def test_gke_failed_job_exits_1(tmp_path: Path, gcs: str) -> None:
    url = checkpoints(gcs, "dev-a100-gke", [], [])
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        kube = stack.enter_context(KubeFakeServer())
        kube.jobs["default/dev-a100-gke-train"] = {
            "status": {
                "failed": 2,
                "startTime": "2026-11-23T11:00:00Z",
                "conditions": [{"type": "Failed", "status": "True"}],
            }
        }
        code, out, _ = run_status(
            "dev-a100-gke",
            tmp_path,
            {"checkpoint_url": url},
            f"logging={logs.endpoint}",
            f"kubernetes={kube.endpoint}",
            f"storage={gcs}/storage/v1/",
            as_json=True,
        )
    assert (code, json.loads(out)["state"], json.loads(out)["hosts"]) == (1, "FAILED", [])


def test_gce_status(tmp_path: Path, gcs: str) -> None:
    url = checkpoints(gcs, "prod-a100-gce", [500, 20000], [])
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        compute = stack.enter_context(ComputeFakeServer())
        for i, name in enumerate(GCE_NAMES[:3]):
            compute.instances[f"{P}/us-central1-c/{name}"] = {
                "status": "RUNNING",
                "creationTimestamp": "2026-11-23T01:00:00.000-07:00",
                "lastStartTimestamp": f"2026-11-23T0{3 + i}:00:00.000-07:00",
                "networkInterfaces": [{"networkIP": f"10.0.0.{10 + i}"}],
            }
        logs.add(
            gce_entry(1, GCE_NAMES[0], train(19990, 0, 0)),
            gce_entry(2, GCE_NAMES[0], {"event": "done", "step": 20000, "rank": 0}),
        )
        result = run_status(
            "prod-a100-gce",
            tmp_path,
            {"checkpoint_url": url},
            f"logging={logs.endpoint}",
            f"compute={compute.endpoint}",
            f"storage={gcs}/storage/v1/",
        )
    assert result == (
        0,
        "stack: prod-a100-gce (gpu_cluster)\n"
        "state: MIXED\n"
        "step: 20000\n"
        f"checkpoint: step 20000 ({url}/checkpoints/prod-a100-gce/step-00020000)\n"
        "hosts: 3/4 up\n"
        "  prod-a100-gce-a100-0: RUNNING 10.0.0.10\n"
        "  prod-a100-gce-a100-1: RUNNING 10.0.0.11\n"
        "  prod-a100-gce-a100-2: RUNNING 10.0.0.12\n"
        "  prod-a100-gce-a100-3: NOT_FOUND -\n"
        "cost so far: $235.10 at list price ($117.55/hour x 2.00 h since "
        "2026-11-23T03:00:00.000-07:00)\n",
        "",
    )


def test_local_status_from_the_log_and_checkpoints(tmp_path: Path) -> None:
    config = local_config(tmp_path)
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    lines = [train(20, 0, 0), train(40, 0, 0), {"event": "done", "step": 40, "rank": 0}]
    (root / "logs" / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for step, complete in ((20, True), (40, True), (60, False)):
        directory = root / "checkpoints" / "mine" / f"step-{step:08d}"
        directory.mkdir(parents=True)
        if complete:
            (directory / "COMPLETE").write_text(json.dumps({"step": step, "committed_at": 1.0}))
    result = runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "stack: mine (local)\n"
        "state: SUCCEEDED\n"
        "step: 40\n"
        f"checkpoint: step 40 ({root}/checkpoints/mine/step-00000040)\n"
        "hosts: 0/0 up\n"
        "cost so far: $0.00 (a local run: this machine, no Google Cloud resources)\n",
        "",
    )


def test_local_status_names_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    """Step 60's marker was left empty by a full disk and step 40's state.pt is shorter
    than its marker records: status names step 20, where a resume would start."""
    config = local_config(tmp_path)
    folder = tmp_path / "root" / "checkpoints" / "mine"
    for step, marker in ((20, {"files": {"state.pt": 4}}), (40, {"files": {"state.pt": 9}})):
        (folder / f"step-{step:08d}").mkdir(parents=True)
        (folder / f"step-{step:08d}" / "state.pt").write_bytes(b"1234")
        record = {"step": step, "committed_at": 1.0, **marker}
        (folder / f"step-{step:08d}" / "COMPLETE").write_text(json.dumps(record))
    (folder / "step-00000060").mkdir()
    (folder / "step-00000060" / "COMPLETE").write_bytes(b"")
    args = ["status", "--config-file", str(config), "--now", NOW, "--json"]
    info = json.loads(runner.invoke(app, args).stdout)
    assert (info["checkpoint_step"], info["checkpoint_path"]) == (
        20,
        f"{folder}/step-00000020",
    )


def test_local_status_of_your_code_names_its_own_folder_and_its_failure(tmp_path: Path) -> None:
    # Your code's folders need not pad the step; local-run's exit record says it failed.
    config = local_config(tmp_path)
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    lines = [
        {"event": "launch", "rank": 0, "argv": ["python", "train.py"]},
        train(7, 0, 0),
        {"event": "failed", "rank": 1, "exit_code": 1, "last_lines": ["KeyError: 'x'"]},
        {"event": "exit", "exit_code": 1},
    ]
    (root / "logs" / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for step in (5, 7):
        (root / "checkpoints" / "mine" / f"step-{step}").mkdir(parents=True)
        marker = json.dumps({"step": step, "committed_at": 1.0})
        (root / "checkpoints" / "mine" / f"step-{step}" / "COMPLETE").write_text(marker)
    result = runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW])
    assert (result.exit_code, result.stdout.splitlines()[1:4]) == (
        1,
        ["state: FAILED", "step: 7", f"checkpoint: step 7 ({root}/checkpoints/mine/step-7)"],
    )


def test_local_status_counts_only_the_newest_run_and_sees_a_live_local_run(
    tmp_path: Path,
) -> None:
    """The log keeps every run: a finished run followed by a new (or resumed) one that has
    not finished is not SUCCEEDED, and a live `local-run` (its pid file) is RUNNING."""
    config = local_config(tmp_path)
    logs = tmp_path / "root" / "logs"
    logs.mkdir(parents=True)
    lines = [
        train(40, 0, 0),
        {"event": "done", "step": 40, "rank": 0},
        {"event": "start", "step": 0, "rank": 0},
        train(10, 0, 0),
    ]
    (logs / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    args = ["status", "--config-file", str(config), "--now", NOW, "--json"]
    stopped = json.loads(runner.invoke(app, args).stdout)
    assert (stopped["state"], stopped["step"], stopped["hosts"]) == ("STOPPED", 10, [])
    (logs / "mine.pid").write_text(f"{os.getpid()}\n")
    running = json.loads(runner.invoke(app, args).stdout)
    assert (running["state"], running["hosts"]) == (
        "RUNNING",
        [{"name": "local-run", "state": "running", "address": f"pid {os.getpid()}"}],
    )


def test_status_without_credentials_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    code, out, err = run_status("dev-tpu-v5e", tmp_path, {})
    assert (code, out) == (2, "")
    assert err == (
        "error: status needs Application Default Credentials to read the state of stack "
        f"'dev-tpu-v5e': GOOGLE_APPLICATION_CREDENTIALS is '{tmp_path / 'missing.json'}', which "
        "is not a readable credentials file; valid: a service-account or `gcloud auth "
        "application-default login` JSON file, or unset it\n"
    )


def test_status_without_outputs_or_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TRAINSTACK_OUTPUTS", raising=False)
    result = runner.invoke(app, ["status", "--stack", "dev-tpu-v5e"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: reading the outputs of stack 'dev-tpu-v5e' needs the Pulumi CLI, which is not on "
        "PATH; install it, or pass --outputs FILE (or set TRAINSTACK_OUTPUTS=FILE) with the "
        "output of `pulumi stack output --json --show-secrets --stack dev-tpu-v5e > FILE`\n",
    )


def test_local_status_of_an_interrupted_run_says_to_run_the_same_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (exit 130) or SIGTERM (143) stops local-run with checkpoints kept: status says
    how to resume, with the command, as --stack or --config-file named the stack."""
    config = local_config(tmp_path)
    logs = tmp_path / "root" / "logs"
    logs.mkdir(parents=True)
    lines = [
        {"event": "start", "step": 0, "rank": 0},
        train(5, 0, 0),
        {"event": "exit", "exit_code": 130},
    ]
    (logs / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW])
    assert (result.exit_code, result.stdout.splitlines()[1], result.stdout.splitlines()[-2]) == (
        0,
        "state: STOPPED",
        "stopped before its last step (its checkpoints are kept); run the same command to "
        f"resume: trainstack local-run --config-file {config}",
    )
    as_json = runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW, "--json"])
    assert json.loads(as_json.stdout)["resume"] == f"trainstack local-run --config-file {config}"
    # Named as a stack of the project: the same command names it so.
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    config.rename(tmp_path / "Pulumi.mine.yaml")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["status", "--stack", "mine", "--now", NOW])
    assert result.stdout.splitlines()[-2] == (
        "stopped before its last step (its checkpoints are kept); run the same command to "
        "resume: trainstack local-run --stack mine"
    )

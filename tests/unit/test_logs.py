"""`trainstack logs` over real HTTP against the Cloud Logging fake, one test per target, and
from a real log file for `local`. Entries have the shapes each platform writes: GKE and
Vertex parse the trainer's stdout JSON into `jsonPayload`; GCE and TPU nodes ship trainer
lines as `jsonPayload` to `projects/<p>/logs/trainstack`."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests import REPO_ROOT
from tests.fakes.logging_server import LoggingFakeServer
from trainstack.infra.cli import app

runner = CliRunner()
_IDS = itertools.count(1)
PROJECT = "my-ml-project"
VERTEX_JOB = f"projects/{PROJECT}/locations/us-central1/customJobs/4242"
GCE_NAMES = [f"prod-a100-gce-a100-{i}" for i in range(4)]
OUTPUTS: dict[str, dict[str, Any]] = {
    "prod-vertex-rs": {"target": "vertex", "job_name": VERTEX_JOB},
    "dev-a100-gke": {"target": "gpu_cluster", "cluster_name": "dev-a100-gke-a100",
                     "job_name": "dev-a100-gke-train"},
    "dev-tpu-v5e": {"target": "tpu", "slice_name": "dev-tpu-v5e-tpu", "tpu_hosts": 4},
    "prod-a100-gce": {"target": "gpu_cluster", "cluster_name": "prod-a100-gce-a100",
                      "instance_names": GCE_NAMES},
}  # fmt: skip


def train(step: int, node: int, rank: int, **extra: Any) -> dict[str, Any]:
    return {
        "event": "train",
        "step": step,
        "loss": 2.5 - step / 100,
        "samples_per_s": 812.25,
        "rank": rank,
        "node": node,
        "worker": rank % 8,
        "run": "r",
        "severity": "INFO",
        **extra,
    }


def entry(
    n: int, resource: dict[str, Any], payload: dict[str, Any] | str, **extra: Any
) -> dict[str, Any]:
    """A LogEntry as the API returns it, `n` seconds after 10:00."""
    body = {"jsonPayload": payload} if isinstance(payload, dict) else {"textPayload": payload}
    return {
        "insertId": f"id-{next(_IDS)}",
        "logName": f"projects/{PROJECT}/logs/{extra.pop('log', 'trainstack')}",
        "resource": resource,
        "timestamp": f"2026-11-23T10:00:{n:02d}.123456789Z",
        **body,
        **extra,
    }


def vertex_resource(task: str, job_id: str = "4242") -> dict[str, Any]:
    labels = {"job_id": job_id, "project_id": PROJECT, "task_name": task}
    return {"type": "ml_job", "labels": labels}


def gke_resource(pod: str, cluster: str = "dev-a100-gke-a100") -> dict[str, Any]:
    labels = {
        "cluster_name": cluster,
        "pod_name": pod,
        "container_name": "trainer",
        "namespace_name": "default",
        "location": "us-central1-a",
        "project_id": PROJECT,
    }
    return {"type": "k8s_container", "labels": labels}


def tpu_resource(worker: int, node: str = "dev-tpu-v5e-tpu") -> dict[str, Any]:
    labels = {"node_id": node, "worker_id": str(worker), "zone": "us-west4-a"}
    return {"type": "tpu_worker", "labels": {**labels, "project_id": PROJECT}}


def gce_entry(n: int, name: str, payload: dict[str, Any] | str) -> dict[str, Any]:
    resource = {"type": "gce_instance", "labels": {"instance_id": str(900 + n), "zone": "z"}}
    return entry(n, resource, payload, labels={"compute.googleapis.com/resource_name": name})


@pytest.fixture
def outputs_file(tmp_path: Path) -> Path:
    return tmp_path / "outputs.json"


def run_logs(
    stack: str, server: LoggingFakeServer, outputs_file: Path, *args: str
) -> tuple[int, str, str]:
    outputs_file.write_text(json.dumps(OUTPUTS[stack]))
    argv = ["logs", "--stack", stack, "--outputs", str(outputs_file)]
    result = runner.invoke(app, [*argv, "--endpoint", f"logging={server.endpoint}", *args])
    return result.exit_code, result.stdout, result.stderr


def test_vertex_job_logs(outputs_file: Path) -> None:
    with LoggingFakeServer() as server:
        server.add(
            entry(1, vertex_resource("workerpool0-0"), train(100, 0, 0)),
            entry(2, vertex_resource("workerpool1-0"), train(100, 1, 8)),
            entry(3, vertex_resource("workerpool0-0", job_id="999"), train(7, 0, 0)),
            entry(4, vertex_resource("workerpool0-0"), "Installing trainstack_trainers"),
            entry(0, vertex_resource("workerpool0-0"), {"event": "start", "step": 0}),
        )
        code, out, err = run_logs("prod-vertex-rs", server, outputs_file)
        assert server.requests[-1][2]["filter"] == (
            'resource.type="ml_job" AND resource.labels.job_id="4242"'
        )
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "10:00:00 start step 0",
        "10:00:01 node 0 rank 0 train step 100 loss 1.5000 812.2 samples/s",
        "10:00:02 node 1 rank 8 train step 100 loss 1.5000 812.2 samples/s",
        "Installing trainstack_trainers",
    ]


def test_vertex_worker_is_a_replica(outputs_file: Path) -> None:
    with LoggingFakeServer() as server:
        server.add(
            entry(1, vertex_resource("workerpool0-0"), train(100, 0, 0)),
            entry(2, vertex_resource("workerpool1-1"), train(100, 2, 16)),
        )
        code, out, _ = run_logs("prod-vertex-rs", server, outputs_file, "--worker", "2")
    assert (code, out) == (
        0,
        "10:00:02 node 2 rank 16 train step 100 loss 1.5000 812.2 samples/s\n",
    )


def test_gke_pod_logs_and_one_pod(outputs_file: Path) -> None:
    with LoggingFakeServer() as server:
        server.add(
            entry(1, gke_resource("dev-a100-gke-train-0-x7k2p"), train(40, 0, 0)),
            entry(2, gke_resource("dev-a100-gke-train-1-q9z4m"), train(40, 1, 8)),
            entry(3, gke_resource("other-train-0-aaaaa"), train(40, 0, 0)),
            entry(4, gke_resource("dev-a100-gke-train-0-x7k2p", "c2"), train(41, 0, 0)),
        )
        assert run_logs("dev-a100-gke", server, outputs_file) == (
            0,
            "10:00:01 node 0 rank 0 train step 40 loss 2.1000 812.2 samples/s\n"
            "10:00:02 node 1 rank 8 train step 40 loss 2.1000 812.2 samples/s\n",
            "",
        )
        assert run_logs("dev-a100-gke", server, outputs_file, "--worker", "1") == (
            0,
            "10:00:02 node 1 rank 8 train step 40 loss 2.1000 812.2 samples/s\n",
            "",
        )


def test_tpu_worker_logs(outputs_file: Path) -> None:
    done = {"event": "done", "step": 300, "params_sha256": "ab12", "rank": 0, "node": 0}
    with LoggingFakeServer() as server:
        server.add(
            entry(1, tpu_resource(0), train(20, 0, 0, samples_per_s=None, tokens_per_s=51234.5)),
            entry(2, tpu_resource(3), train(20, 3, 3)),
            entry(3, tpu_resource(0, node="other-tpu"), train(20, 0, 0)),
            entry(5, tpu_resource(0), done),
        )
        assert run_logs("dev-tpu-v5e", server, outputs_file) == (
            0,
            "10:00:01 node 0 rank 0 train step 20 loss 2.3000 51234.5 tokens/s\n"
            "10:00:02 node 3 rank 3 train step 20 loss 2.3000 812.2 samples/s\n"
            "10:00:05 node 0 rank 0 done step 300 params_sha256 ab12\n",
            "",
        )
        code, out, _ = run_logs("dev-tpu-v5e", server, outputs_file, "--worker", "3")
        assert (code, out) == (
            0,
            "10:00:02 node 3 rank 3 train step 20 loss 2.3000 812.2 samples/s\n",
        )
        assert server.requests[-1][2]["filter"] == (
            'resource.type="tpu_worker" AND resource.labels.node_id="dev-tpu-v5e-tpu" '
            'AND resource.labels.worker_id="3"'
        )


def test_gce_instance_logs_and_json(outputs_file: Path) -> None:
    ckpt = {"event": "checkpoint", "step": 500, "stall_s": 0.125, "rank": 8, "node": 1}
    with LoggingFakeServer() as server:
        server.add(
            gce_entry(1, GCE_NAMES[0], train(500, 0, 0)),
            gce_entry(2, GCE_NAMES[1], ckpt),
            gce_entry(3, "dev-a100-gce-a100-0", train(9, 0, 0)),
        )
        assert run_logs("prod-a100-gce", server, outputs_file) == (
            0,
            "10:00:01 node 0 rank 0 train step 500 loss -2.5000 812.2 samples/s\n"
            "10:00:02 node 1 rank 8 checkpoint step 500 stall 0.12s\n",
            "",
        )
        assert server.requests[-1][2]["filter"] == (
            'resource.type="gce_instance" AND '
            'labels."compute.googleapis.com/resource_name"=~"^prod-a100-gce-a100-"'
        )
        code, out, _ = run_logs("prod-a100-gce", server, outputs_file, "--worker", "1", "--json")
    assert (code, [json.loads(line) for line in out.splitlines()]) == (0, [ckpt])


def test_worker_out_of_range(outputs_file: Path) -> None:
    with LoggingFakeServer() as server:
        assert run_logs("prod-a100-gce", server, outputs_file, "--worker", "4") == (
            2,
            "",
            "error: --worker: 4 is not a machine of stack 'prod-a100-gce'; valid: 0..3\n",
        )


# ------------------------------------------------------------------------------ local


def local_config(tmp_path: Path) -> Path:
    config = tmp_path / "Pulumi.mine.yaml"
    config.write_text(
        "config:\n"
        "  trainstack:local: {workers: 2, root: " + str(tmp_path / "root") + "}\n"
        "  trainstack:trainer: {framework: torch, model: mlp, steps: 10}\n"
    )
    return config


def test_local_logs_from_the_log_file(tmp_path: Path) -> None:
    config = local_config(tmp_path)
    log = tmp_path / "root" / "logs" / "mine.jsonl"
    log.parent.mkdir(parents=True)
    records = [
        {"event": "start", "step": 0, "rank": 0, "node": 0, "worker": 0, "time": 1795386983.6},
        {**train(20, 0, 1), "time": 1795386997.9},
        {**train(20, 0, 0), "time": 1795386997.95},
    ]
    log.write_text(
        "\n".join(
            [json.dumps(records[0]), "W1123 warning from gloo", *map(json.dumps, records[1:])]
        )
        + "\n"
    )
    result = runner.invoke(app, ["logs", "--config-file", str(config)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "22:36:23 node 0 rank 0 start step 0",
        "W1123 warning from gloo",
        "22:36:37 node 0 rank 1 train step 20 loss 2.3000 812.2 samples/s",
        "22:36:37 node 0 rank 0 train step 20 loss 2.3000 812.2 samples/s",
    ]
    result = runner.invoke(app, ["logs", "--config-file", str(config), "--worker", "1", "--json"])
    assert (result.exit_code, result.stdout) == (0, json.dumps(records[1]) + "\n")


def test_local_logs_show_control_characters_as_escapes(tmp_path: Path) -> None:
    """A log line cannot drive the terminal: ESC (and its colour, clear-screen and title
    sequences), BEL, carriage return, DEL and the C1 controls print as `\\xNN`; tab stays.
    `--json` escapes them as JSON does."""
    config = local_config(tmp_path)
    log = tmp_path / "root" / "logs" / "mine.jsonl"
    log.parent.mkdir(parents=True)
    record = {"event": "start\x1b[2J", "step": 0, "rank": 0}
    text = "warn\x1b[31m red\x1b[0m\x07\tend\r spoofed \x7f\x9b1m \x1b]0;title\x07"
    log.write_bytes((json.dumps(record) + "\n" + text + "\n").encode() + b"\x00bin\xff\n")
    result = runner.invoke(app, ["logs", "--config-file", str(config)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "rank 0 start\\x1b[2J step 0",
        "warn\\x1b[31m red\\x1b[0m\\x07\tend\\x0d spoofed \\x7f\\x9b1m \\x1b]0;title\\x07",
        "\\x00bin\ufffd",
    ]
    result = runner.invoke(app, ["logs", "--config-file", str(config), "--json"])
    assert result.stdout.splitlines()[1] == json.dumps({"text": text})
    # A Cloud Logging text entry may span lines (a traceback): its newlines stay.
    from trainstack.infra.logs import printable

    assert printable("Traceback:\n  File x\x1b[1m") == "Traceback:\n  File x\\x1b[1m"


def test_local_without_a_log_file(tmp_path: Path) -> None:
    config = local_config(tmp_path)
    result = runner.invoke(app, ["logs", "--config-file", str(config)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: no log file at {tmp_path / 'root' / 'logs' / 'mine.jsonl'}; valid: the log of a "
        "run started with `trainstack local-run` or `pulumi up` on a local stack\n",
    )


# ------------------------------------------------------------------------------ --follow


def _read_lines(proc: subprocess.Popen[str], count: int, timeout_s: float = 30) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(lines) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            lines.append(line.rstrip("\n"))
    return lines


def test_follow_prints_new_entries_once_and_stops_on_ctrl_c(outputs_file: Path) -> None:
    outputs_file.write_text(json.dumps(OUTPUTS["dev-tpu-v5e"]))
    with LoggingFakeServer() as server:
        server.add(entry(1, tpu_resource(0), train(10, 0, 0)))
        # Ctrl-C in a terminal reaches a process whose SIGINT is not ignored; a test run
        # started in the background of a non-interactive shell ignores it, a child inherits
        # SIG_IGN and Python then leaves it in place (no KeyboardInterrupt): the child puts
        # Python's own handler back before it runs the CLI.
        argv = [
            sys.executable,
            "-c",
            "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "runpy.run_module('trainstack.infra.cli', run_name='__main__', alter_sys=True)",
            "logs",
            "--stack",
            "dev-tpu-v5e",
            "--follow",
        ]
        argv += ["--outputs", str(outputs_file), "--poll-s", "0.2"]
        argv += ["--endpoint", f"logging={server.endpoint}"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            first = _read_lines(proc, 1)
            # Same second as the first (the cursor's edge), a late one before it, a new one.
            server.add(
                entry(1, tpu_resource(1), train(10, 1, 1)),
                entry(0, tpu_resource(2), train(9, 2, 2)),
                entry(7, tpu_resource(0), train(20, 0, 0)),
            )
            more = _read_lines(proc, 3)
            polls = len(server.requests)
            deadline = time.monotonic() + 30
            while len(server.requests) < polls + 3 and time.monotonic() < deadline:
                time.sleep(0.1)  # several more polls: nothing may print twice
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert first == ["10:00:01 node 0 rank 0 train step 10 loss 2.4000 812.2 samples/s"]
    assert more == [
        "10:00:00 node 2 rank 2 train step 9 loss 2.4100 812.2 samples/s",
        "10:00:01 node 1 rank 1 train step 10 loss 2.4000 812.2 samples/s",
        "10:00:07 node 0 rank 0 train step 20 loss 2.3000 812.2 samples/s",
    ]
    assert (proc.returncode, out, err) == (130, "", "")
    cursors = [r[2]["filter"] for r in server.requests[1:]]
    assert cursors[0].endswith(' AND timestamp>="2026-11-23T09:59:01.123456Z"')


def test_follow_local_file(tmp_path: Path) -> None:
    from trainstack.infra.logs import FileLogs, read_lines

    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps(train(1, 0, 0)) + "\n" + '{"event": "train", "st')
    appended = [
        'ep": 2, "loss": 1.0, "rank": 0, "node": 0, "worker": 0}\n',
        "plain line\n",
    ]

    def sleep(_: float) -> None:
        if not appended:
            raise KeyboardInterrupt
        with log.open("a") as f:
            f.write(appended.pop(0))

    lines: list[str] = []
    source = FileLogs(log, None)
    with pytest.raises(KeyboardInterrupt):
        lines.extend(read_lines(source, {}, follow=True, as_json=False, poll_s=0, sleep=sleep))
    assert lines == [
        "node 0 rank 0 train step 1 loss 2.4900 812.2 samples/s",
        "node 0 rank 0 train step 2 loss 1.0000",
        "plain line",
    ]


def test_local_logs_json_writes_null_for_nan_and_infinity(tmp_path: Path) -> None:
    """Python's json reads and writes NaN and Infinity, which are not JSON (RFC 8259 section
    6): `--json` writes them as null, so every line stays valid JSON."""
    config = local_config(tmp_path)
    log = tmp_path / "root" / "logs" / "mine.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(
        '{"event": "train", "step": 3, "rank": 0, "loss": NaN, "grad": [Infinity, 1.5],'
        ' "extra": {"norm": -Infinity}}\n'
    )
    result = runner.invoke(app, ["logs", "--config-file", str(config), "--json"])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        '{"event": "train", "step": 3, "rank": 0, "loss": null, "grad": [null, 1.5], '
        '"extra": {"norm": null}}\n'
    )

    def strict(text: str) -> None:
        raise ValueError(text)

    json.loads(result.stdout, parse_constant=strict)  # no NaN/Infinity constant left

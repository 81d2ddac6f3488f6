"""`trainstack local-run`, `status` and `logs` on a broken local run folder: each case is one
`error:` line naming the path and the cause, exit 2, never a traceback, and found before a
worker starts or anything is deleted; and what a second `local-run` of a running run or a
stale pid file does. In process (CliRunner): no worker starts in these cases."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from tests.fakes import LocalServer
from tests.read_only import read_only
from trainstack.infra.cli import app
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.fingerprint import FINGERPRINT_FIELD, trainer_fingerprint
from trainstack.trainers.run_lock import RunLock, process_start

runner = CliRunner()
NOW = "2026-11-23T12:00:00Z"
TRAINER = "{framework: torch, model: mlp, dataset: synthetic, steps: 10, global_batch_size: 8}"


def _one_error(result: Result, line: str) -> None:
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: {line}\n")
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _stack(folder: Path, *, root: Path | None = None, trainer: str = TRAINER) -> Path:
    """`Pulumi.mine.yaml` in a project at `folder` (its own Pulumi.yaml)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    local = "{workers: 2}" if root is None else "{workers: 2, root: " + str(root) + "}"
    config = folder / "Pulumi.mine.yaml"
    config.write_text(f"config:\n  trainstack:local: {local}\n  trainstack:trainer: {trainer}\n")
    return config


def _checkpoint(folder: Path, step: int) -> None:
    """A committed checkpoint of `TRAINER`'s settings, as an older trainstack marked it (no
    file sizes recorded)."""
    settings = {"model": "mlp", "dataset": "synthetic", "steps": 10, "global_batch_size": 8}
    fingerprint = trainer_fingerprint(TrainConfig.model_validate(settings))
    (folder / f"step-{step:08d}").mkdir(parents=True)
    marker = {"step": step, "committed_at": 1.0, FINGERPRINT_FIELD: fingerprint}
    (folder / f"step-{step:08d}" / "COMPLETE").write_text(json.dumps(marker))


def test_a_file_named_trainstack_in_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stack(tmp_path)
    (tmp_path / ".trainstack").write_text("not a folder")
    monkeypatch.chdir(tmp_path)
    _one_error(
        runner.invoke(app, ["local-run", "--stack", "mine"]),
        f"local-run: {tmp_path}/.trainstack is a file, not a folder, so the run's folder "
        f"{tmp_path}/.trainstack/local/mine/logs cannot be created; valid: move that file away, "
        "or set local.root to another folder",
    )


def test_a_file_named_logs_in_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "logs").write_text("not a folder")
    config = _stack(tmp_path / "acme", root=root)
    _one_error(
        runner.invoke(app, ["local-run", "--config-file", str(config)]),
        f"local-run: {root}/logs is a file, not a folder, so the run's folder {root}/logs "
        "cannot be created; valid: move that file away, or set local.root to another folder",
    )
    _one_error(
        runner.invoke(app, ["logs", "--config-file", str(config)]),
        f"no log file at {root}/logs/mine.jsonl: {root}/logs is a file, not a folder; valid: "
        "move that file away (local-run and `pulumi up` write the log there)",
    )


def test_fresh_on_a_read_only_checkpoint_folder(tmp_path: Path) -> None:
    root = tmp_path / "root"
    ckpt = root / "checkpoints" / "mine"
    _checkpoint(ckpt, 5)
    config = _stack(tmp_path / "acme", root=root)
    with read_only(ckpt):
        result = runner.invoke(app, ["local-run", "--config-file", str(config), "--fresh"])
    _one_error(
        result,
        f"checkpoint folder {ckpt}: cannot delete its checkpoints (--fresh): Permission denied "
        f"({ckpt}/step-00000005)",
    )
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000005"]


def test_a_read_only_checkpoint_folder_is_found_before_the_workers_start(tmp_path: Path) -> None:
    root = tmp_path / "root"
    ckpt = root / "checkpoints" / "mine"
    ckpt.mkdir(parents=True)
    config = _stack(tmp_path / "acme", root=root)
    with read_only(ckpt):
        result = runner.invoke(app, ["local-run", "--config-file", str(config)])
    _one_error(
        result,
        f"checkpoint folder {ckpt}: cannot write to it: Permission denied "
        f"({ckpt}/.trainstack-write-test-{os.getpid()})",
    )
    assert not (root / "logs" / "mine.jsonl").exists()  # nothing started


def test_binary_bytes_in_the_log_of_a_finished_run(tmp_path: Path) -> None:
    """The log holds a torn line: the run is still reported complete, from its checkpoint."""
    root = tmp_path / "root"
    _checkpoint(root / "checkpoints" / "mine", 10)
    (root / "logs").mkdir(parents=True)
    done = {"event": "done", "step": 10, "rank": 0, "params_sha256": "ab"}
    (root / "logs" / "mine.jsonl").write_bytes(json.dumps(done).encode() + b"\n\xff\xfe\x00torn\n")
    config = _stack(tmp_path / "acme", root=root)
    result = runner.invoke(app, ["local-run", "--config-file", str(config)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"already complete at step 10 (checkpoint {root}/checkpoints/mine/step-00000010); "
        "--fresh starts over\n"
    )


def test_binary_bytes_in_the_pid_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "mine.pid").write_bytes(b"\xff\xfe\x00")
    config = _stack(tmp_path / "acme", root=root)
    _one_error(
        runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW]),
        f"{root}/logs/mine.pid holds binary bytes, not a local-run record; valid: delete it "
        "when no local-run of this stack is running (local-run writes it again)",
    )


def test_a_second_local_run_of_a_running_run_is_refused(tmp_path: Path) -> None:
    """The first run's lock is held (here by this process, as the first local-run holds it
    while it trains): the second stops before it deletes or starts anything."""
    root = tmp_path / "root"
    _checkpoint(root / "checkpoints" / "mine", 5)
    (root / "logs").mkdir(parents=True)
    config = _stack(tmp_path / "acme", root=root)
    pid_file = root / "logs" / "mine.pid"
    with RunLock(pid_file, "mine"):
        record = json.loads(pid_file.read_text())
        assert record == {
            "pid": os.getpid(),
            "start": process_start(os.getpid()),
            "started_at": record["started_at"],
            "by": "local-run",
        }
        result = runner.invoke(app, ["local-run", "--config-file", str(config), "--fresh"])
        _one_error(
            result,
            f"run 'mine' is already running here (local-run pid {os.getpid()}, started "
            f"{record['started_at']}; its lock: {pid_file}); valid: wait for it to end, or stop "
            "it (Ctrl-C in its terminal, or SIGTERM to its pid), then run this again",
        )
        assert (root / "checkpoints" / "mine" / "step-00000005").is_dir()  # --fresh waited
        status = runner.invoke(app, ["status", "--config-file", str(config), "--json"])
        assert json.loads(status.stdout)["hosts"] == [
            {"name": "local-run", "state": "running", "address": f"pid {os.getpid()}"}
        ]
    assert not pid_file.exists()


def test_status_does_not_trust_a_pid_that_started_later(tmp_path: Path) -> None:
    """A killed local-run leaves its record; once its pid belongs to another process (here:
    this one, with another start time), the run is not live."""
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "mine.jsonl").write_text(
        json.dumps({"event": "start", "step": 0, "rank": 0}) + "\n"
    )
    config = _stack(tmp_path / "acme", root=root)
    stale = {"pid": os.getpid(), "start": "1", "started_at": "2026-11-22T10:00:00Z"}
    (root / "logs" / "mine.pid").write_text(json.dumps(stale))
    args = ["status", "--config-file", str(config), "--json"]
    info = json.loads(runner.invoke(app, args).stdout)
    assert (info["state"], info["hosts"]) == ("STOPPED", [])


class _ForbiddingStorage(LocalServer):
    """Cloud Storage's JSON API for credentials without access to the bucket: every request
    is answered 403 with the error body of
    https://cloud.google.com/storage/docs/json_api/v1/status-codes ("403 Forbidden ... you
    don't have permission": `{"error": {"errors": [{"domain": "global", "reason":
    "forbidden", "message": "Forbidden"}], "code": 403, "message": "Forbidden"}}`)."""

    def __init__(self) -> None:
        body = json.dumps(
            {
                "error": {
                    "errors": [{"domain": "global", "reason": "forbidden", "message": "Forbidden"}],
                    "code": 403,
                    "message": "Forbidden",
                }
            }
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        super().__init__(Handler)


@pytest.fixture
def forbidding_storage(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with _ForbiddingStorage() as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.base_url)
        yield server.base_url


HINT = (
    "valid: credentials with access to that bucket (`gcloud auth application-default login`), "
    "or a local trainer.checkpoint_dir"
)


def _bucket_stack(tmp_path: Path) -> Path:
    trainer = TRAINER[:-1] + ", checkpoint_dir: gs://acme-ckpt/runs/mine}"
    return _stack(tmp_path / "acme", root=tmp_path / "root", trainer=trainer)


def test_a_checkpoint_bucket_these_credentials_may_not_use(
    tmp_path: Path, forbidding_storage: str
) -> None:
    config = _bucket_stack(tmp_path)
    probe = f"runs%2Fmine%2F.trainstack-write-test-{os.getpid()}"
    _one_error(
        runner.invoke(app, ["local-run", "--config-file", str(config)]),
        "checkpoint folder gs://acme-ckpt/runs/mine: cannot write to it: Forbidden: "
        f"{forbidding_storage}/upload/storage/v1/b/acme-ckpt/o?name={probe}; {HINT}",
    )
    _one_error(
        runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW]),
        "checkpoint folder gs://acme-ckpt/runs/mine: cannot read its checkpoints: Forbidden: "
        f"b/acme-ckpt/o; {HINT}",
    )


def test_an_unreachable_checkpoint_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens where the storage should be: gcsfs retries the connection for about
    30 s (its `retry_request`: 6 tries, backing off 1, 2, 4, 8, 16 s), then one line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: a port nobody listens on
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    result = runner.invoke(app, ["local-run", "--config-file", str(_bucket_stack(tmp_path))])
    _one_error(
        result,
        "checkpoint folder gs://acme-ckpt/runs/mine: cannot write to it: "
        f"Cannot connect to host 127.0.0.1:{port} ssl:default "
        f"[Connect call failed ('127.0.0.1', {port})]; {HINT}",
    )


WORKERS_REFUSED = {
    "0": "local.workers: 0 is too small; valid: >= 1",
    "99": "trainer.global_batch_size: 8 is not divisible by the world size 99 (99 local "
    "processes); valid: 99",
    "two": "local.workers: 'two' is not an integer; valid: a whole number",
}


@pytest.mark.parametrize("given", ["0", "99", "two"])
def test_workers_flag_stands_in_for_an_invalid_local_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    from types import SimpleNamespace

    import trainstack.trainers.local

    config = _stack(tmp_path)
    config.write_text(config.read_text().replace("{workers: 2}", "{workers: " + given + "}"))
    started: list[int] = []

    def run_local(trainer: Any, **options: Any) -> SimpleNamespace:
        started.append(options["workers"])
        return SimpleNamespace(exit_code=0, done=None)

    monkeypatch.setattr(trainstack.trainers.local, "run_local", run_local)
    result = runner.invoke(app, ["local-run", "--config-file", str(config), "--workers", "4"])
    assert (result.exit_code, result.stderr, started) == (0, "", [4])
    # Without the flag the file's value is checked as before.
    result = runner.invoke(app, ["local-run", "--config-file", str(config)])
    assert (result.exit_code, started) == (2, [4])
    assert result.stderr == "error: stack 'mine': " + WORKERS_REFUSED[given] + "\n"


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '"abc"', '{"pid": -1}', '{"pid": 0}', "1", '{"pid": true}', "99999999999999999999"],
)
def test_a_pid_file_naming_no_process_is_unreadable_not_running(tmp_path: Path, text: str) -> None:
    """`[1, 2]` and `"abc"` raised AttributeError out of status and local-run; pid -1 and 0
    (kill(-1, 0) and kill(0, 0) succeed) and an old record of pid 1 (init always runs) made
    status say RUNNING. Status says the record is unreadable; local-run, which holds the
    lock, takes the run over."""
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "mine.pid").write_text(text)
    config = _stack(tmp_path / "acme", root=root)
    _one_error(
        runner.invoke(app, ["status", "--config-file", str(config), "--now", NOW]),
        f"{root}/logs/mine.pid is not a local-run record ({text!r}); valid: delete it when no "
        "local-run of this stack is running (local-run writes it again)",
    )
    with RunLock(root / "logs" / "mine.pid", "mine") as lock:
        assert lock.took_over is None

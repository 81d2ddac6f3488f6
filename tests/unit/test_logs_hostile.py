"""What a run's log and output may hold that `logs`, `status` and `local-run` must still say
in one safe line: a JSON line Python's reader refuses (an integer past 4,300 digits), fields
of the wrong type, terminal controls and bidi overrides, and folders where files belong."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from trainstack.infra.cli import app
from trainstack.trainers.local_report import LocalRunResult, print_failure

runner = CliRunner()


def _config(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    config = tmp_path / "Pulumi.mine.yaml"
    config.write_text(
        "config:\n"
        "  trainstack:local: {workers: 2, root: " + str(tmp_path / "root") + "}\n"
        "  trainstack:trainer: {framework: torch, model: mlp, steps: 10}\n"
    )
    return config


def _log(tmp_path: Path, *lines: str) -> Path:
    log = tmp_path / "root" / "logs" / "mine.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"{line}\n" for line in lines))
    return log


HUGE = '{"event": "train", "step": ' + "9" * 5000 + ', "rank": 0}'


def test_a_record_past_pythons_integer_digits_is_text_and_garbled_fields_are_not_shown(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    garbled = {"event": "train", "step": {"a": 1}, "rank": True, "loss": "low", "node": [0]}
    _log(
        tmp_path,
        json.dumps({"event": "train", "step": 5, "rank": 0, "loss": 2.5}),
        HUGE,
        json.dumps(garbled),
        json.dumps({"event": {"x": 1}, "step": 6, "rank": 0, "time": 1e300}),
        json.dumps({"event": "checkpoint", "step": 7, "stall_s": 10**400}),
    )
    result = runner.invoke(app, ["logs", "--config-file", str(config)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "rank 0 train step 5 loss 2.5000",
        HUGE,
        "train",
        "rank 0 - step 6",
        "checkpoint step 7",
    ]


def test_status_reads_past_a_record_it_cannot_parse_and_a_step_that_is_no_number(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    _log(
        tmp_path,
        json.dumps({"event": "start", "step": 0, "rank": 0}),
        json.dumps({"event": "train", "step": 4, "rank": 0}),
        HUGE,
        json.dumps({"event": "train", "step": {"a": 1}, "rank": 0}),
    )
    result = runner.invoke(app, ["status", "--config-file", str(config), "--json"])
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(result.stdout)["step"] == 4


def test_logs_escape_bidi_overrides(tmp_path: Path) -> None:
    """U+202E (RIGHT-TO-LEFT OVERRIDE) shows `exe.txt` as `txt.exe`: escaped, as ESC is."""
    config = _config(tmp_path)
    _log(tmp_path, "saved model\u202etxt.exe\u2066 \u200f\u061cend")
    result = runner.invoke(app, ["logs", "--config-file", str(config)])
    assert result.stdout == "saved model\\u202etxt.exe\\u2066 \\u200f\\u061cend\n"


def test_local_run_shows_a_failed_ranks_last_lines_as_logs_does(tmp_path: Path) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200)
    record = {
        "event": "failed",
        "rank": 0,
        "exit_code": 1,
        "last_lines": ["\x1b]0;owned\x07boom\x1b[2J", "rtl \u202eexe.txt"],
    }
    result = LocalRunResult(1, None, "ckpt", tmp_path / "log.jsonl", 0.0, events=[record])
    print_failure(result, console)
    assert buffer.getvalue().splitlines() == [
        "rank 0 exited 1; its last output lines:",
        "  \\x1b]0;owned\\x07boom\\x1b[2J",
        "  rtl \\u202eexe.txt",
    ]


def test_logs_and_local_run_name_a_folder_where_the_log_file_belongs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    log = tmp_path / "root" / "logs" / "mine.jsonl"
    log.mkdir(parents=True)
    result = runner.invoke(app, ["logs", "--config-file", str(config)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: {log} is a folder where the run's log file is expected; valid: move that "
        "folder away (local-run and `pulumi up` write the log there)\n",
    )
    result = runner.invoke(app, ["local-run", "--config-file", str(config)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: local-run: {log} is a folder where the run's file is expected; valid: move "
        "that folder away (local-run writes the file there)\n",
    )
    log.rmdir()
    stderr_log = log.with_suffix(".stderr.log")
    stderr_log.mkdir()
    result = runner.invoke(app, ["local-run", "--config-file", str(config)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: local-run: {stderr_log} is a folder where the run's file is expected; valid: "
        "move that folder away (local-run writes the file there)\n",
    )
    assert not (tmp_path / "root" / "checkpoints").exists()  # nothing started


def test_status_names_a_file_where_the_runs_folder_belongs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "root").write_text("not a folder")
    result = runner.invoke(app, ["status", "--config-file", str(config)])
    pid = tmp_path / "root" / "logs" / "mine.pid"
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: cannot read {pid}: {tmp_path / 'root'} is a file where a folder is expected; "
        "valid: move that file away (local-run keeps its runs' folders there)\n",
    )

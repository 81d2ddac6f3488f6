"""The plan's rows about your code escape what a terminal would act on: a packaged file named
with ESC sequences or a newline shows as its escapes (`trainstack.trainers.common.printable`,
the rule `trainstack logs` follows), so it cannot clear the screen or break the row."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.unit.test_code_source_files import GKE
from trainstack.infra.cli import app
from trainstack.infra.code_plan import code_rows

runner = CliRunner()
EVIL = "\x1b[2J\x1b[31mEVIL\x1b[0m.py"


def test_file_names_with_escapes_or_newlines_are_escaped_in_the_plan(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('training')\n")  # 18 bytes
    (code / EVIL).write_text("x" * 20000)
    (code / "two\nlines.py").write_text("y" * 100)
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"]}
    config = tmp_path / "Pulumi.mine.yaml"
    config.write_text(yaml.safe_dump({"config": {**GKE, "trainstack:trainer": trainer}}))
    result = runner.invoke(app, ["plan", "--config-file", str(config), "--json"])
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["code"]
    # The JSON keeps the names as they are (JSON escapes them itself).
    assert [f["path"] for f in entry["files"]["largest"]] == [EVIL, "two\nlines.py", "train.py"]
    assert dict(code_rows(entry))["largest"] == (
        "\\x1b[2J\\x1b[31mEVIL\\x1b[0m.py 19.5 KiB, two\\x0alines.py 100 B, train.py 18 B"
    )
    text = runner.invoke(app, ["plan", "--config-file", str(config)])
    assert text.exit_code == 0, text.output
    assert "\x1b" not in text.stdout and "two\nlines" not in text.stdout

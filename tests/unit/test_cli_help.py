"""Every command's --help: paragraphs read as sentences (a docstring's hard wraps are not
kept) and flags show no value type."""

from __future__ import annotations

import inspect
import re

import pytest
import typer
from typer.testing import CliRunner

from trainstack.infra.cli import app
from trainstack.infra.cli_base import prose

runner = CliRunner()
GROUP = typer.main.get_command(app)
assert isinstance(GROUP, typer.core.TyperGroup)
COMMANDS = sorted(GROUP.commands)


def _help(*args: str, columns: int) -> list[str]:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return [line.strip(" │") for line in result.stdout.splitlines()]


def test_prose_joins_the_lines_of_each_paragraph() -> None:
    text = """First line
    goes on.

    Second paragraph
        wrapped twice
    here.
    """
    assert prose(text) == "First line goes on.\n\nSecond paragraph wrapped twice here."


def test_every_command_is_listed() -> None:
    assert COMMANDS == [
        "local-run",
        "logs",
        "plan",
        "plan-diff",
        "policy",
        "quota",
        "stacks",
        "status",
    ]


@pytest.mark.parametrize("name", COMMANDS)
def test_each_help_paragraph_is_one_line_when_it_fits(name: str) -> None:
    command = GROUP.commands[name]
    doc = inspect.getdoc(command.callback)
    assert doc is not None
    lines = _help(name, columns=1000)
    for paragraph in doc.split("\n\n"):
        assert " ".join(paragraph.split()) in lines


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_flags_show_no_value_type(name: str) -> None:
    lines = _help(*([name] if name else []), columns=100)
    assert [line for line in lines if "<bool>" in line] == []
    help_row = next(line for line in lines if line.startswith("--help"))
    assert help_row.split() == ["--help", "Show", "this", "message", "and", "exit."]


def test_local_run_help_renders_as_sentences() -> None:
    lines = _help("local-run", columns=100)
    start = lines.index(
        "Resumes from the run's newest checkpoint; a run already at its last step is reported and not"
    )
    assert lines[start : start + 4] == [
        "Resumes from the run's newest checkpoint; a run already at its last step is reported and not",
        "started again (--fresh starts over). SIGTERM or Ctrl-C stop it like a preemption: every worker",
        "saves a checkpoint, one line says which, and the exit code is 143 (SIGTERM) or 130 (Ctrl-C); run",
        "the same command to resume.",
    ]
    fresh = next(line for line in lines if line.startswith("--fresh"))
    assert fresh.split() == [
        "--fresh",
        "Delete",
        "the",
        "run's",
        "checkpoints",
        "and",
        "start",
        "at",
        "step",
        "0.",
    ]


def _contract_rows() -> dict[str, str]:
    """ARCHITECTURE.md's CLI contract: each row's command and its first cell."""
    from tests import REPO_ROOT

    text = (REPO_ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## CLI contract (`trainstack`)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    cells = [row.split(" | ", 1)[0].removeprefix("| ") for row in rows]
    return {cell.split("`")[1]: cell for cell in cells}


def test_the_architecture_cli_contract_names_every_command_and_option() -> None:
    rows = _contract_rows()
    assert sorted(rows) == COMMANDS
    for name in COMMANDS:
        shown = [
            param.opts[0] if isinstance(param, typer.core.TyperOption) else param.name.upper()
            for param in GROUP.commands[name].params
            if not getattr(param, "hidden", False)
        ]
        # Whole flags: `--stack` is not found in `--stack-name`.
        missing = [
            f for f in shown if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", rows[name])
        ]
        assert missing == [], name

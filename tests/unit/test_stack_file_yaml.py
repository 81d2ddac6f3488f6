"""Stack and project files are read without anchors, aliases or repeated keys
(`trainstack.components._strict_yaml`), and a bad value is quoted in a message only up to
`QUOTE_CHARS` characters.

An alias is a reference, so a few hundred bytes of nested aliases stood for a billion values
once the config was walked (48 s, 1.6 GB and a 226 MB error); a key given twice was read as
its last value without a word. Each is now one `error:` line naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainstack.components._project import ProjectFileError, find_project
from trainstack.components.catalog.problems import quote
from trainstack.infra.cli import app
from trainstack.infra.program_run import ProgramError, read_program, stack_config

runner = CliRunner()

LOCAL = "config:\n  trainstack:local: {workers: 2}\n"
# Four levels of nine aliases: 6,561 values from 300 bytes (nine levels: 387 million).
LAUGHS = (
    LOCAL
    + "  trainstack:trainer:\n"
    + "    entrypoint: [python, train.py]\n"
    + "    env:\n"
    + '      A: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + "      B: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    + "      C: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    + "      D: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
)
ALIASES = (
    "YAML anchors and aliases (&name, *name) are not accepted; valid: each value written out "
    "where it is used"
)


def _error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert (result.exit_code, result.stdout) == (2, "")
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_alias_bomb_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.laughs.yaml"
    path.write_text(LAUGHS)
    for command in ("plan", "policy", "quota"):
        assert _error([command, "--config-file", str(path)]) == (
            f"error: {path}: line 6, column 10: {ALIASES}"
        )


def test_an_anchor_alone_and_a_merge_key_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.anchor.yaml"
    path.write_text(LOCAL + "  trainstack:labels: &team {team: ml}\n")
    assert _error(["plan", "--config-file", str(path)]) == (
        f"error: {path}: line 3, column 22: {ALIASES}"
    )
    path.write_text("base: &base {workers: 2}\nconfig:\n  trainstack:local:\n    <<: *base\n")
    assert _error(["plan", "--config-file", str(path)]) == (
        f"error: {path}: line 1, column 7: {ALIASES}"
    )


def test_a_key_given_twice_is_refused_not_read_as_the_last(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.twice.yaml"
    path.write_text(LOCAL + "  trainstack:trainer:\n    steps: 10\n    steps: 100000\n")
    assert _error(["plan", "--config-file", str(path)]) == (
        f"error: {path}: line 5, column 5: key 'steps' is given twice in one mapping (first at "
        "line 4); valid: each key once"
    )
    path.write_text(LOCAL + "  trainstack:local: {workers: 3}\n")
    assert _error(["plan", "--config-file", str(path)]) == (
        f"error: {path}: line 3, column 3: key 'trainstack:local' is given twice in one "
        "mapping (first at line 2); valid: each key once"
    )


@pytest.mark.parametrize(("opening", "column"), [("[", 85), ("{a: ", 268)])
def test_values_nested_5000_deep_are_one_line_not_a_recursion_error(
    tmp_path: Path, opening: str, column: int
) -> None:
    """PyYAML composes nested values by recursion: 5,000 levels were a RecursionError with
    3,000 lines of traceback."""
    path = tmp_path / "Pulumi.deep.yaml"
    closing = "]" if opening == "[" else "}"
    path.write_text("config:\n  trainstack:trainer: " + opening * 5000 + closing * 5000 + "\n")
    assert _error(["plan", "--config-file", str(path)]) == (
        f"error: {path}: line 2, column {column}: values nested more than 64 levels deep are "
        "not accepted; valid: a stack file's sections, a few levels deep"
    )


def test_a_programs_stack_file_and_project_file_are_read_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (tmp_path / "__main__.py").write_text("")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  acme:x: 1\n  acme:x: 2\n")
    with pytest.raises(ProgramError) as info:
        stack_config(read_program(tmp_path), "dev", required=True)
    assert str(info.value) == (
        f"--stack: {tmp_path / 'Pulumi.dev.yaml'}: line 3, column 3: key 'acme:x' is given "
        "twice in one mapping (first at line 2); valid: each key once"
    )
    (tmp_path / "Pulumi.yaml").write_text("name: &n acme\nruntime: python\n")
    with pytest.raises(ProjectFileError) as project_info:
        find_project(tmp_path)
    assert str(project_info.value) == f"{tmp_path / 'Pulumi.yaml'}: line 1, column 7: {ALIASES}"


def test_a_long_bad_value_is_quoted_up_to_80_characters(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.long.yaml"
    path.write_text(LOCAL + "  trainstack:environment: " + "x" * 5000 + "\n")
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert (result.exit_code, result.stderr) == (
        2,
        "error: stack 'long': environment: '"
        + "x" * 59
        + "... (5,002 characters) is not allowed; valid: dev, staging, prod\n",
    )
    assert quote("x" * 78) == "'" + "x" * 78 + "'"
    assert quote(list(range(100))) == (
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1... (390 characters)"
    )

"""Files the project names: the LICENSE that pyproject.toml declares, and every repository
path that `trainstack quota --json` cites as a source exists in the repository."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.infra.cli import app

runner = CliRunner()

# A relative path with a folder and a file suffix (`infra/catalog.py`), not a piece of a URL
# (`https://host/a/b.md`) or another repository's file (`owner/repo:path/file.py`).
_REPO_PATH = re.compile(r"(?<![\w:/@.-])((?:[\w.-]+/)+[\w-]+\.[a-z]{1,5})\b")


def repo_paths(text: str) -> list[str]:
    """The repository-relative paths `text` names."""
    return _REPO_PATH.findall(text)


def test_repo_paths_finds_local_paths_only() -> None:
    text = (
        "facts memo 13 (tools/facts-13.md) section 1; https://cloud.google.com/tpu/docs/x.md; "
        "jax-ml/jax:jax/_src/clusters/cloud_tpu_cluster.py; see infra/catalog.py"
    )
    assert repo_paths(text) == ["tools/facts-13.md", "infra/catalog.py"]


# trainstack's stack files: the bundled ones and the examples' (a folder with a Pulumi.yaml
# of its own holds another program's stacks).
STACK_FILES = sorted(
    path
    for path in [
        *(REPO_ROOT / "stacks").glob("Pulumi.*.yaml"),
        *(REPO_ROOT / "examples").glob("*/Pulumi.*.yaml"),
    ]
    if not (path.parent / "Pulumi.yaml").is_file()
)


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_quota_json_sources_name_files_that_exist(path: Path) -> None:
    result = runner.invoke(app, ["quota", "--config-file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    cited = {p for row in rows for p in repo_paths(row["source"])}
    assert sorted(p for p in cited if not (REPO_ROOT / p).exists()) == []


def test_license_is_the_apache_2_text_pyproject_declares() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    lines = [line.strip() for line in (REPO_ROOT / "LICENSE").read_text().splitlines()]
    assert lines[:3] == [
        "Apache License",
        "Version 2.0, January 2004",
        "http://www.apache.org/licenses/",
    ]
    assert "END OF TERMS AND CONDITIONS" in lines
    assert len(lines) == 201

"""The documentation site builds with `mkdocs build --strict`, and its code examples run.

Every fenced block of a page in docs/ is one of:

- `sh`/`bash`: run with bash (`-e`: every line must succeed) in a fresh folder, with this
  environment's `trainstack` first on PATH;
- `python`: run with this interpreter in the same folder;
- `yaml`: parsed;
- `text`: output or layout, not code;

and the HTML comment on the line before it may change that:

- `<!-- docs-test: skip REASON -->`: not run (`pulumi up`, a training run of minutes); the
  reason is required;
- `<!-- docs-test: file PATH -->`: written to PATH in the page's folder (a stack file, a
  program), for the blocks after it;
- `<!-- docs-test: exit N REASON -->`: run, and must exit N (an example of an error).

The blocks of a page run in order in one folder, outside any Pulumi project, so nothing is
written into the checkout. A block that fails, a block in another language and a marker
without its argument fail the page's test.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests import REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$",
    re.MULTILINE | re.DOTALL,
)
MARKER = re.compile(r"^<!-- docs-test: (?P<kind>\w+)(?: (?P<arg>.*?))? -->$")
RUN_TIMEOUT_S = 300


def load_hooks() -> ModuleType:
    """docs/hooks.py, the mkdocs hook that generates the reference pages."""
    spec = importlib.util.spec_from_file_location("trainstack_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    body: str
    marker: str | None  # skip, file, exit
    arg: str


def blocks(markdown: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(markdown):
        before = markdown[: match.start()].rstrip("\n").splitlines()
        previous = before[-1].strip() if before else ""
        marker = MARKER.match(previous)
        found.append(
            Block(
                line=markdown.count("\n", 0, match.start()) + 1,
                lang=match.group("lang"),
                body=textwrap.dedent(match.group("body")),
                marker=marker.group("kind") if marker else None,
                arg=(marker.group("arg") or "").strip() if marker else "",
            )
        )
    return found


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("TRAINSTACK_OUTPUTS", None)
    env["NO_COLOR"] = "1"
    return env


def _run(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    if block.lang == "python":
        argv = [sys.executable, "-c", block.body]
    elif block.marker == "exit":  # one command whose exit code is the point
        argv = ["bash", "-c", block.body]
    else:
        argv = ["bash", "-e", "-c", block.body]
    return subprocess.run(
        argv,
        check=False,
        cwd=folder,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def check_page(markdown: str, folder: Path) -> list[str]:
    """What is wrong with the page's examples, one line each (empty: all ran)."""
    problems = []
    for block in blocks(markdown):
        where = f"line {block.line} ({block.lang or 'no language'})"
        if block.marker not in (None, "skip", "file", "exit"):
            problems.append(f"{where}: unknown marker docs-test: {block.marker}")
            continue
        if block.marker is not None and not block.arg:
            problems.append(f"{where}: docs-test: {block.marker} needs its argument")
            continue
        if block.marker == "skip":
            continue
        if block.lang == "yaml" or block.marker == "file":
            if block.lang == "yaml":
                try:
                    yaml.safe_load(block.body)
                except yaml.YAMLError as exc:
                    problems.append(f"{where}: not YAML: {exc}")
                    continue
            if block.marker == "file":
                target = folder / block.arg
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.body, encoding="utf-8")
            continue
        if block.lang == "text":
            continue
        if block.lang not in ("sh", "bash", "python"):
            problems.append(
                f"{where}: a block in no language the test runs; use sh, bash, python, "
                "yaml or text, or mark it <!-- docs-test: skip REASON -->"
            )
            continue
        expected = int(block.arg.split()[0]) if block.marker == "exit" else 0
        done = _run(block, folder)
        if done.returncode != expected:
            problems.append(
                f"{where}: exit {done.returncode}, expected {expected}\n{block.body}\n"
                f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
            )
    return problems


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_a_page_run(page: str, tmp_path: Path) -> None:
    markdown = (DOCS / page).read_text(encoding="utf-8")
    assert check_page(markdown, tmp_path) == []


def test_the_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        check=False,
        cwd=REPO_ROOT,
        env={**_environment(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    keys = (site / "reference" / "stack-keys" / "index.html").read_text(encoding="utf-8")
    assert "vertex.hyperparameter_tuning.parameters[].scale_type" in keys
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "trainstack local-run" in cli and "--fresh" in cli
    api = (site / "reference" / "components" / "index.html").read_text(encoding="utf-8")
    # mkdocstrings rendered the Args' field docstrings, not only the names.
    assert "Zone offering the generation" in api


# --- the runner's own rules, on pages made here ----------------------------------------------


def test_an_unmarked_block_that_fails_fails_the_page(tmp_path: Path) -> None:
    page = "# p\n\n```sh\ntrue\nfalse\n```\n"
    problems = check_page(page, tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith("line 3 (sh): exit 1, expected 0")


def test_a_skipped_block_needs_a_reason_and_is_not_run(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    skipped = f"<!-- docs-test: skip needs a cloud -->\n```sh\ntouch {ran}\n```\n"
    assert check_page(skipped, tmp_path) == []
    assert not ran.exists()
    bare = "<!-- docs-test: skip -->\n```sh\ntrue\n```\n"
    assert check_page(bare, tmp_path) == ["line 2 (sh): docs-test: skip needs its argument"]


def test_a_block_in_another_language_must_be_marked(tmp_path: Path) -> None:
    assert check_page("```console\n$ pulumi up\n```\n", tmp_path) == [
        "line 1 (console): a block in no language the test runs; use sh, bash, python, yaml "
        "or text, or mark it <!-- docs-test: skip REASON -->"
    ]
    assert check_page("```\nplain\n```\n", tmp_path)[0].startswith("line 1 (no language)")


def test_file_blocks_feed_the_blocks_after_them(tmp_path: Path) -> None:
    page = (
        "<!-- docs-test: file acme/x.yaml -->\n```yaml\na: 1\n```\n\n"
        "```python\nimport yaml; assert yaml.safe_load(open('acme/x.yaml')) == {'a': 1}\n```\n"
        "<!-- docs-test: exit 3 on purpose -->\n```sh\nexit 3\n```\n"
    )
    assert check_page(page, tmp_path) == []
    assert check_page("```yaml\na: [1\n```\n", tmp_path)[0].startswith("line 1 (yaml): not YAML")


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(entries: list[object]) -> set[str]:
        found: set[str] = set()
        for entry in entries:
            assert isinstance(entry, dict)
            for value in entry.values():
                found |= pages(value) if isinstance(value, list) else {str(value)}
        return found

    assert pages(config["nav"]) == set(PAGES)


def test_the_readme_program_registers_what_it_says() -> None:
    """README's "A program of your own" block, run under the mocks `trainstack plan` uses."""
    from trainstack.infra.testing import run_pulumi_program

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    (program,) = [b.body for b in blocks(readme) if b.lang == "python"]
    run = run_pulumi_program(
        lambda: exec(program, {}),  # noqa: S102 - the README's own example
        config={"gcp:project": "p", "gcp:region": "us-central1"},
        stack="dev",
    )
    assert run.exports == {"checkpoints": "gs://p-acme-checkpoints"}
    assert sorted(r.name for r in run.resources) == [
        "acme-buckets",
        "acme-buckets-checkpoints",
        "acme-buckets-data",
        "acme-buckets-staging",
        "acme-net",
        "acme-net-allow-iap-ssh",
        "acme-net-allow-internal",
        "acme-net-nat",
        "acme-net-network",
        "acme-net-router",
        "acme-net-subnet",
    ]


def test_the_readme_keeps_the_two_newcomer_commands() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    shell = [b.body for b in blocks(readme) if b.lang == "sh"]
    assert shell == [
        "make run    # the main job: a real 2-process distributed training run on this machine\n"
        "make test   # the tests: ruff, mypy and pytest\n"
    ]
    assert len(readme.splitlines()) <= 250

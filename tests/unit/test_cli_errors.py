"""Every `trainstack` error path prints exactly one `error:` line and no traceback.

Bad input, unreadable files, missing or refused credentials and API refusals exit 2; a job
that ended without succeeding exits 1 (ARCHITECTURE.md, CLI contract). Credentials are made
hermetic: Application Default Credentials come only from files the tests write, and the
token endpoint and Vertex AI are local fakes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from tests import REPO_ROOT
from tests.fakes import LocalServer
from tests.fakes.vertex_server import VertexFakeServer
from trainstack.infra.cli import app

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("shared_bundled_runs")
JOB = "projects/p/locations/us-central1/customJobs/1"
JOB_FORMS = (
    "projects/PROJECT/locations/REGION/customJobs/ID or "
    "projects/PROJECT/locations/REGION/hyperparameterTuningJobs/ID"
)
ADC_LOGIN = (
    "run `gcloud auth application-default login` "
    "(or set GOOGLE_APPLICATION_CREDENTIALS to a credentials file)"
)
PLAN_JSON = "the output of `trainstack plan --json`"


def _one_error(result: Result, line: str, code: int = 2) -> None:
    """`result` exited `code`, printed nothing on stdout and exactly `line` on stderr."""
    assert (result.exit_code, result.stdout, result.stderr) == (code, "", line + "\n")
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.fixture
def no_adc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No Application Default Credentials anywhere: a credentials variable naming a file
    that does not exist, and an empty gcloud config and home."""
    missing = tmp_path / "missing.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    return missing


class _TokenEndpoint(LocalServer):
    """An OAuth token endpoint that refuses every grant, as Google does for a service
    account key that was deleted."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.dumps(
                    {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
                ).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


@pytest.fixture
def refused_adc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Application Default Credentials that load (a service-account key file) but that the
    token endpoint, a local fake named in the file, refuses."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    with _TokenEndpoint() as token:
        credentials = tmp_path / "key.json"
        credentials.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": "p",
                    "private_key_id": "1",
                    "private_key": pem,
                    "client_email": "deleted-key@p.iam.gserviceaccount.com",
                    "client_id": "1",
                    "token_uri": f"{token.base_url}/token",
                }
            )
        )
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
        monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
        yield


REFUSED = (
    "could not authenticate with Application Default Credentials (invalid_grant: Invalid JWT "
    "Signature.); renew them with `gcloud auth application-default login`, or point "
    "GOOGLE_APPLICATION_CREDENTIALS at a current key"
)

# --------------------------------------------------------------------------- status


def test_status_without_any_credentials_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    # The report, end to end in a fresh process: no credentials variable, an empty
    # gcloud config and home, and no metadata server to fall back to.
    env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_APPLICATION_CREDENTIALS",)}
    env.update(
        CLOUDSDK_CONFIG=str(tmp_path),
        HOME=str(tmp_path),
        NO_GCE_CHECK="true",
        PYTHONPATH=str(REPO_ROOT),
    )
    env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "trainstack.infra.cli", "status", "--config-file"]
        + ["stacks/Pulumi.prod-vertex-rs.yaml", "--job", JOB],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: status needs Application Default Credentials to read {JOB}: {ADC_LOGIN}\n"
    )
    assert "Traceback" not in done.stderr


def test_status_with_a_credentials_variable_naming_a_missing_file(no_adc: Path) -> None:
    result = runner.invoke(app, ["status", "--stack", "prod-vertex-rs", "--job", JOB])
    _one_error(
        result,
        f"error: status needs Application Default Credentials to read {JOB}: "
        f"GOOGLE_APPLICATION_CREDENTIALS is {str(no_adc)!r}, which is not a readable "
        "credentials file; valid: a service-account or `gcloud auth application-default "
        "login` JSON file, or unset it",
    )


def test_status_with_refused_credentials(refused_adc: None) -> None:
    result = runner.invoke(app, ["status", "--stack", "prod-vertex-rs", "--job", JOB])
    _one_error(result, f"error: status {REFUSED}")


@pytest.mark.parametrize(
    "job",
    [
        "1234",
        "projects/p/locations/us-central1/trainingPipelines/1",
        f"{JOB}/extra",
        f"https://us-central1-aiplatform.googleapis.com/v1/{JOB}",
    ],
)
def test_status_job_that_is_not_a_resource_name(job: str) -> None:
    result = runner.invoke(app, ["status", "--stack", "prod-vertex-rs", "--job", job])
    _one_error(
        result,
        f"error: --job: {job!r} is not a Vertex AI job resource name; valid: {JOB_FORMS}",
    )


def test_status_refused_by_the_api() -> None:
    with VertexFakeServer() as fake:
        fake.fail_next(1, 403, "GET")
        result = runner.invoke(
            app,
            ["status", "--stack", "prod-vertex-rs", "--job", JOB, "--api-endpoint", fake.endpoint],
        )
    _one_error(
        result,
        f"error: --job: cannot read {JOB}: HTTP 403: PERMISSION_DENIED injected fault; valid: "
        "credentials allowed aiplatform.customJobs.get in project 'p' (roles/aiplatform.viewer)",
    )


def test_status_of_a_job_that_does_not_exist() -> None:
    with VertexFakeServer() as fake:
        result = runner.invoke(
            app,
            ["status", "--stack", "prod-vertex-rs", "--job", JOB, "--api-endpoint", fake.endpoint],
        )
    _one_error(
        result,
        f"error: --job: {JOB} does not exist (HTTP 404); valid: a job that Vertex AI still "
        "lists in project 'p', location 'us-central1'",
    )


def _job(fake: VertexFakeServer, state: str, **fields: Any) -> str:
    answer = fake.handle(
        "POST", "/v1/projects/p/locations/europe-west4/customJobs", {"displayName": "x"}
    )
    assert answer is not None and answer[0] == 200
    name = str(answer[1]["name"])
    fake.set_state(name, state)
    fake.jobs[name].update(fields)
    return name


def test_status_of_a_failed_job_exits_1() -> None:
    error = {"code": 3, "message": "worker 2 exited with status 1"}
    with VertexFakeServer() as fake:
        name = _job(fake, "JOB_STATE_FAILED", error=error)
        args = ["status", "--stack", "prod-vertex-rs", "--job", name]
        result = runner.invoke(app, [*args, "--api-endpoint", fake.endpoint])
        as_json = runner.invoke(app, [*args, "--json", "--api-endpoint", fake.endpoint])
    assert (result.exit_code, result.stderr) == (1, "")
    assert result.stdout.splitlines() == [
        f"job_name: {name}",
        "display_name: x",
        "state: JOB_STATE_FAILED",
        "create_time: 2026-11-01T00:00:00Z",
        "start_time: None",
        "end_time: None",
        "console_url: https://console.cloud.google.com/ai/platform/locations/europe-west4/"
        f"training/{name.rsplit('/', 1)[1]}?project=p",
        "error: worker 2 exited with status 1 (code 3)",
    ]
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"] == error


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("JOB_STATE_RUNNING", 0),
        ("JOB_STATE_SUCCEEDED", 0),
        ("JOB_STATE_CANCELLED", 1),
        ("JOB_STATE_EXPIRED", 1),
    ],
)
def test_status_exit_code_follows_the_job_state(state: str, code: int) -> None:
    with VertexFakeServer() as fake:
        name = _job(fake, state)
        result = runner.invoke(
            app,
            ["status", "--stack", "prod-vertex-rs", "--job", name, "--json"]
            + ["--api-endpoint", fake.endpoint],
        )
    assert (result.exit_code, json.loads(result.stdout)["state"]) == (code, state)


# --------------------------------------------------------------------------- quota --live


def test_quota_live_with_refused_credentials(refused_adc: None) -> None:
    result = runner.invoke(app, ["quota", "--stack", "dev-a100-gke", "--live"])
    _one_error(result, f"error: --live {REFUSED}")


# --------------------------------------------------------------------------- files


def _non_utf8(path: Path) -> Path:
    path.write_bytes(b"\xff\xfe\x00not text")
    return path


def test_plan_config_file_that_is_a_directory(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "--config-file", str(tmp_path)])
    _one_error(
        result,
        f"error: --config-file: {str(tmp_path)!r} is a directory; valid: a "
        "Pulumi.<stack>.yaml file",
    )


def test_plan_config_file_that_is_not_text(tmp_path: Path) -> None:
    path = _non_utf8(tmp_path / "Pulumi.x.yaml")
    result = runner.invoke(app, ["quota", "--config-file", str(path)])
    _one_error(
        result,
        f"error: --config-file: {str(path)!r} is not UTF-8 text (byte 0); valid: a "
        "Pulumi.<stack>.yaml file",
    )


def test_plan_config_file_that_is_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  gcp:project: [unclosed\n")
    result = runner.invoke(app, ["policy", "--config-file", str(path)])
    _one_error(
        result,
        f"error: --config-file: {path} is not valid YAML: expected ',' or ']', but got "
        "'<stream end>' at line 3, column 1",
    )


def test_plan_out_into_a_missing_directory(tmp_path: Path) -> None:
    out = tmp_path / "no-such-dir" / "plan.json"
    result = runner.invoke(app, ["plan", "--stack", "local", "--out", str(out)])
    _one_error(
        result,
        f"error: --out: cannot write {str(out)!r}: No such file or directory; valid: a file "
        "path in an existing, writable directory",
    )


def test_plan_diff_of_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "base.json"
    result = runner.invoke(app, ["plan-diff", str(missing), str(missing)])
    _one_error(
        result,
        f"error: BASE: {missing} is not a readable JSON plan (No such file or directory); "
        f"valid: {PLAN_JSON}",
    )


@pytest.mark.parametrize("levels", [100_000, 200])
def test_plan_diff_of_a_plan_nested_too_deep(tmp_path: Path, levels: int) -> None:
    """100,000 levels of `[` were a RecursionError in Python's JSON reader; 200 levels read,
    then walked by the plan's recursive readers."""
    base = tmp_path / "a.json"
    base.write_text(runner.invoke(app, ["plan", "--stack", "local", "--json"]).stdout)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * levels + "]" * levels)
    _one_error(
        runner.invoke(app, ["plan-diff", str(base), str(deep)]),
        f"error: HEAD: {deep} is not a readable JSON plan (its values nest more than 128 "
        f"levels deep); valid: {PLAN_JSON}",
    )


def test_plan_diff_of_files_that_are_not_json_plans(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(runner.invoke(app, ["plan", "--stack", "local", "--json"]).stdout)
    binary = _non_utf8(tmp_path / "binary.json")
    text = tmp_path / "text.json"
    text.write_text("stack: local\n")
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps([{"stack": "a", "resources": [{"type": "t"}]}]))
    cases = [
        (
            [good, binary],
            f"HEAD: {binary} is not a readable JSON plan (not UTF-8 text at byte 0); "
            f"valid: {PLAN_JSON}",
        ),
        (
            [text, good],
            f"BASE: {text} is not a readable JSON plan (Expecting value: line 1 column 1 "
            f"(char 0)); valid: {PLAN_JSON}",
        ),
        (
            [good, listing],
            f"HEAD: {listing}: plan 'a': resources[0] is not a plan resource; valid: "
            '{"type": str, "name": str, "parent": str | null, "inputs": {...}}',
        ),
    ]
    for (base, head), line in cases:
        _one_error(runner.invoke(app, ["plan-diff", str(base), str(head)]), f"error: {line}")
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    _one_error(
        runner.invoke(app, ["plan-diff", str(empty), str(good)]),
        f"error: BASE: {empty}: plan 0: expected a JSON plan with a `stack` name and a "
        "`resources` list; valid: what `trainstack plan --json` writes, or a list of those",
    )


def test_policy_plan_file_that_is_missing_or_not_text(tmp_path: Path) -> None:
    missing = tmp_path / "plan.json"
    _one_error(
        runner.invoke(app, ["policy", "--plan", str(missing)]),
        f"error: --plan: {missing} is not a readable JSON plan (No such file or directory); "
        f"valid: {PLAN_JSON}",
    )
    binary = _non_utf8(tmp_path / "binary.json")
    _one_error(
        runner.invoke(app, ["policy", "--plan", str(binary)]),
        f"error: --plan: {binary} is not a readable JSON plan (not UTF-8 text at byte 0); "
        f"valid: {PLAN_JSON}",
    )


# --------------------------------------------------------------------------- --stack-name


STACK_NAME_VALID = "1-63 of a-z, 0-9, '_', '-' (it is the `stack` label of every resource)"


@pytest.mark.parametrize("name", ["my stack", "Acme_Vertex.1", "a" * 64])
def test_stack_name_is_checked_by_the_cli_with_the_labels_rule(name: str) -> None:
    # Pulumi would take `Acme_Vertex.1`, but it becomes the `stack` label, which refused it
    # as `labels.stack`, a key the user never wrote.
    config = REPO_ROOT / "stacks" / "Pulumi.local.yaml"
    result = runner.invoke(app, ["plan", "--config-file", str(config), "--stack-name", name])
    _one_error(
        result, f"error: --stack-name: {name!r} is not a stack name; valid: {STACK_NAME_VALID}"
    )


def test_a_stack_file_name_that_is_no_stack_name_is_named_as_such(tmp_path: Path) -> None:
    config = tmp_path / "Pulumi.Acme_Vertex.1.yaml"
    config.write_text((REPO_ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    result = runner.invoke(app, ["plan", "--config-file", str(config)])
    _one_error(
        result,
        "error: stack 'Acme_Vertex.1': "
        f"stack name: 'Acme_Vertex.1' is not a stack name; valid: {STACK_NAME_VALID}",
    )


def test_a_stack_name_with_underscores_plans() -> None:
    config = REPO_ROOT / "stacks" / "Pulumi.local.yaml"
    result = runner.invoke(
        app, ["plan", "--config-file", str(config), "--stack-name", "acme_vertex-1", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stack"] == "acme_vertex-1"


def test_stack_name_only_with_a_config_file() -> None:
    result = runner.invoke(app, ["plan", "--stack", "local", "--stack-name", "other"])
    _one_error(
        result,
        "error: --stack-name: names the stack of a --config-file; a bundled stack's name is "
        "its --stack NAME; valid: --stack-name with --config-file",
    )


# --------------------------------------------------------------------------- program checks


@pytest.mark.parametrize("command", ["plan", "policy"])
def test_a_components_own_check_is_one_line(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A component refuses a value the config loader let through, in a callback that feeds a
    # resource's input: the engine wraps that error once per input and resource, then
    # re-raises the registration's failure with itself as its cause (pulumi/runtime/stack.py
    # `wait_for_rpcs`). Only the component's words are shown.
    import pulumi
    import pulumi_gcp as gcp

    import trainstack.infra.plan
    import trainstack.infra.policy
    from trainstack.infra.mocks import run_program

    def location(region: str) -> str:
        raise ValueError(f"region: {region!r} has no known nearest Artifact Registry multi-region")

    def program() -> None:
        gcp.storage.Bucket("b", location=pulumi.Output.from_input("x").apply(location))

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        run_program(program)

    monkeypatch.setattr(trainstack.infra.plan, "run_program", refuse)
    monkeypatch.setattr(trainstack.infra.policy, "run_program", refuse)
    result = runner.invoke(app, [command, "--stack", "prod-vertex-rs"])
    _one_error(
        result,
        "error: stack 'prod-vertex-rs': region: 'x' has no known nearest "
        "Artifact Registry multi-region",
    )


# --------------------------------------------------------------------------- status via Pulumi


def _fake_pulumi(directory: Path, script: str) -> None:
    """A `pulumi` on PATH that runs `script` (sh), so the stack output read is hermetic."""
    pulumi = directory / "pulumi"
    pulumi.write_text("#!/bin/sh\n" + script)
    pulumi.chmod(0o755)


def test_status_without_job_or_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    _one_error(
        runner.invoke(app, ["status", "--stack", "prod-vertex-rs"]),
        "error: reading the outputs of stack 'prod-vertex-rs' needs the Pulumi CLI, which is not "
        "on PATH; install it, or pass --outputs FILE (or set TRAINSTACK_OUTPUTS=FILE) with the "
        "output of `pulumi stack output --json --show-secrets --stack prod-vertex-rs > FILE`",
    )


def test_status_of_a_stack_that_is_not_deployed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_pulumi(tmp_path, "echo \"error: no stack named 'prod-vertex-rs' found\" >&2\nexit 255\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    _one_error(
        runner.invoke(app, ["status", "--stack", "prod-vertex-rs"]),
        "error: stack 'prod-vertex-rs' has no outputs to read (error: no stack named "
        "'prod-vertex-rs' found); deploy it with `pulumi up --stack prod-vertex-rs`, or pass "
        "--outputs FILE",
    )


def test_status_of_a_stack_output_that_is_not_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_pulumi(tmp_path, """echo '{"job_name": "(known after deploy)"}'\n""")
    monkeypatch.setenv("PATH", str(tmp_path))
    _one_error(
        runner.invoke(app, ["status", "--stack", "prod-vertex-rs"]),
        "error: stack 'prod-vertex-rs' output job_name: '(known after deploy)' is not a "
        f"Vertex AI job resource name; valid: {JOB_FORMS}",
    )

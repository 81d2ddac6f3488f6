"""Credentials in `trainer.env` and `trainer.entrypoint`, and Pulumi secrets end to end
(`trainstack.infra.config_secrets`).

- A credential in clear text is refused before anything is registered, by shape (a URL with
  a password, an `sk-` key, an `hf_` token) whatever its name says, naming the key and what
  to use, never the value.
- A `secure:` value in `trainer.env` goes to a Secret Manager secret's version (its
  `secret_data` a Pulumi secret, `[secret]` offline), and the launch inputs (the GKE Job
  spec, the GCE template's startup script, the TPU VM's metadata, the Vertex job body) carry
  only the version's name (`--secret-env`); under the engine (the value decrypted,
  `trainstack:trainer` in the secret keys) its plaintext is in that version alone.
- `secure:` anywhere else is refused, as is a local target's (its runs record their env).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pulumi
import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.infra.cli import app
from trainstack.infra.cli_run import with_secrets_from_environment
from trainstack.infra.compose import main_program
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.mocks import SECRET, config_to_engine, run_program
from trainstack.infra.plan import build_plan, read_stack_file
from trainstack.infra.plan_diff import plan_diff
from trainstack.policies.rules import FIX_SECRET, Context, Resource, evaluate, find_credential
from trainstack.policies.rules.credentials import Credential

runner = CliRunner()

CIPHERTEXT = "v1:AAABAGUJcmFuZG9tY2lwaGVydGV4dA=="
PASSWORD = "s3cr3t-Pa55"
DATABASE_URL = f"postgres://app:{PASSWORD}@db.internal:5432/app"
EXAMPLES = {
    "gke": "own-trainer/Pulumi.gke.yaml",
    "gce": "own-trainer/Pulumi.gce.yaml",
    "vertex": "own-trainer/Pulumi.vertex.yaml",
    "tpu": "own-jax/Pulumi.tpu.yaml",
}
LAUNCH = {
    # The one input of each target's launch resource that carries the node launcher's
    # arguments (`--env=NAME=value`), by (type, logical name suffix, input).
    "gke": ("kubernetes:batch/v1:Job", "-gpu-training-job", "spec"),
    "gce": (
        "gcp:compute/instanceTemplate:InstanceTemplate",
        "-gpu-template",
        "metadataStartupScript",
    ),
    "vertex": ("pulumi-python:dynamic/vertex:CustomJob", "-job-job", "body"),
    "tpu": ("gcp:tpu/v2Vm:V2Vm", "-tpu-vm", "metadata"),
}
SET_SECRET = "pulumi config set --secret --path 'trainstack:trainer.env.{}' VALUE"
IN_CLEAR = "in clear, which plans, plan diffs, logs and the stack's state would show"


def _stack(target: str, **trainer: Any) -> tuple[str, dict[str, Any]]:
    """A your-own-code example stack of `target`, its source as an absolute folder (so it
    plans from anywhere) and `trainer` keys added."""
    name, config = read_stack_file(REPO_ROOT / "examples" / EXAMPLES[target])
    section = dict(config["trainstack:trainer"])
    section["source"] = str(REPO_ROOT / section["source"])
    return name, {**config, "trainstack:trainer": {**section, **trainer}}


def _launch(resources: list[dict[str, Any]], target: str, stack: str) -> Any:
    kind, suffix, key = LAUNCH[target]
    found = [r for r in resources if r["type"] == kind and r["name"] == stack + suffix]
    assert len(found) == 1, [r["name"] for r in resources if r["type"] == kind]
    return found[0]["inputs"][key]


POOLS = {"vertex": 2}
"""The launch inputs that hold the node launcher's arguments more than once: the Vertex job's
two worker pools (the chief and the workers)."""


def _reference(config: dict[str, Any], stack: str, name: str) -> str:
    """The Secret Manager version a `secure:` value `name` reaches the nodes as (offline)."""
    return f"projects/{config['gcp:project']}/secrets/{stack}-env-{name}/versions/1"


@pytest.mark.parametrize("target", list(EXAMPLES))
def test_a_secure_env_value_plans_as_a_secret_manager_version_on_every_cloud_target(
    target: str,
) -> None:
    env = {"DATABASE_URL": {"secure": CIPHERTEXT}, "HF_TOKEN": {"secure": CIPHERTEXT}}
    stack, config = _stack(target, env={**env, "WANDB_MODE": "offline"})
    plan = build_plan(stack, config)
    # The launch input carries the versions' names, in the open, and no value.
    launch = json.dumps(_launch(plan["resources"], target, stack))
    for name in ("DATABASE_URL", "HF_TOKEN"):
        reference = f"--secret-env={name}={_reference(config, stack, name)}"
        assert launch.count(reference) == POOLS.get(target, 1)
    assert SECRET not in launch and "--env=DATABASE_URL" not in launch
    assert plan["code"]["env"] == {
        "DATABASE_URL": SECRET,
        "HF_TOKEN": SECRET,  # its name asks for a secret, and it is one
        "WANDB_MODE": "offline",
    }
    assert [a for a in plan["outputs"]["node_args"] if "DATABASE_URL" in a or "HF" in a] == [
        f"--secret-env=DATABASE_URL={_reference(config, stack, 'DATABASE_URL')}",
        f"--secret-env=HF_TOKEN={_reference(config, stack, 'HF_TOKEN')}",
    ]
    # One secret and version per value, under the stack's component for them; the training
    # account may read those two secrets and no other.
    kinds = ("gcp:secretmanager/secret:Secret", "gcp:secretmanager/secretVersion:SecretVersion")
    stored = [
        (r["type"].rsplit(":", 1)[1], r["name"], r["parent"], r["inputs"].get("secretData"))
        for r in plan["resources"]
        if r["type"] in kinds
    ]
    parent = f"{stack}-env-secrets"
    assert sorted(stored) == [
        ("Secret", f"{parent}-DATABASE_URL", parent, None),
        ("Secret", f"{parent}-HF_TOKEN", parent, None),
        ("SecretVersion", f"{parent}-DATABASE_URL-version", parent, SECRET),
        ("SecretVersion", f"{parent}-HF_TOKEN-version", parent, SECRET),
    ]
    grants = [
        (r["inputs"]["secretId"], r["inputs"]["role"])
        for r in plan["resources"]
        if r["type"] == "gcp:secretmanager/secretIamMember:SecretIamMember"
    ]
    assert grants == [
        (f"{stack}-env-DATABASE_URL", "roles/secretmanager.secretAccessor"),
        (f"{stack}-env-HF_TOKEN", "roles/secretmanager.secretAccessor"),
    ]
    assert CIPHERTEXT not in json.dumps(plan)
    # The same stack without a secret registers no secret and passes the value as --env.
    stack, config = _stack(target, env={"WANDB_MODE": "offline"})
    plain = build_plan(stack, config)
    assert [r["name"] for r in plain["resources"] if r["type"] in kinds] == []
    envs = [a for a in plain["outputs"]["node_args"] if a.startswith("--env=WANDB")]
    assert envs == ["--env=WANDB_MODE=offline"]


@pytest.mark.parametrize("target", list(EXAMPLES))
def test_under_the_engine_the_decrypted_value_goes_only_to_its_secret_version(
    target: str,
) -> None:
    # What `pulumi up` hands the program: every value decrypted, and the keys holding a
    # secret listed apart. The engine lists `trainstack:trainer`, since an object holding a
    # secure value is secure (pulumi/pulumi sdk/go/common/resource/config/object.go
    # `object.Secure`, map.go `Map.SecureKeys`); the language host passes the list as
    # PULUMI_CONFIG_SECRET_KEYS and pulumi-language-python-exec calls
    # `set_all_config(config, secret_keys)`, which `run_program` does with `secret_keys`.
    # Every trainer.env value then counts as secret, so each gets its Secret Manager secret.
    stack, config = _stack(target, env={"DATABASE_URL": DATABASE_URL, "WANDB_MODE": "offline"})
    run = run_program(main_program, config=config, stack=stack, secret_keys=["trainstack:trainer"])
    entries = [{"type": r.type, "name": r.name, "inputs": r.inputs} for r in run.resources]
    assert json.dumps(run.shown_outputs["node_args"]).count("--secret-env=DATABASE_URL=") == 1
    registered = json.dumps([entries, run.shown_outputs])
    assert PASSWORD not in registered
    # The values the provider would receive: the password in the one version's secret_data.
    found: dict[str, Any] = {}
    for r in run.resources:
        _flat(r.values, r.name, found)
    assert [path for path, value in found.items() if PASSWORD in str(value)] == [
        f"{stack}-env-secrets-DATABASE_URL-version.secretData"
    ]
    assert PASSWORD not in json.dumps(run.outputs, default=str)


def _flat(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flat(item, f"{path}.{key}", out)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _flat(item, f"{path}[{i}]", out)
    else:
        out[path] = value


def _deployed(target: str, password: str, **tpu: Any) -> dict[str, Any]:
    """Every value the program registers and exports under the engine (secrets' values
    included, as the provider would receive them), by path, the password as `<password>`."""
    stack, config = _stack(target, env={"DB_PASSWORD": password, "WANDB_MODE": "offline"})
    if tpu:
        config["trainstack:tpu"] = {**config["trainstack:tpu"], **tpu}
    run = run_program(main_program, config=config, stack=stack, secret_keys=["trainstack:trainer"])
    found: dict[str, Any] = {}
    for r in run.resources:
        _flat(json.loads(json.dumps(r.values).replace(password, "<password>")), r.name, found)
    outputs = json.dumps(run.outputs, default=str).replace(password, "<password>")
    _flat(json.loads(outputs), "outputs", found)
    return found


RUN_KEY = re.compile(r"trainstack-run-[0-9a-f]{16}")


@pytest.mark.parametrize(
    ("target", "tpu", "hashes"),
    [
        ("gke", {}, {"run key"}),
        ("gce", {}, {"run key"}),
        ("vertex", {}, {"trainstack_request_id"}),
        ("tpu", {}, {"run key"}),
        ("tpu", {"provisioning": "queued"}, {"run key", "trainstack_spec"}),
        ("tpu", {"provisioning": "on-demand"}, {"run key"}),
    ],
)
def test_a_secure_value_reaches_no_run_key_request_id_or_spec_label(
    target: str, tpu: dict[str, Any], hashes: set[str]
) -> None:
    # The run key names objects in the checkpoint bucket (`trainstack-run-<key>.*`), which
    # anyone who may list it sees; a 64-bit digest over a short password gives the password
    # away. Two stacks that differ only in a secure value register and export the same
    # values but for the value itself: same run key (a rotated secret keeps the run), same
    # Vertex request id and TPU spec label, no digest of the value anywhere.
    first = _deployed(target, "s3cr3tPa55wordA", **tpu)
    second = _deployed(target, "s3cr3tPa55wordB", **tpu)
    assert {k for k in first.keys() | second.keys() if first.get(k) != second.get(k)} == set()
    # The one place that holds it: the secret's version (the supervisor's bundle, which holds
    # the launch's body, no longer does).
    stack = _stack(target)[0]
    assert [k for k, v in first.items() if "<password>" in str(v)] == [
        f"{stack}-env-secrets-DB_PASSWORD-version.secretData"
    ]
    # The hashes compared above are there: the launch's one run key (in the startup script
    # or pod env and the supervisor's config), the request id, the spec label.
    keys = {key for value in first.values() for key in RUN_KEY.findall(str(value))}
    labels = {p.rsplit(".", 1)[-1] for p in first if p.endswith(("_request_id", "_spec"))}
    assert ({"run key"} if len(keys) == 1 else set()) | labels == hashes


@contextmanager
def _engine(config: dict[str, Any], secret_keys: list[str]) -> Iterator[None]:
    """The runtime config as the engine sets it for a program (see the test above)."""
    pulumi.runtime.set_all_config(config_to_engine(config), secret_keys)
    try:
        yield
    finally:
        pulumi.runtime.set_all_config({}, [])


def _errors(config: dict[str, Any], secret_keys: list[str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        if secret_keys is None:
            load_stack_config(config)
        else:
            with _engine(config, secret_keys):
                load_stack_config()
    return info.value.errors


ELSEWHERE = (
    "a Pulumi secret (`secure:`) is not accepted here: this key reaches resources in clear; "
    "valid: a `secure:` value only as a trainer.env value (`"
    + SET_SECRET.format("NAME")
    + "`), or Secret Manager through trainer.secret_env"
)


def test_a_secure_value_anywhere_but_trainer_env_is_refused() -> None:
    _, config = _stack("gke", entrypoint=["python", "train.py", {"secure": CIPHERTEXT}])
    config["trainstack:labels"] = {"team": {"secure": CIPHERTEXT}}
    config["gcp:project"] = {"secure": CIPHERTEXT}
    # In the stack file's order.
    assert _errors(config) == [
        f"gcp:project: {ELSEWHERE}",
        f"trainer.entrypoint[2]: {ELSEWHERE}",
        f"labels.team: {ELSEWHERE}",
    ]
    _, config = _stack("gke")
    config["trainstack:trainer"] = {"secure": CIPHERTEXT}
    assert _errors(config) == [f"trainer: {ELSEWHERE}"]


def test_under_the_engine_a_secret_key_other_than_the_trainer_is_refused() -> None:
    _, config = _stack("gke", env={"WANDB_MODE": "offline"})
    held = ELSEWHERE.replace(
        "a Pulumi secret (`secure:`) is", "holds a Pulumi secret (`secure:`), which is"
    )
    config["trainstack:labels"] = {"team": "ml"}
    assert _errors(config, ["trainstack:labels", "gcp:project"]) == [
        f"gcp:project: {held}",
        f"labels: {held}",
    ]
    _, config = _stack("gke")
    assert _errors(config, ["trainstack:trainer"]) == [
        "trainer: holds a Pulumi secret (`secure:`) but sets no trainer.env; valid: a "
        f"`secure:` value only as a trainer.env value (`{SET_SECRET.format('NAME')}`), or "
        "Secret Manager through trainer.secret_env"
    ]
    # Another program's secret config is none of the loader's business.
    _, config = _stack("gke")
    cfg = None
    with _engine({**config, "acme:password": "x"}, ["acme:password"]):
        cfg = load_stack_config()
    assert cfg.secrets == frozenset()


def test_the_local_target_takes_no_secure_value() -> None:
    _, config = read_stack_file(REPO_ROOT / "examples/own-trainer/Pulumi.local.yaml")
    trainer = dict(config["trainstack:trainer"])
    trainer["source"] = str(REPO_ROOT / trainer["source"])
    trainer["env"] = {"HF_TOKEN": {"secure": CIPHERTEXT}}
    assert _errors({**config, "trainstack:trainer": trainer}) == [
        "trainer.env.HF_TOKEN: a Pulumi secret (`secure:`) is not used on a local target, whose "
        "runs record their env in the run folder on this machine; valid: "
        "trainer.secret_env.HF_TOKEN (a local run reads it from this environment), or a plain "
        "value"
    ]


def test_credentials_in_clear_are_refused_by_shape_naming_the_key_not_the_value(
    tmp_path: Path,
) -> None:
    hf = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
    sk = "sk-proj-" + "Zz09" * 8
    _, config = _stack(
        "gke",
        env={"DATABASE_URL": DATABASE_URL, "OPENAI": sk, "CACHE": "/tmp/hf_cache"},
        entrypoint=["python", "train.py", f"--hub={hf}", "--lr=3e-4"],
    )
    path = tmp_path / "Pulumi.creds.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    fix_env = (
        "valid: trainer.secret_env.{}: projects/P/secrets/NAME (Secret Manager, read on the "
        "node), or a `secure:` value (`" + SET_SECRET.replace("{}", "{0}") + "`)"
    ).replace("{}", "{0}")
    assert (result.exit_code, result.stdout, result.stderr.splitlines()) == (
        2,
        "",
        [
            f"error: stack 'creds': trainer.env.DATABASE_URL: holds a URL with a password {IN_CLEAR}; "
            + fix_env.format("DATABASE_URL"),
            f"error: stack 'creds': trainer.env.OPENAI: holds an API key (sk-) {IN_CLEAR}; "
            + fix_env.format("OPENAI"),
            f"error: stack 'creds': trainer.entrypoint[2]: holds a Hugging Face token {IN_CLEAR} (and every process "
            "listing on the node); valid: your code reads it from the environment, set by "
            "trainer.secret_env (Secret Manager) or a `secure:` trainer.env value",
        ],
    )
    for value in (PASSWORD, sk, hf):
        assert value not in result.output


def test_on_a_local_target_a_credential_in_clear_is_not_offered_a_secure_value() -> None:
    # The local target refuses `secure:` values (test above): what replaces a credential in
    # clear there is secret_env, which a local run reads from this environment.
    _, config = read_stack_file(REPO_ROOT / "examples/own-trainer/Pulumi.local.yaml")
    trainer = dict(config["trainstack:trainer"])
    trainer["source"] = str(REPO_ROOT / trainer["source"])
    trainer["env"] = {"DATABASE_URL": DATABASE_URL}
    trainer["entrypoint"] = [
        "python",
        "train.py",
        "--hub=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    ]
    assert _errors({**config, "trainstack:trainer": trainer}) == [
        f"trainer.env.DATABASE_URL: holds a URL with a password {IN_CLEAR}; valid: "
        "trainer.secret_env.DATABASE_URL: projects/P/secrets/NAME (a local run reads "
        "DATABASE_URL from this environment)",
        f"trainer.entrypoint[2]: holds a Hugging Face token {IN_CLEAR} (and every process "
        "listing on the node); valid: your code reads it from the environment, set by "
        "trainer.secret_env (a local run reads it from this environment)",
    ]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("postgres://app:hunter2@db:5432/app", "a URL with a password"),
        ("redis://:hunter2@cache:6379/0", "a URL with a password"),
        ("sk-ant-api03-" + "a1B2" * 10, "an Anthropic API key"),
        ("sk-" + "a1B2" * 12, "an API key (sk-)"),
        ("hf_" + "a1B2" * 9, "a Hugging Face token"),
        ("ghp_" + "a1B2" * 9, "a GitHub token"),
        ("gho_" + "a1B2" * 9, "a GitHub token"),
        ("github_pat_" + "a1B2_" * 5, "a GitHub token"),
        ("xoxb-" + "1234-abcd-" * 2, "a Slack token"),
        ("AKIA" + "ABCDEFGHIJKLMNOP", "an AWS access key id"),
        ("AIza" + "a1B2" * 8 + "xyz", "a Google API key"),
        ("glpat-" + "a1B2" * 5, "a GitLab token"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "a private key"),
        # Shapes after gitleaks' rules (cmd/generate/config/rules/stripe.go, jwt.go, npm.go,
        # slack.go) and a password holding a quote, which RFC 3986 userinfo allows as a
        # sub-delim.
        ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "a Stripe API key"),
        ("rk_test_" + "a1B2" * 4, "a Stripe API key"),
        (
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "a JSON Web Token",
        ),
        ("npm_" + "abcdefghijklmnopqrstuvwxyz0123456789", "an npm token"),
        ("https://hooks.slack.com/services/T000/B000/" + "X" * 20, "a Slack webhook URL"),
        ("postgres://app:pa'ss@db:5432/app", "a URL with a password"),
    ],
)
def test_the_scanner_knows_the_common_shapes(text: str, kind: str) -> None:
    found = find_credential(f"export X='{text}'")
    assert found is not None and found.kind == kind


def test_an_azure_account_key_is_found_by_its_name() -> None:
    # An Azure Storage connection string (https://learn.microsoft.com/en-us/azure/storage/
    # common/storage-configure-connection-string): `AccountKey=` holds the key.
    text = "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=abcd1234==;EndpointSuffix=y"
    assert find_credential(text) == Credential("a credential", "AccountKey")


def test_an_option_and_its_value_as_two_arguments_are_one_credential() -> None:
    _, config = _stack(
        "gke",
        entrypoint=["python", "train.py", "--api-key", "abc123", "--password", "hunter2",
                    "--steps", "100", "--token", "--verbose"],
    )  # fmt: skip
    fix = (
        f"{IN_CLEAR} (and every process listing on the node); valid: your code reads it from "
        "the environment, set by trainer.secret_env (Secret Manager) or a `secure:` "
        "trainer.env value"
    )
    assert _errors(config) == [
        f"trainer.entrypoint[3]: holds a value for api-key {fix}",
        f"trainer.entrypoint[5]: holds a value for password {fix}",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "postgres://app:${DB_PASSWORD}@db/app",  # a variable, read at run time
        "postgres://app@db/app",
        "gs://bucket/path:with@odd",
        "https://example.com:8443/path@x",
        "task-" + "a1B2" * 10,
        "scikit-learn>=1.5",
        "/tmp/hf_cache",
        SECRET,
    ],
)
def test_the_scanner_leaves_look_alikes(text: str) -> None:
    assert find_credential(text) is None


def test_the_policy_catches_the_new_shapes_in_any_input() -> None:
    script = f"#!/bin/bash\nexport DATABASE_URL={DATABASE_URL}\nexec python train.py\n"
    vm = Resource("gcp:compute/instance:Instance", "vm", {"metadataStartupScript": script})
    args = ["--model=gpt", "--key=sk-ant-api03-" + "a1B2" * 10]
    job = Resource("pulumi-python:dynamic/vertex:CustomJob", "job", {"body": {"args": args}})
    messages = [(v.resource_name, v.message) for v in evaluate([vm, job], Context())]
    assert [m for m in messages if "plaintext" in m[1]] == [
        ("vm", f"metadataStartupScript contains a URL with a password in plaintext; {FIX_SECRET}"),
        ("job", f"body.args[1] contains an Anthropic API key in plaintext; {FIX_SECRET}"),
    ]
    assert PASSWORD not in json.dumps(messages)


def test_local_run_reads_a_secure_env_value_from_this_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, config = _stack("gke", env={"DB_URL": {"secure": CIPHERTEXT}, "MODE": "x"})
    cfg = load_stack_config(config)
    monkeypatch.delenv("DB_URL", raising=False)
    with pytest.raises(typer.Exit):
        with_secrets_from_environment(cfg.trainer, cfg.secrets)
    monkeypatch.setenv("DB_URL", DATABASE_URL)
    trainer = with_secrets_from_environment(cfg.trainer, cfg.secrets)
    # Like secret_env: into the processes' environment only, not the run's env record.
    assert (trainer.env, trainer.secret_env) == ({"MODE": "x"}, {"DB_URL": "trainer.env.DB_URL"})


def test_local_run_without_the_exported_value_is_one_line(tmp_path: Path) -> None:
    _, config = _stack("gke", env={"DB_URL": {"secure": CIPHERTEXT}})
    path = tmp_path / "Pulumi.own.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["local-run", "--config-file", str(path)], env={"DB_URL": None})
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: trainer.env.DB_URL: a Pulumi secret (`secure:`), which only the Pulumi engine "
        "decrypts; valid: export DB_URL before local-run (read from this environment, as "
        "trainer.secret_env is)\n",
    )


def test_plan_diff_shows_env_values_as_a_hash_unless_asked(tmp_path: Path) -> None:
    plans = []
    for mode in ("offline", "online"):
        stack, config = _stack("gke", env={"WANDB_MODE": mode, "RUN_TAG": "exp-7"})
        plans.append(build_plan(stack, config))
    hidden = plan_diff(plans[0], plans[1])
    shown = plan_diff(plans[0], plans[1], show_values=True)
    assert "offline" not in hidden and "online" not in hidden and "exp-7" not in hidden
    hashes = set(re.findall(r"--env=WANDB_MODE=(sha256:[0-9a-f]{8})", hidden))
    assert hashes == {"sha256:8e2c7ac5", "sha256:f6fc84c9"}  # sha256 of offline, online
    assert "--env=WANDB_MODE=offline" in shown and "--env=WANDB_MODE=online" in shown
    # The CLI flag.
    for i, plan in enumerate(plans):
        (tmp_path / f"{i}.json").write_text(json.dumps(plan))
    files = [str(tmp_path / "0.json"), str(tmp_path / "1.json")]
    assert runner.invoke(app, ["plan-diff", *files]).stdout == hidden + "\n"
    assert runner.invoke(app, ["plan-diff", "--show-values", *files]).stdout == shown + "\n"


PEM_B64 = base64.b64encode(
    b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"
).decode()
EVASIONS = {
    # Shapes an outside review found passing (issue 29 item 6): a `/` in a URL's password,
    # a password starting `$` (env values are not shell-expanded), credentials as a URL's
    # query parameters, an Authorization header, a base64-encoded PEM key, Google OAuth
    # client secrets, Slack app-level tokens, OpenAI project keys without a digit.
    "PG_URL": "postgresql://app:pa/ss@db:5432/app",
    "PG_DOLLAR": "postgres://app:$uperSecret99@db/app",
    "API_URL": "https://api.example.com/v1?api_key=abcdef0123456789abcdef",
    "HOOK": "https://api.example.com/v1?token=abcdef0123456789",
    "FEED": "https://api.example.com/v1?page=2&access_token=abcdef0123456789",
    "DB_PASS": "hunter2hunter2",
    "HEADER": "Authorization: Bearer abcdefghij0123456789",
    "SA_PEM": PEM_B64,
    "OAUTH_CLIENT": "GOCSPX-" + "Ab1_" * 7,
    "SLACK_APP": "xapp-1-A0123456789-1234567890123-abcdef0123456789",
    "OPENAI": "sk-proj-" + "abcdefghij" * 3,
}


def test_credential_shapes_that_passed_the_scanner_are_refused_naming_the_key() -> None:
    entry = ["python", "train.py", "--db=postgresql://app:pa/ss@db/x"]
    _, config = _stack("gke", env=EVASIONS, entrypoint=entry)
    fix = (
        "valid: trainer.secret_env.{0}: projects/P/secrets/NAME (Secret Manager, read on the "
        "node), or a `secure:` value (`" + SET_SECRET.replace("{}", "{0}") + "`)"
    )
    held = {
        "PG_URL": "a URL with a password",
        "PG_DOLLAR": "a URL with a password",
        "API_URL": "a value for api_key",
        "HOOK": "a value for token",
        "FEED": "a value for access_token",
        "HEADER": "an HTTP authorization header",
        "SA_PEM": "a private key (base64)",
        "OAUTH_CLIENT": "a Google OAuth client secret",
        "SLACK_APP": "a Slack token",
        "OPENAI": "an API key (sk-)",
    }
    errors = _errors(config)
    assert errors == [
        "trainer.env.DB_PASS: looks like a secret, and env values are stored in plain text; "
        "valid: trainer.secret_env.DB_PASS: projects/P/secrets/NAME, or a `secure:` value "
        f"({SET_SECRET.format('DB_PASS')})",
        *(
            f"trainer.env.{name}: holds {what} {IN_CLEAR}; {fix.format(name)}"
            for name, what in held.items()
        ),
        f"trainer.entrypoint[2]: holds a URL with a password {IN_CLEAR} (and every process "
        "listing on the node); valid: your code reads it from the environment, set by "
        "trainer.secret_env (Secret Manager) or a `secure:` trainer.env value",
    ]
    for value in (*EVASIONS.values(), "pa/ss"):
        assert value not in "\n".join(errors)
    # The policy pack uses the same scanner on any input: the same shapes are refused there.
    # (DB_PASS's name is what says it: in a script, `DB_PASS=...` is a credential by name.)
    found = {name: find_credential(f"{name}={value}") for name, value in EVASIONS.items()}
    assert {n: f.words for n, f in found.items() if f is not None} == {
        **{n: f"contains {kind}" for n, kind in held.items() if not kind.startswith("a value")},
        "API_URL": "sets api_key",
        "HOOK": "sets token",
        "FEED": "sets access_token",
        "DB_PASS": "sets DB_PASS",
    }
    args = [f"--{name.lower()}={value}" for name, value in EVASIONS.items() if name != "DB_PASS"]
    job = Resource("pulumi-python:dynamic/vertex:CustomJob", "job", {"body": {"args": args}})
    messages = [v.message for v in evaluate([job], Context()) if "plaintext" in v.message]
    words = {**{n: f.words for n, f in found.items() if f is not None}}
    assert messages == [
        f"body.args[{i}] {words[name]} in plaintext; {FIX_SECRET}"
        for i, name in enumerate(n for n in EVASIONS if n != "DB_PASS")
    ]


def test_credentials_and_local_paths_in_requirements_are_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    token = "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH1234"
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "requirements.txt").write_text(
        "numpy>=1.26\n"
        f"y @ git+https://{token}@github.com/x/y.git\n"
        "# a comment\n"
        "z @ https://user:hunter2@pypi.example/z-1.0.tar.gz\n"
        "mylib @ file:///home/me/mylib\n"
    )
    _, config = _stack(
        "gke",
        source=str(tmp_path),
        requirements="requirements.txt",
        entrypoint=["python", "train.py"],
    )
    errors = _errors(config)
    fix = (
        "in clear, which plans, the package and every node would show; valid: a requirement "
        "without credentials (a public index or URL, or the code itself in trainer.source)"
    )
    assert errors == [
        "trainer.requirements: line 5 'mylib @ file:///home/me/mylib' is not a requirement (a "
        "file: URL is a path on this machine, which no node has; put the code in source); "
        "valid: PEP 508 requirements, one per line (e.g. 'numpy>=1.26'), no pip options",
        f"trainer.requirements: line 2 holds a GitHub token {fix}",
        f"trainer.requirements: line 4 holds a URL with a password {fix}",
    ]
    assert token not in "\n".join(errors) and "hunter2" not in "\n".join(errors)

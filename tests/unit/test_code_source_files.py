"""What of `trainer.source` is packaged, through `trainstack plan --config-file`: the
folder's `.gcloudignore`, the secrets left out by default, links leaving the folder refused
(exit 2, one line each), and the plan's listing of what goes and what stays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.infra.cli import app
from trainstack.infra.code_plan import code_rows

runner = CliRunner()

GKE = {
    "gcp:project": "p",
    "gcp:region": "us-central1",
    "trainstack:gpu_cluster": {
        "backend": "gke",
        "machine_type": "a2-highgpu-8g",
        "node_count": 2,
        "zone": "us-central1-a",
    },
}
OPENSSH_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
# A key file as google-auth reads one: `type` picks the reader (google/auth/_default.py
# _SERVICE_ACCOUNT_TYPE), which needs client_email and token_uri
# (google/oauth2/service_account.py from_service_account_info) and signs with `private_key`
# (google/auth/crypt/base.py FromServiceAccountMixin.from_service_account_info).
SA_KEY = json.dumps(
    {
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "0123",
        "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQ==\n-----END PRIVATE KEY-----\n",
        "client_email": "trainer@p.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
)
CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _folder(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def code(tmp_path: Path) -> Path:
    return _folder(
        tmp_path / "code",
        {
            "train.py": "print('training')\n",  # 18 bytes
            "lib/util.py": "MSG = 'hello'\n",  # 14 bytes
            "ca.pem": CERT,  # 59 bytes: a certificate, no key, so it goes
            ".env": "HF_TOKEN=hf_abc\n",
            "id_rsa": OPENSSH_KEY,
            "keys/sa-key.json": SA_KEY,
            "tls.key": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n",
            ".npmrc": "//registry.npmjs.org/:_authToken=npm_abc\n",
            ".netrc": "machine example.com login me password pw\n",
            "data/shard-0.bin": "x" * 100,
            "notes.md": "notes\n",
            ".gcloudignore": "# what stays here\ndata/\n*.md\n",
        },
    )


def _config_file(tmp_path: Path, code: Path) -> Path:
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"]}
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump({"config": {**GKE, "trainstack:trainer": trainer}}))
    return path


def _plan(tmp_path: Path, code: Path) -> dict[str, Any]:
    result = runner.invoke(
        app, ["plan", "--config-file", str(_config_file(tmp_path, code)), "--json"]
    )
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def _errors(tmp_path: Path, code: Path) -> list[str]:
    result = runner.invoke(app, ["plan", "--config-file", str(_config_file(tmp_path, code))])
    assert result.exit_code == 2, result.output
    # One `error:` line per problem, each naming the stack; the problems themselves are
    # compared exactly by the callers.
    lines = result.stderr.splitlines()
    errors = [line.removeprefix("error: stack 'mine': ") for line in lines]
    assert lines == [f"error: stack 'mine': {e}" for e in errors]
    return errors


def test_plan_lists_what_is_packaged_and_what_is_left_out(tmp_path: Path, code: Path) -> None:
    entry = _plan(tmp_path, code)["code"]
    assert entry["files"] == {
        "count": 3,
        "bytes": 91,
        "largest": [
            {"path": "ca.pem", "bytes": 59},
            {"path": "train.py", "bytes": 18},
            {"path": "lib/util.py", "bytes": 14},
        ],
        "ignore_file": ".gcloudignore",
        "ignored": {"count": 2, "first": ["data/", "notes.md"]},
        "excluded": [
            {"path": ".env", "why": "dotenv file"},
            {"path": ".netrc", "why": "netrc credentials"},
            {"path": ".npmrc", "why": "npm auth token"},
            {"path": "id_rsa", "why": "SSH private key"},
            {"path": "keys/sa-key.json", "why": "Google credentials"},
            {"path": "tls.key", "why": "private key"},
        ],
    }
    digest = entry["source_sha256"]
    assert code_rows(entry)[:3] == [
        ("source", f"{code} (sha256 {digest[:16]})"),
        ("files", "3 files, 91 B (ignore file .gcloudignore)"),
        ("largest", "ca.pem 59 B, train.py 18 B, lib/util.py 14 B"),
    ]
    assert dict(code_rows(entry))["left out"] == (
        ".env (dotenv file), .netrc (netrc credentials), .npmrc (npm auth token), id_rsa "
        "(SSH private key), keys/sa-key.json (Google credentials), tls.key (private key)"
    )
    assert dict(code_rows(entry))["ignored"] == "data/, notes.md"


def test_digest_follows_the_packaged_files_only(tmp_path: Path, code: Path) -> None:
    digest = _plan(tmp_path, code)["code"]["source_sha256"]
    assert _plan(tmp_path, code)["code"]["source_sha256"] == digest  # deterministic
    (code / ".env").write_text("HF_TOKEN=hf_rotated\n")
    (code / "id_rsa").write_text(OPENSSH_KEY.replace("AAAA", "BBBB"))
    (code / "keys" / "sa-key.json").write_text(SA_KEY.replace("0123", "4567"))
    (code / "data" / "shard-1.bin").write_text("y")
    (code / "notes.md").write_text("more notes\n")
    assert _plan(tmp_path, code)["code"]["source_sha256"] == digest  # left out: no relaunch
    (code / "lib" / "util.py").write_text("MSG = 'changed'\n")
    changed = _plan(tmp_path, code)["code"]["source_sha256"]
    assert changed != digest
    (code / "ca.pem").write_text(CERT + CERT)
    assert _plan(tmp_path, code)["code"]["source_sha256"] not in (digest, changed)


def test_links_leaving_the_folder_are_refused(tmp_path: Path, code: Path) -> None:
    outside = _folder(tmp_path / "home", {".ssh/config": "Host *\n"})
    (code / "ssh-config").symlink_to(outside / ".ssh" / "config")
    (code / "home").symlink_to(outside)
    (code / "gone.py").symlink_to(code / "missing.py")
    (code / "alias.py").symlink_to("train.py")  # inside: packaged as a copy, as before
    assert _errors(tmp_path, code) == [
        f"trainer.source: link 'home' points to '{outside}', outside the folder ({code}); "
        f"valid: a link to a file inside the folder, a copy of it, or 'home' in "
        f"{code}/.gcloudignore to leave it out",
        f"trainer.source: link 'gone.py' points to '{code}/missing.py', which does not exist "
        f"({code}); valid: a link to a file inside the folder, a copy of it, or 'gone.py' in "
        f"{code}/.gcloudignore to leave it out",
        f"trainer.source: link 'ssh-config' points to '{outside}/.ssh/config', outside the "
        f"folder ({code}); valid: a link to a file inside the folder, a copy of it, or "
        f"'ssh-config' in {code}/.gcloudignore to leave it out",
    ]
    with (code / ".gcloudignore").open("a") as ignore:
        ignore.write("/home\nssh-config\ngone.py\n")
    files = _plan(tmp_path, code)["code"]["files"]
    assert files["ignored"] == {
        "count": 5,
        "first": ["data/", "gone.py", "home/", "notes.md", "ssh-config"],
    }
    assert [f["path"] for f in files["largest"]] == [
        "ca.pem",
        "alias.py",
        "train.py",
        "lib/util.py",
    ]


def test_a_link_to_a_secret_is_left_out_as_the_secret(tmp_path: Path, code: Path) -> None:
    (code / "settings").symlink_to(".env")
    excluded = _plan(tmp_path, code)["code"]["files"]["excluded"]
    assert {"path": "settings", "why": "dotenv file"} in excluded
    assert len(excluded) == 7


def test_negation_puts_back_only_a_file_without_a_secret(tmp_path: Path, code: Path) -> None:
    (code / ".env.example").write_text("# copy to .env\nHF_TOKEN=\nWANDB_MODE=\n")
    (code / ".env.prod").write_text("export HF_TOKEN='hf_prod'\n")
    (code / ".gcloudignore").write_text("data/\n*.md\n!.env.example\n!.env.prod\n")
    assert _errors(tmp_path, code) == [
        "trainer.source: '.env.prod' is put back by '!.env.prod' (.gcloudignore line 4) but "
        "holds a secret (dotenv file); valid: remove that pattern, or keep the secret out of "
        "the folder (trainer.secret_env reads it from Secret Manager)"
    ]
    (code / ".env.prod").write_text("export HF_TOKEN=''\n")
    files = _plan(tmp_path, code)["code"]["files"]
    # Put back, both without values: .env.example (37 bytes), .env.prod (19).
    assert [(f["path"], f["bytes"]) for f in files["largest"]] == [
        ("ca.pem", 59),
        (".env.example", 37),
        (".env.prod", 19),
        ("train.py", 18),
        ("lib/util.py", 14),
    ]
    assert files["count"] == 5
    assert files["excluded"][0] == {"path": ".env", "why": "dotenv file"}


def test_ignore_file_includes_gitignore_only_when_asked(tmp_path: Path, code: Path) -> None:
    (code / ".gitignore").write_text("*.log\ncheckpoints/\n")
    (code / "run.log").write_text("log\n")
    (code / ".gcloudignore").unlink()
    files = _plan(tmp_path, code)["code"]["files"]
    # A .gitignore alone changes nothing: gcloud would write a .gcloudignore including it.
    assert (files["ignore_file"], files["count"]) == (None, 7)
    (code / ".gcloudignore").write_text("#!include:.gitignore\n.gitignore\ndata/\n*.md\n")
    files = _plan(tmp_path, code)["code"]["files"]
    assert files["ignored"] == {"count": 4, "first": [".gitignore", "data/", "notes.md", "run.log"]}
    assert files["count"] == 3

    (code / ".gcloudignore").write_text("#!include:../.gitignore\n")
    assert _errors(tmp_path, code) == [
        "trainer.source: .gcloudignore line 1: '#!include:../.gitignore' includes no file of "
        "the folder; valid: #!include:NAME of a file at the top of the folder (e.g. .gitignore)"
    ]


def test_a_file_in_an_ignored_folder_cannot_be_put_back(tmp_path: Path, code: Path) -> None:
    # git's rule, which gcloud keeps ("if a parent directory is ignored, its children cannot
    # be re-included", googlecloudsdk/command_lib/util/gcloudignore.py FileChooser.IsIncluded).
    (code / ".gcloudignore").write_text("data/\n!data/shard-0.bin\n*.md\n")
    files = _plan(tmp_path, code)["code"]["files"]
    assert files["ignored"] == {"count": 2, "first": ["data/", "notes.md"]}
    assert files["count"] == 3


def test_a_virtualenv_by_any_name_is_left_out_and_said(tmp_path: Path) -> None:
    # What `python -m venv venv` writes (a Pulumi program's `virtualenv: venv`).
    code = _folder(
        tmp_path / "code",
        {
            "train.py": "print('training')\n",
            "venv/pyvenv.cfg": "home = /usr/bin\n",
            "venv/lib/python3.11/site-packages/torch/__init__.py": "x = 1\n",
            "tools/env/pyvenv.cfg": "home = /usr/bin\n",
            "tools/run.py": "print('tool')\n",
        },
    )
    entry = _plan(tmp_path, code)["code"]
    assert entry["files"]["count"] == 2
    assert entry["files"]["excluded"] == [
        {"path": "tools/env/", "why": "Python virtualenv"},
        {"path": "venv/", "why": "Python virtualenv"},
    ]
    assert dict(code_rows(entry))["left out"] == (
        "tools/env/ (Python virtualenv), venv/ (Python virtualenv)"
    )

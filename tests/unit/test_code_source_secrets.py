"""Secrets in `trainer.source` found whatever their name, case or encoding, and what cannot
be packaged (a named pipe, a file over the caps, a name that is not UTF-8) refused in one line
naming the file before anything is read, through `trainstack plan --config-file`."""

from __future__ import annotations

import base64
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.unit.test_code_source_files import OPENSSH_KEY, SA_KEY, _errors, _folder, _plan
from trainstack.components import _code_files

# A PKCS#1 key as `openssl genrsa` writes it (RFC 7468 section 2 framing, legacy label).
RSA_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"


@pytest.fixture
def code(tmp_path: Path) -> Path:
    return _folder(tmp_path / "code", {"train.py": "print('training')\n"})


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fails the test instead of blocking for ever (a read of a named pipe with no writer)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("trainstack plan blocked reading the folder")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_keys_are_left_out_whatever_their_name_case_or_encoding(tmp_path: Path, code: Path) -> None:
    sa = json.loads(SA_KEY)
    _folder(
        code,
        {
            "deploy_key": OPENSSH_KEY,
            "id_rsa.old": RSA_KEY,
            "sub/creds.JSON": SA_KEY,
            "sa-key.json.bak": SA_KEY,
            "service-account": SA_KEY,
            "keys.json": json.dumps([{"name": "ci"}, sa]),
            ".aws/credentials": "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            ".aws/config": "[default]\nregion = us-east-1\n",
            ".envrc": "export HF_TOKEN=hf_abc\n",
            ".docker/config.json": '{"auths": {"ghcr.io": {"auth": "dXNlcjpwdw=="}}}',
            ".kube/config": "users:\n- name: me\n  user:\n    token: abc\n",
            ".pgpass": "db:5432:app:app:hunter2\n",
            ".ENV": "WANDB_API_KEY=abc\n",
        },
    )
    (code / "utf16.json").write_text(SA_KEY, encoding="utf-16")  # with a BOM
    (code / "utf16le.json").write_bytes(SA_KEY.encode("utf-16-le"))  # without
    (code / "bom.json").write_bytes(b"\xef\xbb\xbf" + SA_KEY.encode())
    files = _plan(tmp_path, code)["code"]["files"]
    assert files["excluded"] == [
        {"path": ".ENV", "why": "dotenv file"},
        {"path": ".aws/credentials", "why": "AWS credentials"},
        {"path": ".docker/config.json", "why": "Docker credentials"},
        {"path": ".envrc", "why": "direnv file"},
        {"path": ".kube/config", "why": "kubectl credentials"},
        {"path": ".pgpass", "why": "PostgreSQL password file"},
        {"path": "bom.json", "why": "Google credentials"},
        {"path": "deploy_key", "why": "private key"},
        {"path": "id_rsa.old", "why": "private key"},
        {"path": "keys.json", "why": "Google credentials"},
        {"path": "sa-key.json.bak", "why": "Google credentials"},
        {"path": "service-account", "why": "Google credentials"},
        {"path": "sub/creds.JSON", "why": "Google credentials"},
        {"path": "utf16.json", "why": "Google credentials"},
        {"path": "utf16le.json", "why": "Google credentials"},
    ]
    assert [f["path"] for f in files["largest"]] == [".aws/config", "train.py"]


def test_a_key_inside_code_is_refused_when_put_back(tmp_path: Path, code: Path) -> None:
    (code / "fixtures.py").write_text(f"KEY = '''{RSA_KEY}'''\n")
    (code / ".gcloudignore").write_text("!fixtures.py\n")
    assert _errors(tmp_path, code) == [
        "trainer.source: 'fixtures.py' is put back by '!fixtures.py' (.gcloudignore line 1) "
        "but holds a secret (private key); valid: remove that pattern, or keep the secret out "
        "of the folder (trainer.secret_env reads it from Secret Manager)"
    ]


def test_a_named_pipe_is_refused_not_read(tmp_path: Path, code: Path, no_hang: None) -> None:
    os.mkfifo(code / "events")
    assert _errors(tmp_path, code) == [
        "trainer.source: 'events' is a named pipe, not a regular file; valid: regular files "
        f"only, or 'events' in {code / '.gcloudignore'} to leave it out"
    ]
    (code / ".gcloudignore").write_text("events\n")
    assert _plan(tmp_path, code)["code"]["files"]["count"] == 1


def test_a_file_over_the_cap_is_refused_by_its_size(tmp_path: Path, code: Path) -> None:
    # Sparse: the size is what the check reads, so no GiB is written or read.
    with (code / "weights.bin").open("wb") as f:
        f.truncate(2**30)
    assert _errors(tmp_path, code) == [
        "trainer.source: 'weights.bin' is 1,024.0 MiB, over the 100.0 MiB a packaged file may "
        "hold; valid: data and weights in Cloud Storage (gs://), or 'weights.bin' in "
        f"{code / '.gcloudignore'} to leave it out"
    ]


def test_files_over_the_total_cap_are_refused_once(
    tmp_path: Path, code: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_code_files, "MAX_TOTAL_BYTES", 40)
    # a.py, b.py, c.py, train.py in turn: 20 + 20 fit, c.py goes over, train.py is not read.
    _folder(code, {"a.py": "x" * 20, "b.py": "x" * 20, "c.py": "x" * 20})
    assert _errors(tmp_path, code) == [
        "trainer.source: the files packaged hold over the 0.0 MiB a package may hold (at "
        f"'c.py'); valid: data and weights in Cloud Storage (gs://), or {code / '.gcloudignore'} "
        "leaving them out"
    ]


def test_a_name_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, code: Path) -> None:
    fd = os.open(os.fsencode(code) + b"/caf\xe9.py", os.O_CREAT | os.O_WRONLY)
    os.close(fd)
    os.mkdir(os.fsencode(code) + b"/d\xff")
    # The folder first: os.walk gives a folder's subfolders before its files are listed.
    assert _errors(tmp_path, code) == [
        "trainer.source: the name 'd\\udcff' is not UTF-8 (the escapes are its undecodable "
        "bytes); valid: a UTF-8 name (rename it), or .gcloudignore listing it to leave it out",
        "trainer.source: the name 'caf\\udce9.py' is not UTF-8 (the escapes are its "
        "undecodable bytes); valid: a UTF-8 name (rename it), or .gcloudignore listing it to "
        "leave it out",
    ]


def test_env_files_under_other_names_and_keys_in_other_shapes_are_left_out(
    tmp_path: Path, code: Path
) -> None:
    """The attack's folder: docker-compose's `env_file` names, a shell script exporting a key,
    a PuTTY key and a base64 service-account key all shipped before. A module named env
    and a script that only reads a variable still go; `!prod.env` puts an empty one back."""
    _folder(
        code,
        {
            "prod.env": "DATABASE_URL=postgresql://app:hunter2@db/app\n",
            "env.production": "API_TOKEN=abc123\n",
            "secrets.sh": "#!/bin/sh\nexport API_KEY=sk-0123456789abcdefghijklmn\n",
            "run.sh": "#!/bin/sh\nexport HF_TOKEN=$HF_TOKEN\nexec python train.py\n",
            "env.py": "config = context.config\n",
            "keys/key.ppk": "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n",
            "notes/putty.txt": "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\n",
            "conf/sa.b64": base64.b64encode(SA_KEY.encode()).decode() + "\n",
            "conf/wrapped.b64": base64.encodebytes(SA_KEY.encode()).decode(),
            "empty.env": "WANDB_API_KEY=\n",
        },
    )
    (code / ".gcloudignore").write_text("!empty.env\n")
    files = _plan(tmp_path, code)["code"]["files"]
    assert files["excluded"] == [
        {"path": "conf/sa.b64", "why": "base64 Google credentials"},
        {"path": "conf/wrapped.b64", "why": "base64 Google credentials"},
        {"path": "env.production", "why": "dotenv file"},
        {"path": "keys/key.ppk", "why": "PuTTY private key"},
        {"path": "notes/putty.txt", "why": "PuTTY private key"},
        {"path": "prod.env", "why": "dotenv file"},
        {"path": "secrets.sh", "why": "shell script setting a credential"},
    ]
    assert sorted(f["path"] for f in files["largest"]) == [
        "empty.env",
        "env.py",
        "run.sh",
        "train.py",
    ]

"""The secrets `trainstack.components._code_files` leaves out of your code's package: the
rules (`SECRET_RULES`), each with where its names or its content check come from.

Two kinds of rule:

- By name: files whose name says credential (dotenv and direnv files, SSH keys, key stores,
  netrc, the AWS, Docker and kubectl credential files, `.pgpass`), matched case-insensitively
  (`.ENV` is `.env`) at any depth. They are left out whatever they hold; their content check
  only decides whether a `!pattern` of the ignore file may put one back.
- By content, on every file whatever its name, case or encoding (a BOM, UTF-16): a PEM or
  PuTTY private key, and a Google credential file (a service-account key) anywhere in a JSON
  document, or base64-encoded; in shell scripts, a variable set to a credential the policy's
  scanner finds (`export API_KEY=sk-...`). A key saved as `deploy_key`, `id_rsa.old` or
  `sa-key.json.bak` is as much a key.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from pathspec import GitIgnoreSpec

# RFC 7468 section 10 (PKCS#8 "PRIVATE KEY"), 11 ("ENCRYPTED PRIVATE KEY"), and the legacy
# labels OpenSSL and OpenSSH write ("RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY",
# "OPENSSH PRIVATE KEY"): the opening line of gitleaks' `private-key` rule
# (gitleaks/gitleaks cmd/generate/config/rules/privatekey.go, `(?i)-----BEGIN[ A-Z0-9_-]{0,100}
# PRIVATE KEY(?: BLOCK)?-----` then the body), without the body: a truncated key is one too.
_PEM_PRIVATE_KEY: Final = re.compile(r"(?i)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_DOTENV_VALUE: Final = re.compile(
    r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.]*\s*=[ \t]*(?P<value>[^#\n]*)", re.MULTILINE
)
_NPM_TOKEN: Final = re.compile(r"(?:_authToken|_auth|_password)\s*=\s*\S")
_PYPIRC_PASSWORD: Final = re.compile(r"^\s*password\s*[=:]\s*\S", re.MULTILINE)
_NETRC_PASSWORD: Final = re.compile(r"(?:^|\s)password\s+\S")
_URL_PASSWORD: Final = re.compile(r"://[^\s/:@]*:[^\s/@]+@")
# https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html: the
# `credentials` file's `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`.
_AWS_KEY: Final = re.compile(r"(?im)^\s*aws_(?:secret_access_key|session_token)\s*=\s*\S")
# https://docs.docker.com/reference/cli/docker/login/: without a credential store, `docker
# login` keeps the credentials base64-encoded in `auths` of `$HOME/.docker/config.json`
# (`"auth"`, or an `"identitytoken"`).
_DOCKER_AUTH: Final = re.compile(r"\"(?:auth|identitytoken)\"\s*:\s*\"[^\"]")
# https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/:
# "By default, kubectl looks for a file named config in the $HOME/.kube directory"; its
# `users[].user` holds `token`, `client-key-data` or `password`
# (https://kubernetes.io/docs/reference/config-api/kubeconfig.v1/ AuthInfo).
_KUBE_CREDENTIAL: Final = re.compile(r"(?m)^\s*(?:token|client-key-data|password)\s*:\s*[^\s#]")
# https://www.postgresql.org/docs/current/libpq-pgpass.html: "The file .pgpass in a user's
# home directory can contain passwords", one `hostname:port:database:username:password` a
# line; `#` starts a comment.
_PGPASS_ENTRY: Final = re.compile(r"(?m)^[^#\n]*:[^\n]*:[^\n]*:[^\n]*:\S")

# google-auth's credential files (google/auth/_default.py, the `_*_TYPE` constants read by
# load_credentials_from_file) and the fields that hold their secret: a service account's
# `private_key`, a user's `refresh_token` / `client_secret`, an impersonation's
# `source_credentials` (another credential). An `external_account` config holds none.
_GOOGLE_CREDENTIAL_TYPES: Final = frozenset(
    {
        "service_account",
        "authorized_user",
        "external_account_authorized_user",
        "impersonated_service_account",
        "gdch_service_account",
    }
)
_GOOGLE_SECRET_FIELDS: Final = (
    "private_key",
    "refresh_token",
    "client_secret",
    "source_credentials",
)
_JSON_DEPTH: Final = 8
"""How deep inside lists and objects a credential is looked for."""
_BASE64_RUN: Final = re.compile(r"[A-Za-z0-9+/_-]{76,}(?:=*\s*[A-Za-z0-9+/_-]{4,})*={0,2}")
_BASE64_RUNS_TRIED: Final = 16
"""Runs decoded per file at most (the first ones): a data file of base64 stays cheap."""
# PuTTY's key files open with `PuTTY-User-Key-File-<version>: <algorithm>` (PuTTY manual,
# Appendix C "PPK file format", C.3 "Overall format of a PPK file":
# https://tartarus.org/~simon/putty-snapshots/htmldoc/AppendixC.html; versions 2 and 3).
_PUTTY_KEY: Final = re.compile(r"(?m)^PuTTY-User-Key-File-\d+:")


def text(data: bytes) -> str:
    """`data` decoded as JSON detects its encoding (RFC 8259 section 8.1 names UTF-8; a BOM or
    the pattern of zero bytes in the first four says UTF-16 or UTF-32, `json.detect_encoding`),
    so a key saved by an editor in UTF-16 reads as one."""
    return data.decode(json.detect_encoding(data), errors="replace")


def _finds(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda content: pattern.search(content) is not None


def _dotenv_values(content: str) -> bool:
    values = (m["value"].strip().strip("'\"") for m in _DOTENV_VALUE.finditer(content))
    return any(values)


def _shell_credential(content: str) -> bool:
    """A variable assignment (`export API_KEY=sk-...`) whose line the policy's credential
    scanner (`trainstack.policies.rules.credentials.find_credential`) finds a credential in;
    a reference (`$HF_TOKEN`) is none."""
    from trainstack.policies.rules.credentials import find_credential

    return any(find_credential(m[0]) is not None for m in _DOTENV_VALUE.finditer(content))


def _base64_google_credentials(content: str) -> bool:
    """A base64 run (standard or URL-safe alphabet, wrapped or not, from one MIME line of 76
    characters, RFC 2045 section 6.8) that decodes to Google credentials
    (`_google_credentials`): how a key is passed in a CI variable or a Kubernetes Secret's
    `data`."""
    for match in itertools.islice(_BASE64_RUN.finditer(content), _BASE64_RUNS_TRIED):
        run = re.sub(r"\s+", "", match[0])
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4), altchars=b"-_")
        except ValueError:
            continue
        if _google_credentials(decoded.decode("utf-8", errors="replace")):
            return True
    return False


def _objects(doc: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    if depth > _JSON_DEPTH:
        return
    if isinstance(doc, dict):
        yield doc
        items: Any = doc.values()
    elif isinstance(doc, list):
        items = doc
    else:
        return
    for item in items:
        yield from _objects(item, depth + 1)


def _google_credentials(content: str) -> bool:
    if '"type"' not in content or not any(f'"{f}"' in content for f in _GOOGLE_SECRET_FIELDS):
        return False
    try:
        doc: Any = json.loads(content.lstrip("\ufeff"))
    except (ValueError, RecursionError):
        return False
    return any(
        obj.get("type") in _GOOGLE_CREDENTIAL_TYPES
        and any(obj.get(key) for key in _GOOGLE_SECRET_FIELDS)
        for obj in _objects(doc)
    )


@dataclass(frozen=True)
class SecretRule:
    """One kind of file that holds secrets."""

    why: str
    """What it is, as the plan says it."""
    patterns: tuple[str, ...]
    """Its names, gitignore patterns (lower case) matched against the path in the folder in
    lower case; `*` for a content check every file gets."""
    by_name: bool
    """Left out by its name whatever it holds (else only when `holds_secret`)."""
    holds_secret: Callable[[str], bool]
    """Whether this text (`text` of the bytes) holds a secret: decides whether a `!pattern`
    may put it back."""
    spec: GitIgnoreSpec = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", GitIgnoreSpec.from_lines(self.patterns))

    def matches(self, *paths: str) -> bool:
        return any(self.spec.match_file(path.lower()) for path in paths)


SECRET_RULES: Final = (
    # `*.env` and `env.*`: docker-compose's `env_file` names (`prod.env`, `env.production`;
    # https://docs.docker.com/compose/how-tos/environment-variables/set-environment-variables/
    # `env_file: - ./webapp.env`); Python modules named env (alembic's `env.py`) stay.
    SecretRule(
        "dotenv file",
        (".env", ".env.*", "*.env", "env.*", "!env.py", "!env.pyi", "!env.ipynb"),
        True,
        _dotenv_values,
    ),
    # https://direnv.net/: direnv "loads and unloads environment variables" from `.envrc`.
    SecretRule("direnv file", (".envrc",), True, _dotenv_values),
    SecretRule(
        "SSH private key",
        ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"),
        True,
        _finds(_PEM_PRIVATE_KEY),
    ),
    SecretRule("PuTTY private key", ("*.ppk",), True, _finds(_PUTTY_KEY)),
    # Binary key stores (Google's legacy service-account key format is P12): their content
    # cannot be told apart, so they never go.
    SecretRule("PKCS#12 key store", ("*.p12", "*.pfx"), True, lambda _: True),
    SecretRule("netrc credentials", (".netrc", "_netrc"), True, _finds(_NETRC_PASSWORD)),
    SecretRule("git credentials", (".git-credentials",), True, _finds(_URL_PASSWORD)),
    SecretRule("AWS credentials", ("**/.aws/credentials",), True, _finds(_AWS_KEY)),
    SecretRule("Docker credentials", ("**/.docker/config.json",), True, _finds(_DOCKER_AUTH)),
    SecretRule("kubectl credentials", ("**/.kube/config",), True, _finds(_KUBE_CREDENTIAL)),
    SecretRule("PostgreSQL password file", (".pgpass", "pgpass.conf"), True, _finds(_PGPASS_ENTRY)),
    SecretRule("npm auth token", (".npmrc",), False, _finds(_NPM_TOKEN)),
    SecretRule("PyPI password", (".pypirc",), False, _finds(_PYPIRC_PASSWORD)),
    # Every file, whatever its name: a key kept as `deploy_key`, `tls.pem.bak`, `creds.JSON`
    # (a service-account key holds a PEM key too, and is named for what it is).
    SecretRule("Google credentials", ("*",), False, _google_credentials),
    SecretRule("private key", ("*",), False, _finds(_PEM_PRIVATE_KEY)),
    SecretRule("PuTTY private key", ("*",), False, _finds(_PUTTY_KEY)),
    SecretRule("base64 Google credentials", ("*",), False, _base64_google_credentials),
    # Shell scripts that set variables: `export API_KEY=sk-...` in `secrets.sh`.
    SecretRule(
        "shell script setting a credential",
        ("*.sh", "*.bash", "*.zsh", "*.ksh"),
        False,
        _shell_credential,
    ),
)
"""What is left out of every package by default (README: "Your own training code")."""


def secret_rules(*paths: str) -> list[SecretRule]:
    """The rules whose names match any of `paths` (a file and, for a link, its target), in
    `SECRET_RULES` order: the content checks of every file last."""
    return [rule for rule in SECRET_RULES if rule.matches(*paths)]

"""Credentials in text: the one scanner the policy's `secrets-as-secrets` rule and the stack
config's checks of `trainer.env` values and `trainer.entrypoint` arguments share
(`trainstack.infra.config_secrets`), so a value the policy would refuse in a resource is
refused in the stack file first, with the key to fix.

It finds credentials by their shape (private key blocks, a service account key file, URLs
with a password in their userinfo, and the fixed prefixes providers give their keys) and by
their name (`NAME=value`, `--name=value`, `"name": "value"` where the name says credential:
`secret_like`). A finding says what was found, never the value.

    find_credential("postgres://app:hunter2@db:5432/app")   # Credential("a URL with a password")
    find_credential("--hf_token=abc123").words              # "sets hf_token"
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from dataclasses import dataclass

from .model import SECRET, UNKNOWN

_SECRET_WORDS = frozenset(
    {"password", "passwd", "pass", "pwd", "passphrase", "token", "apikey", "accesskey",
     "privatekey"}
)  # fmt: skip
_SECRET_PAIRS = frozenset(
    {
        # An Azure Storage connection string's `AccountKey=`
        # (https://learn.microsoft.com/en-us/azure/storage/common/storage-configure-connection-string).
        ("account", "key"),
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("signing", "key"),
    }
)
# A key ending in one of these names or points at a secret rather than holding it
# (`secretName`, `tokenFile`, `passwordSecretRef`, `token_count`).
_REFERENCE_WORDS = frozenset(
    {
        "name", "names", "ref", "id", "ids", "path", "file", "dir", "version", "uri", "url",
        "mount", "env", "type", "ttl", "expiry", "expiration", "count", "length", "len",
        "size", "limit", "max", "min", "scope", "scopes", "header", "prefix", "suffix",
        "field", "source",
    }
)  # fmt: skip
# In a training stack "token" is as often a text token (`pad_token`, `max_tokens`,
# `per_token_loss`) or a Pulumi type token (`TYPE_TOKEN`) as a credential.
_TEXT_TOKEN_WORDS = frozenset(
    {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "per", "num", "special", "start",
     "end", "vocab", "type"}
)  # fmt: skip
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no"})

CREDENTIALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("a service account key", re.compile(r"\"private_key(?:_id)?\"\s*:")),
    # RFC 3986 section 3.2.1: userinfo is `user:password@` before the host. A password that
    # is a variable (`$DB_PASSWORD`, `${DB_PASSWORD}`, `$(DB_PASSWORD)`: upper case, as
    # environment variables are named) is read at run time, not the secret itself; any other
    # `$...` is a literal (an env value is not shell-expanded). A password may hold a quote
    # (`pa'ss`) or a `/` (drivers such as SQLAlchemy's take it unencoded), never a port and
    # a path (`host:8443/a@b`); the user may not hold a quote (a quoted `'x://` ends there).
    (
        "a URL with a password",
        re.compile(
            r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@'\"]*:"
            r"(?![\s'\"]|\$\{?\(?[A-Z_][A-Z0-9_]*[})]?@|\d+/)[^\s@\"]+@"
        ),
    ),
    # RFC 9110 section 11.6.2 `Authorization: <scheme> <credentials>` (Bearer, RFC 6750
    # section 2.1; Basic, RFC 7617), or a bare bearer token; `Bearer $TOKEN` is a variable.
    (
        "an HTTP authorization header",
        re.compile(
            r"(?i)(?:\bauthorization\s*[:=]\s*[\"']?[a-z]+\s+|\bbearer\s+)"
            r"[A-Za-z0-9._~+/-]{8,}=*"
        ),
    ),
    # Anthropic keys start `sk-ant-`; OpenAI's `sk-` or `sk-proj-` (both providers' docs).
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("an API key (sk-)", re.compile(r"\bsk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}")),
    # OpenAI's project, service account and admin keys: the prefix says it, digits or not.
    ("an API key (sk-)", re.compile(r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}")),
    # Google's OAuth client secrets start `GOCSPX-`: SonarQube's rule S6691 ("Google OAuth
    # client secrets should not be disclosed", `\b(GOCSPX-[\w\-]{28})\b`) and Nosey
    # Parker's np.google.2 ("Google OAuth Client Secret (prefixed)"); from 20 here.
    ("a Google OAuth client secret", re.compile(r"\bGOCSPX-[A-Za-z0-9_\-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("a Google OAuth access token", re.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,})")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    # gitleaks slack.go SlackAppLevelToken `(?i)xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+`.
    ("a Slack token", re.compile(r"(?i)\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+")),
    # The rest follow gitleaks' rules (gitleaks/gitleaks cmd/generate/config/rules/, the
    # function named): stripe.go StripeAccessToken `(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]
    # {10,99}`; jwt.go JWT `ey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9\/\\_-]{17,}\.(?:[a-zA-Z0-9\/\\_-]
    # {10,}={0,2})?`; npm.go NPM `npm_[a-z0-9]{36}` (any case); slack.go SlackWebHookUrl
    # `hooks.slack.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}`, from 20
    # characters here: Slack's own example (https://api.slack.com/messaging/webhooks,
    # `https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX`) is 44
    # and the URL "contains a secret" whatever its length.
    ("a Stripe API key", re.compile(r"\b(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99}")),
    (
        "a JSON Web Token",
        re.compile(
            r"\bey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9/\\_-]{17,}\.(?:[a-zA-Z0-9/\\_-]{10,}={0,2})?"
        ),
    ),
    ("an npm token", re.compile(r"(?i)\bnpm_[a-z0-9]{36}\b")),
    (
        "a Slack webhook URL",
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{20,}"),
    ),
)
"""What a credential looks like, by kind, in the order findings name them."""

# `NAME=value`, `NAME: value`, `--name=value` and `"name": "value"` in scripts and args.
# The value must end the word: `token = os.environ["T"]` reads a secret, it does not hold one.
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])-{0,2}([A-Za-z_][\w.-]*)[\"']?\s*[=:]\s*([\"']?)"
    r"([^\s\"'`;&|()\[\]{}]+)(?=[\s\"'`;&|)]|$)"
)


# A URL's query parameters (RFC 3986 section 3.4, `name=value` joined by `&`, or `;`):
# `?api_key=...`, `&access_token=...` are credentials by name like an assignment, which the
# URL's own `https:` would otherwise swallow.
_QUERY = re.compile(r"[?&;]([A-Za-z_][\w.-]*)=([^&;#\s\"'`]+)")
# A PEM block encoded once more in base64 (a Kubernetes Secret's `data`, a `*.b64` key):
# `-----BEGIN` in base64 from any of its three alignments, decoded to look for a private key.
_BASE64_PEM = re.compile(r"(?:LS0tLS1CRUdJT|0tLS0tQkVHSU|tLS0tLUJFR0lO)[A-Za-z0-9+/]{8,}={0,2}")


def _base64_private_key(text: str) -> bool:
    for match in _BASE64_PEM.finditer(text):
        data = match.group(0).rstrip("=")
        try:
            decoded = base64.b64decode(data[: len(data) // 4 * 4]).decode("latin-1")
        except (binascii.Error, ValueError):
            continue
        if CREDENTIALS[0][1].search(decoded):
            return True
    return False


@dataclass(frozen=True)
class Credential:
    """A credential found in text: its kind, and the name it was assigned to when it was
    found by name."""

    kind: str
    name: str | None = None

    @property
    def words(self) -> str:
        """`contains a Hugging Face token` or `sets HF_TOKEN`: what was found, not the value."""
        return f"sets {self.name}" if self.name else f"contains {self.kind}"


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def secret_like(key: str) -> bool:
    """Whether a key or variable name names a credential (`HF_TOKEN`, `apiKey`...)."""
    words = _words(key)
    if not words or words[-1] in _REFERENCE_WORDS:
        return False
    if any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words)):
        return True
    found = _SECRET_WORDS.intersection(words)
    if found == {"token"} and _TEXT_TOKEN_WORDS.intersection(words):
        return False
    return bool(found)


def plaintext(value: str) -> bool:
    """A literal value, not a secret marker, a reference or a flag."""
    value = value.strip()
    return not (
        value in ("", SECRET, UNKNOWN)
        or value.startswith(("$", "projects/", "sm://"))
        or value.lower() in _NOT_SECRET_VALUES
        or value.isdigit()  # ports, counts, ids
    )


def find_credential(text: str) -> Credential | None:
    """The first credential `text` holds in clear: by shape, else by a credential's name
    assigned a literal value; None when it holds none (or is a secret marker)."""
    if text in (SECRET, UNKNOWN):
        return None
    for kind, pattern in CREDENTIALS:
        if pattern.search(text):
            return Credential(kind)
    if _base64_private_key(text):
        return Credential("a private key (base64)")
    assigned = [(m.group(1), m.group(3)) for m in _ASSIGNMENT.finditer(text)]
    for name, value in [*assigned, *((m.group(1), m.group(2)) for m in _QUERY.finditer(text))]:
        if secret_like(name) and plaintext(value):
            return Credential("a credential", name)
    return None

"""Which files of your code's folder (`trainstack:trainer.source`) are packaged, and which not.

The package (and its digest, what decides a relaunch) holds every file of the folder except:

1. Always: `__pycache__`, `.git`, `.venv` and `.trainstack` folders at any depth,
   `*.pyc`/`*.pyo`, Pulumi stack files (`Pulumi.yaml`, `Pulumi.<stack>.yaml`) and the
   top-level `.gcloudignore`: build leftovers and configuration, so editing them relaunches
   nothing.
2. What the folder's top-level `.gcloudignore` lists, in gitignore syntax with gcloud's
   `#!include:FILE` line (https://cloud.google.com/sdk/gcloud/reference/topic/gcloudignore:
   "The syntax of .gcloudignore borrows heavily from that of .gitignore"; "If multiple
   patterns match the file name, the last matching pattern takes precedence"; `#!include`
   "will insert the content of a .gitignore-style file ... at the point of the include line.
   It does not recurse ... and cannot be anywhere but the top-level directory"). Only that
   one file is read: no `.gcloudignore` or `.gitignore` of a subfolder, and a `.gitignore`
   alone changes nothing (gcloud would write a `.gcloudignore` that includes it into your
   folder; trainstack writes nothing there), so `#!include:.gitignore` is how to honour it.
   As in git, a file inside an ignored folder cannot be put back by a later `!pattern`.
3. Secrets (`SECRET_RULES`), whether or not an ignore file exists. By name, whatever they
   hold: dotenv files, SSH private keys, PKCS#12 key stores, `.netrc`, `.git-credentials`.
   By content, when they hold a secret: `*.pem`/`*.key` with a PEM private key, `*.json`
   Google credentials (a service-account key), `.npmrc` with an auth token, `.pypirc` with a
   password. A `!pattern` in `.gcloudignore` that names one of them puts it back only if its
   content holds no secret (`.env.example` with empty values); one that does is refused.

Links: a link whose target resolves outside the folder (or nowhere) is refused, one problem
naming the link and its target, unless the ignore file leaves it out. Packaged, its target's
bytes would go to the staging bucket and every machine; a link to a folder outside would be
missing on the machines while a local run sees it. Links inside the folder behave as
before: a link to a file is packaged as a copy of its target, a link to a folder is not
followed.

This module is imported by the Pulumi program and the config checks, never on a training
machine: it lives beside the components, outside the trainer package every node installs
(`trainstack.components.trainer_package`), whose dependencies do not include pathspec.
`source_problems` is the config checks' and `LocalTrainingJob`'s check of the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pathspec import GitIgnoreSpec

from trainstack.trainers.common.user_code import StackTrainer, resolve_source

IGNORE_FILE: Final = ".gcloudignore"
"""The ignore file read from the top of the folder (gcloud's name and syntax)."""
LARGEST: Final = 5
"""How many of the largest packaged files the plan names."""
IGNORED_SHOWN: Final = 20
"""How many of the entries the ignore file left out the plan names."""

_EXCLUDED_DIRS: Final = frozenset({"__pycache__", ".git", ".venv", ".trainstack"})
_EXCLUDED_SUFFIXES: Final = (".pyc", ".pyo")
_STACK_FILE: Final = re.compile(r"Pulumi(\.[^/]+)?\.ya?ml")
# gcloud's FileChooser.FromString: a line starting '#' whose rest, left-stripped, starts with
# '!include:' (googlecloudsdk/command_lib/util/gcloudignore.py, FileChooser._INCLUDE_DIRECTIVE).
_INCLUDE: Final = "!include:"

_PEM_PRIVATE_KEY: Final = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
"""PKCS#1 (`RSA`), SEC 1 (`EC`), PKCS#8 (plain and `ENCRYPTED`) and OpenSSH private keys."""
_DOTENV_VALUE: Final = re.compile(
    r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.]*\s*=[ \t]*(?P<value>[^#\n]*)", re.MULTILINE
)
_NPM_TOKEN: Final = re.compile(rb"(?:_authToken|_auth|_password)\s*=\s*\S")
_PYPIRC_PASSWORD: Final = re.compile(rb"^\s*password\s*[=:]\s*\S", re.MULTILINE)
_NETRC_PASSWORD: Final = re.compile(rb"(?:^|\s)password\s+\S")
_URL_PASSWORD: Final = re.compile(rb"://[^\s/:@]*:[^\s/@]+@")
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


def _finds(pattern: re.Pattern[bytes]) -> Callable[[bytes], bool]:
    return lambda data: pattern.search(data) is not None


def _dotenv_values(data: bytes) -> bool:
    values = (m["value"].strip().strip("'\"") for m in _DOTENV_VALUE.finditer(_text(data)))
    return any(values)


def _google_credentials(data: bytes) -> bool:
    if b'"type"' not in data:
        return False
    try:
        doc: Any = json.loads(data)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and doc.get("type") in _GOOGLE_CREDENTIAL_TYPES
        and any(doc.get(key) for key in _GOOGLE_SECRET_FIELDS)
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class SecretRule:
    """One kind of file that holds secrets."""

    why: str
    """What it is, as the plan says it."""
    patterns: tuple[str, ...]
    """Its names, gitignore patterns matched against the path in the folder."""
    by_name: bool
    """Left out by its name whatever it holds (else only when `holds_secret`)."""
    holds_secret: Callable[[bytes], bool]
    """Whether these bytes hold a secret: decides whether a `!pattern` may put it back."""
    spec: GitIgnoreSpec = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", GitIgnoreSpec.from_lines(self.patterns))


SECRET_RULES: Final = (
    SecretRule("dotenv file", (".env", ".env.*"), True, _dotenv_values),
    SecretRule(
        "SSH private key",
        ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"),
        True,
        _finds(_PEM_PRIVATE_KEY),
    ),
    # Binary key stores (Google's legacy service-account key format is P12): their content
    # cannot be told apart, so they never go.
    SecretRule("PKCS#12 key store", ("*.p12", "*.pfx"), True, lambda _: True),
    SecretRule("netrc credentials", (".netrc", "_netrc"), True, _finds(_NETRC_PASSWORD)),
    SecretRule("git credentials", (".git-credentials",), True, _finds(_URL_PASSWORD)),
    SecretRule("private key", ("*.pem", "*.key"), False, _finds(_PEM_PRIVATE_KEY)),
    SecretRule("Google credentials", ("*.json",), False, _google_credentials),
    SecretRule("npm auth token", (".npmrc",), False, _finds(_NPM_TOKEN)),
    SecretRule("PyPI password", (".pypirc",), False, _finds(_PYPIRC_PASSWORD)),
)
"""What is left out of every package by default (README: "Your own training code")."""


@dataclass(frozen=True)
class _Pattern:
    file: str
    line: int
    text: str


class IgnoreFile:
    """The folder's `.gcloudignore`, its `#!include:` files inserted where they stand."""

    def __init__(self, root: Path) -> None:
        self.problems: list[str] = []
        self.patterns = self._read(root, IGNORE_FILE, nested=False)
        self.spec = GitIgnoreSpec.from_lines(p.text for p in self.patterns)

    def _read(self, root: Path, name: str, nested: bool) -> list[_Pattern]:
        patterns: list[_Pattern] = []
        text = (root / name).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            if not line.startswith("#"):
                patterns.append(_Pattern(name, number, line))
                continue
            rest = line[1:].lstrip()
            if nested or not rest.startswith(_INCLUDE):
                continue  # a comment; gcloud does not follow an include inside an include
            included = rest[len(_INCLUDE) :]
            if "/" in included or not (root / included).is_file():
                self.problems.append(
                    f"{name} line {number}: {line!r} includes no file of the folder; valid: "
                    "#!include:NAME of a file at the top of the folder (e.g. .gitignore)"
                )
                continue
            patterns += self._read(root, included, nested=True)
        return patterns

    def check(self, path: str) -> tuple[bool, _Pattern | None]:
        """Whether `path` (posix, relative; a folder ends in '/') is left out, and the
        `!pattern` that put it back, if the last pattern that matched is one."""
        result = self.spec.check_file(path)
        if result.include is None or result.index is None:
            return False, None
        return result.include, None if result.include else self.patterns[result.index]


@dataclass(frozen=True)
class LeftOut:
    """A file left out of the package by default."""

    path: str
    why: str


@dataclass
class CodeFiles:
    """What of a folder is packaged, what is left out, and the problems that refuse it."""

    files: list[tuple[str, bytes]] = field(default_factory=list)
    """(posix path in the folder, bytes), sorted: what the package holds."""
    excluded: list[LeftOut] = field(default_factory=list)
    """Secrets left out by default (`SECRET_RULES`)."""
    ignored: list[str] = field(default_factory=list)
    """What the ignore file left out (a folder once, as 'name/'), sorted."""
    ignore_file: str | None = None
    """`.gcloudignore` when the folder has one."""
    problems: list[str] = field(default_factory=list)
    """Why the folder cannot be packaged (links leaving it, secrets put back, a bad
    `#!include`), each '<what>; valid: <allowed>'."""

    @property
    def sha256(self) -> str:
        """Digest of the packaged files (paths and bytes): what `trainstack plan` shows."""
        digest = hashlib.sha256()
        for relpath, data in self.files:
            digest.update(f"{relpath}\0{len(data)}\0".encode())
            digest.update(data)
        return digest.hexdigest()

    def summary(self) -> dict[str, Any]:
        """The plan's `code.files`: count, total bytes, the largest, what was left out."""
        largest = sorted(self.files, key=lambda f: (-len(f[1]), f[0]))[:LARGEST]
        return {
            "count": len(self.files),
            "bytes": sum(len(data) for _, data in self.files),
            "largest": [{"path": path, "bytes": len(data)} for path, data in largest],
            "ignore_file": self.ignore_file,
            "ignored": {"count": len(self.ignored), "first": self.ignored[:IGNORED_SHOWN]},
            "excluded": [{"path": e.path, "why": e.why} for e in self.excluded],
        }


def _rel(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"


def _secret_rule(*paths: str) -> SecretRule | None:
    for rule in SECRET_RULES:
        if any(rule.spec.match_file(path) for path in paths):
            return rule
    return None


def _link_problem(root: Path, rel: str, path: Path) -> tuple[str | None, Path]:
    """The problem with the link at `path`, if any, and where it resolves."""
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(root):
        where = "outside the folder"
    elif not target.exists():
        where = "which does not exist"
    else:
        return None, target
    return (
        f"link {rel!r} points to {str(target)!r}, {where} ({root}); valid: a link to a file "
        f"inside the folder, a copy of it, or {rel!r} in {root / IGNORE_FILE} to leave it out"
    ), target


class _Walk:
    """One pass over the folder, filling a `CodeFiles`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.out = CodeFiles()
        self.ignore: IgnoreFile | None = None
        if (root / IGNORE_FILE).is_file():
            self.ignore = IgnoreFile(root)
            self.out.ignore_file = IGNORE_FILE
            self.out.problems += self.ignore.problems

    def ignored(self, rel: str) -> tuple[bool, _Pattern | None]:
        if self.ignore is None:
            return False, None
        left_out, back = self.ignore.check(rel)
        if left_out:
            self.out.ignored.append(rel)
        return left_out, back

    def folders(self, here: Path, rel_dir: str, names: list[str]) -> list[str]:
        kept = []
        for name in sorted(names):
            rel = _rel(rel_dir, name)
            if name in _EXCLUDED_DIRS or self.ignored(f"{rel}/")[0]:
                continue
            if (here / name).is_symlink():
                # Not followed (os.walk's default), as before; one leaving the folder is refused.
                problem = _link_problem(self.root, rel, here / name)[0]
                self.out.problems += [problem] if problem else []
                continue
            kept.append(name)
        return kept

    def file(self, here: Path, rel: str) -> None:
        name = rel.rsplit("/", 1)[-1]
        if name.endswith(_EXCLUDED_SUFFIXES) or _STACK_FILE.fullmatch(name) or rel == IGNORE_FILE:
            return
        left_out, back = self.ignored(rel)
        if left_out:
            return
        path, names = here / name, [rel]
        if path.is_symlink():
            problem, target = _link_problem(self.root, rel, path)
            if problem is not None:
                self.out.problems.append(problem)
                return
            names.append(target.relative_to(self.root).as_posix())  # `config -> .env`
        rule = _secret_rule(*names)
        if rule is not None and rule.by_name and back is None:
            self.out.excluded.append(LeftOut(rel, rule.why))
            return
        data = path.read_bytes()
        if rule is not None and rule.holds_secret(data):
            if back is None:
                self.out.excluded.append(LeftOut(rel, rule.why))
                return
            self.out.problems.append(
                f"{rel!r} is put back by {back.text!r} ({back.file} line {back.line}) but holds "
                f"a secret ({rule.why}); valid: remove that pattern, or keep the secret out of "
                "the folder (trainer.secret_env reads it from Secret Manager)"
            )
            return
        self.out.files.append((rel, data))


def code_files(folder: Path) -> CodeFiles:
    """What of `folder` (absolute, resolved) is packaged (see the module's docstring)."""
    walk = _Walk(folder)
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        rel_dir = here.relative_to(folder).as_posix()
        dirnames[:] = walk.folders(here, rel_dir, dirnames)
        for filename in sorted(filenames):
            walk.file(here, _rel(rel_dir, filename))
    out = walk.out
    out.files.sort()
    out.ignored.sort()
    out.excluded.sort(key=lambda e: e.path)
    return out


def source_problems(trainer: StackTrainer, base_dir: Path, prefix: str = "trainer.") -> list[str]:
    """`<prefix>source: ...`, one per problem `code_files` finds in your code's folder (links
    leaving it, secrets put back by the ignore file); none for the bundled trainer or a
    `source` that is not a folder (`user_code_problems` says so)."""
    if trainer.entrypoint is None or trainer.source is None:
        return []
    folder = resolve_source(trainer.source, base_dir)
    if not folder.is_dir():
        return []
    return [f"{prefix}source: {problem}" for problem in code_files(folder).problems]

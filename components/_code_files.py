"""Which files of your code's folder (`trainstack:trainer.source`) are packaged, and which not.

The package (and its digest, what decides a relaunch) holds every file of the folder except:

1. Always: `__pycache__`, `.git`, `.venv` and `.trainstack` folders at any depth,
   `*.pyc`/`*.pyo`, Pulumi stack files (`Pulumi.yaml`, `Pulumi.<stack>.yaml`) and the
   top-level `.gcloudignore`: build leftovers and configuration, so editing them relaunches
   nothing. A virtualenv by any name (a Pulumi program's `virtualenv: venv`) is left out too,
   found by the `pyvenv.cfg` every one holds (`VENV_MARKER`), and listed with the secrets
   (`CodeFiles.excluded`, the plan's "left out" line): the machines install the code's
   `requirements`, never this machine's environment.
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
3. Secrets (`SECRET_RULES`, `trainstack.components._code_secrets`), whether or not an
   ignore file exists. By name (any case, any depth), whatever they hold: dotenv and direnv
   files, SSH private keys, PKCS#12 key stores, `.netrc`, `.git-credentials`,
   `.aws/credentials`, `.docker/config.json`, `.kube/config`, `.pgpass`. By content, in
   every file whatever its name or encoding: a PEM private key, Google credentials (a
   service-account key) anywhere in a JSON document; and `.npmrc` with an auth token,
   `.pypirc` with a password. A `!pattern` in `.gcloudignore` that names one of them puts it
   back only if its content holds no secret (`.env.example` with empty values); one that
   does is refused.
4. Nothing but regular files, each at most `MAX_FILE_BYTES` and all at most
   `MAX_TOTAL_BYTES`: a named pipe, a socket or a device, a larger file, and a name that is
   not UTF-8 are refused, one problem naming the file, before any of it is read.

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
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pathspec import GitIgnoreSpec

from trainstack.components._code_secrets import SECRET_RULES, SecretRule, secret_rules
from trainstack.components._code_secrets import text as decoded
from trainstack.trainers.common.user_code import StackTrainer, resolve_source

__all__ = ["SECRET_RULES", "CodeFiles", "SecretRule", "code_files", "source_problems"]

IGNORE_FILE: Final = ".gcloudignore"
"""The ignore file read from the top of the folder (gcloud's name and syntax)."""
LARGEST: Final = 5
"""How many of the largest packaged files the plan names."""
IGNORED_SHOWN: Final = 20
"""How many of the entries the ignore file left out the plan names."""
MAX_FILE_BYTES: Final = 100 * 2**20
"""The largest file packaged: 100 MiB, the size GitHub refuses a file over ("GitHub blocks
files larger than 100 MiB", https://docs.github.com/en/repositories/working-with-files/
managing-large-files/about-large-files-on-github). Code is small; data and weights belong in
Cloud Storage, and the package is built in memory and installed by every machine at start."""
MAX_TOTAL_BYTES: Final = 256 * 2**20
"""The most all packaged files may hold together (256 MiB), for the same reasons. Sizes are
read from the file system before any file is read, so a larger one is never read."""

_EXCLUDED_DIRS: Final = frozenset({"__pycache__", ".git", ".venv", ".trainstack"})
VENV_MARKER: Final = "pyvenv.cfg"
"""The file at the top of every virtual environment: "Running this command creates the
target directory ... and places a pyvenv.cfg file in it with a home key pointing to the
Python installation from which the command was run" (https://docs.python.org/3/library/
venv.html, "Creating virtual environments"); virtualenv >= 20 writes one too."""
VENV_WHY: Final = "Python virtualenv"
_EXCLUDED_SUFFIXES: Final = (".pyc", ".pyo")
_STACK_FILE: Final = re.compile(r"Pulumi(\.[^/]+)?\.ya?ml")
# gcloud's FileChooser.FromString: a line starting '#' whose rest, left-stripped, starts with
# '!include:' (googlecloudsdk/command_lib/util/gcloudignore.py, FileChooser._INCLUDE_DIRECTIVE).
_INCLUDE: Final = "!include:"


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
    """Secrets (`SECRET_RULES`) and virtualenvs (`VENV_MARKER`, as 'name/') left out by
    default."""
    ignored: list[str] = field(default_factory=list)
    """What the ignore file left out (a folder once, as 'name/'), sorted."""
    ignore_file: str | None = None
    """`.gcloudignore` when the folder has one."""
    problems: list[str] = field(default_factory=list)
    """Why the folder cannot be packaged (links leaving it, secrets put back, a bad
    `#!include`), each `<what>; valid: <allowed>`."""

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


_KINDS: Final = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _not_utf8(rel: str) -> str | None:
    """The problem with a name the file system gave as bytes that are not UTF-8 (Python keeps
    them as lone surrogates, os.fsdecode): the package and its digest name files in UTF-8."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return (
            f"the name {rel!r} is not UTF-8 (the escapes are its undecodable bytes); valid: "
            f"a UTF-8 name (rename it), or {IGNORE_FILE} listing it to leave it out"
        )
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
        self.total = 0
        self.over_total = False
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
            if (problem := _not_utf8(rel)) is not None:
                self.out.problems.append(problem)
                continue
            if (here / name).is_symlink():
                # Not followed (os.walk's default), as before; one leaving the folder is refused.
                problem = _link_problem(self.root, rel, here / name)[0]
                self.out.problems += [problem] if problem else []
                continue
            if (here / name / VENV_MARKER).is_file():
                self.out.excluded.append(LeftOut(f"{rel}/", VENV_WHY))
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
        if (problem := _not_utf8(rel)) is not None:
            self.out.problems.append(problem)
            return
        path, names = here / name, [rel]
        if path.is_symlink():
            problem, target = _link_problem(self.root, rel, path)
            if problem is not None:
                self.out.problems.append(problem)
                return
            names.append(target.relative_to(self.root).as_posix())  # `config -> .env`
        rules = secret_rules(*names)
        named = next((rule for rule in rules if rule.by_name), None)
        if named is not None and back is None:
            self.out.excluded.append(LeftOut(rel, named.why))
            return
        data = self._read(path, rel)
        if data is None:
            return
        content = decoded(data)
        rule = next((rule for rule in rules if rule.holds_secret(content)), None)
        if rule is not None:
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

    def _read(self, path: Path, rel: str) -> bytes | None:
        """The file's bytes; None, with the problem, for what is not a regular file (a named
        pipe would block the read for ever) or is over the caps, found by its size first."""
        info = path.stat()
        leave_out = f"or {rel!r} in {self.root / IGNORE_FILE} to leave it out"
        if not stat.S_ISREG(info.st_mode):
            self.out.problems.append(
                f"{rel!r} is {_kind(info.st_mode)}, not a regular file; valid: regular files "
                f"only, {leave_out}"
            )
            return None
        if info.st_size > MAX_FILE_BYTES:
            self.out.problems.append(
                f"{rel!r} is {_mib(info.st_size)}, over the {_mib(MAX_FILE_BYTES)} a packaged "
                f"file may hold; valid: data and weights in Cloud Storage (gs://), {leave_out}"
            )
            return None
        self.total += info.st_size
        if self.total > MAX_TOTAL_BYTES:
            if not self.over_total:
                self.over_total = True
                self.out.problems.append(
                    f"the files packaged hold over the {_mib(MAX_TOTAL_BYTES)} a package may "
                    f"hold (at {rel!r}); valid: data and weights in Cloud Storage (gs://), or "
                    f"{self.root / IGNORE_FILE} leaving them out"
                )
            return None
        return path.read_bytes()


def code_files(folder: Path) -> CodeFiles:
    """What of `folder` (absolute, resolved) is packaged: every file but build leftovers
    and Pulumi stack files, what its top-level `.gcloudignore` lists, secrets and
    virtualenvs; links leaving it, special files and files over the size limits are
    `problems` (the rules and their sources: `trainstack.components._code_files`)."""
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

"""A deployed stack's outputs, for `trainstack logs` and `trainstack status`.

Where they come from, first match wins:

1. `--outputs FILE`: a JSON object of outputs, as `pulumi stack output --json --show-secrets
   --stack NAME` prints it (save that once on a machine with the Pulumi CLI, or in CI);
2. the environment variable `TRAINSTACK_OUTPUTS` naming such a file;
3. the Pulumi CLI: `pulumi stack output --json --show-secrets --stack NAME`, run in the
   current folder's project (`trainstack.infra.project.find_project`) (secrets included because the GKE kubeconfig output is one).

Each failure is one `OutputsError` line: no Pulumi CLI, no such stack, an unreadable file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from trainstack.infra.project import find_project

OUTPUTS_ENV = "TRAINSTACK_OUTPUTS"
"""Names a JSON file of a stack's outputs; `--outputs FILE` wins over it."""
SAVE_HINT = "`pulumi stack output --json --show-secrets --stack {stack} > FILE`"
PULUMI_TIMEOUT_S = 120


class OutputsError(Exception):
    """The stack's outputs cannot be read; the message is the whole error line."""


OUTPUTS_DOC = (
    "a JSON object of stack outputs, as `pulumi stack output --json --show-secrets` prints it"
)


def file_document(path: Path, what: str, valid: str = OUTPUTS_DOC) -> dict[str, Any]:
    """The JSON object in `path` (`what`: the option that named it; `valid`: what it holds)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        reason = str(exc.strerror)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = f"not JSON: {exc}"
    else:
        if isinstance(document, dict):
            return document
        reason = f"a JSON {type(document).__name__}, not an object"
    raise OutputsError(f"{what}: {path} is not readable ({reason}); valid: {valid}")


def pulumi_stdout(args: list[str], stack: str, cwd: Path, instead: str) -> str:
    """What `pulumi ARGS --cwd CWD` prints about stack `stack`; one OutputsError line when the
    CLI is missing or fails (`instead`: the option that does without it)."""
    what = f"reading stack {stack!r} (`pulumi {' '.join(args[:2])}`)"
    if shutil.which("pulumi") is None:
        raise OutputsError(
            f"{what} needs the Pulumi CLI, which is not on PATH; install it, or pass {instead}"
        )
    try:
        done = subprocess.run(
            ["pulumi", *args, "--cwd", str(cwd)],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,  # never wait on a login or passphrase prompt
            timeout=PULUMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OutputsError(f"{what}: {exc}") from None
    if done.returncode != 0:
        reason = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        raise OutputsError(
            f"{what}: {reason}; deploy it with `pulumi up --stack {stack}`, or pass {instead}"
        )
    return done.stdout


def read_outputs(stack: str, outputs_file: Path | None = None) -> dict[str, Any]:
    """The stack's outputs by name (see the module docstring for the order)."""
    if outputs_file is not None:
        return file_document(outputs_file, "--outputs")
    env = os.environ.get(OUTPUTS_ENV)
    if env:
        return file_document(Path(env), OUTPUTS_ENV)
    hint = SAVE_HINT.format(stack=stack)
    if shutil.which("pulumi") is None:
        raise OutputsError(
            f"reading the outputs of stack {stack!r} needs the Pulumi CLI, which is not on PATH; "
            f"install it, or pass --outputs FILE (or set {OUTPUTS_ENV}=FILE) with the output "
            f"of {hint}"
        )
    argv = ["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", stack]
    try:
        done = subprocess.run(
            [*argv, "--cwd", str(find_project().root)],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,  # never wait on a login or passphrase prompt
            timeout=PULUMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OutputsError(f"reading the outputs of stack {stack!r}: {exc}") from None
    if done.returncode != 0:
        reason = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        raise OutputsError(
            f"stack {stack!r} has no outputs to read ({reason}); deploy it with "
            f"`pulumi up --stack {stack}`, or pass --outputs FILE"
        )
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError:
        document = None
    if not isinstance(document, dict) or not document:
        printed = " ".join(done.stdout.split())[:200] or "nothing"
        raise OutputsError(
            f"stack {stack!r} has no outputs to read (`pulumi stack output --json` printed "
            f"{printed}); deploy it with `pulumi up --stack {stack}`, or pass --outputs FILE"
        )
    return document


def require(outputs: dict[str, Any], stack: str, key: str) -> Any:
    """Output `key`, or an OutputsError naming the stack and the key."""
    value = outputs.get(key)
    if value is None or value == "" or value == []:
        raise OutputsError(
            f"stack {stack!r} has no `{key}` output; valid: the outputs of a stack deployed "
            f"with `pulumi up --stack {stack}` (save them with {SAVE_HINT.format(stack=stack)})"
        )
    return value

"""The node launcher's arguments for your own code (`python -m trainstack.trainers.node <node_args>`),
checked the same way by every startup script that runs them (TPU workers, Compute Engine
VMs, GKE pods), and what of them a run's key may see.

A run's key (`trainstack.components.gpu_startup.run_key`) names objects in the checkpoint
bucket (`trainstack-run-<key>.*`), which anyone who may list the bucket sees; the Vertex
job's request id and the queued TPU resource's spec label are hashes the same way. A
`--env=NAME=VALUE` whose value is a Pulumi secret (`secret_env_names`) must reach the nodes
but no such hash: a 64-bit digest of a short password is a brute-force away from the
password, and a rotated secret would start a new run. `keyed_node_args` is what they hash
instead: the secret's name, not its value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any, Final

ENV_FLAG: Final = "--env="
SECRET_ENV_FLAG: Final = "--secret-env="
SECRET_ENV_KEY: Final = "secret_env_names"
"""The argument every component that takes `node_args` names the secret `--env` values by."""
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_node_args(node_args: Sequence[str]) -> None:
    """Raise ValueError unless `node_args` are single-line strings ending in `-- ARGV`."""
    if isinstance(node_args, str) or not isinstance(node_args, Sequence):
        raise ValueError(  # noqa: TRY004 - a config mistake, reported like every other
            f"node_args: got {node_args!r}; valid: a list of strings"
        )
    for i, arg in enumerate(node_args):
        if not isinstance(arg, str) or "\n" in arg or "\0" in arg:
            raise ValueError(f"node_args[{i}]: {arg!r} is not a single-line string")
    if "--" not in node_args or node_args[-1] == "--":
        raise ValueError(f"node_args: {list(node_args)!r} has no '-- ARGV' (your entrypoint)")


def secret_env_names_problems(args: Any, prefix: str = "") -> list[str]:
    """Problems with a component's `secret_env_names`: a list of environment variable names,
    given only with `node_args` (what they name is there)."""
    names = args.get(SECRET_ENV_KEY) if hasattr(args, "get") else None
    if names is None:
        return []
    where = f"{prefix}{SECRET_ENV_KEY}"
    if isinstance(names, str) or not isinstance(names, Sequence):
        return [f"{where}: {names!r} is not a list; valid: a list of --env names in node_args"]
    problems = [
        f"{where}[{i}]: {name!r} is not an environment variable name; valid: letters, digits "
        "and '_', not starting with a digit"
        for i, name in enumerate(names)
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name)
    ]
    if names and args.get("node_args") is None:
        problems.append(
            f"{where}: names --env values of node_args, which is not given; valid: node_args, "
            f"or no {SECRET_ENV_KEY}"
        )
    return problems


def keyed_node_args(node_args: Sequence[str], secret_env_names: Collection[str]) -> list[str]:
    """`node_args` as run keys and request ids see them: each `--env=NAME=VALUE` of a name in
    `secret_env_names` as `--env=NAME` (its value left out), and so each
    `--secret-env=NAME=VERSION` of such a name (a stack's `secure:` value in Secret Manager,
    whose new version must not start a new run), the rest as given. Before the
    `--` only: after it is your entrypoint's argv. ValueError for a name that no `--env`
    sets (its value would otherwise be keyed under another spelling)."""
    secret = set(secret_env_names)
    if not secret:
        return list(node_args)
    end = node_args.index("--") if "--" in node_args else len(node_args)
    keyed: list[str] = []
    found: set[str] = set()
    for i, arg in enumerate(node_args):
        flag = next((f for f in (ENV_FLAG, SECRET_ENV_FLAG) if arg.startswith(f)), None)
        if i < end and flag is not None:
            name = arg[len(flag) :].split("=", 1)[0]
            if name in secret:
                found.add(name)
                keyed.append(f"{ENV_FLAG}{name}")
                continue
        keyed.append(arg)
    missing = sorted(secret - found)
    if missing:
        raise ValueError(
            f"{SECRET_ENV_KEY}: {missing[0]!r} is set by no --env=NAME=VALUE of node_args; "
            "valid: the names of node_args' --env values that are secrets"
        )
    return keyed

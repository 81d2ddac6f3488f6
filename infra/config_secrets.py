"""Credentials and Pulumi secrets in the stack config.

Two rules, both checked by `trainstack.infra.config.load_stack_config` before anything is
registered:

1. A credential in clear text in `trainer.env` or `trainer.entrypoint` is refused, naming the
   key and what to use instead, never printing the value (`credential_problems`). Names say
   little (`DATABASE_URL` holds a password, an `hf_...` token rides in an argument), so values
   are scanned with the policy's own scanner (`trainstack.policies.rules.credentials`): what
   `trainstack policy` would refuse in a resource is refused in the stack file first.
2. A Pulumi secret (`secure:`) is accepted as a `trainer.env` value and stays secret end to
   end (`pulumi_secrets`). How the value reaches the program differs by who runs it:

   - Offline (`trainstack plan`, `policy`, `quota`, `local-run`, and the mocks they run the
     program under), the stack file's `{secure: <ciphertext>}` cannot be decrypted: it is
     replaced by `SECRET_VALUE` (`[secret]`, as a plan shows any secret) and its key recorded.
   - Under `pulumi up` / `preview` the engine decrypts it but marks only the top-level key
     secret: an object config value is secure when any value inside it is
     (pulumi/pulumi sdk/go/common/resource/config/object.go `object.Secure`: "a composite
     value that contains a secure string"; `Map.SecureKeys` in map.go, sent as
     `ConfigSecretKeys` by pkg/engine/update.go), the Python language host passes that list
     as `PULUMI_CONFIG_SECRET_KEYS` (sdk/python/cmd/pulumi-language-python/main.go) and the
     SDK keeps it for `pulumi.runtime.is_config_secret` (sdk/python/lib/pulumi/runtime/
     config.py, set by pulumi-language-python-exec's `set_all_config(config, secret_keys)`).
     So with `trainstack:trainer` secret every `trainer.env` value counts as secret.

   Either way the stack config's `secrets` names the secret keys (`trainer.env.NAME`), and
   `trainstack.infra.compose` registers everything derived from them (the node launcher's
   arguments, hence the startup scripts, the pod spec and the Vertex job body) as
   `pulumi.Output.secret`, which the engine encrypts in state and shows as `[secret]`.

`secure:` is accepted nowhere else: other keys reach resources in clear (labels, names,
images), and a secret inside `trainstack:trainer` but outside `env` cannot be told apart
under the engine. A command-line argument is no place for a credential either (it shows in
every process listing on the node), so `trainer.entrypoint` takes none: read it from the
environment in your code. A local run (the `local` target) records its env in the run folder,
so it takes `trainer.secret_env` (read from the environment there) instead.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from trainstack.policies.rules.credentials import find_credential
from trainstack.trainers.common.user_code import resolve_source

if TYPE_CHECKING:
    from trainstack.trainers.common.user_code import StackTrainer

SECRET_VALUE: Final = "[secret]"
"""What a Pulumi secret reads as offline: the marker plans show for every secret input."""
SECURE_KEY: Final = "secure"
"""A stack file's encrypted value is a mapping with this one key (`{secure: <ciphertext>}`,
pulumi/pulumi sdk/go/common/resource/config/object.go `isSecureValue`)."""
GCP_FIELDS: Final = ("project", "region", "zone")
"""`gcp:project`, `gcp:region`, `gcp:zone` by their stack config field names."""
_FLAG: Final = re.compile(r"--?[A-Za-z][\w.-]*")
"""An option without its value (`--api-key`), whose value is the next argument."""
SECRET_SECTION: Final = "trainer"
"""The one section that may hold secrets, in `env` only."""


def _set_secret(name: str) -> str:
    return f"pulumi config set --secret --path 'trainstack:trainer.env.{name}' VALUE"


def _where_secrets_go() -> str:
    return (
        "valid: a `secure:` value only as a trainer.env value (`"
        + _set_secret("NAME")
        + "`), or Secret Manager through trainer.secret_env"
    )


def _secure(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(SECURE_KEY), str)


def _paths(value: Any, path: str) -> Iterator[str]:
    """The dotted paths of the `secure:` values in `value`, found at `path`."""
    if _secure(value):
        yield path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _paths(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, f"{path}[{i}]")


def _unwrapped(value: Any) -> Any:
    """`value` with every `{secure: ...}` in it as SECRET_VALUE."""
    if _secure(value):
        return SECRET_VALUE
    if isinstance(value, Mapping):
        return {key: _unwrapped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unwrapped(item) for item in value]
    return value


def pulumi_secrets(
    values: Mapping[str, Any], engine_secret: Collection[str] = ()
) -> tuple[dict[str, Any], frozenset[str], list[str]]:
    """`values` (the stack's sections by name, `gcp:` keys as `project`, `region`, `zone`)
    with each `{secure: ...}` replaced by SECRET_VALUE; the dotted keys that are secrets
    (`trainer.env.NAME`); and one problem per `secure:` value anywhere else. `engine_secret`
    names the sections the engine marked secret (`is_config_secret`): `trainer` makes every
    `trainer.env` value a secret, any other is a problem."""
    secrets: set[str] = set()
    problems: list[str] = []
    for name, value in values.items():
        shown = f"gcp:{name}" if name in GCP_FIELDS else name
        for path in _paths(value, shown):
            parts = path.split(".")
            if len(parts) == 3 and parts[:2] == [SECRET_SECTION, "env"]:
                secrets.add(path)
                continue
            problems.append(
                f"{path}: a Pulumi secret (`secure:`) is not accepted here: this key reaches "
                f"resources in clear; {_where_secrets_go()}"
            )
    for name in engine_secret:
        if name != SECRET_SECTION:
            problems.append(
                f"{name}: holds a Pulumi secret (`secure:`), which is not accepted here: this "
                f"key reaches resources in clear; {_where_secrets_go()}"
            )
            continue
        env = values[name].get("env") if isinstance(values.get(name), Mapping) else None
        if not isinstance(env, Mapping) or not env:
            problems.append(
                f"{name}: holds a Pulumi secret (`secure:`) but sets no trainer.env; "
                f"{_where_secrets_go()}"
            )
            continue
        secrets.update(f"{SECRET_SECTION}.env.{key}" for key in env)
    out = {name: _unwrapped(value) for name, value in values.items()}
    return out, frozenset(secrets), problems


def ciphertext_digests(config: Mapping[str, Any]) -> dict[str, str]:
    """The sha256 of each `trainer.env` `secure:` value as the stack file writes it (its
    ciphertext), by env name, for the plan: `pulumi config set --secret` of a new value
    writes a new ciphertext, so a plan diff can say that a secret input changed (and what
    the engine does with the resources that carry it) without knowing the value. `config`
    is the stack file's `config:` mapping. The ciphertext is in the stack file already; its
    digest says nothing more."""
    section = config.get(f"trainstack:{SECRET_SECTION}")
    env = section.get("env") if isinstance(section, Mapping) else None
    if not isinstance(env, Mapping):
        return {}
    return {
        str(name): hashlib.sha256(value[SECURE_KEY].encode()).hexdigest()
        for name, value in env.items()
        if _secure(value)
    }


def secret_env_names(secrets: Collection[str]) -> frozenset[str]:
    """The `trainer.env` names whose values are Pulumi secrets."""
    prefix = f"{SECRET_SECTION}.env."
    return frozenset(s[len(prefix) :] for s in secrets if s.startswith(prefix))


def credential_problems(
    trainer: StackTrainer, secrets: Collection[str] = (), pulumi_secrets: bool = True
) -> list[str]:
    """One problem per `trainer.env` value (not a Pulumi secret) and `trainer.entrypoint`
    argument that holds a credential in clear, naming the key, never the value. A `secure:`
    value is offered only where the target takes one (`pulumi_secrets`: a cloud target)."""
    problems: list[str] = []
    hidden = secret_env_names(secrets)
    shown = "in clear, which plans, plan diffs, logs and the stack's state would show"
    for name, value in (trainer.env or {}).items():
        found = find_credential(value) if name not in hidden else None
        if found is not None:
            what = found.kind if found.name is None else f"a value for {found.name}"
            instead = (
                f"(Secret Manager, read on the node), or a `secure:` value (`{_set_secret(name)}`)"
                if pulumi_secrets
                else f"(a local run reads {name} from this environment)"
            )
            problems.append(
                f"trainer.env.{name}: holds {what} {shown}; valid: trainer.secret_env.{name}: "
                f"projects/P/secrets/NAME {instead}"
            )
    args = list(trainer.entrypoint or [])
    for i, arg in enumerate(args):
        found = find_credential(arg)
        flag = args[i - 1] if i else ""
        if found is None and _FLAG.fullmatch(flag) and not arg.startswith("-"):
            # `--api-key VALUE`: argparse and click take a flag's value from the next
            # argument as readily as after `=`.
            found = find_credential(f"{flag}={arg}")
        if found is not None:
            what = found.kind if found.name is None else f"a value for {found.name}"
            setter = (
                "trainer.secret_env (Secret Manager) or a `secure:` trainer.env value"
                if pulumi_secrets
                else "trainer.secret_env (a local run reads it from this environment)"
            )
            problems.append(
                f"trainer.entrypoint[{i}]: holds {what} {shown} (and every process listing "
                f"on the node); valid: your code reads it from the environment, set by {setter}"
            )
    return problems


def requirement_credential_problems(trainer: StackTrainer, base_dir: Path) -> list[str]:
    """One problem per line of `trainer.requirements` that holds a credential in clear (a
    token or password in a requirement's URL, `y @ git+https://ghp_...@github.com/x/y`),
    naming the line, never the value: the requirements are printed by `plan`, recorded in
    its JSON and shipped in the package. A file that cannot be read is left to the source
    checks, which say why."""
    if trainer.requirements is None or trainer.source is None:
        return []
    path = resolve_source(trainer.source, base_dir) / trainer.requirements
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        found = find_credential(line)
        if found is not None:
            what = found.kind if found.name is None else f"a value for {found.name}"
            problems.append(
                f"trainer.requirements: line {number} holds {what} in clear, which plans, the "
                "package and every node would show; valid: a requirement without credentials "
                "(a public index or URL, or the code itself in trainer.source)"
            )
    return problems

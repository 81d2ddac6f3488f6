"""Your own training code: the `trainstack:trainer` keys that run it, and their checks.

    trainstack:trainer:
      source: examples/own-trainer      # a folder, relative to the project root
      requirements: requirements.txt    # optional, inside source
      entrypoint: [python, train.py, --epochs=3]
      launcher: torchrun                # torchrun: one process per accelerator; node: one
      env: {WANDB_MODE: offline}        # per machine / TPU host
      secret_env: {HF_TOKEN: projects/p/secrets/hf-token}

`StackTrainer` is the stack's trainer section: the bundled trainer's `TrainConfig` plus these
keys. With `entrypoint` unset it is exactly the bundled trainer's config (the default); with
`entrypoint` set only `SHARED_KEYS` of the bundled keys may be given. `user_code_problems`
checks the section against the compute target and the files on disk, in the stack config's
one error shape (`trainer.<key>: <what is wrong>; valid: <allowed>`).

This module must not import torch or tensorflow: the Pulumi program imports it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BeforeValidator, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import RESERVED_ENV

UserLauncher = Literal["torchrun", "node"]

USER_CODE_KEYS: Final = (
    "source",
    "image",
    "requirements",
    "entrypoint",
    "launcher",
    "env",
    "secret_env",
)
SHARED_KEYS: Final = frozenset({"run_name", "preemption_grace_s", "checkpoint_dir"})
"""Bundled-trainer keys that also apply to your own code: the run's name (checkpoint folder,
`TRAINSTACK_RUN_NAME`), the SIGTERM grace and where checkpoints go."""
DEFAULT_LAUNCHER: Final[UserLauncher] = "torchrun"
"""The launcher your code gets unless its target or `trainer.launcher` says otherwise."""


@dataclass(frozen=True)
class CodeRules:
    """What one compute target allows your code. Each target declares its own
    (`trainstack.infra.targets.base.Target.code_rules`) and the config checks pass it here
    as data: the trainers name no target."""

    target: str
    """The target's stack section, as the messages name it."""
    launchers: tuple[UserLauncher, ...] = ("torchrun", "node")
    """The launchers it runs (a TPU host: node only)."""
    default_launcher: UserLauncher = DEFAULT_LAUNCHER
    """The launcher when `trainer.launcher` is unset."""
    runs_image: bool = False
    """It runs a container, so `trainer.image` may stand in for `trainer.source`."""
    image_targets: tuple[str, ...] = ()
    """Every registered target section that runs a container (for the messages); empty
    where the caller does not know them."""
    pulumi_secrets: bool = False
    """It takes Pulumi secrets (`secure:`) as `env` values (a cloud target); the messages
    offer one only then."""
    no_image: tuple[str, str] | None = None
    """Where it runs no container though its target may (a backend: `backend gce`), and what
    runs one instead (`backend gke`), for the messages; None: the target and `image_targets`."""


SECRET_RESOURCE: Final = re.compile(
    r"projects/[A-Za-z0-9][A-Za-z0-9._:-]*/secrets/[A-Za-z0-9_-]{1,255}(/versions/[A-Za-z0-9_-]+)?"
)
"""A Secret Manager secret (`projects/P/secrets/NAME`) or version (`.../versions/V`)."""
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_WORDS: Final = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "KEY", "CREDENTIAL", "CREDENTIALS"}
)
"""A word of an `env` name that says its value is a secret (`HF_TOKEN`, `WANDB_API_KEY`)."""
_PYTHON: Final = re.compile(r"python(3(\.\d+)?)?")


COUNT_KEYS: Final = tuple(
    name for name, field in TrainConfig.model_fields.items() if field.annotation is int
)
"""The bundled trainer's whole-number keys (steps, batch sizes, intervals, model sizes)."""


def whole_number(value: object) -> object:
    """A stack file's whole-number key: `true` and `"20"` are refused ("is not an integer"),
    where pydantic's lax ints read them as 1 and 20 (a pydantic before-validator, shared by
    every such key of the stack config: `WholeNumber`)."""
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


WholeNumber = Annotated[int, BeforeValidator(whole_number)]
"""An `int` stack key by the `whole_number` rule."""


class StackTrainer(TrainConfig):
    """`trainstack:trainer`: the bundled trainer's keys, or your own code's."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    # Strict here, not in TrainConfig: the trainer's command line gives every value as a
    # string (`--steps=100`), and the engine gives a dynamic provider its numbers as doubles
    # (protobuf Struct `number_value`, 20.0), which stay valid.
    _whole_number = field_validator(*COUNT_KEYS, mode="before")(whole_number)

    source: str | None = None
    """Folder with your code, packaged and uploaded by content hash, less what its
    `.gcloudignore` lists and secrets (`trainstack.components._code_files`); relative
    paths are relative to the project root (beside Pulumi.yaml)."""
    image: str | None = None
    """Container image to run your code in (gpu_cluster, vertex)."""
    requirements: str | None = None
    """Requirements file inside `source`, installed on each node with the package."""
    entrypoint: list[str] | None = None
    """Command run in `source`'s folder on every process, e.g. [python, train.py]."""
    launcher: UserLauncher | None = None
    """torchrun (one process per accelerator, torchrun's env) or node (one process per
    machine / TPU host, TF_CONFIG and JAX's coordinator). Default torchrun, node on tpu."""
    env: dict[str, str] | None = None
    """Environment variables for every process: plain values, or Pulumi secrets (`secure:`
    values, registered secret and shown as `[secret]`); never a credential in clear."""
    secret_env: dict[str, str] | None = None
    """Environment variable -> Secret Manager secret, read on the node at start."""

    @property
    def user_code(self) -> UserCode | None:
        """Your own code's settings, or None for the bundled trainer."""
        if self.entrypoint is None:
            return None
        return UserCode(
            source=self.source,
            image=self.image,
            requirements=self.requirements,
            entrypoint=tuple(self.entrypoint),
            launcher=self.launcher,
            env=dict(sorted((self.env or {}).items())),
            secret_env=dict(sorted((self.secret_env or {}).items())),
        )

    def bundled(self) -> TrainConfig:
        """The bundled trainer's own config (what its command line accepts)."""
        return TrainConfig.model_validate(
            self.model_dump(exclude=set(USER_CODE_KEYS), exclude_unset=True)
        )


@dataclass(frozen=True)
class UserCode:
    """Your own code, as validated from `StackTrainer`."""

    source: str | None
    image: str | None
    requirements: str | None
    entrypoint: tuple[str, ...]
    launcher: UserLauncher | None
    env: dict[str, str]
    secret_env: dict[str, str]

    def launcher_for(self, default: UserLauncher) -> UserLauncher:
        """The launcher given, else `default` (the target's `CodeRules.default_launcher`)."""
        return self.launcher if self.launcher is not None else default


def resolve_source(source: str, base_dir: Path) -> Path:
    """`source` as an absolute folder path (relative ones against `base_dir`)."""
    path = Path(source).expanduser()
    return (path if path.is_absolute() else base_dir / path).resolve()


def requirement_problem(line: str) -> str | None:
    """Why `line` is not a requirement a package can depend on, or None: not PEP 508 as
    `packaging` parses it (pip options such as `--index-url` or `-r` included), or holding a
    control character (each requirement is one `Requires-Dist:` header line of the package's
    metadata, https://packaging.python.org/en/latest/specifications/core-metadata/). Quotes
    are PEP 508's own (`pkg; python_version < "3.12"`): the package's pyproject.toml escapes
    them (`trainstack.components.trainer_package`)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        url = Requirement(line).url
    except InvalidRequirement as exc:
        return str(exc).splitlines()[0]
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in line):
        return "control characters are not supported"
    if url is not None and url.lower().startswith(("file:", "git+file:")):
        # A path of the machine that plans: no node has it, so every install fails there.
        return "a file: URL is a path on this machine, which no node has; put the code in source"
    return None


def parse_requirements(text: str, key: str) -> tuple[list[str], list[str]]:
    """The PEP 508 lines of a requirements file and the problems with it, one per bad line.
    Options (`-r`, `--index-url`, `-e`) are refused: the requirements become the package's
    dependencies, which every target's pip installs, and a line pip would read as an option
    fails the install on every node."""
    requirements: list[str] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        problem = requirement_problem(line)
        if problem is not None:
            shown = repr(line) if len(line) <= 80 else repr(line[:60]) + "..."
            problems.append(
                f"{key}: line {number} {shown} is not a requirement ({problem}); valid: PEP 508 "
                "requirements, one per line (e.g. 'numpy>=1.26'), no pip options"
            )
            continue
        requirements.append(line)
    return requirements, problems


def read_requirements(code: UserCode, base_dir: Path, prefix: str = "trainer.") -> list[str]:
    """The requirements `code` installs on each node; raises ValueError with the problem."""
    if code.requirements is None or code.source is None:
        return []
    path = resolve_source(code.source, base_dir) / code.requirements
    requirements, problems = parse_requirements(path.read_text(), f"{prefix}requirements")
    if problems:
        raise ValueError("\n".join(problems))
    return requirements


def entrypoint_file(entrypoint: tuple[str, ...] | list[str]) -> str | None:
    """The script the entrypoint runs (`train.py` of `[python, train.py]`, `./run.sh`), or
    None when it names no file (`[python, -m, pkg.train]`, a program on PATH)."""
    if not entrypoint:
        return None
    first = entrypoint[0]
    if _PYTHON.fullmatch(first):
        second = entrypoint[1] if len(entrypoint) > 1 else ""
        return second if second and not second.startswith("-") else None
    if first.startswith("./") or first.endswith((".py", ".sh")):
        return first
    return None


def _env_problems(
    trainer: StackTrainer, prefix: str, secret: Collection[str], pulumi_secrets: bool, stack: bool
) -> list[str]:
    problems: list[str] = []
    env, secrets = trainer.env or {}, trainer.secret_env or {}
    for key, names in (("env", env), ("secret_env", secrets)):
        for name in names:
            where = f"{prefix}{key}.{name}"
            if not ENV_NAME.fullmatch(name):
                problems.append(
                    f"{where}: not an environment variable name; valid: letters, digits and "
                    "'_', not starting with a digit"
                )
            elif name in RESERVED_ENV or name.startswith("TRAINSTACK_"):
                problems.append(
                    f"{where}: set by the launcher (run contract); valid: any other name"
                )
    for name in env:
        if name in secrets:
            problems.append(
                f"{prefix}env.{name}: also in {prefix}secret_env; valid: one of the two"
            )
        elif name not in secret and SECRET_WORDS & set(name.upper().split("_")):
            problems.append(
                f"{prefix}env.{name}: looks like a secret, and env values are stored in plain "
                f"text; valid: {prefix}secret_env.{name}: projects/P/secrets/NAME"
                + _secret_hint(name, pulumi_secrets, stack)
            )
    for name, value in secrets.items():
        if not SECRET_RESOURCE.fullmatch(value):
            problems.append(
                f"{prefix}secret_env.{name}: {value!r} is not a Secret Manager resource name; "
                "valid: projects/P/secrets/NAME or projects/P/secrets/NAME/versions/V"
            )
    return problems


def _secret_hint(name: str, pulumi_secrets: bool, stack: bool) -> str:
    """What else holds the secret `name`: in a stack, a `secure:` config value (cloud) or the
    environment a local run reads; in a program, only `UserCode`'s `secret_env` (its `env`
    takes plain strings, and a program reads no `trainstack:trainer` config)."""
    if not stack:
        return f" (UserCode(secret_env={{{name!r}: 'projects/P/secrets/NAME'}}))"
    if pulumi_secrets:
        return (
            ", or a `secure:` value (pulumi config set --secret --path "
            f"'trainstack:trainer.env.{name}' VALUE)"
        )
    return f" (a local run reads {name} from this environment)"


def user_code_problems(
    trainer: StackTrainer,
    rules: CodeRules,
    base_dir: Path,
    prefix: str = "trainer.",
    secret_env: Collection[str] = (),
    *,
    stack: bool = True,
) -> list[str]:
    """Problems with the user-code keys of `trainer` on the target whose `rules` are given,
    files checked under `base_dir` (the project root); `secret_env` names the `env` values
    given as Pulumi secrets (`secure:`), which may hold what their names say. `stack`: the
    keys are a stack's `trainstack:trainer`, else a program's `UserCode` (the messages offer
    what each can take). Empty for a valid section, and for the bundled trainer."""
    given = trainer.model_fields_set
    if trainer.entrypoint is None:
        stray = [k for k in USER_CODE_KEYS if k in given and getattr(trainer, k) is not None]
        return [
            f"{prefix}{key}: only with {prefix}entrypoint (your own code); valid: add "
            f"{prefix}entrypoint, or remove {prefix}{key} to run the bundled trainer"
            for key in stray
        ]
    bundled = [k for k in TrainConfig.model_fields if k in given and k not in SHARED_KEYS]
    problems = [
        f"{prefix}{key}: a bundled-trainer key, not allowed with {prefix}entrypoint; valid: "
        f"remove {prefix}{key}, or remove {prefix}entrypoint to run the bundled trainer"
        for key in bundled
    ]
    if not trainer.entrypoint:
        problems.append(
            f"{prefix}entrypoint: [] is empty; valid: a command as a list of strings, e.g. "
            "[python, train.py]"
        )
    target, launchers, images = rules.target, rules.launchers, ", ".join(rules.image_targets)
    if trainer.launcher is not None and trainer.launcher not in launchers:
        problems.append(
            f"{prefix}launcher: {trainer.launcher!r} is not allowed on a {target} target; "
            f"valid: {', '.join(launchers)}"
        )
    if trainer.image is not None and not rules.runs_image:
        where, instead = rules.no_image or (
            f"a {target} target",
            f"a target of {images}" if images else "",
        )
        problems.append(
            f"{prefix}image: not supported on {where} (it runs no container); "
            f"valid: {prefix}source" + (f", or {instead}" if instead else "")
        )
    if trainer.source is None and trainer.image is None:
        problems.append(
            f"{prefix}source: required with {prefix}entrypoint; valid: a folder with your "
            "code" + (f", or {prefix}image on {images}" if images else "")
        )
    problems += _env_problems(trainer, prefix, secret_env, rules.pulumi_secrets, stack)
    if trainer.source is None:
        if trainer.requirements is not None:
            problems.append(f"{prefix}requirements: needs {prefix}source; valid: a file in it")
        return problems
    folder = resolve_source(trainer.source, base_dir)
    if not folder.is_dir():
        return [
            *problems,
            (
                f"{prefix}source: {trainer.source!r} is not a folder ({folder}); valid: a "
                "folder relative to the project root, or an absolute path"
            ),
        ]
    script = entrypoint_file(trainer.entrypoint or [])
    if script is not None and not (folder / script).is_file():
        problems.append(
            f"{prefix}entrypoint: {script!r} is not a file in {prefix}source ({folder}); "
            "valid: a path relative to the source folder"
        )
    if trainer.requirements is not None:
        path = (folder / trainer.requirements).resolve()
        if not path.is_relative_to(folder) or not path.is_file():
            problems.append(
                f"{prefix}requirements: {trainer.requirements!r} is not a file in "
                f"{prefix}source ({folder}); valid: a path relative to the source folder"
            )
        else:
            problems += parse_requirements(path.read_text(), f"{prefix}requirements")[1]
    return problems


def node_args(
    code: UserCode,
    default_launcher: UserLauncher,
    *,
    contract: Mapping[str, str],
    source: str | None = None,
) -> list[str]:
    """The arguments of `python -m trainstack.trainers.node` that run `code` on a target whose
    launcher is `default_launcher` unless `trainer.launcher` is set: the one
    command line every target's launch starts once per machine (after installing the
    package). `contract` holds the run-contract variables the target knows at deploy time
    (`TRAINSTACK_CHECKPOINT_DIR`, `_DATA_DIR`, `_OUTPUT_DIR`, `_RUN_NAME`); `source` is the
    folder to run in, None for the folder the package installs (or an image's WORKDIR)."""
    args = [f"--launcher={code.launcher_for(default_launcher)}"]
    if source is not None:
        args.append(f"--source={source}")
    args += [f"--env={name}={value}" for name, value in sorted(contract.items())]
    args += [f"--env={name}={value}" for name, value in code.env.items()]
    args += [f"--secret-env={name}={value}" for name, value in code.secret_env.items()]
    return [*args, "--", *code.entrypoint]

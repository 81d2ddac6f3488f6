"""Your own training code, as every compute component and `trainstack:trainer` take it.

    from trainstack.components import TrainerPackage, TpuPodSlice, UserCode

    code = UserCode(
        source="train",                     # a folder, relative to the project root
        entrypoint=["python", "train.py"],  # run in that folder on every process
        requirements="requirements.txt",    # optional, inside source
        env={"WANDB_MODE": "offline"},
    )
    package = TrainerPackage("exp-code", {"staging_bucket": buckets.staging_bucket, "code": code})
    TpuPodSlice("exp-tpu", {..., "package_uri": package.uri, "package": package, "code": code,
                            "checkpoint_url": buckets.checkpoint_url, "data_url": buckets.data_url})

`UserCode` has exactly the keys of `trainstack:trainer` for your own code (`source`,
`image`, `requirements`, `entrypoint`, `launcher`, `env`, `secret_env`) and is checked by the
same function (`trainstack.trainers.common.user_code.user_code_problems`, through
`UserCode.problems`): a stack config builds it with `UserCode.of(trainer)`. A compute
component given `code` checks it against what the compute runs (its launchers, whether it
runs a container, a TPU runtime's frameworks: `trainstack.components.code_frameworks`), and
starts it with the run contract's folders in the buckets it is given (`run_contract`):
`TRAINSTACK_CHECKPOINT_DIR` = `<checkpoint_url>/checkpoints/<run>`, `_OUTPUT_DIR` =
`<checkpoint_url>/outputs/<run>`, `_DATA_DIR` = `data_url`, `_RUN_NAME` = `run_name`
(default: the component's `deployment_name`), as a stack's run gets them.

Give the compute the `TrainerPackage` itself as `package` beside its `package_uri`: it then
refuses a package built from other code, or without the code's requirements, in one line
(`package_code_problem`). A bare `package_uri` is a string it cannot trace to a package, so
that check cannot run without `package`.

A bad value raises `ArgsError` (a ValueError), as a component does, before anything is
registered, one line per problem, each naming the key (`UserCode.entrypoint: ...`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Final

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainstack.components._args import ArgsError
from trainstack.components._project import current_project
from trainstack.components.catalog.problems import unknown_key
from trainstack.trainers.common.contract import (
    CHECKPOINT_DIR_ENV,
    DATA_DIR_ENV,
    OUTPUT_DIR_ENV,
    RUN_NAME_ENV,
)
from trainstack.trainers.common.user_code import (
    CodeRules,
    StackTrainer,
    UserLauncher,
    node_args,
    read_requirements,
    resolve_source,
    user_code_problems,
)
from trainstack.trainers.common.user_code import UserCode as _TrainerCode

__all__ = [
    "CODE_KEY",
    "CodeRules",
    "ContractFolders",
    "UserCode",
    "args_with_code",
    "code_args_problems",
    "code_base_dir",
    "code_node_args",
    "run_contract",
    "vertex_run_contract",
]

_VALID: Final = {
    "source": "a folder with your code",
    "image": "a container image, e.g. us-docker.pkg.dev/P/R/train:1",
    "requirements": "a requirements file inside source",
    "entrypoint": "a command as a list of strings, e.g. ['python', 'train.py']",
    "launcher": "torchrun or node",
    "env": "a mapping of variable names to strings",
    "secret_env": "a mapping of variable names to projects/P/secrets/NAME",
}


class UserCode(BaseModel):
    """Your own code: where it is (a folder, or an image), what to run, how to launch it, and
    its environment. The keys and rules of `trainstack:trainer` for your own code."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    entrypoint: tuple[str, ...]
    """Command run in `source`'s folder on every process, e.g. ["python", "train.py"]."""
    source: str | None = None
    """Folder with your code, packaged by `TrainerPackage` (its `code` argument) less what
    its `.gcloudignore` lists and secrets; relative to the project root (beside
    Pulumi.yaml)."""
    image: str | None = None
    """Container image to run your code in, on a compute that runs a container (GKE, Vertex
    AI)."""
    requirements: str | None = None
    """Requirements file inside `source`, installed on each node with the package."""
    launcher: UserLauncher | None = None
    """torchrun (one process per accelerator, torchrun's env) or node (one process per
    machine / TPU host, TF_CONFIG and JAX's coordinator). Default: the compute's own
    (torchrun; node on a TPU slice, which allows node only)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for every process, plain values (never a credential: those go
    in `secret_env`)."""
    secret_env: dict[str, str] = Field(default_factory=dict)
    """Environment variable -> Secret Manager secret (`projects/P/secrets/NAME`), read on
    the node at start with the compute's service account."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            lines = []
            for error in exc.errors():
                where = ".".join(str(part) for part in error["loc"])
                if error["type"] == "extra_forbidden":
                    lines.append(unknown_key(f"UserCode.{where}", where, _VALID))
                    continue
                valid = _VALID.get(str(error["loc"][0]) if error["loc"] else "", "see UserCode")
                lines.append(f"UserCode.{where}: {error['msg'].lower()}; valid: {valid}")
            raise ArgsError(lines) from None

    @classmethod
    def of(cls, trainer: StackTrainer) -> UserCode | None:
        """The code a stack's `trainstack:trainer` runs, or None for the bundled trainer."""
        if trainer.entrypoint is None:
            return None
        given = trainer.model_fields_set
        fields = {k: getattr(trainer, k) for k in cls.model_fields if k in given}
        return cls(**{k: v for k, v in fields.items() if v is not None})

    def trainer(self) -> StackTrainer:
        """This code as the `trainstack:trainer` section that runs it."""
        return StackTrainer.model_validate(self.model_dump(exclude_defaults=True))

    def problems(
        self,
        rules: CodeRules,
        base_dir: Path | None = None,
        prefix: str = "code.",
        secret_env: Collection[str] = (),
    ) -> list[str]:
        """Every problem with this code on a compute whose `rules` are given, files checked
        under `base_dir` (default `code_base_dir()`), keys named `<prefix><key>`: the check
        `trainstack:trainer` gets (`user_code_problems`)."""
        base = base_dir if base_dir is not None else code_base_dir()
        return user_code_problems(self.trainer(), rules, base, prefix, secret_env, stack=False)

    def launcher_for(self, default: UserLauncher) -> UserLauncher:
        """The launcher given, else `default` (the compute's)."""
        return self.launcher if self.launcher is not None else default

    def source_folder(self, base_dir: Path | None = None) -> Path | None:
        """`source` as an absolute folder (relative ones against `base_dir`, default
        `code_base_dir()`), or None for an image's code."""
        if self.source is None:
            return None
        return resolve_source(self.source, base_dir if base_dir is not None else code_base_dir())

    def requirement_lines(self, base_dir: Path | None = None) -> list[str]:
        """The PEP 508 lines of `requirements`; ValueError naming the key when one is not."""
        base = base_dir if base_dir is not None else code_base_dir()
        return read_requirements(self._trainer_code(), base, prefix="code.")

    def node_args(
        self,
        default_launcher: UserLauncher,
        contract: Mapping[str, str],
        source: str | None = None,
    ) -> list[str]:
        """`python -m trainstack.trainers.node` arguments that run this code with the run
        contract's variables `contract` (`run_contract`): the one command line every
        compute's launch runs once per machine after installing the package."""
        return node_args(self._trainer_code(), default_launcher, contract=contract, source=source)

    def _trainer_code(self) -> _TrainerCode:
        code = self.trainer().user_code
        assert code is not None
        return code


def code_base_dir() -> Path:
    """The folder a relative `source` is read from: the current Pulumi project's root (the
    folder holding Pulumi.yaml), as for a stack."""
    return current_project().root


def run_contract(
    checkpoint_url: str, data_url: str, run_name: str, checkpoint_dir: str | None = None
) -> dict[str, str]:
    """The run contract's folders for a run named `run_name`, in the buckets whose URLs are
    given (`TrainingBuckets.checkpoint_url`, `.data_url`): checkpoints in `checkpoint_dir`
    (`trainstack:trainer.checkpoint_dir`) when set, else `<checkpoint_url>/checkpoints/<run>`,
    under the prefix the bucket's age rule covers
    (`trainstack.components.training_buckets.CHECKPOINT_PREFIX`); outputs in
    `<checkpoint_url>/outputs/<run>`; data in `data_url`."""
    return {
        CHECKPOINT_DIR_ENV: checkpoint_dir
        or f"{checkpoint_url.rstrip('/')}/checkpoints/{run_name}",
        DATA_DIR_ENV: data_url,
        OUTPUT_DIR_ENV: f"{checkpoint_url}/outputs/{run_name}",
        RUN_NAME_ENV: run_name,
    }


CODE_KEY: Final = "code"
"""The argument every compute component takes your code by."""


def code_args_problems(
    args: Mapping[str, Any],
    rules: CodeRules,
    prefix: str = "",
    checks: Callable[[UserCode], list[str]] | None = None,
    needs: tuple[str, ...] = ("checkpoint_url", "data_url"),
) -> list[str]:
    """Problems with a component's `code` and the arguments it needs (`needs`: by default
    `checkpoint_url` and `data_url`; no `node_args` beside it), keys prefixed `prefix`;
    `checks` adds the compute's own cross-checks once the code itself is valid (a TPU
    runtime's frameworks)."""
    code = args.get(CODE_KEY)
    if code is None:
        return []
    if not isinstance(code, UserCode):
        problem = (
            f"{prefix}{CODE_KEY}: {type(code).__name__} is not a UserCode; valid: "
            "trainstack.components.UserCode(source=..., entrypoint=[...])"
        )
        return [problem]
    problems = code.problems(rules, prefix=f"{prefix}{CODE_KEY}.")
    for key in needs:
        if args.get(key) is None:
            problems.append(
                f"{prefix}{key}: required with {CODE_KEY} (the run contract's folders); valid: "
                f"TrainingBuckets.{key}"
            )
    if args.get("node_args") is not None:
        problems.append(
            f"{prefix}node_args: given with {CODE_KEY}, which builds them; valid: one of the two"
        )
    if not problems and checks is not None:
        problems += checks(code)
    return problems


ContractFolders = Callable[[dict[str, str]], dict[str, str]]
"""What a compute does to the run contract's folders (Vertex AI: `vertex_run_contract`)."""


def code_node_args(
    args: Mapping[str, Any],
    default_launcher: UserLauncher,
    run_name: pulumi.Input[str],
    folders: ContractFolders | None = None,
) -> pulumi.Output[list[str]]:
    """The node launcher's arguments for a component's `code` (checked by
    `code_args_problems`), with the run contract's folders in its `checkpoint_url` and
    `data_url` (`folders` applied), for the run `args["run_name"]` (default `run_name`: the
    component's deployment name)."""
    code: UserCode = args[CODE_KEY]
    run = args.get("run_name") or run_name
    ckpt = args.get("checkpoint_url") or ""

    def node(v: list[str]) -> list[str]:
        contract = run_contract(v[0], v[1], v[2])
        return code.node_args(default_launcher, folders(contract) if folders else contract)

    return pulumi.Output.all(ckpt, args["data_url"], run).apply(node)


def args_with_code(
    args: Mapping[str, Any],
    rules: CodeRules,
    run_name: pulumi.Input[str],
    *,
    prefix: str = "",
    image_key: str | None = "image",
    folders: ContractFolders | None = None,
    needs: tuple[str, ...] = ("checkpoint_url", "data_url"),
    checks: Callable[[UserCode], list[str]] | None = None,
) -> Mapping[str, Any]:
    """A compute component's `args` with its `code` as what it runs: `node_args` with the run
    contract's folders (`code_node_args`), the code's image as `image_key` unless given, the
    code-only keys dropped; `args` unchanged without `code`. ValueError, one line per problem,
    when the code does not fit (`code_args_problems`). Every compute component given `code`
    goes through here, as the stack path's `node_args` do through `UserCode.node_args`."""
    if args.get(CODE_KEY) is None:
        return args
    problems = code_args_problems(args, rules, prefix, checks, needs)
    if problems:
        raise ValueError("\n".join(problems))
    code: UserCode = args[CODE_KEY]
    out = {k: v for k, v in args.items() if k not in CODE_ONLY_KEYS}
    package = args.get(PACKAGE_KEY)
    if package is not None:
        problem = package_code_problem(package, code, prefix)
        if problem is not None:
            raise ValueError(problem)
        out.setdefault("package_uri", package.uri)
    out["node_args"] = code_node_args(args, rules.default_launcher, run_name, folders)
    if image_key is not None and code.image is not None and image_key not in out:
        out[image_key] = code.image
    return out


def vertex_run_contract(contract: dict[str, str], checkpoint_dir: bool) -> dict[str, str]:
    """The run contract on Vertex AI: Vertex names the job's folders (AIP_CHECKPOINT_DIR,
    AIP_MODEL_DIR; per trial when tuning), which the node gives your code unless a checkpoint
    folder is named (`checkpoint_dir`; `trainstack.trainers.user_code`), so the output folder
    is always dropped and the checkpoint folder unless named."""
    out = {k: v for k, v in contract.items() if k != OUTPUT_DIR_ENV}
    if not checkpoint_dir:
        del out[CHECKPOINT_DIR_ENV]
    return out


PACKAGE_KEY: Final = "package"
"""The argument a compute component takes the `TrainerPackage` of its `code` by."""
CODE_ONLY_KEYS: Final = (CODE_KEY, "data_url", "run_name", PACKAGE_KEY)
"""The arguments that only go with `code` (a component's own `checkpoint_url` stays)."""


def package_code_problem(package: Any, code: UserCode, prefix: str = "") -> str | None:
    """One line when `package` (a `TrainerPackage`) was not built from `code`: another source
    folder (what `TrainerPackage.user_source` records) or without the code's requirements."""
    folder = code.source_folder()
    packaged = getattr(package, "user_source", None)
    if folder is not None and packaged != str(folder.resolve()):
        return (
            f"{prefix}{PACKAGE_KEY}: built from {packaged or 'the bundled trainers'}, not "
            f"{CODE_KEY}.source {str(folder.resolve())!r}; valid: the TrainerPackage given the "
            f"same {CODE_KEY}"
        )
    wanted = code.requirement_lines() if code.requirements else []
    missing = [line for line in wanted if line not in getattr(package, "requirements", ())]
    if missing:
        return (
            f"{prefix}{PACKAGE_KEY}: lacks {CODE_KEY}.requirements {missing[0]!r}; valid: the "
            f"TrainerPackage given the same {CODE_KEY}"
        )
    return None

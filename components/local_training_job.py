"""The `local` compute target: the bundled trainer as processes on this machine, with its
life tied to the stack like a cloud job's.

    from trainstack.components.local_training_job import LocalTrainingJob

    job = LocalTrainingJob(
        "local-job",
        {
            "trainer": cfg.trainer,  # trainstack.trainers.common.config.TrainConfig (or its fields)
            "workers": 2,  # torchrun --nproc-per-node for torch
            "root": ".trainstack/local",  # the local "buckets": checkpoints/ and logs/
            "labels": {"team": "ml"},
        },
    )
    # job.pids, job.log_path, job.checkpoint_dir, job.state

Your own code instead of the trainer config:

    LocalTrainingJob("local-job", {"code": UserCode(source="train", entrypoint=["python",
                     "train.py"]), "run_name": "exp-42", "workers": 2, "root": ".trainstack/local"})

`pulumi up` starts the processes detached (they outlive the engine) and returns once rank 0
has started training; `pulumi refresh` updates `state` (running / finished / exited);
`pulumi destroy` sends SIGTERM, so the trainer checkpoints and exits, and SIGKILLs whatever
is left after `stop_grace_s`. Checkpoints and logs stay, so the next `pulumi up` resumes
from the newest checkpoint. Any change to the trainer config, workers, root or env replaces
the run (old one stopped first); previews never start anything (dynamic providers create
only during an update).

Naming: the checkpoint directory is `trainer.checkpoint_dir` when set, else
`<root>/checkpoints/<trainer.run_name>`, and the JSON log `<root>/logs/<run_name>.jsonl`
(stderr in `<run_name>.stderr.log`), the same places `trainstack local-run` uses, so either
resumes the other's checkpoints. A relative `root` is resolved against `base_dir`, by
default the Pulumi project root (beside Pulumi.yaml).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NotRequired, TypedDict

import pulumi
from pydantic import ValidationError

from trainstack.components._args import check_args, component_check
from trainstack.components._code_files import code_files, source_problems
from trainstack.components._local_provider import LocalRun, LocalRunProvider
from trainstack.components.code_summary import LOCAL_RUNS_ON, NODE_ENV, component_code_summary
from trainstack.components.facts import make_facts
from trainstack.components.naming import labels_input
from trainstack.components.user_code import CODE_KEY, UserCode
from trainstack.trainers.common.bounds import MAX_LOCAL_WORKERS
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.user_code import (
    CodeRules,
    StackTrainer,
    resolve_source,
    user_code_problems,
)
from trainstack.trainers.local import local_processes
from trainstack.trainers.local_start import checkpoint_dir_problem

TOKEN: Final = "trainstack:local:LocalTrainingJob"
COMPONENT_LABEL: Final = "local-training-job"
LOCAL_CODE: Final = CodeRules("local")
"""What your code may use here: either launcher, no container (the `local` target's own
rules, `trainstack.infra.targets.local`, add the targets that run one to the messages)."""
STOP_GRACE_MARGIN_S: Final = 15.0
"""Default `stop_grace_s` is the trainer's `preemption_grace_s` plus this: time for torchrun
to notice its workers exited and for the processes to start saving."""


class LocalTrainingJobArgs(TypedDict):
    """Arguments for `LocalTrainingJob`."""

    trainer: NotRequired[TrainConfig | Mapping[str, Any]]
    """The trainer config (`trainstack:trainer`), as a `TrainConfig`/`StackTrainer` or its
    fields; with `entrypoint`, your own code (`trainstack.trainers.local_code`), rerun when the files of
    its `source` change. Required unless `code` is given."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`) instead of `trainer`: the trainer
    config that runs it (`UserCode.trainer`), named `run_name`."""
    run_name: NotRequired[str]
    """With `code`: the run's name (its checkpoint folder and log; default the trainer's)."""
    workers: int
    """Local worker processes (torch: `torchrun --nproc-per-node`), >= 1."""
    root: str
    """Directory of the local "buckets" (checkpoints/, logs/); relative to `base_dir`."""
    env: NotRequired[Mapping[str, str]]
    """Extra environment variables for the trainer's processes."""
    stop_grace_s: NotRequired[float]
    """Seconds between SIGTERM and SIGKILL on destroy; default the trainer's
    `preemption_grace_s` + 15. Must exceed `preemption_grace_s`."""
    base_dir: NotRequired[str]
    """Directory a relative `root` is resolved against and the processes' working directory;
    default the Pulumi project root (`pulumi.get_root_directory()`)."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """User labels, merged with trainstack's and kept in the run's state."""


def _trainer_of(args: Mapping[str, Any]) -> Any:
    """The trainer config: `trainer`, or the one that runs `code` (ValueError for both or
    neither, or a `code` that is not a UserCode)."""
    code = args.get(CODE_KEY)
    if code is None:
        if args.get("trainer") is None:
            raise ValueError(
                "trainer: required; valid: the trainer config, or your code as code=UserCode(...)"
            )
        return args["trainer"]
    if args.get("trainer") is not None:
        raise ValueError("trainer: given with code, which builds it; valid: one of the two")
    if not isinstance(code, UserCode):
        # One line under the component's name, as every argument problem (component_check).
        raise ValueError(  # noqa: TRY004
            f"{CODE_KEY}: {type(code).__name__} is not a UserCode; valid: "
            "trainstack.components.UserCode(source=..., entrypoint=[...])"
        )
    trainer = code.trainer()
    run = args.get("run_name")
    return trainer if run is None else trainer.model_copy(update={"run_name": run})


def validate_args(
    args: Mapping[str, Any], base_dir: Path | None = None
) -> tuple[StackTrainer, float]:
    """Check the args; return the trainer config and the stop grace period. Your code's
    folder (`trainer.source`) is checked relative to `base_dir` (default: the cwd).

    Raises ValueError naming the bad argument.
    """
    trainer = _trainer_of(args)
    if isinstance(trainer, TrainConfig) and not isinstance(trainer, StackTrainer):
        trainer = trainer.model_dump(exclude_unset=True)
    try:
        cfg = StackTrainer.model_validate(
            dict(trainer) if isinstance(trainer, Mapping) else trainer
        )
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'trainer'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"trainer: {errors}") from None
    workers = args.get("workers")
    if (
        isinstance(workers, bool)
        or not isinstance(workers, int)
        or not 1 <= workers <= MAX_LOCAL_WORKERS
    ):
        raise ValueError(f"workers: got {workers!r}; valid: an integer 1-{MAX_LOCAL_WORKERS}")
    root = args.get("root")
    if not isinstance(root, str) or not root:
        raise ValueError(f"root: got {root!r}; valid: a non-empty path")
    env = args.get("env", {})
    if not isinstance(env, Mapping) or not all(
        isinstance(key, str) and key and "=" not in key and isinstance(value, str)
        for key, value in env.items()
    ):
        raise ValueError(
            f"env: got {env!r}; valid: variable names (non-empty, no '=') mapped to strings"
        )
    grace = args.get("stop_grace_s", cfg.preemption_grace_s + STOP_GRACE_MARGIN_S)
    if (
        isinstance(grace, bool)
        or not isinstance(grace, int | float)
        or grace <= cfg.preemption_grace_s
    ):
        raise ValueError(
            f"stop_grace_s: got {grace!r}; valid: seconds > trainer.preemption_grace_s "
            f"({cfg.preemption_grace_s}), the time the trainer may take to checkpoint after "
            "SIGTERM"
        )
    base = base_dir or Path.cwd()
    problems = user_code_problems(cfg, LOCAL_CODE, base) + source_problems(cfg, base)
    code = cfg.user_code
    source = None if code is None or code.source is None else resolve_source(code.source, base)
    ckpt = checkpoint_dir_problem(cfg.checkpoint_dir, base, source)
    problems += [] if ckpt is None else [ckpt]
    if problems:
        raise ValueError("\n".join(problems))
    if cfg.user_code is not None:
        return cfg, float(grace)
    # Raises for a framework the local target cannot run, before anything is registered.
    local_processes(cfg.bundled(), workers, Path("config.json"))
    return cfg, float(grace)


class LocalTrainingJob(pulumi.ComponentResource):
    """The bundled trainer running as detached processes on this machine."""

    pids: pulumi.Output[list[int]]
    """The processes started (torch: the torchrun launcher, whose workers are its children)."""
    start_times: pulumi.Output[list[str]]
    """Each pid's start time, so a recycled pid is never signalled."""
    log_path: pulumi.Output[str]
    """The JSON-lines log every worker writes to (absolute)."""
    stderr_path: pulumi.Output[str]
    """Where the processes' stderr goes (launcher messages, tracebacks)."""
    checkpoint_dir: pulumi.Output[str]
    """Where step directories go; kept on destroy."""
    state: pulumi.Output[str]
    """`running`, `finished` or `exited`; refreshed by `pulumi refresh`."""
    done: pulumi.Output[dict[str, Any] | None]
    """Rank 0's `done` record once the run finished (after a refresh)."""
    resumed_from: pulumi.Output[int | None]
    """The step this run started from (0 for a fresh run; None while your own code has not
    printed its `start` line, or never does)."""
    run_name: str
    """`trainer.run_name`: names the checkpoint folder and the log."""

    def __init__(
        self, name: str, args: LocalTrainingJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("LocalTrainingJob", LocalTrainingJobArgs, args)
        base_dir = Path(args.get("base_dir") or pulumi.get_root_directory()).resolve()
        cfg, grace = component_check("LocalTrainingJob", validate_args, args, base_dir)
        labels = component_check(
            "LocalTrainingJob", labels_input, args.get("labels"), COMPONENT_LABEL
        )
        code = cfg.user_code
        digest = None
        if code is not None and code.source is not None:
            digest = code_files(resolve_source(code.source, base_dir)).sha256
        super().__init__(TOKEN, name, None, opts)

        self.run = LocalRun(
            f"{name}-run",
            # Your code's section as written: the bundled trainer's defaults do not apply to it.
            trainer=cfg.model_dump(
                mode="json", exclude_none=True, exclude_unset=cfg.user_code is not None
            ),
            workers=args["workers"],
            root=args["root"],
            env=dict(args.get("env", {})),
            stop_grace_s=grace,
            labels=labels,
            provider=LocalRunProvider(base_dir=str(base_dir)),
            source_sha256=digest,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.pids = self.run.pids
        self.start_times = self.run.start_times
        self.log_path = self.run.log_path
        self.stderr_path = self.run.stderr_path
        self.checkpoint_dir = self.run.checkpoint_dir
        self.state = self.run.state
        self.done = self.run.done
        self.resumed_from = self.run.resumed_from
        self.run_name = cfg.run_name
        # What `plan --program` adds up: this machine's workers, nothing billed, no quota.
        given: UserCode | None = args.get(CODE_KEY)
        self.facts: dict[str, Any] = make_facts(
            "LocalTrainingJob",
            "local",
            machines=args["workers"],
            status={"root": args["root"], "run_name": cfg.run_name},
            logs={"workers": args["workers"]},
            code=None
            if given is None
            else component_code_summary(
                given,
                "LocalTrainingJob",
                default_launcher=LOCAL_CODE.default_launcher,
                runs_on=LOCAL_RUNS_ON,
                world_size=args["workers"],
                node_env=NODE_ENV,
                base_dir=base_dir,
            ),
        )
        self.register_outputs(
            {
                "facts": self.facts,
                "pids": self.pids,
                "start_times": self.start_times,
                "log_path": self.log_path,
                "stderr_path": self.stderr_path,
                "checkpoint_dir": self.checkpoint_dir,
                "state": self.state,
                "done": self.done,
                "resumed_from": self.resumed_from,
            }
        )

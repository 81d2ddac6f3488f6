"""`trainstack status`, `logs` and `local-run`: operating a run (`trainstack.infra.cli` registers them
after its own commands and documents the command line as a whole and its exit codes)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from trainstack.infra.cli_base import (
    ComponentOpt,
    ConfigFileOpt,
    EndpointOpt,
    OutputsOpt,
    ProgramOpt,
    StackOpt,
    StateOpt,
    err,
    fail,
    google_errors,
    validated,
)
from trainstack.infra.config import NAMESPACE, StackConfig
from trainstack.infra.config_secrets import secret_env_names
from trainstack.infra.local_paths import local_root, run_name
from trainstack.infra.project import current_place
from trainstack.infra.targets import target_of
from trainstack.trainers.common.bounds import MAX_LOCAL_WORKERS
from trainstack.trainers.common.user_code import StackTrainer

JOB_NAME = re.compile(
    r"projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/"
    r"(?P<kind>customJobs|hyperparameterTuningJobs)/(?P<id>[^/]+)"
)
JOB_NAME_FORMS = (
    "projects/PROJECT/locations/REGION/customJobs/ID or "
    "projects/PROJECT/locations/REGION/hyperparameterTuningJobs/ID"
)
UNSUCCESSFUL_STATES = frozenset({"JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"})
"""Terminal job states `status` exits 1 for."""


def status(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    job: Annotated[
        str | None,
        typer.Option(
            help="Job resource name; default: the stack's `job_name` output (needs the Pulumi CLI)."
        ),
    ] = None,
    api_endpoint: Annotated[str | None, typer.Option(hidden=True)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    outputs: OutputsOpt = None,
    program: ProgramOpt = None,
    state: StateOpt = None,
    component: ComponentOpt = None,
    endpoint: EndpointOpt = None,
    now: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Where a deployed stack's training stands, on every target: state, step reached, last
    checkpoint, hosts or pods up, cost so far at list price. On tpu and gpu_cluster stacks
    also the run supervisor's actions (recoveries, stops), whether the compute was stopped at
    the run's end or still bills (with the command that stops it), the spend it counted
    against limits.max_total_usd, and what still bills after the stop. `--job` reads one
    Vertex AI job.

    With --program DIR --stack NAME: the compute of your own program's stack, from its
    components' facts (--state: a `pulumi stack export --show-secrets`; --outputs: exported
    facts; default: the Pulumi CLI's export).

    Exit 0 while training is queued or running and when it succeeded; 1 when it failed, was
    cancelled or expired; 2 when it cannot be read (no credentials, no access, no outputs).
    """

    from trainstack.components._google_api import ApiError
    from trainstack.components._vertex_provider import job_status

    if program is not None or state is not None:
        name = _program_stack("status", program, stack, config_file, job)
        _program_status(program, name, outputs, state, endpoint or [], now, as_json, component)
        return
    _no_component(component)
    if job is None:
        name, cfg = validated(stack, config_file, command="status")
        # A local run stopped before its last step resumes with the command that ran it.
        rerun = ["trainstack", "local-run"]
        rerun += ["--stack", stack] if stack is not None else ["--config-file", str(config_file)]
        resume = None if outputs is not None else shlex.join(rerun)
        _stack_status(name, cfg, outputs, endpoint or [], now, as_json, resume)
        return
    if stack is not None or config_file is not None:  # a job alone needs no stack
        name, cfg = validated(stack, config_file)
        if not target_of(cfg).reads_jobs:
            raise fail(
                f"--job: status reads Vertex AI jobs; stack {name!r} has target {cfg.target!r}; "
                "valid: --job with a vertex stack, or --job alone"
            )
    source = "--job"
    match = JOB_NAME.fullmatch(job)
    if match is None:
        raise fail(
            f"{source}: {job!r} is not a Vertex AI job resource name; valid: {JOB_NAME_FORMS}"
        )
    project = match["project"]
    try:
        with google_errors("status", job):
            # The job's own location picks the regional endpoint that serves it.
            info = job_status(project, match["region"], job, api_endpoint=api_endpoint)
    except ApiError as exc:
        hint = (
            f"; valid: credentials allowed aiplatform.{match['kind']}.get in project "
            f"{project!r} (roles/aiplatform.viewer)"
            if exc.status in (401, 403)
            else ""
        )
        raise fail(f"{source}: cannot read {job}: {exc.message}{hint}") from None
    if info["state"] == "NOT_FOUND":
        raise fail(
            f"{source}: {job} does not exist (HTTP 404); valid: a job that Vertex AI still "
            f"lists in project {project!r}, location {match['region']!r}"
        )
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        console = Console()
        for key, value in info.items():
            if key == "error" and isinstance(value, dict):
                value = f"{value.get('message', '')} (code {value.get('code', '?')})"
            console.print(f"[bold]{key}[/]: {escape(str(value))}", highlight=False, soft_wrap=True)
    if info["state"] in UNSUCCESSFUL_STATES:
        raise typer.Exit(1)


def _program_stack(
    command: str,
    program: Path | None,
    stack: str | None,
    config_file: Path | None,
    job: str | None = None,
) -> str:
    """The stack of `--program DIR --stack NAME`; one error line for what goes without it."""
    if program is None or stack is None or config_file is not None or job is not None:
        raise fail(
            f"{command} --program: reads a stack of your own program; valid: --program DIR "
            "--stack NAME [--state FILE | --outputs FILE] (no --config-file or --job)"
        )
    return stack


def _no_component(component: str | None) -> None:
    if component is not None:
        raise fail(
            "--component: picks one compute component of your own program; valid: "
            "--program DIR --stack NAME --component NAME"
        )


def _program_status(
    program: Path | None,
    name: str,
    outputs: Path | None,
    state_file: Path | None,
    endpoint: list[str],
    now: str | None,
    as_json: bool,
    component: str | None = None,
) -> None:
    from trainstack.infra.logs import LogsError, parse_endpoints, parse_time
    from trainstack.infra.program_state import read_program_state
    from trainstack.infra.program_status import program_status
    from trainstack.infra.stack_outputs import OutputsError
    from trainstack.infra.status import FAILED_STATES, render_status

    assert program is not None
    try:
        endpoints, moment = parse_endpoints(endpoint), parse_time(now) if now else None
        state = read_program_state(program, name, outputs, state_file)
        with google_errors("status", f"the state of stack {name!r}"):
            info = program_status(state, name, endpoints, moment, component)
    except (LogsError, OutputsError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        for line in render_status(info):
            typer.echo(line)
    if info["state"] in FAILED_STATES:
        raise typer.Exit(1)


def _stack_status(
    name: str,
    cfg: StackConfig,
    outputs: Path | None,
    endpoint: list[str],
    now: str | None,
    as_json: bool,
    resume: str | None = None,
) -> None:
    from trainstack.infra.logs import LogsError, parse_endpoints, parse_time
    from trainstack.infra.stack_outputs import OutputsError
    from trainstack.infra.status import FAILED_STATES, render_status, stack_status

    try:
        endpoints, moment = parse_endpoints(endpoint), parse_time(now) if now else None
        with google_errors("status", f"the state of stack {name!r}"):
            info = stack_status(cfg, name, outputs, endpoints, moment)
    except (LogsError, OutputsError, ValueError) as exc:
        raise fail(str(exc)) from None
    if resume is not None and info["target"] == "local" and info["state"] == "STOPPED":
        info["resume"] = resume
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        for line in render_status(info):
            typer.echo(line)
    if info["state"] in FAILED_STATES:
        raise typer.Exit(1)


def logs(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new entries (Ctrl-C stops).")
    ] = False,
    worker: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Only machine N's trainer entries (local: worker N); without it, a stack "
            "with a run supervisor also shows the supervisor's actions.",
        ),
    ] = None,
    outputs: OutputsOpt = None,
    program: ProgramOpt = None,
    state: StateOpt = None,
    component: ComponentOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Raw records, one per line.")] = False,
    poll_s: Annotated[float, typer.Option("--poll-s", hidden=True, min=0.0)] = 5.0,
    endpoint: EndpointOpt = None,
) -> None:
    """A deployed stack's training logs (Cloud Logging; local: the log file), one readable
    line per trainer record and per run supervisor action, oldest first. Ctrl-C ends
    --follow (exit 130). With --program DIR --stack NAME: your own program's compute, found
    as `status --program` finds it."""
    from trainstack.infra.log_source import log_source
    from trainstack.infra.logs import CloudLogs, FileLogs, LogsError, parse_endpoints, read_lines
    from trainstack.infra.stack_outputs import OutputsError

    if program is not None or state is not None:
        name, cfg = _program_stack("logs", program, stack, config_file), None
    else:
        _no_component(component)
        name, cfg = validated(stack, config_file, command="logs")
    try:
        endpoints = parse_endpoints(endpoint or [])
        source: CloudLogs | FileLogs
        if cfg is None:
            from trainstack.infra.program_state import read_program_state
            from trainstack.infra.program_status import program_log_source

            assert program is not None
            found = read_program_state(program, name, outputs, state)
            source = program_log_source(found, name, worker, component)
        else:
            source = log_source(cfg, name, outputs, worker)
        lines = read_lines(source, endpoints, follow=follow, as_json=as_json, poll_s=poll_s)
        with google_errors("logs", f"Cloud Logging of stack {name!r}"):
            for line in lines:
                typer.echo(line)
    except (LogsError, OutputsError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def local_run(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            max=MAX_LOCAL_WORKERS,
            help="Worker processes, in place of local.workers (default: local.workers, or 2).",
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Override trainer.steps.")] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Delete the run's checkpoints and start at step 0.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print rank 0's done record on stdout (summary: stderr)."),
    ] = False,
    progress_every: Annotated[float, typer.Option(hidden=True, min=0.0)] = 5.0,
) -> None:
    """Run the stack's trainer (or your own code) here: CPU, gloo, local checkpoints.

    Resumes from the run's newest checkpoint; a run already at its last step is reported
    and not started again (--fresh starts over). SIGTERM or Ctrl-C stop it like a
    preemption: every worker saves a checkpoint, one line says which, and the exit code is
    143 (SIGTERM) or 130 (Ctrl-C); run the same command to resume.
    """
    # --workers replaces local.workers before the file is checked, so it can stand in for
    # an invalid one.
    local = {f"{NAMESPACE}:local": {"workers": workers}} if workers is not None else None
    name, cfg = validated(stack, config_file, local)
    missing = missing_framework(cfg)
    if missing is not None:
        raise fail(missing)
    target = target_of(cfg)
    # Each runner imports torch or your code's needs only when this command runs.
    options: dict[str, Any] = {
        "workers": workers or target.local_run_workers(cfg) or 2,
        "root": local_root(name, target.local_run_root(cfg)),
        "console": err,
        "out": err if as_json else Console(),
        "fresh": fresh,
        "progress_every_s": progress_every,
    }
    try:
        if cfg.trainer.user_code is not None:
            from trainstack.trainers.local_code import run_local_code

            if steps is not None:
                raise fail(
                    "--steps: the bundled trainer's option; your code takes its own arguments; "
                    "valid: your code's own flags in trainer.entrypoint"
                )
            named = cfg.trainer.model_copy(update={"run_name": run_name(cfg, name)})
            named = with_secrets_from_environment(named, cfg.secrets)
            result = run_local_code(named, base_dir=current_place().base_dir, **options)
        else:
            from trainstack.trainers.local import run_local

            update: dict[str, Any] = {"run_name": run_name(cfg, name)}
            if steps is not None:
                update["steps"] = steps
            # model_copy skips validation; re-validating keeps the trainer's own checks.
            bundled = cfg.trainer.bundled()  # the trainer's own keys: nothing else in --config
            trainer = type(bundled).model_validate({**bundled.model_dump(), **update})
            result = run_local(trainer, base_dir=current_place().base_dir, **options)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if as_json and result.done is not None:
        sys.stdout.write(json.dumps(result.done) + "\n")
    raise typer.Exit(result.exit_code)


def with_secrets_from_environment(trainer: StackTrainer, secrets: frozenset[str]) -> StackTrainer:
    """`trainer` with its Pulumi-secret `env` values (`secure:`, which only the engine
    decrypts) read from this environment, as `secret_env` is on a local run: into the
    processes' environment only, never the run folder's record of its env."""
    hidden = secret_env_names(secrets)
    missing = sorted(n for n in hidden if n not in os.environ)
    if missing:
        raise fail(
            f"trainer.env.{missing[0]}: a Pulumi secret (`secure:`), which only the Pulumi "
            f"engine decrypts; valid: export {missing[0]} before local-run (read from this "
            "environment, as trainer.secret_env is)"
        )
    if not hidden:
        return trainer
    env = {k: v for k, v in (trainer.env or {}).items() if k not in hidden}
    from_here = {name: f"trainer.env.{name}" for name in hidden}  # names only: no value
    update = {"env": env, "secret_env": {**(trainer.secret_env or {}), **from_here}}
    return trainer.model_copy(update=update)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that cannot be imported, or an import hook's refusal
        return False


def missing_framework(cfg: StackConfig) -> str | None:
    """The framework a local run needs and this Python lacks, as one line, said before any
    process starts (the workers run with this interpreter): torch for the bundled torch
    trainer and for your code under `launcher: torchrun` (torchrun is torch's), TensorFlow
    and tf-keras for the bundled TensorFlow trainer. None when nothing is missing."""
    code = cfg.trainer.user_code
    if code is not None:
        if code.launcher_for(target_of(cfg).default_launcher) != "torchrun" or _installed("torch"):
            return None
        return (
            "local-run: trainer.launcher: torchrun needs torch, which is not installed in "
            f"{sys.executable}; valid: pip install 'trainstack[torch]', or trainer.launcher: node"
        )
    framework = cfg.trainer.bundled().framework
    modules = {"torch": ("torch",), "tensorflow": ("tensorflow", "tf_keras")}[framework]
    absent = [m for m in modules if not _installed(m)]
    if not absent:
        return None
    return (
        f"local-run: the bundled {framework} trainer needs {' and '.join(absent)}, which "
        f"{'is' if len(absent) == 1 else 'are'} not installed in {sys.executable}; "
        f"valid: pip install 'trainstack[{framework}]'"
    )

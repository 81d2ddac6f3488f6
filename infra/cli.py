"""The `trainstack` command line.

    trainstack plan --stack dev-tpu-v5e [--json]   offline plan: resources, totals, $/hour, quota
    trainstack plan-diff base.json head.json       Markdown diff for a pull-request comment
    trainstack local-run --stack local             run the stack's trainer on this machine
    trainstack status --stack prod-vertex-rs       state, step, checkpoint, hosts, cost so far
    trainstack logs --stack dev-tpu-v5e [--follow] the deployed stack's training logs
    trainstack quota --stack dev-a100-gke [--live] the quota a stack needs; --live: headroom
    trainstack policy --stack prod-tpu-v4-32       security policies over the stack's plan
    trainstack stacks                              list the bundled stacks

Exit codes: 0 ok; 2 invalid config or arguments, unreadable files, no credentials or an
API that refuses (one `error:` line naming what is wrong and what is allowed, never a
traceback); `local-run` exits with the trainer's code; `quota --live` exits 1 when a need
exceeds what is left; `policy` exits 1 when a rule is broken; `status` exits 1 when the
job ended without succeeding (failed, cancelled or expired).

Output that is not a terminal is never wrapped or cut, so values (quota ids, resource
names, digests) stay whole in pipes, files and CI logs; a terminal's tables fold long
values onto more lines instead of cutting them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from infra.config import PROJECT_ROOT, ConfigError, StackConfig, load_stack_config
from infra.estimate import quota_needs
from infra.local_paths import local_root, run_name
from infra.plan import (
    PlanDocumentError,
    StackFileError,
    build_plan,
    check_stack_name,
    load_stack,
    output_console,
    plan_diff,
    plans_by_stack,
    quota_table,
    render_plan,
    stack_names,
    unverified_quota_note,
    value_table,
)

if TYPE_CHECKING:
    from infra.policy import StackReport

app = typer.Typer(
    help="Google Cloud training infrastructure as code, with a bundled distributed trainer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
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
_JSON_PLAN = "the output of `trainstack plan --json`"

StackOpt = Annotated[
    str | None, typer.Option("--stack", "-s", help="A bundled stack (stacks/Pulumi.<NAME>.yaml).")
]
ConfigFileOpt = Annotated[
    Path | None,
    typer.Option("--config-file", "-c", help="A Pulumi.<stack>.yaml-shaped file to use instead."),
]


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _read_json(path: Path, what: str) -> Any:
    """The JSON document at `path`; exit 2 naming `what` when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        reason = str(exc.strerror)
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text at byte {exc.start}"
    except json.JSONDecodeError as exc:
        reason = str(exc)
    raise _fail(f"{what}: {path} is not a readable JSON plan ({reason}); valid: {_JSON_PLAN}")


def _load(stack: str | None, config_file: Path | None) -> tuple[str, dict[str, Any]]:
    try:
        return load_stack(stack, config_file)
    except StackFileError as exc:
        raise _fail(str(exc)) from None


def _validated(stack: str | None, config_file: Path | None) -> tuple[str, StackConfig]:
    """The stack's name and validated config; exit 2 naming the key when it is invalid."""
    name, config = _load(stack, config_file)
    try:
        return name, load_stack_config(config)
    except ConfigError as exc:
        raise _fail(f"invalid stack config for {name!r}:\n{exc}") from None


def _rejected_by_program(stack: str, exc: BaseException) -> str:
    """A component's own check that the config passed but the program refused.

    The engine wraps the component's error once per resource and input it flowed through;
    the innermost one says what is wrong (`<key>: <what>; valid: ...`).
    """
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    return f"invalid stack config for {stack!r}: {exc}"


@app.command()
def plan(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    stack_name: Annotated[
        str | None,
        typer.Option(
            "--stack-name",
            help="With --config-file: the stack's name (default: from the file name).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON plan.")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON plan here.")] = None,
) -> None:
    """Run the stack's program offline under Pulumi mocks (no credentials, no network)."""
    if stack_name is not None and config_file is None:
        raise _fail(
            "--stack-name: names the stack of a --config-file; a bundled stack's name is "
            "its --stack NAME"
        )
    name, config = _load(stack, config_file)
    if stack_name is not None:
        try:
            name = check_stack_name(stack_name)
        except StackFileError as exc:
            raise _fail(str(exc)) from None
    try:
        result = build_plan(name, config)
    except ConfigError as exc:
        raise _fail(f"invalid stack config for {name!r}:\n{exc}") from None
    except ValueError as exc:
        raise _fail(_rejected_by_program(name, exc)) from None
    text = json.dumps(result, indent=2, sort_keys=False)
    if out is not None:
        try:
            out.write_text(text + "\n")
        except OSError as exc:
            raise _fail(
                f"--out: cannot write {str(out)!r}: {exc.strerror}; valid: a file path in "
                "an existing, writable directory"
            ) from None
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        render_plan(result, output_console())


@app.command("plan-diff")
def plan_diff_cmd(
    base: Annotated[Path, typer.Argument(help="JSON plan of the base commit.")],
    head: Annotated[Path, typer.Argument(help="JSON plan of the head commit.")],
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Cut nothing: every changed value whole, no 65,000-character comment limit.",
        ),
    ] = False,
) -> None:
    """Markdown diff of two JSON plans, within 65,000 characters unless --full."""
    documents = []
    for label, path in (("BASE", base), ("HEAD", head)):
        document = _read_json(path, label)
        try:
            plans_by_stack(document)
        except PlanDocumentError as exc:
            raise _fail(f"{label}: {path}: {exc}") from None
        documents.append(document)
    text = plan_diff(documents[0], documents[1], full=full)
    sys.stdout.write(text + "\n")


@app.command()
def quota(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    live: Annotated[
        bool, typer.Option("--live", help="Also read limits and usage (needs credentials).")
    ] = False,
    endpoint: Annotated[str | None, typer.Option(hidden=True)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The quota the stack needs (service, quota id, dimensions, amount); offline by default."""
    _, cfg = _validated(stack, config_file)
    needs = quota_needs(cfg)
    if live and cfg.project is None:
        raise _fail("--live reads a Google Cloud project's quota; this stack has no gcp:project")
    if live:
        from google.auth.exceptions import GoogleAuthError

        from infra.quota_live import FAILED_STATUSES, LiveQuotaError, read_live_quota

        assert cfg.project is not None
        try:
            rows = [asdict(q) for q in read_live_quota(cfg.project, needs, endpoint=endpoint)]
        except LiveQuotaError as exc:
            raise _fail(str(exc)) from None
        except GoogleAuthError as exc:
            # Credentials were found but are unusable (expired, revoked, wrong file).
            raise _fail(f"--live {_auth_failure(exc)}") from None
        if as_json:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        else:
            output_console().print(live_quota_table(rows))
        if any(r["status"] in FAILED_STATUSES for r in rows):
            raise typer.Exit(1)
        return
    if as_json:
        sys.stdout.write(json.dumps(needs, indent=2) + "\n")
        return
    console = output_console()
    console.print(quota_table(needs))
    note = unverified_quota_note(needs)
    if note:
        console.print(f"[yellow]note:[/] {escape(note)}")


def live_quota_table(rows: list[dict[str, Any]]) -> Table:
    table = value_table(
        "Quota headroom (live)",
        ("quota id", "dimensions", "needed", "limit", "usage", "headroom", "status"),
    )
    for r in rows:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(r["dimensions"].items())) or "global"
        cells = [r["limit"], r["usage"], r["headroom"]]
        status = escape(r["status"] + (f" ({r['detail']})" if r["detail"] else ""))
        table.add_row(
            r["quota_id"],
            dims,
            str(r["needed"]),
            *("-" if c is None else str(c) for c in cells),
            status,
        )
    return table


@app.command()
def policy(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    plan_file: Annotated[
        Path | None,
        typer.Option("--plan", help="A JSON plan from `trainstack plan --json` (or a list)."),
    ] = None,
    all_stacks: Annotated[
        bool, typer.Option("--all", help="Every stack in stacks/ (bundled and your own).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check the stack's planned resources against the security policies (policies/rules/).

    The same rules run in `pulumi preview --policy-pack policies/`. Exit 0 clean, 1 when any
    rule is broken (each violation names the rule and the resource), 2 invalid config.
    """
    from infra.policy import PlanFileError, check_plan, check_stack

    chosen = [stack is not None, config_file is not None, plan_file is not None, all_stacks]
    if sum(chosen) != 1:
        raise _fail("give exactly one of --stack NAME, --config-file PATH, --plan PATH or --all")
    reports: list[StackReport] = []
    if plan_file is not None:
        document = _read_json(plan_file, "--plan")
        try:
            reports = check_plan(document)
        except PlanFileError as exc:
            raise _fail(f"--plan: {plan_file}: {exc}") from None
    else:
        targets: list[tuple[str | None, Path | None]] = (
            [(name, None) for name in stack_names()] if all_stacks else [(stack, config_file)]
        )
        for target_stack, target_file in targets:
            name, config = _load(target_stack, target_file)
            try:
                reports.append(check_stack(name, config))
            except ConfigError as exc:
                raise _fail(f"invalid stack config for {name!r}:\n{exc}") from None
            except ValueError as exc:
                raise _fail(_rejected_by_program(name, exc)) from None
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in reports], indent=2) + "\n")
    else:
        _print_policy_reports(reports)
    if any(not r.clean for r in reports):
        raise typer.Exit(1)


def _print_policy_reports(reports: list[StackReport]) -> None:
    from infra.policy import ENFORCEMENT
    from policies.rules import RULES

    for report in reports:
        if report.clean:
            typer.echo(
                f"stack {report.stack}: clean ({report.resources} resources, {len(RULES)} rules)"
            )
            continue
        typer.echo(f"stack {report.stack}: {len(report.violations)} violation(s)")
        for v in report.violations:
            typer.echo(f"  [{ENFORCEMENT}] {v}")
    broken = [r for r in reports if not r.clean]
    if broken:
        count = sum(len(r.violations) for r in broken)
        typer.echo(
            f"{count} policy violation(s) in {len(broken)} of {len(reports)} stack(s); "
            "mandatory rules block `pulumi up --policy-pack policies/`"
        )


@app.command()
def stacks() -> None:
    """List the stacks in stacks/: the bundled ones and any you added."""
    for name in stack_names():
        typer.echo(name)


@app.command()
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
    endpoint: EndpointOpt = None,
    now: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Where a deployed stack's training stands, on every target: state, step reached, last
    checkpoint, hosts or pods up, cost so far at list price. `--job` reads one Vertex AI job.

    Exit 0 while training is queued or running and when it succeeded; 1 when it failed, was
    cancelled or expired; 2 when it cannot be read (no credentials, no access, no outputs).
    """
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    from components._google_api import ApiError
    from components._vertex_provider import job_status

    if job is None:
        name, cfg = _validated(stack, config_file)
        _stack_status(name, cfg, outputs, endpoint or [], now, as_json)
        return
    if stack is not None or config_file is not None:  # a job alone needs no stack
        name, cfg = _validated(stack, config_file)
        if cfg.vertex is None:
            raise _fail(f"status reads Vertex AI jobs; stack {name!r} has target {cfg.target!r}")
    source = "--job"
    match = JOB_NAME.fullmatch(job)
    if match is None:
        raise _fail(
            f"{source}: {job!r} is not a Vertex AI job resource name; valid: {JOB_NAME_FORMS}"
        )
    project = match["project"]
    try:
        # The job's own location picks the regional endpoint that serves it.
        info = job_status(project, match["region"], job, api_endpoint=api_endpoint)
    except DefaultCredentialsError:
        raise _fail(
            f"status needs Application Default Credentials to read {job}: {_adc_hint()}"
        ) from None
    except GoogleAuthError as exc:
        raise _fail(f"status {_auth_failure(exc)}") from None
    except ApiError as exc:
        hint = (
            f"; valid: credentials allowed aiplatform.{match['kind']}.get in project "
            f"{project!r} (roles/aiplatform.viewer)"
            if exc.status in (401, 403)
            else ""
        )
        raise _fail(f"{source}: cannot read {job}: {exc.message}{hint}") from None
    if info["state"] == "NOT_FOUND":
        raise _fail(
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


def _adc_hint() -> str:
    """What to do when Application Default Credentials cannot be loaded."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        return (
            f"GOOGLE_APPLICATION_CREDENTIALS is {path!r}, which is not a readable credentials "
            "file; valid: a service-account or `gcloud auth application-default login` JSON "
            "file, or unset it"
        )
    return (
        "run `gcloud auth application-default login` "
        "(or set GOOGLE_APPLICATION_CREDENTIALS to a credentials file)"
    )


def _auth_failure(exc: Exception) -> str:
    """`could not authenticate ...` for credentials that exist but are refused."""
    detail = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    detail = " ".join(detail.split())
    return (
        f"could not authenticate with Application Default Credentials ({detail}); renew them "
        "with `gcloud auth application-default login`, or point GOOGLE_APPLICATION_CREDENTIALS "
        "at a current key"
    )


def _stack_status(
    name: str,
    cfg: StackConfig,
    outputs: Path | None,
    endpoint: list[str],
    now: str | None,
    as_json: bool,
) -> None:
    from infra.logs import LogsError, parse_endpoints, parse_time
    from infra.stack_outputs import OutputsError
    from infra.status import FAILED_STATES, render_status, stack_status

    try:
        endpoints, moment = parse_endpoints(endpoint), parse_time(now) if now else None
        with _google_errors("status", f"the state of stack {name!r}"):
            info = stack_status(cfg, name, outputs, endpoints, moment)
    except (LogsError, OutputsError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        for line in render_status(info):
            typer.echo(line)
    if info["state"] in FAILED_STATES:
        raise typer.Exit(1)


OutputsOpt = Annotated[
    Path | None,
    typer.Option(
        "--outputs",
        help="JSON of the stack's outputs (`pulumi stack output --json --show-secrets`); "
        "default: $TRAINSTACK_OUTPUTS, else the Pulumi CLI.",
    ),
]
EndpointOpt = Annotated[list[str] | None, typer.Option("--endpoint", hidden=True)]


@app.command()
def logs(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new entries (Ctrl-C stops).")
    ] = False,
    worker: Annotated[
        int | None, typer.Option(min=0, help="Only machine N (local: worker N).")
    ] = None,
    outputs: OutputsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Raw records, one per line.")] = False,
    poll_s: Annotated[float, typer.Option("--poll-s", hidden=True, min=0.0)] = 5.0,
    endpoint: EndpointOpt = None,
) -> None:
    """A deployed stack's training logs (Cloud Logging; local: the log file), one readable
    line per trainer record. Ctrl-C ends --follow (exit 130)."""
    from infra.logs import LogsError, log_source, parse_endpoints, read_lines
    from infra.stack_outputs import OutputsError

    name, cfg = _validated(stack, config_file)
    try:
        endpoints = parse_endpoints(endpoint or [])
        source = log_source(cfg, name, outputs, worker)
        lines = read_lines(source, endpoints, follow=follow, as_json=as_json, poll_s=poll_s)
        with _google_errors("logs", f"Cloud Logging of stack {name!r}"):
            for line in lines:
                typer.echo(line)
    except (LogsError, OutputsError) as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@contextlib.contextmanager
def _google_errors(command: str, what: str) -> Iterator[None]:
    """Missing or refused credentials as one `error:` line (exit 2), like `quota --live`."""
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    try:
        yield
    except DefaultCredentialsError:
        raise _fail(
            f"{command} needs Application Default Credentials to read {what}: {_adc_hint()}"
        ) from None
    except GoogleAuthError as exc:
        raise _fail(f"{command} {_auth_failure(exc)}") from None


@app.command("local-run")
def local_run(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Worker processes (default: local.workers, or 2).")
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
    """Run the stack's trainer here: CPU, gloo, one process per worker, local checkpoints.

    Resumes from the run's newest checkpoint; a run already at its last step is reported
    and not started again (--fresh starts over). SIGTERM or Ctrl-C stop it like a
    preemption: every worker saves a checkpoint, one line says which, and the exit code is
    143 (SIGTERM) or 130 (Ctrl-C); run the same command to resume.
    """
    from trainers.local import run_local  # torch is only needed for this command

    name, cfg = _validated(stack, config_file)
    if cfg.trainer.user_code is not None:
        if steps is not None:
            raise _fail("--steps: the bundled trainer's option; your code takes its own arguments")
        raise typer.Exit(_local_run_code(name, cfg, workers, fresh, as_json, progress_every))
    update: dict[str, Any] = {"run_name": run_name(cfg, name)}
    if steps is not None:
        update["steps"] = steps
    # model_copy skips validation; re-validating keeps the trainer's own checks in force.
    bundled = cfg.trainer.bundled()  # the trainer's own keys: its --config takes nothing else
    trainer = type(bundled).model_validate({**bundled.model_dump(), **update})
    n = workers or (cfg.local.workers if cfg.local else 2)
    try:
        result = run_local(
            trainer,
            workers=n,
            root=local_root(cfg, name),
            console=err,
            out=err if as_json else Console(),
            fresh=fresh,
            progress_every_s=progress_every,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json and result.done is not None:
        sys.stdout.write(json.dumps(result.done) + "\n")
    raise typer.Exit(result.exit_code)


def _local_run_code(
    name: str,
    cfg: StackConfig,
    workers: int | None,
    fresh: bool,
    as_json: bool,
    progress_every: float,
) -> int:
    """`local-run` of your own code (`trainer.entrypoint`): `trainers.local_code`."""
    from trainers.local_code import run_local_code

    trainer = cfg.trainer.model_copy(update={"run_name": run_name(cfg, name)})
    try:
        result = run_local_code(
            trainer,
            workers=workers or (cfg.local.workers if cfg.local else 2),
            root=local_root(cfg, name),
            base_dir=PROJECT_ROOT,
            console=err,
            out=err if as_json else Console(),
            fresh=fresh,
            progress_every_s=progress_every,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json and result.done is not None:
        sys.stdout.write(json.dumps(result.done) + "\n")
    return result.exit_code


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()

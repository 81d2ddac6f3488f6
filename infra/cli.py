"""The `trainstack` command line.

    trainstack plan --stack dev-tpu-v5e [--json]   offline plan: resources, totals, $/hour, quota
    trainstack plan-diff base.json head.json       Markdown diff for a pull-request comment
    trainstack local-run --stack local             run the stack's trainer on this machine
    trainstack status --stack prod-vertex-rs       live state of the stack's Vertex AI job
    trainstack quota --stack dev-a100-gke [--live] the quota a stack needs; --live: headroom
    trainstack policy --stack prod-tpu-v4-32       security policies over the stack's plan
    trainstack stacks                              list the bundled stacks

Exit codes: 0 ok; 2 invalid config or arguments (the message names the key); `local-run`
exits with the trainer's code; `quota --live` exits 1 when a need exceeds what is left;
`policy` exits 1 when a rule is broken.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from infra.config import ConfigError, StackConfig, load_stack_config
from infra.estimate import quota_needs
from infra.mocks import REPO_ROOT
from infra.plan import (
    StackFileError,
    build_plan,
    bundled_stacks,
    load_stack,
    plan_diff,
    quota_table,
    render_plan,
    unverified_quota_note,
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

StackOpt = Annotated[
    str | None, typer.Option("--stack", "-s", help="A bundled stack (stacks/Pulumi.<NAME>.yaml).")
]
ConfigFileOpt = Annotated[
    Path | None,
    typer.Option("--config-file", "-c", help="A Pulumi.<stack>.yaml-shaped file to use instead."),
]


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


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


@app.command()
def plan(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON plan.")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON plan here.")] = None,
) -> None:
    """Run the stack's program offline under Pulumi mocks (no credentials, no network)."""
    name, config = _load(stack, config_file)
    try:
        result = build_plan(name, config)
    except ConfigError as exc:
        raise _fail(f"invalid stack config for {name!r}:\n{exc}") from None
    text = json.dumps(result, indent=2, sort_keys=False)
    if out is not None:
        out.write_text(text + "\n")
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        render_plan(result, Console())


@app.command("plan-diff")
def plan_diff_cmd(
    base: Annotated[Path, typer.Argument(help="JSON plan of the base commit.")],
    head: Annotated[Path, typer.Argument(help="JSON plan of the head commit.")],
) -> None:
    """Markdown diff of two JSON plans, never over 65,000 characters."""
    documents = []
    for path in (base, head):
        try:
            documents.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise _fail(f"{path}: not a readable JSON plan ({exc})") from None
    sys.stdout.write(plan_diff(documents[0], documents[1]) + "\n")


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
        from infra.quota_live import LiveQuotaError, read_live_quota

        assert cfg.project is not None
        try:
            rows = [asdict(q) for q in read_live_quota(cfg.project, needs, endpoint=endpoint)]
        except LiveQuotaError as exc:
            raise _fail(str(exc)) from None
        if as_json:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        else:
            Console().print(live_quota_table(rows))
        if any(r["status"] == "SHORT" for r in rows):
            raise typer.Exit(1)
        return
    if as_json:
        sys.stdout.write(json.dumps(needs, indent=2) + "\n")
        return
    console = Console()
    console.print(quota_table(needs))
    note = unverified_quota_note(needs)
    if note:
        console.print(f"[yellow]note:[/] {note}")


def live_quota_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Quota headroom (live)")
    for column in ("quota id", "dimensions", "needed", "limit", "usage", "headroom", "status"):
        table.add_column(column)
    for r in rows:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(r["dimensions"].items())) or "global"
        cells = [r["limit"], r["usage"], r["headroom"]]
        status = r["status"] + (f" ({r['detail']})" if r["detail"] else "")
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
    all_stacks: Annotated[bool, typer.Option("--all", help="Every bundled stack.")] = False,
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
        try:
            reports = check_plan(json.loads(plan_file.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise _fail(f"--plan: {plan_file} is not a readable JSON plan ({exc})") from None
        except PlanFileError as exc:
            raise _fail(f"--plan: {plan_file}: {exc}") from None
    else:
        targets: list[tuple[str | None, Path | None]] = (
            [(name, None) for name in bundled_stacks()] if all_stacks else [(stack, config_file)]
        )
        for target_stack, target_file in targets:
            name, config = _load(target_stack, target_file)
            try:
                reports.append(check_stack(name, config))
            except ConfigError as exc:
                raise _fail(f"invalid stack config for {name!r}:\n{exc}") from None
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
    """List the bundled stacks."""
    for name in bundled_stacks():
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
) -> None:
    """Live state of the stack's Vertex AI job (dynamic resources cannot be refreshed)."""
    from components._vertex_provider import job_status

    name, cfg = _validated(stack, config_file)
    if cfg.vertex is None:
        raise _fail(f"status reads Vertex AI jobs; stack {name!r} has target {cfg.target!r}")
    if job is None:
        job = _stack_output(name, "job_name")
    assert cfg.project is not None and cfg.region is not None
    info = job_status(cfg.project, cfg.vertex.region or cfg.region, job, api_endpoint=api_endpoint)
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
        return
    console = Console()
    for key, value in info.items():
        console.print(f"[bold]{key}[/]: {value}", highlight=False, soft_wrap=True)


def _stack_output(stack: str, key: str) -> str:
    """A deployed stack's output, read with the Pulumi CLI."""
    import shutil
    import subprocess

    if shutil.which("pulumi") is None:
        raise _fail(
            f"reading stack {stack!r}'s `{key}` output needs the Pulumi CLI; install it or "
            f"pass --job projects/P/locations/R/customJobs/ID"
        )
    done = subprocess.run(
        ["pulumi", "stack", "output", key, "--stack", stack, "--cwd", str(REPO_ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise _fail(f"stack {stack!r} has no `{key}` output: {done.stderr.strip()}")
    return done.stdout.strip()


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
    update: dict[str, Any] = {"run_name": name}
    if steps is not None:
        update["steps"] = steps
    # model_copy skips validation; re-validating keeps the trainer's own checks in force.
    trainer = type(cfg.trainer).model_validate({**cfg.trainer.model_dump(), **update})
    root = Path(cfg.local.root) if cfg.local else Path(".trainstack/local") / name
    if not root.is_absolute():
        # Relative roots live beside Pulumi.yaml, as they do under `pulumi up -s local`.
        root = REPO_ROOT / root
    n = workers or (cfg.local.workers if cfg.local else 2)
    try:
        result = run_local(
            trainer,
            workers=n,
            root=root,
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


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()

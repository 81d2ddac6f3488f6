"""The `trainstack` command line.

    trainstack plan --stack dev-tpu-v5e [--json]   offline plan: resources, totals, $/hour, quota
    trainstack plan-diff base.json head.json       Markdown diff for a pull-request comment
    trainstack local-run --stack local             run the stack's trainer on this machine
    trainstack status --stack prod-vertex-rs       state, step, checkpoint, hosts, cost so far
    trainstack logs --stack dev-tpu-v5e [--follow] the deployed stack's training logs
    trainstack quota --stack dev-a100-gke [--live] the quota a stack needs; --live: headroom
    trainstack policy --stack prod-tpu-v4-32       security policies over the stack's plan
    trainstack stacks [--examples]                 your project's stacks, one name a line (your
                                                   program's named on stderr); --examples: bundled
    trainstack plan --program DIR --stack dev      (also policy, plan-diff) your own program

Exit codes: 0 ok; 2 invalid config or arguments, unreadable files, no credentials or an
API that refuses (one `error:` line naming what is wrong and what is allowed, never a
traceback); `local-run` exits with the trainer's code; `quota --live` exits 1 when a need
exceeds what is left; `policy` exits 1 when a rule is broken; `status` exits 1 when the
job ended without succeeding (failed, cancelled or expired). `policy --all` checks every
stack of the project, a stack of your own program (its file has no `trainstack:` keys) as
`policy --program <project folder> --stack NAME` does, then exits 2 when any stack could not
be checked (one `error:` line each, after the reports), else 1 when a rule is broken.

Output that is not a terminal is never wrapped or cut, so values (quota ids, resource
names, digests) stay whole in pipes, files and CI logs; a terminal's tables fold long
values onto more lines instead of cutting them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trainstack.infra import cli_run
from trainstack.infra.cli_base import (
    ConfigFileOpt,
    ProgramOpt,
    StackOpt,
    app,
    auth_failure,
    config_problems,
    err,
    fail,
    fail_each,
    invalid_config,
    load,
    program_folder,
    read_json,
    rejected_by_program,
    scoped,
    validated,
)
from trainstack.infra.config import (
    NAMESPACE,
    ConfigError,
    NotATrainstackStack,
    namespace_typo,
)
from trainstack.infra.estimate import quota_needs
from trainstack.infra.plan import (
    PlanDocumentError,
    StackFileError,
    build_plan,
    check_stack_name,
    example_names,
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
from trainstack.infra.project import (
    EXAMPLE_PREFIX,
    PROJECT_FILE,
    Project,
    ProjectFileError,
    find_project,
)

if TYPE_CHECKING:
    from trainstack.infra.policy import StackReport


def _program_plan(program: Path, stack: str | None) -> dict[str, Any]:
    """The JSON plan of your own program's stack; exit 2 with one line when it cannot be
    made (trainstack.infra.program_plan)."""
    from trainstack.infra.program_plan import build_program_plan, program_stack_required
    from trainstack.infra.program_run import ProgramError

    try:
        if stack is None:
            raise ProgramError(program_stack_required(program))
        return build_program_plan(program, stack)
    except ProgramError as exc:
        # One `error:` line per problem (a component may report several).
        *lines, last = str(exc).splitlines()
        for line in lines:
            fail(line)
        raise fail(last) from None


@app.command()
@scoped
def plan(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    program: ProgramOpt = None,
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
    """Run the stack's program offline under Pulumi mocks (no credentials, no network).

    With --program DIR: your own Pulumi program in DIR, with its Pulumi.<--stack>.yaml.
    """
    if program is not None and (config_file is not None or stack_name is not None):
        raise fail(
            "--program: plans a stack file of the program's own; valid: --program DIR "
            "--stack NAME, without --config-file or --stack-name"
        )
    if program is not None:
        result = _program_plan(program, stack)
    else:
        result = _stack_plan(stack, config_file, stack_name)
    text = json.dumps(result, indent=2, sort_keys=False)
    if out is not None:
        try:
            out.write_text(text + "\n")
        except OSError as exc:
            raise fail(
                f"--out: cannot write {str(out)!r}: {exc.strerror}; valid: a file path in "
                "an existing, writable directory"
            ) from None
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        render_plan(result, output_console())


def _stack_plan(
    stack: str | None, config_file: Path | None, stack_name: str | None
) -> dict[str, Any]:
    if stack_name is not None and config_file is None:
        raise fail(
            "--stack-name: names the stack of a --config-file; a bundled stack's name is "
            "its --stack NAME; valid: --stack-name with --config-file"
        )
    name, config = load(stack, config_file)
    if stack_name is not None:
        try:
            name = check_stack_name(stack_name)
        except StackFileError as exc:
            raise fail(str(exc)) from None
    try:
        return build_plan(name, config)
    except ConfigError as exc:
        raise fail_each(invalid_config(name, exc, stack, config_file)) from None
    except ValueError as exc:
        raise fail(rejected_by_program(name, exc)) from None


@app.command("plan-diff")
def plan_diff_cmd(
    base: Annotated[Path, typer.Argument(help="JSON plan of the base commit.")],
    head: Annotated[
        Path | None,
        typer.Argument(help="JSON plan of the head commit (with --program: the program now)."),
    ] = None,
    program: ProgramOpt = None,
    stack: Annotated[
        str | None, typer.Option("--stack", "-s", help="With --program: the program's stack.")
    ] = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Cut nothing: every changed value whole, no 65,000-character comment limit.",
        ),
    ] = False,
    show_values: Annotated[
        bool,
        typer.Option(
            "--show-values",
            help="Show trainer.env values as written, not as sha256:<8 hex> (keep it out of "
            "pull-request comments).",
        ),
    ] = False,
) -> None:
    """Markdown diff of two JSON plans, within 65,000 characters unless --full; your code's
    trainer.env values as a short hash unless --show-values.

    With --program DIR --stack NAME, give BASE only: HEAD is that program's plan now.
    """
    if program is None and (head is None or stack is not None):
        raise fail(
            "plan-diff: give BASE.json HEAD.json, or --program DIR --stack NAME BASE.json "
            "(HEAD is then the program's plan now)"
        )
    if program is not None and head is not None:
        raise fail(
            f"plan-diff --program: HEAD is the program's plan now, so give BASE.json only "
            f"(got {str(base)!r} and {str(head)!r})"
        )
    documents = []
    for label, path in (("BASE", base), ("HEAD", head)):
        if path is None:
            assert program is not None
            document: Any = _program_plan(program, stack)
        else:
            document = read_json(path, label)
        try:
            plans_by_stack(document)
        except PlanDocumentError as exc:
            raise fail(f"{label}: {path}: {exc}") from None
        documents.append(document)
    text = plan_diff(documents[0], documents[1], full=full, show_values=show_values)
    sys.stdout.write(text + "\n")


@app.command()
@scoped
def quota(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    program: ProgramOpt = None,
    live: Annotated[
        bool, typer.Option("--live", help="Also read limits and usage (needs credentials).")
    ] = False,
    endpoint: Annotated[str | None, typer.Option(hidden=True)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The quota the stack needs (service, quota id, dimensions, amount); offline by default.

    With --program DIR --stack NAME: what your own program's trainstack components need
    (their `facts`), offline.
    """
    if program is not None:
        if live or config_file is not None:
            raise fail(
                "quota --program: reads the program's components offline; valid: --program DIR "
                "--stack NAME [--json], without --live or --config-file"
            )
        needs = _program_plan(program, stack).get("quota", [])
        _print_quota(needs, as_json)
        return
    _, cfg = validated(stack, config_file)
    needs = quota_needs(cfg)
    if live and cfg.project is None:
        raise fail(
            "--live reads a Google Cloud project's quota; this stack has no gcp:project; "
            "valid: --live on a stack with gcp:project"
        )
    if live:
        from google.auth.exceptions import GoogleAuthError

        from trainstack.infra.quota_live import FAILED_STATUSES, LiveQuotaError, read_live_quota

        assert cfg.project is not None
        try:
            rows = [asdict(q) for q in read_live_quota(cfg.project, needs, endpoint=endpoint)]
        except LiveQuotaError as exc:
            raise fail(str(exc)) from None
        except GoogleAuthError as exc:
            # Credentials were found but are unusable (expired, revoked, wrong file).
            raise fail(f"--live {auth_failure(exc)}") from None
        if as_json:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        else:
            output_console().print(live_quota_table(rows))
        if any(r["status"] in FAILED_STATUSES for r in rows):
            raise typer.Exit(1)
        return
    _print_quota(needs, as_json)


def _print_quota(needs: list[dict[str, Any]], as_json: bool) -> None:
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
        raise_to = f"; raise the limit to {r['request']}" if r.get("request") is not None else ""
        detail = r["detail"] + raise_to if r["detail"] else raise_to.removeprefix("; ")
        status = escape(r["status"] + (f" ({detail})" if detail else ""))
        table.add_row(
            r["quota_id"],
            dims,
            str(r["needed"]),
            *("-" if c is None else str(c) for c in cells),
            status,
        )
    return table


@app.command()
@scoped
def policy(
    stack: StackOpt = None,
    config_file: ConfigFileOpt = None,
    program: ProgramOpt = None,
    plan_file: Annotated[
        Path | None,
        typer.Option("--plan", help="A JSON plan from `trainstack plan --json` (or a list)."),
    ] = None,
    all_stacks: Annotated[bool, typer.Option("--all", help="Every stack of your project.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check the stack's planned resources against the security policies (policies/rules/).

    The same rules run in `pulumi preview --policy-pack policies/`. Exit 0 clean, 1 when any
    rule is broken (each violation names the rule and the resource), 2 invalid config.

    With --program DIR --stack NAME: the resources your own Pulumi program in DIR registers.
    """
    from trainstack.infra.policy import PlanFileError, check_plan, check_resources, check_stack

    chosen = [
        stack is not None or program is not None,
        config_file is not None,
        plan_file is not None,
        all_stacks,
    ]
    if sum(chosen) != 1:
        raise fail(
            "give exactly one of --stack NAME, --config-file PATH, --plan PATH or --all "
            "(--program DIR takes --stack NAME, the program's stack)"
        )
    reports: list[StackReport] = []
    problems: list[str] = []
    if program is not None:
        plan = _program_plan(program, stack)
        reports = [check_resources(plan["stack"], plan["resources"])]
    elif plan_file is not None:
        document = read_json(plan_file, "--plan")
        try:
            reports = check_plan(document)
        except PlanFileError as exc:
            raise fail(f"--plan: {plan_file}: {exc}") from None
    elif all_stacks:
        reports, problems = _check_all_stacks()
    else:
        name, config = load(stack, config_file)
        try:
            reports.append(check_stack(name, config))
        except ConfigError as exc:
            raise fail_each(invalid_config(name, exc, stack, config_file, "policy")) from None
        except ValueError as exc:
            raise fail(rejected_by_program(name, exc)) from None
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in reports], indent=2) + "\n")
    else:
        _print_policy_reports(reports, own_program=program is not None)
    if problems:
        # Each stack that could not be checked is one `error:` line, after the reports.
        raise fail_each(problems)
    if any(not r.clean for r in reports):
        raise typer.Exit(1)


def _check_all_stacks() -> tuple[list[StackReport], list[str]]:
    """`policy --all`: a report for every stack of the project that could be checked, and
    one line for each that could not. A stack file without `trainstack:` keys is a stack of
    the project's own program: it is checked as `policy --program <project> --stack NAME`
    would (`trainstack.infra.program_plan`)."""
    from trainstack.infra.policy import check_resources, check_stack
    from trainstack.infra.program_plan import build_program_plan
    from trainstack.infra.program_run import ProgramError

    reports: list[StackReport] = []
    problems: list[str] = []
    for target in project_stacks():
        name, config = load(target, None)
        try:
            reports.append(check_stack(name, config))
            continue
        except NotATrainstackStack:
            pass  # run below, outside this handler: the program's own errors are not its
        except ConfigError as exc:
            problems.extend(config_problems(name, exc))
            continue
        except ValueError as exc:
            problems.append(rejected_by_program(name, exc))
            continue
        folder = program_folder(target, None)
        try:
            plan = build_program_plan(folder, name)
        except ProgramError as exc:
            problems.extend(f"stack {name!r} not checked: {line}" for line in str(exc).splitlines())
            continue
        report = check_resources(name, plan["resources"])
        reports.append(replace(report, program=str(folder)))
    return reports, problems


def _print_policy_reports(reports: list[StackReport], own_program: bool = False) -> None:
    """The reports in words (`own_program`: of `--program DIR`)."""
    from trainstack.infra.policy import ENFORCEMENT
    from trainstack.policies.rules import RULES

    for report in reports:
        program = "" if report.program is None else f"; your program, --program {report.program}"
        if report.clean:
            typer.echo(
                f"stack {report.stack}: clean ({report.resources} resources, {len(RULES)} rules"
                f"{program})"
            )
            continue
        where = "" if report.program is None else f" (--program {report.program})"
        typer.echo(f"stack {report.stack}: {len(report.violations)} violation(s){where}")
        for v in report.violations:
            typer.echo(f"  [{ENFORCEMENT}] {v}")
    broken = [r for r in reports if not r.clean]
    if broken:
        count = sum(len(r.violations) for r in broken)
        typer.echo(
            f"{count} policy violation(s) in {len(broken)} of {len(reports)} stack(s); "
            f"mandatory rules block `pulumi up --policy-pack {_policy_pack(broken, own_program)}`"
        )
        labels = [v for r in broken if own_program or r.program is not None for v in r.violations]
        if any(LABELS_RULE in str(v) for v in labels):
            typer.echo(LABELS_HINT)


LABELS_RULE = "[accelerators-labelled]"
LABELS_HINT = (
    "accelerators-labelled: A100Cluster and TpuGkeSlices given `environment` label their "
    "machines with it and with `stack` (the Pulumi stack's name, unless `labels` has one); "
    "TpuPodSlice adds `stack`; give the rest in the component's `labels`, e.g. "
    '{"environment": "dev"}'
)
"""What a program passes for the labels the policy pack requires (`components.naming`)."""


def _policy_pack(reports: list[StackReport], own_program: bool) -> str:
    """The pack's folder as `--policy-pack` takes it: `policies/` in trainstack's own project,
    the installed `trainstack.policies` folder for a program of your own (it has none)."""
    if not own_program and all(r.program is None for r in reports):
        return "policies/"
    import trainstack.policies

    return str(Path(trainstack.policies.__file__).parent)


def project_stacks() -> list[str]:
    """`stack_names()`, with an unreadable Pulumi.yaml as one `error:` line."""
    try:
        return stack_names()
    except ProjectFileError as exc:
        raise fail(str(exc)) from None


@app.command()
def stacks(
    examples: Annotated[
        bool,
        typer.Option("--examples", help="List the bundled stacks instead, as --stack takes them."),
    ] = False,
    trainstack_only: Annotated[
        bool,
        typer.Option(
            "--trainstack", help="Only trainstack stacks (those `plan --stack NAME` takes)."
        ),
    ] = False,
    program_only: Annotated[
        bool,
        typer.Option(
            "--program",
            help="Only stacks of your own program (those `plan --program DIR --stack NAME` takes).",
        ),
    ] = False,
) -> None:
    """List your project's stacks (those in the stackConfigDir of the nearest Pulumi.yaml).

    Names only, one per line on stdout, for scripts (`for s in $(trainstack stacks)`); which
    are your own program's (no `trainstack:` keys), or that there are none, goes to stderr.
    """
    if trainstack_only and program_only:
        raise fail("--trainstack and --program exclude each other; valid: one of them or neither")
    if examples:
        for name in example_names():
            typer.echo(EXAMPLE_PREFIX + name)
        return
    every = project_stacks()
    programs = [name for name in every if _is_program_stack(name)]
    names = (
        [name for name in every if name not in programs]
        if trainstack_only
        else programs
        if program_only
        else every
    )
    for name in names:
        typer.echo(name)
    project = find_project()
    if not names:
        _note(_no_stacks(project, len(every), trainstack_only, program_only))
    elif not (trainstack_only or program_only):
        for name in programs:
            _note(
                f"{name}: a stack of your own program (no `trainstack:` keys): trainstack plan "
                f"--program {project.root} --stack {name}"
            )


def _note(line: str) -> None:
    err.print(line, highlight=False, soft_wrap=True, markup=False)


def _no_stacks(project: Project, files: int, trainstack_only: bool, program_only: bool) -> str:
    """The stderr line of `stacks` when it lists none."""
    where = (
        f"{project.stacks_dir} (the stackConfigDir of {project.root / PROJECT_FILE})"
        if (project.root / PROJECT_FILE).is_file()
        else f"{project.root} (no {PROJECT_FILE} there or in a folder above)"
    )
    if not files:
        return f"no stacks: no Pulumi.<NAME>.yaml in {where}"
    kind = "trainstack stacks" if trainstack_only else "stacks of your own program"
    return f"no {kind} among the {files} stack files in {where}"


def _is_program_stack(name: str) -> bool:
    """True for a stack file that holds no `trainstack:*` key (an unreadable one is not
    judged here: the commands that read it say what is wrong)."""
    try:
        _, config = load_stack(name, None)
    except (StackFileError, ProjectFileError):
        return False
    return not any(
        key.partition(":")[0] == NAMESPACE or namespace_typo(key) is not None for key in config
    )


app.command()(scoped(cli_run.status))
app.command()(scoped(cli_run.logs))
app.command("local-run")(scoped(cli_run.local_run))


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()

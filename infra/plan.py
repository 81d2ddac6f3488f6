"""Offline plans: the stack program run under recording mocks, rendered for people and CI.

`build_plan` runs exactly the program `pulumi up` runs (`trainstack.infra.compose.main_program`)
with the stack file's config, records every registration, and adds what the config alone
tells: accelerator totals, an hourly cost estimate from the catalog, and the quota the
stack needs. `render_plan` prints it as a tree; `plan_diff` (infra/plan_diff.py, re-exported
here) turns two JSON plans into a Markdown comment for a pull request that always fits
GitHub's comment limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from trainstack.components import _strict_yaml as strict_yaml
from trainstack.components.catalog.images import availability_date
from trainstack.components.catalog.names import stack_name_problem
from trainstack.components.facts import QUOTA_OFFLINE_NOTE
from trainstack.infra.code_plan import code_rows, code_summary
from trainstack.infra.compose import main_program
from trainstack.infra.config import ConfigError, StackConfig, load_stack_config
from trainstack.infra.config_secrets import ciphertext_digests
from trainstack.infra.estimate import (
    limits_plan,
    quota_needs,
    still_billing_note,
    summarize,
    supervisor_note,
    unbounded_run_note,
)
from trainstack.infra.mocks import RecordedResource, run_program
from trainstack.infra.plan_diff import (  # noqa: F401 - the diff's API is re-exported beside the plan
    MAX_DIFF_CHARS,
    PlanDocumentError,
    integral_numbers,
    plan_diff,
    plans_by_stack,
)
from trainstack.infra.plan_runs import PROVIDER_INPUT, runs_lines
from trainstack.infra.project import (
    EXAMPLE_PREFIX,
    StackPlace,
    example_files,
    example_place,
    file_place,
    find_project,
    project_place,
)
from trainstack.infra.targets import CloudTarget, target_of

# Console width when stdout is not a terminal: wide enough that rich never wraps or cuts.
UNWRAPPED_WIDTH = 100_000


class StackFileError(ValueError):
    """A stack name or stack file that cannot be read."""


def _names(folder: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in folder.glob("Pulumi.*.yaml"))


def stack_names() -> list[str]:
    """The stacks of the current folder's project (`Pulumi.*.yaml` in its stackConfigDir)."""
    return _names(find_project().stacks_dir)


def example_names() -> list[str]:
    """The bundled stacks, each usable as `--stack example:NAME` (`example_files`)."""
    return list(example_files())


def bundled_stacks() -> list[str]:
    """The bundled stacks (the `stacks/` files trainstack ships, each pinned in tests/plans)
    among the project's stacks. In this repository they are also its project's stacks, so a
    stack file added to `stacks/` here ships, and is pinned, with the others."""
    bundled = set(example_names())
    return [name for name in stack_names() if name in bundled]


def stack_file(name: str) -> Path:
    """The file of `--stack NAME`: the project's `Pulumi.NAME.yaml`, or the bundled one for
    `example:NAME`."""
    if name.startswith(EXAMPLE_PREFIX):
        example = name[len(EXAMPLE_PREFIX) :]
        path = example_files().get(example)
        if path is None:
            valid = ", ".join(EXAMPLE_PREFIX + n for n in example_names()) or "(none)"
            raise StackFileError(f"--stack: no bundled stack named {example!r}; valid: {valid}")
        return path
    stacks_dir = find_project().stacks_dir
    path = stacks_dir / f"Pulumi.{name}.yaml"
    if not path.is_file():
        hint = (
            f"; the bundled example is --stack {EXAMPLE_PREFIX}{name}"
            if name in example_names()
            else ""
        )
        raise StackFileError(
            f"--stack: no stack named {name!r} in {stacks_dir}{hint}; "
            f"valid: {', '.join(stack_names()) or '(none)'}"
        )
    return path


def stack_place(stack: str | None, config_file: str | Path | None) -> StackPlace:
    """Where the paths of `--stack NAME` / `--config-file PATH` resolve and its runs write
    (`trainstack.infra.project`)."""
    if stack is not None and stack.startswith(EXAMPLE_PREFIX):
        return example_place(stack[len(EXAMPLE_PREFIX) :])
    if stack is None and config_file is not None:
        return file_place(Path(str(config_file)))
    return project_place()


def read_stack_file(path: Path) -> tuple[str, dict[str, Any]]:
    """The stack name (from `Pulumi.<name>.yaml`, else the file stem) and its config."""
    if path.is_dir():
        raise StackFileError(
            f"--config-file: {str(path)!r} is a directory; valid: a Pulumi.<stack>.yaml file"
        )
    if not path.is_file():
        raise StackFileError(f"--config-file: {str(path)!r} does not exist")
    try:
        document = strict_yaml.load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise StackFileError(f"--config-file: cannot read {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise StackFileError(
            f"--config-file: {str(path)!r} is not UTF-8 text (byte {exc.start}); "
            "valid: a Pulumi.<stack>.yaml file"
        ) from exc
    except strict_yaml.StrictYamlError as exc:
        raise StackFileError(f"{path}: {strict_yaml.describe(exc)}") from None
    except yaml.YAMLError as exc:
        raise StackFileError(
            f"--config-file: {path} is not valid YAML: {strict_yaml.describe(exc)}"
        ) from exc
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise StackFileError(f"{path}: expected a mapping with a `config:` mapping inside")
    # Pulumi reads a stack's config only under `config:`; namespaced keys (`gcp:project`,
    # `trainstack:tpu`) at the top level are that wrapper forgotten, not an empty stack.
    unwrapped = [str(key) for key in document if ":" in str(key)]
    if unwrapped:
        raise StackFileError(
            f"{path}: missing the top-level `config:` key ({', '.join(unwrapped[:3])} "
            "are at the top level); valid: the stack's keys indented under `config:`, as "
            "Pulumi reads a stack file"
        )
    name = path.name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        stack = name.split(".", 1)[1].rsplit(".", 1)[0]
    else:
        stack = path.stem
    return stack, dict(document.get("config") or {})


def check_stack_name(name: str) -> str:
    """`name` when it is a stack name (`stack_name_problem`), else StackFileError naming
    the rule."""
    problem = stack_name_problem(name, "--stack-name")
    if problem is not None:
        raise StackFileError(problem)
    return name


def load_stack(stack: str | None, config_file: str | Path | None) -> tuple[str, dict[str, Any]]:
    """Resolve `--stack NAME` or `--config-file PATH` (exactly one) to (name, config); the
    name of `example:NAME` is NAME (of `example:DIR/NAME`, NAME too: its file's)."""
    if (stack is None) == (config_file is None):
        raise StackFileError("give exactly one of --stack NAME or --config-file PATH")
    path = stack_file(stack) if stack is not None else Path(str(config_file))
    return read_stack_file(path)


def plan_resources(recorded: Iterable[RecordedResource]) -> list[dict[str, Any]]:
    """Recorded registrations as plan entries, in a stable order.

    The engine registers resources as their inputs resolve, so registration order varies
    from run to run; sorting by logical name (children are named after their component)
    then type keeps plans and their diffs stable.
    """
    entries = [
        {
            "type": r.type,
            "name": r.name,
            "parent": r.parent,
            "inputs": r.inputs,
            # Only when set, so the plan of an unprotected resource stays as it was; shown
            # so a pull request that drops a prod bucket's protection says so in its diff.
            **({"protect": True} if r.protect else {}),
            **({"retainOnDelete": True} if r.retain_on_delete else {}),
            # What a change of replaces it whatever the provider says (plan_replace.classify).
            **({"replaceOnChanges": list(r.replace_on_changes)} if r.replace_on_changes else {}),
            # With it, whether the forced replace deletes first: the engine takes that from
            # the option, the provider's Diff saying so only for replaces it found itself
            # (plan_replace.classify).
            **(
                {"deleteBeforeReplace": True}
                if r.replace_on_changes and r.delete_before_replace
                else {}
            ),
            # Only for an input that carries a `secure:` value: see RecordedResource.
            **({"secret_digests": r.secret_digests} if r.secret_digests else {}),
            **({"secure_inputs": list(r.secure_inputs)} if r.secure_inputs else {}),
        }
        for r in recorded
    ]
    return sorted(entries, key=lambda e: (e["name"], e["type"]))


def unverified_quota_note(needs: Iterable[Mapping[str, Any]]) -> str | None:
    """Names the quota ids whose source is unverified, or None when all are verified."""
    unverified = [q["quota_id"] for q in needs if not q["verified"]]
    if not unverified:
        return None
    return (
        "unverified quota ids (confirm with gcp.cloudquota.get_s_quota_infos before "
        "requesting): " + ", ".join(unverified)
    )


ESTIMATE_NOTE = (
    "hourly_usd is an estimate from list prices in infra/catalog "
    "(see its sources and dates); it excludes storage, network egress and discounts."
)


def plan_date() -> date:
    """The date the plan is checked for (`availability_date`); a malformed `TRAINSTACK_TODAY`
    is a config error (exit 2)."""
    try:
        return availability_date()
    except ValueError as e:
        raise ConfigError([str(e)]) from None


def image_problems(cfg: StackConfig, today: date) -> list[str]:
    """Notes about the image the target runs (`Target.image_problems`; the Vertex replicas'
    image) when you named it: past its end of availability on `today`, or what Reduction
    Server needs in it. For a default image the same facts are errors, raised here as the
    invalid config they are."""
    errors, warnings = target_of(cfg).image_problems(cfg, today)
    if errors:
        raise ConfigError(errors)
    return warnings


def build_plan(stack: str, config: Mapping[str, Any], today: date | None = None) -> dict[str, Any]:
    """Run the stack program offline and return the JSON plan (ARCHITECTURE.md shape).

    Raises `trainstack.infra.config.ConfigError` before anything is registered when the config is
    invalid, also when a Vertex stack's default image is past its end of availability on
    `today` (`plan_date()` when None); an image the stack names that is past it is a note.
    """
    cfg = load_stack_config(config)
    expired = image_problems(cfg, plan_date() if today is None else today)
    # Digests only where a `secure:` value made inputs secret: the bundled stacks' other
    # secrets (a kubeconfig) plan as they did.
    run = run_program(main_program, config=config, stack=stack, digest_secrets=bool(cfg.secrets))
    notes = [ESTIMATE_NOTE]
    if isinstance(target_of(cfg), CloudTarget):
        notes.append(QUOTA_OFFLINE_NOTE)
    notes += expired
    notes += target_of(cfg).plan_notes(cfg, stack)
    supervisor = supervisor_note(cfg)
    if supervisor is not None:
        notes.append(supervisor)
    needs = quota_needs(cfg)
    note = unverified_quota_note(needs)
    if note:
        notes.append(note)
    defaults = _defaults(cfg, config)
    notes += [f"{key} defaults to {value}" for key, value in defaults.items()]
    limits = limits_plan(cfg)
    if limits is not None and limits["max_hourly_usd"] is not None:
        notes.append(
            f"limits.max_hourly_usd: the estimated ${summarize(cfg)['hourly_usd']:,.2f}/hour "
            f"is within ${limits['max_hourly_usd']:g}/hour"
        )
    if limits is not None and "run_limit" in limits:
        notes.append(f"limits.max_run_hours: {limits['run_limit']}")
    if limits is not None and "spend_cap" in limits:
        notes.append(f"limits.max_total_usd: {limits['spend_cap']}")
    unbounded = unbounded_run_note(cfg)
    if unbounded is not None:
        notes.append(unbounded)
    after_stop = still_billing_note(cfg, stack)
    if after_stop is not None:
        notes.append(after_stop)
    extra: dict[str, Any] = {}
    if defaults:
        extra["defaults"] = defaults
    if limits is not None:
        extra["limits"] = limits
    code = code_summary(cfg)
    ciphertexts = ciphertext_digests(config)
    if code is not None and ciphertexts:
        code["secure_sha256"] = ciphertexts
    return {
        "stack": stack,
        "target": cfg.target,
        **({"code": code} if code is not None else {}),
        "resources": plan_resources(run.resources),
        "summary": summarize(cfg),
        "quota": [
            {
                "service": q["service"],
                "quota_id": q["quota_id"],
                "dimensions": q["dimensions"],
                "needed": q["needed"],
                "verified": q["verified"],
            }
            for q in needs
        ],
        "outputs": run.shown_outputs,
        **extra,
        "notes": notes,
    }


def _defaults(cfg: StackConfig, config: Mapping[str, Any]) -> dict[str, Any]:
    """Values the stack did not give that trainstack picked, by dotted key
    (`Target.plan_defaults`: today the TPU runtime)."""
    raw = config.get(f"trainstack:{cfg.target}")
    given = json.loads(raw) if isinstance(raw, str) else raw
    return target_of(cfg).plan_defaults(cfg, given)


# --------------------------------------------------------------------------- rendering


INLINE_MAX_CHARS = 120
"""A longer one-line input (a dashboard's JSON, a log filter) is a document, not a tree label:
the tree names its size and `--json` has it whole."""


def _inline(inputs: Mapping[str, Any], limit: int = 4) -> str:
    """The first `limit` scalar inputs as `key=value`; a multi-line string (a startup
    script) or a long one-line document as its size, since it cannot sit on a tree line.
    A dynamic resource's provider (always `[secret]`) is left out: `runs_lines` says what
    the resource runs instead."""
    shown = []
    for key, value in inputs.items():
        if key == PROVIDER_INPUT:
            continue
        if isinstance(value, str) and "\n" in value:
            shown.append(f"{key}=<{len(value.splitlines())} lines>")
        elif isinstance(value, str) and len(value) > INLINE_MAX_CHARS:
            shown.append(f"{key}=<{len(value)} characters>")
        elif isinstance(value, str | int | float | bool):
            shown.append(f"{key}={json.dumps(integral_numbers(value))}")
        if len(shown) == limit:
            break
    return ", ".join(shown)


def output_console() -> Console:
    """The console for a command's stdout.

    A terminal gets its own width, and tables fold a long value onto more lines rather
    than cut it. Anything else (a pipe, a file, CI logs) gets lines as long as they need
    to be, so every value (quota ids, resource names, digests) stays whole for grep and
    copy; rich would otherwise assume 80 columns and cut them.
    """
    console = Console()
    return console if console.is_terminal else Console(width=UNWRAPPED_WIDTH)


def value_table(title: str, columns: Iterable[str], *, justify: JustifyMethod = "left") -> Table:
    """A table whose cells are never cut: a value that does not fit folds onto more lines."""
    table = Table(title=title, show_header=True)
    for column in columns:
        table.add_column(column, overflow="fold", justify=justify)
    return table


def render_plan(plan: Mapping[str, Any], console: Console) -> None:
    """Print the resource tree, totals, cost and quota of a plan."""
    resources = plan["resources"]
    # A program's plan (trainstack.infra.program_plan) names its project and has no target.
    title = f"[bold]stack {escape(plan['stack'])}[/]"
    if "project" in plan:
        title = f"[bold]project {escape(plan['project'])}, stack {escape(plan['stack'])}[/]"
    tree = Tree(title + (f" (target: {plan['target']})" if "target" in plan else ""))
    children: dict[str | None, list[Mapping[str, Any]]] = {}
    names = {res["name"] for res in resources}
    for res in resources:
        parent = res["parent"] if res["parent"] in names else None
        children.setdefault(parent, []).append(res)

    def add(node: Tree, parent: str | None) -> None:
        for res in children.get(parent, []):
            detail = escape(_inline(res["inputs"]))
            label = f"[cyan]{escape(res['name'])}[/] [dim]{escape(res['type'])}[/]"
            branch = node.add(label + (f"  [dim]{detail}[/]" if detail else ""))
            for line in runs_lines(res["type"], res["inputs"]):
                branch.add(f"[green]{escape(line)}[/]")
            add(branch, res["name"])

    add(tree, None)
    console.print(tree)

    summary = plan.get("summary")
    if summary is None:
        console.print(f"{len(resources)} resources")
    else:
        totals = value_table(
            "Totals", ("resources", "TPU chips", "GPUs", "machines", "est. $/hour"), justify="right"
        )
        totals.add_row(
            str(len(resources)),
            str(summary["tpu_chips"]),
            str(summary["gpus"]),
            str(summary["machines"]),
            f"{summary['hourly_usd']:,.2f}",
        )
        console.print(totals)

    if plan.get("code"):
        console.print(code_table("Your code", plan["code"]))
    # A program's: one per compute component given your code (`program_plan`).
    for name, code in plan.get("code_by_component", {}).items():
        console.print(code_table(f"Your code: {name}", code))
    if "quota" in plan:
        console.print(quota_table(plan["quota"]))
    for note in plan.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}")


def code_table(title: str, code: Mapping[str, Any]) -> Table:
    """The plan's "Your code" table of a `code` entry (`trainstack.infra.code_plan`)."""
    table = value_table(title, ("field", "value"))
    for row in code_rows(code):
        table.add_row(*(escape(value) for value in row))
    return table


def quota_table(needs: Iterable[Mapping[str, Any]]) -> Table:
    """The quota a stack needs, one row per quota id and location."""
    needs = list(needs)
    quota = value_table("Quota needed", ("service", "quota id", "dimensions", "needed", "verified"))
    for q in needs:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(q["dimensions"].items()))
        quota.add_row(
            q["service"], q["quota_id"], dims, str(q["needed"]), "yes" if q["verified"] else "NO"
        )
    if not needs:
        quota.add_row("-", "(none: nothing runs on Google Cloud)", "-", "-", "-")
    return quota

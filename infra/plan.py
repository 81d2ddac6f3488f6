"""Offline plans: the stack program run under recording mocks, rendered for people and CI.

`build_plan` runs exactly the program `pulumi up` runs (`infra.compose.main_program`)
with the stack file's config, records every registration, and adds what the config alone
tells: accelerator totals, an hourly cost estimate from the catalog, and the quota the
stack needs. `render_plan` prints it as a tree; `plan_diff` turns two JSON plans into a
Markdown comment for a pull request that always fits GitHub's comment limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from infra.compose import main_program
from infra.config import load_stack_config
from infra.estimate import quota_needs, summarize
from infra.mocks import REPO_ROOT, RecordedResource, run_program

STACKS_DIR = REPO_ROOT / "stacks"
# GitHub rejects comments over 65,536 characters; stay clear of it with room for a header
# a workflow may add around the diff.
MAX_DIFF_CHARS = 65_000


class StackFileError(ValueError):
    """A stack name or stack file that cannot be read."""


def bundled_stacks() -> list[str]:
    """Names of the stacks shipped in `stacks/`."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def stack_file(name: str) -> Path:
    path = STACKS_DIR / f"Pulumi.{name}.yaml"
    if not path.is_file():
        raise StackFileError(
            f"--stack: no stack named {name!r} in {STACKS_DIR}; "
            f"valid: {', '.join(bundled_stacks()) or '(none)'}"
        )
    return path


def read_stack_file(path: Path) -> tuple[str, dict[str, Any]]:
    """The stack name (from `Pulumi.<name>.yaml`, else the file stem) and its config."""
    if not path.is_file():
        raise StackFileError(f"--config-file: {str(path)!r} does not exist")
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise StackFileError(f"--config-file: {path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise StackFileError(f"{path}: expected a mapping with a `config:` mapping inside")
    name = path.name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        stack = name.split(".", 1)[1].rsplit(".", 1)[0]
    else:
        stack = path.stem
    return stack, dict(document.get("config") or {})


def load_stack(stack: str | None, config_file: str | Path | None) -> tuple[str, dict[str, Any]]:
    """Resolve `--stack NAME` or `--config-file PATH` (exactly one) to (name, config)."""
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


def build_plan(stack: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Run the stack program offline and return the JSON plan (ARCHITECTURE.md shape).

    Raises `infra.config.ConfigError` before anything is registered when the config is
    invalid.
    """
    cfg = load_stack_config(config)
    run = run_program(main_program, config=config, stack=stack)
    notes = [
        (
            "hourly_usd is an estimate from list prices in infra/catalog "
            "(see its sources and dates); it excludes storage, network egress and discounts."
        )
    ]
    if cfg.target != "local":
        notes.append(
            "quota limits are not read offline; QuotaGuard reads them during `pulumi preview` "
            "and `pulumi up` and stops the deployment before anything is created on a shortfall."
        )
    needs = quota_needs(cfg)
    note = unverified_quota_note(needs)
    if note:
        notes.append(note)
    return {
        "stack": stack,
        "target": cfg.target,
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
        "outputs": run.outputs,
        "notes": notes,
    }


# --------------------------------------------------------------------------- rendering


def _inline(inputs: Mapping[str, Any], limit: int = 4) -> str:
    shown = []
    for key, value in inputs.items():
        if isinstance(value, str | int | float | bool):
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # the engine sends every number as a double
            text = json.dumps(value)
            shown.append(f"{key}={text if len(text) <= 48 else text[:45] + '...'}")
        if len(shown) == limit:
            break
    return ", ".join(shown)


def render_plan(plan: Mapping[str, Any], console: Console) -> None:
    """Print the resource tree, totals, cost and quota of a plan."""
    resources = plan["resources"]
    tree = Tree(f"[bold]stack {plan['stack']}[/] (target: {plan['target']})")
    children: dict[str | None, list[Mapping[str, Any]]] = {}
    names = {res["name"] for res in resources}
    for res in resources:
        parent = res["parent"] if res["parent"] in names else None
        children.setdefault(parent, []).append(res)

    def add(node: Tree, parent: str | None) -> None:
        for res in children.get(parent, []):
            detail = _inline(res["inputs"])
            label = f"[cyan]{res['name']}[/] [dim]{res['type']}[/]"
            add(node.add(label + (f"  [dim]{detail}[/]" if detail else "")), res["name"])

    add(tree, None)
    console.print(tree)

    summary = plan["summary"]
    totals = Table(title="Totals", show_header=True)
    for column in ("resources", "TPU chips", "GPUs", "machines", "est. $/hour"):
        totals.add_column(column, justify="right")
    totals.add_row(
        str(len(resources)),
        str(summary["tpu_chips"]),
        str(summary["gpus"]),
        str(summary["machines"]),
        f"{summary['hourly_usd']:,.2f}",
    )
    console.print(totals)

    console.print(quota_table(plan["quota"]))
    for note in plan.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")


def quota_table(needs: Iterable[Mapping[str, Any]]) -> Table:
    """The quota a stack needs, one row per quota id and location."""
    needs = list(needs)
    quota = Table(title="Quota needed", show_header=True)
    for column in ("service", "quota id", "dimensions", "needed", "verified"):
        quota.add_column(column)
    for q in needs:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(q["dimensions"].items()))
        quota.add_row(
            q["service"], q["quota_id"], dims, str(q["needed"]), "yes" if q["verified"] else "NO"
        )
    if not needs:
        quota.add_row("-", "(none: nothing runs on Google Cloud)", "-", "-", "-")
    return quota


# --------------------------------------------------------------------------- plan diff


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def _code(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return "`" + text.replace("`", "'") + "`"


def _as_plans(document: Any) -> dict[str, Mapping[str, Any]]:
    plans = document if isinstance(document, list) else [document]
    return {p["stack"]: p for p in plans}


def _resource_key(resource: Mapping[str, Any]) -> tuple[str, str]:
    return resource["type"], resource["name"]


def _quota_key(quota: Mapping[str, Any]) -> tuple[str, str, str]:
    return quota["service"], quota["quota_id"], json.dumps(quota["dimensions"], sort_keys=True)


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _stack_sections(stack: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None):
    """Markdown blocks for one stack: header first, then one block per change."""
    if base is None or head is None:
        plan = head or base
        assert plan is not None
        verb = "added" if base is None else "removed"
        yield f"### Stack `{stack}` ({verb})\n\n{len(plan['resources'])} resources {verb}.\n"
        return
    old = {_resource_key(r): r for r in base["resources"]}
    new = {_resource_key(r): r for r in head["resources"]}
    added = [new[k] for k in new if k not in old]
    removed = [old[k] for k in old if k not in new]
    changed = [(old[k], new[k]) for k in new if k in old and old[k] != new[k]]

    money = []
    for field in ("tpu_chips", "gpus", "machines", "hourly_usd"):
        a, b = base["summary"].get(field, 0), head["summary"].get(field, 0)
        if a != b:
            fmt = _usd if field == "hourly_usd" else str
            sign = "+" if b > a else ""
            money.append(f"| {field} | {fmt(a)} | {fmt(b)} | {sign}{fmt(b - a)} |")
    qa = {_quota_key(q): q["needed"] for q in base["quota"]}
    qb = {_quota_key(q): q["needed"] for q in head["quota"]}
    quota_rows = [
        f"| {k[1]} | {k[2]} | {qa.get(k, 0)} | {qb.get(k, 0)} |"
        for k in sorted(set(qa) | set(qb))
        if qa.get(k, 0) != qb.get(k, 0)
    ]
    if not (added or removed or changed or money or quota_rows):
        yield f"### Stack `{stack}`: no changes\n"
        return
    yield (
        f"### Stack `{stack}`: {len(added)} to add, {len(changed)} to change, "
        f"{len(removed)} to delete\n"
    )
    if money:
        yield "| total | base | head | delta |\n|---|---|---|---|\n" + "\n".join(money) + "\n"
    if quota_rows:
        yield (
            "| quota | dimensions | base | head |\n|---|---|---|---|\n"
            + "\n".join(quota_rows)
            + "\n"
        )
    for r in added:
        yield f"- **add** `{r['name']}` ({r['type']})\n"
    for r in removed:
        yield f"- **delete** `{r['name']}` ({r['type']})\n"
    for a, b in changed:
        fa, fb = _flatten(a["inputs"]), _flatten(b["inputs"])
        lines = [
            f"  - `{path}`: {_code(fa.get(path, None))} -> {_code(fb.get(path, None))}"
            for path in sorted(set(fa) | set(fb))
            if fa.get(path) != fb.get(path)
        ]
        if a["parent"] != b["parent"]:
            lines.append(f"  - parent: `{a['parent']}` -> `{b['parent']}`")
        for option in ("protect", "retainOnDelete"):
            if a.get(option, False) != b.get(option, False):
                lines.append(
                    f"  - {option}: `{str(a.get(option, False)).lower()}` -> "
                    f"`{str(b.get(option, False)).lower()}`"
                )
        yield f"- **change** `{b['name']}` ({b['type']})\n" + "\n".join(lines) + "\n"


def plan_diff(base: Any, head: Any, limit: int = MAX_DIFF_CHARS) -> str:
    """Markdown diff of two JSON plans (one plan or a list of plans each), within `limit`."""
    base_plans, head_plans = _as_plans(base), _as_plans(head)
    blocks: list[str] = ["## trainstack plan diff\n"]
    for stack in sorted(set(base_plans) | set(head_plans)):
        blocks.extend(_stack_sections(stack, base_plans.get(stack), head_plans.get(stack)))
    return _fit(blocks, limit)


def _fit(blocks: Iterable[str], limit: int) -> str:
    blocks = list(blocks)
    text = "\n".join(blocks)
    if len(text) <= limit:
        return text
    kept: list[str] = []
    size = 0
    reserve = 400  # room for the trim note
    for block in blocks:
        if size + len(block) + 1 > limit - reserve:
            break
        kept.append(block)
        size += len(block) + 1
    omitted = len(blocks) - len(kept)
    note = (
        f"\n> **Diff trimmed:** {omitted} more change blocks are not shown because a GitHub "
        f"comment holds at most 65,536 characters. Run `trainstack plan-diff BASE.json "
        f"HEAD.json` locally for the full diff.\n"
    )
    return "\n".join(kept) + note

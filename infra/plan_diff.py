"""`trainstack plan-diff`: two JSON plans as one Markdown pull-request comment.

The comment lists, per stack, the totals and quota that change (with their deltas; a stack
only one side has shows what it costs or frees) and every resource added, deleted, changed
or replaced with the inputs that changed. Whether a change replaces comes from
`trainstack.infra.plan_replace`: the dynamic resources' own provider diff, else the replace-on-change
tables of components/catalog/replace_on_change.py; what no table covers reads "change (may
replace)", and a replaced training resource says what the relaunched run starts from. It is
written for review on GitHub:

- numbers print as the engine means them (`2 -> 4`, not the doubles it sends, `2.0 -> 4.0`);
- list entries with a unique `name` (environment variables, containers) are named by it,
  and so are `--env=NAME=value` arguments (`args[--env=NAME]`); indexes sort as numbers;
- a long one-line value shows the part around where it changed, not only its start;
- a multi-line value (a startup script, a dashboard) shows a line diff of what changed;
- the whole comment stays under MAX_DIFF_CHARS, dropping whole change blocks with a note.

`full=True` (`trainstack plan-diff --full`) turns every one of those cuts off. Your code's
`trainer.env` values show as `sha256:<8 hex>` (`trainstack.infra.plan_env`) unless
`show_values=True` (`--show-values`): the comment is public to every reader of the PR. An
input that carries a `secure:` value (`[secret]`) is compared by its digests and reads "a
secret input changed", never its value (`trainstack.infra.plan_secrets`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from trainstack.infra.plan_code_lines import code_change, code_changed, components_code_change
from trainstack.infra.plan_env import hide_credentials, hide_env_values
from trainstack.infra.plan_inputs import code_span as _code
from trainstack.infra.plan_inputs import integral_numbers
from trainstack.infra.plan_inputs import md_text as _md
from trainstack.infra.plan_replace import Verdict, classify, relaunch_note
from trainstack.infra.plan_secrets import (
    fold_secrets,
    is_secret,
    secret_change,
)
from trainstack.infra.plan_unseen import Unseen, unseen_runs

# GitHub rejects comments over 65,536 characters; stay clear of it with room for a header
# a workflow may add around the diff.
MAX_DIFF_CHARS = 65_000

SUMMARY_FIELDS = ("tpu_chips", "gpus", "machines", "hourly_usd")
LIMIT_FIELDS = ("max_hourly_usd", "max_total_usd", "max_run_hours")


def _cap(field: str, value: Any) -> str:
    """A cap as the plan-diff shows it; "none" when the stack sets none."""
    if value is None:
        return "none"
    return f"{value:g} h" if field == "max_run_hours" else f"${value:,.2f}"


VALUE_CHARS = 160
"""A changed one-line value longer than this shows only the part around the change."""
CONTEXT_CHARS = 40
"""Unchanged characters kept on either side of a change in a long one-line value."""
DIFF_LINES = 40
"""Lines of a multi-line value's diff (a startup script) shown before the rest is cut."""
DIFF_CONTEXT = 2
"""Unchanged lines shown around each changed line of a multi-line value."""


class PlanDocumentError(ValueError):
    """A JSON document that is not a trainstack plan (or a list of plans)."""


def _text(value: Any) -> str:
    value = integral_numbers(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _cell(text: str) -> str:
    """`_md` for a table cell, where a `|` ends the cell even inside a code span
    (https://github.github.com/gfm/#tables-extension-: "include a pipe in a cell's content by
    escaping it")."""
    return _md(text).replace("|", "\\|")


_ENV_ARG = re.compile(r"--env=([A-Za-z_][A-Za-z0-9_]*)=")


def _path_order(path: str) -> list[tuple[int, int, str]]:
    """Sorts list indexes as numbers: `args[6]` before `args[10]`."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value:
        out = {}
        names = [item.get("name") if isinstance(item, Mapping) else None for item in value]
        # Entries with a unique `name` (environment variables, containers, ports) are named
        # by it: adding one then shows as one added entry, not every later one shifted.
        by_name = all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
        if not by_name:
            # An environment variable passed as a `--env=NAME=value` argument (Vertex and GKE
            # args) is named the same way, by `--env=NAME`, when that name is unique.
            envs = [
                m.group(1) if isinstance(i, str) and (m := _ENV_ARG.match(i)) else None
                for i in value
            ]
            names = [f"--env={e}" if e and envs.count(e) == 1 else i for i, e in enumerate(envs)]
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}[{names[i]}]"))
        return out
    return {prefix: value}


def _window(old: str, new: str) -> tuple[str, str]:
    """Both values cut to where they differ, with CONTEXT_CHARS of what they share around
    it; a difference longer than VALUE_CHARS shows its first VALUE_CHARS."""
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1

    def cut(text: str) -> str:
        start = max(0, prefix - CONTEXT_CHARS)
        end = min(len(text), len(text) - suffix + CONTEXT_CHARS, prefix + VALUE_CHARS)
        return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")

    return cut(old), cut(new)


def _lines(value: Any) -> list[str]:
    if value is None:
        return []
    return value.splitlines() if isinstance(value, str) else [_text(value)]


def _value_change(path: str, old: Any, new: Any, full: bool, cuts: list[str]) -> str:
    """One changed input as a Markdown list item; `cuts` collects the paths shortened."""
    if is_secret(old) or is_secret(new):
        return secret_change(path, old, new)
    if any(isinstance(v, str) and "\n" in v for v in (old, new)):
        if _lines(old) != _lines(new):
            return _lines_change(path, _lines(old), _lines(new), full, cuts)
        # Only line endings differ: JSON-quote both so the difference shows.
        old, new = json.dumps(old), json.dumps(new)
    a, b = _text(old), _text(new)
    if not full and max(len(a), len(b)) > VALUE_CHARS:
        a, b = _window(a, b)
        cuts.append(path)
    return f"  - {_code(path)}: {_code(a)} -> {_code(b)}"


def _lines_change(path: str, a: list[str], b: list[str], full: bool, cuts: list[str]) -> str:
    """A multi-line value's change as a fenced `diff` block of the changed lines."""
    diff = list(difflib.unified_diff(a, b, lineterm="", n=DIFF_CONTEXT))[2:]  # no ---/+++
    shown = diff
    if not full:
        width = 2 * VALUE_CHARS
        shown = [d if len(d) <= width else d[:width] + "..." for d in diff[:DIFF_LINES]]
    if shown != diff:
        cuts.append(path)
    # A fence longer than any run of backticks inside, so the script cannot close it.
    longest = max((len(run) for line in shown for run in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    block = [f"  - {_code(path)} ({len(a)} -> {len(b)} lines):", f"    {fence}diff"]
    block += [f"    {line}" for line in shown]
    block.append(f"    {fence}")
    if len(diff) > len(shown):
        block.append(f"    ({len(diff) - len(shown)} more diff lines)")
    return "\n".join(block)


def plans_by_stack(document: Any) -> dict[str, Mapping[str, Any]]:
    """{stack: plan} of one JSON plan or a list of them; PlanDocumentError names what is
    not a plan."""
    plans = document if isinstance(document, list) else [document]
    found: dict[str, Mapping[str, Any]] = {}
    for i, plan in enumerate(plans):
        if not (
            isinstance(plan, Mapping)
            and isinstance(plan.get("stack"), str)
            and isinstance(plan.get("resources"), list)
        ):
            raise PlanDocumentError(
                f"plan {i}: expected a JSON plan with a `stack` name and a `resources` list; "
                "valid: what `trainstack plan --json` writes, or a list of those"
            )
        stack = plan["stack"]
        for j, r in enumerate(plan["resources"]):
            if not (
                isinstance(r, Mapping)
                and isinstance(r.get("type"), str)
                and isinstance(r.get("name"), str)
                and isinstance(r.get("inputs"), Mapping)
            ):
                raise PlanDocumentError(
                    f"plan {stack!r}: resources[{j}] is not a plan resource; "
                    'valid: {"type": str, "name": str, "parent": str | null, "inputs": {...}}'
                )
        summary = plan.get("summary", {})
        if not isinstance(summary, Mapping) or any(
            not isinstance(summary.get(f, 0), int | float) or isinstance(summary.get(f), bool)
            for f in SUMMARY_FIELDS
        ):
            raise PlanDocumentError(
                f"plan {stack!r}: summary is not a mapping of numbers; "
                f"valid: {{{', '.join(f'{f!r}: number' for f in SUMMARY_FIELDS)}}}"
            )
        quota = plan.get("quota", [])
        if not isinstance(quota, list) or not all(
            isinstance(q, Mapping)
            and isinstance(q.get("quota_id"), str)
            and isinstance(q.get("dimensions"), Mapping)
            and isinstance(q.get("needed"), int | float)
            for q in quota
        ):
            raise PlanDocumentError(
                f"plan {stack!r}: quota is not a list of quota needs; "
                'valid: [{"service", "quota_id": str, "dimensions": {...}, "needed": number}]'
            )
        if stack in found:
            raise PlanDocumentError(
                f"plan {i}: stack {stack!r} appears twice; valid: one plan per stack"
            )
        found[stack] = plan
    return found


def _resource_key(resource: Mapping[str, Any]) -> tuple[str, str]:
    return resource["type"], resource["name"]


def _quota_key(quota: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        str(quota.get("service", "")),
        quota["quota_id"],
        json.dumps(quota["dimensions"], sort_keys=True),
    )


def _usd(value: float) -> str:
    return f"-${-value:,.2f}" if round(value, 2) < 0 else f"${abs(value):,.2f}"


def _count(value: float) -> str:
    return str(integral_numbers(value))


def _signed(value: float, fmt: Any) -> str:
    return ("+" if value > 0 else "") + fmt(value)


def _dimensions(dimensions: Mapping[str, Any]) -> str:
    """`region=us-central1`; a quota with no dimensions is project-wide."""
    if not dimensions:
        return "global"
    return ", ".join(f"{k}={dimensions[k]}" for k in sorted(dimensions))


def _totals_and_quota(base: Mapping[str, Any], head: Mapping[str, Any]) -> tuple[str, str]:
    """The totals table and the quota table of what changed between two plans (a missing
    stack is an empty plan), each "" when nothing in it changed."""
    money = []
    for field in SUMMARY_FIELDS:
        a, b = base.get("summary", {}).get(field, 0), head.get("summary", {}).get(field, 0)
        if a != b:
            fmt = _usd if field == "hourly_usd" else _count
            money.append(f"| {field} | {fmt(a)} | {fmt(b)} | {_signed(b - a, fmt)} |")
    # The caps (`limits`): a cap set, changed or removed is a line of its own.
    for field in LIMIT_FIELDS:
        la, lb = (p.get("limits") or {} for p in (base, head))
        if la.get(field) != lb.get(field):
            shown = [_cap(field, v.get(field)) for v in (la, lb)]
            money.append(f"| limits.{field} | {shown[0]} | {shown[1]} | |")
    qa = {_quota_key(q): q for q in base.get("quota", [])}
    qb = {_quota_key(q): q for q in head.get("quota", [])}
    quota_rows = []
    for k in sorted(set(qa) | set(qb)):
        a, b = (qa[k]["needed"] if k in qa else 0), (qb[k]["needed"] if k in qb else 0)
        if a != b:
            dims = _dimensions((qb.get(k) or qa[k])["dimensions"])
            quota_rows.append(
                f"| {_cell(k[1])} | {_cell(dims)} | {_count(a)} | {_count(b)} "
                f"| {_signed(b - a, _count)} |"
            )
    totals = (
        "| total | base | head | delta |\n|---|---|---|---|\n" + "\n".join(money) + "\n"
        if money
        else ""
    )
    quota = (
        "| quota | dimensions | base | head | delta |\n|---|---|---|---|---|\n"
        + "\n".join(quota_rows)
        + "\n"
        if quota_rows
        else ""
    )
    return totals, quota


def _whole_stack(
    stack: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None
) -> Iterator[str]:
    """A stack only one side has: its resources in one line, then the $/hour and quota it
    frees (removed) or takes (added)."""
    plan = head or base
    assert plan is not None
    verb = "added" if base is None else "removed"
    hourly = plan.get("summary", {}).get("hourly_usd", 0)
    what = "frees" if base is not None else "costs"
    text = f"### Stack {_code(stack)} ({verb})\n\n{len(plan['resources'])} resources {verb}"
    text += f"; {what} {_usd(hourly)}/hour" if hourly else ""
    text += " and the quota below.\n" if plan.get("quota") else ".\n"
    yield text
    for table in _totals_and_quota(base or {}, head or {}):
        if table:
            yield table


def _stack_sections(
    stack: str,
    base: Mapping[str, Any] | None,
    head: Mapping[str, Any] | None,
    full: bool,
    cuts: list[str],
) -> Iterator[str]:
    """Markdown blocks for one stack: header first, then one block per change."""
    if base is None or head is None:
        yield from _whole_stack(stack, base, head)
        return
    old = {_resource_key(r): r for r in base["resources"]}
    new = {_resource_key(r): r for r in head["resources"]}
    added = [new[k] for k in new if k not in old]
    removed = [old[k] for k in old if k not in new]
    packages = {r["name"] for r in new.values() if r["type"] == PACKAGE_TYPE}
    code = code_change(stack, base.get("code"), head.get("code"))
    code += components_code_change(base, head)
    changed = _changed(old, new)
    unseen = unseen_runs(
        code_changed(base, head), head["resources"], (b["name"] for _, b, *_ in changed)
    )
    replaced, updated = _counts([v for *_, v in changed] + [u.verdict for u in unseen])
    totals, quota = _totals_and_quota(base, head)
    if not (added or removed or changed or totals or quota or code):
        yield f"### Stack {_code(stack)}: no changes\n"
        return
    yield (
        f"### Stack {_code(stack)}: {len(added)} to add, {updated} to change, "
        f"{replaced} to replace, {len(removed)} to delete\n"
    )
    if code:
        yield code
    if totals:
        yield totals
    if quota:
        yield quota
    for r in added:
        yield f"- **add** {_code(r['name'])} ({_md(r['type'])})\n"
    for r in removed:
        yield f"- **delete** {_code(r['name'])} ({_md(r['type'])})\n"
    for a, b, fa, fb, paths, verdict in changed:
        if code and b.get("parent") in packages and verdict.action != "replace":
            continue  # the uploaded package of the code: the code line above says it all
        lines = [_verdict_line(a, b, verdict, head["resources"])]
        lines += [_value_change(path, fa.get(path), fb.get(path), full, cuts) for path in paths]
        if a.get("parent") != b.get("parent"):
            lines.append(
                f"  - parent: {_code(str(a.get('parent')))} -> {_code(str(b.get('parent')))}"
            )
        for option in ("protect", "retainOnDelete"):
            if a.get(option, False) != b.get(option, False):
                lines.append(
                    f"  - {option}: {_code(str(a.get(option, False)).lower())} -> "
                    f"{_code(str(b.get(option, False)).lower())}"
                )
        yield "\n".join(lines) + "\n"
    for u in unseen:
        yield _unseen_block(u)


LOCAL_PATHS = re.compile(r"(^|\.)(fileAsset|fileArchive)$")
"""A file asset's or archive's local path (the plan records it relative to the project:
`trainstack.infra.mocks`). Only its content reaches the cloud: the engine compares assets by
their hash alone (github.com/pulumi/pulumi sdk/go/common/resource/asset/asset.go
`Asset.Equals`: "value equality is determined only by the hash"), and pulumi-terraform-bridge
hands Terraform a copy named by that hash (pkg/tfbridge/info/assets.go `translateToFile`,
`pulumi-asset-<hash>`). So two plans made in different folders differ there without a
change. The plan holds no content hash, so only a moved folder is passed over (the same file
name in another folder); a file of another name still shows (trainstack's own uploads name
their content's hash in the file name, `name` and `metadata`)."""


def _moved_only(path: str, old: Any, new: Any) -> bool:
    """A local asset path (LOCAL_PATHS) whose file name is the same on both sides."""
    if not (LOCAL_PATHS.search(path) and isinstance(old, str) and isinstance(new, str)):
        return False
    return PurePosixPath(old).name == PurePosixPath(new).name


def _changed(old: Mapping[Any, Any], new: Mapping[Any, Any]) -> list[tuple[Any, ...]]:
    """Each resource both sides have whose entry differs (a moved asset's folder aside,
    `_moved_only`): both entries, their flattened inputs, the paths that differ and the
    engine's verdict."""
    changed = []
    for k, b in new.items():
        if k in old and old[k] != b:
            a = old[k]
            fa, fb = _flatten(a["inputs"]), _flatten(b["inputs"])
            paths = [
                p
                for p in sorted(set(fa) | set(fb), key=_path_order)
                if fa.get(p) != fb.get(p) and not _moved_only(p, fa.get(p), fb.get(p))
            ]
            others = [
                key for key in set(a) | set(b) if key != "inputs" and a.get(key) != b.get(key)
            ]
            if not paths and not others:
                continue
            verdict = classify(
                b["type"],
                a["inputs"],
                b["inputs"],
                paths,
                b.get("replaceOnChanges", ()),
                bool(b.get("deleteBeforeReplace")),
            )
            changed.append((a, b, fa, fb, paths, verdict))
    return changed


def _counts(verdicts: Iterable[Verdict]) -> tuple[int, int]:
    """How many resources are replaced and how many changed in place (or may be)."""
    actions = [v.action for v in verdicts]
    replaced = actions.count("replace")
    return replaced, actions.count("change") + actions.count("change (may replace)")


def _unseen_block(u: Unseen) -> str:
    """A resource whose change only the code entry shows (`trainstack.infra.plan_unseen`)."""
    r, verdict = u.resource, u.verdict
    one = len(u.paths) == 1
    verb, they, them = ("is", "it depends", "it") if one else ("are", "they depend", "them")
    text = (
        f"- **{verdict.action}** {_code(r['name'])} ({_md(r['type'])}): the code of "
        f"{_code(u.component)} changed, and its {_names(u.paths)} {verb} known only after "
        f"deploy ({they} on a value the preview does not know, such as an auto-named "
        f"resource's name), so the plan cannot show the change in {them}"
    )
    if verdict.action == "replace":
        text += f"; a change there forces a new resource ({verdict.source})"
    return text + (f"\n  - **{u.note}**" if u.note else "") + "\n"


def _names(paths: Iterable[str], most: int = 3) -> str:
    paths = list(paths)
    shown = ", ".join(_code(p) for p in paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _verdict_line(
    a: Mapping[str, Any], b: Mapping[str, Any], verdict: Verdict, plan: list[Mapping[str, Any]]
) -> str:
    """The resource's headline: what the engine does with it and why (`plan`: the new
    plan's resources)."""
    head = f"- **{verdict.action}** {_code(b['name'])} ({_md(b['type'])})"
    if verdict.action == "replace":
        order = "deletes the old one first" if verdict.delete_first else "creates the new one first"
        text = (
            f"{head}: {_names(verdict.replaces)} changed, which forces a new resource "
            f"({verdict.source}); {order}"
        )
        note = relaunch_note(a, b, plan)
        return text + (f"\n  - **{note}**" if note else "")
    if verdict.action == "change (may replace)":
        return f"{head}: no replace-on-change table covers {_names(verdict.unknown)}"
    if verdict.action == "none":
        return f"{head}: its inputs differ only where {verdict.source} sees no change"
    return f"{head}: updated in place ({verdict.source})" if verdict.source else head


PACKAGE_TYPE = "trainstack:storage:TrainerPackage"


def plan_diff(
    base: Any,
    head: Any,
    limit: int = MAX_DIFF_CHARS,
    *,
    full: bool = False,
    show_values: bool = False,
) -> str:
    """Markdown diff of two JSON plans (one plan or a list of plans each), within `limit`.

    Long changed values show where they changed; `full` shows every value and diff line
    whole and ignores `limit`. Your code's `trainer.env` values show as a short hash unless
    `show_values` (`trainstack.infra.plan_env`). Raises PlanDocumentError when either is not
    a plan.
    """
    # A credential the scanner knows never shows, whatever was asked (it would be public).
    base_plans, head_plans = (
        plans_by_stack(hide_credentials(base)),
        plans_by_stack(hide_credentials(head)),
    )
    if not show_values:
        base_plans = {stack: hide_env_values(plan) for stack, plan in base_plans.items()}
        head_plans = {stack: hide_env_values(plan) for stack, plan in head_plans.items()}
    base_plans = {stack: fold_secrets(plan) for stack, plan in base_plans.items()}
    head_plans = {stack: fold_secrets(plan) for stack, plan in head_plans.items()}
    cuts: list[str] = []
    blocks: list[str] = ["## trainstack plan diff\n"]
    for stack in sorted(set(base_plans) | set(head_plans)):
        blocks.extend(
            _stack_sections(stack, base_plans.get(stack), head_plans.get(stack), full, cuts)
        )
    footer = (
        f"\n> {len(cuts)} long value(s) are shown only around their changes; "
        "`trainstack plan-diff --full BASE.json HEAD.json` shows them whole.\n"
        if cuts
        else ""
    )
    return "\n".join(blocks) if full else _fit(blocks, limit - len(footer)) + footer


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
        f"comment holds at most 65,536 characters. Run `trainstack plan-diff --full BASE.json "
        f"HEAD.json` locally for the full diff.\n"
    )
    return "\n".join(kept) + note

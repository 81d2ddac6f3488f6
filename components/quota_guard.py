"""QuotaGuard: fail a deployment on missing quota before any compute exists.

Every rival tool's most common complaint is finding out about quota minutes into
provisioning. QuotaGuard reads the current limit of each quota a stack needs with the
`gcp.cloudquota.get_s_quota_info` invoke (which runs at preview too) and raises before the
stack registers anything when a need exceeds its limit, naming every shortfall. With
`request_increases` it files a `gcp.cloudquota.SQuotaPreference` per shortfall, then raises
as well (on `pulumi up`; a preview only warns, see below); only for quota ids whose source
is verified (`QuotaNeed.verified`): a preference for a guessed id would ask for the wrong
quota, or fail.

A shortfall always raises; it never skips the compute. `pulumi.log.error` would not stop
the program ("Consider raising an exception after calling error to stop the Pulumi
program", pulumi/pulumi sdk/python/lib/pulumi/log.py:111), and a program that completes
without registering the cluster, MIG, slice or job makes the engine delete them. A program
that raises makes the engine bail before it generates any delete: deletes are generated only
after the program's last event (pkg/resource/deploy/deployment_executor.go:262-269, 293-303,
328-332 `performPostSteps`; source_eval.go:337-347 hands the program's error to the
executor). The Python SDK awaits every outstanding registration before it reports the error
(sdk/python/lib/pulumi/runtime/stack.py:133-159, `run_pulumi_func`), so preferences
registered before the raise are filed. A `pulumi up` runs the program as a preview first and
stops if that preview fails, so with `request_increases` the preview warns instead of
raising (showing the preferences it will file), and only the update raises, after filing.

A quota id the Cloud Quotas API does not know is an error too (`UnknownQuotaIdError`), not
a warning, when the catalog marks the id verified: the check could not run, and the
deployment would find out minutes into provisioning. An unverified id (a pattern guess) the
API does not know only warns, naming the id: the guess is wrong, not the quota short. A
shortfall on an unverified id warns as well, and is never filed. A read the caller may not
make (HTTP 403, no `cloudquotas.quotas.get`) stays a warning: the id is fine, the
deployer's role is not.

    from trainstack.components.quota_guard import QuotaGuard

    guard = QuotaGuard("exp-quota", {
        "project": "my-project",
        "deployment_name": "exp",
        "needs": [{"service": "compute.googleapis.com",
                   "quota_id": "NVIDIA-A100-GPUS-per-project-region",
                   "dimensions": {"region": "us-central1"}, "needed": 16}],
    })

Usage warns, never blocks. Cloud Quotas reports limits only; current usage is read where
Google publishes it, from Compute Engine's `regions.get` / `projects.get` (`quotas[] {metric,
limit, usage}`, https://cloud.google.com/compute/docs/reference/rest/v1/regions/get), for
compute.googleapis.com quotas (`compute_usage`); TPU API and Vertex usage is not readable
there. That usage is the whole project's and cannot tell whose machines they are: once this
stack is deployed, it includes the stack's own GPUs, so on every later `pulumi up` of a
stack that fills its quota, "need > limit - usage" holds although nothing is missing
(audit-21 B1: need 16, limit 16, 16 in use). Hence:

- `need > limit` is a shortfall (`short`): the stack cannot run whoever the usage belongs
  to; it raises (verified ids), as it did before usage was read.
- `limit - usage < need <= limit` is `tight`: a warning naming the figures and saying the
  usage may be this stack's own machines; never a block and never a filed preference.
- A filed preference asks for `need` (`QuotaCheck.preferred_value`), the one total limit the
  stack certainly needs whoever's the usage is. `usage + need` would ask an already-running
  stack for twice what it uses (its own usage counted once more); if other workloads share
  the quota, the `tight` warning after the grant names what is left. `preferredValue` is the
  new total limit, not an increment ("The preferred value. Must be greater than or equal to
  -1. If set to -1, it means the value is 'unlimited'.",
  https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.quotaPreferences).

Every TPU quota id is unverified (`infra/catalog.py` TPU_QUOTAS), and a shortfall or an
unknown id on an unverified id only ever warns: a guessed id is not evidence enough to stop a
deployment or to file a request.

Quota preferences cannot be deleted (the Cloud Quotas API has no delete), so they are
retained on `pulumi destroy`: Pulumi forgets them, the granted quota stays.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, NotRequired, TypedDict
from urllib.parse import quote

import pulumi
import requests
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi_gcp import cloudquota

from trainstack.components._args import ArgsError, check_args
from trainstack.components._tpu_quota_match import TPU_SERVICE, candidates
from trainstack.components.facts import quota_guard_facts
from trainstack.components.naming import gcp_name

TYPE_TOKEN = "trainstack:quota:QuotaGuard"
# A limit of -1 means unlimited in the Cloud Quotas API.
UNLIMITED = -1
COMPUTE_ENDPOINT = "https://compute.googleapis.com"
COMPUTE_ENDPOINT_ENV = "TRAINSTACK_COMPUTE_ENDPOINT"
"""Replaces the Compute Engine endpoint usage is read from, without credentials: tests point
it at a local fake (under Pulumi mocks nothing else is read)."""
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT_S = 30


class QuotaNeed(TypedDict):
    """One quota a stack needs (the shape `trainstack.infra.estimate.quota_needs` returns)."""

    service: str
    """The API that owns the quota, e.g. `compute.googleapis.com`."""
    quota_id: str
    """The quota id within the service, e.g. `NVIDIA-A100-GPUS-per-project-region`."""
    dimensions: Mapping[str, str]
    """Where it applies: `{"region": ...}`, `{"zone": ...}` or `{}` for global."""
    needed: int
    """How much the stack uses at once."""
    verified: NotRequired[bool]
    """False when the quota id comes from an unverified source: no preference is filed
    for it (default True)."""


class QuotaGuardArgs(TypedDict):
    """Arguments of QuotaGuard; all plain values, because the check runs at construction."""

    project: str
    """Project id whose quota is read and requested."""
    deployment_name: str
    """Stack or deployment name; names the quota preferences."""
    needs: Sequence[QuotaNeed]
    """What the stack needs."""
    preflight: NotRequired[bool]
    """Read the limits and fail on a shortfall (default True). Turn off for stacks that run
    on a specific reservation, whose capacity is not counted against these quotas."""
    request_increases: NotRequired[bool]
    """File a quota preference for each shortfall on a verified id before failing (default
    False); a shortfall on an unverified id is never filed and only warns."""
    contact_email: NotRequired[str]
    """Who Google contacts about the requests; required with `request_increases`."""


Status = Literal["ok", "tight", "short", "unknown", "not_found", "skipped"]
"""`short`: need > limit. `tight`: need <= limit but more than the limit minus the project's
usage, which may be this stack's own machines (module docstring): a warning only."""


@dataclass(frozen=True)
class QuotaCheck:
    """The outcome for one need."""

    service: str
    quota_id: str
    dimensions: dict[str, str]
    needed: int
    limit: int | None
    status: Status
    detail: str
    verified: bool = True
    """Whether the quota id comes from a verified source (no preference is filed otherwise)."""
    usage: int | None = None
    """What the project uses now, where Compute Engine publishes it; None when unreadable."""

    @property
    def preferred_value(self) -> int:
        """The total limit to ask for on a shortfall (need > limit): the need itself, never
        `usage + needed`, since the usage may be this stack's own running machines and
        would be asked for twice (module docstring). A preference's `preferredValue`
        replaces the limit; it is not added to it."""
        return self.needed


class QuotaShortfallError(RuntimeError):
    """A need exceeds its quota limit; raised before any resource but the filed quota
    preferences is registered, so the engine changes nothing else (module docstring)."""


class UnknownQuotaIdError(RuntimeError):
    """The Cloud Quotas API does not know a quota id the stack needs; raised before any
    resource is registered."""


# How a read of an id the API does not know surfaces: the REST status (404 NOT_FOUND) in the
# provider's error text. The Terraform data source behind the invoke turns a 404 into an
# EMPTY result rather than an error (terraform-provider-google
# google/services/cloudquotas/data_source_google_cloud_quotas_quota_info.go calls
# transport_tpg.HandleNotFoundError, which clears the id and returns no error on 404), so an
# answer without a name and without dimensions means "not found" as well.
_NOT_FOUND = re.compile(r"\b(Error 404|HTTP 404|NOT_FOUND|notFound)\b")


def console_url(project: str, check: QuotaCheck) -> str:
    """The Cloud console page where the quota can be raised."""
    return (
        "https://console.cloud.google.com/iam-admin/quotas"
        f"?project={quote(project)}&service={quote(check.service)}"
        f"&metric={quote(check.quota_id)}"
    )


def match_limit(
    entries: Iterable[tuple[Mapping[str, str], str | int | None]], dimensions: Mapping[str, str]
) -> int | None:
    """The enforced limit for `dimensions` among (entry dimensions, value) pairs.

    An entry applies when each of its dimensions equals ours; the most specific applicable
    entry wins, and one with no dimensions is the default for every location without a
    more specific entry. None when nothing applies.
    """
    best: tuple[int, int] | None = None
    for dims, value in entries:
        if value in (None, "") or any(dimensions.get(k) != v for k, v in dims.items()):
            continue
        candidate = (len(dims), int(value))
        if best is None or candidate[0] > best[0]:
            best = candidate
    return None if best is None else best[1]


def _limit_for(info: Any, dimensions: Mapping[str, str]) -> int | None:
    """The limit in a `get_s_quota_info` result (its details come as a list)."""
    entries = [
        (dict(e.dimensions or {}), e.details[0].value if e.details else None)
        for e in getattr(info, "dimensions_infos", None) or []
    ]
    return match_limit(entries, dimensions)


def _outcome(
    need: QuotaNeed, limit: int | None, status: Status, detail: str, usage: int | None = None
) -> QuotaCheck:
    return QuotaCheck(
        service=need["service"],
        quota_id=need["quota_id"],
        dimensions=dict(need["dimensions"]),
        needed=need["needed"],
        limit=limit,
        status=status,
        detail=detail,
        verified=need.get("verified", True),
        usage=usage,
    )


def compute_metric(quota_id: str) -> str | None:
    """The Compute Engine usage metric behind a Cloud Quotas id
    (`NVIDIA-A100-GPUS-per-project-region` -> `NVIDIA_A100_GPUS`)."""
    for suffix in ("-per-project-region", "-per-project"):
        if quota_id.endswith(suffix):
            return quota_id[: -len(suffix)].replace("-", "_")
    return None


Get = Callable[[str], "dict[str, Any] | str"]
"""GET a URL: its JSON object, or a string naming the failure."""
UsageTable = dict[tuple[str, str], int]
"""{(region or "global", Compute metric): usage}."""


def compute_usage(get: Get, endpoint: str, project: str, needs: Iterable[QuotaNeed]) -> UsageTable:
    """Current usage of the Compute Engine quotas `needs` touch, from `regions.get` (regional
    quotas) and `projects.get` (global ones); a scope that cannot be read is left out."""
    scopes = {
        need["dimensions"].get("region", "global")
        for need in needs
        if need["service"] == "compute.googleapis.com"
    }
    table: UsageTable = {}
    for scope in sorted(scopes):
        path = f"/regions/{scope}" if scope != "global" else ""
        body = get(f"{endpoint}/compute/v1/projects/{project}{path}")
        if isinstance(body, str):
            continue
        for q in body.get("quotas", []):
            table[scope, str(q["metric"])] = int(q["usage"])
    return table


def usage_of(need: QuotaNeed, table: Mapping[tuple[str, str], int]) -> int | None:
    """The need's current usage in `table`, None when Compute Engine does not publish it."""
    metric = compute_metric(need["quota_id"])
    if need["service"] != "compute.googleapis.com" or metric is None:
        return None
    return table.get((need["dimensions"].get("region", "global"), metric))


def http_get(session: requests.Session) -> Get:
    """`Get` over `session`: the JSON object, or "HTTP <code>: <Google's error message>"."""

    def get(url: str) -> dict[str, Any] | str:
        try:
            response = session.get(url, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            return f"request failed: {exc}"
        if response.status_code != 200:
            try:
                message = response.json().get("error", {}).get("message", response.text)
            except ValueError:
                message = response.text
            return f"HTTP {response.status_code}: {message.strip()[:200]}"
        body = response.json()
        return body if isinstance(body, dict) else f"unexpected response: {body!r}"[:200]

    return get


def _usage_reader(project: str) -> Callable[[Sequence[QuotaNeed]], UsageTable]:
    """Reads usage as the deployer (Application Default Credentials, as the provider does);
    `COMPUTE_ENDPOINT_ENV` reads a local fake instead. Under Pulumi mocks (`trainstack plan`,
    tests) only that fake is read: offline there is no usage to read."""
    endpoint = os.environ.get(COMPUTE_ENDPOINT_ENV)

    def read(needs: Sequence[QuotaNeed]) -> UsageTable:
        if endpoint:
            return compute_usage(http_get(requests.Session()), endpoint, project, needs)
        if isinstance(pulumi_settings.get_monitor(), pulumi_mocks.MockMonitor):
            return {}
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=[SCOPE])
        except DefaultCredentialsError:
            return {}
        return compute_usage(
            http_get(AuthorizedSession(credentials)), COMPUTE_ENDPOINT, project, needs
        )

    return read


NOT_FOUND_DETAIL = "the Cloud Quotas API does not know this quota id"


def _tpu_by_metric(project: str, need: QuotaNeed) -> tuple[Any, str]:
    """For a TPU id the API does not know: the one quota of the same family among the Cloud
    TPU API's own quotas (`trainstack.components._tpu_quota_match`) and a note naming it, or None and
    the not-found detail (listing the candidates when there are several)."""
    if need["service"] != TPU_SERVICE:
        return None, NOT_FOUND_DETAIL
    try:
        infos = cloudquota.get_s_quota_infos(parent=f"projects/{project}", service=TPU_SERVICE)
    except Exception:  # noqa: BLE001 - the list is a best effort after a not-found id
        return None, NOT_FOUND_DETAIL
    found = candidates(need["quota_id"], getattr(infos, "quota_infos", None) or [])
    if len(found) == 1:
        match = found[0]
        return match.info, (
            f"the catalog's id is unknown; read {match.quota_id} (metric {match.metric}), the "
            "one Cloud TPU API quota of the same generation and tier"
        )
    if found:
        listed = ", ".join(f"{m.quota_id} ({m.metric})" for m in found)
        return None, f"{NOT_FOUND_DETAIL}; quotas of the same TPU family: {listed}"
    return None, NOT_FOUND_DETAIL


def _compare(need: QuotaNeed, limit: int, usage: int | None, note: str) -> QuotaCheck:
    needed = need["needed"]
    if limit == UNLIMITED:
        return _outcome(need, limit, "ok", "unlimited" + (f" [{note}]" if note else ""), usage)
    # Only need > limit is short: the usage may be this stack's own machines (docstring).
    status: Status = "short" if needed > limit else "ok"
    if usage is None:
        detail = f"need {needed}, limit {limit} (current usage not readable for this quota)"
    else:
        status = "tight" if status == "ok" and needed > limit - usage else status
        detail = f"need {needed}, limit {limit}, in use {usage}: {limit - usage} left"
    return _outcome(need, limit, status, detail + (f" [{note}]" if note else ""), usage)


def check_needs(
    project: str,
    needs: Sequence[QuotaNeed],
    read_usage: Callable[[Sequence[QuotaNeed]], UsageTable] | None = None,
) -> list[QuotaCheck]:
    """Read each need's limit and compare the need with the limit minus current usage
    (`read_usage`, for the needs whose limit was read; without it usage is unknown): above the
    limit is `short`, above what is left `tight` (module docstring). An id
    the API does not know comes back `not_found`; any other unreadable quota (no permission,
    API off) `unknown`."""
    checks: list[QuotaCheck | None] = []
    limits: list[tuple[int, QuotaNeed, int, str]] = []
    for need in needs:
        note = ""
        try:
            info = cloudquota.get_s_quota_info(
                parent=f"projects/{project}", service=need["service"], quota_id=need["quota_id"]
            )
        except Exception as exc:  # noqa: BLE001 - any read failure is reported
            status: Status = "not_found" if _NOT_FOUND.search(str(exc)) else "unknown"
            checks.append(_outcome(need, None, status, str(exc)))
            continue
        if not getattr(info, "name", None) and not getattr(info, "dimensions_infos", None):
            info, note = _tpu_by_metric(project, need)
            if info is None:
                checks.append(_outcome(need, None, "not_found", note))
                continue
        limit = _limit_for(info, need["dimensions"])
        if limit is None:
            checks.append(
                _outcome(need, None, "unknown", "no limit is reported for these dimensions")
            )
            continue
        limits.append((len(checks), need, limit, note))
        checks.append(None)
    # Usage only matters where a limit was read (never offline, where none is).
    table = read_usage([n for _, n, _, _ in limits]) if read_usage and limits else {}
    for index, need, limit, note in limits:
        checks[index] = _compare(need, limit, usage_of(need, table), note)
    return [c for c in checks if c is not None]


def _where(check: QuotaCheck) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(check.dimensions.items())) or "global"


def shortfall_message(project: str, shortfalls: Sequence[QuotaCheck]) -> str:
    lines = [f"quota preflight: {len(shortfalls)} shortfall(s) in project {project!r}:"]
    for c in shortfalls:
        lines.append(
            f"  - {c.service} {c.quota_id} ({_where(c)}): {c.detail}; raise the limit to at "
            f"least {c.preferred_value} at {console_url(project, c)}"
        )
    lines.append(
        "Nothing was created or changed. Raise the quota, or set trainstack:quotas "
        "{request_increases: true, contact_email: ...} to file the requests with pulumi up."
    )
    return "\n".join(lines)


def filed_message(project: str, filed: Sequence[QuotaCheck], preview: bool = False) -> str:
    """With `request_increases`: what `pulumi up` filed (the error), or will file (a
    preview's warning), and that nothing else changes."""
    head = f"quota preflight: {len(filed)} shortfall(s) in project {project!r}"
    lines = [f"{head}; quota preference(s) {'to file' if preview else 'filed'}:"]
    for c in filed:
        lines.append(
            f"  - {c.service} {c.quota_id} ({_where(c)}): {c.detail}; asked for a limit of "
            f"{c.preferred_value} (track it at {console_url(project, c)})"
        )
    lines.append(
        "pulumi up files them, then stops with an error before creating or changing anything "
        "else; run it again once Google grants them."
        if preview
        else "Nothing else was created or changed. Run pulumi up again once Google grants them."
    )
    return "\n".join(lines)


def tight_warning(project: str, check: QuotaCheck) -> str:
    """A need within the limit but above what the project leaves: the usage may be this
    stack's own machines, so it warns and files nothing (module docstring)."""
    return (
        f"quota {check.service} {check.quota_id} ({_where(check)}): {check.detail}. The "
        f"usage is the whole project's and may include this stack's own machines from an "
        f"earlier pulumi up, so the deployment goes on and nothing is requested; if it is "
        f"other workloads', the stack's machines start only once {check.needed} are free or "
        f"the limit is raised to {(check.usage or 0) + check.needed} at "
        f"{console_url(project, check)}"
    )


def unknown_ids_message(project: str, unknown: Sequence[QuotaCheck]) -> str:
    """Names every quota id the API does not know, and what to do about each."""
    head = f"quota preflight: {len(unknown)} quota id(s) unknown to the Cloud Quotas API"
    lines = [f"{head} in project {project!r}:"]
    for c in unknown:
        source = "an unverified id" if not c.verified else "an id"
        lines.append(
            f"  - {c.service} {c.quota_id} ({_where(c)}): not found ({source}; the stack needs "
            f"{c.needed}); list the real ids with `gcloud beta quotas info list "
            f"--service={c.service} --project={project}`"
        )
    lines.append(
        "Nothing was created. Correct the id (trainstack: infra/catalog.py), or set "
        "trainstack:quotas {skip_preflight: true} to deploy without the quota check."
    )
    return "\n".join(lines)


def unverified_unknown_warning(project: str, check: QuotaCheck) -> str:
    """An unverified id the API does not know: not checked, and why (with the Cloud TPU
    API's quotas of the same family when there are several)."""
    family = check.detail.removeprefix(NOT_FOUND_DETAIL).removeprefix("; ")
    return (
        f"quota {check.service} {check.quota_id} ({_where(check)}) is unknown to the Cloud "
        f"Quotas API and the id is unverified (infra/catalog.py), so it was not checked; the "
        f"stack needs {check.needed}. "
        + (f"The service has {family}. " if family and family != check.detail else "")
        + f"List the real ids with `gcloud beta quotas info list "
        f"--service={check.service} --project={project}`"
    )


def unverified_shortfall_warning(project: str, check: QuotaCheck, requested: bool) -> str:
    """A shortfall on an unverified id: reported, never enforced or filed."""
    filed = " and no quota preference was filed for it" if requested else ""
    return (
        f"quota {check.service} {check.quota_id} ({_where(check)}): {check.detail}, but the "
        f"id is unverified (infra/catalog.py), so the deployment goes on{filed}; if it is the "
        f"quota this stack draws on, raise the limit to {check.preferred_value} at "
        f"{console_url(project, check)}"
    )


class QuotaGuard(pulumi.ComponentResource):
    """Checks a stack's quota before anything else is created; optionally requests more."""

    checks: list[QuotaCheck]
    """The outcome per need (plain data: the check ran when the program did)."""
    shortfalls: list[QuotaCheck]
    """Needs above their limit."""
    facts: dict[str, Any]
    """What `trainstack plan --program` reads (`trainstack.components.facts`; also a registered
    output): the plan's note that the quota is checked before anything is created."""
    preferences: list[cloudquota.SQuotaPreference]
    """The quota preferences a preview shows (empty unless `request_increases` and a
    shortfall; `pulumi up` files them and raises)."""

    def __init__(
        self, name: str, args: QuotaGuardArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("QuotaGuard", QuotaGuardArgs, args)
        project = args["project"]
        request = args.get("request_increases", False)
        if request and not args.get("contact_email"):
            missing = "QuotaGuard.contact_email: required when request_increases is true"
            raise ArgsError([f"{missing}; valid: an email address"])
        if args.get("preflight", True):
            self.checks = check_needs(project, args["needs"], _usage_reader(project))
        else:
            skipped = "preflight off (specific reservation)"
            self.checks = [_outcome(n, None, "skipped", skipped) for n in args["needs"]]
        # An unverified id is a guess (infra/catalog.py): the API not knowing it says the
        # guess is wrong, not that the quota is missing, so it only warns.
        unknown = [c for c in self.checks if c.status == "not_found" and c.verified]
        if unknown:
            # Raised before registering anything, so the deployment creates nothing.
            raise UnknownQuotaIdError(unknown_ids_message(project, unknown))
        self.shortfalls = [c for c in self.checks if c.status == "short"]
        # A shortfall on an unverified id (every TPU id) warns: the id may not be the quota
        # the resource draws on, so it neither stops the deployment nor is filed.
        blocking = [c for c in self.shortfalls if c.verified]
        if blocking and not request:
            raise QuotaShortfallError(shortfall_message(project, blocking))

        super().__init__(TYPE_TOKEN, name, None, opts)
        for c in (c for c in self.checks if c.status == "not_found"):
            pulumi.log.warn(unverified_unknown_warning(project, c), resource=self)
        for c in (c for c in self.shortfalls if not c.verified):
            pulumi.log.warn(unverified_shortfall_warning(project, c, request), resource=self)
        for c in (c for c in self.checks if c.status == "tight"):
            pulumi.log.warn(tight_warning(project, c), resource=self)
        for c in (c for c in self.checks if c.status == "unknown"):
            pulumi.log.warn(
                f"quota {c.service} {c.quota_id} ({_where(c)}) could not be read: {c.detail}; "
                f"the stack needs {c.needed}. Check it at {console_url(project, c)}",
                resource=self,
            )
        self.preferences = [self._request(name, args, c) for c in blocking]
        if blocking and not pulumi.runtime.is_dry_run():
            # Raised after registering the preferences: the SDK files them before it reports
            # the error, and the engine then stops without deleting anything (docstring).
            raise QuotaShortfallError(filed_message(project, blocking))
        if blocking:
            # A preview that failed would stop `pulumi up` before the preferences are filed.
            pulumi.log.warn(filed_message(project, blocking, preview=True), resource=self)
        self.facts = quota_guard_facts()
        self.register_outputs(
            {
                "facts": self.facts,
                "checks": [asdict(c) for c in self.checks],
                "shortfalls": [asdict(c) for c in self.shortfalls],
                "preferences": [p.name for p in self.preferences],
            }
        )

    def _request(
        self,
        name: str,
        args: QuotaGuardArgs,
        check: QuotaCheck,
    ) -> cloudquota.SQuotaPreference:
        role = f"{check.quota_id}-{_where(check)}"
        return cloudquota.SQuotaPreference(
            f"{name}-{gcp_name('request', role)}",
            parent=f"projects/{args['project']}",
            # A deterministic id makes a re-run update the same preference instead of
            # filing a duplicate.
            name=gcp_name(args["deployment_name"], role),
            service=check.service,
            quota_id=check.quota_id,
            dimensions=check.dimensions,
            # The new total limit, not an increment (see the module docstring).
            quota_config={"preferred_value": str(check.preferred_value)},
            contact_email=args.get("contact_email"),
            justification=(
                f"trainstack stack {args['deployment_name']!r} needs {check.needed} of "
                f"{check.quota_id} ({_where(check)}) for distributed training; current "
                f"limit {check.limit}"
                + ("." if check.usage is None else f", {check.usage} in use.")
            ),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )

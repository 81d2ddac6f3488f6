"""QuotaGuard: fail a deployment on missing quota before any compute exists.

Every rival tool's most common complaint is finding out about quota minutes into
provisioning. QuotaGuard reads the current limit of each quota a stack needs with the
`gcp.cloudquota.get_s_quota_info` invoke (which runs at preview too) and raises before the
stack registers anything when a need exceeds its limit, naming every shortfall. With
`request_increases` it files a `gcp.cloudquota.SQuotaPreference` per shortfall instead and
reports the deployment as blocked until Google grants them; only for quota ids whose source
is verified (`QuotaNeed.verified`): a preference for a guessed id would ask for the wrong
quota, or fail.

A quota id the Cloud Quotas API does not know is an error too (`UnknownQuotaIdError`), not
a warning, when the catalog marks the id verified: the check could not run, and the
deployment would find out minutes into provisioning. An unverified id (a pattern guess) the
API does not know only warns, naming the id: the guess is wrong, not the quota short. A
shortfall on an unverified id warns as well, unless `request_increases` is set (it cannot be
filed, so it stops the deployment, named). A read the caller may not make (HTTP 403, no `cloudquotas.quotas.get`) stays
a warning: the id is fine, the deployer's role is not.

    from components.quota_guard import QuotaGuard

    guard = QuotaGuard("exp-quota", {
        "project": "my-project",
        "deployment_name": "exp",
        "needs": [{"service": "compute.googleapis.com",
                   "quota_id": "NVIDIA-A100-GPUS-per-project-region",
                   "dimensions": {"region": "us-central1"}, "needed": 16}],
    })

Quota preferences cannot be deleted (the Cloud Quotas API has no delete), so they are
retained on `pulumi destroy`: Pulumi forgets them, the granted quota stays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, NotRequired, TypedDict
from urllib.parse import quote

import pulumi
from pulumi_gcp import cloudquota

from components._args import check_args
from components._naming import gcp_name

TYPE_TOKEN = "trainstack:quota:QuotaGuard"
# A limit of -1 means unlimited in the Cloud Quotas API.
UNLIMITED = -1


class QuotaNeed(TypedDict):
    """One quota a stack needs (the shape `infra.estimate.quota_needs` returns)."""

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
    """File a quota preference for each shortfall instead of failing (default False); a
    shortfall on an unverified id then fails, naming it (without this flag it only warns)."""
    contact_email: NotRequired[str]
    """Who Google contacts about the requests; required with `request_increases`."""


Status = Literal["ok", "short", "unknown", "not_found", "skipped"]


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


class QuotaShortfallError(RuntimeError):
    """A need exceeds its quota limit; raised before any resource is registered."""


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


def _outcome(need: QuotaNeed, limit: int | None, status: Status, detail: str) -> QuotaCheck:
    return QuotaCheck(
        service=need["service"],
        quota_id=need["quota_id"],
        dimensions=dict(need["dimensions"]),
        needed=need["needed"],
        limit=limit,
        status=status,
        detail=detail,
        verified=need.get("verified", True),
    )


NOT_FOUND_DETAIL = "the Cloud Quotas API does not know this quota id"


def check_needs(project: str, needs: Sequence[QuotaNeed]) -> list[QuotaCheck]:
    """Read each need's limit and compare. An id the API does not know comes back
    `not_found`; any other unreadable quota (no permission, API off) `unknown`."""
    checks = []
    for need in needs:
        try:
            info = cloudquota.get_s_quota_info(
                parent=f"projects/{project}", service=need["service"], quota_id=need["quota_id"]
            )
        except Exception as exc:  # noqa: BLE001 - any read failure is reported
            status: Status = "not_found" if _NOT_FOUND.search(str(exc)) else "unknown"
            checks.append(_outcome(need, None, status, str(exc)))
            continue
        if not getattr(info, "name", None) and not getattr(info, "dimensions_infos", None):
            checks.append(_outcome(need, None, "not_found", NOT_FOUND_DETAIL))
            continue
        limit = _limit_for(info, need["dimensions"])
        if limit is None:
            checks.append(
                _outcome(need, None, "unknown", "no limit is reported for these dimensions")
            )
        elif limit != UNLIMITED and need["needed"] > limit:
            checks.append(_outcome(need, limit, "short", f"need {need['needed']}, limit {limit}"))
        else:
            checks.append(_outcome(need, limit, "ok", "within limit"))
    return checks


def _where(check: QuotaCheck) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(check.dimensions.items())) or "global"


def shortfall_message(
    project: str, shortfalls: Sequence[QuotaCheck], request_increases: bool = False
) -> str:
    lines = [f"quota preflight: {len(shortfalls)} shortfall(s) in project {project!r}:"]
    for c in shortfalls:
        unfiled = (
            " (not requested automatically: the quota id is unverified)"
            if request_increases and not c.verified
            else ""
        )
        lines.append(
            f"  - {c.service} {c.quota_id} ({_where(c)}): need {c.needed}, limit {c.limit}; "
            f"request more at {console_url(project, c)}{unfiled}"
        )
    lines.append(
        "Nothing was created. Raise the quota, or set trainstack:quotas "
        "{request_increases: true, contact_email: ...} to file the requests with pulumi up."
        if not request_increases
        else "Nothing was created. Raise the quotas marked unverified in the console, then "
        "run pulumi up again; the verified ones are requested then."
    )
    return "\n".join(lines)


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
    """An unverified id the API does not know: not checked, and why."""
    return (
        f"quota {check.service} {check.quota_id} ({_where(check)}) is unknown to the Cloud "
        f"Quotas API and the id is unverified (infra/catalog.py), so it was not checked; the "
        f"stack needs {check.needed}. List the real ids with `gcloud beta quotas info list "
        f"--service={check.service} --project={project}`"
    )


def unverified_shortfall_warning(project: str, check: QuotaCheck) -> str:
    """A shortfall on an unverified id: reported, not enforced."""
    return (
        f"quota {check.service} {check.quota_id} ({_where(check)}): need {check.needed}, "
        f"limit {check.limit}, but the id is unverified (infra/catalog.py), so the deployment "
        f"goes on; if it is the quota this stack draws on, request more at "
        f"{console_url(project, check)}"
    )


class QuotaGuard(pulumi.ComponentResource):
    """Checks a stack's quota before anything else is created; optionally requests more."""

    checks: list[QuotaCheck]
    """The outcome per need (plain data: the check ran when the program did)."""
    shortfalls: list[QuotaCheck]
    """Needs above their limit."""
    blocked: bool
    """True when shortfalls were filed as requests: compute must wait for the grants."""
    preferences: list[cloudquota.SQuotaPreference]
    """The quota preferences filed (empty unless `request_increases` and a shortfall)."""

    def __init__(
        self, name: str, args: QuotaGuardArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("QuotaGuard", QuotaGuardArgs, args)
        project = args["project"]
        request = args.get("request_increases", False)
        if request and not args.get("contact_email"):
            raise ValueError("contact_email: required when request_increases is true")
        if args.get("preflight", True):
            self.checks = check_needs(project, args["needs"])
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
        # Without request_increases a shortfall on an unverified id warns: the id may not be
        # the quota the resource draws on. With it, the user asked for every shortfall to be
        # filed, and an unverified one cannot be, so it still stops the deployment.
        if request:
            unfiled = any(not c.verified for c in self.shortfalls)
            blocking = self.shortfalls if unfiled else []
        else:
            blocking = [c for c in self.shortfalls if c.verified]
        if blocking:
            raise QuotaShortfallError(shortfall_message(project, blocking, request))

        super().__init__(TYPE_TOKEN, name, None, opts)
        for c in (c for c in self.checks if c.status == "not_found"):
            pulumi.log.warn(unverified_unknown_warning(project, c), resource=self)
        for c in (c for c in self.shortfalls if not c.verified):
            pulumi.log.warn(unverified_shortfall_warning(project, c), resource=self)
        for c in (c for c in self.checks if c.status == "unknown"):
            pulumi.log.warn(
                f"quota {c.service} {c.quota_id} ({_where(c)}) could not be read: {c.detail}; "
                f"the stack needs {c.needed}. Check it at {console_url(project, c)}",
                resource=self,
            )
        self.preferences = [self._request(name, args, c) for c in self.shortfalls if request]
        self.blocked = bool(self.preferences)
        self.register_outputs(
            {
                "checks": [asdict(c) for c in self.checks],
                "shortfalls": [asdict(c) for c in self.shortfalls],
                "blocked": self.blocked,
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
            quota_config={"preferred_value": str(check.needed)},
            contact_email=args.get("contact_email"),
            justification=(
                f"trainstack stack {args['deployment_name']!r} needs {check.needed} of "
                f"{check.quota_id} ({_where(check)}) for distributed training; current "
                f"limit {check.limit}."
            ),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )

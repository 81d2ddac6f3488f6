"""A per-stack serverless run supervisor: it recreates a preempted Spot or queued TPU slice
and stops a run's compute (TPU slice, GCE instance group, GKE GPU node pool) at the run's
end, at `limits.max_run_hours` and at `limits.max_total_usd` (`components/supervisor/main.py`
says how; every `supervised` target (`trainstack.infra.targets`: tpu, gke, gce) registers
one through `trainstack.infra.supervision`).

    from trainstack.components.run_supervisor import RunSupervisor, slice_target

    supervisor = RunSupervisor(
        "exp-42-supervisor",
        {
            "project": "my-project",
            "region": "us-central1",  # supervisor_region(stack region), below
            "deployment_name": "exp-42",
            "kind": "node",  # a Spot gcp.tpu.V2Vm; "queued" for a queued resource
            "resource_name": "projects/my-project/locations/us-west4-a/nodes/exp-42-tpu",
            "body": body,  # kind, resource_name, body = slice_target(tpu_slice, its args)
            "staging_bucket": buckets.staging_bucket,
            "checkpoint_bucket": buckets.checkpoint_bucket,
            "node_service_account": identity.service_account.name,
        },
    )
    # supervisor.events_uri: gs://<checkpoint bucket>/supervisor/exp-42/events.jsonl

What runs: `components/supervisor/main.py`, an HTTP Cloud Functions (gen2, `python312`)
function, shipped like the trainer package: a reproducible zip (`main.py`,
`requirements.txt`, `config.json` with the slice's name and the exact REST body to recreate
it with) named by its sha256 in the staging bucket. Cloud Scheduler calls it every
`schedule` (default every 2 minutes) with an OIDC token of the supervisor's account; nothing
bills while idle beyond the scheduler job and the calls (`trainstack.infra.estimate`). The
body rides in the source bundle, not a bucket object, so nothing the training nodes can
write (the checkpoint bucket) changes what the supervisor creates; a new body (new startup
script) makes a new bundle and redeploys the function.

Permissions of its own account (`<deployment>-sup`):
- a custom project role holding only the calls it makes (`PERMISSIONS`, with sources in
  `catalog.supervisor_iam`: the TPU node or queued resource through `tpu.nodes.*`; the
  group's get and resize; the pool's get and setSize). Only the GKE grant can be held to the
  one resource (`cluster_condition`; the pool's groups are read through a second, read-only
  role, `READ_PERMISSIONS`): Cloud TPU and instance group managers do not recognise resource
  names in conditions, so those grants are project-wide, held by the policy pack.
- `roles/iam.serviceAccountUser` on the training account only, where it recreates a slice
  (it only creates the body in its bundle, which names the training account; a Node without
  `serviceAccount.email` runs as the default Compute Engine account, tpu.v2 discovery: "If
  empty, default Compute service account will be used", and whether creating one needs
  actAs on that account is unverified), `roles/storage.objectAdmin` on the checkpoint
  bucket only (its state and events), and `roles/run.invoker` on its own function's Cloud
  Run service only (the scheduler's calls).
Its own Cloud Build account builds the function (`_supervisor_iam`; a new project's default
one may lack the permissions, `supervisor_iam.BUILD_SOURCE`). Function and job run in
`catalog.supervisor_region.supervisor_region(<stack region>)` (else us-central1).

Stopping the compute (the slice deleted, the group or the GKE GPU pool at 0) ends its
accelerator billing: `trainstack.components.catalog.billing` holds those facts with their
sources. The permissions of the `mig` and `node_pool` kinds are not verified on a live
project (`billing.SUPERVISOR_PERMISSIONS_SOURCE`).

Naming: the function and the scheduler job are `<deployment>-supervisor`, the role
`trainstackSupervisor_<deployment>` (dashes as underscores; the read-only role
`trainstackSupervisorRead_<deployment>`). It was `TpuSupervisor` (`trainstack:tpu:
TpuSupervisor`); an alias keeps stacks deployed under that name.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi
from pulumi_gcp import (
    cloudfunctionsv2,
    cloudrunv2,
    cloudscheduler,
    projects,
    serviceaccount,
    storage,
)

from trainstack.components._args import ArgsError, check_args, component_check
from trainstack.components._discovery import validate_body
from trainstack.components._naming import account_id, gcp_name, labels_input, name_input
from trainstack.components._options import inherited_depends_on
from trainstack.components._project import current_build_dir
from trainstack.components._supervisor_iam import build_account, role_and_grant
from trainstack.components.catalog.supervisor_iam import (
    NAME_FORMS,
    PERMISSIONS,
    READ_PERMISSIONS,
    RESOURCE_NAMES,
    STOP_ONLY_PERMISSIONS,
    cluster_condition,
    role_id,
)
from trainstack.components.catalog.supervisor_region import region_problem
from trainstack.components.tpu_pod_slice import COMPONENT_LABEL as TPU_COMPONENT_LABEL
from trainstack.components.tpu_pod_slice import (
    TpuPodSlice,
    TpuPodSliceArgs,
    node_body,
    validate_args,
)

TOKEN: Final = "trainstack:supervision:RunSupervisor"
OLD_TOKENS: Final = ("trainstack:tpu:TpuSupervisor",)
"""Its earlier type tokens: aliases, so a stack deployed before the rename keeps it."""
COMPONENT_LABEL: Final = "run-supervisor"
SOURCE_DIR: Final = Path(__file__).resolve().parent / "supervisor"
SOURCE_FILES: Final = ("main.py",)
REQUIREMENTS: Final = (
    "functions-framework==3.10.2",
    "google-api-python-client==2.202.0",
    "google-auth==2.63.0",
    "google-auth-httplib2==0.4.4",
    "gcsfs==2026.10.1",
)
"""The bundle's requirements.txt (what main.py imports), pinned to the versions the tests run
main.py with, so every build of one zip gets the same libraries (here: no .txt package data)."""
OBJECT_PREFIX: Final = "supervisor/"
RUNTIME: Final = "python312"
"""Cloud Run functions Python runtime ids (https://cloud.google.com/run/docs/runtimes/python):
python312 is supported, deprecated 2028-10-02."""
ENTRY_POINT: Final = "supervise"
CHECK_INTERVAL_S: Final = 120  # how late a check can see
DEFAULT_SCHEDULE: Final = f"*/{CHECK_INTERVAL_S // 60} * * * *"
STOP_GRACE_S: Final = 300
"""`supervisor/main.py`'s wait for the trainer's checkpoint after a stop request (the bundle
cannot import this module; a test holds the two equal)."""
SUPERVISED_PROVISIONING: Final = frozenset({"spot", "queued"})


def supervised(provisioning: str | None) -> bool:
    """Whether the supervisor recreates a slice of this `tpu.provisioning` (Google may
    preempt it)."""
    return provisioning in SUPERVISED_PROVISIONING


MAX_TOTAL_USD_ABOVE: Final = 0.0
"""`limits.max_total_usd` (and the component's `run.max_total_usd`) must be above this."""


def max_total_usd_problem(value: object, key: str) -> str | None:
    """The one rule of a run's spend cap, for the stack key and the component argument
    (which targets enforce it is the target's `supervised`, `trainstack.infra.targets`)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (MAX_TOTAL_USD_ABOVE < value < float("inf"))
    ):
        return f"{key}: {value!r} is not allowed; valid: a number of US dollars above 0"
    return None


SERVICES: Final = (
    # Cloud Functions gen2 builds with Cloud Build into Artifact Registry and runs on Cloud
    # Run (https://cloud.google.com/functions/docs/deploy: "enable the Cloud Functions,
    # Cloud Build, Artifact Registry, Cloud Run ... APIs"); Cloud Scheduler calls it.
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudscheduler.googleapis.com",
    "run.googleapis.com",
)
"""APIs the supervisor needs besides the TPU API."""
TPU_KINDS: Final = frozenset({"node", "queued"})
RUN_KEYS: Final = frozenset(
    {"end_uri", "clock_uri", "stop_uri", "max_run_seconds", "hourly_usd", "max_total_usd"}
)
"""What `run` may hold (`supervisor/main.py` reads each; all optional)."""
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class RunSupervisorArgs(TypedDict):
    """Arguments for `RunSupervisor`."""

    project: str
    """Project of the slice, the function and the scheduler job."""
    region: str
    """Region of the function and the scheduler job: one listed for both
    (`trainstack.components.catalog.supervisor_region.supervisor_region`)."""
    deployment_name: str
    """Names the account, role, function, job and the state folder."""
    kind: Literal["node", "queued", "mig", "node_pool"]
    """`node`: a `gcp.tpu.V2Vm`; `queued`: a queued resource; `mig`: a Compute Engine managed
    instance group; `node_pool`: a GKE node pool."""
    resource_name: pulumi.Input[str]
    """The compute's full name (`NAME_FORMS`)."""
    body: NotRequired[pulumi.Input[dict[str, Any]]]
    """TPU kinds with `recover`: the REST body it is created again with (Node, or
    QueuedResource), exactly as created."""
    recover: NotRequired[bool]
    """Recreate a preempted slice (TPU kinds; default True for them, False otherwise)."""
    run: NotRequired[pulumi.Input[dict[str, Any]]]
    """When the run ends (`RUN_KEYS`, see `supervisor/main.py`): the end record, run clock
    and stop request objects, `max_run_seconds`, the compute's `hourly_usd` at list price
    and `max_total_usd`."""
    staging_bucket: pulumi.Input[str]
    """Bucket the function's source zip is uploaded to."""
    checkpoint_bucket: pulumi.Input[str]
    """Bucket of the supervisor's state and events (`supervisor/<deployment>/`)."""
    node_service_account: NotRequired[pulumi.Input[str]]
    """The slice's service account, `projects/P/serviceAccounts/EMAIL`: the supervisor may
    act as it, to create the node of its bundle's body, which runs as it."""
    schedule: NotRequired[str]
    """Cron schedule of the checks (UTC). Default every 2 minutes."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Extra labels for the function (and the source object's metadata)."""
    build_dir: NotRequired[str]
    """Folder the source zip is written to. Default: `.trainstack/build/` of the current
    project (`trainstack.components._project.current_build_dir`), never the install."""


@dataclass(frozen=True)
class SourceBundle:
    path: Path
    sha256: str

    @property
    def object_name(self) -> str:
        return f"{OBJECT_PREFIX}trainstack_supervisor-{self.sha256[:16]}.zip"


def source_zip(config: dict[str, Any]) -> bytes:
    """The function's source: `main.py`, `requirements.txt`, `config.json`; byte for byte
    the same for the same config (sorted members, fixed times and modes)."""
    members = {name: (SOURCE_DIR / name).read_bytes() for name in SOURCE_FILES}
    members["config.json"] = (json.dumps(config, sort_keys=True, indent=1) + "\n").encode()
    members["requirements.txt"] = "".join(f"{r}\n" for r in REQUIREMENTS).encode()
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, members[name])
    return raw.getvalue()


def build_source(config: dict[str, Any], build_dir: Path | None = None) -> SourceBundle:
    """Write the bundle under `build_dir` (default: the current project's
    `current_build_dir()`), named by its digest, and return it."""
    build_dir = build_dir or current_build_dir()
    data = source_zip(config)
    digest = hashlib.sha256(data).hexdigest()
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"trainstack_supervisor-{digest[:16]}.zip"
    if not path.is_file() or path.read_bytes() != data:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return SourceBundle(path=path, sha256=digest)


def supervisor_config(
    kind: str,
    resource_name: str,
    body: dict[str, Any] | None,
    checkpoint_bucket: str,
    deployment: str,
    *,
    recover: bool | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`config.json` of the bundle."""
    if kind not in RESOURCE_NAMES:
        raise ValueError(f"kind: {kind!r} is not allowed; valid: {', '.join(RESOURCE_NAMES)}")
    if not RESOURCE_NAMES[kind].match(resource_name):
        what = "a TPU " + kind if kind in TPU_KINDS else "a " + kind
        raise ValueError(
            f"resource_name: {resource_name!r} is not {what} name; valid: {NAME_FORMS[kind]}"
        )
    recover = kind in TPU_KINDS if recover is None else recover
    if recover and (kind not in TPU_KINDS or not body):
        raise ValueError(
            f"recover: only a TPU slice with its body is recreated; kind {kind!r}"
            + ("" if kind not in TPU_KINDS else " has no body")
        )
    unknown = sorted(set(run or {}) - RUN_KEYS)
    if unknown:
        raise ValueError(f"run.{unknown[0]}: unknown key; valid: {', '.join(sorted(RUN_KEYS))}")
    cap = (run or {}).get("max_total_usd")
    problem = None if cap is None else max_total_usd_problem(cap, "run.max_total_usd")
    if problem:
        raise ValueError(problem)
    return {
        "kind": kind,
        "name": resource_name,
        "body": body or {},
        "recover": recover,
        "run": dict(run or {}),
        "state_uri": f"gs://{checkpoint_bucket}/supervisor/{deployment}",
    }


def spot_node_body(node: dict[str, Any]) -> dict[str, Any]:
    """A Spot `Node` REST body (what `gcp.tpu.V2Vm` with `scheduling_config.spot` creates)
    from `trainstack.components.tpu_pod_slice.node_body`, checked against the tpu.v2 discovery
    document."""
    body = {**node, "schedulingConfig": {"spot": True}}
    errors = validate_body("tpu.v2", "Node", body)
    if errors:
        raise ValueError("Node body is invalid: " + "; ".join(errors))
    return body


def slice_target(
    tpu: TpuPodSlice, args: TpuPodSliceArgs
) -> tuple[Literal["node", "queued"], pulumi.Output[str], pulumi.Output[dict[str, Any]]]:
    """(kind, full resource name, REST body) of a `TpuPodSlice` built from `args`: its queued
    resource, or its Spot node exactly as the `gcp.tpu.V2Vm` creates it."""
    deployment = args["deployment_name"]
    location = pulumi.Output.concat("projects/", args["project"], "/locations/", args["zone"])
    if tpu.queued_resource is not None:
        # The queued resource's id, as TpuPodSlice names it (trainstack.components._naming).
        qr_id = name_input(gcp_name, deployment, "tpu-qr")
        name = pulumi.Output.concat(location, "/queuedResources/", qr_id)
        return "queued", name, tpu.queued_resource.body
    plan = validate_args(args)
    labels = labels_input(args.get("labels"), TPU_COMPONENT_LABEL)
    body = pulumi.Output.all(
        args["network_self_link"],
        args["subnetwork_self_link"],
        args["service_account_email"],
        tpu.startup_script,
        labels,
        args.get("network_tags", []),
        [d["source_disk"] for d in args.get("data_disks", ())],
    ).apply(
        lambda v: spot_node_body(
            node_body(
                plan=plan,
                runtime_version=args["runtime_version"],
                description=f"trainstack TPU slice {plan.slice.accelerator_type}",
                network=v[0],
                subnetwork=v[1],
                service_account_email=v[2],
                startup_script=v[3],
                labels=v[4],
                network_tags=v[5],
                data_disks=v[6],
            )
        )
    )
    node_id = name_input(gcp_name, deployment, "tpu")
    return "node", pulumi.Output.concat(location, "/nodes/", node_id), body


class RunSupervisor(pulumi.ComponentResource):
    """Recreates this stack's preempted TPU slice; see the module docstring."""

    service_account_email: pulumi.Output[str]
    """The supervisor's own account."""
    function_name: pulumi.Output[str]
    """The Cloud Functions function (and its Cloud Run service)."""
    function_url: pulumi.Output[str]
    """Where the scheduler calls it."""
    source_object: pulumi.Output[str]
    """The source zip's object name in the staging bucket."""
    events_uri: pulumi.Output[str]
    """`gs://<checkpoint bucket>/supervisor/<deployment>/events.jsonl`: one JSON line per
    action (time, resource, seen, action, result, attempt, next_allowed)."""

    def __init__(
        self, name: str, args: RunSupervisorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("RunSupervisor", RunSupervisorArgs, args)
        kind, deployment = args["kind"], args["deployment_name"]
        problems = []
        if kind not in PERMISSIONS:
            problems.append(
                f"RunSupervisor.kind: {kind!r} is not allowed; valid: {', '.join(RESOURCE_NAMES)}"
            )
        recover = args.get("recover", kind in TPU_KINDS)
        what = "TPU" if kind in TPU_KINDS else "run"
        if recover and "node_service_account" not in args:
            problems.append(
                "RunSupervisor.node_service_account: missing; a supervisor that recreates a "
                "TPU slice needs the slice's service account; valid: the slice's service "
                "account email"
            )
        region_error = region_problem(args["region"], "RunSupervisor.region")
        if region_error:
            problems.append(region_error)
        schedule = args.get("schedule", DEFAULT_SCHEDULE)
        if len(schedule.split()) != 5:
            problems.append(
                f"RunSupervisor.schedule: {schedule!r} is not a cron schedule; valid: five "
                f"fields, e.g. {DEFAULT_SCHEDULE!r}"
            )
        if problems:
            raise ArgsError(problems)
        labels = component_check("RunSupervisor", labels_input, args.get("labels"), COMPONENT_LABEL)
        project, region = args["project"], args["region"]
        renamed = pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=t) for t in OLD_TOKENS])
        super().__init__(TOKEN, name, None, pulumi.ResourceOptions.merge(opts, renamed))
        child = pulumi.ResourceOptions(parent=self)
        # Given the slice (compose does): the function and its schedule come after it and,
        # on `pulumi destroy`, go before it, so no check can recreate a slice being destroyed.
        deps = inherited_depends_on(opts)

        self.account = serviceaccount.Account(
            f"{name}-sa",
            project=project,
            account_id=account_id(deployment, "sup"),
            display_name=f"trainstack {what} supervisor ({deployment})",
            description=(
                "Recreates this stack's preempted TPU slice and stops its compute at the "
                "run's end; managed by trainstack."
                if recover
                else "Stops this stack's compute at the run's end; managed by trainstack."
            ),
            opts=child,
        )
        member = self.account.member
        condition = (
            pulumi.Output.from_input(args["resource_name"]).apply(
                lambda pool: projects.IAMMemberConditionArgs(**cluster_condition(pool))
            )
            if kind == "node_pool"
            else None
        )
        self.role, grant = role_and_grant(
            (f"{name}-role", f"{name}-tpu"),
            project,
            role_id(deployment),
            f"trainstack {what} supervisor ({deployment})",
            (
                "Get, delete and create one stack's TPU slice."
                if recover
                else "Get and stop one stack's compute."
            ),
            PERMISSIONS[kind] if recover or kind not in TPU_KINDS else STOP_ONLY_PERMISSIONS[kind],
            member,
            child,
            condition,
        )
        self.grants: list[pulumi.Resource] = [
            grant,
            storage.BucketIAMMember(
                f"{name}-state",
                bucket=args["checkpoint_bucket"],
                role="roles/storage.objectAdmin",
                member=member,
                opts=child,
            ),
        ]
        if kind in READ_PERMISSIONS:
            _, read = role_and_grant(
                (f"{name}-read-role", f"{name}-read"),
                project,
                role_id(deployment, "Read"),
                f"trainstack {what} supervisor reads ({deployment})",
                "Read the instance groups of one stack's GKE node pool.",
                READ_PERMISSIONS[kind],
                member,
                child,
            )
            self.grants.append(read)
        if recover:
            # To recreate the slice from its bundle's body, which runs as the training
            # account (see the module docstring on the default Compute Engine account).
            self.grants.append(
                serviceaccount.IAMMember(
                    f"{name}-act-as",
                    service_account_id=args["node_service_account"],
                    role="roles/iam.serviceAccountUser",
                    member=member,
                    opts=child,
                )
            )
        config = pulumi.Output.all(
            args["resource_name"],
            args.get("body", {}),
            args["checkpoint_bucket"],
            args.get("run", {}),
        ).apply(
            lambda v: supervisor_config(
                kind, v[0], v[1], v[2], deployment, recover=recover, run=v[3]
            )
        )
        # Chosen now: the cwd when the component is built is the program's project.
        build_dir = Path(args.get("build_dir") or current_build_dir()).resolve()
        bundle = config.apply(lambda c: build_source(c, build_dir))
        self.source = storage.BucketObject(
            f"{name}-source",
            bucket=args["staging_bucket"],
            name=bundle.apply(lambda b: b.object_name),
            source=bundle.apply(lambda b: pulumi.FileAsset(str(b.path))),
            content_type="application/zip",
            metadata=pulumi.Output.all(labels, bundle).apply(
                lambda v: {**v[0], "sha256": v[1].sha256}
            ),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        builder = build_account(name, project, deployment, args["staging_bucket"], child)
        physical = gcp_name(deployment, "supervisor")
        self.function = cloudfunctionsv2.Function(
            f"{name}-function",
            project=project,
            location=region,
            name=physical,
            description=f"trainstack {what} supervisor of {deployment}",
            labels=labels,
            build_config=cloudfunctionsv2.FunctionBuildConfigArgs(
                runtime=RUNTIME,
                entry_point=ENTRY_POINT,
                # `projects/P/serviceAccounts/EMAIL` (supervisor_iam.BUILD_SOURCE).
                service_account=builder.account.name,
                source=cloudfunctionsv2.FunctionBuildConfigSourceArgs(
                    storage_source=cloudfunctionsv2.FunctionBuildConfigSourceStorageSourceArgs(
                        bucket=self.source.bucket, object=self.source.name
                    )
                ),
            ),
            service_config=cloudfunctionsv2.FunctionServiceConfigArgs(
                service_account_email=self.account.email,
                # Mostly one check at a time; Google may briefly run more, so main.py's
                # writes carry generation preconditions (its `Store`).
                max_instance_count=1,
                max_instance_request_concurrency=1,
                available_memory="256M",
                timeout_seconds=120,
                all_traffic_on_latest_revision=True,
            ),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*self.grants, *builder.grants, *deps]
            ),
        )
        invoker = cloudrunv2.ServiceIamMember(
            f"{name}-invoker",
            project=project,
            location=region,
            name=self.function.name,
            role="roles/run.invoker",
            member=member,
            opts=child,
        )
        self.job = cloudscheduler.Job(
            f"{name}-schedule",
            project=project,
            region=region,
            name=physical,
            description=(
                f"checks {deployment}'s TPU slice and recreates it when preempted"
                if recover
                else f"checks {deployment}'s run and stops its compute at the end"
            ),
            schedule=schedule,
            time_zone="Etc/UTC",
            attempt_deadline="180s",
            # The function answers 200 whenever it ran; its own backoff paces retries.
            retry_config=cloudscheduler.JobRetryConfigArgs(retry_count=0),
            http_target=cloudscheduler.JobHttpTargetArgs(
                uri=self.function.url,
                http_method="POST",
                oidc_token=cloudscheduler.JobHttpTargetOidcTokenArgs(
                    service_account_email=self.account.email, audience=self.function.url
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[invoker, *deps]),
        )
        self.service_account_email = self.account.email
        self.function_name = self.function.name
        self.function_url = self.function.url
        self.source_object = self.source.name
        self.events_uri = pulumi.Output.from_input(args["checkpoint_bucket"]).apply(
            lambda bucket: f"gs://{bucket}/supervisor/{deployment}/events.jsonl"
        )
        self.register_outputs(
            {
                "service_account_email": self.service_account_email,
                "function_name": self.function_name,
                "function_url": self.function_url,
                "source_object": self.source_object,
                "events_uri": self.events_uri,
            }
        )

"""A per-stack serverless run supervisor: it recreates a preempted Spot or queued TPU slice
and stops a run's compute (TPU slice, GCE instance group, GKE GPU node pool) at the run's
end, when no node has reported for `NO_HEARTBEAT_S`, at `limits.max_run_hours` and at
`limits.max_total_usd` (`components/supervisor/main.py` says how; every `supervised` target
(`trainstack.infra.targets`: tpu, gke, gce) registers one through
`trainstack.infra.supervision`, before its compute).

    from trainstack.components.run_supervisor import RunSupervisor, slice_target, supervisor_run

    target = slice_target(slice_args)  # what TpuPodSlice(..., slice_args) will register
    supervisor = RunSupervisor(
        "exp-42-supervisor",
        {
            "project": "my-project",
            "region": "us-central1",  # supervisor_region(stack region), below
            "deployment_name": "exp-42",
            "kind": target.kind,  # "node": a Spot gcp.tpu.V2Vm; "queued": a queued resource
            "resource_name": target.resource_name,
            "body": target.body,
            # Its end record, heartbeats and limits: without them it cannot see the end.
            "run": supervisor_run(target.run_record, hosts, max_run_seconds=4 * 3600),
            "staging_bucket": buckets.staging_bucket,
            "checkpoint_bucket": buckets.checkpoint_bucket,
            "node_service_account": identity.service_account.name,
        },
    )
    tpu = TpuPodSlice("exp-42-tpu", slice_args, opts=pulumi.ResourceOptions(
        depends_on=supervisor.ready))  # the slice never runs unsupervised
    supervisor.arm([tpu.vm])  # recovery only while Pulumi holds the slice
    # supervisor.events_uri: gs://<its state bucket>/events.jsonl

What runs: `components/supervisor/main.py` (with `supervisor_store.py` and
`supervisor_targets.py`), an HTTP Cloud Functions (gen2, `python312`) function, shipped like
the trainer package: a reproducible zip
(`trainstack.components._supervisor_bundle`: the code, `requirements.txt`, `config.json`
with the slice's name and the exact REST body to recreate it with) named by its sha256 in
the staging bucket. Cloud Scheduler calls it every `schedule` (default every 2 minutes) with
an OIDC token of the supervisor's account; nothing bills while idle beyond the scheduler job
and the calls (`trainstack.infra.estimate`). The body rides in the source bundle, not a
bucket object, so nothing the training nodes can write changes what the supervisor creates;
a new body (new startup script) makes a new bundle and redeploys the function.

Its state (the run's clock, spend count and recovery flags, `state.json`, and `events.jsonl`)
is in a bucket of its own (`<project>-<deployment>-supervisor`: uniform access, public access
prevention, no soft delete, deleted with the supervisor: it holds no training data), which
only its account may write; the training account has no grant there. Of the run's records
beside the checkpoints it reads the end record and the heartbeats' times and writes the stop
request (`trainstack.trainers.common.run_records`). The marker `armed` in that bucket is
written by Pulumi after the compute (`arm`) and deleted before it on `pulumi destroy`: the
supervisor recovers only while it exists.

Permissions of its own account (`<deployment>-sup`):
- a custom project role holding only the calls it makes (`PERMISSIONS`, with sources in
  `catalog.supervisor_iam`: the TPU node or queued resource through `tpu.nodes.*`; the
  group's get, the list of its VMs and their deletion; the pool's get and setSize). Only the
  GKE grant is held to the one resource (`cluster_condition`; the pool's groups are read,
  and a flex-start pool's VMs deleted (`autoscaled`), through a second role,
  `read_permissions`), and that GKE evaluates it for
  node-pool calls is unverified (if not, the grant never applies). Cloud TPU does not recognise resource
  names in conditions; whether instance group managers do is unverified
  (`catalog.supervisor_iam.CONDITIONS_SOURCE`). So those grants are project-wide, held by
  the policy pack. Role ids carry the account's `unique_id` (`role_id`): Google keeps a deleted
  role's id for up to 37 days, and a re-created account gets a new unique id, so a destroyed
  stack deploys again.
- `roles/iam.serviceAccountUser` on the training account only, where it recreates a slice
  (it only creates the body in its bundle, which names the training account; a Node without
  `serviceAccount.email` runs as the default Compute Engine account, tpu.v2 discovery: "If
  empty, default Compute service account will be used", and whether creating one needs
  actAs on that account is unverified); `roles/storage.objectAdmin` on its state bucket and,
  held by an IAM condition to the run records (`records_condition`: `trainstack-run-*`
  object names; it lists nothing there), on the checkpoint bucket; and `roles/run.invoker` on its
  own function's Cloud Run service only (the scheduler's calls).
Its own Cloud Build account builds the function (`_supervisor_iam`; a new project's default
one may lack the permissions, `supervisor_iam.BUILD_SOURCE`). Function and job run in
`catalog.supervisor_region.supervisor_region(<stack region>)` (else us-central1).

Stopping the compute (the slice deleted, the group's VMs deleted by name (`instances`), the
GKE GPU pool at 0) ends its accelerator billing: `trainstack.components.catalog.billing`
holds those facts with their sources. The permissions of the `mig` and `node_pool` kinds are not verified on a live
project (`billing.SUPERVISOR_PERMISSIONS_SOURCE`).

Naming: the function and the scheduler job are `<deployment>-supervisor`, the roles
`trainstackSupervisor_<deployment>_<unique id>` (the read-only one
`trainstackSupervisorRead_...`). It was `TpuSupervisor` (`trainstack:tpu:TpuSupervisor`); an
alias keeps stacks deployed under that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi
from pulumi_gcp import (
    cloudfunctionsv2,
    cloudrunv2,
    cloudscheduler,
    serviceaccount,
    storage,
)

from trainstack.components._args import ArgsError, check_args, component_check
from trainstack.components._options import inherited_depends_on
from trainstack.components._project import current_build_dir
from trainstack.components._supervisor_bundle import (
    MAX_TOTAL_USD_ABOVE,
    OBJECT_PREFIX,
    REQUIREMENTS,
    RUN_KEYS,
    SOURCE_DIR,
    SOURCE_FILES,
    TPU_KINDS,
    SourceBundle,
    build_source,
    instances_problem,
    max_total_usd_problem,
    pools_problem,
    source_zip,
    supervisor_config,
    supervisor_run,
)
from trainstack.components._supervisor_grants import compute_grants
from trainstack.components._supervisor_iam import (
    build_account,
    records_condition,
    records_folder,
    records_problem,
    run_end_uri,
)
from trainstack.components._tpu_launch import SupervisedSlice, slice_target, spot_node_body
from trainstack.components.catalog.supervisor_iam import (
    PERMISSIONS,
    RESOURCE_NAMES,
    autoscaled_problem,
    role_id,
)
from trainstack.components.catalog.supervisor_region import region_problem
from trainstack.components.facts import (
    CHECK_INTERVAL_S,
    STOP_GRACE_S,
    spend_cap_text,
    supervisor_facts,
    supervisor_stops_on,
)
from trainstack.components.naming import account_id, bucket_name, gcp_name, labels_input

__all__ = [
    "CHECK_INTERVAL_S",
    "COMPONENT_LABEL",
    "DEFAULT_SCHEDULE",
    "ENTRY_POINT",
    "MARKER",
    "MAX_TOTAL_USD_ABOVE",
    "OBJECT_PREFIX",
    "PERMISSIONS",
    "REQUIREMENTS",
    "RUNTIME",
    "RUN_KEYS",
    "SERVICES",
    "SOURCE_DIR",
    "SOURCE_FILES",
    "STOP_GRACE_S",
    "TOKEN",
    "RunSupervisor",
    "RunSupervisorArgs",
    "SourceBundle",
    "SupervisedSlice",
    "build_source",
    "max_total_usd_problem",
    "role_id",
    "slice_target",
    "source_zip",
    "spend_cap_text",
    "spot_node_body",
    "supervised",
    "supervisor_config",
    "supervisor_run",
]

TOKEN: Final = "trainstack:supervision:RunSupervisor"
OLD_TOKENS: Final = ("trainstack:tpu:TpuSupervisor",)
"""Its earlier type tokens: aliases, so a stack deployed before the rename keeps it."""
COMPONENT_LABEL: Final = "run-supervisor"
RUNTIME: Final = "python312"
"""Cloud Run functions Python runtime ids (https://cloud.google.com/run/docs/runtimes/python):
python312 is supported, deprecated 2028-10-02."""
ENTRY_POINT: Final = "supervise"
DEFAULT_SCHEDULE: Final = f"*/{CHECK_INTERVAL_S // 60} * * * *"
MARKER: Final = "armed"
"""The state bucket's object Pulumi writes after the compute (`RunSupervisor.arm`)."""
SUPERVISED_PROVISIONING: Final = frozenset({"spot", "queued"})


def supervised(provisioning: str | None) -> bool:
    """Whether the supervisor recreates a slice of this `tpu.provisioning` (Google may
    preempt it)."""
    return provisioning in SUPERVISED_PROVISIONING


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


class RunSupervisorArgs(TypedDict):
    """Arguments for `RunSupervisor`."""

    project: str
    """Project of the slice, the function, the scheduler job and the state bucket."""
    region: str
    """Region of the function, the scheduler job and the state bucket: one listed for both
    services (`trainstack.components.catalog.supervisor_region.supervisor_region`)."""
    deployment_name: str
    """Names the account, roles, function, job and state bucket."""
    kind: Literal["node", "queued", "mig", "node_pool", "node_pools"]
    """`node`: a `gcp.tpu.V2Vm`; `queued`: a queued resource; `mig`: a Compute Engine managed
    instance group; `node_pool`: a GKE node pool; `node_pools`: a GKE cluster's TPU slice
    pools (`node_pools`)."""
    resource_name: pulumi.Input[str]
    """The compute's full name (`NAME_FORMS`)."""
    body: NotRequired[pulumi.Input[dict[str, Any]]]
    """TPU kinds with `recover`: the REST body it is created again with (Node, or
    QueuedResource), exactly as created (`slice_target`)."""
    instances: NotRequired[list[str]]
    """`mig` (required): the group's VMs by name (`A100Cluster`'s `instance_names`), which it
    deletes at the run's end, their per-instance configs with them, and any other VM the
    group lists; [] for a flex-start group, whose resize request names its VMs (the ones the
    group lists are deleted); no other kind has any."""
    node_pools: NotRequired[list[str]]
    """`node_pools` (required): the pools' ids in the cluster `resource_name` names
    (`TpuGkeSlices`' `tpu-<i>`), each set to 0 nodes at the run's end; no other kind has any."""
    recover: NotRequired[bool]
    """Recreate a preempted slice (TPU kinds; default True for them, False otherwise)."""
    autoscaled: NotRequired[bool]
    """`node_pool`, `node_pools`: whether a pool it stops is autoscaled (flex-start), whose
    VMs it then deletes through the pool's instance groups, which takes
    compute.instanceGroupManagers.update on every group of the project (default False: it
    only reads them, `catalog.supervisor_iam.read_permissions`); no other kind has it."""
    run: NotRequired[pulumi.Input[dict[str, Any]]]
    """When the run ends (`RUN_KEYS`, see `supervisor/main.py`): the end record, heartbeat
    prefix and stop request objects, `node_count` (one heartbeat per node; required with the
    prefix), `max_run_seconds`, the compute's `hourly_usd` at list price and `max_total_usd`;
    `supervisor_run` builds it. Without its end record (`end_uri`) the supervisor cannot see
    the run's end and stops the compute only on what `run` sets (its plan note says which)."""
    staging_bucket: pulumi.Input[str]
    """Bucket the function's source zip is uploaded to."""
    checkpoint_bucket: pulumi.Input[str]
    """Bucket of the run's records (`run`): the supervisor's grant there holds for
    `trainstack-run-*` objects only (`records_condition`)."""
    node_service_account: NotRequired[pulumi.Input[str]]
    """The slice's service account, `projects/P/serviceAccounts/EMAIL`: the supervisor may
    act as it, to create the node of its bundle's body, which runs as it."""
    schedule: NotRequired[str]
    """Cron schedule of the checks (UTC). Default every 2 minutes."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Extra labels for the function, the state bucket (and the source object's metadata)."""
    build_dir: NotRequired[str]
    """Folder the source zip is written to. Default: `.trainstack/build/` of the current
    project (`trainstack.components._project.current_build_dir`), never the install."""


def _problems(args: RunSupervisorArgs) -> list[str]:
    kind, problems = args["kind"], []
    records_error = records_problem(args["checkpoint_bucket"], run_end_uri(args.get("run")))
    if records_error:
        problems.append(f"RunSupervisor.{records_error}")
    if kind not in PERMISSIONS:
        problems.append(
            f"RunSupervisor.kind: {kind!r} is not allowed; valid: {', '.join(RESOURCE_NAMES)}"
        )
    if args.get("recover", kind in TPU_KINDS) and "node_service_account" not in args:
        problems.append(
            "RunSupervisor.node_service_account: missing; a supervisor that recreates a "
            "TPU slice needs the slice's service account; valid: the slice's service "
            "account email"
        )
    instances_error = instances_problem(kind, args.get("instances"), "RunSupervisor.instances")
    if instances_error:
        problems.append(instances_error)
    pools_error = pools_problem(kind, args.get("node_pools"), "RunSupervisor.node_pools")
    if pools_error:
        problems.append(pools_error)
    autoscaled_error = autoscaled_problem(kind, args.get("autoscaled"))
    if autoscaled_error:
        problems.append(f"RunSupervisor.{autoscaled_error}")
    region_error = region_problem(args["region"], "RunSupervisor.region")
    if region_error:
        problems.append(region_error)
    schedule = args.get("schedule", DEFAULT_SCHEDULE)
    if len(schedule.split()) != 5:
        problems.append(
            f"RunSupervisor.schedule: {schedule!r} is not a cron schedule; valid: five "
            f"fields, e.g. {DEFAULT_SCHEDULE!r}"
        )
    return problems


class RunSupervisor(pulumi.ComponentResource):
    """Recreates this stack's preempted TPU slice and stops its compute at the run's end;
    see the module docstring."""

    service_account_email: pulumi.Output[str]
    """The supervisor's own account."""
    function_name: pulumi.Output[str]
    """The Cloud Functions function (and its Cloud Run service)."""
    function_url: pulumi.Output[str]
    """Where the scheduler calls it."""
    source_object: pulumi.Output[str]
    """The source zip's object name in the staging bucket."""
    state_bucket_name: pulumi.Output[str]
    """Its own bucket: `state.json`, `events.jsonl` and the marker."""
    events_uri: pulumi.Output[str]
    """`gs://<state bucket>/events.jsonl`: one JSON line per action (time, resource, seen,
    action, result, attempt, next_allowed)."""
    roles: pulumi.Output[list[str]]
    """Its custom roles, `projects/P/roles/ID` (the one granted on the compute first)."""
    ready: list[pulumi.Resource]
    """What the compute depends on: the function and its schedule."""

    def __init__(
        self, name: str, args: RunSupervisorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("RunSupervisor", RunSupervisorArgs, args)
        problems = _problems(args)
        if problems:
            raise ArgsError(problems)
        kind, deployment = args["kind"], args["deployment_name"]
        recover = args.get("recover", kind in TPU_KINDS)
        what = "TPU" if kind in TPU_KINDS else "run"
        labels = component_check("RunSupervisor", labels_input, args.get("labels"), COMPONENT_LABEL)
        project, region = args["project"], args["region"]
        renamed = pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=t) for t in OLD_TOKENS])
        super().__init__(TOKEN, name, None, pulumi.ResourceOptions.merge(opts, renamed))
        self._name = name
        child = pulumi.ResourceOptions(parent=self)
        # What the stack's compute waits for too (its APIs and grants); the compute then
        # waits for `ready`, and on `pulumi destroy` goes before the function and schedule.
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
        self.role, self.roles, self.grants = compute_grants(
            name, args, recover, what, member, self.account.unique_id, child
        )
        self.state_bucket = storage.Bucket(
            f"{name}-state",
            project=project,
            name=bucket_name(project, deployment, "supervisor"),
            location=region.upper(),
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": False},
            # Rewritten every check: soft delete would keep every old copy for a week.
            soft_delete_policy={"retention_duration_seconds": 0},
            # Its state and events end with the supervisor; no training data is here.
            force_destroy=True,
            labels=labels,
            opts=child,
        )
        self.grants += [
            storage.BucketIAMMember(
                f"{name}-state-admin",
                bucket=self.state_bucket.name,
                role="roles/storage.objectAdmin",
                member=member,
                opts=child,
            ),
            storage.BucketIAMMember(
                f"{name}-records",
                bucket=args["checkpoint_bucket"],
                role="roles/storage.objectAdmin",
                member=member,
                condition=pulumi.Output.all(
                    args["checkpoint_bucket"], run_end_uri(args.get("run"))
                ).apply(
                    lambda v: storage.BucketIAMMemberConditionArgs(
                        **records_condition(v[0], records_folder(v[0], v[1]))
                    )
                ),
                opts=child,
            ),
        ]
        config = pulumi.Output.all(
            args["resource_name"], args.get("body", {}), self.state_bucket.name, args.get("run", {})
        ).apply(
            lambda v: supervisor_config(
                kind,
                v[0],
                v[1],
                v[2],
                recover=recover,
                run=v[3],
                instances=args.get("instances"),
                pools=args.get("node_pools"),
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
            schedule=args.get("schedule", DEFAULT_SCHEDULE),
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
        self.ready = [self.function, self.job]
        self.marker: storage.BucketObject | None = None
        self.service_account_email = self.account.email
        self.function_name = self.function.name
        self.function_url = self.function.url
        self.source_object = self.source.name
        self.state_bucket_name = self.state_bucket.name
        self.events_uri = pulumi.Output.concat("gs://", self.state_bucket.name, "/events.jsonl")
        # What it stops on is in `run`'s keys: known in a preview where its record URIs are
        # not (a bucket named at deploy); the facts take `run`'s known values only.
        run: Any = args.get("run", {})
        stops_on: list[str] | None = None
        known = run
        if isinstance(run, Mapping):
            stops_on = supervisor_stops_on({k: k for k in run})
            known = {k: v for k, v in run.items() if not isinstance(v, pulumi.Output)}
        self.facts = pulumi.Output.all(
            project, region, args["resource_name"], known, self.function_name, self.events_uri
        ).apply(
            lambda v: supervisor_facts(
                kind, recover, args.get("instances"), v, stops_on, bool(args.get("autoscaled"))
            )
        )
        self.register_outputs(
            {
                "facts": self.facts,
                "service_account_email": self.service_account_email,
                "function_name": self.function_name,
                "function_url": self.function_url,
                "source_object": self.source_object,
                "state_bucket_name": self.state_bucket_name,
                "events_uri": self.events_uri,
                "roles": self.roles,
            }
        )

    facts: pulumi.Output[dict[str, Any]]
    """What `trainstack plan|status|logs --program` read (`trainstack.components.facts`): its
    $/hour (Cloud Scheduler and Cloud Run at list price), its notes (what its account can
    reach, where it runs), and, as `status.events_uri`, the recoveries it records."""

    def arm(self, compute: Sequence[pulumi.Resource]) -> storage.BucketObject:
        """Register the marker the supervisor recovers under (`MARKER`), after `compute`:
        created once the compute exists, deleted before it on `pulumi destroy`, so a check
        never recreates what Pulumi is creating or destroying."""
        self.marker = storage.BucketObject(
            f"{self._name}-armed",
            bucket=self.state_bucket.name,
            name=MARKER,
            source=pulumi.StringAsset("Pulumi holds the stack's compute: it may be recovered.\n"),
            content_type="text/plain",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(compute)),
        )
        return self.marker

"""The three GCS buckets of a training deployment: data, checkpoints and staging.

    from trainstack.components.training_buckets import TrainingBuckets

    buckets = TrainingBuckets(
        "exp-42-buckets",
        {
            "project": "my-project",
            "location": "US-CENTRAL1",
            "deployment_name": "exp-42",
            "environment": "dev",
            "checkpoint_retention_days": 30,
        },
    )
    pulumi.export("checkpoint_url", buckets.checkpoint_url)

Each bucket is tuned for what it holds:

| bucket      | versioning | soft delete | lifecycle                      | on destroy            |
|-------------|------------|-------------|--------------------------------|-----------------------|
| data        | on         | 7 days      | old versions deleted at 30 d   | kept (retain/protect) |
| checkpoints | off        | off         | `checkpoints/` at retention d  | kept (retain/protect) |
| staging     | off        | off         | deleted at 365 days            | deleted with content  |

The checkpoint bucket's age rule deletes only objects under `CHECKPOINT_PREFIX`
(`checkpoints/<run_name>/step-N/...`, where every target's runs keep their step folders).
The rest of that bucket is kept: Vertex's `AIP_MODEL_DIR` (`model/`) and TensorBoard logs
(`logs/`), an HP-tuning trial's folders (`<trial id>/...`, its checkpoints included), your
code's `TRAINSTACK_OUTPUT_DIR` (`outputs/<run_name>/`) and the run-limit clocks
(`trainstack-run-<key>.started`); with soft delete off and versioning off, a deleted object
is gone for good.

All three enforce uniform bucket-level access and public access prevention. Data and
checkpoints are never force-destroyed: unless `delete_data_on_destroy` is set, `pulumi
destroy` leaves them in place (retain_on_delete), and in prod they are also protected.

Naming: `<project>-<deployment_name>-<role>[-<name_suffix>]` (see `trainstack.components.naming`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pulumi
from pulumi_gcp import storage

from trainstack.components._args import ArgsError, Bounds, check_args, component_check
from trainstack.components.catalog.names import label_problems
from trainstack.components.catalog.problems import int_problems, not_allowed, quote
from trainstack.components.naming import (
    bucket_name,
    environment_labels,
    labels_input,
    name_input,
)

TOKEN = "trainstack:storage:TrainingBuckets"
COMPONENT_LABEL = "training-buckets"

ENVIRONMENTS: tuple[str, ...] = ("dev", "staging", "prod")
DEFAULT_CHECKPOINT_RETENTION_DAYS = 30
CHECKPOINT_PREFIX = "checkpoints/"
"""The object-name prefix the checkpoint bucket's age rule is limited to: the lifecycle
condition `matchesPrefix` holds when one of its prefixes "exactly matches the beginning of
the object name", and a rule acts only when all its conditions hold
(https://cloud.google.com/storage/docs/lifecycle, "Lifecycle conditions";
https://cloud.google.com/java/docs/reference/google-cloud-storage/latest/com.google.storage.v2.Bucket.Lifecycle.Rule.Condition.Builder
`addAllMatchesPrefix`). Vertex's `AIP_CHECKPOINT_DIR` is `<baseOutputDirectory>/checkpoints/`
(gcp-facts section on baseOutputDirectory, from Vertex's CustomJobSpec discovery text)."""
MAX_CHECKPOINT_RETENTION_DAYS = 3650

# Google's default, set explicitly so the plan shows it and drift back to it is visible.
DATA_SOFT_DELETE_SECONDS = 7 * 24 * 3600
# Overwritten data objects stay restorable this long as noncurrent versions.
DATA_NONCURRENT_DAYS = 30
# Staging holds content-hashed trainer packages that running and resumed jobs reinstall from
# their URI; a preempted job may resume weeks later, and the packages are kilobytes, so a year
# costs nothing and never pulls a package from under a live job.
STAGING_RETENTION_DAYS = 365
NAME_SUFFIX = re.compile(r"[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?")
"""An opt-in bucket name suffix: 1-16 of a-z, 0-9 and '-', not starting or ending with '-'."""


class TrainingBucketsArgs(TypedDict):
    """Arguments for `TrainingBuckets`."""

    project: pulumi.Input[str]
    """Project id that owns the buckets (also part of their globally unique names)."""
    location: pulumi.Input[str]
    """Bucket location; use the compute region (e.g. `US-CENTRAL1`) to avoid egress."""
    deployment_name: pulumi.Input[str]
    """Deployment prefix of every bucket name."""
    environment: Literal["dev", "staging", "prod"]
    """dev | staging | prod. Plain value: it selects resource options (prod protects data),
    and sets the buckets' `environment` label (a different one in `labels` is refused)."""
    checkpoint_retention_days: NotRequired[
        pulumi.Input[Annotated[int, Bounds(ge=1, le=MAX_CHECKPOINT_RETENTION_DAYS)]]
    ]
    """Days after which a checkpoint object is deleted (default 30, at most 3650)."""
    delete_data_on_destroy: NotRequired[bool]
    """Let `pulumi destroy` delete the data and checkpoint buckets (default False: they are
    kept). They are still never force-destroyed, so only empty buckets go. Not allowed in
    prod. Plain value: it selects resource options."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Extra labels for every bucket."""
    name_suffix: NotRequired[pulumi.Input[str]]
    """Appended to every bucket name, to disambiguate in the global bucket namespace."""


def training_buckets_problems(args: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every problem with the plain values of `args`, keys prefixed with `prefix`.

    Outputs are checked by the resources they reach. The stack config runs this on
    `trainstack:buckets` with prefix `buckets.` (and the stack's environment).
    """
    p = prefix
    problems: list[str] = []
    environment = args.get("environment")
    if environment not in ENVIRONMENTS:
        problems.append(not_allowed(f"{p}environment", environment, ENVIRONMENTS))
    delete_data = args.get("delete_data_on_destroy", False)
    if delete_data is not True and delete_data is not False:
        problems.append(
            f"{p}delete_data_on_destroy: {quote(delete_data)} is not a boolean; valid: true, false"
        )
    elif delete_data and environment == "prod":
        # Prod data and checkpoints are protected on destroy.
        problems.append(f"{p}delete_data_on_destroy: true is not allowed in prod; valid: false")
    days = args.get("checkpoint_retention_days", DEFAULT_CHECKPOINT_RETENTION_DAYS)
    if not isinstance(days, pulumi.Output):
        problems += int_problems(
            f"{p}checkpoint_retention_days", days, 1, MAX_CHECKPOINT_RETENTION_DAYS
        )
    suffix = args.get("name_suffix")
    if isinstance(suffix, str) and not NAME_SUFFIX.fullmatch(suffix):
        problems.append(
            f"{p}name_suffix: {quote(suffix)} is not a valid bucket name suffix; valid: 1-16 "
            "of a-z, 0-9 and '-', not starting or ending with '-'"
        )
    labels = args.get("labels")
    if isinstance(labels, Mapping):
        problems += label_problems(labels, f"{p}labels")
    return problems


class TrainingBuckets(pulumi.ComponentResource):
    """Data, checkpoint and staging buckets with per-purpose retention and teardown rules."""

    data_bucket: pulumi.Output[str]
    """Name of the data bucket."""
    checkpoint_bucket: pulumi.Output[str]
    """Name of the checkpoint bucket."""
    staging_bucket: pulumi.Output[str]
    """Name of the staging bucket (trainer packages and other build artifacts)."""
    data_url: pulumi.Output[str]
    """`gs://` URL of the data bucket."""
    checkpoint_url: pulumi.Output[str]
    """`gs://` URL of the checkpoint bucket."""
    staging_url: pulumi.Output[str]
    """`gs://` URL of the staging bucket."""
    data: storage.Bucket
    """The data bucket resource."""
    checkpoints: storage.Bucket
    """The checkpoint bucket resource."""
    staging: storage.Bucket
    """The staging bucket resource."""

    def __init__(
        self, name: str, args: TrainingBucketsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("TrainingBuckets", TrainingBucketsArgs, args)
        problems = training_buckets_problems(args, "TrainingBuckets.")
        if problems:
            raise ArgsError(problems)
        environment = args["environment"]
        delete_data = args.get("delete_data_on_destroy", False)
        retention_days = args.get("checkpoint_retention_days", DEFAULT_CHECKPOINT_RETENTION_DAYS)
        user_labels = component_check(
            "TrainingBuckets", environment_labels, args.get("labels"), environment
        )
        labels = component_check("TrainingBuckets", labels_input, user_labels, COMPONENT_LABEL)
        suffix = args.get("name_suffix")
        names = {
            role: name_input(bucket_name, args["project"], args["deployment_name"], role, suffix)
            for role in ("data", "checkpoints", "staging")
        }
        super().__init__(TOKEN, name, None, opts)

        common: dict[str, Any] = {
            "project": args["project"],
            "location": args["location"],
            "storage_class": "STANDARD",
            "uniform_bucket_level_access": True,
            "public_access_prevention": "enforced",
            "labels": labels,
        }
        # Irreplaceable buckets outlive the stack unless the user opts in; prod also refuses
        # to plan their deletion at all.
        keep = pulumi.ResourceOptions(
            parent=self, retain_on_delete=not delete_data, protect=environment == "prod"
        )

        self.data = storage.Bucket(
            f"{name}-data",
            name=names["data"],
            versioning={"enabled": True},
            soft_delete_policy={"retention_duration_seconds": DATA_SOFT_DELETE_SECONDS},
            lifecycle_rules=[
                {
                    "action": {"type": "Delete"},
                    # ARCHIVED limits the rule to noncurrent versions; the live copy of a
                    # dataset is never touched by it.
                    "condition": {
                        "days_since_noncurrent_time": DATA_NONCURRENT_DAYS,
                        "with_state": "ARCHIVED",
                        "send_age_if_zero": False,
                    },
                }
            ],
            force_destroy=False,
            opts=keep,
            **common,
        )
        self.checkpoints = storage.Bucket(
            f"{name}-checkpoints",
            name=names["checkpoints"],
            versioning={"enabled": False},
            # Checkpoints are rewritten every few minutes; soft delete would bill every
            # replaced checkpoint for another week (gcp-facts 7), so it is off.
            soft_delete_policy={"retention_duration_seconds": 0},
            # Only the step folders expire: final models, logs, outputs and run clocks share
            # this bucket and must outlive the retention (nothing can restore them).
            lifecycle_rules=[
                {
                    "action": {"type": "Delete"},
                    "condition": {
                        "age": retention_days,
                        "matches_prefixes": [CHECKPOINT_PREFIX],
                        "send_age_if_zero": False,
                    },
                }
            ],
            force_destroy=False,
            opts=keep,
            **common,
        )
        self.staging = storage.Bucket(
            f"{name}-staging",
            name=names["staging"],
            versioning={"enabled": False},
            soft_delete_policy={"retention_duration_seconds": 0},
            lifecycle_rules=[
                {
                    "action": {"type": "Delete"},
                    "condition": {"age": STAGING_RETENTION_DAYS, "send_age_if_zero": False},
                }
            ],
            # Only rebuildable artifacts live here, so destroy may empty it.
            force_destroy=True,
            opts=pulumi.ResourceOptions(parent=self),
            **common,
        )

        self.data_bucket = self.data.name
        self.checkpoint_bucket = self.checkpoints.name
        self.staging_bucket = self.staging.name
        self.data_url = self.data.url
        self.checkpoint_url = self.checkpoints.url
        self.staging_url = self.staging.url
        self.register_outputs(
            {
                "data_bucket": self.data_bucket,
                "checkpoint_bucket": self.checkpoint_bucket,
                "staging_bucket": self.staging_bucket,
                "data_url": self.data_url,
                "checkpoint_url": self.checkpoint_url,
                "staging_url": self.staging_url,
            }
        )

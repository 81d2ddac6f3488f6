"""TpuPodSlice's arguments (`TpuPodSliceArgs`, exported by `trainstack.components.tpu_pod_slice`)
and their checks: pure, and the stack config's too.

`tpu_pod_slice_problems` returns every problem with a `TpuPodSlice` argument mapping as
`<prefix><key>: <problem>; valid: <values>`: the component raises on them (no prefix) and
the stack config reports them for `trainstack:tpu` (prefix `tpu.`). The TPU facts and the
rules over them come from `trainstack.components.catalog`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, TypedDict

import pulumi

from trainstack.components._node_args import secret_env_names_problems
from trainstack.components._tpu_queued_provider import DEFAULT_WAIT_TIMEOUT_S
from trainstack.components.catalog.batch import tpu_world_size, trainer_args_batch_problem
from trainstack.components.catalog.problems import quote
from trainstack.components.catalog.tpu import (
    DISK_MODES,
    SECURE_BOOT_GENERATIONS,
    TPU_GENERATIONS,
    QueuedTier,
    TpuGeneration,
    TpuProvisioning,
    TpuSlice,
)
from trainstack.components.catalog.tpu_rules import (
    tensorflow_runtime_problems,
    tpu_capacity_problems,
    tpu_slice_problems,
)
from trainstack.components.code_frameworks import tpu_framework_problems
from trainstack.components.startup.tpu_worker import validate_trainer_launch
from trainstack.components.training_network import subnet_zone_problems
from trainstack.components.user_code import (
    CodeRules,
    UserCode,
    args_with_code,
    code_base_dir,
)
from trainstack.trainers.common.contract import TF_MODULE


class DataDiskArgs(TypedDict):
    """A persistent disk attached to every worker of the slice."""

    source_disk: pulumi.Input[str]
    """`projects/{p}/zones/{zone}/disks/{name}` of an existing disk in the slice's zone."""
    mode: NotRequired[Literal["READ_WRITE", "READ_ONLY"]]
    """Default READ_ONLY on a multi-host slice (the only mode there: every worker attaches
    the disk), READ_WRITE on a single host."""


class QueuedArgs(TypedDict):
    """Settings of a queued resource (provisioning `queued`)."""

    tier: NotRequired[QueuedTier]
    """Capacity tier (default on-demand; the API's `spot` / `guaranteed`)."""
    min_duration_s: NotRequired[int]
    """guaranteed only: provision only if the capacity is guaranteed for this long."""
    valid_until_s: NotRequired[int]
    """Give up queueing this many seconds after the request (`validUntilDuration`)."""
    wait_timeout_s: NotRequired[int]
    """How long `pulumi up` waits for ACTIVE before deleting the request (default 3600)."""


class TpuPodSliceArgs(TypedDict):
    """Arguments for `TpuPodSlice`."""

    project: pulumi.Input[str]
    """Project of the TPU node."""
    zone: str
    """Zone offering the generation, e.g. `us-central2-b` for v4."""
    deployment_name: pulumi.Input[str]
    """Prefix of the node and queued-resource names."""
    accelerator_type: NotRequired[str]
    """Slice type, e.g. `v4-32`, `v5litepod-16`, `v5p-8`, `v6e-4` (or generation+topology)."""
    generation: NotRequired[str]
    """`v4`, `v5e`, `v5p` or `v6e`, with `topology` instead of `accelerator_type`."""
    topology: NotRequired[str]
    """Chip topology with `generation`, e.g. `2x2x4`."""
    runtime_version: str
    """TPU software version, e.g. `tpu-vm-tf-2.16.0-pod-pjrt` (required: versions drift)."""
    provisioning: NotRequired[TpuProvisioning]
    """How capacity is obtained (default on-demand)."""
    reservation: NotRequired[str]
    """queued only: reservation name, `projects/P/locations/ZONE/reservations/R`, or `-`
    for any reservation of the project in the zone (gcloud's `--reserved`)."""
    queued: NotRequired[QueuedArgs]
    """queued only: tier, deadline and wait timeout."""
    network_self_link: pulumi.Input[str]
    """VPC network (self link or `projects/P/global/networks/N`)."""
    subnetwork_self_link: pulumi.Input[str]
    """Subnet with Private Google Access and Cloud NAT: the workers get no external IPs."""
    network_tags: NotRequired[Sequence[pulumi.Input[str]]]
    """Network tags on every worker (the network's `node_tag`, so its firewall applies)."""
    service_account_email: pulumi.Input[str]
    """Service account the workers run as (never the default compute account)."""
    package_uri: pulumi.Input[str]
    """gs:// URI of the trainer sdist (`TrainerPackage.uri`); a new URI replaces the slice.
    With `code`, give the package itself too (`package`)."""
    checkpoint_dir: NotRequired[pulumi.Input[str]]
    """gs:// URL given to the trainer as `--checkpoint_dir` (unless `trainer_args` has one);
    required but with `code`, where it defaults to `<checkpoint_url>/checkpoints`."""
    trainer_args: NotRequired[Sequence[str]]
    """The trainer's `--key=value` flags (`trainstack.infra.run_args.trainer_args`)."""
    trainer_module: NotRequired[str]
    """Module worker 0 runs (default `trainstack.trainers.tf_multiworker`)."""
    node_args: NotRequired[pulumi.Input[Sequence[str]]]
    """Your own code instead of the trainer: `python -m trainstack.trainers.node` arguments
    (a stack's `trainstack.infra.compose.user_code_node_args`;
    a program gives `code` instead), run on every worker; excludes trainer_module and
    trainer_args, and allows any runtime_version."""
    secret_env_names: NotRequired[Sequence[str]]
    """The `--env=NAME=VALUE` names of `node_args` whose values are secrets (a stack's
    `secure:` trainer.env values): they reach the workers but no hash that names objects or
    labels others can list (the run's key, the queued resource's spec label), which see the
    name only, so a rotated secret keeps the run
    (`trainstack.components._node_args.keyed_node_args`)."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`), run on every worker with the node
    launcher (launcher node only), in place of trainer_module / trainer_args / node_args;
    checked here as `trainstack:trainer` is, and against the runtime: code importing a
    framework the runtime does not ship and its requirements do not name is refused.
    Give its `TrainerPackage` as `package` (its `uri` as `package_uri`): the slice checks
    the package was built from this `code`, which a bare `package_uri` cannot show."""
    package: NotRequired[Any]
    """With `code`: the `TrainerPackage` built with the same `code` (`package_uri` its
    `uri`), checked to hold that code and its requirements
    (`trainstack.components.user_code.package_code_problem`), as `A100Cluster`'s
    `training.package` is."""
    checkpoint_url: NotRequired[pulumi.Input[str]]
    """With `code`: the checkpoint bucket's URL (`TrainingBuckets.checkpoint_url`), where
    the run contract's checkpoint and output folders go
    (`trainstack.components.user_code.run_contract`)."""
    data_url: NotRequired[pulumi.Input[str]]
    """With `code`: the data bucket's URL (`TrainingBuckets.data_url`), TRAINSTACK_DATA_DIR."""
    run_name: NotRequired[str]
    """With `code`: the run's name (its checkpoint folder, TRAINSTACK_RUN_NAME); default
    `deployment_name`."""
    data_disks: NotRequired[Sequence[DataDiskArgs]]
    """Persistent disks attached to every worker."""
    secure_boot: NotRequired[bool]
    """Shielded VM Secure Boot (default True on every supported generation)."""
    max_run_seconds: NotRequired[int]
    """Run limit (the stack's `limits.max_run_hours`), enforced by the startup script: the
    trainer gets SIGTERM this long after the run's first start, recorded once in the
    checkpoint bucket, and is not relaunched (the Cloud TPU API has no run limit)."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]
    """User labels, merged with trainstack's, on the node."""
    api_endpoint: NotRequired[str]
    """queued only: override the TPU API endpoint (tests point it at a local server)."""


DEFAULT_TRAINER_MODULE: Final = TF_MODULE
TPU_FRAMEWORK: Final = "tensorflow"
"""The one bundled trainer framework a slice runs: the tensorflow trainer with TPUStrategy.
Your own code (`node_args`) brings its own framework (JAX, PyTorch/XLA) and any runtime."""
TPU_STRATEGY: Final = "tpu"


@dataclass(frozen=True)
class SlicePlan:
    """What validated arguments resolve to."""

    slice: TpuSlice
    generation: TpuGeneration
    runtime_version: str
    provisioning: str
    secure_boot: bool
    trainer_module: str
    trainer_args: tuple[str, ...]
    user_code: bool
    """`node_args` given: your own code runs on every worker, on any runtime."""
    disk_modes: tuple[str, ...]
    """Mode of each entry of `data_disks`, defaults resolved."""
    queued_tier: str
    wait_timeout_s: int
    max_run_seconds: int | None = None
    """The run limit the startup script enforces (`limits.max_run_hours`), if any."""


def _disk_modes(disks: Any, found: TpuSlice | None, p: str) -> tuple[tuple[str, ...], list[str]]:
    if disks is None:
        return (), []
    if isinstance(disks, str | Mapping) or not isinstance(disks, Sequence):
        return (), [f"{p}data_disks: got {disks!r}; valid: a list of {{source_disk, mode}}"]
    multi = found is not None and found.multi_host
    modes: list[str] = []
    problems: list[str] = []
    for i, disk in enumerate(disks):
        at = f"{p}data_disks[{i}]"
        if not isinstance(disk, Mapping) or disk.get("source_disk") is None:
            problems.append(
                f"{at}.source_disk: required; valid: a disk, projects/P/zones/Z/disks/NAME"
            )
            continue
        mode = disk.get("mode", "READ_ONLY" if multi else "READ_WRITE")
        if mode not in DISK_MODES:
            problems.append(
                f"{at}.mode: {quote(mode)} is not allowed; valid: {', '.join(DISK_MODES)}"
            )
        elif multi and mode == "READ_WRITE" and found is not None:
            problems.append(
                f"{at}.mode: 'READ_WRITE' attaches a disk to one VM but every one of the "
                f"{found.hosts} workers of {found.accelerator_type} attaches it; valid: READ_ONLY"
            )
        modes.append(str(mode))
    return tuple(modes), problems


def _check(
    args: Mapping[str, Any], p: str, user_code: bool | None = None
) -> tuple[SlicePlan | None, list[str]]:
    if user_code is None:
        user_code = args.get("node_args") is not None
    found, problems = tpu_slice_problems(
        accelerator_type=args.get("accelerator_type"),
        generation=args.get("generation"),
        topology=args.get("topology"),
        zone=args.get("zone"),
        runtime_version=args.get("runtime_version"),
        prefix=p,
    )
    region = subnet_zone_problems(args.get("zone"), args.get("subnetwork_self_link"), f"{p}zone")
    if region:
        # A zone outside the subnet's region is the problem; do not report the zone twice.
        problems = region + [x for x in problems if not x.startswith(f"{p}zone: ")]
    if found is not None and not problems and not user_code:
        problems += tensorflow_runtime_problems(args["runtime_version"], found, p)
    provisioning = args.get("provisioning", "on-demand")
    problems += tpu_capacity_problems(provisioning, args.get("reservation"), args.get("queued"), p)
    modes, disk_problems = _disk_modes(args.get("data_disks"), found, p)
    problems += disk_problems
    trainer_module = args.get("trainer_module", DEFAULT_TRAINER_MODULE)
    trainer_args = args.get("trainer_args", ())
    try:
        validate_trainer_launch(trainer_module, trainer_args)
    except ValueError as exc:
        problems.append(f"{p}{exc}")
    if found is not None and not user_code:
        # The global batch against the slice's replicas, as a stack's trainer section.
        world = tpu_world_size(found.accelerator_type, found.chips)
        batch = trainer_args_batch_problem(
            str(trainer_module), trainer_args, lambda *_: world, f"{p}trainer_args --"
        )
        problems += [batch] if batch else []
    problems += secret_env_names_problems(args, p)
    if user_code and ("trainer_module" in args or "trainer_args" in args):
        problems.append(
            f"{p}node_args: runs your own code, which takes no trainer_module or trainer_args; "
            "valid: remove them"
        )
    secure_boot = args.get("secure_boot", True)
    if not isinstance(secure_boot, bool):
        problems.append(f"{p}secure_boot: got {secure_boot!r}; valid: true or false")
    max_run = args.get("max_run_seconds")
    if max_run is not None and (
        isinstance(max_run, bool) or not isinstance(max_run, int) or max_run < 1
    ):
        problems.append(f"{p}max_run_seconds: got {max_run!r}; valid: an integer >= 1")
    if problems or found is None:
        return None, problems
    queued = args.get("queued") or {}
    plan = SlicePlan(
        slice=found,
        generation=TPU_GENERATIONS[found.generation],
        runtime_version=str(args["runtime_version"]),
        provisioning=str(provisioning),
        secure_boot=secure_boot and found.generation in SECURE_BOOT_GENERATIONS,
        trainer_module=str(trainer_module),
        trainer_args=tuple(trainer_args),
        user_code=user_code,
        disk_modes=modes,
        queued_tier=str(queued.get("tier", "on-demand")),
        wait_timeout_s=int(queued.get("wait_timeout_s", DEFAULT_WAIT_TIMEOUT_S)),
        max_run_seconds=max_run,
    )
    return plan, []


def tpu_pod_slice_problems(
    args: Mapping[str, Any], prefix: str = "", user_code: bool | None = None
) -> list[str]:
    """Every problem with the plain `TpuPodSlice` arguments in `args`, keys prefixed with
    `prefix`: the slice, zone and runtime (a TensorFlow runtime, which the bundled trainer
    needs; any runtime for your own code: `user_code`, default whether `args` has
    `node_args`), provisioning and reservation, data disks, the trainer launch, Secure
    Boot and the run limit."""
    return _check(args, prefix, user_code)[1]


TPU_CODE: Final = CodeRules(
    "tpu", launchers=("node",), default_launcher="node", pulumi_secrets=True
)
"""What your code may use on a slice: the node launcher only (JAX and PyTorch/XLA run one
process per host), no container (the `tpu` target's own `code_rules`)."""


def with_code(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """`args` with `code` as what the slice runs: `node_args` for every worker, the run
    contract's folders in `checkpoint_url` / `data_url`, `checkpoint_dir` defaulting to
    `<checkpoint_url>/checkpoints`. ValueError, one line per problem, when `code` does not
    fit: its keys (`trainstack:trainer`'s rules), the runtime's frameworks, and `package` built
    from other code."""
    if args.get("code") is None:
        if args.get("checkpoint_dir") is None:
            raise ValueError(
                "checkpoint_dir: required; valid: a gs:// URL (TrainingBuckets.checkpoint_url), "
                "or code with checkpoint_url"
            )
        return args
    runtime = str(args.get("runtime_version"))

    def runtime_problems(code: UserCode) -> list[str]:
        return tpu_framework_problems(code, runtime, code_base_dir(), prefix="code.")

    # The same path as every compute component's `code` (the package's check included).
    given = args_with_code(
        args, TPU_CODE, args["deployment_name"], image_key=None, checks=runtime_problems
    )
    out = dict(given)
    if out.get("checkpoint_dir") is None:
        out["checkpoint_dir"] = pulumi.Output.from_input(args["checkpoint_url"]).apply(
            lambda url: f"{url.rstrip('/')}/checkpoints"
        )
    return out


def validate_args(args: Mapping[str, Any]) -> SlicePlan:
    """Check every plain argument; raise one ValueError listing every problem, one per line."""
    plan, problems = _check(args, "")
    if plan is None:
        raise ValueError("\n".join(problems))
    return plan


def tpu_trainer_problems(framework: Any, strategy: Any, prefix: str = "") -> list[str]:
    """Problems with the trainer a TPU slice is asked to run (`framework`, `strategy` at
    `<prefix>framework`, `<prefix>strategy`): the tensorflow trainer with TPUStrategy."""
    if framework != TPU_FRAMEWORK:
        return [
            (
                f"{prefix}framework: {quote(framework)} is not supported on a tpu target "
                "(TPU runs the tensorflow trainer with TPUStrategy); valid: tensorflow"
            )
        ]
    if strategy != TPU_STRATEGY:
        return [f"{prefix}strategy: {quote(strategy)} is not supported on a tpu target; valid: tpu"]
    return []

"""TPU slices as GKE node pools running your code as a JobSet (`tpu.backend: gke`).

    from trainstack.components import TrainerPackage, UserCode
    from trainstack.components.tpu_gke_slices import TpuGkeSlices

    code = UserCode(
        source="train",                                  # a folder beside Pulumi.yaml
        image="us-docker.pkg.dev/my-project/jax/tpu:1",  # with jax[tpu] and python3
        entrypoint=["python", "train.py"],
    )
    package = TrainerPackage("exp-42-code", {"staging_bucket": buckets.staging_bucket, "code": code})
    tpu = TpuGkeSlices(
        "exp-42-tpu",
        {
            "project": "my-project", "zone": "us-east5-b", "deployment_name": "exp-42",
            "accelerator_type": "v6e-16", "slices": 2, "provisioning": "spot",
            "environment": "dev",  # the `environment` label the policy pack requires
            "code": code, "package_uri": package.uri, "package": package,
            "checkpoint_url": buckets.checkpoint_url, "data_url": buckets.data_url,
            "network_self_link": net.network_self_link,
            "subnetwork_self_link": net.subnetwork_self_link, "node_tag": net.node_tag,
            "service_account_email": identity.service_account_email,
        },
    )
    pulumi.export("tpu", tpu.facts)             # what `trainstack status --program` reads
    pulumi.export("kubeconfig", tpu.kubeconfig)

`code` runs your code in its image on every TPU VM (one pod each) with the node launcher
(launcher node only), checked as `trainstack:trainer` is, with the run contract's folders in
the buckets given (`trainstack.components.user_code`); a stack gives the launcher's
arguments as `node_args` and the image as `image` instead. `environment` adds the
`environment` label (`accelerators-labelled`) to the nodes and the JobSet, and with `prod`
gives the cluster deletion protection. Its `facts` are the totals, quota and notes
`trainstack plan --program` shows (the stack target's own functions,
`trainstack.components.tpu_gke_facts`); a `RunSupervisor` of kind `node_pools` (from
`supervised_slices`) stops it.

What it creates: the GKE cluster and its system node pool that the GPU backend builds
(`trainstack.components.a100_cluster.gke`: `gke_cluster`, `gke_system_pool`,
`gke_provider`), one TPU node pool per slice (`tpu-<i>`: the slice's machine type, node
count = VMs per slice, `COMPACT` placement with the slice topology on a multi-host slice,
as XPK's `core/nodepool.py` creates them; spot, a reservation or flex-start; the
`google.com/tpu` taint), the JobSet controller at a pinned release
(`catalog.tpu_gke.JOBSET_MANIFESTS`), a Workload Identity ServiceAccount, and the JobSet
(`trainstack.components._tpu_jobset`). Each pod installs the trainer package and runs the
node launcher with your code (`components/kubernetes_pod.sh`, as the GPU Job's pods do);
GKE's TPU webhook gives it `TPU_WORKER_ID` / `TPU_WORKER_HOSTNAMES` on a multi-host slice,
and with several slices the pod gets `MEGASCALE_*` from JobSet's labels, so
`jax.distributed.initialize()` finds the slices without arguments; the one pod of a
single-host slice, which the webhook leaves alone, finds itself by `TRAINSTACK_NUM_NODES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import container, serviceaccount

from trainstack.components._args import check_args, component_check
from trainstack.components._job_launch import node_argv
from trainstack.components._node_args import keyed_node_args, secret_env_names_problems
from trainstack.components._options import inherited_depends_on
from trainstack.components._pod_setup import PACKAGE_URI_ENV, pod_command
from trainstack.components._tpu_gke_pools import cluster_args, node_pool_args
from trainstack.components._tpu_jobset import (
    DEFAULT_MAX_RESTARTS,
    REPLICATED_JOB,
    jobset_manifest,
)
from trainstack.components.a100_cluster._common import (
    CLOUD_PLATFORM_SCOPE,
    DEFAULT_ENVIRONMENT,
    ENVIRONMENTS,
    KUBERNETES_VERSION,
)
from trainstack.components.a100_cluster.gke import (
    CLUSTER_NAME_MAX,
    NODE_IMAGE_TYPE,
    gke_cluster,
    gke_console_url,
    gke_provider,
    gke_system_pool,
)
from trainstack.components.catalog.gke_versions import (
    TPU_FLEX_START_VERSION,
    version_floor_problems,
)
from trainstack.components.catalog.tpu import TPU_GENERATIONS, TpuSlice
from trainstack.components.catalog.tpu_gke import (
    FLEX_START_MAX_RUN_S,
    JOBSET_API,
    JOBSET_MANIFESTS,
    JOBSET_NAME_MAX,
    TPU_TAINT,
    gke_chips_per_vm,
    gke_vms,
    tpu_flex_start_run_problems,
    tpu_gke_code_problems,
    tpu_gke_image,
    tpu_gke_only_problems,
    tpu_provisioning_problems,
    tpu_slices_problems,
)
from trainstack.components.catalog.tpu_rules import named_slice
from trainstack.components.code_summary import (
    MEGASCALE_ENV,
    TPU_WORKER_ENV,
    component_code_summary,
)
from trainstack.components.facts import checkpoint_dir_of, deployed_facts
from trainstack.components.gpu_startup import pod_run_env
from trainstack.components.naming import (
    environment_labels,
    gcp_name,
    labels_input,
    stack_labels,
)
from trainstack.components.tpu_gke_facts import (
    JOBSET_NAMESPACE,
    slices_hourly_usd,
    tpu_gke_slices_facts,
)
from trainstack.components.training_dashboard.targets import DashboardScope, gke_filters
from trainstack.components.user_code import CodeRules, UserCode, args_with_code
from trainstack.trainers.common.contract import CAPACITY_RUN_ENV, NUM_NODES_ENV
from trainstack.trainers.common.run_records import RUN_RECORD_ENV

TOKEN: Final = "trainstack:tpu:TpuGkeSlices"
COMPONENT_LABEL: Final = "tpu-gke-slices"
NAMESPACE: Final = JOBSET_NAMESPACE
WORKLOAD_IDENTITY_ROLE: Final = "roles/iam.workloadIdentityUser"
WORKLOAD_IDENTITY_ANNOTATION: Final = "iam.gke.io/gcp-service-account"
POOL_PREFIX: Final = "tpu-"


class TpuGkeSlicesArgs(TypedDict):
    """Arguments for `TpuGkeSlices`."""

    project: pulumi.Input[str]
    """Project of the cluster."""
    zone: str
    """Zone of the cluster and its TPU node pools, e.g. `us-east5-b` for v6e."""
    deployment_name: str
    """Prefix of the cluster, JobSet and ServiceAccount names."""
    accelerator_type: NotRequired[str]
    """One slice, e.g. `v6e-16` (or generation+topology)."""
    generation: NotRequired[str]
    """`v4`, `v5e`, `v5p` or `v6e`, with `topology` instead of `accelerator_type`."""
    topology: NotRequired[str]
    """Chip topology with `generation`, e.g. `4x4`."""
    slices: NotRequired[int]
    """Slices, one node pool each (default 1); above 1 only of multi-host slices."""
    provisioning: NotRequired[str]
    """on-demand (default), spot, reserved or flex-start (the generations and zones Google
    lists, `catalog.tpu_gke.FLEX_START_ZONES`)."""
    reservation: NotRequired[str]
    """reserved only: the reservation to consume (default: any matching one)."""
    image: NotRequired[str]
    """Container image with a TPU framework (jax[tpu]) and python3 your code runs in;
    default `code`'s `image`, else Google's JAX AI image for TPUs
    (`catalog.tpu_gke.JAX_TPU_IMAGE`)."""
    node_args: NotRequired[pulumi.Input[Sequence[str]]]
    """Your code as `python -m trainstack.trainers.node` arguments, run in every pod (a
    stack's `trainstack.infra.compose.user_code_node_args`); a program gives `code`
    instead. Required unless `code` is given."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`), run in every pod with the node
    launcher (launcher node only), checked as `trainstack:trainer` is; its `image` is the
    pods' unless `image` is given. Needs `checkpoint_url` and `data_url` (the run
    contract's folders); give its `TrainerPackage` as `package`, checked to hold it."""
    package: NotRequired[Any]
    """With `code`: the `TrainerPackage` built with the same `code` (`package_uri` its
    `uri`), checked to hold that code and its requirements."""
    data_url: NotRequired[pulumi.Input[str]]
    """With `code`: the data bucket's URL (`TrainingBuckets.data_url`), TRAINSTACK_DATA_DIR."""
    run_name: NotRequired[str]
    """With `code`: the run's name (its checkpoint folder, TRAINSTACK_RUN_NAME); default
    `deployment_name`."""
    secret_env_names: NotRequired[Sequence[str]]
    """The `--env` names of `node_args` whose values are secrets: no run key hashes them."""
    package_uri: pulumi.Input[str]
    """gs:// URI of the trainer sdist the pods install (`TrainerPackage.uri`)."""
    checkpoint_url: NotRequired[pulumi.Input[str]]
    """gs:// URL of the checkpoint bucket (`TrainingBuckets.checkpoint_url`): the run's
    records go beside the checkpoints; with `code`, its run contract's checkpoint and output
    folders too."""
    network_self_link: pulumi.Input[str]
    subnetwork_self_link: pulumi.Input[str]
    node_tag: pulumi.Input[str]
    """The network's node tag, on every node (its firewall applies)."""
    service_account_email: pulumi.Input[str]
    """The nodes' account, and so the pods': on the host network they reach the Compute
    Engine metadata server, not GKE's, and act as the node's account (GKE's Cloud Storage
    FUSE CSI driver page, `hostNetworkPodKSA`); the Workload Identity binding of their
    Kubernetes account serves a pod off the host network."""
    master_authorized_cidrs: NotRequired[Sequence[str]]
    environment: NotRequired[str]
    """dev, staging or prod: the `environment` label on the nodes and the JobSet, with `stack`
    (the Pulumi stack's name) where `labels` has none: the two labels the policy pack's
    `accelerators-labelled` requires; prod: the cluster has deletion protection."""
    max_restarts: NotRequired[int]
    """Whole-set restarts on preemption or host maintenance (default 10)."""
    max_run_seconds: NotRequired[int]
    """flex-start: each node's run duration (default and most: 7 days)."""
    labels: NotRequired[pulumi.Input[Mapping[str, str]]]


def tpu_gke_slices_problems(args: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every problem with the plain arguments (keys prefixed with `prefix`), by the rules the
    stack config's `trainstack:tpu` with `backend: gke` is checked with."""
    p = prefix
    found, problems = named_slice(
        accelerator_type=args.get("accelerator_type"),
        generation=args.get("generation"),
        topology=args.get("topology"),
        zone=args.get("zone"),
        prefix=p,
    )
    provisioning = args.get("provisioning", "on-demand")
    problems += tpu_slices_problems(args.get("slices", 1), found, "gke", p)
    problems += tpu_provisioning_problems(provisioning, "gke", found, args.get("zone"), p)
    problems += tpu_gke_only_problems(
        "gke", args.get("runtime_version"), args.get("reservation"), provisioning, p
    )
    if provisioning == "flex-start":
        # TpuGkeSlicesArgs has no kubernetes_version: the cluster is at KUBERNETES_VERSION
        # (gke_cluster's default), held here to the TPU flex-start floor all the same.
        version = args.get("kubernetes_version", KUBERNETES_VERSION)
        why = f"TPU flex-start (GKE: {TPU_FLEX_START_VERSION} or later)"
        problems += version_floor_problems(
            version, f"{p}kubernetes_version", [(TPU_FLEX_START_VERSION, why)]
        )
    environment = args.get("environment", DEFAULT_ENVIRONMENT)
    if environment not in ENVIRONMENTS:
        problems.append(
            f"{p}environment: {environment!r} is not allowed; valid: {', '.join(ENVIRONMENTS)}"
        )
    max_run = args.get("max_run_seconds")
    if max_run is not None and (
        isinstance(max_run, bool) or not isinstance(max_run, int) or max_run < 1
    ):
        problems.append(f"{p}max_run_seconds: got {max_run!r}; valid: an integer >= 1")
    problems += tpu_flex_start_run_problems(provisioning, max_run, f"{p}max_run_seconds", p)
    return problems


TPU_GKE_CODE: Final = CodeRules(
    "tpu", launchers=("node",), default_launcher="node", runs_image=True, pulumi_secrets=True
)
"""What your code may use on GKE TPU slices: the node launcher only (one process per TPU VM
drives its chips), an image (the `tpu_gke` target's own `code_rules`)."""


def with_code(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """`args` with `code` as what the pods run: `node_args` with the run contract's folders
    in `checkpoint_url` / `data_url`, the code's `image` unless `image` is given, and without
    either Google's JAX AI image for TPUs (`catalog.tpu_gke.JAX_TPU_IMAGE`). ValueError,
    one line per problem, when the code does not fit (`trainstack:trainer`'s rules here)."""
    out = args_with_code(args, TPU_GKE_CODE, args["deployment_name"], image_key="image")
    return {**out, "image": tpu_gke_image(out.get("image"))}


def _validate(args: Mapping[str, Any]) -> TpuSlice:
    problems = tpu_gke_slices_problems(args)
    problems += tpu_gke_code_problems("node_args" in args, "")
    problems += secret_env_names_problems(args)
    found = named_slice(
        accelerator_type=args.get("accelerator_type"),
        generation=args.get("generation"),
        topology=args.get("topology"),
        zone=args.get("zone"),
    )[0]
    if problems or found is None:
        raise ValueError("\n".join(problems))
    return found


class TpuGkeSlices(pulumi.ComponentResource):
    """GKE cluster + one TPU node pool per slice + JobSet controller + JobSet."""

    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    console_url: pulumi.Output[str]
    jobset_name: pulumi.Output[str]
    node_pool_names: pulumi.Output[list[str]]
    chips: pulumi.Output[int]
    hosts: pulumi.Output[int]
    """TPU VMs in all slices (one pod each)."""
    manifest: pulumi.Output[dict[str, Any]]
    """The JobSet as applied."""
    pools: list[container.NodePool]
    jobset: k8s.apiextensions.CustomResource
    dashboard_scope: DashboardScope
    facts: dict[str, Any]
    """What `trainstack plan|plan-diff|quota|status|logs --program` read from these slices
    (`trainstack.components.facts`; also a registered output): chips, TPU VMs and the system
    node, $/hour at list price (spot price when spot; the cluster fee and system node
    included), the quota checked (the system node's vCPUs), its plan notes, where its state
    is read (`status`: cluster, namespace and JobSet) and its pods' Cloud Logging scope
    (`logs`), and with `code` the plan's "Your code" entry. Export it, and the kubeconfig, to
    read a deployed program's status: `pulumi.export("tpu", tpu.facts)`. Plain values but
    `status` and `logs`, Outputs known once deployed
    (`trainstack.components.facts.deployed_facts`)."""

    def __init__(
        self, name: str, args: TpuGkeSlicesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("TpuGkeSlices", TpuGkeSlicesArgs, args)
        code = args.get("code")
        # Your code (`code`) becomes the node launcher's arguments and the image, checked first.
        args = component_check("TpuGkeSlices", with_code, args)  # type: ignore[assignment]
        if "environment" in args:
            # The label the policy pack requires on TPU machines (`accelerators-labelled`),
            # on the nodes and the JobSet alike.
            env_labels = component_check(
                "TpuGkeSlices",
                environment_labels,
                stack_labels(args.get("labels")),
                args["environment"],
            )
            args = {**args, "labels": env_labels}
        found = component_check("TpuGkeSlices", _validate, args)
        labels = component_check("TpuGkeSlices", labels_input, args.get("labels"), COMPONENT_LABEL)
        code_entry = None if code is None else slices_code(code, args, found)
        super().__init__(TOKEN, name, None, opts)
        project = pulumi.Output.from_input(args["project"])
        zone = args["zone"]
        slices = int(args.get("slices", 1))
        provisioning = str(args.get("provisioning", "on-demand"))
        vms = gke_vms(found)
        # A component's depends_on does not reach its children: the pools and the JobSet
        # wait for the stack's grants themselves.
        deps = inherited_depends_on(opts)

        cluster = gke_cluster(
            name, args, project, zone, labels, self, suffix="tpu", extra=cluster_args(found)
        )
        system_pool = gke_system_pool(name, args, project, zone, cluster.name, labels, self)
        config, provider = gke_provider(name, project, zone, cluster, self)
        shape = node_pool_args(found, provisioning, args.get("reservation"))
        tags = pulumi.Output.from_input(args["node_tag"]).apply(lambda t: [t])
        node_config: dict[str, Any] = {
            **shape["config"],
            "image_type": NODE_IMAGE_TYPE,
            "gvnic": container.NodePoolNodeConfigGvnicArgs(enabled=True),
            "taints": [container.NodePoolNodeConfigTaintArgs(**TPU_TAINT)],
            "service_account": args["service_account_email"],
            "oauth_scopes": [CLOUD_PLATFORM_SCOPE],
            "workload_metadata_config": container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                mode="GKE_METADATA"
            ),
            "resource_labels": labels,
            "tags": tags,
        }
        if provisioning == "flex-start":
            run_s = args.get("max_run_seconds", FLEX_START_MAX_RUN_S)
            node_config["max_run_duration"] = f"{min(run_s, FLEX_START_MAX_RUN_S)}s"
        self.pools = [
            container.NodePool(
                f"{name}-slice-{i}",
                project=project,
                location=zone,
                cluster=cluster.name,
                name=f"{POOL_PREFIX}{i}",
                node_config=container.NodePoolNodeConfigArgs(**node_config),
                # The TPU nodes bill: after what the component waits for (the stack's grants).
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
                **shape["pool"],
            )
            for i in range(slices)
        ]
        k8s_opts = pulumi.ResourceOptions(
            parent=self, provider=provider, depends_on=[system_pool, *deps]
        )
        controller = k8s.yaml.v2.ConfigFile(
            f"{name}-jobset-controller", file=JOBSET_MANIFESTS, opts=k8s_opts
        )
        # Short enough for the `coordinator` label JobSet derives from it (JOBSET_NAME_MAX).
        job = gcp_name(args["deployment_name"], "tpu", max_len=JOBSET_NAME_MAX)
        gsa = args["service_account_email"]
        account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata={
                "name": job,
                "namespace": NAMESPACE,
                "annotations": pulumi.Output.from_input(gsa).apply(
                    lambda e: {WORKLOAD_IDENTITY_ANNOTATION: e}
                ),
            },
            opts=k8s_opts,
        )
        binding = serviceaccount.IAMMember(
            f"{name}-wi",
            service_account_id=pulumi.Output.all(project, gsa).apply(
                lambda v: f"projects/{v[0]}/serviceAccounts/{v[1]}"
            ),
            role=WORKLOAD_IDENTITY_ROLE,
            member=project.apply(lambda p: f"serviceAccount:{p}.svc.id.goog[{NAMESPACE}/{job}]"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )
        plain: dict[str, Any] = dict(args)
        accelerator = TPU_GENERATIONS[found.generation].gke_accelerator

        def build(values: list[Any]) -> dict[str, Any]:
            merged, package_uri, checkpoint_url, node_args = values
            env = _pod_env(plain, vms * slices, package_uri, checkpoint_url, node_args)
            return jobset_manifest(
                name=job,
                namespace=NAMESPACE,
                slices=slices,
                vms=vms,
                chips_per_vm=gke_chips_per_vm(found),
                accelerator=accelerator,
                topology=found.topology,
                image=plain["image"],
                command=pod_command(),
                args=node_argv(None, [], node_args),
                env=[{"name": k, "value": v} for k, v in sorted(env.items())],
                labels={k: v for k, v in sorted(dict(merged).items())},
                service_account=job,
                spot=provisioning == "spot",
                max_restarts=plain.get("max_restarts", DEFAULT_MAX_RESTARTS),
            )

        manifest = pulumi.Output.all(
            labels, args["package_uri"], args.get("checkpoint_url"), args["node_args"]
        ).apply(build)
        self.jobset = k8s.apiextensions.CustomResource(
            f"{name}-jobset",
            api_version=JOBSET_API,
            kind="JobSet",
            metadata=manifest.apply(lambda m: m["metadata"]),
            spec=manifest.apply(lambda m: m["spec"]),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=provider,
                depends_on=[*self.pools, controller, account, binding, *deps],
                # JobSet's webhook refuses a change to spec.replicatedJobs of a JobSet that is
                # not suspended (kubernetes-sigs/jobset@v0.12.0 pkg/webhooks/jobset_webhook.go
                # ValidateUpdate: ValidateImmutableField(mungedSpec.ReplicatedJobs, ...), the
                # pod template masked only with Suspend; "failurePolicy [is] made immutable
                # via CEL"), and pulumi-kubernetes, with no table for the kind (provider/pkg/
                # provider/diff.go), would update it in place: every new code package (its URI
                # in the pods' env) would fail `pulumi up`. A changed spec replaces it, the
                # old one deleted first (its name is fixed).
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        self.cluster_name = cluster.name
        self.endpoint = cluster.endpoint
        self.kubeconfig = config
        self.console_url = pulumi.Output.all(project, cluster.name).apply(
            lambda v: gke_console_url(v[0], zone, v[1])
        )
        self.jobset_name = pulumi.Output.from_input(job)
        self.node_pool_names = pulumi.Output.all(*[p.name for p in self.pools])
        self.chips = pulumi.Output.from_input(found.chips * slices)
        self.hosts = pulumi.Output.from_input(vms * slices)
        self.manifest = manifest
        self.run_record = manifest.apply(_run_record)
        log_filter, resource_filter = gke_filters(self.cluster_name)
        # Target tpu on GKE (platform tpu_gke): its pods' logs as any GKE container's, its
        # nodes' accelerator metrics, counted as slices x hosts.
        self.dashboard_scope = {
            "target": "tpu",
            "backend": "gke",
            "worker_count": vms * slices,
            "slices": slices,
            "log_filter": log_filter,
            "resource_filter": resource_filter,
        }
        checkpoint_dir = pulumi.Output.from_input(args["node_args"]).apply(checkpoint_dir_of)
        stack = pulumi.get_stack()
        self.facts = deployed_facts(
            lambda v: tpu_gke_slices_facts(found, plain, stack, v, name, code_entry),
            [project, self.cluster_name, self.jobset_name, checkpoint_dir],
            ["", "", "", None],
        )
        self.register_outputs(
            {
                "facts": self.facts,
                "kubeconfig": self.kubeconfig,
                "cluster_name": self.cluster_name,
                "jobset_name": self.jobset_name,
                "node_pool_names": self.node_pool_names,
                "chips": self.chips,
                "hosts": self.hosts,
            }
        )


def slices_code(code: UserCode, args: Mapping[str, Any], found: TpuSlice) -> dict[str, Any]:
    """The plan's "Your code" entry of the slices' `code`: one node launcher per TPU VM, in
    the pods' image (`trainstack.components.code_summary`)."""
    slices = int(args.get("slices", 1))
    return component_code_summary(
        code,
        "TpuGkeSlices",
        default_launcher=TPU_GKE_CODE.default_launcher,
        runs_on=str(args["image"]),
        world_size=gke_vms(found) * slices,
        node_env=[*TPU_WORKER_ENV, *(MEGASCALE_ENV if slices > 1 else ())],
    )


def _pod_env(
    plain: Mapping[str, Any],
    hosts: int,
    package_uri: str,
    checkpoint_url: str | None,
    node_args: Sequence[str],
) -> dict[str, str]:
    """The pods' trainstack variables: the package, the node count and, with a checkpoint
    bucket, the run's records (`pod_run_env`, keyed by the run's arguments as the GPU Job's
    pods are).

    The node count (TPU VMs in all slices) is what a single-host slice's pod finds its place
    by: GKE's TPU webhook sets TPU_WORKER_ID / TPU_WORKER_HOSTNAMES only in a Job of
    `parallelism > 1` (tests/fidelity/jobset.py quotes the condition), so the one pod of a
    one-VM slice has JOB_COMPLETION_INDEX alone and the node launcher resolves it as pod 0
    of an Indexed Job of TRAINSTACK_NUM_NODES (trainers/common/cluster.py `_from_gke`), whose
    OMPI_* variables let `jax.distributed.initialize()` find a world of one (jax-ml/jax
    jax/_src/clusters/ompi_cluster.py OmpiCluster, first in clusters/__init__.py; its
    GkeTpuCluster.is_env_present needs TPU_WORKER_HOSTNAMES). Where the webhook does set
    TPU_WORKER_ID, that shape wins (`resolve_cluster`) and the count is not read."""
    env = {PACKAGE_URI_ENV: package_uri, NUM_NODES_ENV: str(hosts)}
    if plain.get("provisioning") == "flex-start":
        # The nodes' run duration (the pools' max_run_duration), from which the pod script
        # derives TRAINSTACK_DEADLINE.
        run_s = min(plain.get("max_run_seconds", FLEX_START_MAX_RUN_S), FLEX_START_MAX_RUN_S)
        env[CAPACITY_RUN_ENV] = str(run_s)
    if checkpoint_url:
        keyed = node_argv(None, [], keyed_node_args(node_args, plain.get("secret_env_names") or ()))
        shape = {**plain, "node_count": hosts, "gpus_per_node": 0}
        env |= pod_run_env(checkpoint_url, package_uri, keyed, shape)
    return env


class SupervisedSlices(NamedTuple):
    """What the run supervisor of a `TpuGkeSlices` stops (`supervised_slices`)."""

    cluster: pulumi.Output[str]
    """`projects/P/locations/Z/clusters/C` (`catalog.supervisor_iam.NAME_FORMS`)."""
    pools: list[str]
    """The slices' pools, `tpu-<i>`."""
    run_record: pulumi.Output[str] | None
    """The run's record prefix the pods write (None without a checkpoint bucket)."""
    hosts: int
    """TPU VMs in all slices: one heartbeat each, by global rank."""
    hourly_usd: float = 0.0
    """The slices' TPU nodes' $/hour at list price, rounded to cents (`slices_hourly_usd`,
    the stack plan's price): what the supervisor's spend count adds per hour of billing
    (`supervisor_run`'s `hourly_usd`)."""

    @property
    def node_count(self) -> int:
        """`hosts` under the name `supervisor_run` and `SupervisedCompute` use."""
        return self.hosts


def supervised_slices(args: TpuGkeSlicesArgs) -> SupervisedSlices:
    """What a `TpuGkeSlices` built from `args` bills for and its run supervisor stops, known
    before the component is registered (its supervisor comes first)."""
    args = component_check("TpuGkeSlices", with_code, args)  # type: ignore[assignment]
    found = component_check("TpuGkeSlices", _validate, args)
    slices, hosts = int(args.get("slices", 1)), gke_vms(found) * int(args.get("slices", 1))
    name = gcp_name(args["deployment_name"], "tpu", max_len=CLUSTER_NAME_MAX)
    cluster = pulumi.Output.concat(
        "projects/", args["project"], f"/locations/{args['zone']}/clusters/{name}"
    )
    checkpoint_url = args.get("checkpoint_url")
    plain: dict[str, Any] = dict(args)
    record = (
        None
        if checkpoint_url is None
        else pulumi.Output.all(args["package_uri"], checkpoint_url, args["node_args"]).apply(
            lambda v: _pod_env(plain, hosts, v[0], v[1], v[2]).get(RUN_RECORD_ENV, "")
        )
    )
    hourly = round(slices_hourly_usd(found, slices, str(args.get("provisioning", "on-demand"))), 2)
    pools = [f"{POOL_PREFIX}{i}" for i in range(slices)]
    return SupervisedSlices(cluster, pools, record, hosts, hourly)


def _run_record(manifest: Mapping[str, Any]) -> str:
    pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    return str(env.get(RUN_RECORD_ENV) or "")


__all__ = [
    "REPLICATED_JOB",
    "TPU_GKE_CODE",
    "SupervisedSlices",
    "TpuGkeSlices",
    "TpuGkeSlicesArgs",
    "supervised_slices",
    "tpu_gke_slices_problems",
]

"""Every public component checks its arguments against its TypedDict before registering
anything (components/_args.py): a misspelled key names the nearest valid key, a wrong type
names the expected one, in the stack config's words; unknown stack keys say the same."""

from __future__ import annotations

import ast
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, Union, get_args, get_origin, is_typeddict

import pulumi
import pytest

from trainstack import components
from trainstack.components._args import ArgsError, _fields, arg_problems
from trainstack.components.a100_cluster import A100Cluster, A100ClusterArgs, A100TrainingArgs
from trainstack.components.env_secrets import EnvSecrets, EnvSecretsArgs
from trainstack.components.image_mirror import ImageMirror, ImageMirrorArgs
from trainstack.components.kubernetes_training_job import (
    KubernetesTrainingJob,
    KubernetesTrainingJobArgs,
)
from trainstack.components.local_training_job import LocalTrainingJob, LocalTrainingJobArgs
from trainstack.components.project_services import ProjectServices, ProjectServicesArgs
from trainstack.components.quota_guard import QuotaGuard, QuotaGuardArgs
from trainstack.components.reduction_server_image import (
    ReductionServerImage,
    ReductionServerImageArgs,
)
from trainstack.components.run_supervisor import RunSupervisor, RunSupervisorArgs
from trainstack.components.tpu_gke_slices import TpuGkeSlices, TpuGkeSlicesArgs
from trainstack.components.tpu_pod_slice import TpuPodSlice, TpuPodSliceArgs
from trainstack.components.trainer_package import TrainerPackage, TrainerPackageArgs
from trainstack.components.training_buckets import TrainingBuckets, TrainingBucketsArgs
from trainstack.components.training_dashboard import TrainingDashboard, TrainingDashboardArgs
from trainstack.components.training_identity import TrainingIdentity, TrainingIdentityArgs
from trainstack.components.training_network import TrainingNetwork, TrainingNetworkArgs
from trainstack.components.vertex_training_job import VertexTrainingJob, VertexTrainingJobArgs
from trainstack.infra.config import ConfigError, load_stack_config, section_names
from trainstack.infra.mocks import run_program
from trainstack.trainers.common.config import TrainConfig

SA = "train@p.iam.gserviceaccount.com"
NET = "https://www.googleapis.com/compute/v1/projects/p/global/networks/n"
SUBNET = "https://www.googleapis.com/compute/v1/projects/p/regions/us-central1/subnetworks/s"

# Each component with arguments that build it (checked by test_base_arguments_build).
COMPONENTS: dict[str, tuple[Callable[..., Any], type, dict[str, Any]]] = {
    "A100Cluster": (
        A100Cluster,
        A100ClusterArgs,
        {
            "project": "p",
            "zone": "us-central1-a",
            "deployment_name": "exp-42",
            "machine_type": "a2-highgpu-8g",
            "network_self_link": NET,
            "subnetwork_self_link": SUBNET,
            "node_tag": "exp-42-train-node",
            "service_account_email": SA,
        },
    ),
    "TpuPodSlice": (
        TpuPodSlice,
        TpuPodSliceArgs,
        {
            "project": "p",
            "zone": "us-central2-b",
            "deployment_name": "exp-42",
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
            "network_self_link": NET,
            "subnetwork_self_link": SUBNET,
            "service_account_email": SA,
            "package_uri": "gs://p-staging/trainer.tar.gz",
            "checkpoint_dir": "gs://p-checkpoints/run",
            "trainer_module": "trainstack.trainers.tf_multiworker",
            "trainer_args": ["--framework=tensorflow", "--strategy=tpu"],
        },
    ),
    "VertexTrainingJob": (
        VertexTrainingJob,
        VertexTrainingJobArgs,
        {
            "project": "p",
            "region": "europe-west4",
            "display_name": "exp-42",
            "machine_type": "a2-highgpu-8g",
            "accelerator_type": "NVIDIA_TESLA_A100",
            "replica_count": 2,
            "reduction_server": {"replica_count": "auto"},
            # Reduction Server needs an image with Google's package (a named one).
            "container_image_uri": "us-docker.pkg.dev/p/r/rs:1",
            "package_uri": "gs://p-staging/trainer.tar.gz",
            "trainer_args": ["--steps=1000"],
        },
    ),
    "ImageMirror": (
        ImageMirror,
        ImageMirrorArgs,
        {"project": "p", "location": "us-central1", "deployment_name": "exp-42"},
    ),
    "ReductionServerImage": (
        ReductionServerImage,
        ReductionServerImageArgs,
        {
            "project": "p",
            "location": "us-central1",
            "deployment_name": "exp-42",
            "base_image": "us-central1-docker.pkg.dev/p/exp-42-dockerhub/pytorch/pytorch@sha256:"
            + "0" * 64,
        },
    ),
    "TpuGkeSlices": (
        TpuGkeSlices,
        TpuGkeSlicesArgs,
        {
            "project": "p",
            "zone": "us-east5-b",
            "deployment_name": "exp-42",
            "accelerator_type": "v6e-16",
            "slices": 2,
            "image": "us-docker.pkg.dev/p/r/jax@sha256:" + "0" * 64,
            "node_args": ["--code", "python", "train.py"],
            "package_uri": "gs://p-staging/trainstack-0.1.0.tar.gz",
            "network_self_link": "projects/p/global/networks/exp",
            "subnetwork_self_link": "projects/p/regions/us-east5/subnetworks/exp",
            "node_tag": "exp-42-node",
            "service_account_email": "exp@p.iam.gserviceaccount.com",
        },
    ),
    "TrainingBuckets": (
        TrainingBuckets,
        TrainingBucketsArgs,
        {
            "project": "p",
            "location": "US-CENTRAL1",
            "deployment_name": "exp-42",
            "environment": "dev",
        },
    ),
    "TrainingIdentity": (
        TrainingIdentity,
        TrainingIdentityArgs,
        {
            "project": "p",
            "deployment_name": "exp-42",
            "data_bucket": "b-data",
            "checkpoint_bucket": "b-ckpt",
            "staging_bucket": "b-staging",
        },
    ),
    "TrainingNetwork": (
        TrainingNetwork,
        TrainingNetworkArgs,
        {"project": "p", "region": "us-central1", "deployment_name": "exp-42"},
    ),
    "TrainerPackage": (TrainerPackage, TrainerPackageArgs, {"staging_bucket": "p-staging"}),
    "QuotaGuard": (
        QuotaGuard,
        QuotaGuardArgs,
        {"project": "p", "deployment_name": "exp-42", "needs": [], "preflight": False},
    ),
    "ProjectServices": (
        ProjectServices,
        ProjectServicesArgs,
        {"project": "p", "services": ["compute.googleapis.com"]},
    ),
    "EnvSecrets": (
        EnvSecrets,
        EnvSecretsArgs,
        {"project": "p", "deployment_name": "exp-42", "values": {"HF_TOKEN": "x"}},
    ),
    "KubernetesTrainingJob": (
        KubernetesTrainingJob,
        KubernetesTrainingJobArgs,
        {
            "job_name": "exp-42-train",
            "node_count": 2,
            "gpus_per_node": 8,
            "package_uri": "gs://p-staging/trainer.tar.gz",
        },
    ),
    "LocalTrainingJob": (
        LocalTrainingJob,
        LocalTrainingJobArgs,
        {"trainer": TrainConfig(steps=10), "workers": 2, "root": ".trainstack/local"},
    ),
    "RunSupervisor": (
        RunSupervisor,
        RunSupervisorArgs,
        {
            "project": "p",
            "region": "us-central1",
            "deployment_name": "exp-42",
            "kind": "node",
            "resource_name": "projects/p/locations/us-central2-b/nodes/exp-42-tpu",
            "body": {"runtimeVersion": "tpu-ubuntu2204-base"},
            "staging_bucket": "p-staging",
            "checkpoint_bucket": "p-checkpoints",
            "node_service_account": f"projects/p/serviceAccounts/{SA}",
        },
    ),
    "TrainingDashboard": (
        TrainingDashboard,
        TrainingDashboardArgs,
        {
            "project": "p",
            "deployment_name": "exp-42",
            "target": "vertex",
            "worker_count": 4,
            "log_filter": 'resource.labels.job_id="123"',
            "resource_filter": 'resource.label.job_id="123"',
        },
    ),
}

# A misspelled key and the key it should have been, per component.
TYPOS = [
    ("A100Cluster", "node_cont", "node_count"),
    ("A100Cluster", "nodes", "node_count"),
    ("TpuPodSlice", "acelerator_type", "accelerator_type"),
    ("VertexTrainingJob", "spott", "spot"),
    ("TrainingBuckets", "checkpoint_retention_day", "checkpoint_retention_days"),
    ("TrainingIdentity", "extra_project_role", "extra_project_roles"),
    ("TrainingNetwork", "subnet_cdir", "subnet_cidr"),
    ("TrainerPackage", "requirement", "requirements"),
    ("QuotaGuard", "preflite", "preflight"),
    ("ProjectServices", "service", "services"),
    ("EnvSecrets", "value", "values"),
    ("KubernetesTrainingJob", "namespce", "namespace"),
    ("LocalTrainingJob", "worker", "workers"),
    ("TrainingDashboard", "stall_minute", "stall_minutes"),
    ("ImageMirror", "deployment", "deployment_name"),
    ("ReductionServerImage", "base_img", "base_image"),
    ("TpuGkeSlices", "slice", "slices"),
    ("RunSupervisor", "schedul", "schedule"),
]

# A value of the wrong type per component and the exact problem it gets.
WRONG_TYPES = [
    ("ImageMirror", {"location": 5}, "ImageMirror.location: 5 is not a string; valid: a string"),
    (
        "ReductionServerImage",
        {"base_image": 5},
        "ReductionServerImage.base_image: 5 is not a string; valid: a string",
    ),
    (
        "TpuGkeSlices",
        {"slices": "2"},
        "TpuGkeSlices.slices: '2' is not an integer; valid: an integer",
    ),
    (
        "A100Cluster",
        {"node_count": "2"},
        "A100Cluster.node_count: '2' is not an integer; valid: an integer",
    ),
    (
        "TpuPodSlice",
        {"network_tags": "tag"},
        "TpuPodSlice.network_tags: 'tag' is not a list; valid: a list",
    ),
    (
        "VertexTrainingJob",
        {"spot": "yes"},
        "VertexTrainingJob.spot: 'yes' is not a boolean; valid: true, false",
    ),
    (
        "TrainingBuckets",
        {"checkpoint_retention_days": "3"},
        "TrainingBuckets.checkpoint_retention_days: '3' is not an integer; valid: an integer 1-3650",
    ),
    (
        "TrainingIdentity",
        {"secrets": "s"},
        "TrainingIdentity.secrets: 's' is not a list; valid: a list",
    ),
    (
        "TrainingNetwork",
        {"subnet_cidr": 10},
        "TrainingNetwork.subnet_cidr: 10 is not a string; valid: a string",
    ),
    (
        "TrainerPackage",
        {"requirements": ("torch",)},
        "TrainerPackage.requirements: ('torch',) is a tuple, not a list; valid: a list",
    ),
    (
        "QuotaGuard",
        {"needs": [{"service": "s", "quota_id": "q", "dimensions": {}, "needed": "16"}]},
        "QuotaGuard.needs[0].needed: '16' is not an integer; valid: an integer",
    ),
    (
        "ProjectServices",
        {"services": ["compute.googleapis.com", 3]},
        "ProjectServices.services[1]: 3 is not a string; valid: a string",
    ),
    (
        "EnvSecrets",
        {"deployment_name": 42},
        "EnvSecrets.deployment_name: 42 is not a string; valid: a string",
    ),
    (
        "KubernetesTrainingJob",
        {"gpus_per_node": 8.0},
        "KubernetesTrainingJob.gpus_per_node: 8.0 is not an integer; valid: an integer",
    ),
    (
        "LocalTrainingJob",
        {"workers": "2"},
        "LocalTrainingJob.workers: '2' is not an integer; valid: an integer",
    ),
    (
        "TrainingDashboard",
        {"labels": {"team": 1}},
        "TrainingDashboard.labels.team: 1 is not a string; valid: a string",
    ),
    (
        "RunSupervisor",
        {"schedule": 5},
        "RunSupervisor.schedule: 5 is not a string; valid: a string",
    ),
]


def _build(component: str, args: Any) -> tuple[list[str], list[Any]]:
    """Messages of the ValueError building `component` raised, and what was registered."""
    cls = COMPONENTS[component][0]
    errors: list[str] = []

    def program() -> None:
        try:
            cls("exp", args)
        except ValueError as exc:
            errors.append(str(exc))

    run = run_program(program)
    return errors, run.resources


def _public_components() -> set[str]:
    """Every ComponentResource class in components/ and its packages, read from the source."""
    found: set[str] = set()
    for path in Path(components.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith("ComponentResource") for base in node.bases
            ):
                found.add(node.name)
    return found


def test_every_public_component_is_covered() -> None:
    assert _public_components() == set(COMPONENTS) == {c for c, _, _ in TYPOS}
    assert {c for c, _, _ in WRONG_TYPES} == set(COMPONENTS)


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_base_arguments_build(component: str) -> None:
    errors, resources = _build(component, COMPONENTS[component][2])
    assert errors == []
    assert any(r.name == "exp" for r in resources)


@pytest.mark.parametrize(("component", "typo", "meant"), TYPOS)
def test_misspelled_key_names_the_nearest_key_and_registers_nothing(
    component: str, typo: str, meant: str
) -> None:
    _, args_type, base = COMPONENTS[component]
    valid = ", ".join(args_type.__annotations__)
    errors, resources = _build(component, {**base, typo: base.get(meant, 1)})
    assert errors == [f"{component}.{typo}: unknown key; did you mean `{meant}`? valid: {valid}"]
    assert resources == []


@pytest.mark.parametrize(("component", "override", "message"), WRONG_TYPES)
def test_wrong_type_names_the_expected_type_and_registers_nothing(
    component: str, override: dict[str, Any], message: str
) -> None:
    errors, resources = _build(component, {**COMPONENTS[component][2], **override})
    assert errors == [message]
    assert resources == []


def test_the_issue_cases_word_for_word() -> None:
    errors, _ = _build("A100Cluster", {**COMPONENTS["A100Cluster"][2], "node_cont": 2})
    assert errors == [
        "A100Cluster.node_cont: unknown key; did you mean `node_count`? valid: project, zone, "
        "deployment_name, machine_type, backend, node_count, spot, reservation, flex_start, "
        "compact_placement, tier_1_networking, network_self_link, subnetwork_self_link, "
        "subnet_cidr, node_tag, service_account_email, environment, labels, training, kubernetes_version, "
        "release_channel, gpu_driver_version, system_machine_type, master_authorized_cidrs, "
        "boot_disk_size_gb, max_run_seconds"
    ]


def test_nested_keys_missing_keys_and_every_problem_at_once() -> None:
    args = {
        **COMPONENTS["A100Cluster"][2],
        "training": {"trainr_module": "trainstack.trainers.torch_ddp"},
        "spot": 1,
    }
    del args["zone"]
    training = ", ".join(A100TrainingArgs.__annotations__)
    with pytest.raises(ArgsError) as info:
        A100Cluster("exp", args)  # type: ignore[arg-type]
    assert info.value.errors == [
        "A100Cluster.zone: required",
        "A100Cluster.training.trainr_module: unknown key; did you mean `trainer_module`? "
        f"valid: {training}",
        "A100Cluster.training.package_uri: required",
        "A100Cluster.spot: 1 is not a boolean; valid: true, false",
    ]


def test_not_a_mapping() -> None:
    keys = ", ".join(TrainingNetworkArgs.__annotations__)
    assert arg_problems("TrainingNetwork", TrainingNetworkArgs, ["p"]) == [
        f'TrainingNetwork: ["p"] is not a mapping; expected a mapping with keys: {keys}'
    ]


class _Awaitable:
    def __await__(self) -> Generator[None, None, str]:
        yield None
        return "p"


def test_outputs_and_awaitables_are_accepted_where_the_annotation_allows_input() -> None:
    output = pulumi.Output.from_input("p")
    base = COMPONENTS["TrainingBuckets"][2]
    for value in (output, _Awaitable()):
        args = {**base, "project": value, "labels": value, "checkpoint_retention_days": value}
        assert arg_problems("TrainingBuckets", TrainingBucketsArgs, args) == []
    # Inside a list: each entry may be an Output (`Sequence[Input[str]]`).
    tpu = {**COMPONENTS["TpuPodSlice"][2], "network_tags": ["a", output]}
    assert arg_problems("TpuPodSlice", TpuPodSliceArgs, tpu) == []


def test_an_output_where_a_plain_value_is_needed() -> None:
    args = {**COMPONENTS["A100Cluster"][2], "zone": pulumi.Output.from_input("us-central1-a")}
    assert arg_problems("A100Cluster", A100ClusterArgs, args) == [
        "A100Cluster.zone: must be a plain value, not a pulumi Output (it shapes the resources "
        "and is checked before any is registered); expected a string"
    ]


def test_unions_name_every_member() -> None:
    base = COMPONENTS["VertexTrainingJob"][2]
    args = {**base, "reduction_server": {"replica_count": 1.5}}
    assert arg_problems("VertexTrainingJob", VertexTrainingJobArgs, args) == [
        "VertexTrainingJob.reduction_server.replica_count: 1.5 is not an integer or 'auto'; "
        "valid: an integer or 'auto'"
    ]
    local = {**COMPONENTS["LocalTrainingJob"][2], "trainer": "mlp"}
    assert arg_problems("LocalTrainingJob", LocalTrainingJobArgs, local) == [
        "LocalTrainingJob.trainer: 'mlp' is not a TrainConfig or a mapping; valid: a TrainConfig "
        "or a mapping"
    ]


def test_mapping_keys_and_values() -> None:
    args = {**COMPONENTS["TrainingNetwork"][2], "labels": {5: "x", "team": ["ml"]}}
    assert arg_problems("TrainingNetwork", TrainingNetworkArgs, args) == [
        "TrainingNetwork.labels: key 5 is not a string; valid: keys that are a string",
        'TrainingNetwork.labels.team: ["ml"] is not a string; valid: a string',
    ]


def test_an_int_is_a_number_and_a_bool_is_neither() -> None:
    local = COMPONENTS["LocalTrainingJob"][2]
    assert (
        arg_problems("LocalTrainingJob", LocalTrainingJobArgs, {**local, "stop_grace_s": 60}) == []
    )
    bools = {**local, "stop_grace_s": True, "workers": False}
    assert arg_problems("LocalTrainingJob", LocalTrainingJobArgs, bools) == [
        "LocalTrainingJob.workers: false is not an integer; valid: an integer",
        "LocalTrainingJob.stop_grace_s: true is not a number; valid: a number",
    ]


def _literal_paths(td: type, value: dict[str, Any], path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Paths of the Literal-typed keys: every top-level one, and those of the nested
    TypedDicts present in `value`."""
    fields, _ = _fields(td)
    found: list[tuple[str, ...]] = []
    for key, tp in fields.items():
        members = get_args(tp) if get_origin(tp) is Union else (tp,)
        if (key in value or not path) and any(get_origin(m) is Literal for m in members):
            found.append((*path, key))
        elif key in value and isinstance(value[key], dict) and is_typeddict(tp):
            found += _literal_paths(tp, value[key], (*path, key))
    return found


LITERALS = [
    (component, path)
    for component, (_, args_type, base) in sorted(COMPONENTS.items())
    for path in _literal_paths(args_type, base, ())
]


def test_literal_cases_cover_the_components_that_take_literals() -> None:
    assert {(c, ".".join(p)) for c, p in LITERALS} >= {
        ("A100Cluster", "backend"),
        ("TpuPodSlice", "provisioning"),
        ("TrainingBuckets", "environment"),
        ("VertexTrainingJob", "accelerator_type"),
        ("VertexTrainingJob", "reduction_server.replica_count"),
    }


@pytest.mark.parametrize(
    ("component", "path"), LITERALS, ids=[f"{c}.{'.'.join(p)}" for c, p in LITERALS]
)
def test_a_value_outside_a_literal_is_refused_by_the_components_own_rule(
    component: str, path: tuple[str, ...]
) -> None:
    # The checker leaves allowed values to the component's rule (shared with the stack
    # config): it must still refuse them, naming the key, before registering anything.
    args: dict[str, Any] = {**COMPONENTS[component][2]}
    inner = args
    for key in path[:-1]:
        inner[key] = {**inner[key]}  # copied: the base arguments stay as they are
        inner = inner[key]
    inner[path[-1]] = "zz-not-allowed"
    errors, resources = _build(component, args)
    assert len(errors) == 1 and path[-1] in errors[0] and "'zz-not-allowed'" in errors[0]
    assert resources == []


# --------------------------------------------------------------------------------------
# Stack keys: the same "did you mean"
# --------------------------------------------------------------------------------------

GPU_STACK = {
    "gcp:project": "p",
    "gcp:region": "us-central1",
    "trainstack:gpu_cluster": {
        "machine_type": "a2-highgpu-8g",
        "zone": "us-central1-a",
        "node_cont": 2,
    },
}


def test_unknown_stack_keys_name_the_nearest_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config(GPU_STACK)
    assert info.value.errors == [
        "gpu_cluster.node_cont: unknown key; did you mean `node_count`? valid: backend, "
        "machine_type, node_count, zone, spot, reservation, compact_placement, "
        "tier_1_networking, flex_start, master_authorized_cidrs"
    ]
    sections = section_names()
    with pytest.raises(ConfigError) as info:
        load_stack_config({**GPU_STACK, "trainstack:bukets": {}})
    assert info.value.errors[0] == (
        f"bukets: unknown key; did you mean `buckets`? valid: {', '.join(sections)}"
    )


def test_no_suggestion_when_nothing_is_close() -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config({"trainstack:local": {"procs": 2}})
    assert info.value.errors == ["local.procs: unknown key; valid: workers, root"]


class _TupleArgs(TypedDict):
    pair: NotRequired[tuple[int, int]]


def test_an_annotation_the_checker_cannot_check_is_an_error_not_a_pass() -> None:
    with pytest.raises(TypeError, match=r"_TupleArgs\.pair: annotation tuple\[int, int\] is not"):
        arg_problems("X", _TupleArgs, {})

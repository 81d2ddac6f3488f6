"""One rule, one function, one wording: each rule's exact message through the stack config
(`trainstack plan --config-file`) and through the component's validator called directly.

Each case gives a stack file and the same values as component arguments, and the message
as a template: `{p}` is the key prefix, the stack section (`tpu.`, `vertex.`, ...) for the
stack config and empty for the component, which names its own arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components.tpu_pod_slice import tpu_pod_slice_problems, tpu_trainer_problems
from trainstack.components.training_buckets import training_buckets_problems
from trainstack.components.vertex_training_job import validate_args, vertex_training_job_problems
from trainstack.infra.cli import app
from trainstack.infra.config import load_stack_config
from trainstack.trainers.common.config import TrainConfig

runner = CliRunner()

PROJECT = {"gcp:project": "p", "gcp:region": "us-central1"}
LOCAL = {"trainstack:local": {"workers": 1}}
BUCKET_ARGS = {"project": "p", "location": "US", "deployment_name": "d", "environment": "dev"}

TPU = {
    "accelerator_type": "v4-32",
    "zone": "us-central2-b",
    "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
    "provisioning": "spot",
}
TPU_STACK = {
    "gcp:project": "p",
    "gcp:region": "us-central2",
    "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
}
TPU_ARGS = {
    "project": "p",
    "deployment_name": "d",
    "network_self_link": "projects/p/global/networks/n",
    "subnetwork_self_link": "projects/p/regions/us-central2/subnetworks/s",
    "service_account_email": "sa@p.iam.gserviceaccount.com",
    "package_uri": "gs://b/trainers/t.tar.gz",
    "checkpoint_dir": "gs://b/checkpoints",
}

VERTEX = {"machine_type": "a2-highgpu-8g", "replica_count": 4}
JOB_ARGS = {
    "project": "p",
    "region": "us-central1",
    "display_name": "d",
    "package_uri": "gs://b/trainers/t.tar.gz",
}
MACHINES = (
    "a2-highgpu-1g, a2-highgpu-2g, a2-highgpu-4g, a2-highgpu-8g, a2-megagpu-16g, "
    "a2-ultragpu-1g, a2-ultragpu-2g, a2-ultragpu-4g, a2-ultragpu-8g, a3-highgpu-8g, "
    "a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g, n1-highcpu-16, "
    "n2-highcpu-16, n1-standard-4, n1-standard-8, e2-standard-4"
)
TUNING: dict[str, Any] = {
    "metric_id": "loss",
    "goal": "MINIMIZE",
    "max_trial_count": 4,
    "parallel_trial_count": 2,
    "parameters": [
        {"parameter_id": "learning_rate", "type": "double", "min_value": 0.001, "max_value": 0.1}
    ],
}


def _param(**changes: Any) -> dict[str, Any]:
    return {**TUNING, "parameters": [{**TUNING["parameters"][0], **changes}]}


def _tpu(**changes: Any) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    section = {**TPU, **changes}
    return (
        {**TPU_STACK, "trainstack:tpu": section},
        lambda: tpu_pod_slice_problems({**TPU_ARGS, **section}),
    )


def _vertex(**changes: Any) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    section = {**VERTEX, **changes}
    return (
        {**PROJECT, "trainstack:vertex": section},
        lambda: vertex_training_job_problems({**JOB_ARGS, **section}),
    )


def _tuning(tuning: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    return _vertex(hyperparameter_tuning=tuning)


def _buckets(environment: str, **changes: Any) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    stack = {**LOCAL, "trainstack:environment": environment, "trainstack:buckets": changes}
    args = {**BUCKET_ARGS, **changes, "environment": environment}
    return stack, lambda: training_buckets_problems(args)


def _labels(labels: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    stack = {**LOCAL, "trainstack:labels": labels}
    return stack, lambda: training_buckets_problems({**BUCKET_ARGS, "labels": labels})


def _tpu_trainer(framework: str, strategy: str) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    stack = {**TPU_STACK, "trainstack:tpu": TPU}
    stack["trainstack:trainer"] = {"framework": framework, "strategy": strategy}
    return stack, lambda: tpu_trainer_problems(framework, strategy)


GRID = "valid: ALGORITHM_UNSPECIFIED, RANDOM_SEARCH"
TRAINER_KEYS = ", ".join(TrainConfig.model_fields)

# (rule, (stack file config, component validator call), stack prefix, message templates)
CASES: list[tuple[str, tuple[dict[str, Any], Callable[[], list[str]]], str, list[str]]] = [
    # --- prod buckets keep their data
    ("prod bucket", _buckets("prod", delete_data_on_destroy=True), "buckets.", ["{p}delete_data_on_destroy: true is not allowed in prod; valid: false"]),
    ("bucket retention", _buckets("dev", checkpoint_retention_days=0), "buckets.", ["{p}checkpoint_retention_days: 0 is too small; valid: >= 1"]),
    ("bucket suffix", _buckets("dev", name_suffix="-X"), "buckets.", ["{p}name_suffix: '-X' is not a valid bucket name suffix; valid: 1-16 of a-z, 0-9 and '-', not starting or ending with '-'"]),
    # --- labels
    ("label key", _labels({"Team": "ml"}), "", ["labels: 'Team' is not a valid label key; valid: a lowercase letter then up to 62 of a-z, 0-9, '_', '-'"]),
    ("label value", _labels({"team": "ML"}), "", ["labels.team: 'ML' is not a valid label value; valid: up to 63 of a-z, 0-9, '_', '-'"]),
    ("label reserved", _labels({"managed-by": "me"}), "", ["labels: 'managed-by' is reserved by trainstack; valid: a key other than component, managed-by"]),
    # --- Vertex machine and accelerators
    ("vertex machine", _vertex(machine_type="a3-edgegpu-8g"), "vertex.", [f"{{p}}machine_type: 'a3-edgegpu-8g' is not a known machine type; valid: {MACHINES}"]),
    ("vertex accelerator type", _vertex(accelerator_type="NVIDIA_A100_80GB"), "vertex.", ["{p}accelerator_type: 'NVIDIA_A100_80GB' does not match a2-highgpu-8g (A100 40GB); valid: NVIDIA_TESLA_A100"]),
    ("vertex accelerator enum", _vertex(accelerator_type="nvidia-tesla-a100"), "vertex.", ["{p}accelerator_type: 'nvidia-tesla-a100' is not allowed; valid: NVIDIA_TESLA_A100, NVIDIA_A100_80GB, NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB, NVIDIA_H200_141GB, NVIDIA_B200"]),
    ("vertex accelerator count", _vertex(accelerator_count=4), "vertex.", ["{p}accelerator_count: 4 does not match a2-highgpu-8g; valid: 8"]),
    ("vertex cpu accelerator", _vertex(machine_type="n1-standard-8", accelerator_type="NVIDIA_TESLA_A100"), "vertex.", ["{p}accelerator_type: 'NVIDIA_TESLA_A100' cannot attach to CPU machine type 'n1-standard-8'; valid: no accelerator_type (A100s come with a2-* machine types)"]),
    # --- Reduction Server
    ("reduction server gpus", _vertex(machine_type="n1-standard-8", reduction_server={"enabled": True}), "vertex.", ["{p}reduction_server.enabled: true needs GPU workers but 'n1-standard-8' has no GPUs; valid: false"]),
    ("reduction server machines", _vertex(replica_count=1, reduction_server={"enabled": True}), "vertex.", ["{p}reduction_server.enabled: true needs at least 2 worker machines ({p}replica_count is 1); valid: false"]),
    ("reduction server reducer", _vertex(reduction_server={"enabled": True, "machine_type": "a2-highgpu-1g"}), "vertex.", ["{p}reduction_server.machine_type: 'a2-highgpu-1g' is not a Reduction Server machine type; valid: n1-highcpu-16, n2-highcpu-16"]),
    ("reduction server count", _vertex(reduction_server={"enabled": True, "replica_count": 0}), "vertex.", ["{p}reduction_server.replica_count: 0 is not allowed; valid: 'auto' or an integer 1-9007199254740992"]),
    # --- hyperparameter tuning
    ("tuning parallel", _tuning({**TUNING, "parallel_trial_count": 5}), "vertex.", ["{p}hyperparameter_tuning.parallel_trial_count: 5 exceeds max_trial_count 4; valid: <= 4"]),
    ("tuning trainer key", _tuning(_param(parameter_id="lr")), "vertex.", [f"{{p}}hyperparameter_tuning.parameters[0].parameter_id: 'lr' is not a trainer key; valid: {TRAINER_KEYS}"]),
    ("tuning range", _tuning(_param(min_value=0.1, max_value=0.01)), "vertex.", ["{p}hyperparameter_tuning.parameters[0].min_value: 0.1 is not below max_value 0.01; valid: min_value < max_value"]),
    ("tuning range missing", _tuning(_param(max_value=None)), "vertex.", ["{p}hyperparameter_tuning.parameters[0].max_value: required for a double parameter; valid: a number"]),
    ("tuning whole numbers", _tuning(_param(parameter_id="steps", type="integer", min_value=1.5, max_value=10.0)), "vertex.", ["{p}hyperparameter_tuning.parameters[0].min_value: 1.5 is not a whole number; valid: an integer"]),
    ("tuning values", _tuning({**TUNING, "parameters": [{"parameter_id": "model", "type": "categorical"}]}), "vertex.", ["{p}hyperparameter_tuning.parameters[0].values: required for a categorical parameter; valid: a list of strings"]),
    ("tuning increasing", _tuning({**TUNING, "parameters": [{"parameter_id": "learning_rate", "type": "discrete", "values": [0.5, 0.1]}]}), "vertex.", ["{p}hyperparameter_tuning.parameters[0].values: [0.5, 0.1] is not increasing numbers; valid: numbers in increasing order"]),
    ("tuning categorical scale", _tuning({**TUNING, "parameters": [{"parameter_id": "model", "type": "categorical", "values": ["mlp"], "scale_type": "UNIT_LOG_SCALE"}]}), "vertex.", ["{p}hyperparameter_tuning.parameters[0].scale_type: not used by a categorical parameter; valid: leave it out"]),
    ("tuning grid", _tuning({**TUNING, "algorithm": "GRID_SEARCH"}), "vertex.", [f"{{p}}hyperparameter_tuning.algorithm: 'GRID_SEARCH' cannot search double parameter 'learning_rate'; {GRID}"]),
    ("tuning goal", _tuning({**TUNING, "goal": "LOWER"}), "vertex.", ["{p}hyperparameter_tuning.goal: 'LOWER' is not allowed; valid: MAXIMIZE, MINIMIZE"]),
    ("tuning measurement", _tuning({**TUNING, "measurement_selection_type": "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"}), "vertex.", ["{p}hyperparameter_tuning.measurement_selection_type: 'MEASUREMENT_SELECTION_TYPE_UNSPECIFIED' is not allowed; valid: BEST_MEASUREMENT, LAST_MEASUREMENT"]),
    # --- TPU reservations and provisioning
    ("tpu reservation", _tpu(reservation="r1"), "tpu.", ["{p}reservation: 'r1' needs provisioning 'queued': a TPU VM created directly ('spot') can only consume any matching reservation, not name one; valid: provisioning queued, or provisioning reserved without {p}reservation"]),
    ("tpu reserved reservation", _tpu(provisioning="reserved", reservation="r1"), "tpu.", ["{p}reservation: 'r1' needs provisioning 'queued': a TPU VM created directly ('reserved') can only consume any matching reservation, not name one; valid: provisioning queued, or provisioning reserved without {p}reservation"]),
    ("tpu reservation name", _tpu(provisioning="queued", reservation="Res 1"), "tpu.", ["{p}reservation: 'Res 1' is not a reservation name; valid: a name, projects/P/locations/ZONE/reservations/R, or '-' (any reservation)"]),
    # --- what a TPU slice runs
    ("tpu framework", _tpu_trainer("torch", "ddp"), "trainer.", ["{p}framework: 'torch' is not supported on a tpu target (TPU runs the tensorflow trainer with TPUStrategy); valid: tensorflow"]),
    ("tpu strategy", _tpu_trainer("tensorflow", "mirrored"), "trainer.", ["{p}strategy: 'mirrored' is not supported on a tpu target; valid: tpu"]),
]  # fmt: skip


def _plan_errors(tmp_path: Path, config: dict[str, Any]) -> list[str]:
    path = tmp_path / "Pulumi.rules.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2, result.output
    # One `error:` line per problem, each naming the stack; the problems themselves are
    # compared exactly by the callers.
    lines = result.stderr.splitlines()
    errors = [line.removeprefix("error: stack 'rules': ") for line in lines]
    assert lines == [f"error: stack 'rules': {e}" for e in errors]
    return errors


@pytest.mark.parametrize(
    ("case", "prefix", "messages"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_one_message_through_the_stack_and_the_component(
    tmp_path: Path,
    case: tuple[dict[str, Any], Callable[[], list[str]]],
    prefix: str,
    messages: list[str],
) -> None:
    stack, component = case
    assert _plan_errors(tmp_path, stack) == [m.format(p=prefix) for m in messages]
    assert component() == [m.format(p="") for m in messages]


def test_an_unknown_provisioning_names_what_each_backend_takes(tmp_path: Path) -> None:
    # The stack section serves both TPU backends (flex-start is gke's, queued tpu_vm's); the
    # slice component is the tpu_vm backend alone, so each lists what it takes.
    stack, component = _tpu(provisioning="cheap")
    assert _plan_errors(tmp_path, stack) == [
        "tpu.provisioning: 'cheap' is not allowed; valid: on-demand, spot, queued, reserved, "
        "flex-start"
    ]
    assert component() == [
        "provisioning: 'cheap' is not allowed; valid: on-demand, spot, queued, reserved"
    ]


def test_a2_machines_need_no_accelerator_keys() -> None:
    """The machine type fixes an A2 machine's GPUs: the keys are optional, and the same
    job comes out with or without them."""
    plain = load_stack_config({**PROJECT, "trainstack:vertex": VERTEX}).vertex
    given = load_stack_config(
        {
            **PROJECT,
            "trainstack:vertex": {
                **VERTEX,
                "accelerator_type": "NVIDIA_TESLA_A100",
                "accelerator_count": 8,
            },
        }
    ).vertex
    assert plain is not None and given is not None
    assert (plain.gpus_per_replica, given.gpus_per_replica) == (8, 8)
    assert validate_args({**JOB_ARGS, **VERTEX}) == 0
    assert vertex_training_job_problems({**JOB_ARGS, **given.job_args()}) == []

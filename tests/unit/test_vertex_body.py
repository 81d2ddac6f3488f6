"""Vertex REST bodies: every option combination validates against aiplatform.v1."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components import catalog
from trainstack.components._discovery import validate_body
from trainstack.components._pod_setup import POD_SCRIPT
from trainstack.components.vertex_training_job import (
    DEFAULT_EXECUTOR_IMAGE,
    REQUEST_ID_LABEL,
    job_body,
    reduction_server_image,
    validate_args,
)
from trainstack.trainers.common.config import TrainConfig

PKG = "gs://stage/trainers/trainstack_trainers-0123456789abcdef.tar.gz"
# Every GPU replica is told how many GPUs it must find (trainstack.trainers.node exits 5 on fewer).
GPUS_8 = {"name": "TRAINSTACK_EXPECTED_ACCELERATORS", "value": "8"}
BASE: dict[str, Any] = {
    "project": "p",
    "region": "us-central1",
    "display_name": "exp-42",
    "machine_type": "a2-highgpu-8g",
    "accelerator_type": "NVIDIA_TESLA_A100",
    "accelerator_count": 8,
    "replica_count": 1,
    "package_uri": PKG,
    "trainer_args": ["--steps=100"],
}
LABELS = {"component": "vertex-training-job", "managed-by": "trainstack"}
TUNING: dict[str, Any] = {
    "metric_id": "loss",
    "goal": "MINIMIZE",
    "max_trial_count": 8,
    "parallel_trial_count": 2,
    "parameters": [
        {
            "parameter_id": "learning_rate",
            "type": "double",
            "min_value": 1e-4,
            "max_value": 1e-1,
            "scale_type": "UNIT_LOG_SCALE",
        },
        {"parameter_id": "grad_accum_steps", "type": "integer", "min_value": 1, "max_value": 4},
        {"parameter_id": "model", "type": "categorical", "values": ["mlp", "cnn"]},
        {
            "parameter_id": "global_batch_size",
            "type": "discrete",
            "values": [64, 128, 256],
            "scale_type": "UNIT_LINEAR_SCALE",
        },
    ],
}


def body_for(**overrides: Any) -> dict[str, Any]:
    args = {**BASE, **overrides}
    reducers = validate_args(args)
    resolved = {
        k: args[k]
        for k in ("package_uri", "service_account", "base_output_dir")
        if args.get(k) is not None
    }
    return job_body(args, reducers, labels=dict(LABELS), **resolved)


CASES: dict[str, dict[str, Any]] = {
    "chief-only": {},
    "chief+workers": {"replica_count": 4},
    "rs-one-reducer": {"replica_count": 2, "reduction_server": {"replica_count": 1}},
    "rs-auto": {"replica_count": 4, "reduction_server": {"replica_count": "auto"}},
    "spot+timeout": {"spot": True, "timeout_s": 86400, "restart_job_on_worker_restart": True},
    "container": {
        "package_uri": None,
        "container_image_uri": "us-docker.pkg.dev/p/r/t:1",
        "container_command": [
            "python",
            "-m",
            "trainstack.trainers.node",
            "trainstack.trainers.torch_ddp",
        ],
    },
    "ultragpu": {
        "machine_type": "a2-ultragpu-4g",
        "accelerator_type": "NVIDIA_A100_80GB",
        "accelerator_count": 4,
        "replica_count": 2,
    },
    "cpu": {"machine_type": "n1-standard-8", "accelerator_type": None, "accelerator_count": None},
    "identity+output": {
        "service_account": "sa@p.iam.gserviceaccount.com",
        "base_output_dir": "gs://ckpt",
    },
    "hp-tuning": {"hyperparameter_tuning": TUNING, "replica_count": 2},
    "hp-grid": {
        "hyperparameter_tuning": {
            **TUNING,
            "algorithm": "GRID_SEARCH",
            "parameters": TUNING["parameters"][1:],
        }
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bodies_validate_against_discovery(case: str) -> None:
    body = body_for(**CASES[case])
    schema = "HyperparameterTuningJob" if "studySpec" in body else "CustomJob"
    assert validate_body("aiplatform.v1", schema, body) == []


def test_chief_only_body_is_exact() -> None:
    body = body_for()
    rid = body["labels"][REQUEST_ID_LABEL]
    assert len(rid) == 32
    assert body == {
        "displayName": "exp-42",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a2-highgpu-8g",
                        "acceleratorType": "NVIDIA_TESLA_A100",
                        "acceleratorCount": 8,
                    },
                    "replicaCount": "1",
                    "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100},
                    # The torch image from Docker Hub; the setup script installs the package
                    # into its python3, then one node launcher per replica runs torchrun.
                    "containerSpec": {
                        "imageUri": DEFAULT_EXECUTOR_IMAGE,
                        "command": ["bash", "-c", POD_SCRIPT, "trainstack-pod"],
                        "args": [
                            "python3",
                            "-m",
                            "trainstack.trainers.node",
                            "trainstack.trainers.torch_ddp",
                            "--steps=100",
                        ],
                        "env": [GPUS_8, {"name": "TRAINSTACK_PACKAGE_URI", "value": PKG}],
                    },
                }
            ],
            "scheduling": {"strategy": "STANDARD", "restartJobOnWorkerRestart": False},
        },
        "labels": {**LABELS, REQUEST_ID_LABEL: rid},
    }
    assert body_for() == body  # deterministic


def test_reduction_server_pools() -> None:
    pools = body_for(**CASES["rs-auto"])["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "3", "13"]
    assert pools[2] == {
        "machineSpec": {"machineType": "n1-highcpu-16"},
        "replicaCount": "13",
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
        },
    }
    for pool in pools[:2]:
        spec = pool["containerSpec"]
        assert spec["args"][3:] == [
            "trainstack.trainers.torch_ddp",
            "--steps=100",
            "--bucket_cap_mb=64",
        ]
        assert spec["env"] == [
            {"name": "NCCL_DEBUG", "value": "INFO"},
            GPUS_8,
            {"name": "TRAINSTACK_PACKAGE_URI", "value": PKG},
        ]
    one = body_for(**CASES["rs-one-reducer"])["jobSpec"]["workerPoolSpecs"]
    assert one[2]["replicaCount"] == "1"
    # Reduction Server needs 2 or more machines, but the builder keeps Vertex's pool order
    # for any later pool: an empty pool 1 when the chief is the only worker.
    chief_only = job_body(
        {**BASE, "reduction_server": {"replica_count": 1}},
        1,
        labels=dict(LABELS),
        package_uri=PKG,
    )
    assert validate_body("aiplatform.v1", "CustomJob", chief_only) == []
    pools = chief_only["jobSpec"]["workerPoolSpecs"]
    assert pools[1] == {} and pools[2]["replicaCount"] == "1"
    explicit = body_for(
        replica_count=2, trainer_args=["--bucket_cap_mb=32"], reduction_server={"replica_count": 1}
    )
    assert explicit["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"][3:] == [
        "trainstack.trainers.torch_ddp",
        "--bucket_cap_mb=32",
    ]


def test_spot_container_and_tuning_fields() -> None:
    sched = body_for(**CASES["spot+timeout"])["jobSpec"]["scheduling"]
    assert sched == {"strategy": "SPOT", "restartJobOnWorkerRestart": True, "timeout": "86400s"}
    pool = body_for(**CASES["container"])["jobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"] == {
        "imageUri": "us-docker.pkg.dev/p/r/t:1",
        "command": ["python", "-m", "trainstack.trainers.node", "trainstack.trainers.torch_ddp"],
        "args": ["--steps=100"],
        "env": [GPUS_8],
    }
    hp = body_for(**CASES["hp-tuning"])
    assert hp["studySpec"] == {
        "metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
        "parameters": [
            {
                "parameterId": "learning_rate",
                "doubleValueSpec": {"minValue": 1e-4, "maxValue": 0.1},
                "scaleType": "UNIT_LOG_SCALE",
            },
            {
                "parameterId": "grad_accum_steps",
                "integerValueSpec": {"minValue": "1", "maxValue": "4"},
                # Unset: linear, as Google's SDK requires and sends (LINEAR_BY_DEFAULT).
                "scaleType": "UNIT_LINEAR_SCALE",
            },
            {"parameterId": "model", "categoricalValueSpec": {"values": ["mlp", "cnn"]}},
            {
                "parameterId": "global_batch_size",
                "discreteValueSpec": {"values": [64.0, 128.0, 256.0]},
                "scaleType": "UNIT_LINEAR_SCALE",
            },
        ],
        "algorithm": "ALGORITHM_UNSPECIFIED",
        # Google's SDK sends BEST_MEASUREMENT; unset, Vertex would use the last measurement.
        "measurementSelectionType": "BEST_MEASUREMENT",
    }
    assert (hp["maxTrialCount"], hp["parallelTrialCount"], hp["maxFailedTrialCount"]) == (8, 2, 0)
    env = hp["trialJobSpec"]["workerPoolSpecs"][1]["containerSpec"]["env"]
    assert env == [
        GPUS_8,
        {"name": "TRAINSTACK_HYPERTUNE_METRIC", "value": "loss"},
        {"name": "TRAINSTACK_PACKAGE_URI", "value": PKG},
    ]


def test_tuning_takes_the_last_measurement_only_when_asked() -> None:
    tuning = {**TUNING, "measurement_selection_type": "LAST_MEASUREMENT"}
    body = body_for(hyperparameter_tuning=tuning, replica_count=2)
    assert body["studySpec"]["measurementSelectionType"] == "LAST_MEASUREMENT"
    assert validate_body("aiplatform.v1", "HyperparameterTuningJob", body) == []


def test_each_trainer_runs_on_its_framework_image_through_the_node_launcher() -> None:
    torch = body_for(replica_count=2)["jobSpec"]["workerPoolSpecs"]
    tf = body_for(
        replica_count=2,
        python_module="trainstack.trainers.tf_multiworker",
        trainer_args=["--framework=tensorflow", "--strategy=multi_worker_mirrored"],
    )["jobSpec"]["workerPoolSpecs"]
    command = ["bash", "-c", POD_SCRIPT, "trainstack-pod"]
    for pool in torch:
        assert pool["containerSpec"] == {
            "imageUri": "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime",
            "command": command,
            "args": [
                "python3",
                "-m",
                "trainstack.trainers.node",
                "trainstack.trainers.torch_ddp",
                "--steps=100",
            ],
            "env": [GPUS_8, {"name": "TRAINSTACK_PACKAGE_URI", "value": PKG}],
        }
    for pool in tf:
        assert pool["containerSpec"] == {
            "imageUri": "tensorflow/tensorflow:2.17.0-gpu",
            "command": command,
            "args": [
                "python3",
                "-m",
                "trainstack.trainers.node",
                "trainstack.trainers.tf_multiworker",
                "--framework=tensorflow",
                "--strategy=multi_worker_mirrored",
            ],
            # The setup script installs tf-keras at the image's TensorFlow minor.
            "env": [
                GPUS_8,
                {"name": "TRAINSTACK_PACKAGE_URI", "value": PKG},
                {"name": "TRAINSTACK_TF_KERAS", "value": "1"},
            ],
        }
    # Any image you name runs the bundled trainer through the same setup script.
    named = body_for(container_image_uri="us-docker.pkg.dev/p/r/torch:1")
    spec = named["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert (spec["imageUri"], spec["command"]) == ("us-docker.pkg.dev/p/r/torch:1", command)
    assert spec["args"] == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "trainstack.trainers.torch_ddp",
        "--steps=100",
    ]
    # A prebuilt image named as executor_image_uri still runs from pythonPackageSpec.
    given = body_for(executor_image_uri=catalog.PYTORCH_GPU_IMAGES["2.1"])
    spec = given["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert spec["executorImageUri"] == catalog.PYTORCH_GPU_IMAGES["2.1"]


def test_invalid_bodies_give_exact_errors() -> None:
    body = body_for(replica_count=2)
    body["jobSpec"]["workerPoolSpecs"][1]["replicaCount"] = 1
    body["jobSpec"]["scheduling"]["strategy"] = "PREEMPTIBLE"
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "A100"
    errors = validate_body("aiplatform.v1", "CustomJob", body)
    assert errors[1] == (
        "jobSpec.workerPoolSpecs[1].replicaCount: expected int64 as a decimal "
        "JSON string, got integer 1"
    )
    assert errors[0].startswith(
        "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType: 'A100' is not one of "
        "ACCELERATOR_TYPE_UNSPECIFIED, "
    )
    assert errors[2] == (
        "jobSpec.scheduling.strategy: 'PREEMPTIBLE' is not one of "
        "STRATEGY_UNSPECIFIED, ON_DEMAND, LOW_COST, STANDARD, SPOT, FLEX_START"
    )
    hp = body_for(**CASES["hp-tuning"])
    hp["studySpec"]["parameters"][1]["integerValueSpec"]["minValue"] = 1
    hp["studySpec"]["metrics"][0]["goal"] = "LOWER"
    assert validate_body("aiplatform.v1", "HyperparameterTuningJob", hp) == [
        "studySpec.metrics[0].goal: 'LOWER' is not one of GOAL_TYPE_UNSPECIFIED, MAXIMIZE, "
        "MINIMIZE",
        "studySpec.parameters[1].integerValueSpec.minValue: expected int64 as a decimal JSON "
        "string, got integer 1",
    ]


@pytest.mark.parametrize(
    ("machine", "replicas", "expected"),
    [
        ("a2-highgpu-8g", 5, 16),  # Google: 5 x 100 Gbps workers -> 16 x n1-highcpu-16
        ("a2-megagpu-16g", 8, 25),  # Google: 8 x a2-megagpu-16g -> 25
        ("a2-highgpu-8g", 4, 13),
        ("a2-highgpu-1g", 1, 1),
    ],
)
def test_reducer_sizing(machine: str, replicas: int, expected: int) -> None:
    assert catalog.reducers_needed(machine, replicas) == expected
    gpus = catalog.MACHINES[machine].gpus
    model = catalog.MACHINES[machine].gpu_model
    assert model is not None
    args = {
        "machine_type": machine,
        "accelerator_count": gpus,
        "replica_count": replicas,
        "accelerator_type": catalog.GPU_ACCELERATOR_NAMES[model].vertex,
        "reduction_server": {"replica_count": "auto"},
    }
    if replicas < 2:
        with pytest.raises(ValueError) as info:
            body_for(**args)
        assert str(info.value) == (
            "reduction_server.enabled: true needs at least 2 worker machines (replica_count "
            f"is {replicas}); valid: false"
        )
        return
    body = body_for(**args)
    assert body["jobSpec"]["workerPoolSpecs"][2]["replicaCount"] == str(expected)


def test_a2_accelerators_come_from_the_machine() -> None:
    derived = body_for(accelerator_type=None, accelerator_count=None)
    given = body_for()
    assert derived == given
    spec = derived["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]
    assert spec == {
        "machineType": "a2-highgpu-8g",
        "acceleratorType": "NVIDIA_TESLA_A100",
        "acceleratorCount": 8,
    }
    ultra = body_for(machine_type="a2-ultragpu-2g", accelerator_type=None, accelerator_count=None)
    assert ultra["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] == {
        "machineType": "a2-ultragpu-2g",
        "acceleratorType": "NVIDIA_A100_80GB",
        "acceleratorCount": 2,
    }


MACHINES = (
    "a2-highgpu-1g, a2-highgpu-2g, a2-highgpu-4g, a2-highgpu-8g, a2-megagpu-16g, "
    "a2-ultragpu-1g, a2-ultragpu-2g, a2-ultragpu-4g, a2-ultragpu-8g, a3-highgpu-8g, "
    "a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g, n1-highcpu-16, "
    "n2-highcpu-16, n1-standard-4, n1-standard-8, e2-standard-4"
)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {
                "machine_type": "n1-standard-8",
                "accelerator_type": None,
                "accelerator_count": None,
                "replica_count": 2,
                "reduction_server": {"replica_count": 1},
            },
            "reduction_server.enabled: true needs GPU workers but 'n1-standard-8' has no GPUs; "
            "valid: false",
        ),
        (
            {
                "machine_type": "cloud-tpu",
                "accelerator_type": "TPU_V3",
                "accelerator_count": 8,
                "reduction_server": {"replica_count": 1},
            },
            f"machine_type: 'cloud-tpu' is not a known machine type; valid: {MACHINES}",
        ),
        (
            {"replica_count": 2, "reduction_server": {"replica_count": 0}},
            "reduction_server.replica_count: 0 is not allowed; valid: 'auto' or an integer 1-9007199254740992",
        ),
        (
            {
                "replica_count": 2,
                "reduction_server": {"replica_count": 1, "machine_type": "e2-standard-4"},
            },
            "reduction_server.machine_type: 'e2-standard-4' is not a Reduction Server machine "
            "type; valid: n1-highcpu-16, n2-highcpu-16",
        ),
        (
            {"reduction_server": {"replica_count": 1}},
            "reduction_server.enabled: true needs at least 2 worker machines (replica_count is "
            "1); valid: false",
        ),
        ({"replica_count": 0}, "replica_count: 0 is too small; valid: >= 1"),
        (
            {"region": "mars-1", "replica_count": 2, "reduction_server": {"replica_count": 1}},
            "region: 'mars-1' has no known nearest Artifact Registry multi-region; valid: "
            "africa-*, asia-*, australia-*, europe-*, me-*, northamerica-*, southamerica-*, us-*",
        ),
        (
            {"accelerator_type": "NVIDIA_A100_80GB"},
            "accelerator_type: 'NVIDIA_A100_80GB' does not match a2-highgpu-8g (A100 40GB); "
            "valid: NVIDIA_TESLA_A100",
        ),
        (
            {"machine_type": "a2-ultragpu-8g"},
            "accelerator_type: 'NVIDIA_TESLA_A100' does not match a2-ultragpu-8g (A100 80GB); "
            "valid: NVIDIA_A100_80GB",
        ),
        (
            {"accelerator_count": 4},
            "accelerator_count: 4 does not match a2-highgpu-8g; valid: 8",
        ),
        (
            {"machine_type": "n1-standard-8"},
            "accelerator_type: 'NVIDIA_TESLA_A100' cannot attach to CPU machine type "
            "'n1-standard-8'; valid: no accelerator_type (A100s come with a2-* machine types)\n"
            "accelerator_count: 8 cannot attach to CPU machine type 'n1-standard-8'; valid: no "
            "accelerator_count",
        ),
        (
            {"container_image_uri": "x", "executor_image_uri": "y"},
            "container_image_uri: executor_image_uri names a prebuilt image for "
            "pythonPackageSpec; valid: one of container_image_uri or executor_image_uri",
        ),
        (
            {
                "hyperparameter_tuning": {
                    **TUNING,
                    "parameters": [
                        {"parameter_id": "lr", "type": "double", "min_value": 0.1, "max_value": 1.0}
                    ],
                }
            },
            "hyperparameter_tuning.parameters[0].parameter_id: 'lr' is not a trainer key; "
            f"valid: {', '.join(TrainConfig.model_fields)}",
        ),
        (
            {"hyperparameter_tuning": {**TUNING, "algorithm": "GRID_SEARCH"}},
            "hyperparameter_tuning.algorithm: 'GRID_SEARCH' cannot search double parameter "
            "'learning_rate'; valid: ALGORITHM_UNSPECIFIED, RANDOM_SEARCH",
        ),
        (
            {"hyperparameter_tuning": {**TUNING, "parallel_trial_count": 9}},
            "hyperparameter_tuning.parallel_trial_count: 9 exceeds max_trial_count 8; valid: <= 8",
        ),
    ],
)
def test_validation_messages(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_args({**BASE, **overrides})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("region", "multi"),
    [
        ("us-central1", "us"),
        ("northamerica-northeast1", "us"),
        ("europe-west4", "europe"),
        ("me-west1", "europe"),
        ("asia-southeast1", "asia"),
        ("australia-southeast1", "asia"),
    ],
)
def test_reduction_server_image_nearest_multi_region(region: str, multi: str) -> None:
    assert reduction_server_image(region) == (
        f"{multi}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    )

"""KubernetesTrainingJob under Pulumi mocks: the Indexed Job, headless Service and Workload
Identity ServiceAccount, exactly as registered, and valid for the Kubernetes versions the
A100 cluster runs (kubernetes-validate, strict schemas)."""

from __future__ import annotations

import contextlib
from typing import Any

import kubernetes_validate
import pulumi
import pytest
from pulumi_gcp import storage

from components.a100_cluster import KUBERNETES_VERSION, MIN_KUBERNETES_VERSION
from components.gpu_startup import container_command, render_launcher
from components.kubernetes_training_job import (
    DEFAULT_IMAGES,
    TOKEN,
    KubernetesTrainingJob,
    manifests,
    validate_args,
)
from infra.mocks import SECRET, ProgramRun, run_program

PACKAGE_URI = "gs://acme-ml-exp-42-staging/trainers/trainstack_trainers-0123456789abcdef.tar.gz"
CHECKPOINTS = "gs://acme-ml-exp-42-checkpoints"
GSA = "exp-42-train@acme-ml.iam.gserviceaccount.com"
JOB = "exp-42-train"
SA_TYPE = "kubernetes:core/v1:ServiceAccount"
SERVICE_TYPE = "kubernetes:core/v1:Service"
JOB_TYPE = "kubernetes:batch/v1:Job"
IAM_TYPE = "gcp:serviceaccount/iAMMember:IAMMember"
LABELS = {"component": "kubernetes-training-job", "managed-by": "trainstack", "team": "ml"}
VERSIONS = (
    ".".join(map(str, MIN_KUBERNETES_VERSION)),
    KUBERNETES_VERSION,
    kubernetes_validate.latest_version(),
)

BASE: dict[str, Any] = {
    "job_name": JOB,
    "node_count": 4,
    "gpus_per_node": 8,
    "package_uri": PACKAGE_URI,
    "trainer_args": ["--steps=100"],
    "checkpoint_url": CHECKPOINTS,
    "project": "acme-ml",
    "gcp_service_account_email": GSA,
    "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
    "labels": {"team": "ml", "odd": "_x"},
}


def _run(opts: pulumi.ResourceOptions | None = None, **overrides: Any) -> ProgramRun:
    args = {**BASE, **overrides}
    for key in [k for k, v in args.items() if v is None]:
        del args[key]

    def program() -> dict[str, Any]:
        job = KubernetesTrainingJob("train", args, opts=opts)  # type: ignore[arg-type]
        return {
            "job_name": job.job_name,
            "namespace": job.namespace,
            "service_name": job.service_name,
            "service_account_name": job.service_account_name,
        }

    return run_program(program)


def _launcher(**overrides: Any) -> str:
    values: dict[str, Any] = {
        "platform": "gke",
        "package_uri": PACKAGE_URI,
        "module": "trainers.torch_ddp",
        "trainer_args": ["--steps=100", f"--checkpoint_dir={CHECKPOINTS}/checkpoints"],
        "num_nodes": 4,
        "procs_per_node": 8,
        "coordinator": f"{JOB}-0.{JOB}",
        **overrides,
    }
    return render_launcher(**values)


def _integers(value: Any) -> Any:
    """Recorded inputs carry numbers as floats (protobuf Struct); Kubernetes wants ints."""
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


EXPECTED_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": JOB,
        "namespace": "default",
        "labels": LABELS,
        "annotations": {
            "pulumi.com/deletionPropagationPolicy": "foreground",
            "pulumi.com/skipAwait": "true",
        },
    },
    "spec": {
        "completionMode": "Indexed",
        "completions": 4,
        "parallelism": 4,
        "backoffLimitPerIndex": 3,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {
                    "action": "Ignore",
                    "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]},
                },
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "trainer",
                        "operator": "In",
                        "values": [1, 2],
                    },
                },
            ]
        },
        "template": {
            "metadata": {
                "labels": {
                    **LABELS,
                    "app.kubernetes.io/name": "trainstack-trainer",
                    "app.kubernetes.io/instance": JOB,
                }
            },
            "spec": {
                "restartPolicy": "Never",
                "subdomain": JOB,
                "serviceAccountName": JOB,
                "terminationGracePeriodSeconds": 60,
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {
                                    "matchLabels": {"app.kubernetes.io/instance": JOB}
                                },
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
                "volumes": [
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
                ],
                "containers": [
                    {
                        "name": "trainer",
                        "image": "pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime",
                        "command": ["bash", "-c", "<launcher>", "trainstack-launch"],
                        "env": [
                            {"name": "JOB_NAME", "value": JOB},
                            {"name": "TRAINSTACK_HEADLESS_SERVICE", "value": JOB},
                            {"name": "TRAINSTACK_NUM_NODES", "value": "4"},
                        ],
                        "ports": [
                            {"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"}
                        ],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }
                ],
            },
        },
    },
}


def _job(run: ProgramRun) -> dict[str, Any]:
    job = _integers(run.named("train-job").inputs)
    container = job["spec"]["template"]["spec"]["containers"][0]
    launcher = container["command"][2]
    container["command"][2] = "<launcher>"
    job["launcher"] = launcher
    return job


def test_children_outputs_and_dependencies() -> None:
    run = _run()
    assert sorted((r.type, r.name, str(r.parent)) for r in run.resources) == sorted(
        [
            (TOKEN, "train", "None"),
            (SA_TYPE, "train-ksa", "train"),
            (IAM_TYPE, "train-wi", "train"),
            (SERVICE_TYPE, "train-service", "train"),
            (JOB_TYPE, "train-job", "train"),
        ]
    )
    assert run.outputs == {
        "job_name": JOB,
        "namespace": "default",
        "service_name": JOB,
        "service_account_name": JOB,
    }
    urns = {r.name: r.urn for r in run.resources}
    job = run.named("train-job")
    assert set(job.dependencies) == {urns["train-ksa"], urns["train-service"], urns["train-wi"]}
    assert job.delete_before_replace
    assert not any(r.delete_before_replace for r in run.resources if r.name != "train-job")


def test_job_manifest() -> None:
    job = _job(_run())
    assert job.pop("launcher") == _launcher()
    assert job == EXPECTED_JOB


def test_service_account_and_workload_identity() -> None:
    run = _run()
    assert run.named("train-ksa").inputs == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": JOB,
            "namespace": "default",
            "labels": LABELS,
            "annotations": {"iam.gke.io/gcp-service-account": GSA},
        },
    }
    assert run.named("train-wi").inputs == {
        "serviceAccountId": f"projects/acme-ml/serviceAccounts/{GSA}",
        "role": "roles/iam.workloadIdentityUser",
        "member": f"serviceAccount:acme-ml.svc.id.goog[default/{JOB}]",
    }


def test_headless_service() -> None:
    assert _integers(_run().named("train-service").inputs) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": JOB, "namespace": "default", "labels": LABELS},
        "spec": {
            "clusterIP": "None",
            "selector": {"app.kubernetes.io/instance": JOB},
            "publishNotReadyAddresses": True,
            "ports": [
                {"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}
            ],
        },
    }


def test_without_google_account_there_is_no_binding() -> None:
    run = _run(gcp_service_account_email=None, project=None)
    assert IAM_TYPE not in {r.type for r in run.resources}
    assert "annotations" not in run.named("train-ksa").inputs["metadata"]
    assert set(run.named("train-job").dependencies) == {
        run.named("train-ksa").urn,
        run.named("train-service").urn,
    }


def test_wait_for_completion_drops_skip_await() -> None:
    job = _job(_run(wait_for_completion=True, timeout_s=7200))
    assert job["metadata"]["annotations"] == {"pulumi.com/deletionPropagationPolicy": "foreground"}


def test_options_shape_the_pod() -> None:
    job = _job(
        _run(
            namespace="training",
            trainer_module="trainers.tf_multiworker",
            image="us-docker.pkg.dev/acme/train/tf:1",
            backoff_limit_per_index=6,
            active_deadline_s=86400,
            shm_size_gib=64,
            termination_grace_period_s=120,
            port=23456,
            env={"NCCL_DEBUG": "INFO"},
            tolerations=[],
        )
    )
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert job["launcher"] == _launcher(
        module="trainers.tf_multiworker", procs_per_node=1, coordinator_port=23456
    )
    assert job["metadata"]["namespace"] == "training"
    assert (spec["backoffLimitPerIndex"], spec["activeDeadlineSeconds"]) == (6, 86400)
    assert pod["terminationGracePeriodSeconds"] == 120
    assert pod["tolerations"] == []
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert container["image"] == "us-docker.pkg.dev/acme/train/tf:1"
    assert container["ports"] == [{"name": "rendezvous", "containerPort": 23456, "protocol": "TCP"}]
    assert container["env"] == [
        {"name": "JOB_NAME", "value": JOB},
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "TRAINSTACK_HEADLESS_SERVICE", "value": JOB},
        {"name": "TRAINSTACK_NUM_NODES", "value": "4"},
    ]


def test_default_image_follows_the_trainer_module() -> None:
    job = _job(_run(trainer_module="trainers.tf_multiworker"))
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == DEFAULT_IMAGES["trainers.tf_multiworker"] == "tensorflow/tensorflow:2.17.0-gpu"


def test_children_inherit_the_components_depends_on() -> None:
    def program() -> None:
        pool = storage.Bucket("pool", location="US")
        KubernetesTrainingJob("train", BASE, opts=pulumi.ResourceOptions(depends_on=[pool]))  # type: ignore[arg-type]

    run = run_program(program)
    pool = run.named("pool").urn
    for child in ("train-ksa", "train-wi", "train-service", "train-job"):
        assert pool in run.named(child).dependencies, child


def test_labels_that_kubernetes_rejects_stay_off() -> None:
    # `odd: _x` is a valid GCP label value but not a Kubernetes one.
    run = _run()
    assert run.named("train-service").inputs["metadata"]["labels"] == LABELS


@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_validate_for_the_cluster_versions(version: str) -> None:
    run = _run(active_deadline_s=3600)
    for name in ("train-ksa", "train-service", "train-job"):
        kubernetes_validate.validate(_integers(run.named(name).inputs), version, strict=True)
    plain = manifests(
        job_name=JOB,
        node_count=2,
        gpus_per_node=16,
        image="img:1",
        launcher="true",
        labels={"team": "ml"},
        node_selector={"a": "b"},
        active_deadline_s=60,
        env={"X": "1"},
    )
    for obj in plain.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_validation_catches_a_misspelled_field() -> None:
    # The strict schemas reject unknown fields, so the check above is not vacuous.
    job = _integers(_run().named("train-job").inputs)
    job["spec"]["backofLimitPerIndex"] = job["spec"].pop("backoffLimitPerIndex")
    with pytest.raises(kubernetes_validate.ValidationError, match="backofLimitPerIndex"):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_container_command_shape() -> None:
    assert container_command("echo hi") == ["bash", "-c", "echo hi", "trainstack-launch"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"job_name": "Exp_42"}, "job_name: 'Exp_42' is not a DNS label; expected a lowercase letter, then a-z, 0-9 or '-', ending with a letter or digit"),
        ({"job_name": "j" * 62, "node_count": 10}, f"job_name: '{'j' * 62}' is too long for 10 nodes: pod host name '{'j' * 62}-9' has 64 characters; expected at most 63"),
        ({"node_count": 0}, "node_count: 0 is not an integer >= 1"),
        ({"gpus_per_node": "8"}, "gpus_per_node: '8' is not an integer >= 1"),
        ({"namespace": "Team"}, "namespace: 'Team' is not a DNS label"),
        ({"trainer_module": "my.trainer"}, "image: required for trainer_module 'my.trainer'; default images exist for trainers.torch_ddp, trainers.tf_multiworker"),
        ({"trainer_module": "not a module"}, "trainer_module: 'not a module' is not a Python module name"),
        ({"trainer_args": "--steps=1"}, "trainer_args: '--steps=1' is not a list of strings"),
        ({"image": " "}, "image: ' ' is not an image reference"),
        ({"backoff_limit_per_index": 0}, "backoff_limit_per_index: 0 is not an integer >= 1"),
        ({"port": 0}, "port: 0 is not a TCP port (1-65535)"),
        ({"wait_for_completion": True}, "timeout_s: required when wait_for_completion is true"),
        ({"timeout_s": 60}, "timeout_s: only used with wait_for_completion: true"),
        ({"project": None}, "project: required with gcp_service_account_email (the cluster's Workload Identity pool is <project>.svc.id.goog)"),
        ({"env": {"JOB_NAME": "x"}}, "env: 'JOB_NAME' is not allowed; expected a variable name other than JOB_COMPLETION_INDEX, JOB_NAME, TRAINSTACK_HEADLESS_SERVICE, TRAINSTACK_NUM_NODES"),
        ({"env": {"1X": "x"}}, "env: '1X' is not allowed; expected a variable name other than JOB_COMPLETION_INDEX, JOB_NAME, TRAINSTACK_HEADLESS_SERVICE, TRAINSTACK_NUM_NODES"),
    ],
)  # fmt: skip
def test_invalid_arguments(overrides: dict[str, Any], message: str) -> None:
    args = {**BASE, **overrides}
    for key in [k for k, v in args.items() if v is None]:
        del args[key]
    with pytest.raises(ValueError) as err:
        validate_args(args)
    assert str(err.value) == message


def test_longest_job_name_is_valid() -> None:
    validate_args({**BASE, "job_name": "j" * 61, "node_count": 10})  # j...j-9: 63 characters


def test_invalid_arguments_register_nothing() -> None:
    def program() -> None:
        with contextlib.suppress(ValueError):
            KubernetesTrainingJob("train", {**BASE, "node_count": 0})  # type: ignore[typeddict-item]

    assert run_program(program).resources == []


def test_secret_inputs_stay_secret() -> None:
    def program() -> None:
        KubernetesTrainingJob(
            "train",
            {**BASE, "package_uri": pulumi.Output.secret(PACKAGE_URI)},  # type: ignore[typeddict-item]
        )

    run = run_program(program)
    assert run.named("train-job").inputs["spec"] == SECRET

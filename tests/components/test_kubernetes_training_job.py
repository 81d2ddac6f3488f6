"""KubernetesTrainingJob under Pulumi mocks: the Indexed Job, headless Service and Workload
Identity ServiceAccount, exactly as registered, and valid for the Kubernetes versions the
A100 cluster runs (kubernetes-validate, strict schemas)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import kubernetes_validate
import pulumi
import pytest
from pulumi_gcp import storage

from trainstack.components._pod_setup import POD_SCRIPT, pod_command
from trainstack.components.a100_cluster import KUBERNETES_VERSION, MIN_KUBERNETES_VERSION
from trainstack.components.catalog.tpu_runtimes import TF_KERAS_FROM
from trainstack.components.kubernetes_training_job import (
    DEFAULT_IMAGES,
    TOKEN,
    KubernetesTrainingJob,
    default_image,
    manifests,
    node_argv,
    validate_args,
)
from trainstack.infra.mocks import SECRET, ProgramRun, run_program

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
        "maxFailedIndexes": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {
                    "action": "Ignore",
                    "onExitCodes": {
                        "containerName": "trainer",
                        "operator": "In",
                        "values": [4, 143, 6],
                    },
                },
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": "trainer",
                        "operator": "In",
                        "values": [1, 2, 5],
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
                        "image": "pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4",
                        "command": ["bash", "-c", "<pod script>", "trainstack-pod"],
                        "args": [
                            "python3",
                            "-m",
                            "trainstack.trainers.node",
                            "trainstack.trainers.torch_ddp",
                            "--steps=100",
                            f"--checkpoint_dir={CHECKPOINTS}/checkpoints/run",
                        ],
                        "env": [
                            {"name": "JOB_NAME", "value": JOB},
                            {"name": "TRAINSTACK_BACKOFF_LIMIT_PER_INDEX", "value": "3"},
                            {"name": "TRAINSTACK_COORDINATOR_PORT", "value": "29500"},
                            {"name": "TRAINSTACK_EXPECTED_ACCELERATORS", "value": "8"},
                            {"name": "TRAINSTACK_HEADLESS_SERVICE", "value": JOB},
                            {
                                "name": "TRAINSTACK_INDEX_FAILURES",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": (
                                            "metadata.annotations"
                                            "['batch.kubernetes.io/job-index-failure-count']"
                                        )
                                    }
                                },
                            },
                            {"name": "TRAINSTACK_NUM_NODES", "value": "4"},
                            {"name": "TRAINSTACK_PACKAGE_URI", "value": PACKAGE_URI},
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
    assert container["command"][2] == POD_SCRIPT
    container["command"][2] = "<pod script>"
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
            trainer_module="trainstack.trainers.tf_multiworker",
            image="us-docker.pkg.dev/acme/train/tf:1",
            backoff_limit_per_index=6,
            active_deadline_seconds=86400,
            shm_size_gib=64,
            termination_grace_period_s=120,
            port=23456,
            env={"NCCL_DEBUG": "INFO"},
            tolerations=[],
        )
    )
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "trainstack.trainers.tf_multiworker",
        "--steps=100",
        f"--checkpoint_dir={CHECKPOINTS}/checkpoints/run",
    ]
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
        {"name": "TRAINSTACK_BACKOFF_LIMIT_PER_INDEX", "value": "6"},
        {"name": "TRAINSTACK_COORDINATOR_PORT", "value": "23456"},
        {"name": "TRAINSTACK_EXPECTED_ACCELERATORS", "value": "8"},
        {"name": "TRAINSTACK_HEADLESS_SERVICE", "value": JOB},
        INDEX_FAILURES,
        {"name": "TRAINSTACK_NUM_NODES", "value": "4"},
        {"name": "TRAINSTACK_PACKAGE_URI", "value": PACKAGE_URI},
        {"name": "TRAINSTACK_TF_KERAS", "value": "1"},
    ]


INDEX_FAILURES = {
    "name": "TRAINSTACK_INDEX_FAILURES",
    "valueFrom": {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"
        }
    },
}
"""The counted failures of the pod's index, from the Job controller's annotation."""


def test_default_image_follows_the_trainer_module() -> None:
    job = _job(_run(trainer_module="trainstack.trainers.tf_multiworker"))
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert (
        image
        == DEFAULT_IMAGES["trainstack.trainers.tf_multiworker"]
        == "tensorflow/tensorflow:2.17.0-gpu"
    )


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
    run = _run(active_deadline_seconds=3600)
    for name in ("train-ksa", "train-service", "train-job"):
        kubernetes_validate.validate(_integers(run.named(name).inputs), version, strict=True)
    plain = manifests(
        job_name=JOB,
        node_count=2,
        gpus_per_node=16,
        image="img:1",
        package_uri=PACKAGE_URI,
        args=node_argv("trainstack.trainers.torch_ddp", ["--steps=1"]),
        labels={"team": "ml"},
        node_selector={"a": "b"},
        active_deadline_seconds=60,
        tf_keras=True,
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
    assert pod_command() == ["bash", "-c", POD_SCRIPT, "trainstack-pod"]
    assert node_argv("trainstack.trainers.torch_ddp", ["--steps=1"]) == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "trainstack.trainers.torch_ddp",
        "--steps=1",
    ]


NODE_ARGS = [
    "--launcher=torchrun",
    "--env=TRAINSTACK_CHECKPOINT_DIR=gs://acme-ckpt/checkpoints",
    "--",
    "python",
    "train.py",
]


def test_your_code_runs_its_node_args_in_the_torch_image() -> None:
    job = _job(_run(trainer_args=None, node_args=NODE_ARGS))
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "--launcher=torchrun",
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://acme-ckpt/checkpoints",
        "--",
        "python",
        "train.py",
    ]
    assert container["image"] == default_image("trainstack.trainers.torch_ddp")
    assert "TRAINSTACK_TF_KERAS" not in {e["name"] for e in container["env"]}


def test_your_code_runs_in_your_image() -> None:
    job = _job(_run(trainer_args=None, node_args=NODE_ARGS, image="us-docker.pkg.dev/p/r/i:1"))
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "us-docker.pkg.dev/p/r/i:1"
    assert container["args"] == ["python3", "-m", "trainstack.trainers.node", *NODE_ARGS]


def test_node_argv_with_node_args_is_the_launchers_whole_command_line() -> None:
    assert node_argv(None, [], ["--launcher=node", "--", "python", "t.py"]) == [
        "python3",
        "-m",
        "trainstack.trainers.node",
        "--launcher=node",
        "--",
        "python",
        "t.py",
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"node_args": NODE_ARGS}, "node_args: runs your own code, which takes no trainer_module or trainer_args; valid: remove them"),
        ({"node_args": NODE_ARGS, "trainer_args": None, "trainer_module": "trainstack.trainers.torch_ddp"}, "node_args: runs your own code, which takes no trainer_module or trainer_args; valid: remove them"),
        ({"node_args": ["--launcher=torchrun"], "trainer_args": None}, "node_args: ['--launcher=torchrun'] has no '-- ARGV' (your entrypoint)"),
        ({"node_args": ["--", "a\nb"], "trainer_args": None}, "node_args[1]: 'a\\nb' is not a single-line string"),
    ],
)  # fmt: skip
def test_invalid_node_args(overrides: dict[str, Any], message: str) -> None:
    args = {**BASE, **overrides}
    for key in [k for k, v in args.items() if v is None]:
        del args[key]
    with pytest.raises(ValueError) as err:
        validate_args(args)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"job_name": "Exp_42"}, "job_name: 'Exp_42' is not a DNS label; valid: a lowercase letter, then a-z, 0-9 or '-', ending with a letter or digit"),
        ({"job_name": "j" * 62, "node_count": 10}, f"job_name: '{'j' * 62}' is too long for 10 nodes: pod host name '{'j' * 62}-9' has 64 characters; valid: at most 63"),
        ({"node_count": 0}, "node_count: 0 is not an integer >= 1; valid: an integer >= 1"),
        ({"gpus_per_node": "8"}, "gpus_per_node: '8' is not an integer >= 1; valid: an integer >= 1"),
        ({"namespace": "Team"}, "namespace: 'Team' is not a DNS label; valid: a lowercase letter, then a-z, 0-9 or '-', ending with a letter or digit"),
        ({"trainer_module": "my.trainer"}, "image: required for trainer_module 'my.trainer'; default images exist for trainstack.trainers.torch_ddp, trainstack.trainers.tf_multiworker; valid: an image with the trainer's framework"),
        ({"trainer_module": "not a module"}, "trainer_module: 'not a module' is not a Python module name"),
        ({"trainer_args": "--steps=1"}, "trainer_args: '--steps=1' is not a list of strings"),
        ({"image": " "}, "image: ' ' is not an image reference; valid: REPO/IMAGE:TAG"),
        ({"backoff_limit_per_index": 0}, "backoff_limit_per_index: 0 is not an integer >= 1; valid: an integer >= 1"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds: 0 is not an integer >= 1; valid: an integer >= 1"),
        ({"active_deadline_seconds": True}, "active_deadline_seconds: True is not an integer >= 1; valid: an integer >= 1"),
        ({"active_deadline_seconds": 3600.0}, "active_deadline_seconds: 3600.0 is not an integer >= 1; valid: an integer >= 1"),
        ({"env": {"TRAINSTACK_PACKAGE_URI": "x"}}, "env: 'TRAINSTACK_PACKAGE_URI' is not allowed; valid: a variable name other than JOB_COMPLETION_INDEX, JOB_NAME, TRAINSTACK_BACKOFF_LIMIT_PER_INDEX, TRAINSTACK_COORDINATOR, TRAINSTACK_COORDINATOR_PORT, TRAINSTACK_EXPECTED_ACCELERATORS, TRAINSTACK_HEADLESS_SERVICE, TRAINSTACK_INDEX_FAILURES, TRAINSTACK_NCCL_ENV_SCRIPT, TRAINSTACK_NCCL_PLUGIN_FILES, TRAINSTACK_NUM_NODES, TRAINSTACK_PACKAGE_URI, TRAINSTACK_TF_KERAS"),
        ({"port": 0}, "port: 0 is not a TCP port; valid: 1-65535"),
        ({"wait_for_completion": True}, "timeout_s: required when wait_for_completion is true; valid: >= 1"),
        ({"timeout_s": 60}, "timeout_s: only used with wait_for_completion: true; valid: remove it"),
        ({"project": None}, "project: required with gcp_service_account_email (the cluster's Workload Identity pool is <project>.svc.id.goog); valid: the cluster's project id"),
        ({"env": {"JOB_NAME": "x"}}, "env: 'JOB_NAME' is not allowed; valid: a variable name other than JOB_COMPLETION_INDEX, JOB_NAME, TRAINSTACK_BACKOFF_LIMIT_PER_INDEX, TRAINSTACK_COORDINATOR, TRAINSTACK_COORDINATOR_PORT, TRAINSTACK_EXPECTED_ACCELERATORS, TRAINSTACK_HEADLESS_SERVICE, TRAINSTACK_INDEX_FAILURES, TRAINSTACK_NCCL_ENV_SCRIPT, TRAINSTACK_NCCL_PLUGIN_FILES, TRAINSTACK_NUM_NODES, TRAINSTACK_PACKAGE_URI, TRAINSTACK_TF_KERAS"),
        ({"env": {"1X": "x"}}, "env: '1X' is not allowed; valid: a variable name other than JOB_COMPLETION_INDEX, JOB_NAME, TRAINSTACK_BACKOFF_LIMIT_PER_INDEX, TRAINSTACK_COORDINATOR, TRAINSTACK_COORDINATOR_PORT, TRAINSTACK_EXPECTED_ACCELERATORS, TRAINSTACK_HEADLESS_SERVICE, TRAINSTACK_INDEX_FAILURES, TRAINSTACK_NCCL_ENV_SCRIPT, TRAINSTACK_NCCL_PLUGIN_FILES, TRAINSTACK_NUM_NODES, TRAINSTACK_PACKAGE_URI, TRAINSTACK_TF_KERAS"),
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


# --------------------------------------------------------------------------------------
# The pod script, run with bash against a fake metadata server and Cloud Storage
# --------------------------------------------------------------------------------------

SDIST = b"the trainer sdist"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
OBJECT_PATH = (
    "/storage/v1/b/acme-ml-exp-42-staging/o/"
    "trainers%2Ftrainstack_trainers-0123456789abcdef.tar.gz?alt=media"
)

# `python3` of the image: pip is recorded, everything else runs this interpreter with a
# `tensorflow` module of the given version on its path.
FAKE_PYTHON = """#!{python}
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"argv": argv, "break": os.environ.get("PIP_BREAK_SYSTEM_PACKAGES")}}) + "\\n")
if argv[:2] == ["-m", "pip"]:
    sys.exit(0)
os.environ["PYTHONPATH"] = {modules!r}
os.execv({python!r}, [{python!r}, *argv])
"""


class _Storage(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == TOKEN_PATH and self.headers.get("Metadata-Flavor") == "Google":
            status, body = 200, json.dumps({"access_token": "t0k", "expires_in": 3600}).encode()
        elif self.path == OBJECT_PATH and self.headers.get("Authorization") == "Bearer t0k":
            status, body = 200, SDIST
        else:
            status, body = 404, b"not found"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _pod(
    tmp_path: Path,
    *,
    tf_version: str | None,
    package_uri: str = PACKAGE_URI,
    extra_env: dict[str, str] | None = None,
    argv: list[str] | None = None,
) -> tuple[int, list[dict[str, Any]], str]:
    """Run the pod script as the container runs it; returns its exit code, the fake
    python's calls and the output."""
    modules = tmp_path / "modules"
    modules.mkdir()
    if tf_version is not None:
        (modules / "tensorflow.py").write_text(f"__version__ = {tf_version!r}\n")
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON.format(python=sys.executable, modules=str(modules)))
    python.chmod(0o755)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Storage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "FAKE_LOG": str(tmp_path / "calls.jsonl"),
        "GCE_METADATA_HOST": host,
        "STORAGE_EMULATOR_HOST": f"http://{host}",
        "TRAINSTACK_PACKAGE_URI": package_uri,
    }
    env.update(_env_of(tf_version))
    env.update(extra_env or {})
    argv = [str(python), *(argv or ["-c", "print('launcher ran')"])]
    try:
        done = subprocess.run(
            [*pod_command(), *argv],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
        server.server_close()
    log = tmp_path / "calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, calls, done.stdout + done.stderr


def _env_of(tf_version: str | None) -> dict[str, str]:
    return {"TRAINSTACK_TF_KERAS": "1"} if tf_version is not None else {}


PIP = ["-m", "pip", "install", "--disable-pip-version-check", "--no-input"]


def test_pod_installs_the_package_then_runs_the_launcher(tmp_path: Path) -> None:
    code, calls, output = _pod(tmp_path, tf_version=None)
    assert code == 0, output
    package = tmp_path / "trainstack" / "trainstack_trainers-0123456789abcdef.tar.gz"
    assert package.read_bytes() == SDIST
    assert [c for c in calls if c["argv"][:2] == ["-m", "pip"]] == [
        {"argv": [*PIP, str(package)], "break": "1"}
    ]
    assert calls[-1]["argv"] == ["-c", "print('launcher ran')"]
    assert "launcher ran" in output


@pytest.mark.parametrize(
    ("tf_version", "keras"),
    [("2.17.0", ["tf-keras==2.17.*"]), ("2.16.1", ["tf-keras==2.16.*"]), ("2.14.1", [])],
)
def test_pod_pins_tf_keras_to_the_images_tensorflow_without_dependencies(
    tmp_path: Path, tf_version: str, keras: list[str]
) -> None:
    code, calls, output = _pod(tmp_path, tf_version=tf_version)
    assert code == 0, output
    package = tmp_path / "trainstack" / "trainstack_trainers-0123456789abcdef.tar.gz"
    pips = [c["argv"] for c in calls if c["argv"][:2] == ["-m", "pip"]]
    assert pips == [
        [*PIP, str(package)],
        *([[*PIP, "--no-deps", pin] for pin in keras]),
    ]
    assert "launcher ran" in output


def test_the_mounted_gpu_driver_is_on_the_library_path_once(tmp_path: Path) -> None:
    nvidia = tmp_path / "nvidia"
    (nvidia / "lib64").mkdir(parents=True)
    (nvidia / "bin").mkdir()
    show = ["-c", "import os; print('LD=' + os.environ['LD_LIBRARY_PATH'])"]
    env = {"TRAINSTACK_NVIDIA_DIR": str(nvidia), "LD_LIBRARY_PATH": "/opt/lib"}
    code, _, output = _pod(tmp_path, tf_version=None, extra_env=env, argv=show)
    assert code == 0, output
    assert f"LD={nvidia}/lib64:/opt/lib" in output.splitlines()
    # An image that already points there (NVIDIA's CUDA images) keeps its own order.
    again = tmp_path / "again"
    again.mkdir()
    env["LD_LIBRARY_PATH"] = f"/opt/lib:{nvidia}/lib64"
    code, _, output = _pod(again, tf_version=None, extra_env=env, argv=show)
    assert code == 0, output
    assert f"LD=/opt/lib:{nvidia}/lib64" in output.splitlines()


def test_tf_keras_threshold_is_the_catalogs() -> None:
    assert TF_KERAS_FROM == (2, 16)
    assert f"if v >= {TF_KERAS_FROM}" in POD_SCRIPT


def test_pod_setup_failure_exits_3_before_the_launcher(tmp_path: Path) -> None:
    missing = "gs://acme-ml-exp-42-staging/trainers/missing.tar.gz"
    code, calls, output = _pod(tmp_path, tf_version=None, package_uri=missing)
    assert code == 3, output
    assert "launcher ran" not in output
    assert not any(c["argv"][:2] == ["-m", "pip"] for c in calls)

"""Reduction Server needs NCCL >= 2.7 and Google's google-reduction-server package in the
workers' custom container (cloud.google.com/vertex-ai/docs/training/distributed-training
#reduction-server). trainstack's default images lack the package, so a stack with reducers
on a default image builds that image again with it (Cloud Build: `ReductionServerImage`)
and the chief and workers run the build by digest, NCCL told to load the plugin file the
build checks. An image you name gets Google's requirement as a note; the component alone,
on a default image and given no rebuilt one, refuses."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from trainstack.components.catalog.images import (
    VERTEX_TRAINING_IMAGES,
    mirror_registry,
    mirrored_image_uri,
)
from trainstack.components.catalog.reduction_server import plugin_dockerfile, plugin_image_tag
from trainstack.components.vertex_training_job import VertexTrainingJob
from trainstack.infra.mocks import UNKNOWN
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.contract import TORCH_MODULE

NEEDS = (
    "NCCL >= 2.7 and Google's google-reduction-server package (apt repository "
    "'deb https://packages.cloud.google.com/apt google-fast-socket main')"
)
DOC = "https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduction-server"
TORCH = VERTEX_TRAINING_IMAGES[TORCH_MODULE]
REGISTRY = "us-central1-docker.pkg.dev/my-ml-project"
BASE = mirrored_image_uri(
    TORCH, mirror_registry("us-central1", "my-ml-project", "prod-vertex-rs-dockerhub")
)
DOCKERFILE = plugin_dockerfile(BASE)
BUILT = f"{REGISTRY}/prod-vertex-rs-built/pytorch-reduction-server"
NAMED = "us-central1-docker.pkg.dev/my-ml-project/training/pytorch-reduction-server:2.13"


def _plan(config_change: dict[str, Any] | None = None) -> dict[str, Any]:
    name, config = load_stack("prod-vertex-rs", None)
    config["trainstack:vertex"].update(config_change or {})
    return build_plan(name, config)


def _of(plan: dict[str, Any], suffix: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"].endswith(suffix)]


def _env(pool: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pool["containerSpec"].get("env", [])}


def test_the_bundled_stack_builds_the_default_image_with_the_plugin_and_runs_it() -> None:
    plan = _plan()
    [build] = _of(plan, ":ImageBuild")
    assert {k: v for k, v in build["inputs"].items() if k != "__provider"} == {
        "project": "my-ml-project",
        "location": "us-central1",
        "image": f"{BUILT}:{plugin_image_tag(DOCKERFILE)}",
        "dockerfile": DOCKERFILE,
        "service_account": "prod-vertex-rs-build@my-ml-project.iam.gserviceaccount.com",
    }
    assert DOCKERFILE.splitlines()[0] == (
        f"FROM {REGISTRY}/prod-vertex-rs-dockerhub/pytorch/pytorch@{TORCH.digest}"
    )
    [job] = _of(plan, ":CustomJob")
    pools = job["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    # The chief and the workers run the build by its digest (known once it is pushed), and
    # NCCL_NET_PLUGIN stays unset: NCCL loads libnccl-net.so by its default name, and a path
    # there is silently not loaded by some versions (catalog.reduction_server). The reducers
    # run Google's image, untouched.
    assert [p["containerSpec"]["imageUri"] for p in pools] == [
        f"{BUILT}@{UNKNOWN}",
        f"{BUILT}@{UNKNOWN}",
        "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest",
    ]
    assert [_env(p).get("NCCL_NET_PLUGIN") for p in pools[:2]] == [None, None]
    assert "env" not in pools[2]["containerSpec"]
    assert [n for n in plan["notes"] if "google-reduction-server package in" in n] == [
        "vertex: Reduction Server needs Google's google-reduction-server package in the "
        f"chief's and workers' image, so the stack builds {TORCH.uri} again with it (Cloud "
        "Build, as the account prod-vertex-rs-build, into the repository "
        f"prod-vertex-rs-built; {DOC}) and runs it by digest, where NCCL loads "
        "/usr/lib/libnccl-net.so by its default name (NCCL_NET_PLUGIN unset); it is built "
        "again only when the base image or the build changes"
    ]


def test_the_build_account_gets_exactly_push_pull_and_log_writing() -> None:
    plan = _plan()
    # Every grant to the build account in the plan: no storage role (the build reads no
    # source from Cloud Storage and logs to Cloud Logging only).
    member = "serviceAccount:prod-vertex-rs-build@my-ml-project.iam.gserviceaccount.com"
    grants = [
        (r["name"], r["inputs"]["role"], r["inputs"].get("repository"))
        for r in plan["resources"]
        if r["inputs"].get("member") == member
    ]
    assert sorted(grants) == [
        ("prod-vertex-rs-rs-image-log-writer", "roles/logging.logWriter", None),
        (
            "prod-vertex-rs-rs-image-pull",
            "roles/artifactregistry.reader",
            "prod-vertex-rs-dockerhub",
        ),
        ("prod-vertex-rs-rs-image-push", "roles/artifactregistry.writer", "prod-vertex-rs-built"),
    ]
    services = sorted(r["inputs"]["service"] for r in _of(plan, "projects/service:Service"))
    assert services == [
        "aiplatform.googleapis.com",
        "artifactregistry.googleapis.com",
        "cloudbuild.googleapis.com",
        "cloudquotas.googleapis.com",
        "compute.googleapis.com",
        "iam.googleapis.com",
        "logging.googleapis.com",
        "monitoring.googleapis.com",
        "storage.googleapis.com",
    ]


def test_without_reducers_nothing_is_built_and_nccl_is_told_nothing() -> None:
    plan = _plan({"reduction_server": {"enabled": False}})
    assert _of(plan, ":ImageBuild") == []
    [job] = _of(plan, ":CustomJob")
    pools = job["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [p["containerSpec"]["imageUri"] for p in pools] == [
        mirrored_image_uri(TORCH, f"{REGISTRY}/prod-vertex-rs-dockerhub")
    ] * 2
    assert [sorted(_env(p)) for p in pools] == [
        ["TRAINSTACK_EXPECTED_ACCELERATORS", "TRAINSTACK_PACKAGE_URI"]
    ] * 2


def test_an_image_you_name_is_not_rebuilt_and_the_plan_says_what_google_requires() -> None:
    plan = _plan({"image_uri": NAMED})
    assert _of(plan, ":ImageBuild") == []
    assert [n for n in plan["notes"] if n.startswith("vertex.reduction_server")] == [
        f"vertex.reduction_server: Google requires the workers' custom container to have "
        f"{NEEDS} ({DOC}); trainstack cannot check vertex.image_uri '{NAMED}': without them "
        "NCCL all-reduces among the workers and the reducers are billed unused"
    ]
    [job] = _of(plan, ":CustomJob")
    pools = job["inputs"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [p["containerSpec"]["imageUri"] for p in pools[:2]] == [NAMED, NAMED]
    assert [_env(p).get("NCCL_NET_PLUGIN") for p in pools[:2]] == [None, None]


_ARGS: dict[str, Any] = {
    "project": "p",
    "region": "us-central1",
    "display_name": "d",
    "machine_type": "a2-highgpu-8g",
    "replica_count": 2,
    "reduction_server": {"replica_count": 1},
    "package_uri": "gs://b/trainers/t.tar.gz",
}


@pulumi.runtime.test
def test_the_component_refuses_its_default_image_without_the_rebuilt_one() -> None:
    with pytest.raises(ValueError) as info:
        VertexTrainingJob("job", dict(_ARGS))  # type: ignore[arg-type]
    assert str(info.value) == (
        f"VertexTrainingJob.reduction_server.enabled: true needs, in a custom container, "
        f"{NEEDS}, which the default image '{TORCH.uri}' does not have (Google: {DOC}); "
        "valid: false, plugin_image_uri (the default image rebuilt with them: "
        "ReductionServerImage), or container_image_uri naming an image built with them"
    )


@pulumi.runtime.test
def test_the_component_refuses_a_rebuilt_image_beside_one_you_name() -> None:
    args = {**_ARGS, "plugin_image_uri": "r/x@sha256:0", "container_image_uri": NAMED}
    with pytest.raises(ValueError) as info:
        VertexTrainingJob("job", args)  # type: ignore[arg-type]
    assert str(info.value) == (
        "VertexTrainingJob.plugin_image_uri: the default image rebuilt with the Reduction "
        "Server plugin, which runs package_uri in place of the default image; valid: "
        "package_uri without container_image_uri or executor_image_uri"
    )

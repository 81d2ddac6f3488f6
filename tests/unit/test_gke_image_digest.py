"""GKE pods pull the torch image by the digest Vertex pins (`kubernetes_image`), not by a
tag that can move; the torch-version checks still read the tag (`KUBERNETES_IMAGES`)."""

from __future__ import annotations

from trainstack.components.catalog.images import (
    KUBERNETES_IMAGES,
    TORCH_IMAGE_DIGEST,
    VERTEX_TRAINING_IMAGES,
    kubernetes_image,
)
from trainstack.components.catalog.torch_versions import image_torch_version
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.contract import TF_MODULE, TORCH_MODULE

PINNED = "pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"


def test_the_rendered_gke_pod_pulls_torch_by_digest() -> None:
    name, config = load_stack("dev-a100-gke", None)
    plan = build_plan(name, config)
    [job] = [r for r in plan["resources"] if r["type"] == "kubernetes:batch/v1:Job"]
    [container] = job["inputs"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == PINNED


def test_gke_and_vertex_pin_one_torch_image_and_its_tag_still_says_the_version() -> None:
    assert PINNED.split("@", 1)[1] == TORCH_IMAGE_DIGEST
    assert KUBERNETES_IMAGES[TORCH_MODULE] == VERTEX_TRAINING_IMAGES[TORCH_MODULE].uri
    assert image_torch_version(KUBERNETES_IMAGES[TORCH_MODULE]) == (2, 13)
    # No digest of the TF image was found in two independent sources: by tag, as on Vertex.
    assert kubernetes_image(TF_MODULE) == "tensorflow/tensorflow:2.17.0-gpu"

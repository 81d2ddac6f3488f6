"""Vertex images and their end of availability: the bundled trainers run on images that are
served today; a default image past its end is an error (plan exit 2, the component fails
the Pulumi program), an image you name past it a warning with the same facts.

The date is injected (`build_plan(today=...)`, `TRAINSTACK_TODAY`), never read from the
clock, so these tests say the same thing on every day.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path
from typing import Any

import pulumi
import pytest
from typer.testing import CliRunner

from trainstack.components.catalog import images
from trainstack.components.catalog.images import (
    PYTORCH_GPU_IMAGES,
    VERTEX_IMAGE_END_OF_AVAILABILITY,
    VERTEX_TRAINING_IMAGES,
    current_images,
    image_availability_problem,
    image_end_of_availability,
)
from trainstack.components.vertex_training_job import VertexTrainingJob
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError
from trainstack.infra.plan import build_plan, load_stack
from trainstack.trainers.common.contract import TF_MODULE, TORCH_MODULE

TORCH_24 = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
TF_217 = "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"
TORCH_IMAGE = "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"
TF_IMAGE = "tensorflow/tensorflow:2.17.0-gpu"
TODAY = date(2026, 11, 26)
REPO = Path(__file__).resolve().parents[2]
JOB_ARGS: dict[str, Any] = {
    "project": "p",
    "region": "us-central1",
    "display_name": "d",
    "machine_type": "a2-highgpu-8g",
    "replica_count": 1,
    "package_uri": "gs://b/trainers/t.tar.gz",
}


def test_the_default_images_are_the_frameworks_own_and_carry_their_facts() -> None:
    torch, tf = VERTEX_TRAINING_IMAGES[TORCH_MODULE], VERTEX_TRAINING_IMAGES[TF_MODULE]
    facts = [
        (i.uri, i.framework_version, i.python_version, i.cuda_version, i.end_of_availability)
        for i in (torch, tf)
    ]
    assert facts == [
        (TORCH_IMAGE, "2.13.0", "3.12", "12.6", None),
        (TF_IMAGE, "2.17.0", "3.11", "12.3", None),
    ]
    assert torch.requirements == ("tensorboard>=1.15",) and tf.requirements == ()
    for image in (torch, tf):
        assert "Docker Hub" in image.source and "Docker Hub" in image.end_of_availability_source
    assert current_images(TODAY) == [TORCH_IMAGE, TF_IMAGE]


def test_googles_prebuilt_images_keep_their_dates_and_exist_only_for_python_310() -> None:
    assert VERTEX_IMAGE_END_OF_AVAILABILITY[TORCH_24] == date(2026, 7, 24)
    assert VERTEX_IMAGE_END_OF_AVAILABILITY[TF_217] == date(2026, 7, 11)
    assert PYTORCH_GPU_IMAGES["2.2"] == (
        "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-2.py310:latest"
    )
    assert all(uri.endswith(".py310:latest") for uri in PYTORCH_GPU_IMAGES.values())
    assert set(PYTORCH_GPU_IMAGES.values()) <= set(VERTEX_IMAGE_END_OF_AVAILABILITY)


def test_other_multi_regions_share_the_us_row_and_unknown_images_have_no_date() -> None:
    europe = TORCH_24.replace("us-docker", "europe-docker")
    assert image_end_of_availability(europe) == date(2026, 7, 24)
    assert image_end_of_availability("us-docker.pkg.dev/acme/train/torch:latest") is None
    assert image_end_of_availability(TORCH_IMAGE) is None
    assert image_availability_problem("us-docker.pkg.dev/acme/t:1", TODAY, "k") is None


def test_an_image_on_or_before_its_date_is_fine() -> None:
    assert image_availability_problem(TORCH_24, date(2026, 7, 24), "vertex.image_uri") is None


def test_an_expired_image_names_its_date_and_the_images_still_served() -> None:
    assert image_availability_problem(TF_217, date(2026, 7, 20), "vertex.image_uri") == (
        f"vertex.image_uri: image '{TF_217}' is past its end of availability (2026-07-11, "
        "Google's prebuilt-containers page), so Vertex no longer serves it; valid: "
        f"{TORCH_IMAGE}, {TF_IMAGE}, {TORCH_24}"
    )


def test_the_bundled_vertex_stack_runs_a_served_image_today() -> None:
    name, config = load_stack("dev-vertex-hpt", None)
    plan = build_plan(name, config, today=TODAY)
    assert not any("past its end" in n for n in plan["notes"])
    [job] = [r for r in plan["resources"] if r["type"].endswith(("CustomJob", "TuningJob"))]
    body = job["inputs"]["body"]
    spec = body.get("jobSpec") or body["trialJobSpec"]
    # The default image, through the stack's Docker Hub mirror by the catalog's digest.
    mirror = "us-central1-docker.pkg.dev/my-ml-project/dev-vertex-hpt-dockerhub"
    assert {p["containerSpec"]["imageUri"] for p in spec["workerPoolSpecs"][:2] if p} == {
        f"{mirror}/pytorch/pytorch@{VERTEX_TRAINING_IMAGES[TORCH_MODULE].digest}"
    }


def _expire_torch_default(monkeypatch: pytest.MonkeyPatch) -> None:
    expired = dataclasses.replace(
        VERTEX_TRAINING_IMAGES[TORCH_MODULE], end_of_availability=date(2026, 7, 24)
    )
    monkeypatch.setitem(images.VERTEX_TRAINING_IMAGES, TORCH_MODULE, expired)


DEFAULT_EXPIRED = (
    f"vertex.image_uri: the default image '{TORCH_IMAGE}' is past its end of availability "
    f"(2026-07-24, Google's prebuilt-containers page), so Vertex no longer serves it; valid: "
    f"{TF_IMAGE}"
)


def test_a_default_image_past_its_date_fails_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    _expire_torch_default(monkeypatch)
    name, config = load_stack("dev-vertex-hpt", None)
    with pytest.raises(ConfigError) as info:
        build_plan(name, config, today=TODAY)
    assert info.value.errors == [DEFAULT_EXPIRED]
    monkeypatch.setenv("TRAINSTACK_TODAY", TODAY.isoformat())
    result = CliRunner().invoke(app, ["plan", "--stack", "dev-vertex-hpt"])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == ("error: stack 'dev-vertex-hpt': " + DEFAULT_EXPIRED)


@pulumi.runtime.test
def test_a_default_image_past_its_date_fails_the_component(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _expire_torch_default(monkeypatch)
    monkeypatch.setenv("TRAINSTACK_TODAY", TODAY.isoformat())
    with pytest.raises(ValueError) as info:
        VertexTrainingJob("job", {**JOB_ARGS, "python_module": TORCH_MODULE})  # type: ignore[typeddict-item]
    assert str(info.value) == DEFAULT_EXPIRED.replace(
        "vertex.image_uri:", "VertexTrainingJob.python_module:"
    )


def test_a_named_image_past_its_date_is_a_note_with_the_same_facts() -> None:
    name, config = load_stack("dev-vertex-hpt", None)
    config["trainstack:vertex"] = {**config["trainstack:vertex"], "image_uri": TORCH_24}
    plan = build_plan(name, config, today=TODAY)
    assert [n for n in plan["notes"] if "past its end" in n] == [
        f"vertex.image_uri: image '{TORCH_24}' is past its end of availability (2026-07-24, "
        "Google's prebuilt-containers page), so Vertex no longer serves it; valid: "
        f"{TORCH_IMAGE}, {TF_IMAGE}"
    ]


def test_your_codes_image_is_named_by_trainer_image() -> None:
    name, config = load_stack(None, REPO / "examples" / "own-trainer" / "Pulumi.vertex.yaml")
    config["trainstack:trainer"] = {**config["trainstack:trainer"], "image": TF_217}
    notes = build_plan(name, config, today=TODAY)["notes"]
    assert [n for n in notes if "past its end" in n] == [
        f"trainer.image: image '{TF_217}' is past its end of availability (2026-07-11, "
        "Google's prebuilt-containers page), so Vertex no longer serves it; valid: "
        f"{TORCH_IMAGE}, {TF_IMAGE}"
    ]


def test_a_bad_trainstack_today_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSTACK_TODAY", "tomorrow")
    result = CliRunner().invoke(app, ["plan", "--stack", "prod-vertex-rs"])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == (
        "error: stack 'prod-vertex-rs': TRAINSTACK_TODAY: 'tomorrow' is "
        "not a date; valid: an ISO date such as 2026-11-23"
    )

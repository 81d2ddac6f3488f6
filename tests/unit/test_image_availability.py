"""`trainstack plan` refuses a Vertex image past Google's end of availability.

The date is injected (`build_plan(today=...)`, `TRAINSTACK_TODAY`), never read from the
clock, so these tests say the same thing on every day.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from components.catalog.images import (
    VERTEX_IMAGE_END_OF_AVAILABILITY,
    VERTEX_TRAINING_IMAGES,
    image_availability_problem,
    image_end_of_availability,
)
from infra.cli import app
from infra.plan import build_plan, load_stack
from trainers.common.contract import TF_MODULE, TORCH_MODULE

TORCH_24 = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
TF_217 = "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"
AUDIT_DAY = date(2026, 11, 23)
REPO = Path(__file__).resolve().parents[2]
NONE_CURRENT = (
    "valid: none known to trainstack on 2026-11-23: pick a current image from "
    "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers"
)
DEFAULT_TORCH_EXPIRED = (
    f"vertex.image_uri: the default image '{TORCH_24}' is past its end of availability "
    "(2026-07-24, Google's prebuilt-containers page), so Vertex may no longer serve it; "
    + NONE_CURRENT
)


def test_the_pinned_images_carry_their_end_of_availability_and_are_unverified() -> None:
    torch, tf = VERTEX_TRAINING_IMAGES[TORCH_MODULE], VERTEX_TRAINING_IMAGES[TF_MODULE]
    assert (torch.uri, torch.end_of_availability, torch.verified) == (
        TORCH_24,
        date(2026, 7, 24),
        False,
    )
    assert (tf.uri, tf.end_of_availability, tf.verified) == (TF_217, date(2026, 7, 11), False)
    assert tf.requirements == ("tf-keras~=2.17.0",)
    assert VERTEX_IMAGE_END_OF_AVAILABILITY[TF_217] == date(2026, 7, 11)


def test_other_multi_regions_share_the_us_row_and_unknown_images_have_no_date() -> None:
    europe = TORCH_24.replace("us-docker", "europe-docker")
    assert image_end_of_availability(europe) == date(2026, 7, 24)
    assert image_end_of_availability("us-docker.pkg.dev/acme/train/torch:latest") is None
    assert image_availability_problem("us-docker.pkg.dev/acme/t:1", AUDIT_DAY, "k") is None


def test_an_image_on_or_before_its_date_is_fine() -> None:
    assert image_availability_problem(TORCH_24, date(2026, 7, 24), "vertex.image_uri") is None


def test_an_expired_image_names_its_date_and_the_images_still_available() -> None:
    assert image_availability_problem(TF_217, date(2026, 7, 20), "vertex.image_uri") == (
        f"vertex.image_uri: image '{TF_217}' is past its end of availability (2026-07-11, "
        "Google's prebuilt-containers page), so Vertex may no longer serve it; valid: "
        f"{TORCH_24}"
    )


def test_build_plan_warns_of_the_default_vertex_image_on_the_audit_day() -> None:
    name, config = load_stack("prod-vertex-rs", None)
    plan = build_plan(name, config, today=AUDIT_DAY)
    assert [n for n in plan["notes"] if n.startswith("vertex.image_uri: ")] == [
        DEFAULT_TORCH_EXPIRED
    ]
    assert not any(n.startswith("vertex.image_uri: ") for n in build_plan(name, config)["notes"])


def test_build_plan_warns_of_a_user_given_known_image() -> None:
    name, config = load_stack("dev-vertex-hpt", None)
    given = TORCH_24.replace("pytorch-gpu.2-4", "pytorch-gpu.2-2")
    config["trainstack:vertex"] = {**config["trainstack:vertex"], "image_uri": given}
    plan = build_plan(name, config, today=date(2026, 2, 1))
    assert [n for n in plan["notes"] if n.startswith("vertex.image_uri: ")] == [
        f"vertex.image_uri: image '{given}' is past its end of availability "
        "(2026-01-30, Google's prebuilt-containers page), so Vertex may no longer serve it; "
        f"valid: {TORCH_24.replace('pytorch-gpu.2-4', 'pytorch-gpu.2-3')}, {TORCH_24}, "
        "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-16.py310:latest, "
        f"{TF_217}"
    ]


def test_your_codes_note_names_the_image_its_launcher_runs_on() -> None:
    # launcher node runs on the prebuilt TensorFlow image: between the two dates only that
    # image is past its end, whatever the (bundled) trainer.framework default says.
    name, config = load_stack(None, REPO / "examples" / "own-trainer" / "Pulumi.vertex.yaml")
    config["trainstack:trainer"] = {**config["trainstack:trainer"], "launcher": "node"}
    notes = build_plan(name, config, today=date(2026, 7, 15))["notes"]
    [note] = [n for n in notes if n.startswith("vertex.image_uri: ")]
    assert note.startswith(f"vertex.image_uri: the default image '{TF_217}' is past its end ")
    # An image you give in trainer.image is named by that key.
    config["trainstack:trainer"] = {**config["trainstack:trainer"], "image": TF_217}
    notes = build_plan(name, config, today=date(2026, 7, 15))["notes"]
    assert [n for n in notes if "past its end" in n] == [
        f"trainer.image: image '{TF_217}' is past its end of availability (2026-07-11, "
        "Google's prebuilt-containers page), so Vertex may no longer serve it; valid: "
        f"{TORCH_24}"
    ]


def test_trainstack_plan_shows_the_warning_on_the_audit_day(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINSTACK_TODAY", AUDIT_DAY.isoformat())
    result = CliRunner().invoke(app, ["plan", "--stack", "prod-vertex-rs"])
    assert result.exit_code == 0
    assert "is past its end of availability" in " ".join(result.stdout.split())


def test_a_bad_trainstack_today_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSTACK_TODAY", "tomorrow")
    result = CliRunner().invoke(app, ["plan", "--stack", "prod-vertex-rs"])
    assert result.exit_code == 2
    assert result.stderr.replace("\n", "") == (
        "error: invalid stack config for 'prod-vertex-rs':TRAINSTACK_TODAY: 'tomorrow' is "
        "not a date; valid: an ISO date such as 2026-11-23"
    )

"""Issue 31 trial M1, M2, M3, M8: a bad `trainstack:tpu` block is one line, about the block
(no second line about `trainer.image` from a backend the user did not give); `slices: true`
is not 1; `slices` has a bound; a flex-start run longer than GKE's 7 days is refused, not
silently capped, by the rule the GPU flex-start path holds to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.components.tpu_gke_slices import tpu_gke_slices_problems
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config

REPO = Path(__file__).resolve().parents[2]
CODE = {
    "image": "us-docker.pkg.dev/my-ml-project/jax/tpu-trainer:1",
    "source": str(REPO / "examples" / "own-jax"),
    "entrypoint": ["python", "train.py"],
    "launcher": "node",
}
SECTION = {"backend": "gke", "accelerator_type": "v6e-16", "zone": "us-east5-b", "slices": 2}
MAX_SLICES_WHY = (
    "one node pool per slice; GKE: 'Clusters that have more than 200 total node pools might "
    "have increased latency during autoscaling' (https://cloud.google.com/kubernetes-engine/"
    "docs/how-to/node-auto-provisioning), and Google documents no multislice maximum"
)
SEVEN_DAYS = (
    'GKE: flex-start nodes "run for at most 7 days", '
    "https://cloud.google.com/kubernetes-engine/docs/concepts/dws"
)


def stack(limits: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    section = {k: v for k, v in {**SECTION, **changes}.items() if v is not None}
    raw = {
        "gcp:project": "my-ml-project",
        "gcp:region": "us-east5",
        "trainstack:tpu": section,
        "trainstack:trainer": CODE,
    }
    return raw | ({"trainstack:limits": limits} if limits else {})


def errors_of(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(raw)
    return info.value.errors


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (stack(slices="two"), "tpu.slices: 'two' is not an integer; valid: a whole number"),
        (stack(slices=2.5), "tpu.slices: 2.5 is not an integer; valid: a whole number"),
        (stack(slices=True), "tpu.slices: true is not an integer; valid: a whole number"),
        (
            stack(slices=None, slice_count=2),
            "tpu.slice_count: unknown key; valid: accelerator_type, generation, topology, zone, "
            "runtime_version, provisioning, reservation, backend, slices",
        ),
        (stack(backend="foo"), "tpu.backend: 'foo' is not allowed; valid: tpu_vm, gke"),
        (
            stack(backend="tpu_vm"),
            "tpu.slices: 2 slices (multislice) need backend 'gke' (one TPU node pool per slice, "
            "a JobSet over them); backend 'tpu_vm' makes one slice; valid: 1, or tpu.backend: gke",
        ),
        (
            stack(slices=100000),
            f"tpu.slices: 100000 is more slices than a cluster takes ({MAX_SLICES_WHY}); "
            "valid: 1 to 199",
        ),
        (
            stack(slices=200),
            f"tpu.slices: 200 is more slices than a cluster takes ({MAX_SLICES_WHY}); "
            "valid: 1 to 199",
        ),
        (
            stack({"max_run_hours": 200}, slices=1, provisioning="flex-start"),
            "limits.max_run_hours: 200 hours is longer than tpu.provisioning flex-start allows "
            f"({SEVEN_DAYS}); valid: up to 168 hours (7 days), or tpu.provisioning on-demand, "
            "spot or reserved",
        ),
    ],
    ids=[
        "slices-str", "slices-float", "slices-bool", "unknown-key", "backend-foo",
        "tpu_vm-multislice", "slices-100000", "slices-200", "flex-200h",
    ],
)  # fmt: skip
def test_a_bad_tpu_block_is_one_line(raw: dict[str, Any], expected: str) -> None:
    assert errors_of(raw) == [expected]


def test_the_bounds_themselves_plan() -> None:
    assert load_stack_config(stack(slices=199)).compute.slices == 199
    flex = stack({"max_run_hours": 168}, slices=1, provisioning="flex-start")
    assert load_stack_config(flex).limits.max_run_hours == 168


def test_an_image_on_tpu_vm_names_the_backend_that_takes_one() -> None:
    raw = stack(backend="tpu_vm", slices=None)
    assert errors_of(raw) == [
        "trainer.image: not supported on tpu.backend 'tpu_vm' (it runs no container); valid: "
        "trainer.source, or tpu.backend: gke"
    ]


def test_the_component_refuses_a_flex_start_run_past_7_days_by_the_same_rule() -> None:
    args = {
        "zone": "us-east5-b",
        "accelerator_type": "v6e-16",
        "provisioning": "flex-start",
        "max_run_seconds": 8 * 24 * 3600,
    }
    assert tpu_gke_slices_problems(args) == [
        f"max_run_seconds: 192 hours is longer than provisioning flex-start allows ({SEVEN_DAYS})"
        "; valid: up to 168 hours (7 days), or provisioning on-demand, spot or reserved"
    ]


def test_plan_prints_one_line(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.b_stwo.yaml"
    path.write_text(yaml.safe_dump({"config": stack(slices="two")}))
    result = CliRunner().invoke(app, ["plan", "--config-file", str(path)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: stack 'b_stwo': tpu.slices: 'two' is not an integer; valid: a whole number\n",
    )

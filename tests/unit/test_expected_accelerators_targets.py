"""Which targets set TRAINSTACK_EXPECTED_ACCELERATORS, as the pinned plans send it, is what
`trainstack.trainers.common.accelerators` says: the GPU targets do, TPU VMs do not."""

from __future__ import annotations

from pathlib import Path

from trainstack.trainers.common import accelerators

PLANS = Path(__file__).resolve().parents[1] / "plans"


def test_the_docstring_names_the_targets_whose_plans_set_it() -> None:
    setting = sorted(
        path.stem for path in PLANS.glob("*.json") if "EXPECTED_ACCELERATORS" in path.read_text()
    )
    assert setting == [
        "dev-a100-gke",
        "dev-b200-gce",
        "dev-h100-gke",
        "dev-vertex-hpt",
        "prod-a100-gce",
        "prod-vertex-rs",
    ]
    doc = " ".join((accelerators.__doc__ or "").split())
    assert "set by every cloud target" not in doc
    assert (
        "set by the GPU targets' launches (a GKE pod, a Compute Engine VM, a Vertex pool with "
        "accelerators)" in doc
    )
    assert "TPU VMs do not set it: the check counts CUDA GPUs only" in doc

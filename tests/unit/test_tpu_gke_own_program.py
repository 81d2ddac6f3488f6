"""What a new user of TPU slices on GKE follows (issue 31's trial): a program's supervisor
gets the slices' node count and price from `supervised_slices` under the names the plan's
note and `supervisor_run`'s error suggest; the stack file, the example's image and the docs
say what the plan shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.bundled import bundled_plan
from tests.unit.test_program_facts import write_program
from tests.unit.test_program_tpu_gke import TPU_GKE_MAIN
from trainstack.components.catalog.tpu_gke import JAX_TPU_IMAGE
from trainstack.components.tpu_gke_slices import supervised_slices
from trainstack.infra.config import load_stack_config
from trainstack.infra.plan import bundled_stacks, load_stack
from trainstack.infra.program_plan import build_program_plan
from trainstack.infra.targets.tpu_gke import TARGET as TPU_GKE

WIRED = '"run": supervisor_run(target.run_record, target.hosts, max_run_seconds=14400),'


def _args(**extra: object) -> dict[str, object]:
    return {
        "project": "acme-ml",
        "zone": "us-east5-b",
        "deployment_name": "acme",
        "accelerator_type": "v6e-16",
        "slices": 2,
        "provisioning": "spot",
        "image": "us-docker.pkg.dev/acme-ml/jax/tpu:1",
        "node_args": ["--launcher=node", "--", "python", "train.py"],
        "package_uri": "gs://acme-staging/trainer.tar.gz",
        "network_self_link": "n",
        "subnetwork_self_link": "s",
        "node_tag": "t",
        "service_account_email": "a@acme-ml.iam.gserviceaccount.com",
        **extra,
    }


def test_supervised_slices_has_the_node_count_and_the_stack_plans_price() -> None:
    target = supervised_slices(_args())  # type: ignore[arg-type]
    # Before: AttributeError: 'SupervisedSlices' object has no attribute 'node_count', and
    # no hourly_usd (a program hard-coded 34.56).
    assert (target.node_count, target.hosts) == (8, 8)
    _, config = load_stack("dev-tpu-v6e-gke", None)
    assert target.hourly_usd == TPU_GKE.stoppable_hourly_usd(load_stack_config(config)) == 34.56
    on_demand = supervised_slices(_args(provisioning="on-demand", slices=3))  # type: ignore[arg-type]
    assert (on_demand.node_count, on_demand.hourly_usd) == (12, 129.6)


def test_the_note_of_a_tpu_gke_supervisor_without_run_names_its_helper(tmp_path: Path) -> None:
    assert WIRED in TPU_GKE_MAIN
    folder = write_program(tmp_path / "acme", TPU_GKE_MAIN.replace(WIRED, ""), "dev")
    (folder / "train").mkdir()
    (folder / "train" / "train.py").write_text("import jax\n")
    notes = build_program_plan(folder, "dev")["notes"]
    assert [n for n in notes if n.startswith("run supervisor: the RunSupervisor")] == [
        "run supervisor: the RunSupervisor of TpuGkeSlices acme-tpu (tpu_gke) has no `run` with "
        "the run's end record, so it cannot see the run's end; with nothing else in its `run`, "
        "it never stops the machines: they bill until `pulumi destroy`. To stop them at the "
        'run\'s end, give it `"run": supervisor_run(target.run_record, target.node_count, ...)` '
        "with `target = supervised_slices(args)` (trainstack.components.run_supervisor): "
        "docs/own-program.md"
    ]


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_bundled_stack_header_gives_its_batch_arithmetic(stack: str) -> None:
    # README: "Each opens with a header giving its hardware, the quota it needs, how to launch
    # it and its global-batch arithmetic."
    text = (REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    header = text[: text.index("\nconfig:")]
    assert len(re.findall(r"^# Batch arithmetic: ", header, re.MULTILINE)) == 1


def test_the_own_jax_image_is_googles_jax_tpu_image_at_a_pinned_tag() -> None:
    lines = (REPO_ROOT / "examples" / "own-jax" / "Dockerfile").read_text().splitlines()
    # The tag the pods run without `trainer.image`, so both paths run the same JAX.
    assert JAX_TPU_IMAGE == "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.2-rev1"
    assert [line for line in lines if line.startswith("FROM ")] == [f"FROM {JAX_TPU_IMAGE}"]


def test_the_guide_names_the_pools_as_the_plan_tree_does() -> None:
    names = sorted(
        r["name"]
        for r in bundled_plan("dev-tpu-v6e-gke")["resources"]
        if r["name"].startswith("dev-tpu-v6e-gke-tpu-slice-")
    )
    assert names == ["dev-tpu-v6e-gke-tpu-slice-0", "dev-tpu-v6e-gke-tpu-slice-1"]
    guide = (REPO_ROOT / "docs" / "guides" / "tpu-gke.md").read_text()
    assert "(`<stack>-tpu-slice-0`, `-slice-1`, ... in the plan's tree; GKE\nnames them" in guide


def test_the_supervisor_table_has_a_row_for_tpu_on_gke() -> None:
    page = (REPO_ROOT / "docs" / "costs-limits-supervisor.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `tpu` gke")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0].strip("|").split(" | ")]
    assert cells[2] == "the supervisor sets every slice's node pool to 0 nodes"
    assert cells[5] == (
        "the GKE cluster fee and its system node (at least $0.23/hour) until `pulumi destroy`"
    )

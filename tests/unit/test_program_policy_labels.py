"""`trainstack policy --program`: the labels the policy pack requires on accelerators
(`environment`, `stack`) come from the components' arguments (issue 30's trial: an
A100Cluster given `environment="dev"` still broke `accelerators-labelled` for want of
`stack`), and a program's violations name the installed pack's folder, which `--policy-pack`
takes (a program has no `policies/` of its own)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

import trainstack.policies
from tests.unit.test_program_facts import GKE_MAIN, write_program
from trainstack.infra.cli import app

runner = CliRunner()
ARGS = '    "spot": True,\n'
# The cluster alone (its supervisor's grant on a bucket of the program's own is another rule's).
_HEAD, _, _TAIL = GKE_MAIN.partition("target = supervised_compute(args)")
CLUSTER_MAIN = _HEAD + _TAIL[_TAIL.index("gpu = A100Cluster") :]


def test_an_environment_argument_labels_the_machines_as_the_policy_requires(
    tmp_path: Path,
) -> None:
    assert ARGS in CLUSTER_MAIN
    main = CLUSTER_MAIN.replace(ARGS, ARGS + '    "environment": "dev",\n')
    folder = write_program(tmp_path / "acme", main)
    result = runner.invoke(app, ["policy", "--program", str(folder), "--stack", "dev"])
    # Before: exit 1, "GPU node pool without the label(s) stack in nodeConfig.resourceLabels"
    # and the same for the training Job.
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("stack dev: clean (")


def test_a_programs_violations_name_the_installed_pack(tmp_path: Path) -> None:
    folder = write_program(tmp_path / "acme", CLUSTER_MAIN)
    result = runner.invoke(app, ["policy", "--program", str(folder), "--stack", "dev"])
    assert result.exit_code == 1, result.output
    pack = Path(trainstack.policies.__file__).parent
    assert (pack / "PulumiPolicy.yaml").is_file()
    # Before: "... block `pulumi up --policy-pack policies/`", a folder the program has not,
    # and nothing said what to pass.
    assert result.stdout.splitlines()[-2:] == [
        f"2 policy violation(s) in 1 of 1 stack(s); mandatory rules block `pulumi up "
        f"--policy-pack {pack}`",
        "accelerators-labelled: A100Cluster and TpuGkeSlices given `environment` label their "
        "machines with it and with `stack` (the Pulumi stack's name, unless `labels` has one); "
        "TpuPodSlice adds `stack`; give the rest in the component's `labels`, e.g. "
        '{"environment": "dev"}',
    ]

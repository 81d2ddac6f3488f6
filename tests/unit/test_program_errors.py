"""What `trainstack plan --program` says when a program of your own fails.

The exception reported is the one the program raised, with the engine's wrappers taken off
(pulumi's runtime wraps an error met while serializing inputs, once per input and resource,
and re-raises a failed registration with itself as its cause) and nothing else: a program's
own `raise ValueError(...) from err` is reported, not the `err` it explains. Each line is
`error: --program DIR: stack 'NAME': FILE:LINE: TYPE: MESSAGE`; a component's several
problems are one `error:` line each; exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainstack.infra.cli import app

runner = CliRunner()

BUCKETS = """\
from trainstack.components import TrainingBuckets

TrainingBuckets(
    "b",
    {
        "project": "acme-ml",
        "location": "US",
        "deployment_name": "acme",
        "environment": "dev",
        "checkpoint_retention_days": CHECKPOINT_DAYS,
        "labels": {"team": "acme"},
        EXTRA
    },
)
"""


def write_program(root: Path, main: str) -> Path:
    """A Pulumi project of your own in `root` with stack `dev` and `main` as __main__.py."""
    root.mkdir(parents=True)
    (root / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (root / "Pulumi.dev.yaml").write_text("config:\n  acme:size: huge\n")
    (root / "__main__.py").write_text(main)
    return root


def errors(root: Path) -> list[str]:
    """The stderr lines of `trainstack plan --program root --stack dev`, which exits 2."""
    result = runner.invoke(app, ["plan", "--program", str(root), "--stack", "dev"])
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    return result.stderr.splitlines()


def test_a_programs_own_exception_is_reported_not_the_one_it_wraps(tmp_path: Path) -> None:
    root = write_program(
        tmp_path / "acme",
        "import pulumi\n"
        "\n"
        "SIZES = {'small': 1, 'large': 4}\n"
        "size = pulumi.Config().require('size')\n"
        "try:\n"
        "    nodes = SIZES[size]\n"
        "except KeyError as err:\n"
        "    raise ValueError(f'acme:size must be one of small, large, not {size!r}') from err\n",
    )
    assert errors(root) == [
        f"error: --program {root}: stack 'dev': __main__.py:8: ValueError: acme:size must be "
        "one of small, large, not 'huge'"
    ]


def test_an_exception_raised_while_handling_another_is_the_one_reported(
    tmp_path: Path,
) -> None:
    root = write_program(
        tmp_path / "acme",
        "try:\n    {}['zone']\nexcept KeyError:\n    raise LookupError('acme: no zone set')\n",
    )
    assert errors(root) == [
        f"error: --program {root}: stack 'dev': __main__.py:4: LookupError: acme: no zone set"
    ]


def test_a_components_problems_are_one_error_line_each(tmp_path: Path) -> None:
    main = BUCKETS.replace("CHECKPOINT_DAYS", "'30'").replace("EXTRA", '"retention": 30,')
    root = write_program(tmp_path / "acme", main)
    head = f"error: --program {root}: stack 'dev': __main__.py:3: TrainingBuckets."
    assert errors(root) == [
        f"{head}retention: unknown key; valid: project, location, deployment_name, "
        "environment, checkpoint_retention_days, delete_data_on_destroy, labels, name_suffix",
        f"{head}checkpoint_retention_days: '30' is not an integer; valid: an integer 1-3650",
    ]


def test_policy_all_reports_each_problem_of_a_program_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = BUCKETS.replace("CHECKPOINT_DAYS", "'30'").replace("EXTRA", '"retention": 30,')
    root = write_program(tmp_path / "acme", main)
    monkeypatch.chdir(root)
    result = runner.invoke(app, ["policy", "--all"])
    head = (
        f"error: stack 'dev' not checked: --program {root}: stack 'dev': __main__.py:3: "
        "TrainingBuckets."
    )
    assert (result.exit_code, result.stdout, result.stderr.splitlines()) == (
        2,
        "",
        [
            f"{head}retention: unknown key; valid: project, location, deployment_name, "
            "environment, checkpoint_retention_days, delete_data_on_destroy, labels, "
            "name_suffix",
            f"{head}checkpoint_retention_days: '30' is not an integer; valid: an integer 1-3650",
        ],
    )


def _plan_in_a_process(root: Path) -> subprocess.CompletedProcess[str]:
    # A process of its own: what asyncio logs when a task is collected shows on its stderr,
    # and a program that never finishes planning fails the test instead of hanging it.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.infra.cli",
            "plan",
            "--program",
            str(root),
            "--stack",
            "dev",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_error_in_a_resource_input_is_unwrapped_from_the_engines_wrappers(
    tmp_path: Path,
) -> None:
    # The runtime wraps the ValueError per input and per resource, then re-raises the
    # registration's failure with itself as its cause (pulumi/runtime/stack.py
    # `wait_for_rpcs`): following causes to the end never ended.
    root = write_program(
        tmp_path / "acme",
        "import pulumi\n"
        "import pulumi_gcp as gcp\n"
        "\n"
        "\n"
        "def location(region):\n"
        "    raise ValueError(f'acme:region: {region!r} has no bucket location; valid: us')\n"
        "\n"
        "\n"
        "gcp.storage.Bucket('data', location=pulumi.Output.from_input('mars').apply(location))\n",
    )
    done = _plan_in_a_process(root)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: --program {root}: stack 'dev': __main__.py:6: ValueError: acme:region: "
        "'mars' has no bucket location; valid: us\n",
    )


def test_a_program_that_exits_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    root = write_program(tmp_path / "acme", "import sys\n\nsys.exit(3)\n")
    done = _plan_in_a_process(root)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: --program {root}: stack 'dev': the program exited with code 3; valid: a "
        "program that declares its resources and returns\n",
    )


@pytest.mark.parametrize("call", ["os._exit(0)", "sys.exit(0)"])
def test_a_program_that_exits_0_is_no_plan_and_exit_2(tmp_path: Path, call: str) -> None:
    """`os._exit` ends a process without unwinding: the program runs inside `plan`, so it
    ended `plan` silently with exit code 0 (CI: success, no plan)."""
    root = write_program(tmp_path / "acme", f"import os\nimport sys\n\n{call}\n")
    done = _plan_in_a_process(root)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: --program {root}: stack 'dev': the program exited with code 0; valid: a "
        "program that declares its resources and returns\n",
    )

"""The worked example in examples/tpu-own-bucket: an outside Pulumi program that imports
trainstack components and composes TpuPodSlice with a bucket of its own, run under mocks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import REPO_ROOT
from trainstack.infra.testing import ProgramResult, run_program_dir

EXAMPLE = REPO_ROOT / "examples" / "tpu-own-bucket"


def _run() -> ProgramResult:
    return run_program_dir(EXAMPLE, stack="dev")


def test_the_example_composes_trainstack_components_with_its_own_bucket() -> None:
    run = _run()
    by_name = {r.name: r for r in run.resources}
    slice_vm = by_name["tpu-own-bucket-dev-tpu-vm"]
    assert slice_vm.type == "gcp:tpu/v2Vm:V2Vm"
    assert slice_vm.parent == "tpu-own-bucket-dev-tpu"
    assert by_name["tpu-own-bucket-dev-tpu"].type == "trainstack:tpu:TpuPodSlice"
    assert slice_vm.inputs["acceleratorConfig"] == {"type": "V4", "topology": "2x2x4"}
    assert slice_vm.inputs["schedulingConfig"] == {"spot": True}
    assert slice_vm.inputs["networkConfig"]["enableExternalIps"] is False
    # The program's own bucket, not one of trainstack's, holds checkpoints and the package.
    bucket = by_name["checkpoints"]
    assert bucket.type == "gcp:storage/bucket:Bucket" and bucket.parent is None
    assert bucket.inputs["name"] == "my-ml-project-tpu-own-bucket-dev-ckpt"
    sdist = by_name["tpu-own-bucket-dev-trainer-sdist"]
    assert sdist.inputs["bucket"] == "my-ml-project-tpu-own-bucket-dev-ckpt"
    script = slice_vm.inputs["metadata"]["startup-script"]
    assert "--checkpoint_dir=gs://my-ml-project-tpu-own-bucket-dev-ckpt/checkpoints" in script
    assert not [r for r in run.resources if r.type.startswith("trainstack:storage:Training")]
    assert run.exports == {
        "slice": "tpu-own-bucket-dev-tpu",
        "chips": 16,
        "console": (
            "https://console.cloud.google.com/compute/tpus/details/us-central2-b/"
            "tpu-own-bucket-dev-tpu?project=my-ml-project"
        ),
        "checkpoints": "gs://my-ml-project-tpu-own-bucket-dev-ckpt/checkpoints",
    }


def test_config_given_to_the_helper_overrides_the_stack_file() -> None:
    run = run_program_dir(EXAMPLE, stack="dev", config={"accelerator_type": "v4-16"})
    assert run.exports["chips"] == 8
    assert run.named("tpu-own-bucket-dev-tpu-vm").inputs["acceleratorConfig"] == {
        "type": "V4",
        "topology": "2x2x2",
    }


RUN_EXAMPLE = (
    "from trainstack.infra.testing import run_program_dir\n"
    "run = run_program_dir('examples/tpu-own-bucket', stack='dev')\n"
    "print(len(run.resources), run.exports['chips'])\n"
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PYTHONASYNCIODEBUG", None)
    return subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_helper_leaves_no_event_loop_behind_for_interpreter_exit() -> None:
    result = _python(RUN_EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "14 16\n"
    for symptom in ("Invalid file descriptor", "unclosed event loop", "Exception ignored"):
        assert symptom not in result.stderr, result.stderr


def test_pulumi_mocks_alone_leave_a_loop_unclosed() -> None:
    # The cause trainstack.infra.mocks.run_program removes (infra/mocks.py docstring): Pulumi's mock
    # monitor gives each executor thread it answers from a loop that nobody closes.
    result = _python(
        "import pulumi\n"
        "from pulumi.runtime.sync_await import _sync_await\n"
        "class Echo(pulumi.runtime.Mocks):\n"
        "    def new_resource(self, args): return f'{args.name}-id', dict(args.inputs)\n"
        "    def call(self, args): return {}, []\n"
        "pulumi.runtime.set_mocks(Echo(), preview=True)\n"
        "thing = pulumi.CustomResource('test:index:Thing', 'thing', {'size': 1})\n"
        "print(_sync_await(thing.urn.future()))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "urn:pulumi:stack::project::pulumi:pulumi:Stack$test:index:Thing::thing\n"
    )
    assert "ResourceWarning: unclosed event loop" in result.stderr


def test_the_example_installs_trainstack_from_this_checkout() -> None:
    lines = [
        line.strip()
        for line in (EXAMPLE / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "../.."
    assert (EXAMPLE / lines[0]).resolve() == Path(REPO_ROOT).resolve()
    assert lines[1:] == ["pulumi>=3.200,<4", "pulumi-gcp>=10,<11"]

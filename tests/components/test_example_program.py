"""The worked example in examples/tpu-own-bucket: an outside Pulumi program that imports
trainstack components and composes TpuPodSlice with a bucket of its own, run under mocks."""

from __future__ import annotations

import runpy
from pathlib import Path

import yaml

from infra.mocks import REPO_ROOT, ProgramRun, run_program

EXAMPLE = REPO_ROOT / "examples" / "tpu-own-bucket"


def _run() -> ProgramRun:
    config = yaml.safe_load((EXAMPLE / "Pulumi.dev.yaml").read_text())["config"]

    def program() -> None:
        runpy.run_path(str(EXAMPLE / "__main__.py"), run_name="__main__")

    return run_program(program, config=config, stack="dev", project="tpu-own-bucket")


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


def test_the_example_installs_trainstack_from_this_checkout() -> None:
    lines = [
        line.strip()
        for line in (EXAMPLE / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "../.."
    assert (EXAMPLE / lines[0]).resolve() == Path(REPO_ROOT).resolve()

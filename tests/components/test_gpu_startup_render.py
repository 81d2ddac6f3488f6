"""Rendering of the node launch scripts: valid bash, the launcher embedded in the Compute
Engine startup script, rejected values and template drift, checkpoint flags, and the node
helper's URLs. Running them: test_gpu_startup.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.components.test_gpu_startup import (
    COORDINATOR_GCE,
    FLAGS,
    GCE_HOSTS,
    PACKAGE_URI,
    _gce_script,
)
from trainstack.components import gpu_startup
from trainstack.components.gpu_startup import node_helper, with_checkpoint_dir


def _launcher(**overrides: Any) -> str:
    """The launcher script as `render_launcher` renders it for Compute Engine."""
    values: dict[str, Any] = {
        "package_uri": PACKAGE_URI,
        "module": "trainstack.trainers.torch_ddp",
        "trainer_args": FLAGS,
        "num_nodes": 4,
        "procs_per_node": 8,
        "coordinator": COORDINATOR_GCE,
        "work_dir": "/var/lib/trainstack",
        **overrides,
    }
    return gpu_startup.render_launcher(**values)


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------


def test_rendered_scripts_are_valid_bash(tmp_path: Path) -> None:
    for script in (_launcher(), _gce_script(tmp_path)):
        assert "@@" not in script
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_gce_script_embeds_the_gce_launcher(tmp_path: Path) -> None:
    script = _gce_script(tmp_path)
    key = gpu_startup.run_key(
        package_uri=PACKAGE_URI,
        module="trainstack.trainers.torch_ddp",
        trainer_args=FLAGS,
        num_nodes=4,
        procs_per_node=8,
        coordinator=COORDINATOR_GCE,
        coordinator_port=29500,
        worker_hosts=GCE_HOSTS,
    )
    launcher = _launcher(
        coordinator=COORDINATOR_GCE,
        work_dir=str(tmp_path / "state"),
        done_marker=f"{tmp_path / 'state'}/done-{key}",
        extra_path="/opt/conda/bin",
        worker_hosts=GCE_HOSTS,
        setup_failures=f"{tmp_path / 'state'}/setup-failures-{key}",
    )
    assert f"<<'TRAINSTACK_LAUNCHER_EOF'\n{launcher.rstrip()}\nTRAINSTACK_LAUNCHER_EOF\n" in script
    assert f"RUN_KEY={key}\n" in script


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"package_uri": "https://x/y.tar.gz"}, "package_uri: 'https://x/y.tar.gz' is not a gs://bucket/object URI of the trainer sdist"),
        ({"package_uri": "gs://bucket/"}, "package_uri: 'gs://bucket/' is not a gs://bucket/object URI of the trainer sdist"),
        ({"module": "trainers.torch-ddp"}, "trainer_module: 'trainers.torch-ddp' is not a Python module name"),
        ({"trainer_args": ["--a=1\nrm"]}, "trainer_args: '--a=1\\nrm' is not a one-line string"),
        ({"num_nodes": 0}, "node_count: 0 is not an integer >= 1"),
        ({"procs_per_node": True}, "procs_per_node: True is not an integer >= 1"),
        ({"coordinator": "bad host"}, "coordinator: 'bad host' is not a host name"),
        ({"coordinator_port": 70000}, "coordinator_port: 70000 is not a TCP port (1-65535)"),
        ({"worker_hosts": ["a", "b"]}, "worker_hosts: 2 host(s) for 4 node(s); valid: one per node"),
        ({"worker_hosts": ["a", "b", "c", "d_"]}, "worker_hosts: 'd_' is not a host name"),
    ],
)  # fmt: skip
def test_render_rejects_bad_values(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        _launcher(**overrides)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("args", "url", "expected"),
    [
        (["--steps=1"], "gs://ckpt", ["--steps=1", "--checkpoint_dir=gs://ckpt/checkpoints/run"]),
        (["--steps=1"], "gs://ckpt/", ["--steps=1", "--checkpoint_dir=gs://ckpt/checkpoints/run"]),
        (
            ["--run_name=exp-7", "--steps=1"],
            "gs://ckpt",
            ["--run_name=exp-7", "--steps=1", "--checkpoint_dir=gs://ckpt/checkpoints/exp-7"],
        ),
        (["--checkpoint_dir=gs://mine"], "gs://ckpt", ["--checkpoint_dir=gs://mine"]),
        (["--checkpoint_dir", "gs://mine"], "gs://ckpt", ["--checkpoint_dir", "gs://mine"]),
        (["--steps=1"], None, ["--steps=1"]),
    ],
)
def test_with_checkpoint_dir(args: list[str], url: str | None, expected: list[str]) -> None:
    assert with_checkpoint_dir(args, url) == expected


def test_render_rejects_template_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "launch.sh"
    template.write_text(gpu_startup.LAUNCHER_TEMPLATE.read_text() + "echo @@UNKNOWN@@\n")
    monkeypatch.setattr(gpu_startup, "LAUNCHER_TEMPLATE", template)
    with pytest.raises(ValueError, match=r"launch.sh: markers \[.*'UNKNOWN'.*\] do not match"):
        _launcher()


def test_node_helper_object_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert node_helper.object_url(PACKAGE_URI) == (
        "https://storage.googleapis.com/storage/v1/b/acme-ml-exp-42-staging/o/"
        "trainers%2Ftrainstack_trainers-0123456789abcdef.tar.gz?alt=media"
    )
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:8080")
    assert node_helper.metadata_base() == "http://127.0.0.1:8080/computeMetadata/v1/"
    monkeypatch.delenv("GCE_METADATA_HOST")
    assert node_helper.metadata_base() == "http://metadata.google.internal/computeMetadata/v1/"
    with pytest.raises(ValueError, match="gs:// URI without bucket or object: 'gs://only'"):
        node_helper.object_url("gs://only")

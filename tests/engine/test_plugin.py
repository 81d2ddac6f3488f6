"""The dynamic-provider plugin starts as the engine starts it, from this repository's
Pulumi.yaml, and every stack and example with a dynamic resource is covered by the tier."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.engine.cases import DYNAMIC_RESOURCES
from tests.engine.double import (
    EXITED_ON_SIGINT,
    PluginLaunch,
    PluginStartError,
    ProviderHost,
    plugin_command,
    plugin_launch,
)
from tests.engine.programs import DYNAMIC_PREFIX, REPO_ROOT, capture, example_projects, sources
from trainstack.infra.testing import run_program_dir


def test_the_plugin_starts_from_the_repository_pulumi_yaml(launch: PluginLaunch) -> None:
    # Fails with the plugin script's own message while the virtualenv that Pulumi.yaml
    # names cannot be found from the program folder (pulumi/pulumi issue 7061).
    argv, env = plugin_command(launch, os.environ)
    assert argv[1:] == ["-u", "-m", "pulumi.dynamic"]
    assert env["PULUMI_PROJECT"] == "trainstack"
    host = ProviderHost(launch, os.environ)
    try:
        assert host.argv[-1] == host.engine_address
        assert host.process.pid == os.getpgid(host.process.pid)  # its own process group
    finally:
        host.close()
    # SIGINT (Plugin.Close) stops the host well within the 5 s before SIGKILL.
    assert host.killed is False and host.returncode in EXITED_ON_SIGINT


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def test_plugin_launch_reads_main_and_runtime_options(tmp_path: Path) -> None:
    (tmp_path / "prog").mkdir()
    project = _project(
        tmp_path,
        "name: p\nmain: prog/\nruntime:\n  name: python\n"
        "  options:\n    virtualenv: venv\n    typechecker: pyright\n",
    )
    launch = plugin_launch(project)
    assert launch.pwd == tmp_path / "prog"
    assert launch.options_env == {
        "PULUMI_RUNTIME_VIRTUALENV": "venv",
        "PULUMI_RUNTIME_TYPECHECKER": "pyright",
        "PULUMI_PROJECT": "p",
    }
    # The virtualenv is looked for under the program folder, as the plugin script does.
    with pytest.raises(PluginStartError) as info:
        plugin_command(launch, {"PATH": "/usr/bin"})
    venv = f"{tmp_path}/prog/venv"
    assert str(info.value) == (
        f'The \'virtualenv\' option in Pulumi.yaml is set to "{venv}", but "{venv}" doesn\'t exist.'
    )
    (tmp_path / "prog" / "venv").mkdir()
    with pytest.raises(PluginStartError, match="doesn't appear to be a virtual environment"):
        plugin_command(launch, {"PATH": "/usr/bin"})
    uv = plugin_launch(
        _project(tmp_path, "name: p\nruntime:\n  name: python\n  options:\n    toolchain: uv\n")
    )
    with pytest.raises(PluginStartError, match=f'set to "{tmp_path}/.venv"'):
        plugin_command(uv, {"PATH": "/usr/bin"})


def test_every_stack_and_example_with_a_dynamic_resource_is_listed() -> None:
    found = {
        label: [(g.type, g.name) for g in capture(config, stack, first_preview=False)]
        for label, (stack, config) in sources().items()
    }
    assert found == DYNAMIC_RESOURCES
    # Example projects of their own (their own Pulumi.yaml) register none today; one that
    # does needs its own launch (its own Pulumi.yaml and virtualenv) in this tier.
    for project in example_projects():
        for stack_file in sorted(project.glob("Pulumi.*.yaml")):
            stack = stack_file.name.split(".")[1]
            run = run_program_dir(project, stack=stack)
            dynamic = [r.name for r in run.resources if r.type.startswith(DYNAMIC_PREFIX)]
            assert dynamic == [], f"{project.relative_to(REPO_ROOT)} {stack}: {dynamic}"

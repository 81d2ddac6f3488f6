"""Pulumi.yaml's layout: the language host and every plugin the engine starts find one venv.

The Python language host resolves a relative `runtime.options.virtualenv` against the
project root; the dynamic-provider plugin (`pulumi-resource-pulumi-python`, a shell script
shipped with the CLI) resolves it against its working directory, which the engine sets to
the program's `main` folder. With `main: infra/` the program ran and the first dynamic
resource failed: the plugin looked for infra/.venv. Each resolution below is written from
pulumi/pulumi's source (lines at commit 1b59498, after v3.259.0; the same since v3.3.0):

- engine, plugin working directory: `getPwdMain` (pkg/engine/project.go:45-70) makes the
  `main` folder the context's `Pwd` (pkg/engine/deployment.go:57-68); `NewProvider` starts
  the plugin in `ctx.Pwd` (pkg/resource/plugin/provider_plugin.go:288; plugin.go:599
  `cmd.Dir = pwd`) with each runtime option as `PULUMI_RUNTIME_<KEY>` formatted with `%v`
  (provider_plugin.go:246-249). Its environment is the CLI's own plus those (plugin.go:
  500-505, 601-603), so `PWD` is the CLI's directory, not the plugin's; sh replaces a
  `PWD` that is not its working directory.
- plugin script: sdk/python/dist/pulumi-resource-pulumi-python:13-21 (strip a trailing
  slash, prefix `$PWD/` when relative), 24-33 (run `$venv/bin/python`), 35-45 (else the
  "doesn't exist" error, exit 1).
- language host: `parseOptions(req.Info.RootDirectory, ...)`
  (sdk/python/cmd/pulumi-language-python/main.go:233-247), the pip toolchain built on
  `options.Root` (sdk/python/toolchain/toolchain.go:140-166), `resolveVirtualEnvironmentPath`
  joining a relative path to the root (sdk/python/toolchain/pip.go:583-591).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import REPO_ROOT
from trainstack.infra.plan import build_plan, load_stack
from trainstack.infra.testing import run_program_dir


def _project_files() -> list[str]:
    found = []
    for folder, subfolders, files in os.walk(REPO_ROOT):
        # Hidden folders (.venv, .git, .trainstack) and virtualenvs hold no project of ours.
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "venv"]
        if "Pulumi.yaml" in files:
            found.append((Path(folder) / "Pulumi.yaml").relative_to(REPO_ROOT).as_posix())
    return sorted(found)


PROJECT_FILES = _project_files()

# What the plugin script does with the virtualenv it is given, in the same steps (lines
# 13-33 cited above); instead of `-m pulumi.dynamic` the venv's python prints its prefix.
PLUGIN_SCRIPT_EQUIVALENT = r"""
venv="${PULUMI_RUNTIME_VIRTUALENV%/}"
case "$venv" in
    /*) : ;;
    *) venv="$PWD/$venv" ;;
esac
printf '%s\n' "$venv"
if [ -f "$venv/bin/python" ]; then
    "$venv/bin/python" -u -c 'import sys; print(sys.prefix)'
else
    echo "The 'virtualenv' option in Pulumi.yaml is set to \"$venv\", but \"$venv\" doesn't exist." >&2
    exit 1
fi
"""


def _project(relative: str) -> tuple[Path, dict[str, Any]]:
    path = REPO_ROOT / relative
    return path.parent, yaml.safe_load(path.read_text())


def _options(project: dict[str, Any]) -> dict[str, Any]:
    options = dict(project["runtime"]["options"])
    # uv and poetry pick their venv another way (the script's lines 4-11): not modelled.
    assert options.get("toolchain", "pip") == "pip", options
    return options


def plugin_working_directory(root: Path, project: dict[str, Any]) -> Path:
    """The folder the engine starts plugins in (`getPwdMain`, project.go:45-70)."""
    main = project.get("main")
    if not main:
        return root
    target = Path(os.path.normpath(root / main))
    return target if target.is_dir() else target.parent


def language_host_virtualenv(root: Path, project: dict[str, Any]) -> Path:
    """`resolveVirtualEnvironmentPath(root, virtualenv)` (pip.go:583-591)."""
    venv = str(_options(project)["virtualenv"])
    return Path(venv) if os.path.isabs(venv) else Path(os.path.normpath(root / venv))


def run_plugin_script(root: Path, project: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The plugin script's resolution, run by /bin/sh as the engine starts the plugin."""
    env = {
        **os.environ,
        "PULUMI_RUNTIME_VIRTUALENV": str(_options(project)["virtualenv"]),
        "PWD": str(root),  # the CLI's directory, inherited (plugin.go:500-505)
    }
    env.pop("PYTHONHOME", None)
    return subprocess.run(
        ["/bin/sh", "-c", PLUGIN_SCRIPT_EQUIVALENT],
        cwd=plugin_working_directory(root, project),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("project_file", PROJECT_FILES)
def test_language_host_and_plugin_resolve_one_virtualenv(project_file: str) -> None:
    root, project = _project(project_file)
    result = run_plugin_script(root, project)
    plugin_venv = Path(os.path.normpath(result.stdout.splitlines()[0]))
    assert plugin_venv == language_host_virtualenv(root, project), result.stderr


def test_every_project_file_is_checked() -> None:
    assert PROJECT_FILES == [
        "Pulumi.yaml",
        "examples/own-program/Pulumi.yaml",
        "examples/tpu-own-bucket/Pulumi.yaml",
    ]


def test_the_dynamic_provider_plugin_starts_the_repos_venv() -> None:
    root, project = _project("Pulumi.yaml")
    assert language_host_virtualenv(root, project) == REPO_ROOT / ".venv"
    result = run_plugin_script(root, project)
    assert result.returncode == 0, result.stderr
    resolved, prefix = result.stdout.splitlines()
    assert Path(resolved) == REPO_ROOT / ".venv"
    # The python it starts is that venv's (`make install` made it; it may be a link).
    assert Path(prefix).resolve() == (REPO_ROOT / ".venv").resolve()


def test_the_program_is_found_where_the_engine_runs_it() -> None:
    # The language host runs `main` ("." when absent) in the engine's working directory with
    # runpy.run_path, which for a folder runs its __main__.py
    # (sdk/python/cmd/pulumi-language-python-exec:147-149, 188).
    root, project = _project("Pulumi.yaml")
    assert (plugin_working_directory(root, project) / "__main__.py").is_file()


def test_the_program_registers_what_trainstack_plan_shows() -> None:
    run = run_program_dir(REPO_ROOT, stack="local")
    name, config = load_stack("local", None)
    plan = build_plan(name, config)
    registered = sorted((r.type, r.name, r.parent) for r in run.resources)
    planned = sorted((r["type"], r["name"], r["parent"]) for r in plan["resources"])
    assert registered == planned
    assert run.exports == plan["outputs"]

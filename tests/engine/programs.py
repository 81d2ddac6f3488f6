"""The stack programs whose dynamic resources the engine tier drives, run under mocks.

A program run here is trainstack's own (`trainstack.infra.compose.main_program`) with a stack's config,
under `trainstack.infra.testing.run_pulumi_program` (Pulumi's mock monitor). Besides what
`trainstack.infra.mocks.RecordingMonitor` records, each dynamic resource's RegisterResource `object`
is kept exactly as the SDK sent it (the `__provider` secret and unknown sentinels
included): that is what the engine hands on to the provider.

    goals = capture(config, "local", first_preview=True)   # computed outputs unknown
    goals = capture(config, "local", first_preview=False)  # an `up`: everything known
"""

from __future__ import annotations

import copy
import glob
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pulumi
import pytest
from google.protobuf import struct_pb2

import trainstack.infra.mocks
from tests.engine.double import Goal
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import DEFAULT_OUTPUTS, RecordingMocks, RecordingMonitor
from trainstack.infra.plan import bundled_stacks, load_stack
from trainstack.infra.testing import run_pulumi_program

REPO_ROOT = Path(__file__).resolve().parents[2]
DYNAMIC_PREFIX = "pulumi-python:dynamic"


def _nothing(_name: str, _inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


NO_COMPUTED_OUTPUTS = dict.fromkeys(DEFAULT_OUTPUTS, _nothing)
"""In a first preview nothing exists yet: a resource's computed outputs (emails, URLs, self
links) are unknown, so every input built from them is too."""


class _KeepingMonitor(RecordingMonitor):
    def __init__(self, mocks: RecordingMocks, digest_secrets: bool = False) -> None:
        super().__init__(mocks, digest_secrets)
        self.goals: list[Goal] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type.startswith(DYNAMIC_PREFIX):
            registered = struct_pb2.Struct()
            registered.CopyFrom(request.object)
            self.goals.append(Goal(response.urn, request.type, request.name, registered))
        return response


@contextmanager
def _keeping() -> Iterator[list[_KeepingMonitor]]:
    monitors: list[_KeepingMonitor] = []

    def make(mocks: RecordingMocks, digest_secrets: bool = False) -> _KeepingMonitor:
        monitors.append(_KeepingMonitor(mocks, digest_secrets))
        return monitors[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainstack.infra.mocks, "RecordingMonitor", make)
        # Under `pulumi up` the language host gives the program the project's root (the
        # Pulumi.yaml folder); Pulumi's mocks answer the placeholder "root_directory".
        patch.setattr(pulumi, "get_root_directory", lambda: str(REPO_ROOT))
        yield monitors


def capture(config: Mapping[str, Any], stack: str, *, first_preview: bool) -> list[Goal]:
    """The dynamic resources `main_program` registers for `config` as stack `stack`.

    `first_preview`: no computed outputs (what `pulumi preview` of a new stack registers);
    otherwise every output the program uses is known (what `pulumi up` registers once
    its dependencies exist, and what a later preview of the same, unchanged stack does).
    """
    with _keeping() as monitors:
        run_pulumi_program(
            main_program,
            config=copy.deepcopy(dict(config)),
            stack=stack,
            project="trainstack",
            # Dry run both times: outside one, the mocks answer an output no table computes
            # with None, where the engine would have the provider's value.
            preview=True,
            outputs=NO_COMPUTED_OUTPUTS if first_preview else None,
        )
    return monitors[0].goals


def example_stack_files() -> list[Path]:
    """Example stack files run with the root project (their folder has no Pulumi.yaml)."""
    found = sorted(Path(p) for p in glob.glob(str(REPO_ROOT / "examples/*/Pulumi.*.yaml")))
    return [p for p in found if not (p.parent / "Pulumi.yaml").is_file()]


def example_projects() -> list[Path]:
    """Example folders that are Pulumi projects of their own."""
    return sorted(p.parent for p in (REPO_ROOT / "examples").glob("*/Pulumi.yaml"))


def sources() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every bundled stack and example stack file: label -> (stack name, config)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for stack in bundled_stacks():
        found[f"stacks/{stack}"] = load_stack(stack, None)
    for path in example_stack_files():
        found[str(path.relative_to(REPO_ROOT))] = load_stack(None, path)
    return found

"""Run your own Pulumi program offline under trainstack's recording mocks.

The public face of `trainstack.infra.mocks`: the same engine `trainstack plan` and trainstack's own
tests use, for a program that composes trainstack components with resources of its own.
No credentials, no network, no Pulumi CLI. A test asserts on what the program registered
(type, logical name, parent, inputs exactly as Pulumi would send them) and on what it
exported with `pulumi.export`::

    from trainstack.infra.testing import run_pulumi_program, run_program_dir

    run = run_program_dir("examples/tpu-own-bucket", stack="dev")  # its Pulumi.dev.yaml
    run.exports["chips"]                                # 16
    run.named("checkpoints").inputs["location"]        # "US-CENTRAL2"

    def program() -> None:
        TrainingNetwork("net", {...})

    run = run_pulumi_program(program, config={"gcp:project": "p"})
    [r.type for r in run.resources]

Each run gets event loops of its own and closes them when it ends (`trainstack.infra.mocks`
explains why: otherwise interpreter exit can print `ValueError: Invalid file descriptor: -1`
from `BaseEventLoop.__del__`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.infra.mocks import (
    SECRET,
    UNKNOWN,
    InvokeFailure,
    InvokeFn,
    OutputsFn,
    ProgramRun,
    RecordedResource,
    run_program,
)
from trainstack.infra.program_run import read_program, run_program_folder, stack_config

__all__ = [
    "SECRET",
    "UNKNOWN",
    "InvokeFailure",
    "ProgramResult",
    "RecordedResource",
    "run_program_dir",
    "run_pulumi_program",
]


@dataclass
class ProgramResult:
    """What one offline run of a program registered and exported."""

    run: ProgramRun
    """Everything recorded (`resources`, `invokes`, `logs`; `outputs` = `exports`)."""

    @property
    def resources(self) -> list[RecordedResource]:
        """Every registered resource (the root Stack aside), in registration order."""
        return self.run.resources

    @property
    def exports(self) -> dict[str, Any]:
        """`pulumi.export` values, resolved; a value a provider computes at deploy time is
        `UNKNOWN` in a preview, a secret `SECRET` where it is nested in an input."""
        return self.run.outputs

    @property
    def logs(self) -> list[tuple[str, str]]:
        """(level, message) of what the program logged with `pulumi.log`."""
        return self.run.logs

    def named(self, name: str) -> RecordedResource:
        """The one resource with logical name `name` (KeyError naming the others)."""
        return self.run.named(name)

    def of_type(self, type_token: str) -> list[RecordedResource]:
        """The resources of type `type_token`, e.g. `gcp:storage/bucket:Bucket`."""
        return self.run.of_type(type_token)


def run_pulumi_program(
    program: Callable[[], Mapping[str, Any] | None],
    *,
    config: Mapping[str, Any] | None = None,
    stack: str = "test",
    project: str = "test",
    preview: bool = True,
    outputs: Mapping[str, OutputsFn] | None = None,
    invokes: Mapping[str, InvokeFn] | None = None,
) -> ProgramResult:
    """Run `program` (a function that declares resources) under recording mocks.

    `config` is a stack file's `config:` mapping, keys with their namespace
    (`{"gcp:project": "p", "tpu-own-bucket:zone": "us-central2-b"}`); `pulumi.Config()` in
    the program reads them. `outputs` adds computed outputs per resource type token and
    `invokes` answers data-source calls by token (raise `InvokeFailure` to fail one).
    A mapping the program returns is exported beside its `pulumi.export` values. An
    exception from the program propagates once the runtime has settled.
    """
    run = run_program(
        program,
        config=config,
        stack=stack,
        project=project,
        preview=preview,
        outputs=outputs,
        invokes=invokes,
    )
    return ProgramResult(run)


def run_program_dir(
    directory: str | Path,
    *,
    stack: str,
    config: Mapping[str, Any] | None = None,
    preview: bool = True,
    outputs: Mapping[str, OutputsFn] | None = None,
    invokes: Mapping[str, InvokeFn] | None = None,
) -> ProgramResult:
    """Run the Pulumi project in `directory` as stack `stack`, as `pulumi preview` would:
    its Pulumi.yaml `name` and `main` (else `__main__.py`), in `main`'s folder, with the
    config of its `Pulumi.<stack>.yaml` (in the project's `stackConfigDir`, if it names
    one; none when there is no such file) updated by `config`. The program's own top-level
    packages come first on `sys.path` and are unloaded after the run
    (`trainstack.infra.program_run`)."""
    program = read_program(directory, "run_program_dir")
    run = run_program_folder(
        program,
        stack=stack,
        config=stack_config(program, stack, config, required=False),
        preview=preview,
        outputs=outputs,
        invokes=invokes,
    )
    return ProgramResult(run)

"""A deployed program's compute, for `trainstack status|logs --program DIR --stack NAME`.

Every trainstack compute component and `RunSupervisor` registers its `facts`
(`trainstack.components.facts`): where its state and its logs are. They are read from the
first of:

1. `--state FILE`: a `pulumi stack export --show-secrets --stack NAME` document. The engine
   keeps each component's registered outputs as that resource's `outputs` in the checkpoint
   (pulumi/pulumi pkg/resource/deploy/step_executor.go, `executeRegisterResourceOutputs`:
   "Unconditionally set the resource's outputs to what was provided"), and the export writes
   them as `deployment.resources[].outputs` (sdk/go/common/apitype/core.go, `ResourceV3`), so
   nothing needs exporting. A secret there is `{"4dabf18193072939515e22adb298388d":
   "1b47061264138c4ac30d75fd1eb44270", "plaintext": "<JSON>"}` with `--show-secrets`, else
   with `ciphertext` (apitype `SecretV1`; pkg/resource/stack/deployment.go, `deserializeSecret`
   reads `plaintext` as JSON).
2. `--outputs FILE` (or `TRAINSTACK_OUTPUTS`): `pulumi stack output --json --show-secrets
   --stack NAME`; every value marked `"trainstack_facts": 1`, at any depth, is a component's
   facts: export them (`pulumi.export("tpu", tpu.facts)`). A GKE cluster's status reads its
   Job through the cluster's API server: export its kubeconfig too
   (`pulumi.export("kubeconfig", cluster.kubeconfig)`, a secret).
3. the Pulumi CLI, `pulumi stack export --show-secrets --stack NAME --cwd DIR`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.components.facts import is_facts
from trainstack.infra.program_facts import SUPERVISOR, is_compute
from trainstack.infra.stack_outputs import (
    OUTPUTS_ENV,
    OutputsError,
    file_document,
    pulumi_stdout,
    read_outputs,
)

SECRET_SIG = "4dabf18193072939515e22adb298388d"
"""The key that marks a secret value in a checkpoint (pulumi sdk/go/common/resource/sigs.go
`SecretSig`, apitype `SecretV1`)."""
ENCRYPTED = object()
"""A secret the export kept encrypted (exported without `--show-secrets`)."""
KUBECONFIG = "kubeconfig"
GKE_TARGETS = frozenset({"gke", "tpu_gke"})
"""The compute whose status reads a GKE cluster (A100Cluster's registered `kubeconfig`, and
TpuGkeSlices')."""
EXPORT_HINT = "`pulumi stack export --show-secrets --stack {stack} > FILE`"


@dataclass
class ProgramState:
    """The facts of a deployed program's components, compute first, and what status needs
    beside them."""

    facts: list[dict[str, Any]]
    kubeconfig: Any = None
    """The GKE cluster's kubeconfig (a `kubeconfig` output, or the registered one of an
    A100Cluster or TpuGkeSlices);
    `ENCRYPTED` where the export kept it encrypted."""
    roles: list[str] | None = None
    """The supervisor's custom roles (its registered `roles`; only in an export)."""
    source: str = field(default="")
    """Where they were read, for messages: `--state`, `--outputs`, ..."""

    @property
    def compute(self) -> list[dict[str, Any]]:
        return [f for f in self.facts if is_compute(f)]

    @property
    def supervisors(self) -> list[dict[str, Any]]:
        return [f for f in self.facts if f["target"] == SUPERVISOR]


def reveal(value: Any) -> Any:
    """`value` with every secret replaced by its plaintext (`ENCRYPTED` where there is none)."""
    if isinstance(value, Mapping):
        if SECRET_SIG in value:
            if "plaintext" not in value:
                return ENCRYPTED
            return reveal(json.loads(str(value["plaintext"])))
        return {key: reveal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [reveal(item) for item in value]
    return value


def find_facts(value: Any) -> list[dict[str, Any]]:
    """Every component's facts within `value`, at any depth, in document order."""
    if is_facts(value):
        return [dict(value)]
    if isinstance(value, Mapping):
        return [f for item in value.values() for f in find_facts(item)]
    if isinstance(value, list):
        return [f for item in value for f in find_facts(item)]
    return []


def _ordered(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Compute before supervisors, as a plan lists them; one component exported twice once.
    unique = list({json.dumps(f, sort_keys=True): f for f in facts}.values())
    return [f for f in unique if is_compute(f)] + [f for f in unique if not is_compute(f)]


def from_outputs(document: Mapping[str, Any], source: str) -> ProgramState:
    """The state of a `pulumi stack output --json --show-secrets` document."""
    outputs = reveal(document)
    return ProgramState(_ordered(find_facts(outputs)), outputs.get(KUBECONFIG), None, source)


def from_export(document: Mapping[str, Any], source: str) -> ProgramState:
    """The state of a `pulumi stack export` document (its components' registered outputs)."""
    deployment = document.get("deployment")
    resources = deployment.get("resources") if isinstance(deployment, Mapping) else None
    if not isinstance(resources, list):
        raise OutputsError(
            f"{source}: not a `pulumi stack export` document (no deployment.resources); "
            "valid: the output of `pulumi stack export --show-secrets`"
        )
    facts: list[dict[str, Any]] = []
    kubeconfig: Any = None
    roles = None
    for resource in resources:
        outputs = reveal(resource.get("outputs") or {})
        if not isinstance(outputs, Mapping):
            continue
        found: Mapping[str, Any] = outputs.get("facts") or {}
        if is_facts(found):
            facts.append(dict(found))
            if found["target"] in GKE_TARGETS:
                kubeconfig = outputs.get(KUBECONFIG)
            if found["target"] == SUPERVISOR:
                roles = outputs.get("roles")
        elif str(resource.get("type")) == "pulumi:pulumi:Stack":
            # The program's own exports: facts it exported, a kubeconfig.
            facts += find_facts(outputs)
            kubeconfig = kubeconfig or outputs.get(KUBECONFIG)
    return ProgramState(_ordered(facts), kubeconfig, roles, source)


def read_program_state(
    program: Path, stack: str, outputs_file: Path | None, state_file: Path | None
) -> ProgramState:
    """The deployed program's state (module docstring for the order of the sources)."""
    if state_file is not None:
        state = from_export(file_document(state_file, "--state", EXPORT_DOC), "--state")
    elif outputs_file is not None or os.environ.get(OUTPUTS_ENV):
        source = "--outputs" if outputs_file is not None else OUTPUTS_ENV
        state = from_outputs(read_outputs(stack, outputs_file), source)
    else:
        argv = ["stack", "export", "--show-secrets", "--stack", stack]
        text = pulumi_stdout(argv, stack, program, "--state FILE")
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = None
        if not isinstance(document, dict):
            raise OutputsError(
                f"stack {stack!r}: `pulumi stack export` printed no JSON object; valid: a "
                f"deployed stack, or --state FILE with {EXPORT_HINT.format(stack=stack)}"
            )
        state = from_export(document, "pulumi stack export")
    if not state.compute:
        raise OutputsError(
            f"stack {stack!r} has no trainstack compute in {state.source}: no component facts "
            '("trainstack_facts": 1) of a TpuPodSlice, TpuGkeSlices or A100Cluster; valid: '
            f"{EXPORT_HINT.format(stack=stack)} as --state FILE, or an --outputs FILE of a "
            'program that exports them (pulumi.export("tpu", tpu.facts))'
        )
    return state


EXPORT_DOC = "a `pulumi stack export --show-secrets` document"

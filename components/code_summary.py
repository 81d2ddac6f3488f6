"""Your own code as a plan shows it ("Your code"): one entry per compute that runs it.

`code_summary` is the entry: the source folder and the sha256 of its packaged files (what
decides whether a deployment relaunches), what is packaged (`files`: count, total bytes, the
largest, the ignore file, what it and the default secret rules left out; see
`trainstack.components._code_files`), the image, where it runs (`runs_on`), the entrypoint,
the launcher and whether the code chose it or the compute's default did (`launcher_from`),
the variables that launcher gives every process (`launcher_env`), the world size (processes
that run it), the requirements, the plain env and the secret_env names with the secrets they
read (resource names only: values never reach a plan).

A stack's plan builds it from the stack config's target (`trainstack.infra.code_plan`), a
compute component given `code` from its own arguments, as the `code` of its `facts`
(`trainstack.components.facts`), which `trainstack plan --program` shows: the same function,
so both say the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from trainstack.components._code_files import code_files
from trainstack.components.user_code import UserCode as ComponentCode
from trainstack.components.user_code import code_base_dir
from trainstack.trainers.common.contract import RUN_CONTRACT_ENV
from trainstack.trainers.common.user_code import (
    UserCode,
    UserLauncher,
    read_requirements,
    resolve_source,
)
from trainstack.trainers.user_code import OMPI_ENV

TORCHRUN_ENV: Final = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""What torchrun sets on each process it starts
(https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables")."""
NODE_ENV: Final = ("JAX_COORDINATOR_ADDRESS", *OMPI_ENV, "TF_CONFIG")
"""What `launcher: node` adds off a TPU VM (`trainstack.trainers.user_code.user_code_env`):
JAX's coordinator and Open MPI shape, and TF_CONFIG (Vertex sets its own)."""
GPU_NODE_ENV: Final = (*NODE_ENV, "JAX_LOCAL_DEVICE_IDS")
"""`NODE_ENV` on machines with GPUs (JAX gets its local devices)."""
TPU_WORKER_ENV: Final = ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES")
"""Exported by the TPU worker startup script before your code starts
(`components/startup/tpu_worker.sh`, `export TPU_WORKER_ID` / `TPU_WORKER_HOSTNAMES`); on
GKE set by its TPU webhook."""
MEGASCALE_ENV: Final = (
    "MEGASCALE_NUM_SLICES",
    "MEGASCALE_SLICE_ID",
    "MEGASCALE_COORDINATOR_ADDRESS",
)
"""What a GKE TPU JobSet's pods of several slices get from JobSet's labels
(`trainstack.components._tpu_jobset`)."""


def launcher_env(launcher: UserLauncher, node_env: Sequence[str]) -> list[str]:
    """The variables every process gets from `launcher`: the run contract, then torchrun's,
    or with `node` the compute's `node_env` (your `env` and `secret_env` come on top)."""
    return [*RUN_CONTRACT_ENV, *(TORCHRUN_ENV if launcher == "torchrun" else node_env)]


def code_summary(
    code: UserCode,
    *,
    default_launcher: UserLauncher,
    launcher_key: str,
    default_on: str,
    runs_on: str,
    world_size: int,
    node_env: Sequence[str],
    base_dir: Path,
) -> dict[str, Any]:
    """The plan's entry for `code` on one compute (module docstring): `launcher_key` names the
    key that chose the launcher when the code gives one (`trainer.launcher`), `default_on`
    the compute whose default it is otherwise; `world_size` and `node_env` are the compute's
    for the launcher the code gets; a relative `source` is read under `base_dir`."""
    digest = files = None
    requirements: list[str] = []
    if code.source is not None:
        packaged = code_files(resolve_source(code.source, base_dir))
        digest, files = packaged.sha256, packaged.summary()
        if code.requirements is not None:
            requirements = read_requirements(code, base_dir)
    launcher = code.launcher_for(default_launcher)
    return {
        "source": code.source,
        "source_sha256": digest,
        "files": files,
        "image": code.image,
        "runs_on": runs_on,
        "entrypoint": list(code.entrypoint),
        "launcher": launcher,
        "launcher_from": (
            launcher_key if code.launcher is not None else f"the default on {default_on}"
        ),
        "launcher_env": launcher_env(launcher, node_env),
        "world_size": world_size,
        "requirements": requirements,
        "env": dict(code.env),
        "secret_env": dict(code.secret_env),
    }


LOCAL_RUNS_ON: Final = "this machine (local-run's Python)"
"""Where your code runs on target `local` (`LocalTrainingJob`)."""


def launcher_world_size(launcher: UserLauncher, machines: int, gpus_per_machine: int) -> int:
    """Processes of your code on `machines` with `gpus_per_machine` each: one per GPU (one
    on a CPU machine) under torchrun, one per machine with node."""
    return machines * (max(gpus_per_machine, 1) if launcher == "torchrun" else 1)


def tpu_vm_runs_on(runtime_version: str | None) -> str:
    """Where your code runs on a TPU VM slice: its runtime."""
    return f"TPU VM runtime {runtime_version or '(the default for the slice)'}"


def component_code_summary(
    code: ComponentCode,
    component: str,
    *,
    default_launcher: UserLauncher,
    runs_on: str,
    world_size: int,
    node_env: Sequence[str],
    key: str = "code",
    base_dir: Path | None = None,
) -> dict[str, Any]:
    """The entry for a compute `component` (its class) given `code` as its argument `key`:
    the launcher is `<component>.<key>.launcher`'s or the component's default; `world_size`
    and `node_env` are the compute's for the launcher the code gets
    (`code.launcher_for(default_launcher)`); a relative `source` is read under `base_dir`,
    default the Pulumi project's root (`trainstack.components.user_code.code_base_dir`)."""
    trainer_code = code.trainer().user_code
    assert trainer_code is not None
    return code_summary(
        trainer_code,
        default_launcher=default_launcher,
        launcher_key=f"{component}.{key}.launcher",
        default_on=component,
        runs_on=runs_on,
        world_size=world_size,
        node_env=node_env,
        base_dir=base_dir if base_dir is not None else code_base_dir(),
    )

"""How a global batch splits over a target's replicas, and the one rule that checks it.

The bundled trainers refuse a global batch that does not split evenly, but only once they
run on the machines: `trainstack.trainers.torch_ddp.train` requires `global_batch_size` to be a
multiple of world size x `grad_accum_steps` (per-rank batch = global / world size, each
micro-batch = per-rank batch / grad_accum_steps), and `trainstack.trainers.tf_multiworker.sync` the
same with the strategy's `num_replicas_in_sync` as the world size. Every target knows its
world size before anything is created, so the stack config (and any component that takes
a trainer's batch) checks it here, with the same words everywhere:

    batch_problem(250, 1, gpu_world_size("torch", "ddp", machines=4, gpus_per_machine=8))
    # "trainer.global_batch_size: 250 is not divisible by the world size 32
    #  (4 machines x 8 GPUs); valid: 224 or 256"

What counts as the world size, per target and strategy:

| target / strategy                     | world size                                       |
|---------------------------------------|--------------------------------------------------|
| vertex, gpu_cluster: torch            | machines x GPUs (one process per GPU; 1 per CPU-only machine) |
| vertex, gpu_cluster: multi_worker_mirrored | machines x GPUs (each worker mirrors over its GPUs) |
| mirrored                              | the GPUs of one machine (one MirroredStrategy)   |
| parameter_server                      | the replicas of one worker: every worker step takes the whole global batch |
| tpu (TPUStrategy on worker 0)         | the slice's chips, all replicas of one strategy  |
| local: torch                          | `local.workers` processes                        |
| local: TF mirrored                    | `local.workers` logical CPU devices in one process |
| local: multi_worker_mirrored          | `local.workers` worker processes, 1 CPU replica each |

TPU: TPUStrategy's `num_replicas_in_sync` counts TensorFlow TPU devices. v5e and v6e chips
have one TensorCore; v4 and v5p chips have two that run as one megacore device, so every
generation in the catalog has one device per chip. UNVERIFIED for TensorFlow: the
TensorCores per chip come from https://cloud.google.com/tpu/docs/system-architecture-tpu-vm,
megacore on v4/v5p from JAX's `jax._src.tpu` chip table (a third-party reading of it),
not from a TensorFlow document; the bundled stacks' headers already assume 1 replica/chip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from trainstack.trainers.common.config import TF_DEFAULT_STRATEGY, TrainConfig
from trainstack.trainers.common.contract import TRAINER_MODULES

__all__ = [
    "TPU_REPLICAS_PER_CHIP_VERIFIED",
    "WorldSize",
    "batch_problem",
    "gpu_world_size",
    "local_world_size",
    "tpu_world_size",
    "trainer_args_batch_problem",
]

TPU_REPLICAS_PER_CHIP_VERIFIED: Final = False
"""One TPUStrategy replica per chip on v4, v5e, v5p and v6e (see the module docstring)."""


@dataclass(frozen=True)
class WorldSize:
    """How many replicas share a global batch, and why (for the message)."""

    size: int
    how: str
    """e.g. `4 machines x 8 GPUs`; shown in parentheses after the number."""


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def gpu_world_size(
    framework: str, strategy: str, *, machines: int, gpus_per_machine: int
) -> WorldSize:
    """World size on `machines` GPU (or CPU-only) machines: Vertex replicas or cluster nodes."""
    per = max(gpus_per_machine, 1)
    unit = _count(per, "GPU") if gpus_per_machine else "1 process (no GPUs)"
    if framework == "tensorflow" and strategy == "mirrored":
        return WorldSize(per, f"mirrored: {unit} of one machine")
    if framework == "tensorflow" and strategy == "parameter_server":
        return WorldSize(
            per, f"parameter_server: each worker step takes the whole batch over {unit}"
        )
    return WorldSize(machines * per, f"{_count(machines, 'machine')} x {unit}")


def tpu_world_size(accelerator_type: str, chips: int) -> WorldSize:
    """World size of a TPU slice: TPUStrategy on worker 0 drives every chip as a replica."""
    return WorldSize(
        chips, f"TPUStrategy on worker 0 drives the {chips} chips of {accelerator_type}"
    )


def local_world_size(framework: str, strategy: str, workers: int) -> WorldSize:
    """World size of `trainstack local-run` with `local.workers` = `workers`."""
    if framework == "tensorflow" and strategy == "mirrored":
        return WorldSize(workers, f"1 process x {_count(workers, 'CPU replica')}")
    if framework == "tensorflow" and strategy == "parameter_server":
        return WorldSize(1, "parameter_server: each worker step takes the whole batch")
    return WorldSize(workers, _count(workers, "local process", "local processes"))


def batch_problem(
    global_batch_size: int, grad_accum_steps: int, world: WorldSize, prefix: str = "trainer."
) -> str | None:
    """The problem when `global_batch_size` does not split into whole micro-batches over
    `world` (a multiple of world size x `grad_accum_steps`), naming the nearest valid
    sizes below and above; None when it splits."""
    divisor = world.size * grad_accum_steps
    if global_batch_size % divisor == 0:
        return None
    below = global_batch_size // divisor * divisor
    valid = f"{below} or {below + divisor}" if below else str(divisor)
    by = f"the world size {world.size} ({world.how})"
    if grad_accum_steps > 1:
        by += f" x {prefix}grad_accum_steps {grad_accum_steps} = {divisor}"
    return (
        f"{prefix}global_batch_size: {global_batch_size} is not divisible by {by}; valid: {valid}"
    )


def _flags(trainer_args: Sequence[str]) -> dict[str, str]:
    """The `--key=value` flags of a bundled trainer's arguments (the last wins, as in
    argparse); other arguments are the trainer's to refuse."""
    out: dict[str, str] = {}
    for arg in trainer_args:
        key, eq, value = str(arg).removeprefix("--").partition("=")
        if str(arg).startswith("--") and eq:
            out[key] = value
    return out


def trainer_args_batch_problem(
    trainer_module: str,
    trainer_args: Sequence[str],
    world: Callable[[str, str], WorldSize],
    prefix: str,
) -> str | None:
    """`batch_problem` for a compute component's bundled trainer, from its flags: when
    `trainer_args` carry `--global_batch_size` (and `--grad_accum_steps`), checked against
    `world(framework, strategy)` (the component's world size; framework and strategy from
    `--framework` / `--strategy`, else `trainer_module`'s and its default, as the trainer
    reads them), keys named `<prefix>global_batch_size`. The stack path checks its trainer
    section with `batch_problem` itself, before the flags exist; the words are the same.
    None when there is no batch flag or a flag the trainer itself refuses."""
    flags = _flags(trainer_args)
    if "global_batch_size" not in flags:
        return None
    by_module = {module: name for name, module in TRAINER_MODULES.items()}
    framework = flags.get("framework") or by_module.get(trainer_module, "torch")
    strategy = flags.get("strategy") or (
        TF_DEFAULT_STRATEGY if framework == "tensorflow" else TrainConfig().strategy
    )
    try:
        batch = int(flags["global_batch_size"])
        accum = int(flags.get("grad_accum_steps", TrainConfig().grad_accum_steps))
    except ValueError:
        return None  # not a number: the trainer's own flag parsing refuses it
    if batch < 1 or accum < 1:
        return None
    return batch_problem(batch, accum, world(framework, strategy), prefix)

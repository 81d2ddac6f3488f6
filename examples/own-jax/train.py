"""A JAX script that trainstack runs as your own code with `launcher: node`: one process per
machine (per TPU host), each calling `jax.distributed.initialize()` with no arguments.

trainstack's node launcher gives every process the coordinator and its place in the job
(on a TPU slice JAX reads them from the TPU metadata itself), so the same script runs on a
TPU slice, on GPU machines and, with `trainstack local-run`, as CPU processes here. It
imports nothing from trainstack and ends with one JSON line from process 0 naming the world
it saw and a value every process contributed to.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils


def main() -> None:
    jax.distributed.initialize()
    rank, world = jax.process_index(), jax.process_count()
    # One value per process, gathered everywhere: proof the processes talk to each other.
    ranks = multihost_utils.process_allgather(jnp.array([rank]))
    if rank == 0:
        record = {
            "event": "done",
            "rank": rank,
            "world": world,
            "ranks": [int(r) for r in ranks.reshape(-1)],
            "devices": jax.device_count(),
            "run": os.environ.get("TRAINSTACK_RUN_NAME"),
        }
        print(json.dumps(record), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()

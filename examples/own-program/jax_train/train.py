"""Your own JAX code: one process per TPU host; JAX finds the slice from the TPU metadata."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp


def main() -> None:
    jax.distributed.initialize()
    total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(
        jnp.ones(jax.local_device_count())
    )
    if jax.process_index() == 0:
        print(f"devices {int(total[0])}, outputs in {os.environ['TRAINSTACK_OUTPUT_DIR']}")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()

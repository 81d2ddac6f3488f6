"""Strategy 'tpu': TPUStrategy over the TPU chips of this VM or of a multi-host slice.

The training loop is the synchronous one (`trainstack.trainers.tf_multiworker.sync`); what is TPU-only
is reaching the TPU system, and saying what is missing when there is none. Tests on a CPU
machine set `TRAINSTACK_SIMULATED_ACCELERATORS=N` (`cluster.simulated_tpu_chips`): the same
loop then runs over N logical CPU devices (`simulated_tpu_strategy`).
"""

from __future__ import annotations

import sys

import tensorflow as tf


class TPUUnavailableError(ValueError):
    """Strategy 'tpu' was asked for where TensorFlow cannot reach a TPU."""


IO_DEVICE = "/job:localhost"
"""Checkpoint file I/O happens on this host (variables may live on remote TPU hosts)."""


def tpu_strategy(target: str) -> tf.distribute.Strategy:
    """TPUStrategy over `target` (see `cluster.tpu_target`); raises TPUUnavailableError with
    what it needs when no TPU answers."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=target)
        if target != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (tf.errors.OpError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TPUUnavailableError(
            f"strategy 'tpu' found no TPU (TPUClusterResolver(tpu={target!r}): {first}). "
            "It needs a Cloud TPU VM with a TensorFlow TPU runtime (tpu-vm-tf-*; '-pod' on "
            "multi-host slices) and TensorFlow built with TPU support: tpu='local' on a "
            "single host, or on worker 0 of a multi-host slice TPU_WORKER_HOSTNAMES naming "
            "every worker (gRPC port 8470) or TPU_NAME. On CPUs or GPUs use 'mirrored' or "
            "'multi_worker_mirrored'."
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def simulated_tpu_strategy(chips: int) -> tf.distribute.Strategy:
    """A MirroredStrategy over `chips` logical CPU devices (made by `train.configure`),
    standing in for the slice's chips; says so on stderr."""
    print(
        f"trainstack trainer: strategy 'tpu' simulated on {chips} CPU device(s) "
        "(TRAINSTACK_SIMULATED_ACCELERATORS)",
        file=sys.stderr,
        flush=True,
    )
    devices = tf.config.list_logical_devices("CPU")[:chips]
    return tf.distribute.MirroredStrategy([d.name for d in devices])

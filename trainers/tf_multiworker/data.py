"""tf.data input pipelines over the shared datasets of `trainstack.trainers.common.data`.

The arrays come from `trainstack.trainers.common.data.load_dataset` (synthetic, the bundled digits set,
or `.npz` shards); images are turned channels-last because TensorFlow's CPU convolutions
support only NHWC.

Synchronous strategies (mirrored, multi_worker_mirrored, tpu) use
`strategy.distribute_datasets_from_function`: each worker builds its own pipeline
(`InputContext.input_pipeline_id`) and produces only the per-replica batches of its own
replicas, so nothing is read twice and nothing is auto-sharded. The order rule is the
common one: step s uses global batch s, the samples at stream positions
`[s * G, (s + 1) * G)` of an endless stream that walks epoch e in a permutation seeded by
(`seed`, e); global replica g takes the slice `[g * b, (g + 1) * b)` with b = G / replicas.
The data position is therefore the step alone (a resumed run starts the pipeline at its
step), and 2 workers with batch B see the same global batch as 1 worker with batch 2B. For
`files` every worker walks its own shards the same way with its own seed. The permutation is
`tf.random.experimental.index_shuffle`, a stateless per-index shuffle, so the pipeline is made
of TensorFlow ops only and runs where Python cannot: on remote TPU hosts and on
parameter-server workers. Stages: range of element ids -> parallel `map` (AUTOTUNE,
deterministic order) -> `prefetch(AUTOTUNE)`.

Parameter-server training is asynchronous: each scheduled step runs on whichever worker is
free, so there is no global batch order to keep. Every worker walks the stream from its own
start, salted by the time its dataset was created (all workers run the same dataset graph,
so a seed alone would give them all the same batches).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import tensorflow as tf

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.data import Dataset, Split, load_dataset

SEED_STRIDE = 1_000_003


def channels_last(ds: Dataset) -> Dataset:
    """Images (N, C, H, W) as (N, H, W, C); other data unchanged."""
    if len(ds.input_shape) != 3:
        return ds

    def move(split: Split) -> Split:
        return Split(np.ascontiguousarray(np.transpose(split.x, (0, 2, 3, 1))), split.y)

    c, h, w = ds.input_shape
    return replace(ds, train=move(ds.train), test=move(ds.test), input_shape=(h, w, c))


def load(cfg: TrainConfig, *, pipeline: int, pipelines: int) -> Dataset:
    """The arrays one input pipeline reads (channels-last)."""
    return channels_last(load_dataset(cfg, rank=pipeline, world_size=pipelines))


def _options() -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = True
    # Each pipeline already reads only its own share; auto-sharding would cut it again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _batch_fn(split: Split, seed: Any, batch: int) -> Callable[[Any], tuple[Any, Any]]:
    """Maps a stream offset (the position of the batch's first sample) to the batch."""
    x_all = tf.constant(split.x)
    y_all = tf.constant(split.y)
    n = tf.constant(len(split), tf.int64)

    def gather(first: Any) -> tuple[Any, Any]:
        positions = first + tf.range(batch, dtype=tf.int64)
        epochs = positions // n
        seed_column = tf.fill([batch], tf.cast(seed, tf.int64))
        seeds = tf.stack([seed_column, epochs, tf.zeros_like(epochs)], axis=1)
        # The raw op: the public wrapper mangles per-element ([batch, 2]) seeds.
        index = tf.raw_ops.RandomIndexShuffle(
            index=positions % n, seed=seeds, max_index=n - 1, rounds=4
        )
        return tf.gather(x_all, index), tf.gather(y_all, index)

    return gather


def sync_dataset_fn(
    cfg: TrainConfig, *, start_step: int, loader: Callable[[int, int], Dataset] | None = None
) -> Callable[[Any], tf.data.Dataset]:
    """The `dataset_fn` for `distribute_datasets_from_function`, starting at `start_step`.

    Raises ValueError (when called) if the global batch does not split evenly over the
    replicas.
    """
    load_fn = loader or (lambda p, n: load(cfg, pipeline=p, pipelines=n))

    def dataset_fn(ctx: Any) -> tf.data.Dataset:
        pipelines, pipeline = ctx.num_input_pipelines, ctx.input_pipeline_id
        replicas = ctx.num_replicas_in_sync
        if cfg.global_batch_size % replicas:
            raise ValueError(
                f"global_batch_size ({cfg.global_batch_size}) must be divisible by the "
                f"number of replicas ({replicas})"
            )
        local = replicas // pipelines
        batch = cfg.global_batch_size // replicas
        ds = load_fn(pipeline, pipelines)
        if cfg.dataset == "files":
            # This pipeline's own shards: a local stream of G / pipelines samples per step.
            stride, first_replica, seed = batch * local, 0, cfg.seed * SEED_STRIDE + pipeline
        else:
            stride, first_replica, seed = cfg.global_batch_size, pipeline * local, cfg.seed
        gather = _batch_fn(ds.train, seed, batch)

        def element(k: Any) -> tuple[Any, Any]:
            # Consecutive elements go to this worker's replicas in turn.
            step, j = k // local, k % local
            return gather(step * stride + (first_replica + j) * batch)

        return (
            tf.data.Dataset.range(start_step * local, cfg.steps * local)
            .map(element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE)
            .with_options(_options())
        )

    return dataset_fn


def ps_dataset_fn(cfg: TrainConfig, ds: Dataset) -> Callable[[Any], tf.data.Dataset]:
    """The per-worker `dataset_fn` for parameter-server training: an endless stream of
    batches of `global_batch_size / replicas per worker` samples."""

    def dataset_fn(ctx: Any) -> tf.data.Dataset:
        batch = cfg.global_batch_size // ctx.num_replicas_in_sync
        # Runs on each worker when its dataset is created, so every worker gets its own salt.
        salt = tf.cast(tf.math.floormod(tf.timestamp() * 1e6, 2.0**31), tf.int64)
        gather = _batch_fn(ds.train, cfg.seed * SEED_STRIDE + salt, batch)
        return (
            tf.data.Dataset.range(2**62)
            .map(lambda k: gather(k * batch), num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
            .with_options(_options())
        )

    return dataset_fn

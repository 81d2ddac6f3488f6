"""Synchronous strategies: mirrored, multi_worker_mirrored and tpu (`trainstack.trainers.tf_multiworker.tpu`
makes the TPU strategy).

A custom loop: one `tf.function` step per optimizer step (gradient accumulation inside it),
gradients summed across replicas by the optimizer, and the SIGTERM flag summed across
replicas in the same all-reduce as the loss, so every worker stops after the same step.
"""

from __future__ import annotations

import math
import time
from typing import Any

import tensorflow as tf

from trainstack.trainers.common.contract import EVENT_PREEMPTED
from trainstack.trainers.common.data import Dataset
from trainstack.trainers.common.exit_codes import PREEMPTED_EXIT_CODE
from trainstack.trainers.common.records import LogWindow
from trainstack.trainers.common.signals import SigtermWatcher
from trainstack.trainers.tf_multiworker.cluster import all_reduce_implementation
from trainstack.trainers.tf_multiworker.data import load, sync_dataset_fn
from trainstack.trainers.tf_multiworker.loop import (
    SUM,
    SetupError,
    TrainerBase,
    params_sha256,
    replica_fn,
)


def mirrored_strategy() -> tf.distribute.Strategy:
    """Every local GPU as a replica, else every logical CPU device (see `train.configure`)."""
    gpus = tf.config.list_logical_devices("GPU")
    devices = gpus or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([d.name for d in devices])


def multi_worker_mirrored_strategy(reduction_server: bool = False) -> tf.distribute.Strategy:
    """The workers of TF_CONFIG (already in the environment, see launch.py); NCCL all-reduce
    on GPUs when Vertex's Reduction Server is to carry it (`all_reduce_implementation`)."""
    name = all_reduce_implementation(reduction_server, len(tf.config.list_physical_devices("GPU")))
    implementation = tf.distribute.experimental.CommunicationImplementation[name]
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation
        )
    )


class SyncTrainer(TrainerBase):
    """mirrored, multi_worker_mirrored and tpu: every replica runs every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        if cfg.global_batch_size % (self.replicas * cfg.grad_accum_steps):
            raise SetupError(
                f"global_batch_size ({cfg.global_batch_size}) must be divisible by replicas "
                f"({self.replicas}) x grad_accum_steps ({cfg.grad_accum_steps})"
            )
        self.per_replica = cfg.global_batch_size // self.replicas
        replica_step = replica_fn(self.model, self.optimizer, cfg, self.ds.task, self.per_replica)
        strategy = self.strategy

        def step_and_flag(x: Any, y: Any, flag: Any) -> Any:
            loss = replica_step(x, y)
            ctx = tf.distribute.get_replica_context()
            # One all-reduce carries the loss and the SIGTERM flag: every worker learns in
            # the same step that some worker was signalled.
            return ctx.all_reduce(SUM, tf.stack([loss, flag]))

        @tf.function
        def train_step(batch: Any, flag: Any) -> Any:
            x, y = batch
            out = strategy.run(step_and_flag, args=(x, y, flag))
            return strategy.experimental_local_results(out)[0]

        @tf.function
        def all_sum(value: Any) -> Any:
            def fn(v: Any) -> Any:
                # A copy made on the replica's device: all_reduce places its result where
                # its input lives, and the function argument has no device.
                return tf.distribute.get_replica_context().all_reduce(SUM, tf.identity(v))

            return strategy.experimental_local_results(strategy.run(fn, args=(value,)))[0]

        self.train_step = train_step
        self.all_sum = all_sum

    def _agree(self, value: float, what: str) -> None:
        """Check that every replica holds the same `value` (a collective: all must call)."""
        if self.tfc.workers <= 1:
            return
        total = float(self.all_sum(tf.constant(value, tf.float64)))
        if not math.isclose(total, value * self.replicas, rel_tol=1e-6, abs_tol=1e-6):
            raise RuntimeError(
                f"workers disagree on {what}: this worker has {value}, the mean is "
                f"{total / self.replicas}"
            )

    def run(self) -> int:
        cfg = self.cfg
        latest = self.newest_checkpoint()
        # Every worker reads the shared checkpoint directory; they must have seen the same.
        self._agree(float(-1 if latest is None else latest), "the newest checkpoint")
        start_step = self.restore(latest)
        self.log_start(start_step, per_replica_batch=self.per_replica)
        own = (self.info.rank, max(self.tfc.workers, 1))

        def loader(pipeline: int, pipelines: int) -> Dataset:
            # Every pipeline reads the same in-memory arrays; `files` shards differ.
            if cfg.dataset != "files" or (pipeline, pipelines) == own:
                return self.ds
            return load(cfg, pipeline=pipeline, pipelines=pipelines)

        dataset = self.strategy.distribute_datasets_from_function(
            sync_dataset_fn(cfg, start_step=start_step, loader=loader)
        )
        iterator = iter(dataset)
        watcher = SigtermWatcher(grace_s=cfg.preemption_grace_s).install()
        warm_steps = min(5, max(cfg.steps - start_step - 1, 0))
        timed_start, timed_stall = time.perf_counter(), 0.0
        step = start_step
        self.window = LogWindow()
        try:
            while step < cfg.steps:
                if self.step_delay:
                    time.sleep(self.step_delay)
                if step - start_step == warm_steps:
                    timed_start, timed_stall = time.perf_counter(), self.stall_total
                t0 = time.perf_counter()
                batch = next(iterator)
                self.window.data_wait += time.perf_counter() - t0
                flag = tf.constant(1.0 if watcher.signalled else 0.0)
                loss, stop = (float(v) for v in self.train_step(batch, flag).numpy())
                step += 1
                self.window.steps += 1
                if stop > 0:
                    if not watcher.signalled:
                        watcher.peer_signalled()
                    self.loss_value = loss
                    self.logger.log(
                        EVENT_PREEMPTED, step, severity="WARNING", grace_s=cfg.preemption_grace_s
                    )
                    self.save(step, reason="preemption")
                    return PREEMPTED_EXIT_CODE
                if step % cfg.log_every == 0 or step == cfg.steps:
                    self.log_window(step, loss)
                if step % cfg.checkpoint_every == 0 and step < cfg.steps:
                    self.save(step)
            timed = time.perf_counter() - timed_start - (self.stall_total - timed_stall)
            if step > start_step:
                self.save(step, reason="final")
            digest = params_sha256(self.model)
            # Replicas must end with the same parameters; this is also the last collective,
            # so no worker leaves while another still needs it.
            self._agree(float(int(digest[:8], 16)), "the final parameters")
            self.done(step, start_step, (step - start_step - warm_steps, timed), digest)
            return 0
        finally:
            watcher.uninstall()

"""The Keras training loop shared by every TensorFlow strategy.

The model and the optimizer are built under the strategy's scope (`build_in_scope`, with the
learning-rate schedule of `trainstack.trainers.common.schedule` in TensorFlow ops); `replica_fn` is one
optimizer step on one replica (gradient accumulation inside it); `TrainerBase` holds what
both loops share: resume, checkpoints (`trainstack.trainers.tf_multiworker.checkpoint`), the `start`,
`train` and `checkpoint` log lines, the SavedModel export and the `done` record. The loops
themselves are `trainstack.trainers.tf_multiworker.sync` (mirrored, multi_worker_mirrored, tpu) and
`trainstack.trainers.tf_multiworker.parameter_server`.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from trainstack.trainers.common.checkpoint import CheckpointWriteError, run_checkpoint_dir
from trainstack.trainers.common.cluster import ClusterInfo
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import (
    EVENT_CHECKPOINT,
    EVENT_CHECKPOINT_BEGIN,
    EVENT_CHECKPOINT_SKIPPED,
    EVENT_CHECKPOINT_WRITTEN,
    EVENT_DONE,
    EVENT_FAILED,
    EVENT_RESUME,
    EVENT_START,
    EVENT_TRAIN,
)
from trainstack.trainers.common.data import Dataset
from trainstack.trainers.common.digest import params_sha256 as digest_arrays
from trainstack.trainers.common.fingerprint import StateMismatch, trainer_fingerprint
from trainstack.trainers.common.metrics import MetricsLogger, report_hypertune
from trainstack.trainers.common.records import LogWindow, done_record
from trainstack.trainers.common.schedule import learning_rate
from trainstack.trainers.common.storage import url_to_fs
from trainstack.trainers.tf_multiworker.checkpoint import TFCheckpointer
from trainstack.trainers.tf_multiworker.cluster import TFCluster
from trainstack.trainers.tf_multiworker.keras_setup import check_keras
from trainstack.trainers.tf_multiworker.metrics import device_kind, gpu_memory, gpu_peak
from trainstack.trainers.tf_multiworker.models import build_model, flops_per_sample

keras: Any = check_keras(tf)

SUM = tf.distribute.ReduceOp.SUM


class SetupError(ValueError):
    """The config, the cluster or the checkpoint directory cannot give a run (exit 2)."""


# -- model and optimizer --------------------------------------------------------------------


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """`trainstack.trainers.common.schedule.learning_rate` in TensorFlow ops, of the optimizer's step."""

    def __init__(self, peak: float, warmup: int, total: int) -> None:
        super().__init__()
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step: Any) -> Any:
        step = tf.cast(step, tf.float32)
        span = float(max(self.total - self.warmup, 1))
        progress = tf.minimum((step - self.warmup) / span, 1.0)
        decayed = self.peak * (0.1 + 0.45 * (1.0 + tf.cos(math.pi * progress)))
        if not self.warmup:
            return decayed
        return tf.where(step < self.warmup, self.peak * (step + 1.0) / self.warmup, decayed)

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


def build_in_scope(
    strategy: tf.distribute.Strategy, cfg: TrainConfig, ds: Dataset
) -> tuple[Any, Any]:
    """Model and optimizer with their variables created under `strategy`'s scope (the
    optimizer slots too, so a checkpoint restores into existing variables)."""
    if cfg.precision == "bf16" and (cfg.strategy == "tpu" or tf.config.list_logical_devices("GPU")):
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    with strategy.scope():
        model = build_model(cfg, ds.input_shape, ds.num_classes)
        optimizer = keras.optimizers.Adam(
            WarmupCosine(cfg.learning_rate, cfg.warmup_steps, cfg.steps), epsilon=1e-8
        )
        optimizer.build(model.trainable_variables)
    return model, optimizer


# -- numerics -------------------------------------------------------------------------------


def params_sha256(model: Any) -> str:
    """Digest of the model's variables (`trainstack.trainers.common.digest`, the torch trainer's rule)
    under their TensorFlow names."""
    return digest_arrays(
        [(var.name, var) for var in model.weights],
        lambda var: np.asarray(tf.convert_to_tensor(var)),
    )


def _per_example_loss(y: Any, logits: Any, task: str) -> Any:
    per = keras.losses.sparse_categorical_crossentropy(
        y, tf.cast(logits, tf.float32), from_logits=True
    )
    return tf.reduce_mean(per, axis=-1) if task == "lm" else per


def evaluate(model: Any, ds: Dataset, batch: int = 512) -> dict[str, float]:
    """Loss and accuracy on the whole test split, computed eagerly in this process."""
    total_loss, correct, count = 0.0, 0, 0
    for start in range(0, len(ds.test), batch):
        x, y = ds.test.x[start : start + batch], ds.test.y[start : start + batch]
        logits = tf.cast(model(x, training=False), tf.float32)
        per = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        total_loss += float(tf.reduce_sum(per))
        correct += int(np.sum(np.argmax(logits.numpy(), axis=-1) == y))
        count += int(np.prod(y.shape))
    return {"test_loss": total_loss / count, "test_accuracy": correct / count}


def replica_fn(
    model: Any, optimizer: Any, cfg: TrainConfig, task: str, per_replica: int
) -> Callable[[Any, Any], Any]:
    """One optimizer step on one replica; returns this replica's share of the global mean
    loss (its summed losses over the global batch)."""
    micro = per_replica // cfg.grad_accum_steps
    scale = float(cfg.global_batch_size)

    def loss_and_grads(x: Any, y: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_sum(_per_example_loss(y, logits, task)) / scale
        return loss, tape.gradient(loss, model.trainable_variables)

    if cfg.compile and cfg.strategy != "tpu":
        # XLA for the forward and backward pass; the all-reduce stays outside (TPU compiles
        # the whole step anyway).
        loss_and_grads = tf.function(loss_and_grads, jit_compile=True)

    def step(x: Any, y: Any) -> Any:
        total, grads = None, None
        for i in range(cfg.grad_accum_steps):
            loss, g = loss_and_grads(x[i * micro : (i + 1) * micro], y[i * micro : (i + 1) * micro])
            total = loss if total is None else total + loss
            grads = g if grads is None else [a + b for a, b in zip(grads, g, strict=True)]
        assert grads is not None
        # The optimizer sums the replicas' gradients before applying them.
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return total

    return step


# -- shared loop state ----------------------------------------------------------------------


class TrainerBase:
    """Logging, checkpointing and the `done` record, common to both loops."""

    def __init__(
        self,
        cfg: TrainConfig,
        info: ClusterInfo,
        tfc: TFCluster,
        strategy: tf.distribute.Strategy,
        logger: MetricsLogger,
        ds: Dataset,
        io_device: str | None,
    ) -> None:
        self.cfg, self.info, self.tfc = cfg, info, tfc
        self.strategy, self.logger, self.ds = strategy, logger, ds
        self.is_chief = tfc.is_chief
        self.replicas = int(strategy.num_replicas_in_sync)
        self.model, self.optimizer = build_in_scope(strategy, cfg, ds)
        self.ckpt_dir = run_checkpoint_dir(cfg, os.environ)
        self.written: list[float] = []
        self.checkpointer = (
            TFCheckpointer(
                self.ckpt_dir,
                keep=cfg.keep_checkpoints,
                is_chief=self.is_chief,
                checkpoint=tf.train.Checkpoint(model=self.model, optimizer=self.optimizer),
                meta={"strategy": cfg.strategy, "replicas": self.replicas, "model": cfg.model},
                io_device=io_device,
                # TensorFlow's async writer is exercised here with mirrored variables only;
                # TPU and parameter-server variables keep the synchronous write.
                async_save=cfg.async_checkpoint
                and cfg.strategy in ("mirrored", "multi_worker_mirrored"),
                on_written=self._written,
                fingerprint=trainer_fingerprint(cfg),
            )
            if self.ckpt_dir
            else None
        )
        self.stall_total = 0.0
        self.loss_value: float | None = None
        self.window = LogWindow()
        self.tokens_per_sample = cfg.seq_len if ds.task == "lm" else 0
        self.sample_flops = flops_per_sample(self.model, cfg)
        self.peak = gpu_peak()
        self.step_delay = float(os.environ.get("TRAINSTACK_TEST_STEP_DELAY_S", "0") or 0)

    def newest_checkpoint(self) -> int | None:
        if self.checkpointer is None:
            return None
        try:
            latest, skipped = self.checkpointer.resume_point()
        except StateMismatch as e:
            raise SetupError(str(e)) from None
        for passed in skipped if self.info.rank == 0 else []:
            fields = passed.fields(str(self.ckpt_dir), latest)
            self.logger.log(EVENT_CHECKPOINT_SKIPPED, passed.step, severity="WARNING", **fields)
        return latest

    def restore(self, step: int | None) -> int:
        if self.checkpointer is None or step is None:
            return 0
        try:
            meta = self.checkpointer.restore(step)
        except (ValueError, AssertionError) as e:
            raise SetupError(
                f"checkpoint step {step} in {self.ckpt_dir} does not fit this run: {e}"
            ) from None
        self.logger.log(EVENT_RESUME, step, checkpoint_dir=self.ckpt_dir, saved_by=meta["strategy"])
        return step

    def _written(self, step: int, secs: float) -> None:
        """The chief's commit of `step`; from the writer thread for an async save."""
        self.written.append(secs)
        self.logger.log(EVENT_CHECKPOINT_WRITTEN, step, write_s=secs)

    def save(self, step: int, *, reason: str | None = None) -> None:
        if self.checkpointer is None:
            return
        self.logger.log(EVENT_CHECKPOINT_BEGIN, step)
        try:
            saved = self.checkpointer.save(step, sync=reason is not None)
        except CheckpointWriteError as e:
            if self.is_chief:
                # What `trainstack local-run` reports as the run's one error line.
                self.logger.log(EVENT_FAILED, e.step, severity="ERROR", error=str(e), exit_code=2)
            raise SetupError(str(e)) from None
        if reason is None:
            self.stall_total += saved.stall_s
        asynchronous = reason is None and self.checkpointer.async_save
        self.logger.log(
            EVENT_CHECKPOINT,
            step,
            stall_s=saved.stall_s,
            path=saved.path,
            write_s=None
            if asynchronous or not (self.is_chief and self.written)
            else self.written[-1],
            async_write=asynchronous,
            reason=reason,
        )

    def log_start(self, step: int, **fields: Any) -> None:
        self.logger.log(
            EVENT_START,
            step,
            world_size=self.replicas,
            workers=self.tfc.workers,
            platform=self.info.platform,
            strategy=self.cfg.strategy,
            model=self.cfg.model,
            dataset=self.cfg.dataset,
            device=device_kind(self.cfg),
            params=int(sum(np.prod(v.shape) for v in self.model.trainable_variables)),
            deterministic=self.cfg.deterministic and self.cfg.strategy != "parameter_server",
            tensorflow=tf.__version__,
            **fields,
        )

    def log_window(self, step: int, loss: float) -> None:
        self.loss_value = loss
        now = time.perf_counter()
        fields = self.window.fields(
            now,
            loss=loss,
            lr=learning_rate(self.cfg, step - 1),
            global_batch_size=self.cfg.global_batch_size,
            tokens_per_sample=self.tokens_per_sample,
            flops_per_sample=self.sample_flops,
            peak_flops=self.peak,
            devices=self.replicas,
        )
        fields.update(gpu_memory())
        self.logger.log(EVENT_TRAIN, step, **fields)
        self.window = LogWindow(start=now)

    def export_model(self) -> str | None:
        """A SavedModel of the final model in `model_dir` (cloud stacks pass `<checkpoint
        bucket>/model/<run>`), else AIP_MODEL_DIR, where Vertex expects the artifact: outside
        `checkpoints/`, which the bucket's age rule deletes. Every worker writes (chief-writes
        rule), only the chief's copy is kept."""
        model_dir = self.cfg.model_dir or os.environ.get("AIP_MODEL_DIR")
        if not model_dir:
            return None
        scratch = tempfile.mkdtemp(prefix="trainstack-model-")
        try:
            tf.saved_model.save(self.model, scratch)
            if not self.is_chief:
                return None
            fs, root = url_to_fs(model_dir)
            fs.makedirs(root, exist_ok=True)
            fs.put(scratch + "/", root, recursive=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return model_dir

    def done(self, step: int, start_step: int, timed: tuple[int, float], digest: str) -> None:
        model_path = self.export_model()
        if not self.is_chief:
            return
        record = done_record(
            params_sha256=digest,
            loss=self.loss_value,
            metrics=evaluate(self.model, self.ds),
            world_size=self.replicas,
            workers=self.tfc.workers,
            resumed_from=start_step,
            checkpoint_dir=self.ckpt_dir,
            checkpoint_stall_s=self.stall_total,
            model_path=model_path,
            timed=timed,
            global_batch_size=self.cfg.global_batch_size,
            tokens_per_sample=self.tokens_per_sample,
        )
        report_hypertune(record, step)
        self.logger.log(EVENT_DONE, step, **record)

"""The bundled TensorFlow trainer: Mirrored, MultiWorkerMirrored, TPU and ParameterServer.

Launch shapes (the cluster comes from the environment, see `trainers.tf_multiworker.cluster`):

    python -m trainers.tf_multiworker --strategy=mirrored --model=cnn --dataset=digits
    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {...}}' \\
        python -m trainers.tf_multiworker --framework=tensorflow --strategy=multi_worker_mirrored
    python -m trainers.tf_multiworker --config run.yaml    # on TPU VM worker 0, strategy tpu

Synchronous strategies (mirrored, multi_worker_mirrored, tpu) run a custom loop: one
`tf.function` step per optimizer step (gradient accumulation inside it), gradients summed
across replicas by the optimizer, the SIGTERM flag summed across replicas in the same step,
so every worker stops after the same step. parameter_server schedules steps on the workers
through a ClusterCoordinator; the chief decides when to stop and save.

Contract shared with the torch trainer: JSON log lines (`trainers.common.metrics`),
TensorBoard scalars from the chief, checkpoints in step directories on a local path or gs://
(`trainers.tf_multiworker.checkpoint`), SIGTERM -> checkpoint -> exit 143, and a final
`{"event": "done", "step": N, "params_sha256": ...}` from the chief.

Exit codes: 0 done; 1 a peer task was lost (restart the job: it resumes from the newest
checkpoint); 2 invalid config, cluster environment or checkpoint (including strategy 'tpu'
without a TPU); 143 preempted after saving a checkpoint; anything else is a crash.

Test hook: `TRAINSTACK_TEST_STEP_DELAY_S` sleeps that long each step, so tests can signal a
run at a chosen step.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from trainers.common.cluster import ClusterInfo
from trainers.common.config import TrainConfig
from trainers.common.data import Dataset
from trainers.common.metrics import (
    MetricsLogger,
    gpu_peak_flops,
    mfu,
    report_hypertune,
    throughput,
)
from trainers.common.schedule import learning_rate
from trainers.common.signals import PREEMPTED_EXIT_CODE, SigtermWatcher
from trainers.common.storage import url_to_fs
from trainers.tf_multiworker.checkpoint import TFCheckpointer
from trainers.tf_multiworker.cluster import TFCluster, tpu_target
from trainers.tf_multiworker.data import load, ps_dataset_fn, sync_dataset_fn
from trainers.tf_multiworker.launch import CONFIG_ERROR_EXIT_CODE, CPU_REPLICAS_ENV
from trainers.tf_multiworker.models import build_model, flops_per_sample

keras: Any = tf.keras
if not keras.__name__.startswith("tf_keras"):
    raise ImportError(
        "tf.keras is Keras 3, which fails inside MultiWorkerMirroredStrategy: import "
        "trainers.tf_multiworker before tensorflow (it sets TF_USE_LEGACY_KERAS=1) and "
        "install tf-keras"
    )

SUM = tf.distribute.ReduceOp.SUM
CHIEF_GONE_CHECKS = 3
"""Failed connection attempts, `CHIEF_POLL_S` apart, after which a parameter-server task
decides that the chief has exited."""
CHIEF_POLL_S = 0.5
CHIEF_START_TIMEOUT_S = 600.0
PEER_LOST_EXIT_CODE = 1


class TPUUnavailableError(ValueError):
    """Strategy 'tpu' was asked for where TensorFlow cannot reach a TPU."""


class SetupError(ValueError):
    """The config, the cluster or the checkpoint directory cannot give a run (exit 2)."""


# -- setup ----------------------------------------------------------------------------------


def configure(cfg: TrainConfig) -> None:
    """Process-wide settings; must run before TensorFlow initializes its runtime."""
    if cfg.tf_threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(cfg.tf_threads)
    replicas = int(os.environ.get(CPU_REPLICAS_ENV, "0") or 0)
    if cfg.strategy == "mirrored" and replicas > 1 and not tf.config.list_physical_devices("GPU"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
        )
    # Same initial parameters for every world size; the data order is seeded separately.
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic and cfg.strategy != "parameter_server":
        tf.config.experimental.enable_op_determinism()


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


def make_strategy(cfg: TrainConfig) -> tf.distribute.Strategy:
    """The configured strategy; TF_CONFIG is already in the environment (launch.py)."""
    if cfg.strategy == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if cfg.strategy == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if cfg.strategy == "tpu":
        return tpu_strategy(tpu_target(os.environ))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver,
        # Large variables (embeddings) are split over the parameter servers.
        variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=ps
        ),
    )


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """`trainers.common.schedule.learning_rate` in TensorFlow ops, of the optimizer's step."""

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
    """Digest of the model's variables: sorted by name, each as float32 little-endian bytes
    preceded by its name and shape (the torch trainer's rule, over TensorFlow names)."""
    digest = hashlib.sha256()
    for var in sorted(model.weights, key=lambda v: v.name):
        array = np.asarray(tf.convert_to_tensor(var)).astype("<f4", copy=False)
        digest.update(f"{var.name}:{tuple(array.shape)}\n".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


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


def _replica_fn(
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


@dataclass
class _Window:
    start: float = field(default_factory=time.perf_counter)
    steps: int = 0
    data_wait: float = 0.0


class _Base:
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
        self.ckpt_dir = cfg.checkpoint_dir or os.environ.get("AIP_CHECKPOINT_DIR") or None
        self.written: list[float] = []
        self.checkpointer = (
            TFCheckpointer(
                self.ckpt_dir,
                keep=cfg.keep_checkpoints,
                is_chief=self.is_chief,
                checkpoint=tf.train.Checkpoint(model=self.model, optimizer=self.optimizer),
                meta={"strategy": cfg.strategy, "replicas": self.replicas, "model": cfg.model},
                io_device=io_device,
                on_written=lambda step, secs: self.written.append(secs),
            )
            if self.ckpt_dir
            else None
        )
        self.stall_total = 0.0
        self.loss_value: float | None = None
        self.window = _Window()
        self.tokens_per_sample = cfg.seq_len if ds.task == "lm" else 0
        self.sample_flops = flops_per_sample(self.model, cfg)
        self.peak = _gpu_peak()
        self.step_delay = float(os.environ.get("TRAINSTACK_TEST_STEP_DELAY_S", "0") or 0)

    def newest_checkpoint(self) -> int | None:
        return self.checkpointer.latest_step() if self.checkpointer else None

    def restore(self, step: int | None) -> int:
        if self.checkpointer is None or step is None:
            return 0
        try:
            meta = self.checkpointer.restore(step)
        except (ValueError, AssertionError) as e:
            raise SetupError(
                f"checkpoint step {step} in {self.ckpt_dir} does not fit this run: {e}"
            ) from None
        self.logger.log("resume", step, checkpoint_dir=self.ckpt_dir, saved_by=meta["strategy"])
        return step

    def save(self, step: int, *, reason: str | None = None) -> None:
        if self.checkpointer is None:
            return
        self.logger.log("checkpoint_begin", step)
        saved = self.checkpointer.save(step)
        if reason is None:
            self.stall_total += saved.stall_s
        self.logger.log(
            "checkpoint",
            step,
            stall_s=saved.stall_s,
            path=saved.path,
            write_s=self.written[-1] if self.is_chief and self.written else None,
            async_write=False,
            reason=reason,
        )

    def log_start(self, step: int, **fields: Any) -> None:
        self.logger.log(
            "start",
            step,
            world_size=self.replicas,
            workers=self.tfc.workers,
            platform=self.info.platform,
            strategy=self.cfg.strategy,
            model=self.cfg.model,
            dataset=self.cfg.dataset,
            device=_device_kind(self.cfg),
            params=int(sum(np.prod(v.shape) for v in self.model.trainable_variables)),
            deterministic=self.cfg.deterministic and self.cfg.strategy != "parameter_server",
            tensorflow=tf.__version__,
            **fields,
        )

    def log_window(self, step: int, loss: float) -> None:
        self.loss_value = loss
        now = time.perf_counter()
        w = self.window
        elapsed = max(now - w.start, 1e-9)
        samples_per_s = w.steps * self.cfg.global_batch_size / elapsed
        fields: dict[str, Any] = {
            "loss": loss,
            "lr": learning_rate(self.cfg, step - 1),
            "step_time_s": elapsed / max(w.steps, 1),
            "samples_per_s": samples_per_s,
            "data_wait_s": w.data_wait / max(w.steps, 1),
        }
        if self.tokens_per_sample:
            fields["tokens_per_s"] = samples_per_s * self.tokens_per_sample
        if self.sample_flops and self.peak:
            fields["mfu"] = mfu(self.sample_flops, samples_per_s, self.peak, self.replicas)
        fields.update(_gpu_memory())
        self.logger.log("train", step, **fields)
        self.window = _Window(start=now)

    def export_model(self) -> str | None:
        """A SavedModel of the final model in AIP_MODEL_DIR, where Vertex expects the
        artifact; every worker writes (chief-writes rule), only the chief's copy is kept."""
        model_dir = os.environ.get("AIP_MODEL_DIR")
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
        metrics = evaluate(self.model, self.ds)
        record: dict[str, Any] = {
            "params_sha256": digest,
            "loss": self.loss_value,
            **metrics,
            "world_size": self.replicas,
            "workers": self.tfc.workers,
            "resumed_from": start_step,
            "checkpoint_dir": self.ckpt_dir,
            "checkpoint_stall_s": self.stall_total,
            "model_path": model_path,
        }
        record.update(throughput(timed, self.cfg.global_batch_size, self.tokens_per_sample))
        report_hypertune(record, step)
        self.logger.log("done", step, **record)


def _device_kind(cfg: TrainConfig) -> str:
    if cfg.strategy == "tpu":
        return "TPU"
    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


def _gpu_peak() -> float | None:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
    return gpu_peak_flops(str(name))


def _gpu_memory() -> dict[str, float]:
    if not tf.config.list_logical_devices("GPU"):
        return {}
    info = tf.config.experimental.get_memory_info("GPU:0")
    return {
        "gpu_mem_alloc_gib": info["current"] / 2**30,
        "gpu_mem_peak_gib": info["peak"] / 2**30,
    }


# -- synchronous strategies -----------------------------------------------------------------


class SyncTrainer(_Base):
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
        replica_step = _replica_fn(self.model, self.optimizer, cfg, self.ds.task, self.per_replica)
        strategy = self.strategy

        def replica_fn(x: Any, y: Any, flag: Any) -> Any:
            loss = replica_step(x, y)
            ctx = tf.distribute.get_replica_context()
            # One all-reduce carries the loss and the SIGTERM flag: every worker learns in
            # the same step that some worker was signalled.
            return ctx.all_reduce(SUM, tf.stack([loss, flag]))

        @tf.function
        def train_step(batch: Any, flag: Any) -> Any:
            x, y = batch
            out = strategy.run(replica_fn, args=(x, y, flag))
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
        self.window = _Window()
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
                        "preempted", step, severity="WARNING", grace_s=cfg.preemption_grace_s
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


# -- parameter servers ----------------------------------------------------------------------


class PSTrainer(_Base):
    """parameter_server: the chief schedules steps on the workers, asynchronously."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.per_replica = cfg.global_batch_size // self.replicas
        replica_step = _replica_fn(self.model, self.optimizer, cfg, self.ds.task, self.per_replica)
        strategy = self.strategy

        @tf.function
        def worker_step(iterator: Any) -> Any:
            x, y = next(iterator)
            return strategy.reduce(SUM, strategy.run(replica_step, args=(x, y)), axis=None)

        self.worker_step = worker_step

    def run(self) -> int:
        cfg = self.cfg
        start_step = self.restore(self.newest_checkpoint())
        self.log_start(start_step, per_worker_batch=self.per_replica, ps=self.tfc.ps)
        dataset_fn = ps_dataset_fn(cfg, self.ds)
        per_worker = self.coordinator.create_per_worker_dataset(
            lambda: self.strategy.distribute_datasets_from_function(dataset_fn)
        )
        iterator = iter(per_worker)
        watcher = SigtermWatcher(grace_s=cfg.preemption_grace_s).install()
        warm_steps = min(5, max(cfg.steps - start_step - 1, 0))
        timed_start, timed_stall = time.perf_counter(), 0.0
        step = start_step
        self.window = _Window()
        last = None
        try:
            while step < cfg.steps:
                if self.step_delay:
                    time.sleep(self.step_delay)
                if watcher.signalled:
                    self.coordinator.join()
                    self.logger.log(
                        "preempted", step, severity="WARNING", grace_s=cfg.preemption_grace_s
                    )
                    self.save(step, reason="preemption")
                    return PREEMPTED_EXIT_CODE
                if step - start_step == warm_steps:
                    timed_start, timed_stall = time.perf_counter(), self.stall_total
                last = self.coordinator.schedule(self.worker_step, args=(iterator,))
                step += 1
                self.window.steps += 1
                if step % cfg.log_every == 0 or step == cfg.steps:
                    self.log_window(step, float(last.fetch()))
                if step % cfg.checkpoint_every == 0 and step < cfg.steps:
                    self.coordinator.join()
                    self.save(step)
            self.coordinator.join()
            timed = time.perf_counter() - timed_start - (self.stall_total - timed_stall)
            if step > start_step:
                self.save(step, reason="final")
            digest = params_sha256(self.model)
            self.done(step, start_step, (step - start_step - warm_steps, timed), digest)
            return 0
        finally:
            watcher.uninstall()


def _chief_alive(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def serve(cfg: TrainConfig, tfc: TFCluster) -> int:
    """A ps or worker task of parameter_server training: run a TensorFlow server until the
    chief has come and gone (the chief's exit ends the job on Vertex; locally the tasks
    must end on their own)."""
    import signal

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # A scheduled step runs as one function that waits on reads from the parameter servers
    # inside an inter-op thread; with a single such thread nothing else can run and the step
    # never finishes, so servers get at least two.
    threads = cfg.tf_threads and max(cfg.tf_threads, 2)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=tfc.task_type,
        task_index=tfc.task_index,
        protocol=resolver.rpc_layer or "grpc",
        config=tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=cfg.tf_threads, inter_op_parallelism_threads=threads
        ),
        start=True,
    )
    # Nothing to save here: the chief owns the checkpoint.
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(PREEMPTED_EXIT_CODE))
    record = {"event": "server", "role": tfc.task_type, "index": tfc.task_index}
    print(json.dumps({**record, "target": server.target, "severity": "INFO"}), flush=True)
    chief = tfc.chief_address
    assert chief is not None
    deadline = time.monotonic() + CHIEF_START_TIMEOUT_S
    seen, misses = False, 0
    while True:
        if _chief_alive(chief):
            seen, misses = True, 0
        elif seen:
            misses += 1
            if misses >= CHIEF_GONE_CHECKS:
                break
        elif time.monotonic() > deadline:
            print(
                f"trainstack trainer: the chief at {chief} did not start within "
                f"{CHIEF_START_TIMEOUT_S:.0f}s",
                flush=True,
            )
            return 1
        time.sleep(CHIEF_POLL_S)
    print(json.dumps({**record, "event": "idle", "reason": "chief exited"}), flush=True)
    return 0


# -- entry ----------------------------------------------------------------------------------


class _TFScalarWriter:
    """TensorBoard scalars through tf.summary (MetricsLogger's ScalarWriter)."""

    def __init__(self, directory: str) -> None:
        self._writer = tf.summary.create_file_writer(directory)

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        with self._writer.as_default(step=global_step):
            tf.summary.scalar(tag, scalar_value)

    def close(self) -> None:
        self._writer.close()


def run(cfg: TrainConfig, info: ClusterInfo, tfc: TFCluster) -> int:
    """Train (or serve, for parameter-server tasks); returns the process exit code."""
    import sys

    configure(cfg)
    if cfg.strategy == "parameter_server" and tfc.task_type in ("ps", "worker"):
        return serve(cfg, tfc)
    try:
        strategy = make_strategy(cfg)
    except TPUUnavailableError as e:
        print(f"trainstack trainer: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    if cfg.strategy == "parameter_server":
        if cfg.dataset == "files":
            print(
                "trainstack trainer: parameter_server ships the training arrays to the "
                "workers inside the dataset graph; use dataset 'synthetic' or 'digits'",
                file=sys.stderr,
            )
            return CONFIG_ERROR_EXIT_CODE
        ds = load(cfg, pipeline=0, pipelines=1)
    else:
        ds = load(cfg, pipeline=info.rank, pipelines=max(tfc.workers, 1))
    logger = MetricsLogger(
        rank=info.rank,
        node=info.node_rank,
        worker=info.local_rank,
        run_name=cfg.run_name,
        total_steps=cfg.steps,
        tensorboard_dir=cfg.tensorboard_dir or os.environ.get("AIP_TENSORBOARD_LOG_DIR"),
        scalar_writer=_TFScalarWriter,
    )
    try:
        trainer: SyncTrainer | PSTrainer
        try:
            if cfg.strategy == "parameter_server":
                ps_device = "/job:chief/replica:0/task:0/device:CPU:0"
                trainer = PSTrainer(cfg, info, tfc, strategy, logger, ds, ps_device)
            else:
                io_device = "/job:localhost" if cfg.strategy == "tpu" else None
                trainer = SyncTrainer(cfg, info, tfc, strategy, logger, ds, io_device)
        except ValueError as e:  # model/batch shape checks on the config
            raise SetupError(str(e)) from None
        return trainer.run()
    except SetupError as e:
        print(f"trainstack trainer: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    except tf.errors.UnavailableError as e:
        # A peer task died (VM lost, process killed): the job must restart, and every task
        # then resumes from the newest complete checkpoint.
        first = str(e).strip().splitlines()[0] if str(e).strip() else "unavailable"
        print(
            f"trainstack trainer: a peer task is gone ({first}); restart the job to resume "
            "from the newest checkpoint",
            file=sys.stderr,
        )
        return PEER_LOST_EXIT_CODE
    finally:
        logger.close()

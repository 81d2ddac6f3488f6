"""Strategy 'parameter_server': the chief schedules steps on the workers through a
ClusterCoordinator, asynchronously; ps and worker tasks run a TensorFlow server (`serve`).

The chief decides when to stop and save: on SIGTERM it waits for the scheduled steps, saves
and exits 143. Variables live on the parameter servers, so checkpoint file I/O is pinned to
the chief (`IO_DEVICE`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from typing import Any

import tensorflow as tf

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import (
    EVENT_IDLE,
    EVENT_PREEMPTED,
    EVENT_SERVER,
    FIELD_EVENT,
    FIELD_SEVERITY,
)
from trainstack.trainers.common.exit_codes import PREEMPTED_EXIT_CODE
from trainstack.trainers.common.records import LogWindow
from trainstack.trainers.common.signals import SigtermWatcher
from trainstack.trainers.tf_multiworker.cluster import TFCluster
from trainstack.trainers.tf_multiworker.data import ps_dataset_fn
from trainstack.trainers.tf_multiworker.loop import SUM, TrainerBase, params_sha256, replica_fn

CHIEF_GONE_CHECKS = 3
"""Failed connection attempts, `CHIEF_POLL_S` apart, after which a parameter-server task
decides that the chief has exited."""
CHIEF_POLL_S = 0.5
CHIEF_START_TIMEOUT_S = 600.0
IO_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"
"""Where the chief writes checkpoint files from (the variables live on the ps tasks)."""


def ps_strategy() -> tf.distribute.Strategy:
    """ParameterServerStrategy over TF_CONFIG's cluster (already in the environment)."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver,
        # Large variables (embeddings) are split over the parameter servers.
        variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=ps
        ),
    )


class PSTrainer(TrainerBase):
    """parameter_server: the chief schedules steps on the workers, asynchronously."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.per_replica = cfg.global_batch_size // self.replicas
        replica_step = replica_fn(self.model, self.optimizer, cfg, self.ds.task, self.per_replica)
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
        self.window = LogWindow()
        last = None
        try:
            while step < cfg.steps:
                if self.step_delay:
                    time.sleep(self.step_delay)
                if watcher.signalled:
                    self.coordinator.join()
                    self.logger.log(
                        EVENT_PREEMPTED, step, severity="WARNING", grace_s=cfg.preemption_grace_s
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
    record = {FIELD_EVENT: EVENT_SERVER, "role": tfc.task_type, "index": tfc.task_index}
    print(json.dumps({**record, "target": server.target, FIELD_SEVERITY: "INFO"}), flush=True)
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
    print(json.dumps({**record, FIELD_EVENT: EVENT_IDLE, "reason": "chief exited"}), flush=True)
    return 0

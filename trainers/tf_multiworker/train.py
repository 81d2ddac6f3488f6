"""The bundled TensorFlow trainer: Mirrored, MultiWorkerMirrored, TPU and ParameterServer.

Launch shapes (the cluster comes from the environment, see `trainstack.trainers.tf_multiworker.cluster`):

    python -m trainstack.trainers.tf_multiworker --strategy=mirrored --model=cnn --dataset=digits
    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {...}}' \\
        python -m trainstack.trainers.tf_multiworker --framework=tensorflow --strategy=multi_worker_mirrored
    python -m trainstack.trainers.tf_multiworker --config run.yaml    # on TPU VM worker 0, strategy tpu

`trainstack.trainers.tf_multiworker.launch` decides everything that needs no TensorFlow, sets the
environment and only then imports this module, whose `run` configures TensorFlow, makes the
strategy and hands over to the strategy's loop: synchronous strategies (mirrored,
multi_worker_mirrored, tpu) in `trainstack.trainers.tf_multiworker.sync` (TPU system setup in
`.tpu`), parameter_server in `trainstack.trainers.tf_multiworker.parameter_server`, both on the
shared Keras loop of `trainstack.trainers.tf_multiworker.loop`.

Contract shared with the torch trainer: JSON log lines (`trainstack.trainers.common.metrics`),
TensorBoard scalars from the chief, checkpoints in step directories on a local path or gs://
(`trainstack.trainers.tf_multiworker.checkpoint`), SIGTERM -> checkpoint -> exit 143, and a final
`{"event": "done", "step": N, "params_sha256": ...}` from the chief.

Exit codes (`trainstack.trainers.common.exit_codes`): 0 done; 1 a peer task was lost (restart the job:
it resumes from the newest checkpoint); 2 invalid config, cluster environment or checkpoint
(including strategy 'tpu' without a TPU); 143 preempted after saving a checkpoint; anything
else is a crash.

Test hook: `TRAINSTACK_TEST_STEP_DELAY_S` sleeps that long each step, so tests can signal a
run at a chosen step.
"""

from __future__ import annotations

import os
import sys

import tensorflow as tf

from trainstack.trainers.common.cluster import ClusterInfo
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import TF_CPU_REPLICAS_ENV
from trainstack.trainers.common.exit_codes import CONFIG_ERROR_EXIT_CODE, PEER_LOST_EXIT_CODE
from trainstack.trainers.common.metrics import MetricsLogger
from trainstack.trainers.common.tokens import is_token_layout
from trainstack.trainers.tf_multiworker import parameter_server, tpu
from trainstack.trainers.tf_multiworker.cluster import TFCluster, simulated_tpu_chips, tpu_target
from trainstack.trainers.tf_multiworker.data import load
from trainstack.trainers.tf_multiworker.loop import SetupError, keras
from trainstack.trainers.tf_multiworker.metrics import TFScalarWriter
from trainstack.trainers.tf_multiworker.parameter_server import PSTrainer, ps_strategy, serve
from trainstack.trainers.tf_multiworker.sync import (
    SyncTrainer,
    mirrored_strategy,
    multi_worker_mirrored_strategy,
)
from trainstack.trainers.tf_multiworker.tpu import (
    TPUUnavailableError,
    simulated_tpu_strategy,
    tpu_strategy,
)


def configure(cfg: TrainConfig) -> None:
    """Process-wide settings; must run before TensorFlow initializes its runtime."""
    if cfg.tf_threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(cfg.tf_threads)
    if cfg.strategy == "tpu":
        replicas = simulated_tpu_chips(os.environ) or 0  # simulated chips are CPU devices
    elif cfg.strategy == "mirrored" and not tf.config.list_physical_devices("GPU"):
        replicas = int(os.environ.get(TF_CPU_REPLICAS_ENV, "0") or 0)
    else:
        replicas = 0
    if replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
        )
    # Same initial parameters for every world size; the data order is seeded separately.
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic and cfg.strategy != "parameter_server":
        tf.config.experimental.enable_op_determinism()


def make_strategy(cfg: TrainConfig, reduction_server: bool = False) -> tf.distribute.Strategy:
    """The configured strategy; TF_CONFIG is already in the environment (launch.py)."""
    if cfg.strategy == "mirrored":
        return mirrored_strategy()
    if cfg.strategy == "multi_worker_mirrored":
        return multi_worker_mirrored_strategy(reduction_server)
    if cfg.strategy == "tpu":
        chips = simulated_tpu_chips(os.environ)
        if chips is not None:
            return simulated_tpu_strategy(chips)
        return tpu_strategy(tpu_target(os.environ))
    return ps_strategy()


def run(cfg: TrainConfig, info: ClusterInfo, tfc: TFCluster) -> int:
    """Train (or serve, for parameter-server tasks); returns the process exit code."""
    configure(cfg)
    if cfg.strategy == "parameter_server" and tfc.task_type in ("ps", "worker"):
        return serve(cfg, tfc)
    if cfg.dataset == "files" and cfg.data_path and is_token_layout(cfg.data_path):
        print(
            f"trainstack trainer: data_path: {cfg.data_path} holds token shards (.bin), which "
            "the torch trainer reads; valid: framework torch, or .npz shards for tensorflow",
            file=sys.stderr,
        )
        return CONFIG_ERROR_EXIT_CODE
    try:
        strategy = make_strategy(cfg, tfc.reduction_server)
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
        scalar_writer=TFScalarWriter,
    )
    try:
        trainer: SyncTrainer | PSTrainer
        try:
            if cfg.strategy == "parameter_server":
                trainer = PSTrainer(
                    cfg, info, tfc, strategy, logger, ds, parameter_server.IO_DEVICE
                )
            else:
                io_device = tpu.IO_DEVICE if cfg.strategy == "tpu" else None
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

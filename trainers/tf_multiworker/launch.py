"""Everything the TensorFlow trainer decides before importing TensorFlow.

`main` reads the config and the cluster, rejects a strategy the cluster cannot run, sends
tasks with nothing to do home, and sets the environment TensorFlow reads at import or at
strategy creation (`TF_CONFIG`, oneDNN, gRPC fail-fast); only then does it import
TensorFlow, check that `tf.keras` is the Keras 2 the trainer needs (`keras_setup`: a missing
or mismatched tf-keras on TF >= 2.16 exits 2 with the pin to install) and import
`trainstack.trainers.tf_multiworker.train`.

Roles per strategy:
- mirrored: one process on one machine, every local GPU (or `TRAINSTACK_TF_CPU_REPLICAS`
  logical CPU devices, which `trainstack local-run` sets; `contract.TF_CPU_REPLICAS_ENV`) as
  a replica.
- multi_worker_mirrored: every chief/worker task trains; ps and evaluator tasks exit 0.
- parameter_server: the chief coordinates and writes checkpoints, ps and worker tasks run a
  TensorFlow server until the chief is gone, evaluators exit 0.
- tpu: the process on TPU worker 0 (or the only host) drives the slice through
  TPUClusterResolver; the trainer on other TPU VM workers exits 0 (the `-pod` runtime serves
  those hosts). With `TRAINSTACK_SIMULATED_ACCELERATORS=N` (tests on CPU) the same loop runs
  over N logical CPU devices instead.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from trainstack.trainers.common.cli import load_config
from trainstack.trainers.common.cluster import ClusterInfo, resolve_cluster
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import EVENT_IDLE, FIELD_EVENT, FIELD_SEVERITY, TF_MODULE
from trainstack.trainers.common.exit_codes import CONFIG_ERROR_EXIT_CODE
from trainstack.trainers.tf_multiworker.cluster import (
    TFCluster,
    simulated_tpu_chips,
    tf_cluster,
    tpu_target,
)
from trainstack.trainers.tf_multiworker.keras_setup import KerasSetupError, load_keras


def check_topology(cfg: TrainConfig, tfc: TFCluster, info: ClusterInfo) -> None:
    """Raise ValueError when the cluster cannot run `cfg.strategy`, naming what it needs."""
    if cfg.strategy == "mirrored" and tfc.workers > 1:
        raise ValueError(
            f"strategy 'mirrored' runs on one machine but the cluster has {tfc.workers} "
            "workers; use 'multi_worker_mirrored' for several machines"
        )
    if cfg.strategy == "multi_worker_mirrored" and tfc.ps:
        raise ValueError(
            f"the cluster has {tfc.ps} ps task(s), which multi_worker_mirrored does not use; "
            "use 'parameter_server' or drop the ps pool"
        )
    if cfg.strategy == "parameter_server":
        spec = (tfc.tf_config or {}).get("cluster", {})
        missing = [k for k in ("chief", "ps", "worker") if not spec.get(k)]
        if missing:
            raise ValueError(
                "strategy 'parameter_server' needs a TF_CONFIG cluster with chief, ps and "
                f"worker tasks; missing: {', '.join(missing)}"
            )
    if cfg.strategy == "tpu" and info.platform not in ("tpu_vm", "local_single"):
        raise ValueError(
            f"strategy 'tpu' runs on a Cloud TPU VM (TPU_WORKER_ID set), not on {info.platform}"
        )


def _idle(tfc: TFCluster, reason: str) -> int:
    record = {
        FIELD_EVENT: EVENT_IDLE,
        "role": tfc.task_type,
        "index": tfc.task_index,
        "reason": reason,
        FIELD_SEVERITY: "INFO",
    }
    print(json.dumps(record), flush=True)
    return 0


def prepare_environment(cfg: TrainConfig, tfc: TFCluster) -> None:
    """Set what TensorFlow reads at import time or when the strategy is created."""
    if tfc.tf_config is not None and cfg.strategy != "tpu":
        os.environ["TF_CONFIG"] = json.dumps(tfc.tf_config)
    else:
        # A TF_CONFIG left over from an enclosing launcher would turn mirrored multi-worker.
        os.environ.pop("TF_CONFIG", None)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if cfg.deterministic:
        # oneDNN's CPU kernels pick blockings by shape and thread count; the reference
        # kernels give the same bits on every run.
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    if (
        cfg.strategy == "tpu"
        and simulated_tpu_chips(os.environ) is None
        and tpu_target(os.environ) != "local"
    ):
        # Multi-host slice: the runtime's servers own the chips, this process only drives
        # them (see cluster.TPU_POD_FROM_WORKER0_VERIFIED).
        os.environ.setdefault("TPU_LOAD_LIBRARY", "0")
    if cfg.strategy == "parameter_server":
        # TensorFlow's parameter-server guide: report unreachable tasks at once, so the
        # coordinator reschedules a lost worker's steps instead of waiting.
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")


def main(argv: Sequence[str]) -> int:
    try:
        cfg = load_config(argv)
        if cfg.framework != "tensorflow":
            raise ValueError(
                f"trainer.framework is {cfg.framework!r}; {TF_MODULE} runs 'tensorflow' only"
            )
        info = resolve_cluster()
        tfc = tf_cluster(os.environ, info)
        check_topology(cfg, tfc, info)
        if cfg.strategy == "tpu":
            simulated_tpu_chips(os.environ)
    except ValueError as e:
        print(f"trainstack trainer: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    if tfc.task_type == "evaluator":
        return _idle(tfc, "evaluator tasks are not used by the bundled trainer")
    if cfg.strategy == "multi_worker_mirrored" and tfc.task_type not in ("chief", "worker"):
        return _idle(tfc, f"{tfc.task_type} tasks have no part in multi_worker_mirrored")
    if cfg.strategy == "tpu" and info.rank != 0:
        return _idle(tfc, "TPU worker 0 drives the slice")
    prepare_environment(cfg, tfc)
    try:
        load_keras()
    except KerasSetupError as e:
        print(f"trainstack trainer: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    from trainstack.trainers.tf_multiworker.train import run

    return run(cfg, info, tfc)
